"""Which node pairs to test, and in which waves they can run at the same time.

Rail-optimised fabric: every rail has its own leaf (or leaf port group), so a wrong setting on
one rail's leaf port shows only in pairs on that rail. :func:`select_pairs` therefore tests
EVERY rail the nodes have (NIC-disjoint same-rail pairs through the leaf), plus a few
cross-rail pairs whose path crosses the spine. :func:`schedule_waves` groups pairs that share
no NIC: one NIC runs one perftest at a time, pairs of one wave run concurrently.
"""

from __future__ import annotations

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
    """

    client: str
    client_nic: object
    server: str
    server_nic: object
    path: str
    mtu_allowed: int | None = None

    @property
    def name(self) -> str:
        """``node01:mlx5_0->node02:mlx5_0``."""
        return f"{self.client}:{self.client_nic.rdma_device}->{self.server}:{self.server_nic.rdma_device}"

    @property
    def nics(self) -> tuple[str, str]:
        """Both ends as ``node:rdma_device`` (``("node01:mlx5_0", "node02:mlx5_0")``)."""
        return f"{self.client}:{self.client_nic.rdma_device}", f"{self.server}:{self.server_nic.rdma_device}"


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


def _port_mtu(switches: dict[str, Device], nic) -> list[int]:
    """The inventory's MTU of the leaf port ``nic`` is cabled to ([] when the inventory has none)."""
    from tuning.model.settings import expand_ports

    sw = switches.get(nic.switch)
    if sw is None or nic.switch_port not in expand_ports(sw.spec.ports):
        return []
    return [sw.spec.port_mtu_overrides.get(nic.switch_port, sw.spec.port_mtu)]


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
    if switches is None:
        return out
    sws, mtu = {s.name: s for s in switches}, {d.name: d.spec.mtu for d in nodes}
    return [replace(p, mtu_allowed=allowed_roce_mtu(
        [mtu[p.client], mtu[p.server]], _port_mtu(sws, p.client_nic) + _port_mtu(sws, p.server_nic))) for p in out]


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
