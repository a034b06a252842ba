"""Run perftest between node pairs and judge the results.

Each pair runs ``ib_write_bw`` (64 KiB messages, duration mode, ``--report_gbits``) and
``ib_read_lat`` (2-byte messages): the server side is started first on the server node, then
the client; both outputs are read with :mod:`tuning.parsers.perftest`, the same parser that
reads the real samples in ``shared/cases``. GID indexes are resolved per NIC from sysfs.

Pairs run in rounds (:func:`verify`: :func:`tuning.verify.pairs.build_rounds`, no NIC twice
and at most ``per_node`` tests per node in a round): a round's pairs all at once (one thread
each, up to a cap), then the next round; each test's TCP port is its server node's own
(:func:`tuning.verify.schedule.allocate_ports`), so ports never overflow whatever the fleet size.

Verdict (:func:`judge`): a pair fails if its test failed, its RoCE active MTU (perftest's ``Mtu``
line) is below what every hop of the inventory allows (``Pair.mtu_allowed``: 1024 where 4096 is
allowed means an end runs at netdev MTU ~1500), bandwidth is below ``min_bw_gbps``,
typical latency is above ``max_lat_us``, or it regressed against the baseline by more than
``bw_drop_pct`` (bandwidth) or ``lat_rise_pct`` (latency). :func:`summarise` says it in one line
and names what every failing pair has in common (a NIC, a switch port, a switch).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Callable

from tuning.errors import CommandError, ConnectError, DeviceTimeout, TuningError, VerifyError
from tuning.parsers.perftest import PerftestResult, parse_perftest
from tuning.transport.base import Host, q, sysroot_path
from tuning.verify.gid import gid_table_command, pick_roce_v2_ipv4
from tuning.verify.pairs import Pair, build_rounds, default_per_node
from tuning.verify.schedule import PORT_BASE, WORKER_CAP, allocate_ports, expected_round_seconds, round_workers

BW_ARGS = "-F --report_gbits -D 2 -s 65536 -q 1"
LAT_ARGS = "-F -s 2 -n 1000"
BASE_PORT = PORT_BASE  # perftest's default TCP port; each server node's first test uses it (bw) and + 1 (lat)


@dataclass
class Thresholds:
    """Pass marks. bandwidth in Gb/s, latency in microseconds, drops/rises in percent.

    ``min_bw_share``: fraction (0..1) of the slower end's link speed (``/sys/class/net/<if>/speed``,
    Mb/s, read with the GID table right before the pair) the bandwidth must reach; None: not judged.
    """

    min_bw_gbps: float = 300.0
    max_lat_us: float = 10.0
    bw_drop_pct: float = 5.0
    lat_rise_pct: float = 15.0
    min_bw_share: float | None = None


#: ``PairResult.error_kind`` values: why a test produced no value (``status == "error"``)
ERROR_KINDS = ("connect_failed", "qp_rtr_failed", "qp_rts_failed", "completion_error", "gid_type_mismatch",
               "no_rdma_device", "timeout", "no_value", "gid_unresolved", "unknown")


@dataclass
class PairResult:
    """One pair's measurement: bandwidth (Gb/s), typical and p99 latency (us), or an error.

    ``client_nic``/``server_nic`` name the ends (``node01:mlx5_0``), ``client_link``/``server_link``
    the leaf port each is cabled to (``leaf01:swp1``), so a summary can name a shared culprit.

    Set by :func:`judge`: ``status`` ``pass`` | ``fail`` | ``error`` (the test produced no value:
    it did not run, never a regression), ``verdict`` ``pass`` | ``fail`` (``fail`` for an error
    too, for older readers), ``reasons``, ``baseline`` ``compared`` | ``none`` |
    ``mismatch: <what>`` (then no regression is judged) and ``drift`` (``["client GID index 3 -> 5"]``:
    an end's GID index or type changed since the baseline; reported, not a failure by itself).

    Set by :func:`measure`: ``error_kind`` (one of :data:`ERROR_KINDS` when the test did not produce
    a value), ``gid_index`` (the client's, kept for older readers), ``client_gid_index`` /
    ``server_gid_index`` and ``*_gid_type`` (``RoCE v2``) resolved right before the pair on each
    end, ``*_speed_mbps`` (each end's netdev link speed, Mb/s; None when unknown), ``params``: per
    test, what fabtune ran, from its command line: ``{"bw": {"tool": "ib_write_bw",
    "size_bytes": 65536, "duration_s": 2, "iters": None, "qps": 1, "direction": "uni"},
    "lat": {...}}``.
    """

    pair: str
    path: str
    client_nic: str | None = None
    server_nic: str | None = None
    client_link: str | None = None
    server_link: str | None = None
    bw_gbps: float | None = None
    lat_us: float | None = None
    lat_p99_us: float | None = None
    gid_index: int | None = None
    mtu_bytes: int | None = None
    mtu_allowed: int | None = None
    error: str | None = None
    verdict: str = "pass"
    reasons: list[str] = field(default_factory=list)
    status: str = "pass"
    error_kind: str | None = None
    client_gid_index: int | None = None
    server_gid_index: int | None = None
    client_gid_type: str | None = None
    server_gid_type: str | None = None
    client_speed_mbps: int | None = None
    server_speed_mbps: int | None = None
    params: dict[str, dict] = field(default_factory=dict)
    baseline: str = "none"
    drift: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, pair: Pair) -> "PairResult":
        """An empty result naming ``pair``'s ends and the leaf ports they are cabled to."""
        c, s = pair.client_nic, pair.server_nic
        return cls(pair.name, pair.path, *pair.nics, f"{c.switch}:{c.switch_port}", f"{s.switch}:{s.switch_port}",
                   mtu_allowed=pair.mtu_allowed)


#: seconds a perftest client (and each node's GID round trip) may take before the pair is
#: ``error`` / ``timeout`` when :func:`verify` is given no ``timeout_s``: ``-D 2`` plus connection
#: setup is ~4 s on the lab, a loaded fabric a few times that
PAIR_TIMEOUT_S = 60.0
#: seconds a perftest server is given to print its banner (then the client runs anyway and fails
#: to connect: ``connect_failed``)
BANNER_S = 10.0


def run_params(tool: str, args: str) -> dict:
    """What one perftest run measures, read from the arguments fabtune gives it (perftest's own
    defaults where an option is absent: ``-s 65536`` for bandwidth, ``2`` for latency, ``-n 5000`` /
    ``1000`` when not in duration mode, ``-q 1``, unidirectional without ``-b``).

    Returns:
        ``{"tool": "ib_write_bw", "size_bytes": 65536, "duration_s": 2, "iters": None, "qps": 1,
        "direction": "uni"}`` for :data:`BW_ARGS`; ``iters`` is None in duration mode and
        ``duration_s`` None in iterations mode; direction ``uni`` or ``bi``.
    """
    words = args.split()

    def opt(*names: str) -> str | None:
        return next((words[i + 1] for i, w in enumerate(words[:-1]) if w in names), None)

    lat = tool.endswith("_lat")
    duration = opt("-D", "--duration")
    iters = opt("-n", "--iters")
    return {"tool": tool, "size_bytes": int(opt("-s", "--size") or (2 if lat else 65536)),
            "duration_s": int(duration) if duration else None,
            "iters": None if duration else int(iters or (1000 if lat else 5000)),
            "qps": int(opt("-q", "--qp") or 1),
            "direction": "bi" if {"-b", "--bidirectional"} & set(words) else "uni"}


#: the tests of one pair: key in ``PairResult.params`` -> (tool, arguments)
TESTS = {"bw": ("ib_write_bw", BW_ARGS), "lat": ("ib_read_lat", LAT_ARGS)}


def _finish(running, host: Host, timeout_s: float):
    """``running.wait(timeout_s)``; a command still running then is :class:`DeviceTimeout`
    (``Running.wait`` raises ConnectError only for that once the command has started)."""
    try:
        return running.wait(timeout=timeout_s)
    except ConnectError as e:
        raise DeviceTimeout(host.name, "verify", timeout_s) from e


def _run_one(server: Host, client: Host, tool: str, args: str, s_gid: int, c_gid: int,
             pair: Pair, port: int, timeout_s: float = PAIR_TIMEOUT_S):
    srv = server.start(f"{tool} -d {pair.server_nic.rdma_device} -i 1 -x {s_gid} {args} -p {port}")
    # perftest prints this banner once it listens; a client started earlier finds no server
    srv.read_until("Waiting for client to connect", timeout=min(BANNER_S, timeout_s))
    cli = _finish(client.start(f"{tool} -d {pair.client_nic.rdma_device} -i 1 -x {c_gid} {args} -p {port} "
                               f"{pair.server_nic.ipv4.ip}", privileged=False), client, timeout_s)  # no root needed
    try:
        srv.wait(timeout=15)
    except TuningError:
        pass  # a server left waiting after a failed client is not the result; the client is
    return parse_perftest(cli.stdout + cli.stderr, tool)


GidKey = tuple[str, str]  # (node, rdma_device)


@dataclass(frozen=True)
class End:
    """One NIC end as read right before its test (one round trip per node).

    Attributes:
        gid_index: the RoCE v2 GID index holding the NIC's IPv4 address (sysfs GID table).
        gid_type: that entry's ``gid_attrs/types`` text (``RoCE v2``).
        speed_mbps: the netdev's ``/sys/class/net/<if>/speed`` (Mb/s); None when unreadable or
            not positive (the kernel gives -1 or EINVAL for a link that is down).
    """

    gid_index: int
    gid_type: str | None = None
    speed_mbps: int | None = None


def _nic_ipv4(nic) -> str:
    return str(nic.ipv4.ip)


def resolve_ends(pairs: list[Pair], hosts: dict[str, Host], workers: int = 4,
                 timeout_s: float = PAIR_TIMEOUT_S) -> dict[GidKey, End | TuningError]:
    """Every NIC end the pairs use, read in one command per node (each NIC's
    :func:`tuning.verify.gid.gid_table_command` and its netdev's link speed), nodes in parallel.

    Returns:
        ``{("node01", "mlx5_0"): End(3, "RoCE v2", 400000), ...}``; a NIC that cannot be resolved
        maps to the error (VerifyError: no RoCE v2 GID; CommandError / ConnectError; DeviceTimeout
        when the node did not answer within ``timeout_s``), which the pairs using it report.
    """
    wanted: dict[str, dict[str, tuple[str, str]]] = {}
    for p in pairs:
        for node, nic in ((p.client, p.client_nic), (p.server, p.server_nic)):
            wanted.setdefault(node, {})[nic.rdma_device] = (_nic_ipv4(nic), nic.netdev)

    def one_node(node: str) -> dict[GidKey, End | TuningError]:
        host, devs = hosts[node], wanted[node]
        try:
            return {(node, d): e for d, e in _read_ends(host, devs, timeout_s).items()}
        except TuningError as e:
            return {(node, d): e for d in devs}

    with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
        return {k: v for part in ex.map(one_node, sorted(wanted)) for k, v in part.items()}


def resolve_gids(pairs: list[Pair], hosts: dict[str, Host], workers: int = 4) -> dict[GidKey, int | TuningError]:
    """The RoCEv2 IPv4 GID index of every NIC the pairs use (:func:`resolve_ends`, indexes only).

    Returns:
        ``{("node01", "mlx5_0"): 3, ...}``; a NIC that cannot be resolved maps to the error
        (VerifyError / CommandError / ConnectError / DeviceTimeout), which the pairs using it report.
    """
    return {k: v if isinstance(v, TuningError) else v.gid_index for k, v in resolve_ends(pairs, hosts, workers).items()}


def _read_ends(host: Host, devs: dict[str, tuple[str, str]], timeout_s: float) -> dict[str, End | TuningError]:
    """Several GID tables and link speeds in one round trip; each table is followed by
    ``@@ <dev> <rc> <speed or ->``."""
    parts = []
    for d, (_, netdev) in devs.items():
        speed = q(sysroot_path(host.sysroot, f"/sys/class/net/{netdev}/speed"))
        parts.append(f"( {gid_table_command(host.sysroot, d)} ); rc=$?; s=$(cat {speed} 2>/dev/null) || s=-; "
                     f"echo \"@@ {d} $rc ${{s:--}}\"")
    cmd = "; ".join(parts)
    res = _finish(host.start(cmd, privileged=False), host, timeout_s)  # sysfs GID tables are world-readable
    out: dict[str, End | TuningError] = {}
    table: list[str] = []
    for line in res.stdout.splitlines():
        if not line.startswith("@@ "):
            table.append(line)
            continue
        _, dev, rc, speed = line.split()
        ipv4 = devs[dev][0]
        idx = pick_roce_v2_ipv4("\n".join(table), ipv4) if rc == "0" else None
        mbps = int(speed) if speed.lstrip("-").isdigit() and int(speed) > 0 else None
        out[dev] = End(idx, "RoCE v2", mbps) if idx is not None else VerifyError(
            f"{dev}: no RoCE v2 GID for {ipv4} in the GID table" + ("" if rc == "0" else
            f" (reading it failed, exit {rc}: {res.stderr.strip()[-200:]})"), host=host.name, phase="verify")
        table = []
    for dev in devs.keys() - out.keys():
        out[dev] = CommandError(cmd, res.rc, res.stderr, host=host.name, phase="verify")
    return out


def _end(ends: dict[GidKey, End | int | TuningError], node: str, dev: str) -> End:
    v = ends[(node, dev)]
    if isinstance(v, TuningError):
        raise v
    return v if isinstance(v, End) else End(v)


def no_result(res: PerftestResult, tool: str) -> tuple[str, str] | None:
    """Why a parsed perftest run gave no value, or None when it did.

    Returns:
        ``(error_kind, cause)``: perftest's own classified error
        (:func:`tuning.parsers.perftest_failures.classify_failure`: ``connect_failed``,
        ``qp_rtr_failed``, ``qp_rts_failed``, ``completion_error``, ``gid_type_mismatch``,
        ``no_rdma_device``, ``unknown``), or ``no_value``: a bandwidth test whose best average is
        0.00 (perftest prints 0.00 when a duration-mode run completed nothing; a ``0.00`` peak is
        normal in duration mode and is not looked at), or any average that is negative or not
        finite, or a latency test without a finite typical latency > 0.
    """
    if res.failure is not None:
        f = res.failure
        return f.kind, f"{tool}: {f.message} ({f.likely_cause})"
    if res.kind == "lat" or tool.endswith("_lat"):
        typical = res.lat_rows[0].t_typical if res.lat_rows else None
        if not _measured(typical):
            return "no_value", f"{tool}: typical latency {typical if res.lat_rows else 'missing'}: not a measurement"
        return None
    best = res.best_bw_gbps()
    if not _measured(best) or not all(_measured(r.bw_avg.value) or r.bw_avg.value == 0 for r in res.bw_rows):
        # 0.00: the run produced no value, it did not measure 0 Gb/s
        shown = "missing" if best is None else "0.00" if best == 0 else best
        return "no_value", f"{tool}: average bandwidth {shown}: not a measurement"
    return None


def _measured(value: float | None) -> bool:
    """A bandwidth or latency is a value only when finite and > 0 (0.00, negative, inf, nan: not)."""
    return value is not None and math.isfinite(value) and value > 0


def _failed(out: PairResult, kind: str, cause: str) -> PairResult:
    out.error_kind = kind if kind in ERROR_KINDS else "unknown"
    out.error = cause
    return out


def measure(pair: Pair, hosts: dict[str, Host], port: int = BASE_PORT,
            gids: dict[GidKey, End | int | TuningError] | None = None,
            timeout_s: float = PAIR_TIMEOUT_S) -> PairResult:
    """Run bandwidth and latency tests for one pair on TCP ports ``port`` and ``port + 1``.

    Args:
        port: the server node's port for this pair (perftest ``-p``), from
            :func:`tuning.verify.schedule.allocate_ports`; 1..65534.
        gids: ends from :func:`resolve_ends` (or GID indexes from :func:`resolve_gids`); read
            here, one round trip per end's node, when not given.
        timeout_s: seconds each client (and that round trip) may take; past it the pair is
            ``error_kind = "timeout"``.

    Returns:
        The measurement; a test that did not produce a value sets ``error_kind`` (one of
        :data:`ERROR_KINDS`) and ``error`` (its cause), never an exception: perftest's own
        error lines (:func:`tuning.parsers.perftest_failures.classify_failure`), a GID that
        cannot be resolved (``gid_unresolved``), a node past ``timeout_s`` (``timeout``), an
        average of 0.00 or no result row (``no_value``).

    Raises:
        ValueError: ``port`` outside 1..65534 (``port + 1`` must be a TCP port too).
    """
    if not 1 <= port <= 65534:
        raise ValueError(f"perftest port {port}: outside 1..65534")
    out = PairResult.of(pair)
    out.params = {k: run_params(tool, args) for k, (tool, args) in TESTS.items()}
    server, client = hosts[pair.server], hosts[pair.client]
    try:
        ends = gids if gids is not None else resolve_ends([pair], hosts, 2, timeout_s)
        s_end = _end(ends, pair.server, pair.server_nic.rdma_device)
        c_end = _end(ends, pair.client, pair.client_nic.rdma_device)
    except DeviceTimeout as e:
        return _failed(out, "timeout", str(e))
    except TuningError as e:
        return _failed(out, "gid_unresolved", str(e))
    out.gid_index = out.client_gid_index = c_end.gid_index
    out.server_gid_index, out.client_gid_type, out.server_gid_type = s_end.gid_index, c_end.gid_type, s_end.gid_type
    out.client_speed_mbps, out.server_speed_mbps = c_end.speed_mbps, s_end.speed_mbps
    try:
        tool, args = TESTS["bw"]
        bw = _run_one(server, client, tool, args, s_end.gid_index, c_end.gid_index, pair, port, timeout_s)
        if (why := no_result(bw, tool)) is not None:
            return _failed(out, *why)
        out.bw_gbps, out.mtu_bytes = bw.best_bw_gbps(), bw.mtu_bytes
        tool, args = TESTS["lat"]
        lat = _run_one(server, client, tool, args, s_end.gid_index, c_end.gid_index, pair, port + 1, timeout_s)
        if (why := no_result(lat, tool)) is not None:
            return _failed(out, *why)
        row = lat.lat_rows[0]
        out.lat_us, out.lat_p99_us = row.t_typical, row.p99
    except DeviceTimeout as e:
        return _failed(out, "timeout", str(e))
    except TuningError as e:
        return _failed(out, "unknown", str(e))
    return out


#: ``params`` fields compared for like with like: field -> (label, unit)
_PARAM_LABELS = {"tool": ("test", ""), "size_bytes": ("size", " B"), "duration_s": ("duration", " s"),
                 "iters": ("iterations", ""), "qps": ("QPs", ""), "direction": ("direction", "")}


def compare_params(now: dict[str, dict], base: dict | None) -> str:
    """Whether a baseline entry measured the same tests as this run (like with like).

    Args:
        now: this run's ``PairResult.params``; base: the baseline entry (a result dict) or None.

    Returns:
        ``"compared"`` (same tool, size, duration or iterations, QPs and direction for every test),
        ``"none"`` (no entry), or ``"mismatch: size 65536 vs 4096 B (ib_write_bw)"`` (this run's
        value first, then the baseline's; every differing field, ``, `` joined); an entry
        without ``params`` (recorded before they were) is ``"mismatch: the baseline has no test
        parameters"``.
    """
    if not base:
        return "none"
    then = base.get("params")
    if not isinstance(then, dict) or not then:
        return "mismatch: the baseline has no test parameters"
    diffs = []
    for key in sorted(set(now) | set(then)):
        a, b = now.get(key), then.get(key)
        if not isinstance(a, dict) or not isinstance(b, dict):
            diffs.append(f"test {key} {'missing' if not isinstance(a, dict) else 'run'} vs "
                         f"{'missing' if not isinstance(b, dict) else 'run'}")
            continue
        for f, (label, unit) in _PARAM_LABELS.items():
            if a.get(f) != b.get(f):
                diffs.append(f"{label} {a.get(f)} vs {b.get(f)}{unit} ({a.get('tool') or key})")
    return "mismatch: " + ", ".join(diffs) if diffs else "compared"


def gid_drift(r: PairResult, base: dict | None) -> list[str]:
    """Each end's GID index or type changed since the baseline entry ``base``.

    Returns:
        ``["client node01:mlx5_0 GID index 3 -> 5"]``, ``["server node02:mlx5_0 GID type RoCE v2 ->
        IB/RoCE v1"]``; empty without a baseline or where either side is unknown.
    """
    if not base:
        return []
    out = []
    for end, nic in (("client", r.client_nic), ("server", r.server_nic)):
        then_idx = base.get(f"{end}_gid_index", base.get("gid_index") if end == "client" else None)
        for what, now, then in (("GID index", getattr(r, f"{end}_gid_index"), then_idx),
                                ("GID type", getattr(r, f"{end}_gid_type"), base.get(f"{end}_gid_type"))):
            if now is not None and then is not None and now != then:
                out.append(f"{end} {nic} {what} {then} -> {now}")
    return out


def judge(results: list[PairResult], th: Thresholds, baseline: dict[str, dict] | None = None,
          absolute: bool = True) -> bool:
    """Set each result's status, verdict, reasons, baseline and drift.

    Args:
        baseline: :func:`as_baseline`'s shape (``{pair name: result dict}``); an entry is compared
            only when its ``params`` equal the result's (else ``baseline = "mismatch: size 65536 vs
            4096 B (ib_write_bw)"`` and no regression is judged; an entry without ``params`` is a
            mismatch too, see :func:`compare_params`).
        absolute: judge the absolute marks (min/max, share of line rate, MTU) too; False: only
            regression against the baseline and tests that did not run fail (a batch in the
            middle of a rollout: a half-tuned fabric fails the absolute marks).

    A pair whose test did not run (``error_kind`` / ``error`` set) is ``status = "error"`` with the
    reason ``did not run: <kind>: <cause>``, never a regression. Drift (:func:`gid_drift`) is
    listed in ``drift`` and as ``drift: ...`` reasons that do not fail the pair by themselves.

    Returns:
        True when every pair passes.
    """
    ok = True
    for r in results:
        base = (baseline or {}).get(r.pair)
        r.baseline = compare_params(r.params, base)
        r.drift = gid_drift(r, base)
        failing: list[str] = []
        if r.error or r.error_kind:
            r.error_kind = r.error_kind or "unknown"
            failing.append(f"did not run: {r.error_kind}: {r.error or 'no result'}")
        else:
            if absolute:
                failing += _absolute(r, th)
            if r.baseline == "compared":
                failing += _regression(r, th, base)
        r.reasons = failing + [f"drift: {d}" for d in r.drift]
        r.status = "error" if (r.error or r.error_kind) else ("fail" if failing else "pass")
        r.verdict = "pass" if r.status == "pass" else "fail"
        ok = ok and r.verdict == "pass"
    return ok


def _absolute(r: PairResult, th: Thresholds) -> list[str]:
    """Reasons a measured pair misses the absolute marks (MTU, bandwidth, share of line rate, latency)."""
    out = []
    if r.mtu_allowed and r.mtu_bytes is None:
        out.append("perftest printed no Mtu line: the RoCE active MTU is unknown")
    elif r.mtu_allowed and r.mtu_bytes < r.mtu_allowed:
        out.append(f"RoCE active MTU {r.mtu_bytes} B where every hop allows {r.mtu_allowed} B "
                   f"(an end's netdev MTU is lower than the inventory's)")
    if r.bw_gbps is not None and r.bw_gbps < th.min_bw_gbps:
        out.append(f"bandwidth {r.bw_gbps:.1f} Gb/s below {th.min_bw_gbps:.0f}")
    if th.min_bw_share is not None and r.bw_gbps is not None:
        speeds = [r.client_speed_mbps, r.server_speed_mbps]
        if None in speeds:
            out.append(f"link speed of an end unknown (client {r.client_speed_mbps}, server "
                       f"{r.server_speed_mbps} Mb/s): the share of line rate cannot be judged")
        elif r.bw_gbps < th.min_bw_share * min(speeds) / 1000:
            line = min(speeds) / 1000
            out.append(f"bandwidth {r.bw_gbps:.1f} Gb/s below {th.min_bw_share:.2f} of the slower end's "
                       f"{line:g} Gb/s link ({th.min_bw_share * line:.1f})")
    if r.lat_us is not None and r.lat_us > th.max_lat_us:
        out.append(f"latency {r.lat_us:.2f} us above {th.max_lat_us:.1f}")
    return out


def _regression(r: PairResult, th: Thresholds, base: dict) -> list[str]:
    """Reasons a measured pair regressed against a like-with-like baseline entry."""
    out = []
    if base.get("bw_gbps") and r.bw_gbps is not None and r.bw_gbps < base["bw_gbps"] * (1 - th.bw_drop_pct / 100):
        out.append(f"bandwidth regressed {base['bw_gbps']:.1f} -> {r.bw_gbps:.1f} Gb/s")
    if base.get("lat_us") and r.lat_us is not None and r.lat_us > base["lat_us"] * (1 + th.lat_rise_pct / 100):
        out.append(f"latency regressed {base['lat_us']:.2f} -> {r.lat_us:.2f} us")
    return out


def _field(r: PairResult | dict, name: str):
    return r.get(name) if isinstance(r, dict) else getattr(r, name)


def common_culprit(failed: list[PairResult | dict]) -> str | None:
    """What every failing pair shares, most specific first: a NIC (named with its leaf port),
    a leaf port, a switch; None with fewer than 2 failing pairs or nothing shared.

    Returns:
        ``"NIC node01:mlx5_0 (leaf01:swp1)"``, ``"switch port leaf01:swp5"``, ``"switch leaf02"``.
    """
    if len(failed) < 2:
        return None
    ends = [{(_field(r, "client_nic"), _field(r, "client_link")), (_field(r, "server_nic"), _field(r, "server_link"))}
            for r in failed]
    nics = set.intersection(*ends) - {(None, None)}
    if nics:
        nic, link = sorted(nics, key=str)[0]
        return f"NIC {nic}" + (f" ({link})" if link else "")
    links = set.intersection(*({lk for _, lk in e if lk} for e in ends))
    if links:
        return f"switch port {sorted(links)[0]}"
    switches = set.intersection(*({lk.split(":")[0] for _, lk in e if lk} for e in ends))
    return f"switch {sorted(switches)[0]}" if switches else None


def summarise(results: list[PairResult | dict], max_names: int = 4) -> str:
    """One line about judged results (PairResult or their dicts), for people.

    Returns:
        ``"18/18 pairs passed"`` or ``"2/18 pairs failed: node01:mlx5_0->node02:mlx5_0,
        node01:mlx5_0->node03:mlx5_1; common NIC node01:mlx5_0 (leaf01:swp1)"`` (at most
        ``max_names`` pairs named, then ``+N more``).
    """
    failed = [r for r in results if _field(r, "verdict") == "fail"]
    if not failed:
        return f"{len(results)}/{len(results)} pairs passed"
    names = [_field(r, "pair") for r in failed]
    listed = ", ".join(names[:max_names]) + (f" (+{len(names) - max_names} more)" if len(names) > max_names else "")
    culprit = common_culprit(failed)
    return f"{len(failed)}/{len(results)} pairs failed: {listed}" + (f"; common {culprit}" if culprit else "")


def verify(pairs: list[Pair], hosts: dict[str, Host], th: Thresholds, baseline: dict | None = None,
           progress: Callable[[str], None] | None = None, workers: int = WORKER_CAP,
           per_node: int | None = None, absolute: bool = True,
           timeout_s: float | None = None) -> tuple[bool, list[PairResult]]:
    """Measure every pair and judge them. Pairs run in rounds of
    :func:`tuning.verify.pairs.build_rounds` (no NIC twice, at most ``per_node`` tests per node;
    None: :func:`tuning.verify.pairs.default_per_node`), each round's pairs at once on up to
    ``workers`` threads, then the next round; pair i's TCP ports are
    :func:`tuning.verify.schedule.allocate_ports`'s (bandwidth) and + 1 (latency), its server
    node's own, so concurrent servers never collide and no port passes 32767.

    Right before each round, every node of the round is read once (:func:`resolve_ends`: GID
    index and type of each end, link speed), so each pair records the GID indexes it ran with.

    Args:
        absolute: passed to :func:`judge` (False: regression and tests that did not run only).
        timeout_s: seconds a node's round trip or a perftest client may take (None:
            :data:`PAIR_TIMEOUT_S`); past it the pair is ``error`` / ``timeout`` and the run goes on.

    Returns:
        (every pair passed, results in ``pairs`` order).
    """
    limit = PAIR_TIMEOUT_S if timeout_s is None else timeout_s
    results: list[PairResult | None] = [None] * len(pairs)
    rounds = build_rounds(pairs, per_node or default_per_node(pairs))
    ports = allocate_ports(pairs, rounds)

    for k, rnd in enumerate(rounds, 1):
        if progress:
            progress(f"verify round {k}/{len(rounds)}: {len(rnd)} pair(s) at once")
        ends = resolve_ends([pairs[i] for i in rnd], hosts, round_workers(len(hosts), workers), limit)

        def run(i: int) -> None:
            if progress:
                progress(f"verify {i + 1}/{len(pairs)} {pairs[i].name} ({pairs[i].path})")
            results[i] = measure(pairs[i], hosts, ports[i], ends, limit)

        with ThreadPoolExecutor(max_workers=round_workers(len(rnd), workers)) as ex:
            list(ex.map(run, rnd))  # a round ends before the next starts: its NICs are free again
    done = [r for r in results if r is not None]
    return judge(done, th, baseline, absolute), done


#: seconds one pair takes: ib_write_bw ``-D 2`` (2 s of traffic + ~2 s connection setup) and
#: ib_read_lat ``-n 1000`` (~2 s with setup), measured on the lab with some margin
PAIR_S = 8.0
#: seconds to resolve the GID tables of up to ``workers`` nodes (one round trip each, in parallel);
#: counted once: the re-reads before later rounds (one parallel round trip each, well under a
#: second on the lab) fall within :data:`PAIR_S`'s margin
GID_S = 5.0


def expected_seconds(pairs: list[Pair], workers: int = WORKER_CAP, per_node: int | None = None) -> float:
    """How long :func:`verify` should take for ``pairs``: GID resolution (:data:`GID_S` per
    ``workers`` nodes) plus, per round of :func:`tuning.verify.pairs.build_rounds`,
    :data:`PAIR_S` per ``workers`` pairs of the round (seconds).

    Returns:
        5 + 8 x 2 = 21.0 for the lab's 18 pairs (rounds of 16 and 2).
    """
    nodes = {p.client for p in pairs} | {p.server for p in pairs}
    rounds = build_rounds(pairs, per_node or default_per_node(pairs))
    return GID_S * math.ceil(len(nodes) / max(1, workers)) + sum(
        expected_round_seconds(len(r), PAIR_S, workers) for r in rounds)


def as_baseline(results: list[PairResult]) -> dict[str, dict]:
    """Results keyed by pair name, the shape :func:`judge` takes as a baseline: every field,
    ``params`` (like with like) and the per-end GID indexes and types (drift) included; pairs
    whose test did not run are left out."""
    return {r.pair: asdict(r) for r in results if not r.error and not r.error_kind}
