"""The burn-in as a Prometheus textfile, for node_exporter's textfile collector (``*.prom``).

Same conventions as :mod:`tuning.reports.prometheus` (prometheus-client ``CollectorRegistry`` of
gauges, ``write_to_textfile``: a temporary file and a rename; the ``fabtune_`` prefix, base
units, no ``_total``; the run id only on the info metric). Metrics (gauges)::

    fabtune_burnin_info{run_id,kind,inventory}                          1
    fabtune_burnin_rounds{kind,inventory}                               rounds run
    fabtune_burnin_duration_seconds{kind,inventory}                     wall time of the run
    fabtune_burnin_end_timestamp_seconds{kind,inventory}                started + seconds (Unix time)
    fabtune_burnin_findings{kind,inventory,finding_kind}                findings per kind (node, link, switch, harness)
    fabtune_burnin_finding{inventory,code,finding_kind,target}          1 per finding
    fabtune_burnin_node_healthy{inventory,node}                         1 no finding names the node, else 0
    fabtune_burnin_drain{inventory,node,adapter,result}                 1 per node the drain named: result
                                                                        drained | dry-run | over-cap | failed
    fabtune_burnin_pair_bandwidth_bytes_per_second{inventory,client_nic,server_nic}  median over rounds
    fabtune_burnin_pair_line_share_ratio{inventory,client_nic,server_nic}            median bandwidth / line rate
    fabtune_burnin_pair_slow{inventory,client_nic,server_nic}           1 slow in half the rounds or more

A pair whose tests gave no value has ``pair_slow 1`` and no bandwidth or share sample.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from tuning.burnin.localise import fabric_graph, pair_stats
from tuning.outfile import write_atomic

PAIR_LABELS = ("inventory", "client_nic", "server_nic")
FINDING_KINDS = ("node", "link", "switch", "harness")


def registry(doc: dict, findings: list[dict]):
    """A ``CollectorRegistry`` with the metrics of one burn-in (module docstring)."""
    from prometheus_client import CollectorRegistry, Gauge

    reg = CollectorRegistry()
    inv = doc.get("inventory") or ""
    run = {"kind": doc.get("kind") or "burnin", "inventory": inv}

    def gauge(name: str, help_: str, labels: tuple[str, ...] = ("kind", "inventory"), unit: str = "") -> Gauge:
        return Gauge(name, help_, labels, registry=reg, unit=unit)

    gauge("fabtune_burnin_info", "The last burn-in: id, kind, inventory", ("run_id", "kind", "inventory")).labels(
        run_id=doc.get("run_id") or "", **run).set(1)
    gauge("fabtune_burnin_rounds", "Rounds the last burn-in ran").labels(**run).set(len(doc.get("rounds", [])))
    gauge("fabtune_burnin_duration_seconds", "Wall time of the last burn-in", unit="seconds").labels(**run).set(
        doc.get("seconds") or 0.0)
    if doc.get("started"):
        gauge("fabtune_burnin_end_timestamp_seconds", "When the last burn-in ended, Unix time",
              unit="seconds").labels(**run).set(doc["started"] + (doc.get("seconds") or 0.0))
    per_kind = gauge("fabtune_burnin_findings", "Findings of the last burn-in per kind",
                     ("kind", "inventory", "finding_kind"))
    for k in FINDING_KINDS:
        per_kind.labels(finding_kind=k, **run).set(sum(1 for f in findings if f["kind"] == k))
    one = gauge("fabtune_burnin_finding", "1 per finding of the last burn-in",
                ("inventory", "code", "finding_kind", "target"))
    for f in findings:
        one.labels(inventory=inv, code=f["code"], finding_kind=f["kind"], target=f["target"]).set(1)
    named = {f["target"].split("<->")[0].split(":")[0] for f in findings if f["kind"] in ("node", "link")}
    healthy = gauge("fabtune_burnin_node_healthy", "1 when no finding of the last burn-in names the node",
                    ("inventory", "node"))
    for node in sorted(doc["topology"].get("nodes", {})):
        healthy.labels(inventory=inv, node=node).set(0 if node in named else 1)
    _drain(doc.get("drain"), gauge, inv)
    _pairs(doc, gauge, inv)
    return reg


def _drain(d: dict | None, gauge, inv: str) -> None:
    """One sample per node the drain named (``tuning.burnin.drain.drain``'s dict; none without
    ``--drain-adapter``): ``drained`` (or ``dry-run``: it would have been), ``over-cap``, ``failed``."""
    g = gauge("fabtune_burnin_drain", "1 per node the last burn-in's drain named, by result",
              ("inventory", "node", "adapter", "result"))
    if not d:
        return
    rows = [(n, "dry-run" if d.get("dry_run") else "drained") for n in d.get("drained") or []]
    rows += [(n, "over-cap") for n in d.get("over_cap") or []] + [(n, "failed") for n in d.get("failed") or {}]
    for node, result in rows:
        g.labels(inventory=inv, node=node, adapter=d.get("adapter") or "", result=result).set(1)


def _pairs(doc: dict, gauge, inv: str) -> None:
    """Per pair: median bandwidth (bytes/s), median share of line rate, slow."""
    bw = gauge("fabtune_burnin_pair_bandwidth_bytes_per_second", "ib_write_bw bandwidth of the pair, median of rounds",
               PAIR_LABELS, unit="bytes_per_second")
    share = gauge("fabtune_burnin_pair_line_share_ratio", "Pair bandwidth over its line rate, median of rounds",
                  PAIR_LABELS, unit="ratio")
    slow = gauge("fabtune_burnin_pair_slow", "1 when the pair was slow in half the rounds or more", PAIR_LABELS)
    for (a, b), st in sorted(pair_stats(doc, fabric_graph(doc["topology"])).items()):
        labels = {"inventory": inv, "client_nic": a, "server_nic": b}
        slow.labels(**labels).set(1 if st["slow"] else 0)
        if vals := [v for v in st["bw_gbps"] if v]:
            bw.labels(**labels).set(statistics.median(vals) * 1e9 / 8)
        if vals := [v for v in st["share_line"] if v is not None]:
            share.labels(**labels).set(statistics.median(vals))


def write(doc: dict, findings: list[dict], path: Path) -> None:
    """Write the metrics of ``doc`` and ``findings`` to ``path`` (``*.prom``) with ``write_to_textfile``.

    Raises:
        OSError: the file could not be written.
    """
    from prometheus_client import generate_latest

    write_atomic(path, generate_latest(registry(doc, findings)))  # never through a link or onto a device
