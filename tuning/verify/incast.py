"""Incast check: k senders write to one receiver NIC at once (issue 8).

Pair tests alone cannot see a broken lossless setup: one flow never congests a port. An incast
of k senders into one receiver NIC does: on a lossy path the receiver's port buffer overflows
(``rx_prio{P}_discards``), packets arrive out of sequence and the senders retransmit
(``out_of_sequence``, ``packet_seq_err``, ``local_ack_timeout_err``) and some senders starve;
with PFC the receiver pauses its leaf (``tx_prio{P}_pause``), the leaf pauses the senders
(``rx_prio{P}_pause``) and the shares stay fair; with ECN too the receiver sends CNPs
(``np_cnp_sent``) that the senders handle (``rp_cnp_handled``) and pauses become rare.

:func:`plan_incasts` picks one incast per changed leaf, :func:`run_incasts` runs them (counters
read on every end before and after, one round trip per node each time: ``ethtool -S IF`` and
``grep "" /sys/class/infiniband/DEV/ports/1/hw_counters/*``, parsed by
:func:`tuning.parsers.nic.parse_ethtool_s` and :func:`tuning.parsers.rdma_counters.parse_hw_counters`;
k ``ib_write_bw`` servers on the receiver on distinct ports, each banner awaited, then the k
clients at once), and :func:`judge_incast` judges each against the :class:`Expectation` the
inventory gives. Counter names: Linux ``Documentation/networking/device_drivers/ethernet/
mellanox/mlx5/counters.rst``; samples ``shared/cases/ethtool_S__*.txt``, ``hw_counters__*.txt``.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from tuning.errors import ParseError, TuningError
from tuning.inventory import Inventory
from tuning.parsers.nic import parse_ethtool_s
from tuning.parsers.perftest import parse_perftest
from tuning.parsers.rdma_counters import parse_hw_counters
from tuning.transport.base import Host, q, sysroot_path
from tuning.verify.pairs import Pair
from tuning.verify.runner import no_result, resolve_gids
from tuning.verify.schedule import PORT_BASE

#: senders per incast by default (policy ``incast.k``: 2..16)
DEFAULT_K = 4
#: ``ib_write_bw`` arguments of every incast client and server: 64 KiB writes for 2 s, Gb/s
INCAST_ARGS = "-F --report_gbits -D 2 -s 65536 -q 1"
#: seconds each ``ib_write_bw`` server may take to print its banner (the k servers start at once)
BANNER_S = 10.0
#: a sender below this fraction of its fair share (line rate / k) fails the incast
MIN_SHARE = 0.5
#: hw_counters whose rise means packets were lost (retransmission / out of sequence)
LOSS_COUNTERS = ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err")
#: hw_counters of DCQCN: CNPs sent by the notification point (receiver), handled by the reaction point (sender)
CNP_COUNTERS = ("np_cnp_sent", "rp_cnp_handled")


def prio_counters(prio: int) -> tuple[str, ...]:
    """The ``ethtool -S`` counters an incast reports for the RoCE priority ``prio`` (0..7):
    ``rx_prio3_pause``, ``tx_prio3_pause``, ``rx_prio3_discards`` for 3."""
    return (f"rx_prio{prio}_pause", f"tx_prio{prio}_pause", f"rx_prio{prio}_discards")


@dataclass(frozen=True)
class Incast:
    """One k-to-1 incast.

    Attributes:
        leaf: the changed leaf this incast proves (the receiver NIC is cabled to it).
        receiver: node name; ``receiver_nic`` its NicSpec.
        senders: ``((node, NicSpec), ...)``, k of the receiver's rail on other nodes (fewer when
            the rail has fewer).
        ports: the receiver's TCP port per sender (perftest ``-p``), distinct, in 18515..32767.
    """

    leaf: str
    receiver: str
    receiver_nic: object
    senders: tuple[tuple[str, object], ...]
    ports: tuple[int, ...]

    @property
    def receiver_name(self) -> str:
        """``node01:mlx5_0``."""
        return f"{self.receiver}:{self.receiver_nic.rdma_device}"

    @property
    def sender_names(self) -> list[str]:
        """``["node02:mlx5_0", ...]`` in sender order."""
        return [f"{n}:{nic.rdma_device}" for n, nic in self.senders]

    @property
    def name(self) -> str:
        """``leaf01: 3->node01:mlx5_0``."""
        return f"{self.leaf}: {len(self.senders)}->{self.receiver_name}"

    @property
    def pairs(self) -> list[Pair]:
        """One :class:`~tuning.verify.pairs.Pair` per sender (client = sender, server = receiver)."""
        return [Pair(n, nic, self.receiver, self.receiver_nic,
                     "leaf" if nic.switch == self.receiver_nic.switch else "spine") for n, nic in self.senders]


@dataclass(frozen=True)
class Expectation:
    """What the profile asks of the fabric under incast.

    Attributes:
        lossless: PFC on the RoCE priority (every node's ``nic_qos`` with trust dscp and every
            switch's ``roce`` mode lossless): a PFC pause must be seen.
        ecn: ECN (DCQCN) on as well (``nic_qos.ecn``): a CNP must be seen.
        priority: the RoCE priority whose ``prio`` counters are read (``nic_qos.pfc_priority``).
    """

    lossless: bool
    ecn: bool
    priority: int = 3

    @classmethod
    def from_inventory(cls, inv: Inventory) -> "Expectation":
        """Derive the expectation from the nodes' ``nic_qos`` and the switches' ``roce``.

        lossless: at least one node, every node trusting ``dscp`` and every switch's ``roce`` set
        with mode ``lossless``; ecn: lossless and every node's ``nic_qos.ecn``; priority: the first
        node's ``nic_qos.pfc_priority`` (3 without nodes).
        """
        nodes, switches = inv.nodes, inv.switches
        lossless = bool(nodes) and all(d.spec.nic_qos.trust == "dscp" for d in nodes) and all(
            d.spec.roce is not None and d.spec.roce.mode == "lossless" for d in switches)
        ecn = lossless and all(d.spec.nic_qos.ecn for d in nodes)
        prio = nodes[0].spec.nic_qos.pfc_priority if nodes else 3
        return cls(lossless=lossless, ecn=ecn, priority=prio)


@dataclass
class IncastResult:
    """One incast's measurement and verdict.

    Attributes:
        incast: :attr:`Incast.name`.  leaf: the leaf proved.  receiver: ``node01:mlx5_0``.
        senders: ``["node02:mlx5_0", ...]``.
        sender_gbps: per sender its ``ib_write_bw`` average, Gb/s (None: it produced no value).
        line_gbps: the receiver's link speed (``/sys/class/net/IF/speed`` / 1000; None unknown).
        fair_gbps: line_gbps / k.  share_min: the slowest sender / fair share (0..1+).
        total_gbps: the senders' sum, Gb/s.
        counters: counter deltas over the incast, by end then name:
            ``{"node01:mlx5_0": {"np_cnp_sent": 5210, "rx_prio3_pause": 0, ...}, ...}``.
        verdict: ``pass`` | ``fail``.  reasons: one line per failure.
        evidence: the counters and numbers the reasons rest on, one line each.
        error: why the incast did not run (then the verdict is ``fail``), else None.
    """

    incast: str
    leaf: str
    receiver: str
    senders: list[str]
    sender_gbps: dict[str, float | None] = field(default_factory=dict)
    line_gbps: float | None = None
    fair_gbps: float | None = None
    share_min: float | None = None
    total_gbps: float | None = None
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    verdict: str = "pass"
    reasons: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    error: str | None = None


def plan_incasts(inv: Inventory, leaves: set[str], k: int = DEFAULT_K) -> list[Incast]:
    """One incast per leaf of ``leaves`` that has a NIC cabled to it, in leaf-name order.

    Receiver: the first NIC (by node name, then rail) cabled to the leaf; senders: up to ``k``
    NICs of the receiver's rail on other nodes (any leaf), by node name; ports: the receiver's
    ``PORT_BASE + 2 i`` for sender i (every incast's server ports are its receiver's own). A leaf
    whose receiver has no same-rail NIC on another node gets no incast.

    Raises:
        ValueError: ``k`` outside 1..16.
    """
    if not 1 <= k <= 16:
        raise ValueError(f"incast k {k}: outside 1..16 senders")
    nodes = sorted(inv.nodes, key=lambda d: d.name)
    out = []
    for leaf in sorted(leaves):
        on = [(d, n) for d in nodes for n in sorted(d.spec.nics, key=lambda n: n.rail) if n.switch == leaf]
        if not on:
            continue
        recv, rnic = on[0]
        senders = [(d.name, n) for d in nodes if d.name != recv.name for n in d.spec.nics if n.rail == rnic.rail][:k]
        if senders:
            ports = tuple(PORT_BASE + 2 * i for i in range(len(senders)))
            out.append(Incast(leaf, recv.name, rnic, tuple(senders), ports))
    return out


def leaves_of(inv: Inventory, limit: list[str] | None = None) -> set[str]:
    """The leaves a stand-alone verification incasts: every switch a NIC of the selected nodes
    is cabled to, and the selected switches that have a NIC cabled to them (``limit`` None:
    every such switch of the inventory)."""
    selected = inv.select(limit) if limit else list(inv.devices.values())
    cabled = {n.switch for d in inv.nodes for n in d.spec.nics}
    leaves = {n.switch for d in selected if d.kind.endpoint for n in d.spec.nics}
    return leaves | {d.name for d in selected if d.kind.fabric and d.name in cabled}


def _rounds(incasts: list[Incast]) -> list[list[int]]:
    """Incast indexes grouped so no NIC is in two incasts of a round (first fit, in order)."""
    rounds: list[tuple[list[int], set[str]]] = []
    for i, inc in enumerate(incasts):
        nics = {inc.receiver_name, *inc.sender_names}
        slot = next((r for r in rounds if not r[1] & nics), None)
        if slot is None:
            rounds.append(([], set()))
            slot = rounds[-1]
        slot[0].append(i)
        slot[1].update(nics)
    return [r[0] for r in rounds]


#: seconds one round of incasts takes: the servers' banners, 2 s of traffic (``-D 2``) with
#: connection setup, and the two counter reads; the lab measures 5-7 s unloaded
ROUND_S = 10.0


def expected_seconds(incasts: list[Incast]) -> float:
    """How long :func:`run_incasts` should take for ``incasts``: :data:`ROUND_S` per round of
    :func:`_rounds` (incasts sharing no NIC run at once), seconds; 0.0 for none."""
    return ROUND_S * len(_rounds(incasts))


def reported_counters(prio: int) -> tuple[str, ...]:
    """Every counter an :class:`IncastResult` carries per end, for priority ``prio``."""
    return (*LOSS_COUNTERS, *CNP_COUNTERS, *prio_counters(prio), "rx_discards_phy")


def _counter_command(sysroot: str, ends: list[tuple[str, str]]) -> str:
    """One command reading every ``(netdev, rdma_device)`` end of a node: for each, ``@@ eth IF``,
    ``ethtool -S IF``, ``@@ hw DEV``, the hw_counters as ``path:value``, ``@@ speed DEV Mb/s``."""
    parts = []
    for netdev, dev in ends:
        hw = sysroot_path(sysroot, f"/sys/class/infiniband/{dev}/ports/1/hw_counters")
        speed = sysroot_path(sysroot, f"/sys/class/net/{netdev}/speed")
        # ethtool lives in /usr/sbin, which a user's PATH over SSH may lack (Debian's sshd default)
        parts.append(f"echo @@ eth {q(netdev)}; PATH=\"$PATH:/usr/sbin:/sbin\" ethtool -S {q(netdev)}; "
                     f"echo \"@@ rc $?\"; echo @@ hw {q(dev)}; grep '' {q(hw)}/*; echo \"@@ rc $?\"; "
                     f"echo @@ speed {q(dev)} \"$(cat {q(speed)} 2>/dev/null)\"")
    return "; ".join(parts)


def _read_counters(host: Host, ends: list[tuple[str, str]]) -> dict[str, dict[str, int] | TuningError]:
    """Every end's counters (``ethtool -S`` and hw_counters merged, plus ``speed_mbps``) by RDMA
    device, one round trip; an end whose read failed maps to the error."""
    by_if = dict(ends)
    hw_base = sysroot_path(host.sysroot, "/sys/class/infiniband")
    try:
        res = host.run(_counter_command(host.sysroot, ends), privileged=False)  # both are world-readable
    except TuningError as e:
        return {dev: e for _, dev in ends}
    out: dict[str, dict[str, int] | TuningError] = {}
    block: list[str] = []
    cur: tuple[str, str] | None = None
    for line in res.stdout.splitlines():
        if not line.startswith("@@ "):
            block.append(line[len(hw_base) - len("/sys/class/infiniband"):] if cur and cur[0] == "hw"
                         and line.startswith(hw_base) else line)
            continue
        word = line.split()
        if word[1] in ("eth", "hw"):
            cur, block = (word[1], word[2]), []
        elif word[1] == "rc" and cur is not None:
            dev = by_if.get(cur[1], cur[1]) if cur[0] == "eth" else cur[1]
            if isinstance(out.get(dev), TuningError):
                continue
            try:
                if word[2] != "0":
                    raise TuningError(f"reading {cur[0] == 'eth' and 'ethtool -S ' or 'hw_counters of '}{cur[1]} "
                                      f"failed (exit {word[2]}): {' '.join(block)[-200:] or res.stderr.strip()[-200:]}",
                                      host=host.name, phase="verify")
                parsed = (parse_ethtool_s if cur[0] == "eth" else parse_hw_counters)("\n".join(block))
                counters = parsed.counters if cur[0] == "eth" else {
                    k: v for p in parsed.ports for k, v in p.counters.items()}
                out.setdefault(dev, {}).update(counters)
            except TuningError as e:
                out[dev] = e
            cur = None
        elif word[1] == "speed" and not isinstance(out.get(word[2]), TuningError):
            if len(word) > 3 and word[3].isdigit():
                out.setdefault(word[2], {})["speed_mbps"] = int(word[3])
    for _, dev in ends:
        if dev not in out or (isinstance(out[dev], dict) and len(out[dev]) <= 1):
            out[dev] = out.get(dev) if isinstance(out.get(dev), TuningError) else TuningError(
                f"no counters read for {dev} (exit {res.rc}): {res.stderr.strip()[-200:]}", host=host.name,
                phase="verify")
    return out


def _ends_by_node(incasts: list[Incast]) -> dict[str, list[tuple[str, str]]]:
    ends: dict[str, dict[str, str]] = {}
    for inc in incasts:
        for node, nic in ((inc.receiver, inc.receiver_nic), *inc.senders):
            ends.setdefault(node, {})[nic.netdev] = nic.rdma_device
    return {n: sorted(e.items()) for n, e in ends.items()}


def _snapshot(incasts: list[Incast], hosts: dict[str, Host]) -> dict[str, dict[str, int] | TuningError]:
    """Counters of every end of ``incasts``, keyed ``node:dev``: one round trip per node, nodes in parallel."""
    by_node = _ends_by_node(incasts)

    def one(node: str) -> dict[str, dict[str, int] | TuningError]:
        return {f"{node}:{dev}": v for dev, v in _read_counters(hosts[node], by_node[node]).items()}

    with ThreadPoolExecutor(max_workers=max(1, min(32, len(by_node)))) as ex:
        return {k: v for part in ex.map(one, sorted(by_node)) for k, v in part.items()}


def _launch(inc: Incast, hosts: dict[str, Host], gids: dict) -> list:
    """Start the receiver's servers (each banner awaited); returns ``[(server, sender node,
    sender name, client command)]`` per sender, or raises TuningError (a server did not listen,
    a GID did not resolve)."""
    rdev, rip = inc.receiver_nic.rdma_device, str(inc.receiver_nic.ipv4.ip)
    s_gid = gids[(inc.receiver, rdev)]
    if isinstance(s_gid, TuningError):
        raise s_gid
    started: list = []
    try:
        for (node, nic), port in zip(inc.senders, inc.ports):
            c_gid = gids[(node, nic.rdma_device)]
            if isinstance(c_gid, TuningError):
                raise c_gid
            srv = hosts[inc.receiver].start(f"ib_write_bw -d {q(rdev)} -i 1 -x {s_gid} {INCAST_ARGS} -p {port}")
            started.append((srv, node, f"{node}:{nic.rdma_device}",
                            f"ib_write_bw -d {q(nic.rdma_device)} -i 1 -x {c_gid} {INCAST_ARGS} -p {port} {q(rip)}"))
        for (srv, *_), port in zip(started, inc.ports):
            # perftest prints this banner once it listens: every server listens before any client starts
            if not srv.read_until("Waiting for client to connect", timeout=BANNER_S):
                raise TuningError(f"ib_write_bw server on {inc.receiver_name} port {port} did not listen "
                                  f"within {BANNER_S:g} s", host=inc.receiver, phase="verify")
    except TuningError:
        for srv, *_ in started:  # no client will come: close their sessions
            try:
                srv.wait(timeout=0)
            except TuningError:
                pass
        raise
    return started


def _collect(started: list, running: list, r: IncastResult) -> None:
    """Wait for every client (then its server) and record each sender's Gb/s; a client without a
    value sets ``r.error`` with its cause (:func:`tuning.verify.runner.no_result`)."""
    for (srv, *_), (name, cli) in zip(started, running):
        try:
            res = cli.wait(timeout=60) if cli is not None else None
        except TuningError as e:
            res, r.error = None, r.error or f"{name}: {e}"
        if res is not None:
            try:
                parsed = parse_perftest(res.stdout + res.stderr, "ib_write_bw")
                why = no_result(parsed, "ib_write_bw")
            except ParseError as e:  # a crash, a loader error: this sender has no value, the rest still count
                parsed, why = None, ("unknown", f"ib_write_bw exit {res.rc}, output not perftest's: {e}")
            r.sender_gbps[name] = None if why else parsed.best_bw_gbps()
            if why and not r.error:
                r.error = f"{name}: {why[0]}: {why[1]}"
        try:
            srv.wait(timeout=15)
        except TuningError:
            pass  # a server left waiting after a failed client is not the result; the client is


#: ``ethtool -S`` priority counters reported whenever they rose, whatever the priority
_ANY_PRIO = re.compile(r"(rx_prio\d_discards|[rt]x_prio\d_pause)")


def _deltas(before: dict, after: dict, end: str, prio: int) -> dict[str, int] | TuningError:
    """Counter rises of one end: :func:`reported_counters` of ``prio`` always, the discards and
    pauses of any other priority when they rose (RoCE on priority 0 under trust pcp)."""
    b, a = before.get(end), after.get(end)
    for v in (b, a):
        if isinstance(v, TuningError) or v is None:
            return v if v is not None else TuningError(f"{end}: no counters", phase="verify")
    fixed = set(reported_counters(prio))
    return {k: a.get(k, 0) - b.get(k, 0) for k in sorted(a.keys() | b.keys())
            if k in fixed or (_ANY_PRIO.fullmatch(k) and a.get(k, 0) != b.get(k, 0))}


def _start_clients(started: list, hosts: dict[str, Host], r: IncastResult) -> list:
    """Start every client of one incast at once: ``[(sender name, Running or None)]``."""
    running = []
    for _, node, name, cmd in started:
        try:
            running.append((name, hosts[node].start(cmd, privileged=False)))  # perftest needs no root
        except TuningError as e:
            r.error = r.error or f"{name}: {e}"
            running.append((name, None))
    return running


def _run_round(group: list[Incast], results: list[IncastResult], hosts: dict[str, Host], prio: int) -> None:
    """Measure NIC-disjoint incasts at once into ``results`` (same order): GIDs, counters, every
    receiver's servers, then every client, then counters again."""
    gids = resolve_gids([p for inc in group for p in inc.pairs], hosts, max(1, len(hosts)))
    before = _snapshot(group, hosts)
    launched: dict[int, list] = {}
    for i, inc in enumerate(group):
        try:
            launched[i] = _launch(inc, hosts, gids)
        except TuningError as e:
            results[i].error = str(e)
    # every server of the round listens: the clients start at once
    running = {i: _start_clients(started, hosts, results[i]) for i, started in launched.items()}
    for i, started in launched.items():
        _collect(started, running[i], results[i])
    after = _snapshot(group, hosts)
    for inc, r in zip(group, results):
        for end in [inc.receiver_name, *inc.sender_names]:
            d = _deltas(before, after, end, prio)
            if isinstance(d, TuningError):
                r.error = r.error or f"counters of {end}: {d}"
                continue
            r.counters[end] = d
            back = [f"{end} {n} {before[end][n]} -> {after[end][n]}" for n, v in d.items() if v < 0]
            if back:  # a driver reload, a reboot or a hand edit: the delta says nothing about loss
                r.error = r.error or "counters reset between reads: " + ", ".join(back)
        speed = after.get(inc.receiver_name)
        if isinstance(speed, dict) and speed.get("speed_mbps"):
            r.line_gbps = speed["speed_mbps"] / 1000


def run_incasts(incasts: list[Incast], hosts: dict[str, Host], expect: Expectation,
                progress: Callable[[str], None] | None = None) -> tuple[bool, list[IncastResult]]:
    """Run and judge every incast; incasts that share no NIC run at the same time.

    Per round: one GID-table round trip per node (:func:`tuning.verify.runner.resolve_gids`), one
    counter read per node, the receivers' servers (each banner awaited), every client at once,
    one more counter read per node; then :func:`judge_incast`.

    Returns:
        (every incast passed, results in ``incasts`` order). Failures to reach a node or run a
        tool are results with ``error`` (verdict fail), never exceptions.
    """
    results = [IncastResult(inc.name, inc.leaf, inc.receiver_name, inc.sender_names) for inc in incasts]
    rounds = _rounds(incasts)
    for k, rnd in enumerate(rounds, 1):
        if progress:
            progress(f"incast round {k}/{len(rounds)}: " + ", ".join(incasts[i].name for i in rnd))
        _run_round([incasts[i] for i in rnd], [results[i] for i in rnd], hosts, expect.priority)
    ok = all([judge_incast(r, expect) for r in results])
    return ok, results


def judge_incast(r: IncastResult, expect: Expectation) -> bool:
    """Set ``r.verdict``, ``reasons`` and ``evidence`` from its numbers and counter deltas
    (also ``fair_gbps``, ``share_min`` and ``total_gbps`` from ``sender_gbps`` and ``line_gbps``).

    Fails: it did not run (``error``); a counter went backwards between the reads (a driver
    reload, a reboot, a hand edit: ``counters reset between reads``, judged as did not run, since
    the delta says nothing about loss); any loss counter, ``rx_prioN_discards`` (any N) or
    ``rx_discards_phy`` rose (``lossy under incast: ...``); ``expect.lossless`` and no PFC pause on
    any end; ``expect.ecn`` and no CNP; a sender below :data:`MIN_SHARE` of its fair share (line
    rate / k) or without a value; the receiver's line rate unknown (``speed`` -1, EINVAL or
    unreadable: the share check could not run, so it fails, naming the receiver).

    Returns:
        True when the incast passes.
    """
    r.reasons, r.evidence = [], []
    p = expect.priority
    back = [f"{end} {n} {v:+d}" for end, c in r.counters.items() for n, v in c.items() if v < 0]
    if back and not r.error:
        r.error = "counters reset between reads: " + ", ".join(back)
    if r.error:
        r.reasons.append(f"incast did not run: {r.error}")
    vals = [v for v in r.sender_gbps.values() if v is not None]
    k = len(r.senders)
    if vals and k:
        r.total_gbps = round(sum(vals), 2)
        r.fair_gbps = round(r.line_gbps / k, 2) if r.line_gbps and r.line_gbps > 0 else None
        slowest = min(r.senders, key=lambda s: r.sender_gbps.get(s) or 0.0)
        r.share_min = round((r.sender_gbps.get(slowest) or 0.0) / r.fair_gbps, 3) if r.fair_gbps else None
        r.evidence.append(f"total {r.total_gbps:.1f} Gb/s" + (f" of line {r.line_gbps:g}" if r.fair_gbps else "")
                          + (f"; fair share {r.fair_gbps:.1f} Gb/s" if r.fair_gbps else "; line rate unknown")
                          + "; senders " + ", ".join(f"{s} {r.sender_gbps.get(s) or 0:.1f}" for s in r.senders))
        if not r.error and r.share_min is None:
            r.reasons.append(f"fair-share check could not run: link speed of the receiver {r.receiver} unknown "
                             f"(its /sys/class/net/*/speed read -1, EINVAL or nothing: link down?)")
        elif not r.error and r.share_min < MIN_SHARE:
            r.reasons.append(f"sender {slowest} got {r.sender_gbps.get(slowest) or 0:.1f} Gb/s, {r.share_min:.2f} "
                             f"of its fair share {r.fair_gbps:.1f} Gb/s (below {MIN_SHARE})")
    elif not r.error:
        r.reasons.append("incast did not run: no sender produced a value")
    for end, c in r.counters.items():
        risen = [f"{n} +{v}" for n, v in c.items() if v]
        if risen:
            r.evidence.append(f"{end}: " + ", ".join(risen))
    loss = [f"{end} {n} +{v}" for end, c in r.counters.items() for n, v in c.items() if v > 0 and (
        n in LOSS_COUNTERS or n == "rx_discards_phy" or re.fullmatch(r"rx_prio\d_discards", n))]
    if r.counters and not r.error:
        if loss:
            r.reasons.append("lossy under incast: " + ", ".join(loss))
        pauses = sum(c.get(f"{d}x_prio{p}_pause", 0) for c in r.counters.values() for d in "rt")
        if expect.lossless and not pauses:
            r.reasons.append(f"lossless expected but no PFC pause on priority {p} at any end "
                             f"(rx_prio{p}_pause and tx_prio{p}_pause did not rise: PFC off or on another priority)")
        cnps = sum(c.get(n, 0) for c in r.counters.values() for n in CNP_COUNTERS)
        if expect.ecn and not cnps:
            r.reasons.append("ECN expected but no CNP sent or handled (np_cnp_sent and rp_cnp_handled did not rise)")
    r.verdict = "fail" if r.reasons else "pass"
    return not r.reasons
