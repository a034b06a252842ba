"""Which node pairs to test, and in which waves they can run at the same time.

Rail-optimised fabric: every rail has its own leaf (or leaf port group), so a wrong setting on
one rail's leaf port shows only in pairs on that rail. :func:`select_pairs` therefore tests
EVERY rail the nodes have (NIC-disjoint same-rail pairs through the leaf), plus a few
cross-rail pairs whose path crosses the spine. :func:`schedule_waves` groups pairs that share
no NIC: one NIC runs one perftest at a time, pairs of one wave run concurrently.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuning.inventory import Device


@dataclass(frozen=True)
class Pair:
    """One RDMA test: client NIC -> server NIC.

    Attributes:
        client, server: node names.  client_nic, server_nic: NicSpec of each end.
        path: ``leaf`` (same switch) or ``spine`` (through the spine).
    """

    client: str
    client_nic: object
    server: str
    server_nic: object
    path: str

    @property
    def name(self) -> str:
        """``node01:mlx5_0->node02:mlx5_0``."""
        return f"{self.client}:{self.client_nic.rdma_device}->{self.server}:{self.server_nic.rdma_device}"

    @property
    def nics(self) -> tuple[str, str]:
        """Both ends as ``node:rdma_device`` (``("node01:mlx5_0", "node02:mlx5_0")``)."""
        return f"{self.client}:{self.client_nic.rdma_device}", f"{self.server}:{self.server_nic.rdma_device}"


def _nic(dev: Device, rail: int):
    return next((n for n in dev.spec.nics if n.rail == rail), None)


def _pair(a: Device, na, b: Device, nb) -> Pair:
    return Pair(a.name, na, b.name, nb, "leaf" if na.switch == nb.switch else "spine")


def node_rails(nodes: list[Device]) -> tuple[int, ...]:
    """Every rail any of ``nodes`` has a NIC on, ascending (``(0, 1, ..., 7)`` on a DGX-class SU)."""
    return tuple(sorted({n.rail for d in nodes for n in d.spec.nics}))


def rail_pairs(nodes: list[Device], rail: int) -> list[Pair]:
    """NIC-disjoint pairs on one rail: node1-node2, node3-node4, ... among the nodes with a NIC
    on ``rail`` (in ``nodes`` order); an odd node out is paired with the first of them, so every
    NIC on the rail is tested. Empty with fewer than 2 such nodes."""
    on = [(d, _nic(d, rail)) for d in nodes]
    on = [(d, n) for d, n in on if n is not None]
    out = [_pair(a, na, b, nb) for (a, na), (b, nb) in zip(on[0::2], on[1::2])]
    if len(on) % 2 and len(on) > 1:
        (a, na), (b, nb) = on[-1], on[0]
        out.append(_pair(a, na, b, nb))
    return out


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
            out.append(_pair(a, na, b, nb))
    return out


def select_pairs(nodes: list[Device], rails: tuple[int, ...] | None = None, spine_pairs: int = 2) -> list[Pair]:
    """Same-rail pairs on every rail in ``rails`` (None: every rail the nodes have, see
    :func:`rail_pairs`), then up to ``spine_pairs`` cross-rail pairs (see :func:`spine_pairs_for`).

    Returns:
        Pairs in a stable order (rail by rail, then the spine pairs); empty with fewer than 2
        nodes. The lab's 4 nodes x 8 rails give 8 x 2 + 2 = 18 pairs.
    """
    rails = node_rails(nodes) if rails is None else tuple(rails)
    out = [p for rail in rails for p in rail_pairs(nodes, rail)]
    return out + spine_pairs_for(nodes, rails, spine_pairs)


def schedule_waves(pairs: list[Pair]) -> list[list[int]]:
    """Group pair indexes into waves whose pairs share no NIC (first fit, in pair order).

    Returns:
        Waves of indexes into ``pairs`` (``[[0, 1, ..., 15], [16, 17]]`` for the lab's 18 pairs);
        every index appears exactly once, and no ``node:rdma_device`` twice within a wave.
    """
    waves: list[list[int]] = []
    busy: list[set[str]] = []
    for i, p in enumerate(pairs):
        ends = set(p.nics)
        w = next((k for k, used in enumerate(busy) if not used & ends), None)
        if w is None:
            waves.append([])
            busy.append(set())
            w = len(waves) - 1
        waves[w].append(i)
        busy[w] |= ends
    return waves
