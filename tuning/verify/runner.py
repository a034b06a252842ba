"""Run perftest between node pairs and judge the results.

Each pair runs ``ib_write_bw`` (64 KiB messages, duration mode, ``--report_gbits``) and
``ib_read_lat`` (2-byte messages): the server side is started first on the server node, then
the client; both outputs are read with :mod:`tuning.parsers.perftest`, the same parser that
reads the real samples in ``shared/cases``. GID indexes are resolved per NIC from sysfs.

Verdict (:func:`judge`): a pair fails if its test failed, bandwidth is below ``min_bw_gbps``,
typical latency is above ``max_lat_us``, or it regressed against the baseline by more than
``bw_drop_pct`` (bandwidth) or ``lat_rise_pct`` (latency).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

from tuning.errors import TuningError
from tuning.parsers.perftest import parse_perftest
from tuning.transport.base import Host
from tuning.verify.gid import resolve_gid_index
from tuning.verify.pairs import Pair

BW_ARGS = "-F --report_gbits -D 2 -s 65536 -q 1"
LAT_ARGS = "-F -s 2 -n 1000"


@dataclass
class Thresholds:
    """Pass marks. bandwidth in Gb/s, latency in microseconds, drops/rises in percent."""

    min_bw_gbps: float = 300.0
    max_lat_us: float = 10.0
    bw_drop_pct: float = 5.0
    lat_rise_pct: float = 15.0


@dataclass
class PairResult:
    """One pair's measurement: bandwidth (Gb/s), typical and p99 latency (us), or an error."""

    pair: str
    path: str
    bw_gbps: float | None = None
    lat_us: float | None = None
    lat_p99_us: float | None = None
    gid_index: int | None = None
    mtu_bytes: int | None = None
    error: str | None = None
    verdict: str = "pass"
    reasons: list[str] = field(default_factory=list)


def _run_one(server: Host, client: Host, tool: str, args: str, s_gid: int, c_gid: int,
             pair: Pair, port: int):
    srv = server.start(f"{tool} -d {pair.server_nic.rdma_device} -i 1 -x {s_gid} {args} -p {port}")
    # perftest prints this banner once it listens; a client started earlier finds no server
    srv.read_until("Waiting for client to connect", timeout=10)
    cli = client.run(f"{tool} -d {pair.client_nic.rdma_device} -i 1 -x {c_gid} {args} -p {port} "
                     f"{pair.server_nic.ipv4.ip}", timeout=60)
    try:
        srv.wait(timeout=15)
    except TuningError:
        pass  # a server left waiting after a failed client is not the result; the client is
    return parse_perftest(cli.stdout + cli.stderr, tool)


def measure(pair: Pair, hosts: dict[str, Host], port: int = 18515) -> PairResult:
    """Run bandwidth and latency tests for one pair. Tool failures become ``error``, not exceptions."""
    out = PairResult(pair.name, pair.path)
    server, client = hosts[pair.server], hosts[pair.client]
    try:
        s_gid = resolve_gid_index(server, pair.server_nic.rdma_device, str(pair.server_nic.ipv4.ip))
        c_gid = resolve_gid_index(client, pair.client_nic.rdma_device, str(pair.client_nic.ipv4.ip))
        out.gid_index = c_gid
        bw = _run_one(server, client, "ib_write_bw", BW_ARGS, s_gid, c_gid, pair, port)
        if bw.failure:
            out.error = f"ib_write_bw: {bw.failure.kind}: {bw.failure.likely_cause}"
            return out
        out.bw_gbps, out.mtu_bytes = bw.best_bw_gbps(), bw.mtu_bytes
        lat = _run_one(server, client, "ib_read_lat", LAT_ARGS, s_gid, c_gid, pair, port + 1)
        if lat.failure or not lat.lat_rows:
            out.error = f"ib_read_lat: {lat.failure.kind if lat.failure else 'no result'}"
            return out
        row = lat.lat_rows[0]
        out.lat_us, out.lat_p99_us = row.t_typical, row.p99
    except TuningError as e:
        out.error = str(e)
    return out


def judge(results: list[PairResult], th: Thresholds, baseline: dict[str, dict] | None = None) -> bool:
    """Set each result's verdict and reasons. Returns True when every pair passes."""
    ok = True
    for r in results:
        r.reasons = []
        if r.error:
            r.reasons.append(r.error)
        else:
            if r.bw_gbps is not None and r.bw_gbps < th.min_bw_gbps:
                r.reasons.append(f"bandwidth {r.bw_gbps:.1f} Gb/s below {th.min_bw_gbps:.0f}")
            if r.lat_us is not None and r.lat_us > th.max_lat_us:
                r.reasons.append(f"latency {r.lat_us:.2f} us above {th.max_lat_us:.1f}")
            base = (baseline or {}).get(r.pair)
            if base and base.get("bw_gbps") and r.bw_gbps is not None:
                if r.bw_gbps < base["bw_gbps"] * (1 - th.bw_drop_pct / 100):
                    r.reasons.append(f"bandwidth regressed {base['bw_gbps']:.1f} -> {r.bw_gbps:.1f} Gb/s")
            if base and base.get("lat_us") and r.lat_us is not None:
                if r.lat_us > base["lat_us"] * (1 + th.lat_rise_pct / 100):
                    r.reasons.append(f"latency regressed {base['lat_us']:.2f} -> {r.lat_us:.2f} us")
        r.verdict = "fail" if r.reasons else "pass"
        ok = ok and not r.reasons
    return ok


def verify(pairs: list[Pair], hosts: dict[str, Host], th: Thresholds, baseline: dict | None = None,
           progress: Callable[[str], None] | None = None) -> tuple[bool, list[PairResult]]:
    """Measure every pair (sequentially: pairs share NICs) and judge them."""
    results = []
    for i, pair in enumerate(pairs):
        if progress:
            progress(f"verify {i + 1}/{len(pairs)} {pair.name} ({pair.path})")
        results.append(measure(pair, hosts, port=18515 + 2 * i))
    return judge(results, th, baseline), results


def as_baseline(results: list[PairResult]) -> dict[str, dict]:
    """Results keyed by pair name, the shape :func:`judge` takes as a baseline."""
    return {r.pair: asdict(r) for r in results if not r.error}
