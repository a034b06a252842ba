"""The InfiniBand lab's topology: the lab's HCAs on two leaf switches, as an ibsim net file.

ibsim (Debian ``ibsim-utils`` 0.10) reads a topology in the format ``ibnetdiscover`` prints
(``/usr/share/doc/ibsim-utils/net-examples``): one record per node, a header line
``Switch|Ca <ports> "<nodeid>" # "<node description>"`` then one line per cabled port
``[<port>] "<remote nodeid>"[<remote port>]`` (ibnetdiscover's ``# "<remote description>" lid <lid>
<width>x<speed>`` after it: ibsim takes the link's width and speed from it), the records separated by a blank line. Lines before the
records set the defaults of the ports that follow (``width=``, ``speed=``, ``extspeed=``: PortInfo
enable masks) and the GUID of the next node (``caguid=``, ``switchguid=``: an absolute base, the next
node of that kind gets exactly that GUID).

The lab: every NIC of every lab node is one single-port HCA (``node01-mlx5_0``, node description
``node01 mlx5_0`` as rdma-ndd sets it: ``%h %d``) cabled to its rail leaf at the port the RoCE lab
cables it to (``leaf01`` ``swp3`` -> port 3); ``leaf01`` and ``leaf02`` are joined by one ISL at the
leaves' uplink port. Every link is 4X HDR (ibsim 0.10 knows no NDR). The GUIDs are set, not left
to ibsim's counter: HCA node GUID ``0x0c42a103 00 00 kk ii`` (Mellanox OUI 0c:42:a1, node ``kk``, NIC
``ii``), its port 1 GUID the node GUID + 1 (ibsim: port GUID = node GUID + port number); leaf ``j``
``0xb83fd20300000 00j`` (switch port GUID = node GUID).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tuning.errors import InputError
from tuning.lab.fabric import Fabric, uplink_port

__all__ = ["IbHca", "IbTopology", "check_node_id", "net_file", "topology_for"]

#: a node id or description that reaches ibsim's parser, its console and OpenSM's files: no quote,
#: bracket, blank or shell character (ibsim cuts the id at the next ``"``; its NODEIDLEN is 65)
_NODE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: ports of a leaf: a QM8700-class HDR switch has 40; a larger lab gets the ports its cables need
SWITCH_PORTS = 40
HCA_GUID_BASE = 0x0C42A10300000000
SWITCH_GUID_BASE = 0xB83FD20300000000
#: PortInfo enable masks every port gets: LinkWidthEnabled 1X|4X (3), LinkSpeedEnabled SDR|DDR|QDR (7),
#: LinkSpeedExtEnabled FDR|EDR|HDR (7): each link comes up at 4X HDR
DEFAULTS = ("width=3", "speed=7", "extspeed=7")
#: each cable's width and speed as ibnetdiscover prints them after the remote end (ibsim reads them
#: back as the port's enable masks: ``4xHDR`` -> 1X|4X, SDR..QDR, FDR..HDR)
LINK = "4xHDR"


def check_node_id(value: str) -> str:
    """A node id as it may reach ibsim and OpenSM (``node01-mlx5_0``, ``leaf01``).

    Raises:
        InputError: anything else (quotes, blanks, brackets, more than 64 characters).
    """
    if not isinstance(value, str) or not _NODE_ID.fullmatch(value):
        raise InputError("fabric.json", "ib.node_id", f"{value!r} is not an IB lab node id "
                         "(a letter or digit, then up to 63 of [A-Za-z0-9_.-])")
    return value


@dataclass(frozen=True)
class IbHca:
    """One single-port HCA of the IB lab.

    Attributes:
        node: the lab node (``node01``).  device: its RDMA device (``mlx5_0``).  rail: 0..7.
        leaf / leaf_port: the leaf switch and port it is cabled to (``leaf01``, 3).
        node_guid: its NodeGUID; the port GUID is ``node_guid + 1``.
    """

    node: str
    device: str
    rail: int
    leaf: str
    leaf_port: int
    node_guid: int

    @property
    def node_id(self) -> str:
        """The ibsim node id, also the name the console takes: ``node01-mlx5_0``."""
        return f"{self.node}-{self.device}"

    @property
    def description(self) -> str:
        """The NodeDescription the diagnostics print: ``node01 mlx5_0``."""
        return f"{self.node} {self.device}"

    @property
    def port_guid(self) -> int:
        """GUID of port 1 (what ``partitions.conf`` names and ``iblinkinfo`` prints)."""
        return self.node_guid + 1


@dataclass(frozen=True)
class IbTopology:
    """The IB lab fabric: leaves (name -> (NodeGUID, port count)), HCAs and the leaf ISL port."""

    leaves: dict[str, tuple[int, int]]
    hcas: tuple[IbHca, ...]
    isl_port: int

    def hca(self, node_id: str) -> IbHca:
        """The HCA called ``node01-mlx5_0``. Raises KeyError naming the known ones."""
        for h in self.hcas:
            if h.node_id == node_id:
                return h
        raise KeyError(f"no HCA {node_id!r} in the IB lab; known: {', '.join(h.node_id for h in self.hcas)}")


def _port_number(port: str) -> int:
    m = re.fullmatch(r"swp([1-9][0-9]{0,2})", port)
    if not m:
        raise InputError("fabric.json", "nics.switch_port", f"{port!r} is not a leaf port swpN")
    return int(m.group(1))


def topology_for(fabric: Fabric) -> IbTopology:
    """The IB lab topology of a lab fabric: each node NIC on its leaf, the two leaves joined.

    Raises:
        InputError: a node or device name outside the node-id grammar, a NIC on a switch other than
            leaf01/leaf02, or two cables on one leaf port.
    """
    hcas, used = [], {"leaf01": set(), "leaf02": set()}
    for k, node in enumerate(fabric.nodes, 1):
        for nic in node.nics:
            if nic.switch not in used:
                raise InputError("fabric.json", f"{node.name}.{nic.rdma_device}.switch",
                                 f"{nic.switch!r}: the IB lab has leaf01 and leaf02 only")
            port = _port_number(nic.switch_port)
            if port in used[nic.switch]:
                raise InputError("fabric.json", f"{node.name}.{nic.rdma_device}.switch_port",
                                 f"{nic.switch} port {port} is cabled twice")
            used[nic.switch].add(port)
            guid = HCA_GUID_BASE | (k << 8) | (nic.rail << 4)
            hca = IbHca(node.name, nic.rdma_device, nic.rail, nic.switch, port, guid)
            check_node_id(hca.node_id)
            hcas.append(hca)
    isl = _port_number(uplink_port(len(fabric.nodes)))
    top = max([isl, *used["leaf01"], *used["leaf02"]])
    ports = max(SWITCH_PORTS, top)
    leaves = {name: (SWITCH_GUID_BASE + j, ports) for j, name in enumerate(("leaf01", "leaf02"), 1)}
    return IbTopology(leaves=leaves, hcas=tuple(hcas), isl_port=isl)


def net_file(topo: IbTopology) -> str:
    """The ibsim net file of ``topo`` (ibnetdiscover record format, GUIDs set per node)."""
    out = ["# fabtune IB lab (tuning/lab/ib_topology.py): ibsim net file", *DEFAULTS, ""]
    other = {"leaf01": "leaf02", "leaf02": "leaf01"}
    for name, (guid, ports) in topo.leaves.items():
        out += [f"switchguid={guid:#018x}", f'Switch {ports} "{name}" # "{name}"']
        cabled = sorted((h.leaf_port, h) for h in topo.hcas if h.leaf == name)
        out += [f'[{p}] "{h.node_id}"[1] # "{h.description}" lid 0 {LINK}' for p, h in cabled]
        out += [f'[{topo.isl_port}] "{other[name]}"[{topo.isl_port}] # "{other[name]}" lid 0 {LINK}', ""]
    for h in topo.hcas:
        out += [f"caguid={h.node_guid:#018x}", f'Ca 1 "{h.node_id}" # "{h.description}"',
                f'[1] "{h.leaf}"[{h.leaf_port}] # lid 0 lmc 0 "{h.leaf}" lid 0 {LINK}', ""]
    return "\n".join(out)
