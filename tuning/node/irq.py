"""Completion IRQ affinity of each NIC: spread ``mlx5_comp<k>@pci:<bdf>`` IRQs one CPU each over
the IRQ CPUs of the NIC's own NUMA node.

Which CPUs, in order of precedence:

1. ``irq_cpus`` (explicit; refused when it holds a CPU the node lacks or one of ``cpu.reserved_cpus``);
2. with a CPU plan (``cpu.irq_cores_per_numa`` set, :mod:`tuning.node.cpuplan`): the IRQ cores of the
   NIC's NUMA node (never a reserved CPU, never a GPU worker's);
3. otherwise the NIC's ``device/local_cpulist`` minus ``cpu.reserved_cpus``.

``cpu.reserved_cpus`` is refused (``Unfit``, before anything is pushed) when it names a CPU the node
does not have, or leaves a NIC's NUMA node without an IRQ CPU (2 and 3): the rules of
:func:`tuning.node.cpuplan.reserved_cpus` and :func:`tuning.node.cpuplan.nic_irq_cpus`, which
``fabtune topology`` applies too.

IRQs are found by PCI BDF in ``/proc/interrupts`` (not by netdev name; shared/cases INDEX.md);
``/proc/irq/<N>/smp_affinity_list`` is read and written as a CPU list (kernel
``Documentation/core-api/irq/irq-affinity.rst``). The IRQs of NICs that share a CPU list are dealt
round-robin over it as one sequence, so no CPU takes a second IRQ while one of the list is free.
The domain also reads the node's topology (sysfs only) and reports a rail whose GPU sits on another
NUMA node than its NIC (finding ``rail-remote-nic``; ``fabtune topology`` shows the PCIe-level map).

Example profile::

    irq_affinity: numa-local      # or: off
    irq_cpus: 0-15,56-71          # optional: use these CPUs instead of the NIC's local ones
    cpu: {reserved_cpus: "0,56,28,84", irq_cores_per_numa: 2}
"""

from __future__ import annotations

import re

from tuning.model import NodeSpec
from tuning.node import cpuplan, topology
from tuning.node.base import ABSENT, FileDomain, Finding, NodeFacts, Unfit
from tuning.cpulist import format_cpulist, parse_cpulist
from tuning.transport.base import q, sysroot_path


#: the highest CPU number a read value is parsed for (the kernel's NR_CPUS is at most 8192)
MAX_CPU = 8191


def _override(spec: NodeSpec, facts: NodeFacts, reserved: set[int]) -> list[int]:
    """``irq_cpus`` checked against the online and the reserved CPUs. Raises Unfit."""
    want = parse_cpulist(spec.irq_cpus or "")
    online = set(parse_cpulist(facts.online_cpus)) if facts.online_cpus not in ("", ABSENT) else set()
    missing = [c for c in want if c not in online]
    if missing:
        raise Unfit("irq_cpus", f"CPUs {format_cpulist(missing)} do not exist on this node; "
                                f"allowed: online CPUs {facts.online_cpus}")
    if reserved & set(want):
        raise Unfit("irq_cpus", f"CPUs {format_cpulist(sorted(reserved & set(want)))} are cpu.reserved_cpus "
                                f"({spec.cpu.reserved_cpus}), kept for the OS; allowed: CPUs outside them")
    return want


def _cpu_lists(spec: NodeSpec, facts: NodeFacts) -> dict[str, list[int]]:
    """netdev -> the CPUs its completion IRQs may use (see the module doc). Raises Unfit."""
    topo = topology.from_facts(spec, facts)
    reserved = cpuplan.reserved_cpus(spec, cpuplan.online_cpus(topo))
    if spec.irq_cpus:
        cpus = _override(spec, facts, reserved)
        return {nic.netdev: cpus for nic in spec.nics}
    if spec.cpu.irq_cores_per_numa is not None:
        plan = cpuplan.plan(spec, topo)
        return {nic.netdev: plan.irq_cpus(_numa(facts, nic.netdev)) for nic in spec.nics}
    out = {}
    for nic in spec.nics:
        local = facts.nics.get(nic.netdev, {}).get("local_cpulist", ABSENT)
        out[nic.netdev] = [] if local in ("", ABSENT) else cpuplan.nic_irq_cpus(
            spec, nic.netdev, _numa(facts, nic.netdev), parse_cpulist(local), reserved)
    return out


_INT = re.compile(r"-?\d+")


def _numa(facts: NodeFacts, netdev: str) -> int:
    value = str(facts.nics.get(netdev, {}).get("numa_node", ""))
    return int(value) if _INT.fullmatch(value) else -1


def irq_plan(spec: NodeSpec, facts: NodeFacts) -> dict[int, int]:
    """IRQ number -> CPU for every NIC's completion IRQs.

    NICs with the same CPU list share one round-robin sequence (in NIC order), so a CPU takes a
    second IRQ only when every CPU of the list has one.

    Returns:
        ``{151: 0, 152: 1, ...}``; NICs without IRQ CPUs (``numa_node`` -1, or no IRQ cores on
        their node) are skipped.

    Raises:
        Unfit: ``irq_cpus`` names a missing or reserved CPU; ``cpu.reserved_cpus`` names a CPU the node
            lacks or leaves a NIC without an IRQ CPU (:func:`tuning.node.cpuplan.nic_irq_cpus`); the CPU
            plan does not fit (see :func:`tuning.node.cpuplan.plan`).
    """
    out: dict[int, int] = {}
    offsets: dict[tuple[int, ...], int] = {}
    if not any(facts.nics.get(nic.netdev, {}).get("comp_irqs") for nic in spec.nics) and not (
            spec.irq_cpus or spec.cpu.irq_cores_per_numa is not None or spec.cpu.reserved_cpus):
        return out  # no IRQ to pin and no CPU setting to check (offline: a topology per node, for nothing)
    lists = _cpu_lists(spec, facts)
    for nic in spec.nics:
        f = facts.nics.get(nic.netdev)
        cpus = lists.get(nic.netdev, [])
        if not f or not f["comp_irqs"] or not cpus:
            continue
        start = offsets.get(tuple(cpus), 0)
        for k, irq in enumerate(f["comp_irqs"]):
            out[irq] = cpus[(start + k) % len(cpus)]
        offsets[tuple(cpus)] = start + len(f["comp_irqs"])
    return out


class IrqDomain(FileDomain):
    """One key per completion IRQ: ``irq/<netdev>/<N>`` -> CPU list (``"28"``)."""

    name = "irq"
    boot_script = True

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        if spec.irq_affinity == "off":
            return []
        irq_dir = sysroot_path(sysroot, "/proc/irq")
        return [
            f"for f in {q(irq_dir)}/*/smp_affinity_list; do iq=${{f%/smp_affinity_list}}; "  # not n: bp's counter
            f"r irq/${{iq##*/}} \"$f\"; done"
        ] + topology.read_script(spec, sysroot)

    def findings(self, device: str, spec: NodeSpec, facts: NodeFacts, current: dict[str, str]) -> list[Finding]:
        """``rail-remote-nic`` for every rail whose GPU sits on another NUMA node than the rail's NIC
        (sysfs ``numa_node`` of both; ``fabtune topology`` also sees PCIe switches)."""
        if spec.irq_affinity == "off" or "topo/gpus" not in facts.raw:
            return []
        topo = topology.from_facts(spec, facts)
        return [Finding(device, self.name, "rail-remote-nic", link.flag or "",
                        f"GPU{link.gpu} {gpu.bdf} numa_node {gpu.numa_node}; {link.rail_nic} numa_node "
                        f"{next(n.numa_node for n in topo.nics if n.rdma_device == link.rail_nic)}")
                for link, gpu in zip(topo.links, topo.gpus) if link.flag]

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        if spec.irq_affinity == "off":
            return {}
        return {f"irq/{nic}/{n}": facts.raw.get(f"irq/{n}", ABSENT) for nic, n in _nic_irqs(spec, facts)}

    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        if spec.irq_affinity == "off":
            return {}
        cpus = irq_plan(spec, facts)
        return {f"irq/{nic}/{n}": str(cpus[n]) for nic, n in _nic_irqs(spec, facts) if n in cpus}

    def path(self, key: str) -> str:
        return _path(key)

    def same(self, have: str, want: str) -> bool:
        """CPU lists compare as sets (``0-1`` == ``0,1``); unparsable or implausible text (a CPU
        number past :data:`MAX_CPU`, which no kernel prints) compares as text."""
        if any(int(n) > MAX_CPU for n in re.findall(r"\d+", f"{have} {want}")):
            return super().same(have, want)
        try:
            return parse_cpulist(have) == parse_cpulist(want)
        except ValueError:
            return super().same(have, want)


def _path(key: str) -> str:
    """``irq/<netdev>/<N>`` -> ``/proc/irq/<N>/smp_affinity_list``."""
    return f"/proc/irq/{int(key.rsplit('/', 1)[1])}/smp_affinity_list"


def _nic_irqs(spec: NodeSpec, facts: NodeFacts) -> list[tuple[str, int]]:
    """(netdev, IRQ number) of every completion IRQ of the node's NICs, in NIC order."""
    return [(nic.netdev, irq) for nic in spec.nics for irq in facts.nics.get(nic.netdev, {}).get("comp_irqs", [])]
