"""Which node pairs to test: same-rail pairs through one leaf, and cross-rail pairs whose
path crosses the spine (rail-optimised fabric: different rails sit on different leaves).
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


def select_pairs(nodes: list[Device], rails: tuple[int, ...] = (0, 1), spine_pairs: int = 2) -> list[Pair]:
    """Same-rail pairs (node1-node2, node3-node4, ... on each rail in ``rails``) and up to
    ``spine_pairs`` cross-rail pairs (first rail of one node to the second rail of another).

    Returns:
        Pairs in a stable order; empty with fewer than 2 nodes.
    """
    def nic(dev: Device, rail: int):
        return next((n for n in dev.spec.nics if n.rail == rail), None)

    out: list[Pair] = []
    for rail in rails:
        for a, b in zip(nodes[0::2], nodes[1::2]):
            na, nb = nic(a, rail), nic(b, rail)
            if na and nb:
                out.append(Pair(a.name, na, b.name, nb, "leaf" if na.switch == nb.switch else "spine"))
    if len(rails) >= 2 and len(nodes) >= 2:
        half = max(1, len(nodes) // 2)
        for k in range(min(spine_pairs, len(nodes) - half)):
            a, b = nodes[k], nodes[k + half]
            ra, rb = (rails[0], rails[1]) if k % 2 == 0 else (rails[1], rails[0])
            na, nb = nic(a, ra), nic(b, rb)
            if na and nb:
                out.append(Pair(a.name, na, b.name, nb, "leaf" if na.switch == nb.switch else "spine"))
    return out
