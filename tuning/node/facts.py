"""Discovery a plan needs: each NIC's PCI address, NUMA node, local CPUs, completion IRQs
and driver flavour (MLNX_OFED exposes ``ecn/`` in sysfs, the inbox driver does not),
plus the node's online CPUs. Formats: ``shared/cases/cli/SYSFS.md`` and ``/proc/interrupts``.
"""

from __future__ import annotations

from tuning.model import NodeSpec
from tuning.node.base import ABSENT, NodeFacts
from tuning.transport.base import q, sysroot_path


def read_script(spec: NodeSpec, sysroot: str) -> list[str]:
    """Shell lines printing ``cpu/online`` and ``nic/<if>/{bdf,numa_node,local_cpulist,comp_irqs,driver}``."""
    s = lambda p: q(sysroot_path(sysroot, p))  # noqa: E731
    lines = [f"r cpu/online {s('/sys/devices/system/cpu/online')}"]
    for nic in spec.nics:
        dev = f"/sys/class/net/{nic.netdev}"
        k = f"nic/{nic.netdev}"  # inventory text: every use below is quoted
        lines += [
            f'bdf=$(basename "$(readlink -f {s(dev + "/device")})" 2>/dev/null)',
            f"printf '%s\\t%s\\n' {q(k + '/bdf')} \"$bdf\"",
            f"r {q(k + '/numa_node')} {s(dev + '/device/numa_node')}",
            f"r {q(k + '/local_cpulist')} {s(dev + '/device/local_cpulist')}",
            f"printf '%s\\t%s\\n' {q(k + '/comp_irqs')} \"$(grep -E \"mlx5_comp[0-9]+@pci:$bdf\\$\" "
            f"{s('/proc/interrupts')} 2>/dev/null | cut -d: -f1 | tr -d ' ' | tr '\\n' ' ')\"",
            f"if [ -d {s(dev + '/ecn')} ]; then printf '%s\\tofed\\n' {q(k + '/driver')}; "
            f"else printf '%s\\tinbox\\n' {q(k + '/driver')}; fi",
        ]
    return lines


def from_raw(spec: NodeSpec, raw: dict[str, str]) -> NodeFacts:
    """Build :class:`NodeFacts` from the read script's key/value lines."""
    facts = NodeFacts(online_cpus=raw.get("cpu/online", ""), raw=raw)
    for nic in spec.nics:
        k = f"nic/{nic.netdev}"
        irqs = raw.get(f"{k}/comp_irqs", "")
        facts.nics[nic.netdev] = {
            "bdf": raw.get(f"{k}/bdf", ""),
            "numa_node": raw.get(f"{k}/numa_node", ABSENT),
            "local_cpulist": raw.get(f"{k}/local_cpulist", ABSENT),
            "comp_irqs": [int(x) for x in irqs.split() if x.isdigit()],
            "driver": raw.get(f"{k}/driver", "inbox"),
        }
    return facts
