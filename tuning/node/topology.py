"""The GPU <-> NIC <-> NUMA node <-> CPU map of a node, read in ONE round trip.

Sources, each mapped through the format it documents:

- sysfs: GPUs are the PCI functions of vendor ``0x10de`` and class ``0x0300xx``/``0x0302xx``
  (``/sys/bus/pci/devices/*/{vendor,class}``) in PCI address order, which is NVML's (and
  ``nvidia-smi``'s) index order; their ``numa_node`` (``-1``: unknown) and ``local_cpulist``
  (``shared/cases/cli/SYSFS.md``); the driver's ``/proc/driver/nvidia/gpus/<bdf>/information`` for the
  model and ``Device Minor`` (``/dev/nvidia<minor>``, which need not equal the index);
  ``/sys/devices/system/node/node<N>/cpulist``; ``/sys/devices/system/cpu/cpu<N>/topology/
  {thread_siblings_list,physical_package_id}`` (kernel ``Documentation/ABI/stable/sysfs-devices-system-cpu``);
  each device's PCI path (``readlink -f``) for the link class when ``nvidia-smi`` is absent;
- ``nvidia-smi topo -m``: the GPU-NIC link class (``PIX`` ... ``SYS``), NIC columns always mapped
  through its ``NIC Legend`` (``shared/cases/nvidia_smi_topo_m__*``);
- ``lscpu`` and ``numactl -H``: the NUMA CPU lists and threads per core where sysfs lacks them.

The NICs are the inventory's (``nics:``, with their rails); GPU ``i`` belongs to rail ``i`` (a
rail-optimised node: GPU i talks through the NIC of rail i). A rail whose NIC is not ``PIX``/``PXB``
from its GPU (behind another PCIe switch, host bridge or NUMA node) is flagged; but a Grace
superchip's GPU (:data:`C2C_MODELS`: GB200, GB300, GH200) hangs off its Grace by NVLink-C2C, not
the PCIe tree, so ``NODE`` (a NIC on its own Grace) is the nearest it can be and only ``SYS`` is
flagged there (on GB200 ``nvidia-smi topo -m`` has no PIX/PXB between a GPU and a ConnectX:
Mellanox/ngc_multinode_perf PR 129; NCCL reaches such a NIC through the CPU, NCCL_NET_GDR_C2C).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from tuning.cpulist import format_cpulist, parse_cpulist
from tuning.errors import ParseError
from tuning.model import NodeSpec
from tuning.node.base import ABSENT, READ_EPILOGUE, READ_PRELUDE, NodeFacts, decode
from tuning.parsers.topology import (LINK_RANK, NvidiaSmiTopo, parse_gpu_information, parse_lscpu, parse_numactl_h,
                                     parse_nvidia_smi_topo)
from tuning.transport.base import Host, q, sysroot_path

#: link classes that keep GPUDirect RDMA off the host bridge (nvidia-smi legend: PIX, PXB)
NEAR = ("PIX", "PXB")
#: GPU model names (``Model:`` of the driver's ``information``) of Grace superchips: the GPU reaches
#: the NICs through its Grace (NVLink-C2C), so ``NODE`` is near for it (``nvidia-smi -L``: ``NVIDIA GB200``)
C2C_MODELS = ("GB200", "GB300", "GH200")
_WHY = {"PHB": "through the PCIe host bridge (CPU)", "NODE": "behind another PCIe host bridge of the same NUMA node",
        "SYS": "on another NUMA node"}


@dataclass(frozen=True)
class Gpu:
    """A GPU. ``index``: NVML / nvidia-smi index; ``bdf``: PCI address (``""`` when only nvidia-smi
    named it); ``numa_node``: -1 when unknown; ``cpus``: its local CPU list; ``minor``: the
    ``/dev/nvidia<minor>`` number (None: unknown); ``model``: ``NVIDIA H100 80GB HBM3``."""

    index: int
    bdf: str
    numa_node: int
    cpus: str
    minor: int | None = None
    model: str = ""


@dataclass(frozen=True)
class TopoNic:
    """An RDMA NIC: ``rdma_device`` (``mlx5_0``), ``netdev`` (None when not in the inventory), ``bdf``,
    ``numa_node`` (-1 unknown), ``cpus`` (local CPU list), ``rail`` (None when not in the inventory)."""

    rdma_device: str
    netdev: str | None
    bdf: str
    numa_node: int
    cpus: str
    rail: int | None = None


@dataclass(frozen=True)
class GpuLink:
    """GPU ``gpu``'s nearest NIC and the NIC of its rail, with link classes (``PIX`` ... ``SYS``;
    None: not known). ``flag``: why the rail's NIC is not near its GPU, or None."""

    gpu: int
    nearest_nic: str | None
    link: str | None
    rail_nic: str | None
    rail_link: str | None
    flag: str | None = None


@dataclass
class Topology:
    """The map. ``numa_nodes``: node -> CPU list; ``online``: online CPU list; ``siblings``: CPU -> the
    CPUs of its core; ``packages``: CPU -> socket; ``sources``: what each part was read from."""

    gpus: list[Gpu]
    nics: list[TopoNic]
    links: list[GpuLink]
    numa_nodes: dict[int, str] = field(default_factory=dict)
    online: str = ""
    siblings: dict[int, tuple[int, ...]] = field(default_factory=dict)
    packages: dict[int, int] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def flagged(self) -> list[GpuLink]:
        """The rails whose NIC is not near its GPU."""
        return [link for link in self.links if link.flag]

    def as_dict(self) -> dict:
        """Plain data for ``--json`` (siblings and packages left out: CPU topology is in ``numa_nodes``)."""
        d = asdict(self)
        d.pop("siblings"), d.pop("packages")
        return d


# ---------------------------------------------------------------- the read script

def read_script(spec: NodeSpec, sysroot: str, tools: bool = False) -> list[str]:
    """Shell lines (for :data:`~tuning.node.base.READ_PRELUDE`) printing the ``topo/...`` keys: GPUs
    found in sysfs with their NUMA node, local CPUs and driver ``information``, NUMA node CPU lists,
    each CPU's SMT siblings and socket; with ``tools`` also each GPU's and NIC's PCI path and the
    outputs of ``nvidia-smi topo -m``, ``lscpu`` and ``numactl -H`` (run in parallel; ABSENT when the
    tool is missing or fails). Reads only builtins without ``tools`` (no process per file)."""
    s = lambda p: q(sysroot_path(sysroot, p))  # noqa: E731
    pci, drv = s("/sys/bus/pci/devices"), s("/proc/driver/nvidia/gpus")
    # variables are tg/td/...: the prelude's helpers use n, k, v and T
    lines = [
        f'tg=; for td in {pci}/*; do tv=; tc=; {{ read -r tv < "$td/vendor"; read -r tc < "$td/class"; }} 2>/dev/null; '
        'case "$tv:$tc" in 0x10de:0x0300*|0x10de:0x0302*) tg="$tg ${td##*/}";; esac; done; '
        "printf 'topo/gpus\\t%s\\n' \"${tg# }\"",
        f'for tb in $tg; do r "topo/gpu/$tb/numa_node" {pci}/"$tb"/numa_node; '
        f'r "topo/gpu/$tb/local_cpulist" {pci}/"$tb"/local_cpulist; rb "topo/gpu/$tb/info" {drv}/"$tb"/information; done',
        f'for tf in {s("/sys/devices/system/node")}/node[0-9]*/cpulist; do tn=${{tf%/cpulist}}; '
        'r "topo/node/${tn##*/node}" "$tf"; done',
        f'for tf in {s("/sys/devices/system/cpu")}/cpu[0-9]*/topology/thread_siblings_list; do tc=${{tf%/topology/*}}; '
        'tc=${tc##*/cpu}; r "topo/cpu/$tc/siblings" "$tf"; r "topo/cpu/$tc/package" "${tf%/*}/physical_package_id"; done',
    ]
    if tools:
        netdevs = " ".join(q(n.netdev) for n in spec.nics)
        lines += [
            f'for tb in $tg; do printf \'topo/path/%s\\t%s\\n\' "$tb" "$(readlink -f {pci}/"$tb")"; done',
            f'for ti in {netdevs}; do tb=$(basename "$(readlink -f {s("/sys/class/net")}/"$ti"/device)" 2>/dev/null); '
            f'printf \'topo/path/%s\\t%s\\n\' "$tb" "$(readlink -f {pci}/"$tb")"; done',
            "bp topo/smi nvidia-smi topo -m", "bp topo/lscpu lscpu", "bp topo/numactl numactl -H",
        ]
    return lines


def discover(host: Host, dev) -> Topology:
    """Read a node's map in ONE round trip (sysfs, ``nvidia-smi topo -m``, ``lscpu``, ``numactl -H``).

    Args:
        host: the node.  dev: its :class:`~tuning.inventory.Device` (NICs and rails from the inventory).

    Raises:
        CommandError: the read script failed.  ParseError: a tool printed what cannot be read.
    """
    from tuning.node import facts as facts_mod

    spec = dev.spec
    script = [READ_PRELUDE] + facts_mod.read_script(spec, host.sysroot) + read_script(spec, host.sysroot, tools=True)
    res = host.run("\n".join(script + [READ_EPILOGUE])).check(dev.name, "topology")
    raw = dict(line.split("\t", 1) for line in res.stdout.splitlines() if "\t" in line)
    return from_facts(spec, facts_mod.from_raw(spec, raw))


# ---------------------------------------------------------------- building the map

_INT = re.compile(r"-?\d+")
#: sysfs keys of :func:`read_script` (compiled once: a fleet render builds 10,000 maps)
_NODE_KEY = re.compile(r"topo/node/\d+")
_CPU_KEY = re.compile(r"topo/cpu/(\d+)/(siblings|package)")


def _int(value: str, default: int = -1) -> int:
    return int(value) if _INT.fullmatch(value.strip()) else default


def _tool(raw: dict[str, str], key: str, parse):
    value = raw.get(key, ABSENT)
    return None if value == ABSENT else parse(decode(value))


def _cpu_topology(raw: dict[str, str], topo: Topology) -> None:
    """NUMA CPU lists, SMT siblings and sockets from sysfs, else from lscpu / numactl -H."""
    topo_keys = [(k, v) for k, v in raw.items() if k.startswith("topo/")]  # the others match neither pattern
    nodes = {int(k.split("/")[2]): v for k, v in topo_keys if _NODE_KEY.fullmatch(k) and v != ABSENT}
    lscpu = _tool(raw, "topo/lscpu", parse_lscpu)
    numactl = _tool(raw, "topo/numactl", parse_numactl_h)
    if nodes:
        topo.numa_nodes, topo.sources["numa"] = dict(sorted(nodes.items())), "sysfs"
    elif lscpu and lscpu.numa_nodes:
        topo.numa_nodes = {n: format_cpulist(c) for n, c in sorted(lscpu.numa_nodes.items())}
        topo.sources["numa"] = "lscpu"
    elif numactl:
        topo.numa_nodes, topo.sources["numa"] = {n.node: format_cpulist(n.cpus) for n in numactl.nodes}, "numactl -H"
    for key, value in topo_keys:
        if (m := _CPU_KEY.fullmatch(key)) and value != ABSENT:
            if m[2] == "siblings":
                topo.siblings[int(m[1])] = tuple(parse_cpulist(value))
            else:
                topo.packages[int(m[1])] = _int(value, 0)
    topo.sources["siblings"] = "sysfs" if topo.siblings else "none (every CPU its own core)"
    if lscpu and lscpu.threads_per_core and topo.siblings:
        widest = max(len(c) for c in topo.siblings.values())
        if widest != lscpu.threads_per_core:
            topo.sources["siblings"] += f"; lscpu says {lscpu.threads_per_core} thread(s) per core"


def _gpus(raw: dict[str, str], smi: NvidiaSmiTopo | None, topo: Topology) -> list[Gpu]:
    bdfs = sorted(raw.get("topo/gpus", "").split())
    out = []
    for i, bdf in enumerate(bdfs):
        info = _tool(raw, f"topo/gpu/{bdf}/info", parse_gpu_information)
        cpus = raw.get(f"topo/gpu/{bdf}/local_cpulist", ABSENT)
        out.append(Gpu(i, bdf, _int(raw.get(f"topo/gpu/{bdf}/numa_node", "")), "" if cpus == ABSENT else cpus,
                       info.minor if info else None, info.model if info else ""))
    topo.sources["gpus"] = "sysfs"
    if smi is not None and len(smi.gpus) != len(out):
        if not out:
            topo.sources["gpus"] = "nvidia-smi topo -m (no NVIDIA GPU in sysfs)"
            return smi_gpus(smi)
        topo.sources["gpus"] += f"; nvidia-smi topo -m lists {len(smi.gpus)} (links by index may be wrong)"
    return out


def smi_gpus(smi: NvidiaSmiTopo) -> list[Gpu]:
    """GPUs as ``nvidia-smi topo -m`` names them (no PCI address): index, NUMA and CPU affinity."""
    out = []
    for row in smi.gpus:
        numa = row.numa_affinity[0] if row.numa_affinity and len(row.numa_affinity) == 1 else -1
        out.append(Gpu(int(row.name[3:]), "", numa, format_cpulist(row.cpu_affinity or [])))
    return out


def from_facts(spec: NodeSpec, facts: NodeFacts) -> Topology:
    """The map from a collect's facts (the ``topo/...`` keys of :func:`read_script` and the
    inventory NICs' facts). See :func:`build`.

    Raises:
        ParseError: a tool output in the facts cannot be read.
    """
    nics = []
    for nic in spec.nics:
        f = facts.nics.get(nic.netdev, {})
        cpus = f.get("local_cpulist", ABSENT)
        nics.append(TopoNic(nic.rdma_device, nic.netdev, f.get("bdf", ""), _int(str(f.get("numa_node", ""))),
                            "" if cpus == ABSENT else cpus, nic.rail))
    return build(facts.raw, nics, facts.online_cpus)


def build(raw: dict[str, str], nics: list[TopoNic], online: str, gpus: list[Gpu] | None = None) -> Topology:
    """The map from ``topo/...`` keys (as :func:`read_script` prints them), the NICs and the online
    CPU list. ``gpus`` replaces the GPUs found in ``raw`` (NVML's, :mod:`tuning.nvml`).

    Links come from ``nvidia-smi topo -m`` when it ran, else from the PCI paths, else only a NUMA
    mismatch is known (``SYS``).

    Raises:
        ParseError: a tool output in ``raw`` cannot be read.
    """
    topo = Topology([], list(nics), [], online=online)
    _cpu_topology(raw, topo)
    smi = _tool(raw, "topo/smi", parse_nvidia_smi_topo)
    topo.gpus = _gpus(raw, smi, topo) if gpus is None else list(gpus)
    paths = {k[10:]: v for k, v in raw.items() if k.startswith("topo/path/")}
    if smi is not None:
        topo.sources["links"] = "nvidia-smi topo -m"
        topo.links = pair(topo.gpus, topo.nics, smi_links(smi))
    elif any(pci_chain(p) for p in paths.values()):
        topo.sources["links"] = "sysfs PCI paths"
        topo.links = pair(topo.gpus, topo.nics, lambda g, n: path_link(paths.get(g.bdf, ""), paths.get(n.bdf, ""),
                                                                          g.numa_node, n.numa_node))
    else:
        topo.sources["links"] = "NUMA nodes only (no nvidia-smi, no PCI paths)"
        topo.links = pair(topo.gpus, topo.nics, numa_link)
    return topo


def from_smi(smi: NvidiaSmiTopo, nics: list[TopoNic] | None = None) -> Topology:
    """The map of an ``nvidia-smi topo -m`` output alone: GPUs from its rows, NICs from its legend
    (or ``nics``, matched by RDMA device), links from the matrix."""
    if nics is None:
        nics = [TopoNic(n.device or n.name, None, "", -1, "") for n in smi.nics]
    numa = {g.numa_affinity[0]: format_cpulist(g.cpu_affinity or []) for g in smi.gpus
            if g.numa_affinity and len(g.numa_affinity) == 1}
    gpus = smi_gpus(smi)
    return Topology(gpus, nics, pair(gpus, nics, smi_links(smi)), numa_nodes=dict(sorted(numa.items())),
                    sources={"gpus": "nvidia-smi topo -m", "links": "nvidia-smi topo -m"})


# ---------------------------------------------------------------- links

def smi_links(smi: NvidiaSmiTopo):
    """``link(gpu, nic) -> PIX|...|None`` from the matrix (NIC columns mapped through the legend)."""
    rows = {int(g.name[3:]): g.links for g in smi.gpus}
    cols = {n.device: n.name for n in smi.nics}

    def link(gpu: Gpu, nic: TopoNic) -> str | None:
        col = cols.get(nic.rdma_device)
        return rows.get(gpu.index, {}).get(col) if col else None
    return link


def numa_link(gpu: Gpu, nic: TopoNic) -> str | None:
    """``SYS`` when the two sit on different known NUMA nodes; otherwise unknown (None)."""
    return "SYS" if -1 not in (gpu.numa_node, nic.numa_node) and gpu.numa_node != nic.numa_node else None


_PCI_PATH = re.compile(r"/devices/(pci[0-9a-f]{4}:[0-9a-f]{2})((?:/[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])+)$")


def pci_chain(path: str) -> tuple[str, list[str]] | None:
    """``/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0/0000:1b:00.0`` -> (``pci0000:17``,
    [root port, bridges..., device]); None for a path that is not a PCI device path."""
    m = _PCI_PATH.search(path.strip())
    return (m[1], m[2].strip("/").split("/")) if m else None


def path_link(a: str, b: str, numa_a: int = -1, numa_b: int = -1) -> str | None:
    """The nvidia-smi link class between two PCI devices from their sysfs paths: ``SYS`` (other
    NUMA node), ``NODE`` (other host bridge), ``PHB`` (same host bridge, other root port), ``PIX``
    (one PCIe switch between them: each at most two levels below their deepest common bridge),
    ``PXB`` (more bridges, not through the host bridge). None when a path is not a PCI path."""
    if -1 not in (numa_a, numa_b) and numa_a != numa_b:
        return "SYS"
    ca, cb = pci_chain(a), pci_chain(b)
    if ca is None or cb is None:
        return None
    if ca[0] != cb[0]:
        return "NODE"
    up_a, up_b = ca[1][:-1], cb[1][:-1]
    common = 0
    while common < min(len(up_a), len(up_b)) and up_a[common] == up_b[common]:
        common += 1
    if common == 0:
        return "PHB"
    return "PIX" if max(len(ca[1]) - common, len(cb[1]) - common) <= 2 else "PXB"


def pair(gpus: list[Gpu], nics: list[TopoNic], link) -> list[GpuLink]:
    """Per GPU: the nearest NIC (best link class, then NIC order; an unknown class ranks between
    ``NODE`` and ``SYS``) and the NIC of its rail, flagged when its class is known and not
    ``PIX``/``PXB``."""
    out = []
    for gpu in gpus:
        ranked = sorted((LINK_RANK.get(lk, 9) if lk else 4.5, k, nic.rdma_device, lk)
                        for k, nic in enumerate(nics) for lk in [link(gpu, nic)])
        near = ranked[0] if ranked else None
        rail = next((n for n in nics if n.rail == gpu.index), None)
        rail_link = link(gpu, rail) if rail else None
        flag = None
        near_ok = NEAR + (("NODE",) if any(m in gpu.model.split() for m in C2C_MODELS) else ())
        if rail and rail_link and rail_link not in near_ok:
            flag = f"rail {rail.rail}: NIC {rail.rdma_device} is {rail_link} from GPU{gpu.index} ({_WHY.get(rail_link, rail_link)})"
        out.append(GpuLink(gpu.index, near[2] if near else None, near[3] if near else None,
                           rail.rdma_device if rail else None, rail_link, flag))
    return out


def gpu_cpus(topo: Topology, gpu: Gpu) -> list[int]:
    """A GPU's local CPUs: its ``local_cpulist``, else its NUMA node's CPU list.

    Raises:
        ParseError: a CPU list that cannot be read.
    """
    text = gpu.cpus or topo.numa_nodes.get(gpu.numa_node, "")
    try:
        return parse_cpulist(text)
    except ValueError as exc:
        raise ParseError("sysfs", 0, f"a CPU list for GPU{gpu.index} ({exc})") from exc
