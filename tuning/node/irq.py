"""Completion IRQ affinity of each NIC: spread ``mlx5_comp<k>@pci:<bdf>`` IRQs one CPU each over
the CPUs of the NIC's own NUMA node (``device/local_cpulist``), or over ``irq_cpus``.

IRQs are found by PCI BDF in ``/proc/interrupts`` (not by netdev name; shared/cases INDEX.md);
``/proc/irq/<N>/smp_affinity_list`` is read and written as a CPU list (kernel
``Documentation/core-api/irq/irq-affinity.rst``). NICs on the same NUMA node start at different
offsets so their IRQs do not pile on the same CPUs.

Example profile::

    irq_affinity: numa-local      # or: off
    irq_cpus: 0-15,56-71          # optional: use these CPUs instead of the NIC's local ones
"""

from __future__ import annotations

import re

from tuning.model import NodeSpec
from tuning.node.base import ABSENT, Domain, NodeFacts, Unfit, cat_cmd, write_file_cmd
from tuning.cpulist import format_cpulist, parse_cpulist
from tuning.transport.base import q, sysroot_path


#: the highest CPU number a read value is parsed for (the kernel's NR_CPUS is at most 8192)
MAX_CPU = 8191


def _cpus_for(spec: NodeSpec, facts: NodeFacts, netdev: str) -> list[int]:
    if spec.irq_cpus:
        want = parse_cpulist(spec.irq_cpus)
        online = set(parse_cpulist(facts.online_cpus)) if facts.online_cpus not in ("", ABSENT) else set()
        missing = [c for c in want if c not in online]
        if missing:
            raise Unfit("irq_cpus", f"CPUs {format_cpulist(missing)} do not exist on this node; "
                                    f"allowed: online CPUs {facts.online_cpus}")
        return want
    local = facts.nics[netdev]["local_cpulist"]
    if local in ("", ABSENT):
        return []
    return parse_cpulist(local)


def irq_plan(spec: NodeSpec, facts: NodeFacts) -> dict[int, int]:
    """IRQ number -> CPU for every NIC's completion IRQs.

    Returns:
        ``{151: 0, 152: 1, ...}``; NICs whose local CPUs are unknown (``numa_node`` -1) are skipped.
    """
    out: dict[int, int] = {}
    offsets: dict[str, int] = {}
    for nic in spec.nics:
        f = facts.nics.get(nic.netdev)
        if not f or not f["comp_irqs"]:
            continue
        cpus = _cpus_for(spec, facts, nic.netdev)
        if not cpus:
            continue
        group = str(f["numa_node"]) if not spec.irq_cpus else "override"
        start = offsets.get(group, 0)
        for k, irq in enumerate(f["comp_irqs"]):
            out[irq] = cpus[(start + k) % len(cpus)]
        offsets[group] = start + len(f["comp_irqs"])
    return out


class IrqDomain(Domain):
    """One key per completion IRQ: ``irq/<netdev>/<N>`` -> CPU list (``"28"``)."""

    name = "irq"
    boot_script = True

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        if spec.irq_affinity == "off":
            return []
        irq_dir = sysroot_path(sysroot, "/proc/irq")
        return [
            f"for f in {q(irq_dir)}/*/smp_affinity_list; do n=${{f%/smp_affinity_list}}; "
            f"r irq/${{n##*/}} \"$f\"; done"
        ]

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        if spec.irq_affinity == "off":
            return {}
        return {f"irq/{nic}/{n}": facts.raw.get(f"irq/{n}", ABSENT) for nic, n in _nic_irqs(spec, facts)}

    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        if spec.irq_affinity == "off":
            return {}
        cpus = irq_plan(spec, facts)
        return {f"irq/{nic}/{n}": str(cpus[n]) for nic, n in _nic_irqs(spec, facts) if n in cpus}

    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str | None:
        if value == ABSENT:
            return None
        return write_file_cmd(sysroot, _path(key), value)

    def read_cmd(self, key: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        return cat_cmd(sysroot, _path(key))

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
