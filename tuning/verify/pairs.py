"""Which node pairs to test, and in which rounds ("waves") they can run at the same time.

Rail-optimised fabric: every rail has its own leaf (or leaf port group), so a wrong setting on
one rail's leaf port shows only in pairs on that rail. :func:`select_pairs` therefore tests
EVERY rail the nodes have (NIC-disjoint same-rail pairs, across leaves where a rail spans
several: they cross the spine too), plus a few cross-rail pairs whose path crosses the spine.
:func:`schedule_waves` groups pairs that share no NIC: one NIC runs one perftest at a time,
pairs of one wave run concurrently; :func:`build_rounds` also limits the pairs per node, and
:func:`round_robin` meets every pair of nodes once. The fabric-wide schedule (every leaf uplink
and spine covered, TCP ports per node) is :mod:`tuning.verify.schedule`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from tuning.inventory import Device


@dataclass(frozen=True)
class Pair:
    """One RDMA test: client NIC -> server NIC.

    Attributes:
        client, server: node names.  client_nic, server_nic: NicSpec of each end.
        path: ``leaf`` (same switch) or ``spine`` (through the spine).
        mtu_allowed: the RoCE active MTU (bytes) every hop of the inventory allows (both netdev
            MTUs and both leaf ports, see :func:`allowed_roce_mtu`); None when not known.
        route: the switch-to-switch hops the schedule counts this pair on, as
            ``("leaf01:swp31", "spine01", "leaf02:swp31")`` (client leaf uplink, spine, server
            leaf uplink); ``()`` for a pair within one leaf or when the uplinks are unknown
            (see :func:`tuning.verify.schedule.plan_schedule`; ECMP picks the real one).
        tos: the ToS byte both ends' QPs set (perftest ``--tclass``: the GRH traffic class, DSCP << 2
            | ECN), the client node's RoCE ToS (:func:`flow_tos`), so the test rides the tuned
            lossless class as a job's traffic does; None when the node leaves its QoS alone
            (traffic class 0).
    """

    client: str
    client_nic: object
    server: str
    server_nic: object
    path: str
    mtu_allowed: int | None = None
    route: tuple[str, ...] = ()
    tos: int | None = None

    @property
    def name(self) -> str:
        """``node01:mlx5_0->node02:mlx5_0``."""
        return f"{self.client}:{self.client_nic.rdma_device}->{self.server}:{self.server_nic.rdma_device}"

    @property
    def nics(self) -> tuple[str, str]:
        """Both ends as ``node:rdma_device`` (``("node01:mlx5_0", "node02:mlx5_0")``)."""
        return f"{self.client}:{self.client_nic.rdma_device}", f"{self.server}:{self.server_nic.rdma_device}"


#: the most concurrent tests per node by default: a DGX-class node has one NIC per rail, each
#: behind its own PCIe switch, and each running test holds one SSH channel on each of its nodes,
#: which OpenSSH limits to 10 per connection (``MaxSessions``)
MAX_PER_NODE = 8
#: RoCE path MTUs, largest first (the IB MTU enum perftest's ``Mtu`` line prints)
ROCE_MTUS = (4096, 2048, 1024, 512, 256)
#: netdev MTU minus this is the largest RoCE MTU the kernel allows: ``iboe_get_mtu()`` in
#: linux include/rdma/ib_addr.h subtracts GRH 40 + UDP 8 + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4
#: (older kernels omit UDP: 88; we take the larger, so we never expect more than a kernel gives)
IBOE_OVERHEAD_BYTES = 96
#: a RoCEv2 frame is the RoCE MTU plus Eth 14 + IPv4 20 + UDP 8 + BTH 12 + RETH 16 + ICRC 4 + FCS 4
ROCE_FRAME_BYTES = 78


def allowed_roce_mtu(netdev_mtus: list[int], port_mtus: list[int]) -> int:
    """The largest RoCE MTU that every hop allows: at most ``min(netdev MTU) - 96`` (bytes), and
    every switch port's MTU at least that plus the 78-byte RoCEv2 frame.

    Returns:
        4096 for netdev 9000 and ports 9216; 1024 for netdev 1500; 256 at the least.
    """
    for m in ROCE_MTUS:
        if m <= min(netdev_mtus) - IBOE_OVERHEAD_BYTES and all(p >= m + ROCE_FRAME_BYTES for p in port_mtus):
            return m
    return ROCE_MTUS[-1]


def _port_mtu(switches: dict[str, Device], nic, listed: dict[str, set[str]]) -> list[int]:
    """The inventory's MTU of the leaf port ``nic`` is cabled to ([] when the inventory has none);
    ``listed`` caches each switch's expanded ``ports``."""

    sw = switches.get(nic.switch)
    if sw is not None and sw.name not in listed:
        listed[sw.name] = set(sw.spec.port_names())
    if sw is None or nic.switch_port not in listed[sw.name]:
        return []
    return [sw.spec.port_mtu_overrides.get(nic.switch_port, sw.spec.port_mtu)]


def _nic(dev: Device, rail: int):
    return next((n for n in dev.spec.nics if n.rail == rail), None)


def flow_tos(dev: Device) -> int | None:
    """The ToS byte of a node's RoCE traffic, as its profile tunes it (``nic_qos.roce_tos``: DSCP 26
    -> 106, the value ``cma_roce_tos`` gets); None when the node leaves its QoS alone."""
    qos = getattr(dev.spec, "nic_qos", None)
    return None if qos is None else qos.roce_tos


def pair_of(a: Device, na, b: Device, nb) -> Pair:
    """The pair client ``a``/NIC ``na`` -> server ``b``/NIC ``nb``; path ``leaf`` when both NICs share a switch."""
    return Pair(a.name, na, b.name, nb, "leaf" if na.switch == nb.switch else "spine", tos=flow_tos(a))


def node_rails(nodes: list[Device]) -> tuple[int, ...]:
    """Every rail any of ``nodes`` has a NIC on, ascending (``(0, 1, ..., 7)`` on a DGX-class SU)."""
    return tuple(sorted({n.rail for d in nodes for n in d.spec.nics}))


def interleave_by_leaf(on: list[tuple[Device, object]]) -> list[tuple[Device, object]]:
    """``(node, NIC)`` entries reordered one leaf at a time (first entry of every leaf in order
    of first appearance, then every second entry, ...), so neighbours sit on different leaves
    while two leaves still have entries. Entries all on one leaf keep their order."""
    by_leaf: dict[str, list] = {}
    for d, n in on:
        by_leaf.setdefault(n.switch, []).append((d, n))
    queues = list(by_leaf.values())
    return [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]


def pair_up(on: list[tuple[Device, object]], spare: list[tuple[Device, object]] = ()) -> list[Pair]:
    """NIC-disjoint pairs of ``(node, NIC)`` entries: neighbours 1-2, 3-4, ... after
    :func:`interleave_by_leaf`. An odd one out pairs with the first entry on another leaf, else
    the first of ``spare`` (NICs outside the set: another leaf first), else the first entry, so
    every entry is tested. Empty with a single entry and no spare."""
    seq = interleave_by_leaf(on)
    out = [pair_of(a, na, b, nb) for (a, na), (b, nb) in zip(seq[0::2], seq[1::2])]
    if len(seq) % 2:
        a, na = seq[-1]
        others = [e for e in seq[:-1] if e[1].switch != na.switch]
        spare = sorted(spare, key=lambda e: e[1].switch == na.switch)
        partner = (others or list(spare) or seq[:-1] or [None])[0]
        if partner is not None:
            out.append(pair_of(a, na, *partner))
    return out


def rail_pairs(nodes: list[Device], rail: int) -> list[Pair]:
    """NIC-disjoint pairs on one rail (:func:`pair_up` of the nodes' NICs on ``rail``, in
    ``nodes`` order): node1-node2, node3-node4, ... on a rail within one leaf; across leaves where
    the rail spans several; an odd node out is paired with the first of them, so every NIC on the
    rail is tested. Empty with fewer than 2 such nodes."""
    on = [(d, _nic(d, rail)) for d in nodes]
    return pair_up([(d, n) for d, n in on if n is not None])


def spine_pairs_for(nodes: list[Device], rails: tuple[int, ...], count: int) -> list[Pair]:
    """Up to ``count`` cross-rail pairs: node k (rail ``rails[0]``) -> node k + n/2 (rail
    ``rails[1]``), the rails swapped on every other pair, so both directions cross the spine."""
    if len(rails) < 2 or len(nodes) < 2:
        return []
    half = max(1, len(nodes) // 2)
    out = []
    for k in range(min(count, len(nodes) - half)):
        a, b = nodes[k], nodes[k + half]
        ra, rb = (rails[0], rails[1]) if k % 2 == 0 else (rails[1], rails[0])
        na, nb = _nic(a, ra), _nic(b, rb)
        if na and nb:
            out.append(pair_of(a, na, b, nb))
    return out


def select_pairs(nodes: list[Device], rails: tuple[int, ...] | None = None, spine_pairs: int = 2,
                 switches: list[Device] | None = None) -> list[Pair]:
    """Same-rail pairs on every rail in ``rails`` (None: every rail the nodes have, see
    :func:`rail_pairs`), then up to ``spine_pairs`` cross-rail pairs (see :func:`spine_pairs_for`).

    Args:
        switches: the inventory's switches; with them each pair carries ``mtu_allowed``.

    Returns:
        Pairs in a stable order (rail by rail, then the spine pairs); empty with fewer than 2
        nodes. The lab's 4 nodes x 8 rails give 8 x 2 + 2 = 18 pairs.
    """
    rails = node_rails(nodes) if rails is None else tuple(rails)
    out = [p for rail in rails for p in rail_pairs(nodes, rail)]
    out += spine_pairs_for(nodes, rails, spine_pairs)
    return out if switches is None else with_mtu_allowed(out, nodes, switches)


def with_mtu_allowed(pairs: list[Pair], nodes: list[Device], switches: list[Device]) -> list[Pair]:
    """``pairs`` with ``mtu_allowed`` set from the nodes' MTUs and their leaf ports' MTUs
    (:func:`allowed_roce_mtu`); None (not judged) where an end leaves its MTU alone (``mtu`` unset:
    the inventory does not say what it is). ``nodes`` must hold every node the pairs name."""
    sws, mtu, listed = {s.name: s for s in switches}, {d.name: d.spec.mtu for d in nodes}, {}

    def allowed(p: Pair) -> int | None:
        ends = [mtu[p.client], mtu[p.server]]
        if None in ends:
            return None
        return allowed_roce_mtu(ends, _port_mtu(sws, p.client_nic, listed) + _port_mtu(sws, p.server_nic, listed))
    return [replace(p, mtu_allowed=allowed(p)) for p in pairs]


def schedule_waves(pairs: list[Pair]) -> list[list[int]]:
    """Group pair indexes into waves whose pairs share no NIC (first fit, in pair order): the
    rounds of :func:`build_rounds` without a per-node limit.

    Returns:
        Waves of indexes into ``pairs`` (``[[0, 1, ..., 15], [16, 17]]`` for the lab's 18 pairs);
        every index appears exactly once, and no ``node:rdma_device`` twice within a wave.
    """
    return build_rounds(pairs, per_node=None)


def default_per_node(pairs: list[Pair]) -> int:
    """The most NICs any node uses in ``pairs``, at most :data:`MAX_PER_NODE` (1 when empty)."""
    used: dict[str, set[str]] = {}
    for p in pairs:
        used.setdefault(p.client, set()).add(p.client_nic.rdma_device)
        used.setdefault(p.server, set()).add(p.server_nic.rdma_device)
    return max(1, min(MAX_PER_NODE, max(map(len, used.values()), default=1)))


def build_rounds(pairs: list[Pair], per_node: int | None = None) -> list[list[int]]:
    """Pair indexes in rounds, first fit in pair order: no NIC twice in a round, no node in more
    than ``per_node`` pairs of a round (None: no node limit).

    Returns:
        ``[[0, ..., 15], [16, 17]]`` for the lab's 18 pairs; every index exactly once.

    Raises:
        ValueError: ``per_node`` below 1.
    """
    if per_node is not None and per_node < 1:
        raise ValueError(f"per_node {per_node}: at least 1 test per node")
    rounds: list[list[int]] = []
    busy: list[set[str]] = []
    load: list[Counter] = []
    for i, p in enumerate(pairs):
        ends = set(p.nics)
        ok = (lambda k: not busy[k] & ends) if per_node is None else (
            lambda k: not busy[k] & ends and load[k][p.client] < per_node and load[k][p.server] < per_node)
        k = next((k for k in range(len(rounds)) if ok(k)), None)
        if k is None:
            rounds.append([])
            busy.append(set())
            load.append(Counter())
            k = len(rounds) - 1
        rounds[k].append(i)
        busy[k] |= ends
        load[k].update((p.client, p.server))
    return rounds


def rounds_upper_bound(pairs: list[Pair], per_node: int | None = None) -> int:
    """An upper bound on ``len(build_rounds(pairs, per_node))``. First fit opens a new round for a
    pair only when every earlier round is blocked by one of its NICs (at most ``d - 1`` rounds
    each, ``d`` = the NIC's pair count) or holds ``per_node`` other pairs of one of its nodes
    while its own NIC is free, which needs the node to use more than ``per_node`` NICs (then at
    most ``(P - 1) // per_node`` rounds, ``P`` = the node's pair count). The bound is the max over
    pairs of 1 + those four terms: ``2 D - 1`` (D: the most pairs of one NIC) when no node uses
    more than ``per_node`` NICs, the bound of greedy edge colouring.
    """
    deg, node, nics = Counter(), Counter(), {}
    for p in pairs:
        deg.update(p.nics)
        node.update((p.client, p.server))
        for end in p.nics:
            nics.setdefault(end.split(":")[0], set()).add(end)

    def full(n: str) -> int:
        return 0 if per_node is None or len(nics[n]) <= per_node else (node[n] - 1) // per_node

    return max((deg[a] + deg[b] - 1 + full(p.client) + full(p.server) for p in pairs for a, b in [p.nics]), default=0)


def round_robin(nodes: list[Device], rails: tuple[int, ...] | None = None) -> list[list[Pair]]:
    """Every pair of ``nodes`` once (the circle method): N - 1 rounds for N even, N rounds for N
    odd (each node sits one round out). Two nodes meet on every rail in ``rails`` (None: all)
    both have, so a round uses each NIC once; the client side alternates.

    Returns:
        One list of pairs per round.
    """
    rails = node_rails(nodes) if rails is None else tuple(rails)
    nics = [{n.rail: n for n in d.spec.nics} for d in nodes]
    ids: list[int | None] = list(range(len(nodes))) + ([None] if len(nodes) % 2 else [])
    out = []
    for r in range(len(ids) - 1):
        rnd = []
        for i in range(len(ids) // 2):
            a, b = ids[i], ids[-1 - i]
            if a is None or b is None:
                continue
            if (r + i) % 2:
                a, b = b, a
            rnd += [pair_of(nodes[a], nics[a][k], nodes[b], nics[b][k]) for k in rails if k in nics[a] and k in nics[b]]
        out.append(rnd)
        ids = [ids[0], ids[-1], *ids[1:-1]]
    return out
