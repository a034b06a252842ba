"""Incast check: k senders write to one receiver NIC at once (issue 8).

Pair tests alone cannot see a broken lossless setup: one flow never congests a port. An incast
of k senders into one receiver NIC does: on a lossy path the receiver's port buffer overflows
(``rx_prio{P}_discards``), packets arrive out of sequence and the senders retransmit
(``out_of_sequence``, ``packet_seq_err``, ``local_ack_timeout_err``) and some senders starve;
with PFC the receiver pauses its leaf (``tx_prio{P}_pause``), the leaf pauses the senders
(``rx_prio{P}_pause``) and the shares stay fair; with ECN too the receiver sends CNPs
(``np_cnp_sent``) that the senders handle (``rp_cnp_handled``) and pauses become rare.

:func:`plan_incasts` picks one incast per changed leaf, :func:`run_incasts` runs them (counters
read on every end before and after, one round trip per node each time: :mod:`tuning.verify.counters`;
k ``ib_write_bw`` servers on the receiver on distinct ports, each banner awaited, then the k
clients at once), and :func:`judge_incast` judges each against the :class:`Expectation` the
inventory gives (both, and :class:`IncastResult`, live in :mod:`tuning.verify.incast_verdict`
and are importable from here too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tuning.errors import ParseError, TuningError
from tuning.inventory import Inventory
from tuning.parsers.perftest import parse_perftest
from tuning.transport.base import Host, q
from tuning.verify.counters import deltas, snapshot
from tuning.verify.ends import resolve_gids
from tuning.verify.incast_verdict import Expectation, IncastResult, judge_incast
from tuning.verify.pairs import Pair, flow_tos
from tuning.verify.runner import class_args, no_result
from tuning.verify.schedule import PORT_BASE
from tuning.verify.servers import end_server, start_server

#: this module's API; Expectation, IncastResult and judge_incast live in incast_verdict and stay
#: importable from here
__all__ = ["BANNER_S", "DEFAULT_K", "INCAST_ARGS", "Expectation", "Incast", "IncastResult", "ROUND_S",
           "expected_seconds", "judge_incast", "leaves_of", "plan_incasts", "run_incasts"]

#: senders per incast by default (policy ``incast.k``: 2..16)
DEFAULT_K = 4
#: ``ib_write_bw`` arguments of every incast client and server: 64 KiB writes for 2 s, Gb/s
INCAST_ARGS = "-F --report_gbits -D 2 -s 65536 -q 1"
#: seconds each ``ib_write_bw`` server may take to print its banner (the k servers start at once)
BANNER_S = 10.0


@dataclass(frozen=True)
class Incast:
    """One k-to-1 incast.

    Attributes:
        leaf: the changed leaf this incast proves (the receiver NIC is cabled to it).
        receiver: node name; ``receiver_nic`` its NicSpec.
        senders: ``((node, NicSpec), ...)``, k of the receiver's rail on other nodes (fewer when
            the rail has fewer).
        ports: the receiver's TCP port per sender (perftest ``-p``), distinct on the receiver node
            across incasts (:func:`plan_incasts`), in 18515..32767.
        tos: the ToS byte every flow sets (perftest ``--tclass``; the receiver node's RoCE ToS,
            :func:`tuning.verify.pairs.flow_tos`): the incast proves the lossless class only if its
            traffic rides it. None: traffic class 0 (the node leaves its QoS alone).
    """

    leaf: str
    receiver: str
    receiver_nic: object
    senders: tuple[tuple[str, object], ...]
    ports: tuple[int, ...]
    tos: int | None = None

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
        return [Pair(n, nic, self.receiver, self.receiver_nic, "leaf" if nic.switch == self.receiver_nic.switch
                     else "spine", tos=self.tos) for n, nic in self.senders]



def plan_incasts(inv: Inventory, leaves: set[str], k: int = DEFAULT_K) -> list[Incast]:
    """One incast per leaf of ``leaves`` that has a NIC cabled to it, in leaf-name order.

    Receiver: the first NIC (by node name, then rail) cabled to the leaf; senders: up to ``k``
    NICs of the receiver's rail on other nodes (any leaf), by node name; ports: the receiver node's
    own, ``PORT_BASE + 2 i`` counted over every incast into that node (sender i of its first
    incast gets ``PORT_BASE + 2 i``, its next incast goes on from there): incasts into two NICs of
    one node run at once (they share no NIC) and perftest binds every address of the node, so they
    need distinct ports. A leaf whose receiver has no same-rail NIC on another node gets no incast.

    Raises:
        ValueError: ``k`` outside 1..16.
    """
    if not 1 <= k <= 16:
        raise ValueError(f"incast k {k}: outside 1..16 senders")
    nodes = sorted(inv.nodes, key=lambda d: d.name)
    out = []
    first_port: dict[str, int] = {}  # receiver node -> its next free server port
    for leaf in sorted(leaves):
        on = [(d, n) for d in nodes for n in sorted(d.spec.nics, key=lambda n: n.rail) if n.switch == leaf]
        if not on:
            continue
        recv, rnic = on[0]
        senders = [(d.name, n) for d in nodes if d.name != recv.name for n in d.spec.nics if n.rail == rnic.rail][:k]
        if senders:
            start = first_port.get(recv.name, PORT_BASE)
            ports = tuple(start + 2 * i for i in range(len(senders)))
            first_port[recv.name] = start + 2 * len(senders)
            out.append(Incast(leaf, recv.name, rnic, tuple(senders), ports, tos=flow_tos(recv)))
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



def _ends_by_node(incasts: list[Incast]) -> dict[str, list[tuple[str, str]]]:
    ends: dict[str, dict[str, str]] = {}
    for inc in incasts:
        for node, nic in ((inc.receiver, inc.receiver_nic), *inc.senders):
            ends.setdefault(node, {})[nic.netdev] = nic.rdma_device
    return {n: sorted(e.items()) for n, e in ends.items()}



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
            args = INCAST_ARGS + class_args(inc.tos)  # the tuned class: the incast proves its queue
            srv = start_server(hosts[inc.receiver], f"ib_write_bw -d {q(rdev)} -i 1 -x {s_gid} {args} -p {port}")
            started.append((srv, node, f"{node}:{nic.rdma_device}",
                            f"ib_write_bw -d {q(nic.rdma_device)} -i 1 -x {c_gid} {args} -p {port} {q(rip)}"))
        for (srv, *_), port in zip(started, inc.ports):
            # perftest prints this banner once it listens: every server listens before any client starts
            if not srv.read_until("Waiting for client to connect", timeout=BANNER_S):
                raise TuningError(f"ib_write_bw server on {inc.receiver_name} port {port} did not listen "
                                  f"within {BANNER_S:g} s", host=inc.receiver, phase="verify")
    except TuningError:
        for (srv, *_), port in zip(started, inc.ports):  # no client will come: end the servers
            end_server(hosts[inc.receiver], srv, "ib_write_bw", port, grace_s=0)
        raise
    return started


def _collect(started: list, running: list, r: IncastResult, receiver: Host, ports: tuple[int, ...]) -> None:
    """Wait for every client (then its server on ``receiver``, ended when it waits on:
    :func:`tuning.verify.servers.end_server`) and record each sender's Gb/s; a client without a
    value sets ``r.error`` with its cause (:func:`tuning.verify.runner.no_result`)."""
    for (srv, *_), (name, cli), port in zip(started, running, ports):
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
        end_server(receiver, srv, "ib_write_bw", port)  # not the result (the client is); never left waiting



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
    by_node = _ends_by_node(group)
    before = snapshot(by_node, hosts)
    launched: dict[int, list] = {}
    for i, inc in enumerate(group):
        try:
            launched[i] = _launch(inc, hosts, gids)
        except TuningError as e:
            results[i].error = str(e)
    # every server of the round listens: the clients start at once
    running = {i: _start_clients(started, hosts, results[i]) for i, started in launched.items()}
    for i, started in launched.items():
        _collect(started, running[i], results[i], hosts[group[i].receiver], group[i].ports)
    after = snapshot(by_node, hosts)
    for inc, r in zip(group, results):
        for end in [inc.receiver_name, *inc.sender_names]:
            d = deltas(before, after, end, prio)
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
    results = [IncastResult(inc.name, inc.leaf, inc.receiver_name, inc.sender_names, tos=inc.tos) for inc in incasts]
    rounds = _rounds(incasts)
    for k, rnd in enumerate(rounds, 1):
        if progress:
            progress(f"incast round {k}/{len(rounds)}: " + ", ".join(incasts[i].name for i in rnd))
        _run_round([incasts[i] for i in rnd], [results[i] for i in rnd], hosts, expect.priority)
    ok = all([judge_incast(r, expect) for r in results])
    return ok, results

