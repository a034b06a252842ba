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

from tuning.errors import CommandError, TuningError, VerifyError
from tuning.parsers.perftest import parse_perftest
from tuning.transport.base import Host
from tuning.verify.gid import gid_table_command, pick_roce_v2_ipv4
from tuning.verify.pairs import Pair, build_rounds, default_per_node
from tuning.verify.schedule import PORT_BASE, WORKER_CAP, allocate_ports, expected_round_seconds, round_workers

BW_ARGS = "-F --report_gbits -D 2 -s 65536 -q 1"
LAT_ARGS = "-F -s 2 -n 1000"
BASE_PORT = PORT_BASE  # perftest's default TCP port; each server node's first test uses it (bw) and + 1 (lat)


@dataclass
class Thresholds:
    """Pass marks. bandwidth in Gb/s, latency in microseconds, drops/rises in percent."""

    min_bw_gbps: float = 300.0
    max_lat_us: float = 10.0
    bw_drop_pct: float = 5.0
    lat_rise_pct: float = 15.0


@dataclass
class PairResult:
    """One pair's measurement: bandwidth (Gb/s), typical and p99 latency (us), or an error.

    ``client_nic``/``server_nic`` name the ends (``node01:mlx5_0``), ``client_link``/``server_link``
    the leaf port each is cabled to (``leaf01:swp1``), so a summary can name a shared culprit.
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

    @classmethod
    def of(cls, pair: Pair) -> "PairResult":
        """An empty result naming ``pair``'s ends and the leaf ports they are cabled to."""
        c, s = pair.client_nic, pair.server_nic
        return cls(pair.name, pair.path, *pair.nics, f"{c.switch}:{c.switch_port}", f"{s.switch}:{s.switch_port}",
                   mtu_allowed=pair.mtu_allowed)


def _run_one(server: Host, client: Host, tool: str, args: str, s_gid: int, c_gid: int,
             pair: Pair, port: int):
    srv = server.start(f"{tool} -d {pair.server_nic.rdma_device} -i 1 -x {s_gid} {args} -p {port}")
    # perftest prints this banner once it listens; a client started earlier finds no server
    srv.read_until("Waiting for client to connect", timeout=10)
    cli = client.run(f"{tool} -d {pair.client_nic.rdma_device} -i 1 -x {c_gid} {args} -p {port} "
                     f"{pair.server_nic.ipv4.ip}", timeout=60, privileged=False)  # perftest needs no root
    try:
        srv.wait(timeout=15)
    except TuningError:
        pass  # a server left waiting after a failed client is not the result; the client is
    return parse_perftest(cli.stdout + cli.stderr, tool)


GidKey = tuple[str, str]  # (node, rdma_device)


def _nic_ipv4(nic) -> str:
    return str(nic.ipv4.ip)


def resolve_gids(pairs: list[Pair], hosts: dict[str, Host], workers: int = 4) -> dict[GidKey, int | TuningError]:
    """The RoCEv2 IPv4 GID index of every NIC the pairs use: one command per node (every NIC's
    :func:`tuning.verify.gid.gid_table_command` in turn), nodes in parallel.

    Returns:
        ``{("node01", "mlx5_0"): 3, ...}``; a NIC that cannot be resolved maps to the error
        (VerifyError / CommandError / ConnectError), which the pairs using it report.
    """
    wanted: dict[str, dict[str, str]] = {}
    for p in pairs:
        wanted.setdefault(p.client, {})[p.client_nic.rdma_device] = _nic_ipv4(p.client_nic)
        wanted.setdefault(p.server, {})[p.server_nic.rdma_device] = _nic_ipv4(p.server_nic)

    def one_node(node: str) -> dict[GidKey, int | TuningError]:
        host, devs = hosts[node], wanted[node]
        try:
            return {(node, d): e for d, e in _gid_tables(host, devs).items()}
        except TuningError as e:
            return {(node, d): e for d in devs}

    with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
        return {k: v for part in ex.map(one_node, sorted(wanted)) for k, v in part.items()}


def _gid_tables(host: Host, devs: dict[str, str]) -> dict[str, int | TuningError]:
    """Read several GID tables in one round trip; each table is followed by ``@@ <dev> <rc>``."""
    cmd = "; ".join(f"( {gid_table_command(host.sysroot, d)} ); echo \"@@ {d} $?\"" for d in devs)
    res = host.run(cmd, privileged=False)  # sysfs GID tables are world-readable
    out: dict[str, int | TuningError] = {}
    table: list[str] = []
    for line in res.stdout.splitlines():
        if not line.startswith("@@ "):
            table.append(line)
            continue
        _, dev, rc = line.split()
        idx = pick_roce_v2_ipv4("\n".join(table), devs[dev]) if rc == "0" else None
        out[dev] = idx if idx is not None else VerifyError(
            f"{dev}: no RoCE v2 GID for {devs[dev]} in the GID table" + ("" if rc == "0" else
            f" (reading it failed, exit {rc}: {res.stderr.strip()[-200:]})"), host=host.name, phase="verify")
        table = []
    for dev in devs.keys() - out.keys():
        out[dev] = CommandError(cmd, res.rc, res.stderr, host=host.name, phase="verify")
    return out


def _gid(gids: dict[GidKey, int | TuningError], node: str, dev: str) -> int:
    v = gids[(node, dev)]
    if isinstance(v, TuningError):
        raise v
    return v


def measure(pair: Pair, hosts: dict[str, Host], port: int = BASE_PORT,
            gids: dict[GidKey, int | TuningError] | None = None) -> PairResult:
    """Run bandwidth and latency tests for one pair on TCP ports ``port`` and ``port + 1``.

    Args:
        port: the server node's port for this pair (perftest ``-p``), from
            :func:`tuning.verify.schedule.allocate_ports`; 1..65534.
        gids: GID indexes from :func:`resolve_gids`; resolved here when not given.

    Returns:
        The measurement; tool failures become ``error``, not exceptions.

    Raises:
        ValueError: ``port`` outside 1..65534 (``port + 1`` must be a TCP port too).
    """
    if not 1 <= port <= 65534:
        raise ValueError(f"perftest port {port}: outside 1..65534")
    out = PairResult.of(pair)
    server, client = hosts[pair.server], hosts[pair.client]
    try:
        gids = gids if gids is not None else resolve_gids([pair], hosts, 1)
        s_gid = _gid(gids, pair.server, pair.server_nic.rdma_device)
        c_gid = out.gid_index = _gid(gids, pair.client, pair.client_nic.rdma_device)
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
            if r.mtu_allowed and r.mtu_bytes is None:
                r.reasons.append("perftest printed no Mtu line: the RoCE active MTU is unknown")
            elif r.mtu_allowed and r.mtu_bytes < r.mtu_allowed:
                r.reasons.append(f"RoCE active MTU {r.mtu_bytes} B where every hop allows {r.mtu_allowed} B "
                                 f"(an end's netdev MTU is lower than the inventory's)")
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
           per_node: int | None = None) -> tuple[bool, list[PairResult]]:
    """Measure every pair and judge them. Pairs run in rounds of
    :func:`tuning.verify.pairs.build_rounds` (no NIC twice, at most ``per_node`` tests per node;
    None: :func:`tuning.verify.pairs.default_per_node`), each round's pairs at once on up to
    ``workers`` threads, then the next round; pair i's TCP ports are
    :func:`tuning.verify.schedule.allocate_ports`'s (bandwidth) and + 1 (latency), its server
    node's own, so concurrent servers never collide and no port passes 32767.

    Returns:
        (every pair passed, results in ``pairs`` order).
    """
    results: list[PairResult | None] = [None] * len(pairs)
    rounds = build_rounds(pairs, per_node or default_per_node(pairs))
    ports = allocate_ports(pairs, rounds)
    gids = resolve_gids(pairs, hosts, round_workers(len(hosts), workers))

    def run(i: int) -> None:
        if progress:
            progress(f"verify {i + 1}/{len(pairs)} {pairs[i].name} ({pairs[i].path})")
        results[i] = measure(pairs[i], hosts, ports[i], gids)

    for k, rnd in enumerate(rounds, 1):
        if progress:
            progress(f"verify round {k}/{len(rounds)}: {len(rnd)} pair(s) at once")
        with ThreadPoolExecutor(max_workers=round_workers(len(rnd), workers)) as ex:
            list(ex.map(run, rnd))  # a round ends before the next starts: its NICs are free again
    done = [r for r in results if r is not None]
    return judge(done, th, baseline), done


#: seconds one pair takes: ib_write_bw ``-D 2`` (2 s of traffic + ~2 s connection setup) and
#: ib_read_lat ``-n 1000`` (~2 s with setup), measured on the lab with some margin
PAIR_S = 8.0
#: seconds to resolve the GID tables of up to ``workers`` nodes (one round trip each, in parallel)
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
    """Results keyed by pair name, the shape :func:`judge` takes as a baseline."""
    return {r.pair: asdict(r) for r in results if not r.error}
