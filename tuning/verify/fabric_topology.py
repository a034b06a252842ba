"""The fabric above the nodes for the verification schedule: leaves, spines and the uplinks
between them (:func:`topology_of`).

The inventory gives every NIC's leaf (``switch``, ``switch_port``) and rail. A leaf is a switch
some NIC is cabled to, a spine a switch no NIC is cabled to. Uplinks, first source that has them:

1. ``links`` passed by the caller (cabling read elsewhere: LLDP neighbours, a cabling plan, the
   lab's ``tuning.lab.fabric.Link`` list);
2. the inventory's cabling: a leaf's ``uplinks`` key (leaf port -> ``SPINE:PORT``,
   :mod:`tuning.model.cabling`), for each leaf that has it;
3. assumed, for a leaf without it (:attr:`Topology.assumption` says so, and for how many leaves):
   its listed ports no NIC is cabled to, in port order, the j-th to spine ``j mod S`` of the S
   spines in inventory order: the usual two-tier Clos where every leaf has the same number of
   links to every spine (the lab: leaf01/leaf02 ``swp31`` -> spine01, as
   ``tuning.lab.fabric.default_fabric`` cables it). A fabric cabled otherwise (rail planes, a
   leaf that reaches only some spines, uneven cabling) must give its cabling, or the schedule
   covers uplinks and spines on routes that do not exist.

Without spines in the inventory nothing is known above the leaves: no uplink is assumed, and
leaves are taken as connected.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tuning.inventory import Device
from tuning.model.cabling import inventory_links


@dataclass(frozen=True)
class Uplink:
    """One leaf-to-spine cable, named by its leaf end (``leaf01:swp31``); ``spine_port`` where the
    cabling names it (None where assumed)."""

    leaf: str
    port: str
    spine: str
    spine_port: str | None = None

    @functools.cached_property
    def name(self) -> str:
        """``leaf01:swp31`` (made once: a schedule counts pairs by it hundreds of thousands of times)."""
        return f"{self.leaf}:{self.port}"


class Topology:
    """Leaves, spines and the uplinks between them, as a networkx multigraph (switches as
    vertices, one edge per uplink keyed by its leaf port).

    Attributes:
        graph: ``nx.MultiGraph``; vertex attribute ``tier`` is ``leaf`` or ``spine``.
        leaves: switches a NIC is cabled to, in order of first appearance.
        spines: switches no NIC is cabled to, in inventory order.
        assumed: the leaves whose uplinks were assumed (rule 3 of the module docstring).
        derived: any leaf's uplinks were assumed.
        assumption: one line saying where the uplinks come from (printed with a schedule).
    """

    def __init__(self, leaves: list[str], spines: list[str], uplinks: list[Uplink], assumed: list[str],
                 given: str = "the inventory's cabling (the leaves' uplinks: key)"):
        import networkx as nx  # here, not at the top: a CLI run that verifies nothing never pays ~0.15 s for it

        self.leaves, self.spines, self.assumed = leaves, spines, assumed
        self.derived = bool(assumed)
        self.assumption = _assumption(len(leaves), spines, assumed, given)
        self.graph = nx.MultiGraph()
        self.graph.add_nodes_from(leaves, tier="leaf")
        self.graph.add_nodes_from(spines, tier="spine")
        self._of: dict[tuple[str, str | None], list[Uplink]] = {}
        for u in uplinks:
            self.graph.add_edge(u.leaf, u.spine, key=u.port, uplink=u)
            for k in ((u.leaf, None), (u.leaf, u.spine), (u.spine, None)):
                self._of.setdefault(k, []).append(u)
        self._spines = {v: list(self.graph.adj[v]) for v in self.graph}  # fixed once built: read often
        self._spine_sets = {leaf: set(self.spines_of(leaf)) for leaf in leaves}
        self._common: dict[tuple[str, str], list[str]] = {}

    def uplinks(self) -> list[Uplink]:
        """Every uplink, leaf by leaf in port order."""
        return [u for leaf in self.leaves for u in self.uplinks_of(leaf)]

    def uplinks_of(self, switch: str, spine: str | None = None) -> list[Uplink]:
        """The uplinks of a leaf (to ``spine`` only, when given) in port order, or of a spine."""
        return self._of.get((switch, spine), [])

    def spines_of(self, leaf: str) -> list[str]:
        """The spines ``leaf`` has an uplink to, in the order of its uplinks."""
        return list(self._spines.get(leaf, ()))

    def leaves_of(self, spine: str) -> list[str]:
        """The leaves with an uplink to ``spine``."""
        return list(self._spines.get(spine, ()))

    def common_spines(self, a: str, b: str) -> list[str]:
        """Spines both leaves have an uplink to (a route ``a -> spine -> b``), in ``a``'s order
        (computed once per pair of leaves: a schedule asks for the same pairs thousands of times)."""
        key = (a, b)
        if key not in self._common:
            other = self._spine_sets.get(b, set())
            self._common[key] = [s for s in self._spines.get(a, ()) if s in other]
        return list(self._common[key])

    def connected(self, a: str, b: str) -> bool:
        """Whether NICs on leaves ``a`` and ``b`` can reach each other: the same leaf, a common
        spine, or no spine in the inventory (nothing is known above the leaves)."""
        return a == b or not self.spines or bool(self.common_spines(a, b))


def _assumption(n_leaves: int, spines: list[str], assumed: list[str], given: str) -> str:
    """The line :attr:`Topology.assumption` holds."""
    if not spines:
        return "no spine in the inventory: leaves taken as connected, no uplink to cover"
    if not assumed:
        return f"uplinks from {given}, every leaf"
    head = f"uplinks from {given}, {n_leaves - len(assumed)} of {n_leaves} leaves; " if len(assumed) < n_leaves \
        else "no uplink cabling in the inventory (a leaf's uplinks: key); "
    return (head + f"assumed for {len(assumed)} leaves: a leaf's listed ports no NIC is cabled to, the j-th "
            f"to spine j mod {len(spines)} of the inventory's spines")


def _given(links, cabled: dict[str, set[str]], spines: list[str]) -> list[Uplink]:
    ups, spines = [], set(spines)
    for link in links:
        leaf, port, spine, *far = (link.a, link.a_port, link.b, link.b_port) if hasattr(link, "a") else tuple(link)
        if leaf not in cabled or spine not in spines:
            raise ValueError(f"uplink {leaf}:{port} -> {spine}: not a leaf (NICs cabled) to a spine (no NIC)")
        ups.append(Uplink(leaf, port, spine, far[0] if far else None))
    return ups


def topology_of(nodes: list[Device], switches: list[Device], links=None) -> Topology:
    """The topology of an inventory (rules: module docstring).

    Args:
        nodes: every node (their NICs name the leaves).  switches: every switch (their
            ``uplinks`` are the inventory's cabling).
        links: the uplink cabling where known from elsewhere: ``(leaf, leaf_port, spine[,
            spine_port])`` tuples or ``tuning.lab.fabric.Link`` objects; None: the inventory's,
            assumed for a leaf without it.

    Raises:
        ValueError: a link whose leaf end is not a leaf or whose other end is not a spine.
    """
    cabled: dict[str, set[str]] = {}
    for d in nodes:
        for n in d.spec.nics:
            cabled.setdefault(n.switch, set()).add(n.switch_port)
    leaves = list(cabled)
    spines = [s.name for s in switches if s.name not in cabled]
    if links is not None:
        return Topology(leaves, spines, _given(links, cabled, spines), [], given="the cabling given")
    ups = _given(inventory_links([s for s in switches if s.name in cabled]), cabled, spines)
    have = {u.leaf for u in ups}
    by_name = {s.name: s for s in switches}
    assumed = [leaf for leaf in leaves if leaf not in have and leaf in by_name and spines]
    for leaf in assumed:
        free = [p for p in by_name[leaf].spec.port_names() if p not in cabled[leaf]]
        ups += [Uplink(leaf, p, spines[j % len(spines)]) for j, p in enumerate(free)]
    return Topology(leaves, spines, ups, assumed)
