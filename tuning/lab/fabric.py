"""The lab's fabric description: nodes, NICs, switches and cables.

One :class:`Fabric` drives everything the lab builds (sysroots, SSH endpoints,
switches, the fabric model) and is stored as ``<state_dir>/fabric.json`` so the
tool stand-ins (separate processes) see the same wiring. ``inventory/lab/``
describes the same fabric for the engine; ``tests/`` checks the two agree.

Default fabric (:func:`default_fabric`): 4 DGX-class nodes (2 NUMA nodes, 112
CPUs, 8 GPUs, 8 ConnectX-7 NICs at 400 Gb/s, one per rail), 2 rail leaves
(even rails on leaf01, odd rails on leaf02) and 1 spine; up to 256 nodes in SUs of 32, two rail
leaves per SU, two spines (:func:`default_fabric`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from tuning.lab import noise

#: PCI BDF of NIC i on a DGX-class node (rail order), and its netdev name.
NIC_BDFS = ["0000:0c:00.0", "0000:12:00.0", "0000:4c:00.0", "0000:5d:00.0",
            "0000:8c:00.0", "0000:9d:00.0", "0000:ba:00.0", "0000:cc:00.0"]
#: the lab nodes' kernel release (``uname -r``): /lib/modules/<it>, /boot/vmlinuz-<it>
KERNEL_RELEASE = "6.8.0-49-generic"
#: PCI BDF of GPU i (H100 SXM) on a DGX-class node: GPU i shares a PCIe switch with NIC i
GPU_BDFS = ["0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0",
            "0000:9f:00.0", "0000:c3:00.0", "0000:d1:00.0", "0000:df:00.0"]
#: CPU lists of the two NUMA nodes (2 sockets x 28 cores x 2 threads = 112 CPUs).
NUMA_CPULISTS = ["0-27,56-83", "28-55,84-111"]


def netdev_for(bdf: str) -> str:
    """Predictable netdev name of a ConnectX port: ``0000:0c:00.0`` -> ``enp12s0np0``."""
    bus = int(bdf.split(":")[1], 16)
    return f"enp{bus}s0np0"


@dataclass
class Nic:
    """One ConnectX port on a node.

    Attributes:
        rdma_device: ``mlx5_N``.  netdev: kernel interface name.  bdf: PCI address.
        rail: rail number (0..7).  numa_node: 0 or 1.  ipv4: address with prefix (``10.0.0.1/24``).
        switch / switch_port: the leaf port it is cabled to (``leaf01`` / ``swp1``).
        first_irq: Linux IRQ number of ``mlx5_async0``; completion IRQs follow it.
        comp_vectors: number of completion IRQs (``mlx5_comp0..N-1``).
        extra_link_local: one more fe80 address, shifting the RoCEv2 IPv4 GID from 3 to 5.
    """

    rdma_device: str
    netdev: str
    bdf: str
    rail: int
    numa_node: int
    ipv4: str
    switch: str
    switch_port: str
    first_irq: int
    comp_vectors: int = 16
    extra_link_local: bool = False
    speed_gbps: int = 400


@dataclass
class Node:
    """A GPU node: SSH port on 127.0.0.1, driver flavour and NICs.

    Attributes:
        driver: ``ofed`` (MLNX_OFED: ECN per priority in sysfs) or ``inbox``
            (upstream mlx5: DCQCN knobs in debugfs ``cc_params``, no per-priority enable).
    """

    name: str
    port: int
    driver: str
    nics: list[Nic]
    numa_cpulists: list[str] = field(default_factory=lambda: list(NUMA_CPULISTS))
    gpus: int = 8
    #: topology faults (``tuning.lab.hw_gpu``): rail (as text: JSON object keys) -> where GPU ``rail``
    #: sits instead of behind the PCIe switch of the NIC on its rail: ``"NODE"`` (behind another switch
    #: and host bridge of the same NUMA node) or ``"SYS"`` (on the other NUMA node). Read at power-on
    #: (``fabtune lab up`` / ``lab reboot``); ``pcie_layout`` keeps describing the healthy tree.
    gpu_misplaced: dict[str, str] = field(default_factory=dict)
    #: hardware threads per core (``tuning.lab.hw_gpu.smt_siblings``): 2 on the DGX class's Xeons, 1
    #: on a Grace (Arm Neoverse V2 has no SMT: ``tuning.lab.hw_nvl72``)
    threads_per_core: int = 2
    #: the GPUs' model as the driver names it (``Model:`` of its ``information``, ``nvidia-smi -L``);
    #: empty: ``tuning.lab.hw_gpu.GPU_MODEL`` (H100 SXM)
    gpu_model: str = ""


@dataclass
class Switch:
    """A lab switch (FakeNOS). ``role`` is ``leaf`` or ``spine``; ``ports`` lists every port in use,
    in the names of its ``os``: :data:`SWITCH_OSES` (``nvue``: ``swp1``; ``eos``: ``Ethernet1``)."""

    name: str
    port: int
    role: str
    ports: list[str]
    os: str = "nvue"


#: the lab's switch OSes -> how port k is named (NVUE ``swpK``, Arista EOS ``EthernetK``, SONiC by its
#: first lane, 8 lanes a 400G port as in shared/cases/cli/sonic__show_interfaces_status.txt:
#: ``Ethernet{8(k-1)}``), and the inventory platforms each stands for (tuning.model.platforms)
SWITCH_OSES: dict[str, str | Callable[[int], str]] = {"nvue": "swp{}", "eos": "Ethernet{}",
                                                      "sonic": lambda k: f"Ethernet{8 * (k - 1)}"}
LAB_OS_OF_PLATFORM: dict[str, str] = {"nvue": "nvue", "cumulus_linux": "nvue", "eos": "eos", "sonic": "sonic"}


def with_switch_os(fabric: "Fabric", oses: dict[str, str]) -> "Fabric":
    """``fabric`` with switch ``name`` running ``oses[name]`` (one of :data:`SWITCH_OSES`): its port
    k renamed in that OS's names on the switch, on the NICs cabled to it and on its links, in place.
    Returns ``fabric``. Raises KeyError for an OS the lab has no stand-in for."""
    def rename(switch: str, port: str) -> str:
        if switch not in oses or not port.startswith("swp"):
            return port
        form = SWITCH_OSES[oses[switch]]
        return form(int(port[3:])) if callable(form) else form.format(port[3:])

    for sw in fabric.switches:
        if sw.name in oses:
            sw.ports, sw.os = [rename(sw.name, p) for p in sw.ports], oses[sw.name]
    for nic in (c for n in fabric.nodes for c in n.nics):
        nic.switch_port = rename(nic.switch, nic.switch_port)
    for link in fabric.links:
        link.a_port, link.b_port = rename(link.a, link.a_port), rename(link.b, link.b_port)
    return fabric


@dataclass
class Link:
    """A cable between two switch ports (node cables are on :class:`Nic`)."""

    a: str
    a_port: str
    b: str
    b_port: str


@dataclass
class Fabric:
    """The whole lab fabric. ``injections`` holds faults added by ``fabtune lab inject``, ``noise``
    the run-to-run spread of its test results set by ``fabtune lab noise`` (:mod:`tuning.lab.noise`)."""

    nodes: list[Node]
    switches: list[Switch]
    links: list[Link]
    injections: list[dict] = field(default_factory=list)
    noise: dict = field(default_factory=dict)

    def node(self, name: str) -> Node:
        """The node called ``name``. Raises KeyError."""
        return next(n for n in self.nodes if n.name == name)

    def switch(self, name: str) -> Switch:
        """The switch called ``name``. Raises KeyError."""
        return next(s for s in self.switches if s.name == name)

    def save(self, path: Path) -> None:
        """Write as JSON (sorted keys, stable bytes)."""
        path.write_text(json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: Path) -> "Fabric":
        """Read a fabric written by :meth:`save`."""
        d = json.loads(path.read_text())
        return cls(
            nodes=[Node(**{**n, "nics": [Nic(**c) for c in n["nics"]]}) for n in d["nodes"]],
            switches=[Switch(**s) for s in d["switches"]],
            links=[Link(**l) for l in d["links"]],
            injections=d.get("injections", []),
            noise=d.get("noise", {}),
        )


#: the embedded lab's ports: 22101-22104 (nodes) and 22201-22203 (switches), below the kernel's
#: ephemeral port range (``net.ipv4.ip_local_port_range``, 32768-60999 by default), where a lab
#: port could collide with a client socket's source port
DEFAULT_BASE_PORT = 22100


def pcie_layout(node: Node) -> list[dict]:
    """The PCIe tree of a lab node, one entry per rail i (GPU i and NIC i behind one PCIe switch,
    as on a DGX H100):

    ``{"rail": i, "numa_node": n, "gpu": GPU_BDFS[i], "nic": nic.bdf, "switch_up": "0000:UU:00.0",
    "switch_down": ["0000:VV:00.0" (towards the NIC), "0000:VV:01.0" (towards the GPU)]}`` with
    ``UU`` = the NIC's bus - 2 and ``VV`` = UU + 1 (modulo 256). The bridges between GPU i and NIC i are
    ``switch_down`` (ACS is checked there). GPUs beyond the node's ``gpus`` count are left out.
    """
    out = []
    for nic in node.nics:
        i = nic.rail
        if i >= node.gpus or i >= len(GPU_BDFS):
            continue
        bus = int(nic.bdf.split(":")[1], 16)
        up_bus, down_bus = (bus - 2) % 256, (bus - 1) % 256  # a NIC on bus 0 or 1 (test fabrics) wraps
        up, down = f"0000:{up_bus:02x}:00.0", [f"0000:{down_bus:02x}:00.0", f"0000:{down_bus:02x}:01.0"]
        out.append({"rail": i, "numa_node": nic.numa_node, "gpu": GPU_BDFS[i], "nic": nic.bdf,
                    "switch_up": up, "switch_down": down})
    return out


def uplink_port(n_nodes: int) -> str:
    """A leaf's first uplink to the spines in an SU of ``n_nodes`` nodes: ``swp31`` while the node
    ports (``swp1..swp{4 n_nodes}``, 4 rails per leaf) end below it, else the first port past them
    (8 nodes: ``swp33``), so an uplink never shares a port with a node cable."""
    return f"swp{max(31, 4 * n_nodes + 1)}"


#: nodes per scalable unit (SU) of a lab: the nodes of one SU share its two rail leaves (even rails,
#: odd rails: 4 rails x 32 nodes = 128 node ports each, an NVIDIA SN5600's 64 ports split in two, as
#: a DGX SuperPOD SU of 32 nodes); a lab of more nodes has ceil(n / 32) SUs and two spines
SU_NODES = 32
#: the largest lab ``fabtune lab init --nodes`` builds
MAX_NODES = 256


def su_place(k: int, n_nodes: int) -> tuple[int, int, int]:
    """Where node ``k`` (1-based) of an ``n_nodes`` lab sits: ``(su, j, size)`` with ``su`` its SU
    (0-based), ``j`` its place in the SU (1-based) and ``size`` the SU size (``n_nodes`` up to
    :data:`SU_NODES`, else 32): node 40 of 256 -> ``(1, 8, 32)``."""
    size = min(n_nodes, SU_NODES)
    return (k - 1) // size, (k - 1) % size + 1, size


def switch_port_base(base_port: int, n_nodes: int) -> int:
    """The SSH port of a lab's first switch: ``base + 101`` up to 100 nodes (the embedded lab's
    22201), else the port past the last node's (``base + n + 1``); switch i listens on this + i."""
    return base_port + max(100, n_nodes) + 1


def port_span(n_nodes: int) -> int:
    """How many ports above ``base_port`` an ``n_nodes`` lab uses: its nodes (``base + 1..n``) and
    its switches (:func:`switch_port_base`; 2 leaves per SU, 1 spine for one SU else 2)."""
    sus = -(-n_nodes // min(n_nodes, SU_NODES))
    return max(100, n_nodes) + 2 * sus + (1 if sus == 1 else 2)


def switch_layer(nodes: list[Node], base_port: int, n_nodes: int) -> tuple[list[Switch], list[Link]]:
    """The leaves the ``nodes``' NICs are cabled to and the spines above them, with their cables.

    Each leaf lists its cabled node ports (in port order) and then its uplinks: uplink t (0-based) of
    a leaf is ``swp{u + t}`` with ``u`` the number :func:`uplink_port` gives for one SU's nodes, cabled
    to spine t + 1 at ``swp<leaf index>``. One spine (``spine01``) when the nodes use two leaves,
    else two (``spine01``, ``spine02``). Switch SSH ports from :func:`switch_port_base`: leaves in name
    order, then the spines.
    """
    cabled: dict[str, list[str]] = {}
    for node in nodes:
        for nic in node.nics:
            cabled.setdefault(nic.switch, []).append(nic.switch_port)
    leaves = sorted(cabled)
    spines = [f"spine{t:02d}" for t in range(1, (1 if len(leaves) <= 2 else 2) + 1)]
    first_up = int(uplink_port(su_place(1, n_nodes)[2])[3:])
    switches, links = [], []
    for index, leaf in enumerate(leaves, start=1):
        ups = [f"swp{first_up + t}" for t in range(len(spines))]
        down = sorted(cabled[leaf], key=lambda p: int(p[3:]))
        switches.append(Switch(leaf, 0, "leaf", down + ups))
        links += [Link(leaf, up, spine, f"swp{index}") for up, spine in zip(ups, spines)]
    switches += [Switch(spine, 0, "spine", [f"swp{i}" for i in range(1, len(leaves) + 1)]) for spine in spines]
    for i, sw in enumerate(switches):
        sw.port = switch_port_base(base_port, n_nodes) + i
    return switches, links


def default_fabric(base_port: int = DEFAULT_BASE_PORT, n_nodes: int = 4, switch_os: dict[str, str] | None = None) -> Fabric:
    """The embedded default lab: ``n_nodes`` nodes in SUs of up to :data:`SU_NODES`, two rail
    leaves per SU and the spines above (:func:`switch_layer`), each switch on NVUE unless
    ``switch_os`` names another OS for it (:func:`with_switch_os`: ``{"leaf02": "eos"}``).

    Up to 32 nodes (one SU): leaf01, leaf02 and spine01. Node k (1-based) listens on
    ``base_port + k``; the switches from :func:`switch_port_base` on (``base_port + 101..103``
    up to 100 nodes). NIC i of node k, the j-th node of SU s (0-based, :func:`su_place`, SU size P):
    ``mlx5_i``, rail i, IPv4 ``10.i.s.j/24`` (one rail subnet per SU: ``10.i.0.k`` in one SU), cabled
    to leaf ``2s + 1`` (even i) or ``2s + 2`` (odd i) port ``swp{(i // 2) * P + j}``. Uplinks: from
    :func:`uplink_port` (``swp31`` up to 7 nodes, ``swp33`` for 8, ``swp129`` for 32 and more), one
    per spine. node04 runs the inbox driver; node03's mlx5_0 has an extra link-local address (RoCEv2
    IPv4 GID at index 5, not 3).
    """
    nodes = []
    for k in range(1, n_nodes + 1):
        su, j, size = su_place(k, n_nodes)
        nics = []
        for i, bdf in enumerate(NIC_BDFS):
            nics.append(Nic(
                rdma_device=f"mlx5_{i}", netdev=netdev_for(bdf), bdf=bdf, rail=i,
                numa_node=0 if i < 4 else 1, ipv4=f"10.{i}.{su}.{j}/24",
                switch=f"leaf{2 * su + 1 + i % 2:02d}",
                switch_port=f"swp{(i // 2) * size + j}",
                first_irq=100 + i * 20, extra_link_local=(k == 3 and i == 0),
            ))
        nodes.append(Node(name=f"node{k:02d}", port=base_port + k,
                          driver="inbox" if k == 4 else "ofed", nics=nics))
    switches, links = switch_layer(nodes, base_port, n_nodes)
    return with_switch_os(Fabric(nodes=nodes, switches=switches, links=links), switch_os or {})


def fabric_for_inventory(inv_dir: Path) -> Fabric:
    """The default fabric listening on the ports an inventory names (``fabtune lab up -i INV``,
    ``make demo``), so two labs run side by side, each on its own inventory's ports; its test
    results spread by :data:`tuning.lab.noise.DEFAULT_PCT` (a quiet real fabric's run-to-run noise). The switches a node-only
    inventory leaves out still run (the nodes' traffic crosses them), on :func:`switch_port_base`
    where node01 listens on ``base + 1`` (as ``fabtune lab init --base-port`` places them), untuned. A
    subnet manager beside them (a mixed inventory) is not this fabric's: the IB lab stands for it.

    Raises:
        InputError: the inventory is invalid, or names a host the default fabric does not have.
    """
    from tuning import inventory
    from tuning.errors import InputError

    inv = inventory.load(inv_dir)
    oses = {}
    for name, dev in inv.devices.items():
        platform = getattr(dev.spec, "platform", None) if dev.role == "switch" else None
        if platform is not None and platform not in LAB_OS_OF_PLATFORM:
            raise InputError(dev.sources.get("platform", str(inv_dir / "hosts.yaml")), "platform",
                             f"{platform!r}: the lab has no stand-in for it; allowed: {', '.join(LAB_OS_OF_PLATFORM)}")
        if platform is not None:
            oses[name] = LAB_OS_OF_PLATFORM[platform]
    fabric = _shape_of(inv)(n_nodes=_node_count(inv_dir, inv.devices), switch_os=oses)
    lab = {n.name: n for n in fabric.nodes} | {s.name: s for s in fabric.switches}
    for name, dev in inv.devices.items():
        if not (dev.kind.endpoint or dev.kind.fabric):
            continue  # a subnet manager: the IB lab's (tuning.lab.ib), beside the RoCE fabric
        if name not in lab:
            raise InputError(str(inv_dir / "hosts.yaml"), name, f"not a lab device; the lab has {short_list(list(lab))}")
        if not 1024 <= dev.connection.port < 32768:
            raise InputError(dev.sources.get("ansible_port", str(inv_dir / "hosts.yaml")), f"{name}: ansible_port",
                             f"{dev.connection.port}: a lab port is 1024..32767, below the kernel's ephemeral range")
        lab[name].port = dev.connection.port
    for name, dev in inv.devices.items():  # every name is the lab's (above): now the cables
        if dev.kind.endpoint or dev.kind.fabric:
            _same_cabling(dev, lab[name], fabric, inv_dir)
    first = inv.devices.get("node01")
    if first is not None:  # switches a node-only inventory leaves out: beside its nodes (base + 101..)
        base = first.connection.port - 1
        for i, sw in enumerate(fabric.switches):
            if sw.name not in inv.devices:
                sw.port = switch_port_base(base, len(fabric.nodes)) + i
    fabric.noise = noise.check(noise.DEFAULT_PCT, noise.DEFAULT_PCT, None)  # a quiet real fabric's spread
    return fabric


def short_list(names: list[str]) -> str:
    """Names for an error line, each run of one prefix cut to its ends when longer than two, in the
    order given: ``leaf01, leaf02, spine01``; ``node01..node256, leaf01..leaf16, spine01, spine02``."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(name.rstrip("0123456789"), []).append(name)
    return ", ".join(", ".join(g) if len(g) <= 2 else f"{g[0]}..{g[-1]}" for g in groups.values())


def _same_cabling(dev, lab_dev: Node | Switch, fabric: Fabric, inv_dir: Path) -> None:
    """The inventory's cabling of ``dev`` is the lab's: each NIC's leaf port, a leaf's ``uplinks``.
    The lab runs its own fabric (:func:`default_fabric`); an inventory cabled otherwise would have
    the lab and the verification schedule silently disagree.

    Raises:
        InputError: the first NIC or uplink that differs, naming its file, key and the lab's cable.
    """
    from tuning.errors import InputError

    where = str(inv_dir / "host_vars" / f"{dev.name}.yml")
    if isinstance(lab_dev, Node):
        cabled = {c.rdma_device: (c.switch, c.switch_port) for c in lab_dev.nics}
        for nic in dev.spec.nics:
            want = cabled.get(nic.rdma_device)
            if want is not None and (nic.switch, nic.switch_port) != want:
                raise InputError(dev.sources.get("nics", where), f"nics.{nic.rdma_device}.switch_port",
                                 f"{nic.switch}:{nic.switch_port}: the lab cables {nic.rdma_device} to {want[0]}:{want[1]}")
        return
    lab_ups = {l.a_port: f"{l.b}:{l.b_port}" for l in fabric.links if l.a == lab_dev.name}
    for port, end in (getattr(dev.spec, "uplinks", None) or {}).items():
        if lab_ups.get(port) != end:
            raise InputError(dev.sources.get("uplinks", where), f"uplinks.{port}",
                             f"{end}: the lab cables {lab_dev.name}:{port} to {lab_ups.get(port) or 'nothing'}")


def _shape_of(inv) -> Callable[..., Fabric]:
    """The fabric builder of a lab inventory's node shape: GB200 NVL72 compute trays
    (:func:`tuning.lab.hw_nvl72.tray_fabric`) when every node has 4 NICs, else the DGX class
    (:func:`default_fabric`, 8 NICs)."""
    from tuning.lab.hw_nvl72 import TRAY_NICS, tray_fabric

    if inv.nodes and all(len(d.spec.nics) == TRAY_NICS for d in inv.nodes):
        return tray_fabric
    return default_fabric


def _node_count(inv_dir: Path, devices: dict) -> int:
    """How many nodes a lab inventory's fabric has: its nodes are ``node01..nodeNN`` without a gap
    (N = 1..256, :data:`MAX_NODES`), as :func:`tuning.lab.scale.write_inventory` writes them.

    Raises:
        InputError: a node name that is not ``nodeNN`` within 1..256, or a gap (names the host and
            what is allowed).
    """
    from tuning.errors import InputError

    where = str(inv_dir / "hosts.yaml")
    index = {}
    for name, dev in devices.items():
        k = name[4:]
        if dev.role != "node":
            continue
        if not (name.startswith("node") and k.isdigit() and 1 <= int(k) <= MAX_NODES):
            raise InputError(where, name, f"not a lab device; lab nodes are node01..node{MAX_NODES}")
        index[name] = int(k)
    n = max([1, *index.values()])
    missing = [f"node{k:02d}" for k in range(1, n + 1) if f"node{k:02d}" not in index]
    if missing:
        top = max(index, key=index.get)
        raise InputError(where, top, f"not a lab device of a {len(index)}-node lab; a lab's nodes are "
                         f"node01..nodeNN without a gap (missing {', '.join(missing[:4])})")
    return n


def retarget_inventory(hosts_yaml: Path, fabric: Fabric) -> None:
    """Point a copy of ``inventory/lab/hosts.yaml`` at the ports of ``fabric`` (tests and benches
    run their own lab on another port range, beside an operator's lab).

    Hosts of a group whose role is neither endpoint nor fabric (``subnet_managers``: the IB lab's
    OpenSM, :mod:`tuning.lab.ib`) are left as they are.

    Raises:
        KeyError: the inventory names a host the fabric does not have.
    """
    import yaml

    from tuning.model.roles import ROLE_GROUPS

    ports = {n.name: n.port for n in fabric.nodes} | {s.name: s.port for s in fabric.switches}
    data = yaml.safe_load(hosts_yaml.read_text())

    def walk(group: dict) -> None:
        for name, host in (group.get("hosts") or {}).items():
            host["ansible_port"] = ports[name]
        for gname, child in (group.get("children") or {}).items():
            role = ROLE_GROUPS.get(gname)
            if role is None or role.endpoint or role.fabric:  # subnet managers: not this lab's devices
                walk(child or {})

    walk(data["all"])
    hosts_yaml.write_text(yaml.safe_dump(data, sort_keys=False))
