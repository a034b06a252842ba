"""Discovery a plan needs: each NIC's PCI address, NUMA node, local CPUs, completion IRQs
and driver flavour (MLNX_OFED exposes ``ecn/`` in sysfs, the inbox driver does not),
plus the node's online CPUs. Formats: ``shared/cases/cli/SYSFS.md`` and ``/proc/interrupts``.
"""

from __future__ import annotations

import re

from tuning.model import NodeSpec
from tuning.node.base import ABSENT, NodeFacts, decode
from tuning.transport.base import q, sysroot_path

#: raw key of every ``mlx5_comp<k>@pci:<BDF>`` line of ``/proc/interrupts`` (base64, one read per node)
COMP_LINES = "nic/comp_lines"


def read_script(spec: NodeSpec, sysroot: str) -> list[str]:
    """Shell lines printing ``cpu/online``, the node's completion IRQ lines (:data:`COMP_LINES`) and
    ``nic/<if>/{bdf,numa_node,local_cpulist,driver}``.

    Few forks per NIC (a node is read before every plan, push and report): ``/proc/interrupts`` is
    read once per node, not once per NIC through a pipeline of four tools (the IRQs of each NIC are
    picked in :func:`from_raw`), and the PCI address is ``readlink -f`` with the shell's ``${x##*/}``
    for ``basename``.
    """
    s = lambda p: q(sysroot_path(sysroot, p))  # noqa: E731
    lines = [f"r cpu/online {s('/sys/devices/system/cpu/online')}",
             f"b {COMP_LINES} grep -E 'mlx5_comp[0-9]+@pci:' {s('/proc/interrupts')}"]
    for nic in spec.nics:
        dev = f"/sys/class/net/{nic.netdev}"
        k = f"nic/{nic.netdev}"  # inventory text: every use below is quoted
        lines += [
            f'bdf=$(readlink -f {s(dev + "/device")} 2>/dev/null); bdf=${{bdf##*/}}',
            f"printf '%s\\t%s\\n' {q(k + '/bdf')} \"$bdf\"",
            f"r {q(k + '/numa_node')} {s(dev + '/device/numa_node')}",
            f"r {q(k + '/local_cpulist')} {s(dev + '/device/local_cpulist')}",
            f"if [ -d {s(dev + '/ecn')} ]; then printf '%s\\tofed\\n' {q(k + '/driver')}; "
            f"else printf '%s\\tinbox\\n' {q(k + '/driver')}; fi",
        ]
    return lines


def comp_irqs(comp_lines: str, bdf: str) -> list[int]:
    """The completion IRQ numbers of the NIC at PCI address ``bdf``, in ``/proc/interrupts`` order: each
    line ending ``mlx5_comp<k>@pci:<bdf>`` gives the number before its first colon (kernel
    ``show_interrupts``: ``%*d: `` right-aligned). ``comp_lines``: those lines of the file. The
    address is matched literally (the former ``grep -E`` took its dots for any character)."""
    want = re.compile(rf"mlx5_comp[0-9]+@pci:{re.escape(bdf)}$")
    out = []
    for line in comp_lines.split("\n"):
        if bdf and want.search(line):
            number = line.split(":", 1)[0].replace(" ", "")
            if number.isdigit():
                out.append(int(number))
    return out


def from_raw(spec: NodeSpec, raw: dict[str, str]) -> NodeFacts:
    """Build :class:`NodeFacts` from the read script's key/value lines."""
    facts = NodeFacts(online_cpus=raw.get("cpu/online", ""), raw=raw)
    lines = decode(raw.get(COMP_LINES, ABSENT))
    lines = "" if lines == ABSENT else lines  # grep found none (exit 1), or no /proc/interrupts
    for nic in spec.nics:
        k = f"nic/{nic.netdev}"
        bdf = raw.get(f"{k}/bdf", "")
        facts.nics[nic.netdev] = {
            "bdf": bdf,
            "numa_node": raw.get(f"{k}/numa_node", ABSENT),
            "local_cpulist": raw.get(f"{k}/local_cpulist", ABSENT),
            "comp_irqs": comp_irqs(lines, bdf),
            "driver": raw.get(f"{k}/driver", "inbox"),
        }
    return facts
