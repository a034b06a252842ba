"""``fabtune burnin``: repeated all-pairs RDMA rounds with NIC / PCIe / GPU health between them, then
localisation, drain and reports (issue 10; the document is docs/burnin.md's).

A round (:func:`one_round`): every pair of nodes on every selected rail, scheduled by the circle
method (:func:`tuning.verify.pairs.round_robin`, each NIC once per wave) and measured by the
verification runner (:func:`tuning.verify.runner.verify`: ``ib_write_bw`` bandwidth, ``ib_read_lat``
latency, the same parser as the real samples); then, where ``all_reduce_perf`` (nccl-tests) is on a
node's PATH, one single-node ``all_reduce_perf -b 8388608 -e 134217728 -f 2 -g <GPUs>`` per node
(NVLink and GPU health), launched as verification launches its jobs (:mod:`tuning.verify.nccl`: the
node's NCCL environment; parsed by :func:`tuning.parsers.nccl.parse_nccl`); then every node is read once
(:mod:`tuning.burnin.collect`) and the counters are taken as deltas against the previous read (a
baseline read precedes round 0). Rounds repeat until ``iterations`` are done or ``duration_s`` has
passed (at least one round), in a ``duration_s`` run never sooner than :data:`MIN_ROUND_S` apart; a round that tested
nothing (no pair gave a value, no node was read: every node unreachable) ends the run at once, with
``stopped`` saying so (the check failed: exit 4, as an unreachable node). At the end
:mod:`tuning.burnin.localise` names the findings, :mod:`tuning.burnin.drain` drains (dry run unless
asked) and the reports are written.
"""

from __future__ import annotations

import math
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from tuning.burnin.collect import deltas, ib_round, read_nodes
from tuning.burnin.ib_read import IbWindow
from tuning.burnin.report_files import write_reports
from tuning.errors import ConnectError, InputError, TuningError
from tuning.verify.pairs import round_robin, with_mtu_allowed
from tuning.verify.runner import Thresholds, verify

Progress = Callable[[str], None]
#: all_reduce_perf's sizes (bytes): 8 MiB..128 MiB, x2 per step
NCCL_SIZES = (8 * 2**20, 128 * 2**20)
#: the shortest time between the starts of two rounds (s): a round that ends sooner (one node
#: reachable, no pairs) waits out the rest, so no run spins through near-empty rounds
MIN_ROUND_S = 5.0


@dataclass
class BurninOptions:
    """What a burn-in runs and writes.

    Attributes:
        iterations: rounds to run (None: until ``duration_s``).  duration_s: seconds (None: ``iterations``).
        rails: rails to test (None: every rail the nodes share).  limit: node names (None: every node).
        thresholds: the runner's pass marks (a pair's ``status``; localisation judges on its own).
        html / report_json / prom_file: report files (None: not written).
        drain_adapter: ``slurm`` | ``k8s`` | None (no drain step).  drain: act (False: dry run).
        max_drain: the cap on nodes one run drains.  drain_log: where the dry-run commands go.
        undrain: resume the nodes this run found clean that fabtune drained earlier (their reason
            starts with ``fabtune ``; :func:`tuning.burnin.drain.undrain`); needs ``drain_adapter``,
            dry run unless ``drain``.
        kind: ``burnin`` or ``health`` (one quick round).  timeout_s: per node round trip / perftest client.
        nccl: run ``all_reduce_perf`` where installed.
        ib_recovery_s: with subnet managers in the inventory, the idle seconds after the last round
            before the IB fabric's last read (:mod:`tuning.burnin.ib_judge`: the recovery window; 0: none).
    """

    iterations: int | None = 1
    duration_s: float | None = None
    rails: tuple[int, ...] | None = None
    limit: list[str] | None = None
    thresholds: Thresholds = field(default_factory=lambda: Thresholds(min_bw_gbps=0.0, max_lat_us=1e6))
    html: Path | None = None
    report_json: Path | None = None
    prom_file: Path | None = None
    drain_adapter: str | None = None
    drain: bool = False
    max_drain: int = 1
    drain_log: Path | None = None
    undrain: bool = False
    kind: str = "burnin"
    timeout_s: float = 60.0
    nccl: bool = True
    ib_recovery_s: float = 10.0

    def check(self) -> "BurninOptions":
        """Validate. Raises InputError naming the option and the allowed values."""
        if self.iterations is None and self.duration_s is None:
            raise InputError("--iterations", "", "give --iterations N or --duration (e.g. 2h)")
        if self.iterations is not None and not 1 <= self.iterations <= 100000:
            raise InputError("--iterations", str(self.iterations), "an integer 1..100000")
        if self.duration_s is not None and not (math.isfinite(self.duration_s) and 0 < self.duration_s <= 30 * 86400):
            raise InputError("--duration", str(self.duration_s), "a duration above 0 and at most 30d (e.g. 90m, 2h)")
        if self.drain_adapter not in (None, "slurm", "k8s"):
            raise InputError("--drain-adapter", str(self.drain_adapter), "slurm or k8s")
        if self.max_drain < 0:
            raise InputError("--max-drain", str(self.max_drain), "an integer 0 or more")
        if not (math.isfinite(self.ib_recovery_s) and 0 <= self.ib_recovery_s <= 3600):
            raise InputError("--ib-recovery", str(self.ib_recovery_s), "a duration 0..1h (e.g. 10s, 2m)")
        if self.undrain and not self.drain_adapter:
            raise InputError("--undrain", "", "needs --drain-adapter slurm or k8s (the scheduler to resume nodes in)")
        return self


def _eta(started: float, done: int, opts: BurninOptions) -> str:
    """``ETA 3m20s`` from the mean round so far (duration mode: the time left)."""
    spent = time.monotonic() - started
    left = (opts.duration_s - spent) if opts.duration_s is not None else spent / max(1, done) * (
        (opts.iterations or done) - done)
    left = max(0.0, left)
    return f"ETA {int(left // 60)}m{int(left % 60):02d}s"


def _nccl(devices: list[Any], hosts: dict, timeout_s: float) -> dict[str, dict]:
    """Run ``all_reduce_perf`` on each node that has it, one single-node job each, every node at
    once (a thread each, up to 16), through verification's launch (:func:`tuning.verify.nccl.run_job`:
    the node's NCCL environment, ``-g`` its GPUs per rail): node -> ``{"avg_busbw_gbps", "rows",
    "error"}`` (``error`` one line, None when it gave a value); nodes without it are left out."""
    from concurrent.futures import ThreadPoolExecutor

    from tuning.verify.nccl import run_job

    todo = [d for d in devices if d.name in hosts]

    def one(dev: Any):
        return run_job("all_reduce_perf", [dev], {dev.name: hosts[dev.name]}, NCCL_SIZES, timeout_s,
                       run_timeout_s=600.0)

    out: dict[str, dict] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(todo)))) as ex:
        for dev, job in zip(todo, ex.map(one, todo)):
            if job.error_kind == "tool_missing" and not job.rows:
                continue
            value = job.busbw_gbs is not None and not job.error_kind
            out[dev.name] = {"avg_busbw_gbps": round(job.busbw_gbs * 8, 4) if value else None, "rows": job.rows,
                             "error": job.error}
    return out


def one_round(index: int, t0: float, pairs: list, devices: list[Any], hosts: dict, opts: BurninOptions,
              prev: dict[str, dict], reported: dict[str, set[str]]) -> dict:
    """Run one round (module docstring) and return its document entry; ``prev`` (node -> last
    snapshot) and ``reported`` (node -> XID lines already reported) are updated."""
    results = verify(pairs, hosts, opts.thresholds, timeout_s=opts.timeout_s)[1] if pairs else []
    nccl = _nccl(devices, hosts, opts.timeout_s) if opts.nccl and opts.kind == "burnin" else {}
    snaps = read_nodes(devices, hosts, opts.timeout_s)
    rnd: dict[str, Any] = {"index": index, "t": round(time.time() - t0, 3), "pairs": [asdict(r) for r in results],
                           "nics": {}, "gpus": {}, "errors": {}}
    if nccl:
        rnd["nccl"] = nccl
    intents = {d.name: d.spec.ib_ports for d in devices if getattr(d.spec, "ib_ports", None) is not None}
    for name, snap in snaps.items():
        if isinstance(snap, dict) and name in intents:
            try:  # a port the read could not give is the node not read this round, never a pass
                rnd.setdefault("ib_ports", {})[name] = ib_round(name, snap.get("ib"), intents[name])
            except TuningError as e:
                snap = f"InfiniBand ports: {' '.join(str(e).split())[:280]}"
        if isinstance(snap, str):
            rnd["errors"][name] = snap
            continue
        rnd["nics"][name], rnd["gpus"][name] = deltas(prev.get(name), snap, reported.setdefault(name, set()))
        prev[name] = snap
    return rnd


def open_hosts(devices: list[Any]) -> tuple[dict, dict[str, str]]:
    """SSH sessions to ``devices``: (name -> host, name -> one-line error of the unreachable).
    Raises SetupError when the file-descriptor limit cannot hold a session each
    (:func:`tuning.rollout.fdlimit.ensure_fds`)."""
    from tuning.rollout.fdlimit import ensure_fds
    from tuning.transport.ssh import SshHost

    ensure_fds(len(devices), "node")
    hosts, errors = {}, {}
    for dev in devices:
        try:
            hosts[dev.name] = SshHost(dev.name, dev.connection)
        except ConnectError as e:
            errors[dev.name] = " ".join(str(e).split())[:300]
    return hosts, errors


def run_id() -> str:
    """``burnin-20261130T161500-1a2b3c`` (UTC, 6 random hex digits)."""
    return f"burnin-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"


def _nodes(inv: Any, limit: list[str] | None, rails: tuple[int, ...] | None) -> list[Any]:
    """The nodes to burn in (``--limit``'s, else every node), checked against ``--rail``.

    Raises:
        InputError: no node (and no subnet manager), a ``--limit`` name that is not a node, a
            ``--rail`` no node has.
    """
    from tuning.burnin.ib_read import has_sm
    from tuning.verify.pairs import node_rails

    nodes = list(inv.nodes)
    if not nodes and not has_sm(inv):
        raise InputError("--inventory", str(inv.path), "has no GPU node to test")
    if limit:
        unknown = [n for n in limit if n not in {d.name for d in nodes}]
        if unknown:
            raise InputError("--limit", unknown[0], f"not a node of {inv.path}; nodes: "
                             f"{', '.join(d.name for d in nodes[:8])}{' ...' if len(nodes) > 8 else ''}")
        nodes = [d for d in nodes if d.name in limit]
    have = node_rails(nodes)
    for r in rails or ():
        if r not in have:
            raise InputError("--rail", str(r), f"no selected node has a NIC on rail {r}; rails: "
                             f"{', '.join(map(str, have)) or 'none'}")
    return nodes


def run_burnin(inv: Any, opts: BurninOptions, progress: Progress | None = None) -> dict:
    """Run a burn-in (or one health round) over ``inv``'s nodes and return the document with
    ``findings``, ``drain`` and ``reports`` added (docs/burnin.md).

    Args:
        inv: a :class:`tuning.inventory.Inventory`.  opts: :class:`BurninOptions` (checked here).
        progress: called with one line per step (``round 2/3: 56 pairs ... ETA 1m04s``).

    The inventory's run lock (:class:`tuning.rollout.lock.RunLock`, mode ``opts.kind``) is held
    from before the first SSH session to the end: two runs on one inventory would share the
    perftest ports and each other's traffic (and a rollout's changes), flagging healthy nodes.

    Raises:
        InputError: bad options or ``--limit`` names.
        LockError: another run (burnin, health, rollout...) holds the inventory (exit 2, names it).
    """
    from tuning.burnin.localise import topology_of
    from tuning.rollout.lock import RunLock, lock_path

    opts.check()
    say = progress or (lambda _msg: None)
    devices = _nodes(inv, opts.limit, opts.rails)
    rid = run_id()
    lock = lock_path(inv.path)
    # no journal: a burn-in changes no device, so its stale lock is always safe to take over
    with RunLock(lock, rid, opts.kind, lock.parent / ".fabtune" / "journal" / f"{rid}.json"):
        return _run_locked(inv, opts, say, devices, rid, topology_of(inv))


def _run_locked(inv: Any, opts: BurninOptions, say: Progress, devices: list[Any], rid: str, topology: dict) -> dict:
    """:func:`run_burnin`'s rounds, with the inventory's lock held."""
    from tuning.burnin.localise import MIN_LINE_SHARE, SLOW_RATIO

    started, t0 = time.monotonic(), time.time()
    doc: dict[str, Any] = {"run_id": rid, "inventory": str(inv.path), "started": t0, "seconds": 0.0,
                           "kind": opts.kind, "topology": topology, "rounds": [],
                           "thresholds": {"slow_ratio": SLOW_RATIO, "min_line_share": MIN_LINE_SHARE}}
    hosts, unreachable = open_hosts(devices)
    doc["unreachable"] = unreachable
    ib = IbWindow(inv, doc, opts.ib_recovery_s if opts.kind == "burnin" else 0.0)  # IB via the SMs: baseline
    try:
        reach = [d for d in devices if d.name in hosts]
        pairs = [p for rnd in round_robin(reach, opts.rails) for p in rnd] if len(reach) > 1 else []
        pairs = with_mtu_allowed(pairs, list(inv.nodes), list(inv.switches)) if pairs else []
        say(f"{doc['run_id']}: {len(reach)} node(s), {len(pairs)} pair(s) a round; baseline read")
        prev = {n: s for n, s in read_nodes(reach, hosts, opts.timeout_s).items() if isinstance(s, dict)}
        _rounds(doc, _Fleet(devices, reach, hosts, pairs, unreachable, ib), opts, say, started, prev)
        if not doc.get("stopped"):
            ib.recover(doc, say)
    finally:
        ib.close()
        for h in hosts.values():
            h.close()
    doc["seconds"] = round(time.monotonic() - started, 3)
    return finish(doc, opts, say)


@dataclass
class _Fleet:
    """What the rounds of one run test: the selected nodes, those reached (and their sessions), the
    pairs of a round, the unreachable nodes (name -> one-line reason) and the IB fabric's reads."""

    devices: list[Any]
    reach: list[Any]
    hosts: dict
    pairs: list
    unreachable: dict[str, str]
    ib: Any


def tested(rnd: dict) -> int:
    """How many checks round ``rnd`` ran: pairs that gave a value, nccl runs that gave one, nodes read,
    IB ports read."""
    pairs = sum(1 for p in rnd.get("pairs") or [] if p.get("status") != "error")
    nccl = sum(1 for v in (rnd.get("nccl") or {}).values() if not v.get("error"))
    ib = sum(len(r.get("ports") or {}) for r in (rnd.get("ib") or {}).values())
    return pairs + nccl + ib + len(set(rnd.get("nics") or {}) | set(rnd.get("gpus") or {}))


def nothing_tested(rnd: dict, devices: list[Any]) -> str:
    """The one line of a round that tested nothing: the nodes not reached or read (the first 8, in
    inventory order) and the first reason; the subnet managers whose IB read failed or saw no port."""
    errors = rnd.get("errors") or {}
    names = [d.name for d in devices if d.name in errors] or [d.name for d in devices]
    listed = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    first = next(iter(errors.values()), "")
    ib = [f"{sm} ({r.get('error') or 'no Active cabled port'})" for sm, r in (rnd.get("ib") or {}).items()]
    return (f"round {rnd['index'] + 1} tested nothing, stopped: " + (f"no node could be reached or read: {listed}"
            + (f" ({first})" if first else "") if names else "no node to test")
            + (f"; the IB fabric was not read through {', '.join(ib)}" if ib else ""))


def next_round_wait(done: int, round_started: float, now: float, started: float, opts: BurninOptions,
                    min_round_s: float = MIN_ROUND_S) -> float | None:
    """Seconds to wait before the next round (0: start it now), or None when the run is over.

    Args:
        done: rounds run so far.  round_started: when the last one started.  now: the time now.
        started: when the run started (the three on one clock, :func:`time.monotonic`).
        opts: ``iterations`` / ``duration_s`` end the run.  min_round_s: the shortest time between
            the starts of two rounds (:data:`MIN_ROUND_S`).

    The run is over after ``opts.iterations`` rounds or once ``opts.duration_s`` has passed (so no
    round waits after the last); else, in a run bounded by ``duration_s``, the wait is the rest of
    ``min_round_s`` since ``round_started``, never past the end of ``opts.duration_s``; a run bounded
    by ``iterations`` alone waits 0 (it cannot spin).
    """
    spent = now - started
    if (opts.iterations is not None and done >= opts.iterations) or (
            opts.duration_s is not None and spent >= opts.duration_s):
        return None
    if opts.duration_s is None:
        return 0.0  # a counted run (``--iterations`` alone) cannot spin: its rounds run back to back
    return max(0.0, min(min_round_s - (now - round_started), opts.duration_s - spent))


def _rounds(doc: dict, fleet: _Fleet, opts: BurninOptions, say: Progress, started: float, prev: dict) -> None:
    """Run the rounds into ``doc["rounds"]`` until :func:`next_round_wait` says the run is over, or
    ``doc["stopped"]`` when one tested nothing."""
    reported: dict[str, set[str]] = {}
    total = f"/{opts.iterations}" if opts.iterations else ""
    i = 0
    while True:
        round_started = time.monotonic()
        say(f"round {i + 1}{total}: {len(fleet.pairs)} pair(s), {_eta(started, i, opts) if i else 'ETA after round 1'}")
        rnd = one_round(i, doc["started"], fleet.pairs, fleet.reach, fleet.hosts, opts, prev, reported)
        rnd["errors"].update(fleet.unreachable)
        if fleet.ib.sms:
            rnd["ib"] = fleet.ib.read()
        doc["rounds"].append(rnd)
        i += 1
        if not tested(rnd):
            doc["stopped"] = nothing_tested(rnd, fleet.devices)
            return
        bad = sum(1 for p in rnd["pairs"] if p["status"] != "pass")
        say(f"round {i}{total} done: {bad} pair(s) not passing, {_eta(started, i, opts)}")
        wait = next_round_wait(i, round_started, time.monotonic(), started, opts)
        if wait is None:
            return
        if wait > 0:
            time.sleep(wait)
            if next_round_wait(i, round_started, time.monotonic(), started, opts) is None:
                return


def clean_nodes(doc: dict, findings: list[dict]) -> list[str]:
    """Nodes read in every round of ``doc`` (never unreachable, never an error) that no finding
    names (:func:`tuning.burnin.drain.node_of`: a node finding, or a link finding's NIC end), sorted."""
    from tuning.burnin.drain import node_of

    rounds = doc.get("rounds") or []
    if not rounds:
        return []
    seen = set.intersection(*(set(r.get("nics") or {}) | set(r.get("gpus") or {}) for r in rounds))
    bad = set(doc.get("unreachable") or {}) | {n for r in rounds for n in (r.get("errors") or {})}
    bad |= {node_of(f) for f in findings}
    return sorted(seen - bad)


def finish(doc: dict, opts: BurninOptions, say: Progress) -> dict:
    """Localise, drain (dry run unless ``opts.drain``), undrain the clean nodes (``opts.undrain``,
    :func:`clean_nodes`) and write the reports; returns ``doc`` with ``findings``, ``drain`` (None
    without an adapter, or when the run ``stopped``: a run that tested nothing drains no node),
    ``undrain`` (None unless asked) and ``reports`` (kind -> path) added."""
    from tuning.burnin import localise

    findings = localise.localise(doc)
    doc["findings"] = findings
    doc["drain"] = None
    if opts.drain_adapter and not doc.get("stopped"):
        from tuning.burnin import drain

        doc["drain"] = drain.drain(findings, doc["run_id"], opts.drain_adapter, act=opts.drain,
                                   max_drain=opts.max_drain, log=opts.drain_log)
    doc["undrain"] = None
    if opts.undrain and opts.drain_adapter:
        from tuning.burnin import drain

        clean = clean_nodes(doc, findings)
        doc["undrain"] = drain.undrain(clean, opts.drain_adapter, act=opts.drain, log=opts.drain_log,
                                       prefix=drain.CHECK_PREFIXES)  # never a rollout's batch hold
        say(f"undrain ({'dry run' if not opts.drain else 'acted'}): {len(clean)} clean node(s), resumed "
            f"{', '.join(doc['undrain']['resumed']) or 'none'}")
    write_reports(doc, findings, opts)
    say(f"{len(findings)} finding(s): " + ", ".join(f"{f['code']} {f['target']}" for f in findings) if findings
        else "no findings")
    return doc
