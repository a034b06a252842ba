"""The verification schedule: which pairs prove a fabric, in which rounds they run, on which ports.

Topology (:func:`tuning.verify.fabric_topology.topology_of`, re-exported here): leaves, spines
and the uplinks between them, from the cabling given, the inventory's (a leaf's ``uplinks``) or,
where a leaf has none, assumed (``uplink j -> spine j mod S``; ``Topology.assumption`` says which).

Coverage (:func:`plan_schedule`): every NIC in scope in at least one same-rail pair (a rail that
spans several leaves is paired across them, see :func:`tuning.verify.pairs.pair_up`), the
lab's cross-rail spine pairs where their leaves share a spine, then one more pair per uplink
or spine still uncovered. Each cross-leaf pair is counted on one nominal route (client leaf
uplink, spine, server leaf uplink), the least used of its leaves' common spines. On a real
fabric ECMP hashes a flow onto one of the equal-cost uplinks, so "every uplink crossed" holds
for the nominal routes; on the wire each leaf sends at least as many cross-leaf flows as it has
uplinks, spread by the hash.

Rounds (:func:`tuning.verify.pairs.build_rounds`, first fit): a NIC in at most one pair per
round (one perftest per NIC at a time, or the tests measure each other), a node in at most
``per_node`` pairs per round (default: the node's NIC count, at most
:data:`tuning.verify.pairs.MAX_PER_NODE`, 8: one NIC per rail, each behind its own PCIe switch
on a DGX-class node, and one SSH channel per running test on each of its nodes, which OpenSSH
limits to 10 per connection). Rounds run one after the other, the pairs of a round all at once
(up to :data:`WORKER_CAP` at a time on the controller).

Ports (:func:`allocate_ports`): perftest's server listens on one TCP port per test
(``-p PORT``, latency on ``PORT + 1``) on every address of its node, so two servers on one node
need two ports and servers on different nodes never collide. Ports are per server node: its
k-th test of the schedule takes ``PORT_BASE + 2 (k mod PORT_SLOTS)``, so they never pass
:data:`PORT_LIMIT` whatever the fleet size, and a port is used again on a node only after every
other one (a perftest server left waiting by a failed client keeps its port).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace

from tuning.inventory import Device
from tuning.verify.fabric_topology import Topology, Uplink, topology_of  # noqa: F401  (re-exported)
from tuning.verify.pairs import (Pair, build_rounds, flow_tos, default_per_node, pair_up, round_robin, spine_pairs_for,
                                 with_mtu_allowed)

#: perftest's default TCP port; the first port of every node
PORT_BASE = 18515
#: ports stay below this: Linux's ephemeral range (``net.ipv4.ip_local_port_range``) starts
#: at 32768, where a listening perftest could collide with a client socket's source port
PORT_LIMIT = 32768
#: (bandwidth, latency) port pairs per node: 7126
PORT_SLOTS = (PORT_LIMIT - PORT_BASE) // 2
#: the most tests the controller drives at once: one thread each, blocked on an SSH channel
WORKER_CAP = 512


@dataclass
class Coverage:
    """What a schedule proves: for each wanted NIC (``node01:mlx5_0``), uplink (``leaf01:swp31``)
    and spine, the number of pairs that test it (0: not covered), and why anything wanted cannot
    be covered (``uncoverable``: a NIC alone on its rail, a spine without uplinks)."""

    nics: dict[str, int] = field(default_factory=dict)
    uplinks: dict[str, int] = field(default_factory=dict)
    spines: dict[str, int] = field(default_factory=dict)
    uncoverable: list[str] = field(default_factory=list)

    @property
    def missing(self) -> list[str]:
        """Every wanted NIC, uplink or spine no pair covers."""
        return [k for d in (self.nics, self.uplinks, self.spines) for k, v in d.items() if not v]

    def summary(self) -> str:
        """``32/32 NICs, 2/2 uplinks, 1/1 spines covered``."""
        part = [f"{sum(1 for v in d.values() if v)}/{len(d)} {what}"
                for what, d in (("NICs", self.nics), ("uplinks", self.uplinks), ("spines", self.spines))]
        return ", ".join(part) + " covered"


@dataclass
class Schedule:
    """Pairs, the rounds they run in and their TCP ports.

    Attributes:
        pairs: every pair, each with its nominal ``route``.  rounds: indexes into ``pairs`` per
            round (:func:`tuning.verify.pairs.build_rounds`).  ports: pair i's bandwidth test port (latency: + 1).
        per_node: the most pairs a node takes part in per round.  coverage: what it proves.
    """

    pairs: list[Pair]
    rounds: list[list[int]]
    ports: list[int]
    per_node: int
    coverage: Coverage
    topology: Topology


def allocate_ports(pairs: list[Pair], rounds: list[list[int]]) -> list[int]:
    """The TCP port of each pair's bandwidth test (its latency test: + 1): the server node's
    k-th test of the schedule, in round order, takes ``PORT_BASE + 2 (k mod PORT_SLOTS)``.

    Returns:
        One port per pair, 18515..32765 (its latency test's at most 32766); within a round no
        node's port twice (a round holds at most ``per_node`` <= :data:`PORT_SLOTS` tests per node).
    """
    ports = [0] * len(pairs)
    seen: Counter = Counter()
    for rnd in rounds:
        for i in rnd:
            k = seen[pairs[i].server]
            seen[pairs[i].server] += 1
            ports[i] = PORT_BASE + 2 * (k % PORT_SLOTS)
    return ports


def round_workers(n_pairs: int, cap: int = WORKER_CAP) -> int:
    """Threads for a round of ``n_pairs``: all of them at once, at most ``cap`` (and at least 1)."""
    return max(1, min(n_pairs, cap))


_NONE: dict[str, int] = {}


class _Router:
    """Counts pairs per uplink (``up``, by name) and per spine, and gives each cross-leaf pair its
    least used route: the common spine whose least used uplink from each leaf (``low``: leaf ->
    spine -> pairs) carries the fewest pairs together, the first such in the client leaf's uplink
    order: leaves paired lap by lap (:func:`tuning.verify.pairs.interleave_by_leaf`) then move to
    their next spine in step (10,000 nodes in rail planes: 192 uplinks left for :func:`_patch`,
    those of the 16-node last unit; breaking ties by spine use instead left 10,064)."""

    def __init__(self, topo: Topology):
        self.topo, self.up, self.spine = topo, Counter(), Counter()
        self.low: dict[str, dict[str, int]] = {}
        self._rails: dict[str, set[int]] = {}

    def rails(self, leaf: str, entries: dict[str, list]) -> set[int]:
        """The rails of ``entries[leaf]`` (cached: the entries do not change during a plan)."""
        if leaf not in self._rails:
            self._rails[leaf] = {n.rail for _, n in entries[leaf]}
        return self._rails[leaf]

    def least(self, leaf: str, spine: str) -> Uplink:
        return min(self.topo.uplinks_of(leaf, spine), key=lambda u: self.up[u.name])

    def take(self, a: Uplink, spine: str, b: Uplink) -> tuple[str, ...]:
        self.up.update((a.name, b.name))
        self.spine[spine] += 1
        for leaf in (a.leaf, b.leaf):
            self.low.setdefault(leaf, {})[spine] = self.up[self.least(leaf, spine).name]
        return a.name, spine, b.name

    def route(self, pair: Pair) -> Pair:
        """``pair`` with its route counted (unchanged within a leaf or without common spine)."""
        la, lb = pair.client_nic.switch, pair.server_nic.switch
        common = self.topo.common_spines(la, lb) if la != lb else []
        if not common:
            return pair
        a, b = self.low.get(la, _NONE), self.low.get(lb, _NONE)
        spine, best = common[0], None
        for s in common:  # the least used; ties: the first, so leaves stay in step
            n = a.get(s, 0) + b.get(s, 0)
            if best is None or n < best:
                spine, best = s, n
                if n == 0:
                    break  # nothing is below 0: the first unused spine wins, as min() would pick it
        return replace(pair, route=self.take(self.least(la, spine), spine, self.least(lb, spine)))


def _wanted(nodes: list[Device], scope: list[Device] | None, topo: Topology,
            rails) -> tuple[list, list[Uplink], list[str], dict[str, list]]:
    """(NIC entries, uplinks, spines) a schedule for ``scope`` must cover (None: all); leaf -> entries on ``rails``."""
    names = {d.name for d in scope} if scope is not None else None
    on_rails = [(d, n) for d in nodes for n in d.spec.nics if rails is None or n.rail in rails]
    nics = [(d, n) for d, n in on_rails if names is None or d.name in names or n.switch in names]
    leaves = {n.switch for _, n in nics} | (set(topo.leaves) if names is None else names & set(topo.leaves))
    ups = [u for u in topo.uplinks() if u.leaf in leaves or (names is not None and u.spine in names)]
    spines = list(dict.fromkeys([u.spine for u in ups] + [s for s in topo.spines if names is None or s in names]))
    entries: dict[str, list] = {}
    for d, n in on_rails:
        entries.setdefault(n.switch, []).append((d, n))
    return nics, ups, spines, entries


def _patch(router: _Router, target: Uplink, entries: dict[str, list], load: Counter) -> Pair | None:
    """A pair from a NIC behind ``target``'s leaf, over ``target``, to another leaf of its spine
    (one with an uncovered uplink there first; a NIC on the same rail, of another node, least
    used first); None without one.
    ``entries``: leaf -> the ``(node, NIC)`` entries that may take part."""
    others = [u for u in router.topo.uplinks_of(target.spine) if u.leaf != target.leaf and entries.get(u.leaf)]
    if not entries.get(target.leaf) or not others:
        return None
    d, n = min(entries[target.leaf], key=lambda e: load[f"{e[0].name}:{e[1].rdma_device}"])
    far = min(others, key=lambda u: (router.up[u.name] > 0, n.rail not in router.rails(u.leaf, entries)))
    same = [e for e in entries[far.leaf] if e[1].rail == n.rail] or entries[far.leaf]
    d2, n2 = min(same, key=lambda e: (e[0].name == d.name, load[f"{e[0].name}:{e[1].rdma_device}"]))
    return Pair(d.name, n, d2.name, n2, "spine", route=router.take(target, target.spine, far), tos=flow_tos(d))


def _patches(router: _Router, ups: list[Uplink], spines: list[str], entries: dict[str, list],
             load: Counter) -> list[Pair]:
    """One more pair (:func:`_patch`) per wanted uplink, then per wanted spine, still uncovered."""
    out: list[Pair] = []

    def add(target: Uplink) -> bool:
        p = _patch(router, target, entries, load)
        if p is not None:
            out.append(p)
            load.update(p.nics)
        return p is not None

    for u in ups:
        if not router.up[u.name]:
            add(u)
    for s in spines:
        if not router.spine[s]:
            next((True for u in router.topo.uplinks_of(s) if add(u)), False)
    return out


def plan_schedule(nodes: list[Device], switches: list[Device] | None = None, *, scope: list[Device] | None = None,
                  rails: tuple[int, ...] | None = None, all_pairs: bool = False, per_node: int | None = None,
                  links=None, spine_pairs: int = 2) -> Schedule:
    """The verification schedule of ``nodes`` (rules: module docstring).

    Args:
        nodes, switches: the whole inventory's (partners and routes may use any of them).
        scope: the devices to prove (a ``--limit`` selection or a batch): their NICs, the NICs
            cabled to a leaf in it, the uplinks of those leaves and of the spines in it. None: all.
        rails: only NICs on these rails, at both ends of every pair (None: every rail); an uplink
            no pair on them can cross is listed in ``coverage.uncoverable``.
        all_pairs: every pair of the scope's nodes on every rail, in N - 1 rounds (N odd: N)
            as :func:`tuning.verify.pairs.round_robin` (first fit keeps its rounds), instead of the covering pairs;
            pairs for uplinks no same-rail pair crosses come after them.
        per_node: the most pairs per node per round (None: :func:`tuning.verify.pairs.default_per_node`).
        links: the uplink cabling, see :func:`topology_of`.
        spine_pairs: cross-rail pairs through the spine added as :func:`select_pairs` does.

    Returns:
        A :class:`Schedule`; ``mtu_allowed`` is set on every pair when ``switches`` are given.
        The lab: 18 pairs (16 same-rail, 2 cross-rail through spine01) in 2 rounds.

    Raises:
        ValueError: ``per_node`` below 1, or ``links`` naming what is not a leaf or a spine.
    """
    topo = topology_of(nodes, switches or [], links)
    wanted, ups, spines, entries = _wanted(nodes, scope, topo, rails)
    router = _Router(topo)
    base = _every_pair(nodes, wanted, rails) if all_pairs else _covering(nodes, wanted, topo, spine_pairs)
    pairs = [router.route(p) for p in base]
    pairs += _patches(router, ups, spines, entries, Counter(e for p in pairs for e in p.nics))
    per_node = per_node or default_per_node(pairs)
    rounds = build_rounds(pairs, per_node)
    if switches:
        pairs = with_mtu_allowed(pairs, nodes, switches)
    cov = _coverage(pairs, wanted, ups, spines, topo)
    return Schedule(pairs, rounds, allocate_ports(pairs, rounds), per_node, cov, topo)


def _every_pair(nodes: list[Device], wanted: list, rails) -> list[Pair]:
    """Every pair of the wanted NICs' nodes on ``rails``, round after round of :func:`round_robin`."""
    names = {d.name for d, _ in wanted}
    return [p for rnd in round_robin([d for d in nodes if d.name in names], rails) for p in rnd]


def _covering(nodes: list[Device], wanted: list, topo: Topology, spine_pairs: int) -> list[Pair]:
    """Same-rail pairs of the wanted NICs (partners for an odd one from outside them), then the
    cross-rail pairs of :func:`spine_pairs_for` among the wanted nodes that do cross a spine."""
    out: list[Pair] = []
    keys = {(d.name, n.rdma_device) for d, n in wanted}
    by_rail: dict[int, list] = {}
    for d, n in wanted:
        by_rail.setdefault(n.rail, []).append((d, n))
    for rail, on in sorted(by_rail.items()):
        spare = [(d, n) for d in nodes for n in d.spec.nics if n.rail == rail and (d.name, n.rdma_device) not in keys] \
            if len(on) % 2 else []
        out += pair_up(on, spare)
    names = {d.name for d, _ in wanted}
    scoped = [d for d in nodes if d.name in names]
    have = tuple(sorted({n.rail for _, n in wanted}))
    out += [p for p in spine_pairs_for(scoped, have, spine_pairs)
            if p.path == "spine" and topo.connected(p.client_nic.switch, p.server_nic.switch)]
    return out


def _coverage(pairs: list[Pair], wanted: list, ups: list[Uplink], spines: list[str], topo: Topology) -> Coverage:
    nic_use = Counter(e for p in pairs for e in p.nics)
    hop_use = Counter(h for p in pairs for h in p.route)
    cov = Coverage(nics={f"{d.name}:{n.rdma_device}": nic_use[f"{d.name}:{n.rdma_device}"] for d, n in wanted},
                   uplinks={u.name: hop_use[u.name] for u in ups}, spines={s: hop_use[s] for s in spines})
    cov.uncoverable = [f"NIC {k}: no other NIC on its rail to pair with" for k, v in cov.nics.items() if not v]
    cov.uncoverable += [f"uplink {u.name}: no NIC (on the verified rails) behind another leaf of {u.spine}"
                        for u in ups if not cov.uplinks[u.name]]
    cov.uncoverable += [f"spine {s}: no uplink reaches it" for s in spines if not topo.leaves_of(s)]
    return cov


def expected_round_seconds(n_pairs: int, pair_s: float, cap: int = WORKER_CAP) -> float:
    """Seconds one round of ``n_pairs`` takes when each pair takes ``pair_s``: ``ceil(n / cap)``
    batches of :func:`round_workers` pairs."""
    return pair_s * math.ceil(n_pairs / round_workers(n_pairs, cap))
