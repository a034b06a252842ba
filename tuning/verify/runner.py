"""Run perftest between node pairs.

Each pair runs ``ib_write_bw`` (64 KiB messages, duration mode, ``--report_gbits``) and
``ib_read_lat`` (2-byte messages): the server side is started first on the server node, then
the client; both outputs are read with :mod:`tuning.parsers.perftest`, the same parser that
reads the real samples in ``shared/cases``. GID indexes are resolved per NIC from sysfs
(:mod:`tuning.verify.ends`).

Pairs run in rounds (:func:`verify`: :func:`tuning.verify.pairs.build_rounds`, no NIC twice
and at most ``per_node`` tests per node in a round): a round's pairs all at once (one thread
each, up to a cap), then the next round; each test's TCP port is its server node's own
(:func:`tuning.verify.schedule.allocate_ports`), so ports never overflow whatever the fleet size.

The record of a pair is :class:`tuning.verify.pair_result.PairResult`; the verdict (absolute
marks, regression against a like-with-like baseline, the one-line summary) is
:mod:`tuning.verify.pair_verdict`. Both are importable from here too, as before.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from tuning.errors import DeviceTimeout, TuningError
from tuning.parsers.perftest import PerftestResult, parse_perftest
from tuning.transport.base import Host
from tuning.verify.ends import End, GidKey, end_of, resolve_ends, resolve_gids
from tuning.verify.pair_result import ERROR_KINDS, PairResult
from tuning.verify.pair_verdict import Thresholds, as_baseline, compare_params, judge, summarise, undecided
from tuning.verify.pairs import Pair, build_rounds, default_per_node
from tuning.verify.run_outcome import harness_fault, no_result
from tuning.verify.servers import end_server, start_server
from tuning.verify.schedule import PORT_BASE, WORKER_CAP, allocate_ports, expected_round_seconds, round_workers
from tuning.verify.timeouts import PAIR_TIMEOUT_S, finish

#: this module's API; PairResult, Thresholds, judge, summarise, as_baseline, compare_params and
#: resolve_gids live in pair_result, pair_verdict and ends and stay importable from here
__all__ = ["BANNER_S", "BASE_PORT", "BW_ARGS", "ERROR_KINDS", "GID_S", "LAT_ARGS", "PAIR_S", "PAIR_TIMEOUT_S",
           "PairResult", "TESTS", "Thresholds", "as_baseline", "compare_params", "expected_seconds", "judge",
           "harness_fault", "measure", "no_result", "resolve_ends", "resolve_gids", "run_params", "summarise", "verify"]

BW_ARGS = "-F --report_gbits -D 2 -s 65536 -q 1"
LAT_ARGS = "-F -s 2 -n 1000"
BASE_PORT = PORT_BASE  # perftest's default TCP port; each server node's first test uses it (bw) and + 1 (lat)

#: seconds a perftest server is given to print its banner; past them its client is not started
#: (``server_not_ready``, :func:`_not_listening`)
BANNER_S = 10.0


def run_params(tool: str, args: str) -> dict:
    """What one perftest run measures, read from the arguments fabtune gives it (perftest's own
    defaults where an option is absent: ``-s 65536`` for bandwidth, ``2`` for latency, ``-n 5000`` /
    ``1000`` when not in duration mode, ``-q 1``, unidirectional without ``-b``).

    Returns:
        ``{"tool": "ib_write_bw", "size_bytes": 65536, "duration_s": 2, "iters": None, "qps": 1,
        "direction": "uni"}`` for :data:`BW_ARGS`; ``iters`` is None in duration mode and
        ``duration_s`` None in iterations mode; direction ``uni`` or ``bi``; ``tos`` (the flows'
        ToS byte, ``--tclass``) only when one is given: a baseline compares like with like, so a
        result measured in another class is never judged against it.
    """
    words = args.split()

    def opt(*names: str) -> str | None:
        return next((words[i + 1] for i, w in enumerate(words[:-1]) if w in names), None)

    lat = tool.endswith("_lat")
    duration = opt("-D", "--duration")
    iters = opt("-n", "--iters")
    tclass = next((int(w.split("=", 1)[1]) for w in words if w.startswith("--tclass=")), None)
    return {"tool": tool, "size_bytes": int(opt("-s", "--size") or (2 if lat else 65536)),
            "duration_s": int(duration) if duration else None,
            "iters": None if duration else int(iters or (1000 if lat else 5000)),
            "qps": int(opt("-q", "--qp") or 1),
            "direction": "bi" if {"-b", "--bidirectional"} & set(words) else "uni",
            **({"tos": tclass} if tclass is not None else {})}


#: the tests of one pair: key in ``PairResult.params`` -> (tool, arguments)
TESTS = {"bw": ("ib_write_bw", BW_ARGS), "lat": ("ib_read_lat", LAT_ARGS)}


def class_args(tos: int | None) -> str:
    """perftest's traffic class option for a flow's ToS byte: `` --tclass=106`` (the GRH traffic
    class of a verbs QP, i.e. the IP ToS of its RoCEv2 packets: linux-rdma/perftest
    ``perftest_parameters.c``; ``-T`` would need RDMA-CM, ``-R``); ``""`` for None (class 0). Both
    ends get it (perftest: the same options on server and client; the server sends a read's data)."""
    return "" if tos is None else f" --tclass={int(tos)}"


def pair_tests(pair: Pair) -> dict[str, tuple[str, str]]:
    """:data:`TESTS` as this pair runs them: each tool's arguments with the pair's traffic class
    (:func:`class_args`); what runs and what ``params`` records come from here alone."""
    return {k: (tool, args + class_args(pair.tos)) for k, (tool, args) in TESTS.items()}


def _run_one(server: Host, client: Host, tool: str, args: str, s_gid: int, c_gid: int,
             pair: Pair, port: int, timeout_s: float = PAIR_TIMEOUT_S) -> tuple[PerftestResult | None, tuple[str, str] | None]:
    """One perftest run: the server on ``port``, then the client once the server listens. Returns the
    client's parsed output (the server's when it ended before listening; None with a fault) and, when
    the harness itself failed on either end (:func:`harness_fault`, :func:`_not_listening`),
    ``(kind, cause)``."""
    srv = start_server(server, f"{tool} -d {pair.server_nic.rdma_device} -i 1 -x {s_gid} {args} -p {port}")
    # perftest prints this banner once it listens; a client started earlier finds no server
    if not srv.read_until("Waiting for client to connect", timeout=min(BANNER_S, timeout_s)):
        return _not_listening(server, srv, tool, port)
    try:
        cli = finish(client.start(f"{tool} -d {pair.client_nic.rdma_device} -i 1 -x {c_gid} {args} -p {port} "
                                  f"{pair.server_nic.ipv4.ip}", privileged=False), client, timeout_s)  # no root
    except TuningError:
        end_server(server, srv, tool, port, grace_s=0)  # no client: the server would wait for ever
        raise
    srv_res = end_server(server, srv, tool, port)  # a server left waiting after a failed client is ended
    fault = (harness_fault(srv_res, tool, f"{server.name} (server)") if srv_res is not None else None) \
        or harness_fault(cli, tool, f"{client.name} (client)")
    return parse_perftest(cli.stdout + cli.stderr, tool), fault


def _not_listening(server: Host, srv, tool: str, port: int) -> tuple[PerftestResult | None, tuple[str, str] | None]:
    """A server that printed no "Waiting for client to connect": its client is not started (it could
    only fail to connect, and ``connect_failed`` would read as the fabric's fault). A server that
    ended says why in its own output (a harness fault, else perftest's own error line, as a client's
    is parsed: ``no_rdma_device`` ...); one still running after :data:`BANNER_S` is ended and is the
    harness's ``server_not_ready`` (a node too loaded or too slow to start it: nothing was tested)."""
    res = end_server(server, srv, tool, port, grace_s=1.0)  # one that ended is reaped at once
    if res is None:
        return None, ("server_not_ready", f"{server.name} (server): {tool} did not say it listens (\"Waiting for "
                      f"client to connect\") within {BANNER_S:g} s; its client was not started and the fabric was not "
                      "tested")
    fault = harness_fault(res, tool, f"{server.name} (server)")
    return (None, fault) if fault else (parse_perftest(res.stdout + res.stderr, tool), None)


def _failed(out: PairResult, kind: str, cause: str) -> PairResult:
    out.error_kind = kind if kind in ERROR_KINDS else "unknown"
    out.error = cause
    return out



def _raised(out: PairResult, e: TuningError, kind: str) -> PairResult:
    """``out`` failed by ``e``: ``timeout`` when ``e`` is a :class:`DeviceTimeout`, else ``kind``."""
    return _failed(out, "timeout" if isinstance(e, DeviceTimeout) else kind, str(e))


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
    out.params = {k: run_params(tool, args) for k, (tool, args) in pair_tests(pair).items()}
    try:
        ends = gids if gids is not None else resolve_ends([pair], hosts, 2, timeout_s)
        s_end = end_of(ends, pair.server, pair.server_nic.rdma_device)
        c_end = end_of(ends, pair.client, pair.client_nic.rdma_device)
    except TuningError as e:
        return _raised(out, e, "gid_unresolved")
    _record_ends(out, c_end, s_end)
    try:
        return _run_tests(out, pair, hosts, (s_end.gid_index, c_end.gid_index), port, timeout_s)
    except TuningError as e:
        return _raised(out, e, "unknown")


def _record_ends(out: PairResult, c_end: End, s_end: End) -> None:
    """Note on ``out`` the GID indexes, GID types and link speeds its client and server ran with."""
    out.gid_index = out.client_gid_index = c_end.gid_index
    out.server_gid_index, out.client_gid_type, out.server_gid_type = s_end.gid_index, c_end.gid_type, s_end.gid_type
    out.client_speed_mbps, out.server_speed_mbps = c_end.speed_mbps, s_end.speed_mbps


def _run_tests(out: PairResult, pair: Pair, hosts: dict[str, Host], gids: tuple[int, int], port: int,
               timeout_s: float) -> PairResult:
    """The pair's :data:`TESTS` into ``out``: bandwidth (and RoCE MTU) on ``port``, then latency on
    ``port + 1``; ``gids``: (server, client) GID index. A test without a value stops there
    (:func:`harness_fault`, else :func:`no_result`: ``error_kind`` and ``error`` set); TuningError (DeviceTimeout) propagates."""
    server, client = hosts[pair.server], hosts[pair.client]
    tests = pair_tests(pair)
    tool, args = tests["bw"]
    bw, fault = _run_one(server, client, tool, args, *gids, pair, port, timeout_s)
    if (why := fault or no_result(bw, tool)) is not None:
        return _failed(out, *why)
    out.bw_gbps, out.mtu_bytes = bw.best_bw_gbps(), bw.mtu_bytes
    out.bw_samples = [out.bw_gbps]
    tool, args = tests["lat"]
    lat, fault = _run_one(server, client, tool, args, *gids, pair, port + 1, timeout_s)
    if (why := fault or no_result(lat, tool)) is not None:
        return _failed(out, *why)
    row = lat.lat_rows[0]
    out.lat_us, out.lat_p99_us = row.t_typical, row.p99
    out.lat_samples = [out.lat_us]
    return out


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

    Samples (:mod:`tuning.verify.samples`): every pair is measured ``th.baseline_samples()`` times
    without a baseline, ``th.first_samples()`` times against one; then the pairs whose regression
    is still undecided within the noise (:func:`tuning.verify.pair_verdict.undecided`) are measured
    again, one sample at a time, up to ``th.max_samples``. A pair whose test gave no value is not
    measured again. ``bw_gbps`` / ``lat_us`` are the samples' means.

    Args:
        absolute: passed to :func:`judge` (False: regression and tests that did not run only).
        timeout_s: seconds a node's round trip or a perftest client may take (None:
            :data:`PAIR_TIMEOUT_S`); past it the pair is ``error`` / ``timeout`` and the run goes on.

    Returns:
        (every pair passed, results in ``pairs`` order).
    """
    limit = PAIR_TIMEOUT_S if timeout_s is None else timeout_s
    want = th.first_samples() if baseline else th.baseline_samples()
    results = _measure_pairs(pairs, hosts, workers, per_node, limit, progress,
                             f" x {want} samples" if want > 1 else "")
    while todo := _again(results, want, th, baseline):
        if progress:
            progress(f"verify: measuring {len(todo)} pair(s) again ({_why_again(results, todo, want)})")
        more = _measure_pairs([pairs[i] for i in todo], hosts, workers, per_node, limit, None, "")
        for i, r in zip(todo, more):
            results[i] = _merged(results[i], r)
    return judge(results, th, baseline, absolute), results


def _again(results: list[PairResult], want: int, th: Thresholds, baseline: dict | None) -> list[int]:
    """The pairs to measure once more: those with fewer than ``want`` samples, else (against a
    baseline) those still undecided below ``th.max_samples``; never a pair that gave no value."""
    short = [i for i, r in enumerate(results) if not r.error_kind and len(r.bw_samples) < want]
    if short or not baseline:
        return short
    return [i for i in undecided(results, th, baseline) if len(results[i].bw_samples) < th.max_samples]


def _why_again(results: list[PairResult], todo: list[int], want: int) -> str:
    n = min(len(results[i].bw_samples) for i in todo) + 1
    return f"sample {n} of {want}" if n <= want else f"sample {n}: a change near its mark, within the noise"


def _merged(a: PairResult, b: PairResult) -> PairResult:
    """``a`` with the sample ``b`` of the same pair added: means of the samples, the larger p99, the
    GID and link readings of the latest; a ``b`` that gave no value makes the pair that error."""
    if b.error_kind:
        return b
    b.bw_samples, b.lat_samples = a.bw_samples + b.bw_samples, a.lat_samples + b.lat_samples
    b.bw_gbps = round(sum(b.bw_samples) / len(b.bw_samples), 4)
    b.lat_us = round(sum(b.lat_samples) / len(b.lat_samples), 4)
    b.lat_p99_us = max(x for x in (a.lat_p99_us, b.lat_p99_us) if x is not None) \
        if a.lat_p99_us is not None or b.lat_p99_us is not None else None
    return b


def _measure_pairs(pairs: list[Pair], hosts: dict[str, Host], workers: int, per_node: int | None, limit: float,
                   progress: Callable[[str], None] | None, note: str) -> list[PairResult]:
    """One sample of every pair, in rounds (:func:`verify`); one progress line per round."""
    results: list[PairResult | None] = [None] * len(pairs)
    rounds = build_rounds(pairs, per_node or default_per_node(pairs))
    ports = allocate_ports(pairs, rounds)
    if progress and rounds:
        progress(f"verify: {len(pairs)} pair(s) in {len(rounds)} round(s), up to {max(map(len, rounds))} at once"
                 + note)
    start = time.monotonic()
    for k, rnd in enumerate(rounds, 1):
        t0 = time.monotonic()
        for i, r in zip(rnd, _measure_round(rnd, pairs, ports, hosts, workers, limit)):
            results[i] = r
        if progress:  # one line per round, in order (a line per pair, from its thread, came out of order)
            progress(_round_line(k, rounds, [pairs[i].name for i in rnd if results[i].error_kind],
                                 time.monotonic() - t0, time.monotonic() - start))
    return [r for r in results if r is not None]


def _round_line(k: int, rounds: list[list[int]], bad: list[str], took_s: float, elapsed_s: float) -> str:
    """``verify round 2/5: 8/8 measured in 4.1 s; about 12 s left`` (the rounds so far' mean time
    for each round still to run), naming up to 4 pairs that gave no value."""
    n = len(rounds[k - 1])
    left = len(rounds) - k
    return (f"verify round {k}/{len(rounds)}: {n - len(bad)}/{n} measured in {took_s:.1f} s"
            + (f"; no value from {', '.join(bad[:4])}{f' and {len(bad) - 4} more' if len(bad) > 4 else ''}" if bad else "")
            + (f"; about {elapsed_s / k * left:.0f} s left" if left else ""))


def _measure_round(rnd: list[int], pairs: list[Pair], ports: list[int], hosts: dict[str, Host], workers: int,
                   limit: float) -> list[PairResult]:
    """Measure the pairs ``rnd`` (indexes into ``pairs``, ``ports`` alike) at once, on up to
    ``workers`` threads, after one read of the round's ends (:func:`resolve_ends`); results in
    ``rnd`` order."""
    ends = resolve_ends([pairs[i] for i in rnd], hosts, round_workers(len(hosts), workers), limit)

    def run(i: int) -> PairResult:
        return measure(pairs[i], hosts, ports[i], ends, limit)

    with ThreadPoolExecutor(max_workers=round_workers(len(rnd), workers)) as ex:
        return list(ex.map(run, rnd))  # a round ends before the next starts: its NICs are free again


#: seconds one pair takes: ib_write_bw ``-D 2`` (2 s of traffic + ~2 s connection setup) and
#: ib_read_lat ``-n 1000`` (~2 s with setup), measured on the lab with some margin
PAIR_S = 8.0
#: seconds to resolve the GID tables of up to ``workers`` nodes (one round trip each, in parallel);
#: counted once: the re-reads before later rounds (one parallel round trip each, well under a
#: second on the lab) fall within :data:`PAIR_S`'s margin
GID_S = 5.0


def expected_seconds(pairs: list[Pair], workers: int = WORKER_CAP, per_node: int | None = None,
                     samples: int = 1) -> float:
    """How long :func:`verify` should take for ``pairs``: GID resolution (:data:`GID_S` per
    ``workers`` nodes) plus, per round of :func:`tuning.verify.pairs.build_rounds`,
    :data:`PAIR_S` per ``workers`` pairs of the round, ``samples`` times (seconds; the pairs
    measured again for a change near its mark, a few at most, fall within the margins).

    Returns:
        5 + 8 x 2 = 21.0 for the lab's 18 pairs (rounds of 16 and 2).
    """
    nodes = {p.client for p in pairs} | {p.server for p in pairs}
    rounds = build_rounds(pairs, per_node or default_per_node(pairs))
    return GID_S * math.ceil(len(nodes) / max(1, workers)) + samples * sum(
        expected_round_seconds(len(r), PAIR_S, workers) for r in rounds)
