"""Text helpers every parser module shares (issue 3): echoed prompt lines, interleaved noise lines,
placeholder cells, counts with thousands separators and sizes with binary units.

The cleaning every tool output gets first (ANSI, CRLF, MPI prefixes, trailing spaces) is
:func:`tuning.parsers.base.clean_lines`; these helpers work on the cleaned lines.
"""

from __future__ import annotations

import re

from tuning.parsers.base import Quantity

__all__ = ["PLACEHOLDERS", "is_noise", "is_prompt", "mlx_sort_key", "placeholder", "size_quantity", "to_int"]

#: numeric cells that mean "no value" (perftest prints ``-nan`` on a 1-sample stdev, tools print N/A)
PLACEHOLDERS = frozenset({"n/a", "na", "-", "--", "nan", "-nan", "inf", "-inf"})

_PROMPT = re.compile(r"^(?:\[[^\]]*\]\s?[#$]|[\w.-]+@[\w.:~/-]*[#$]|bash-[\d.]+[#$]|[$#])(?:\s|$)")
#: text cells that mean "no value" (``N/A``, ``-``, blank)
_TEXT_PLACEHOLDERS = {"", "N/A", "n/a", "-", "None"}
_SIZE_FACTORS = {"B": 1, "BYTES": 1, "BYTE": 1, "KB": 2**10, "KIB": 2**10, "K": 2**10,
                 "MB": 2**20, "MIB": 2**20, "M": 2**20, "GB": 2**30, "GIB": 2**30, "G": 2**30,
                 "TB": 2**40, "TIB": 2**40}
_NOISE = (
    re.compile(r"Conflicting CPU frequency values detected"),
    re.compile(r"CPU Frequency is not max"),
    re.compile(r"^(?:WARNING|Warning|warning)\b"),
)


def is_prompt(line: str) -> bool:
    """True for an echoed shell prompt line (``cumulus@sw:mgmt:~$ nv show ...``, ``[root@h ~]# ...``, ``$ cmd``)."""
    return bool(_PROMPT.match(line.strip()))


def is_noise(norm: str) -> bool:
    """True for a line any tool may interleave (cpufreq warnings, ``Warning:``); ``norm`` has single spaces."""
    return any(p.search(norm) for p in _NOISE)


def placeholder(raw: str | None) -> str | None:
    """``raw`` stripped, or None for a placeholder (``N/A``, ``-``, blank)."""
    if raw is None:
        return None
    raw = raw.strip()
    return None if raw in _TEXT_PLACEHOLDERS else raw


def to_int(raw: str) -> int | None:
    """An integer as printed, allowing thousands separators (``15,437``); placeholders are None.

    Raises:
        ValueError: not an integer (callers turn it into a ParseError naming the line).
    """
    value = placeholder(raw)
    return None if value is None else int(value.replace(",", ""))


def size_quantity(raw: str, unit: str) -> Quantity:
    """A size printed with its unit (``146.48`` ``KB``) normalised to bytes.

    NVUE, numactl and mlnx tools print binary sizes with decimal-looking labels: NVUE shows the
    default 150000-byte ECN min-threshold as ``146.48 KB``, so KB = 2^10, MB = 2^20, GB = 2^30.

    Raises:
        ValueError: unknown unit.
    """
    factor = _SIZE_FACTORS.get(unit.upper())
    if factor is None:
        raise ValueError(f"unknown size unit {unit!r}")
    return Quantity(value=round(float(raw) * factor, 1), raw=raw, unit=unit, unit_norm="bytes")


def mlx_sort_key(name: str) -> tuple[str, int]:
    """Sort key putting ``mlx5_2`` before ``mlx5_10`` (numeric suffix)."""
    m = re.match(r"^(.*?)(\d+)$", name)
    return (m.group(1), int(m.group(2))) if m else (name, -1)
