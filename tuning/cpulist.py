"""CPU lists and CPU masks in the kernel's formats, stdlib only (the lab's stand-ins import it
under ``python -S``).

Formats: ``cpulist`` (``%*pbl``: ``0-27,56-83``) as in ``/sys/devices/system/cpu/online``,
``local_cpulist`` and ``/proc/irq/N/smp_affinity_list``; the bitmap (``%*pb``:
``0000,000fffff,ff000000,0fffffff``) as in ``local_cpus`` and ``smp_affinity``
(kernel ``Documentation/core-api/irq/irq-affinity.rst``).
"""

from __future__ import annotations

import re


def parse_cpulist(text: str) -> list[int]:
    """``"0-27,56-83"`` -> ``[0, 1, ..., 27, 56, ..., 83]`` (sorted, unique). Empty text -> ``[]``.

    Raises:
        ValueError: not a CPU list (a range that runs backwards, a non-number).
    """
    cpus: set[int] = set()
    for part in filter(None, (p.strip() for p in text.strip().split(","))):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()) or (hi.isdigit() and int(hi) < int(lo)):
            raise ValueError(f"bad CPU list item {part!r} in {text!r}")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return sorted(cpus)


def format_cpulist(cpus: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"`` (the kernel's ``cpulist`` form)."""
    out: list[str] = []
    ordered = sorted(set(cpus))
    start = prev = None
    for cpu in ordered + [None]:  # type: ignore[list-item]
        if start is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(out)


def parse_hex_mask(text: str) -> list[int]:
    """An affinity mask as in ``smp_affinity`` (``"00000000,0000000f"``) -> ``[0, 1, 2, 3]``.

    Raises:
        ValueError: not comma-separated hex words.
    """
    value = text.strip().replace(",", "")
    if not value or not re.fullmatch(r"[0-9a-fA-F]+", value):
        raise ValueError(f"bad CPU mask {text!r}")
    n = int(value, 16)
    return [i for i in range(n.bit_length()) if n >> i & 1]


def cpumask_hex(cpus: list[int], nr_cpus: int) -> str:
    """CPU set as the kernel prints a bitmap: 32-bit hex groups, most significant first.

    The leading group is only as wide as ``nr_cpus`` needs (4 digits for 112 CPUs),
    e.g. CPUs 0-27,56-83 of 112 -> ``0000,000fffff,ff000000,0fffffff``.
    """
    mask = sum(1 << c for c in cpus)
    groups = [(mask >> (32 * i)) & 0xFFFFFFFF for i in range((nr_cpus + 31) // 32)]
    lead_digits = ((nr_cpus % 32) + 3) // 4 or 8
    text = [f"{groups[-1]:0{lead_digits}x}"] + [f"{g:08x}" for g in reversed(groups[:-1])]
    return ",".join(text)


