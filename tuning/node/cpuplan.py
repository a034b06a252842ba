"""The per-GPU CPU plan of a node, and its exports (Slurm ``gres.conf`` lines, a JSON map).

Per NUMA node: its online CPUs minus ``cpu.reserved_cpus`` (the OS's); of the whole physical cores
left (every SMT sibling free), the first ``cpu.irq_cores_per_numa`` go to NIC completion IRQs (on a
NUMA node that holds an RDMA NIC); the rest are split among the GPUs of that NUMA node in GPU
order, in contiguous runs of whole cores, the first GPUs taking one core more when the count does
not divide. A core some of whose threads are reserved gives its other threads to nobody (``spare``:
left to the OS). Everything is deterministic: same topology and profile, same plan.

The rules on ``cpu.reserved_cpus`` that the IRQ domain (:mod:`tuning.node.irq`, plan/apply) shares
with this plan (``fabtune topology``) are written here once: :func:`reserved_cpus` (every reserved CPU
is online) and :func:`nic_irq_cpus` (a NIC's completion IRQs never go to a reserved CPU, and a NIC
whose NUMA node has no IRQ CPU left is refused).

Example profile::

    cpu:
      reserved_cpus: "0,56,28,84"     # one core per socket for the OS
      irq_cores_per_numa: 2           # confine NIC completion IRQs to 2 cores per NUMA node
      isolate: true                   # isolcpus/nohz_full for the GPU workers' CPUs (part of cmdline)

``gres.conf`` ``Cores=`` takes Slurm's LOGICAL core indices, not CPU ids: "a logical core index must
be specified instead of the physical core index ... Core 0 will be the first core on the first
socket, while core 1 will be the second core on the first socket. This numbering coincides with the
logical core number (Core L#) seen in ``lstopo -l``" (slurm.schedmd.com/gres.conf.html, Cores; older
man pages said "the first thread CPU index numbers"). Cores are numbered here by socket, then by
their first CPU. ``File=`` is ``/dev/nvidia<minor>`` with the driver's ``Device Minor``, which can
differ from the nvidia-smi index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tuning.cpulist import format_cpulist, parse_cpulist
from tuning.model import NodeSpec
from tuning.node.base import ABSENT, NodeFacts, Unfit
from tuning.node.topology import Gpu, Topology, from_facts, gpu_cpus


@dataclass
class NumaPlan:
    """One NUMA node's share: ``cpus`` (online, local), ``reserved``, ``irq`` (IRQ cores and their
    siblings), ``gpus`` (GPU index -> CPUs), ``spare`` (left to the OS). CPU numbers, sorted."""

    node: int
    cpus: list[int]
    reserved: list[int] = field(default_factory=list)
    irq: list[int] = field(default_factory=list)
    gpus: dict[int, list[int]] = field(default_factory=dict)
    spare: list[int] = field(default_factory=list)


@dataclass
class CpuPlan:
    """The node's plan: one :class:`NumaPlan` per NUMA node and ``core_index``: first CPU of each
    physical core -> Slurm's logical core index."""

    nodes: list[NumaPlan]
    core_index: dict[int, int]
    siblings: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def gpu(self, index: int) -> list[int]:
        """The CPUs of GPU ``index`` (``[]`` for a GPU the plan does not know)."""
        return next((p.gpus[index] for p in self.nodes if index in p.gpus), [])

    def irq_cpus(self, node: int) -> list[int]:
        """The IRQ CPUs of NUMA node ``node`` (``[]`` when none are set aside)."""
        return next((p.irq for p in self.nodes if p.node == node), [])

    def gpu_workers(self) -> list[int]:
        """Every CPU given to a GPU, sorted."""
        return sorted(c for p in self.nodes for cpus in p.gpus.values() for c in cpus)

    def cores_of(self, cpus: list[int]) -> list[int]:
        """Slurm logical core indices of the cores holding ``cpus``."""
        return sorted({self.core_index[min(self.siblings.get(c, (c,)))] for c in cpus})


def _cores(cpus: set[int], topo: Topology) -> list[tuple[int, ...]]:
    """The physical cores (tuples of sibling CPUs, sorted by first CPU) among ``cpus``."""
    return sorted({tuple(sorted(set(topo.siblings.get(c, (c,))) & cpus or {c})) for c in cpus})


def _gpus_by_node(topo: Topology) -> dict[int, list[Gpu]]:
    """GPUs per NUMA node; a GPU with an unknown node (-1) counts on the only node of a one-node host.

    Raises:
        Unfit: a GPU without a NUMA node on a host with several.
    """
    out: dict[int, list[Gpu]] = {}
    for gpu in sorted(topo.gpus, key=lambda g: g.index):
        node = gpu.numa_node
        if node == -1 and len(topo.numa_nodes) == 1:
            node = next(iter(topo.numa_nodes))
        if node not in topo.numa_nodes:
            raise Unfit("cpu", f"GPU{gpu.index} ({gpu.bdf or 'no PCI address'}) has no known NUMA node "
                               f"(numa_node {gpu.numa_node}); a CPU plan needs each GPU's NUMA node")
        out.setdefault(node, []).append(gpu)
    return out


def _split(node: int, whole: list[tuple[int, ...]], n_irq: int, gpus: list[Gpu], spec: NodeSpec,
           n_cores: int) -> tuple[list[int], dict[int, list[int]], list[int]]:
    """(IRQ CPUs, GPU index -> CPUs, spare CPUs) of one NUMA node's whole free cores.

    Raises:
        Unfit: fewer cores left than GPUs on the node.
    """
    irq, rest = whole[:n_irq], whole[n_irq:]
    flat = lambda cores: sorted(c for core in cores for c in core)  # noqa: E731
    if not gpus:
        return flat(irq), {}, flat(rest)
    if len(rest) < len(gpus):
        key = "cpu.irq_cores_per_numa" if n_irq else "cpu.reserved_cpus"
        raise Unfit(key, (
            f"NUMA node {node} has {n_cores} physical cores: {n_cores - len(whole)} hold reserved CPUs "
            f"(cpu.reserved_cpus {spec.cpu.reserved_cpus or 'none'}), {len(irq)} are kept for NIC IRQs "
            f"(cpu.irq_cores_per_numa {spec.cpu.irq_cores_per_numa}), {len(rest)} are left for its {len(gpus)} "
            f"GPUs ({', '.join(f'GPU{g.index}' for g in gpus)}); allowed: each GPU needs a whole core, so at most "
            f"{max(len(whole) - len(gpus), 0)} IRQ cores on this node with these reserved CPUs"))
    share, extra = divmod(len(rest), len(gpus))
    out, start = {}, 0
    for k, gpu in enumerate(gpus):
        take = share + (1 if k < extra else 0)
        out[gpu.index] = flat(rest[start:start + take])
        start += take
    return flat(irq), out, []


def online_cpus(topo: Topology) -> set[int]:
    """The node's online CPUs: ``topo.online``, else the union of its NUMA nodes' CPU lists (empty
    when neither was read)."""
    if topo.online and topo.online != ABSENT:
        return set(parse_cpulist(topo.online))
    return {c for cl in topo.numa_nodes.values() for c in parse_cpulist(cl)}


def reserved_cpus(spec: NodeSpec, online: set[int]) -> set[int]:
    """``cpu.reserved_cpus`` as a set of CPU numbers, each checked against ``online`` (the node's
    online CPUs, :func:`online_cpus`).

    Raises:
        Unfit: ``cpu.reserved_cpus`` names a CPU the node does not have (names the online CPUs), or
            names any CPU while ``online`` is empty (the node's CPUs could not be read).
    """
    reserved = set(parse_cpulist(spec.cpu.reserved_cpus or ""))
    if reserved and not online:
        raise Unfit("cpu.reserved_cpus", "the node's online CPUs cannot be read (/sys/devices/system/cpu/online, "
                                         "NUMA node cpulists), so reserved CPUs cannot be checked; allowed: no "
                                         "cpu.reserved_cpus on this node")
    if reserved - online:
        raise Unfit("cpu.reserved_cpus", f"CPUs {format_cpulist(sorted(reserved - online))} do not exist on this "
                                         f"node; allowed: online CPUs {format_cpulist(sorted(online))}")
    return reserved


def nic_irq_cpus(spec: NodeSpec, nic: str, node: int, local: list[int], reserved: set[int],
                 irq_cores: list[int] | None = None) -> list[int]:
    """The CPUs NIC ``nic``'s completion IRQs may use: ``irq_cores`` (the IRQ cores a CPU plan sets
    aside on its NUMA node ``node``) when given, else its ``local`` CPUs (``local_cpulist``); never
    one of ``reserved``.

    Args:
        nic: the NIC's name for the message (``ens1f0np0``).  node: its NUMA node (-1: unknown).
        local: its local CPUs (CPU numbers).  reserved: :func:`reserved_cpus`.

    Returns:
        Sorted CPU numbers, never empty.

    Raises:
        Unfit: (key ``cpu.reserved_cpus``) no CPU is left: every local CPU (every whole core, with
            ``cpu.irq_cores_per_numa``) of the NIC's NUMA node is reserved; names what is allowed.
    """
    left = sorted(c for c in (local if irq_cores is None else irq_cores) if c not in reserved)
    if left:
        return left
    what, free = ("no whole core free of them", "one whole core") if irq_cores is not None else ("no CPU", "one CPU")
    raise Unfit("cpu.reserved_cpus", (
        f"{spec.cpu.reserved_cpus} leaves {what} on NUMA node {node} for the completion IRQs of NIC {nic} "
        f"(NIC completion IRQs never go to a reserved CPU); allowed: keep at least {free} of its local CPUs "
        f"{format_cpulist(local) or 'none'} out of cpu.reserved_cpus"))


def plan(spec: NodeSpec, topo: Topology) -> CpuPlan:
    """The CPU plan of ``spec.cpu`` on ``topo`` (pure).

    Returns:
        A :class:`CpuPlan`; ``cpu.irq_cores_per_numa`` None sets no IRQ cores aside.

    Raises:
        Unfit: a reserved CPU the node does not have, a GPU without a NUMA node, a NUMA node with
            fewer free whole cores than GPUs, or a NIC left without an IRQ CPU (:func:`nic_irq_cpus`)
            (names the key, the counts and what is allowed).
    """
    online = online_cpus(topo)
    reserved = reserved_cpus(spec, online)
    n_irq = spec.cpu.irq_cores_per_numa or 0
    nic_nodes = {n.numa_node for n in topo.nics}
    by_node = _gpus_by_node(topo)
    nodes = []
    for node, cpulist in sorted(topo.numa_nodes.items()):
        local = set(parse_cpulist(cpulist)) & online
        cores = _cores(local, topo)
        whole = [c for c in cores if not set(c) & reserved]
        partial = sorted(c for core in cores if set(core) & reserved for c in core if c not in reserved)
        irq, gpus, spare = _split(node, whole, n_irq if node in nic_nodes else 0, by_node.get(node, []), spec,
                                  len(cores))
        nodes.append(NumaPlan(node, sorted(local), sorted(reserved & local), irq, gpus, sorted(partial + spare)))
    for nic in topo.nics:
        p = next((p for p in nodes if p.node == nic.numa_node), None)
        if p is not None:
            nic_irq_cpus(spec, nic.netdev or nic.rdma_device, p.node, p.cpus, reserved, p.irq if n_irq else None)
    every = _cores(online, topo)
    package = lambda core: topo.packages.get(core[0], 0)  # noqa: E731
    index = {core[0]: i for i, core in enumerate(sorted(every, key=lambda core: (package(core), core[0])))}
    return CpuPlan(nodes, index, {c: core for core in every for c in core})


def isolated_cpus(spec: NodeSpec, facts: NodeFacts) -> str:
    """The CPU list of the GPU workers' CPUs (for ``isolcpus=`` / ``nohz_full=`` when ``cpu.isolate``).

    ``facts`` must hold the ``topo/...`` keys: the calling domain's read script includes
    :func:`tuning.node.topology.read_script` (sysfs only, no process per file).

    Raises:
        Unfit: as :func:`plan`; or ``cpu.isolate`` on a node without any NVIDIA GPU.
        ValueError: ``facts`` lack the topology keys (a read script without the topology lines).
    """
    if "topo/gpus" not in facts.raw:
        raise ValueError("facts lack the topo/ keys: include tuning.node.topology.read_script in the read script")
    topo = from_facts(spec, facts)
    if not topo.gpus:
        raise Unfit("cpu.isolate", "the node has no NVIDIA GPU in sysfs; nothing to isolate (allowed: false)")
    return format_cpulist(plan(spec, topo).gpu_workers())


def gres_type(model: str) -> str:
    """Slurm GRES ``Type`` of a GPU model name: its first letters+digits word, lower case
    (``NVIDIA H100 80GB HBM3`` -> ``h100``, ``NVIDIA A100-SXM4-80GB`` -> ``a100``, ``NVIDIA A10G`` ->
    ``a10g``), else the name in lower case
    with ``_`` for spaces."""
    for word in re.split(r"[\s-]+", model):
        if re.fullmatch(r"[A-Za-z]+\d+[A-Za-z]*", word):
            return word.lower()
    return "_".join(model.lower().split())


def gres_lines(cpu_plan: CpuPlan, topo: Topology, gpu_type: str | None = None) -> list[str]:
    """Slurm ``gres.conf`` lines, one per GPU in index order:
    ``Name=gpu Type=h100 File=/dev/nvidia0 Cores=1-6`` (``Cores``: logical core indices, see module doc;
    ``Type`` from ``gpu_type`` or the GPU's model, left out when neither is known)."""
    out = []
    for gpu in sorted(topo.gpus, key=lambda g: g.index):
        kind = gpu_type or gres_type(gpu.model)
        minor = gpu.index if gpu.minor is None else gpu.minor
        cores = format_cpulist(cpu_plan.cores_of(cpu_plan.gpu(gpu.index)))
        out.append(f"Name=gpu{f' Type={kind}' if kind else ''} File=/dev/nvidia{minor} Cores={cores}")
    return out


def json_map(cpu_plan: CpuPlan, topo: Topology) -> dict:
    """The plan as plain data for containers and Kubernetes (a cpuset per GPU):

    ``{"gpus": [{"index", "bdf", "minor", "numa_node", "cpus": "1-6,57-62", "slurm_cores": "1-6",
    "rail_nic", "rail_link", "nearest_nic", "link"}], "numa_nodes": [{"node", "cpus", "reserved",
    "irq_cpus", "spare"}]}`` (CPU lists in the kernel's ``cpulist`` form).
    """
    links = {link.gpu: link for link in topo.links}
    gpus = []
    for gpu in sorted(topo.gpus, key=lambda g: g.index):
        cpus, link = cpu_plan.gpu(gpu.index), links.get(gpu.index)
        gpus.append({"index": gpu.index, "bdf": gpu.bdf, "minor": gpu.minor, "numa_node": gpu.numa_node,
                     "local_cpus": format_cpulist(gpu_cpus(topo, gpu)),
                     "cpus": format_cpulist(cpus), "slurm_cores": format_cpulist(cpu_plan.cores_of(cpus)),
                     "rail_nic": link.rail_nic if link else None, "rail_link": link.rail_link if link else None,
                     "nearest_nic": link.nearest_nic if link else None, "link": link.link if link else None})
    nodes = [{"node": p.node, "cpus": format_cpulist(p.cpus), "reserved": format_cpulist(p.reserved),
              "irq_cpus": format_cpulist(p.irq), "spare": format_cpulist(p.spare)} for p in cpu_plan.nodes]
    return {"gpus": gpus, "numa_nodes": nodes}
