"""A run as a Prometheus textfile, for node_exporter's textfile collector (files named ``*.prom``).

Drawn from the run's report document (:func:`tuning.reports.json_report.build`) into a
``CollectorRegistry`` of gauges and written with prometheus-client's ``write_to_textfile``
(a temporary file and a rename: the collector never reads half a file). Names follow the
Prometheus naming conventions: the ``fabtune_`` prefix, base units with the unit as suffix
(seconds; bandwidth in bytes per second, as Prometheus writes bits as bytes), no ``_total`` (each
value describes the last run, not a count that grows). Every run series carries ``inventory`` and
``mode``; the run id is only on ``fabtune_run_info`` (a new id per run would be a new series).

Metrics (gauges)::

    fabtune_run_info{run_id,command,mode,inventory,outcome,generator}   1
    fabtune_run_outcome{mode,inventory,outcome}        1 for the run's outcome, 0 for every other
    fabtune_run_exit_code{mode,inventory}              the exit code (docs/reports.md)
    fabtune_run_changes{mode,inventory}                setting changes planned or made
    fabtune_run_duration_seconds{mode,inventory}       wall time of the run
    fabtune_run_end_timestamp_seconds{mode,inventory}  when it ended (Unix time)
    fabtune_run_devices{mode,inventory,outcome}        devices per outcome (unreachable apart from failed)
    fabtune_run_pairs{mode,inventory,outcome}          judged RoCE pairs per outcome (pass, fail, error)
    fabtune_run_ib_checks{mode,inventory,outcome}      InfiniBand checks per outcome (pass, fail, error)
    fabtune_pair_passed{inventory,pair,path,client_nic,server_nic}                  1 pass, 0 fail or error
    fabtune_pair_bandwidth_bytes_per_second{...}      ib_write_bw peak (measured Gb/s x 1e9 / 8)
    fabtune_pair_latency_seconds{...}                 ib_read_lat typical latency (us x 1e-6)
    fabtune_pair_latency_p99_seconds{...}             ib_read_lat 99th percentile (us x 1e-6)

    fabtune_ib_check_passed{inventory,pair,check}      1 pass, 0 fail or did not run (``pair``: ``ib tenant1 0x0001 pkeys``)

    fabtune_incast_passed{inventory,incast,leaf,receiver}                          1 pass, 0 fail or not run
    fabtune_incast_share_min_ratio{...}               slowest sender / its fair share (line rate / k)
    fabtune_incast_throughput_bytes_per_second{...}   the senders' total (Gb/s x 1e9 / 8)
    fabtune_incast_counter_delta{inventory,incast,leaf,receiver,end,counter}      rise over the incast

Both per-outcome counts are the report summary's (``pairs_passed``, ``ib_checks_failed``...:
:func:`tuning.reports.json_report.build`, which counts an IB check apart from the RoCE pairs), as
JUnit's suites read them: one count, never a second one here. A pair whose test did not run has ``fabtune_pair_passed 0`` and no bandwidth or latency sample;
an incast that did not run has ``fabtune_incast_passed 0`` and no other sample.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from tuning.outfile import write_atomic

PAIR_LABELS = ("inventory", "pair", "path", "client_nic", "server_nic")
IB_LABELS = ("inventory", "pair", "check")
#: a row outcome -> the suffix of its count in the report's summary (``pairs_passed``)
SUMMARY_SUFFIX = {"pass": "passed", "fail": "failed", "error": "errored"}
INCAST_LABELS = ("inventory", "incast", "leaf", "receiver")


def _epoch(iso: str | None) -> float | None:
    """Unix seconds of an ISO 8601 UTC time as the report writes it (``...Z``)."""
    return None if not iso else datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def registry(doc: dict):
    """A ``CollectorRegistry`` holding the metrics of one report document (see the module docstring)."""
    from prometheus_client import CollectorRegistry, Gauge

    from tuning.reports.json_report import DEVICE_OUTCOMES, PAIR_OUTCOMES, RUN_OUTCOMES

    reg = CollectorRegistry()
    run = {"mode": doc["mode"], "inventory": doc.get("inventory") or ""}

    def gauge(name: str, help_: str, labels: tuple[str, ...] = ("mode", "inventory"), unit: str = "") -> Gauge:
        return Gauge(name, help_, labels, registry=reg, unit=unit)

    gauge("fabtune_run_info", "The last run: id, command, mode, inventory, outcome, fabtune version",
          ("run_id", "command", "mode", "inventory", "outcome", "generator")).labels(
        run_id=doc.get("run_id") or "", command=doc["command"], outcome=doc["outcome"],
        generator=doc["generator"], **run).set(1)
    outcome = gauge("fabtune_run_outcome", "1 for the last run's outcome, 0 for the others",
                    ("mode", "inventory", "outcome"))
    for o in RUN_OUTCOMES:
        outcome.labels(outcome=o, **run).set(1 if o == doc["outcome"] else 0)
    gauge("fabtune_run_exit_code", "Exit code of the last run (docs/reports.md)").labels(**run).set(doc["exit_code"])
    gauge("fabtune_run_changes", "Setting changes the last run planned or made").labels(**run).set(doc["n_changes"])
    gauge("fabtune_run_duration_seconds", "Wall time of the last run", unit="seconds").labels(**run).set(
        doc.get("seconds") or 0.0)
    end = _epoch(doc.get("finished"))
    if end is not None:
        gauge("fabtune_run_end_timestamp_seconds", "When the last run ended, Unix time",
              unit="seconds").labels(**run).set(end)
    devices = gauge("fabtune_run_devices", "Devices of the last run per outcome", ("mode", "inventory", "outcome"))
    for o in DEVICE_OUTCOMES:
        devices.labels(outcome=o, **run).set(doc["summary"][o])
    for rows, help_ in (("pairs", "Judged RoCE verification pairs"), ("ib_checks", "InfiniBand checks")):
        counts = gauge(f"fabtune_run_{rows}", f"{help_} of the last run per outcome", ("mode", "inventory", "outcome"))
        for o in PAIR_OUTCOMES:
            counts.labels(outcome=o, **run).set(doc["summary"][f"{rows}_{SUMMARY_SUFFIX[o]}"])
    _pair_metrics(doc, gauge)
    _ib_metrics(doc, gauge)
    _incast_metrics(doc, gauge)
    return reg


def _pair_metrics(doc: dict, gauge) -> None:
    """Per judged pair: passed, bandwidth (bytes/s), typical and p99 latency (s); values the
    test gave only."""
    passed = gauge("fabtune_pair_passed", "1 when the pair passed, 0 when it failed or its test did not run",
                   PAIR_LABELS)
    bw = gauge("fabtune_pair_bandwidth_bytes_per_second", "ib_write_bw peak bandwidth of the pair",
               PAIR_LABELS, unit="bytes_per_second")
    lat = gauge("fabtune_pair_latency_seconds", "ib_read_lat typical latency of the pair", PAIR_LABELS,
                unit="seconds")
    p99 = gauge("fabtune_pair_latency_p99_seconds", "ib_read_lat 99th percentile latency of the pair",
                PAIR_LABELS, unit="seconds")
    for p in doc["pairs"]:
        labels = {"inventory": doc.get("inventory") or "", "pair": p["pair"], "path": p.get("path") or "",
                  "client_nic": p.get("client_nic") or "", "server_nic": p.get("server_nic") or ""}
        passed.labels(**labels).set(1 if p["outcome"] == "pass" else 0)
        if p.get("bw_gbps") is not None:
            bw.labels(**labels).set(p["bw_gbps"] * 1e9 / 8)
        if p.get("lat_us") is not None:
            lat.labels(**labels).set(p["lat_us"] * 1e-6)
        if p.get("lat_p99_us") is not None:
            p99.labels(**labels).set(p["lat_p99_us"] * 1e-6)


def _ib_metrics(doc: dict, gauge) -> None:
    """Per InfiniBand check (``doc["ib_checks"]``): 1 when it passed, 0 when it failed or ran nothing."""
    rows = doc.get("ib_checks") or []
    if not rows:
        return
    passed = gauge("fabtune_ib_check_passed", "1 when the InfiniBand check passed, 0 when it failed or did not run",
                   IB_LABELS)
    for r in rows:
        passed.labels(inventory=doc.get("inventory") or "", pair=r["pair"], check=r["check"]).set(
            1 if r["outcome"] == "pass" else 0)


def _incast_metrics(doc: dict, gauge) -> None:
    """Per incast: passed, share_min, total throughput (bytes/s) and every counter rise, per end."""
    rows = doc.get("incast") or []
    if not rows:
        return
    passed = gauge("fabtune_incast_passed", "1 when the incast passed, 0 when it failed or did not run", INCAST_LABELS)
    share = gauge("fabtune_incast_share_min_ratio", "Slowest sender's bandwidth over its fair share (line rate / k)",
                  INCAST_LABELS, unit="ratio")
    total = gauge("fabtune_incast_throughput_bytes_per_second", "The incast senders' bandwidth summed",
                  INCAST_LABELS, unit="bytes_per_second")
    delta = gauge("fabtune_incast_counter_delta", "Rise of an ethtool -S or RDMA hw_counters counter over the incast",
                  (*INCAST_LABELS, "end", "counter"))
    for r in rows:
        labels = {"inventory": doc.get("inventory") or "", "incast": r["incast"], "leaf": r["leaf"],
                  "receiver": r["receiver"]}
        passed.labels(**labels).set(1 if r.get("verdict") == "pass" else 0)
        if r.get("share_min") is not None:
            share.labels(**labels).set(r["share_min"])
        if r.get("total_gbps") is not None:
            total.labels(**labels).set(r["total_gbps"] * 1e9 / 8)
        for end, counters in (r.get("counters") or {}).items():
            for name, value in counters.items():
                delta.labels(end=end, counter=name, **labels).set(value)


def write(doc: dict, path: Path) -> None:
    """Write the metrics of ``doc`` to ``path`` (``*.prom``): prometheus-client's text exposition
    (``generate_latest``, what ``write_to_textfile`` writes), put in place by
    :func:`tuning.outfile.write_atomic` (never through a link or onto a special file).

    Raises:
        OSError: the file could not be written, or ``path`` is refused.
    """
    from prometheus_client import generate_latest

    write_atomic(path, generate_latest(registry(doc)))
