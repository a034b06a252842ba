"""The values of an InfiniBand port's sysfs attributes, ``/sys/class/infiniband/<hca>/ports/<p>/``.

Formats as the kernel prints them (``drivers/infiniband/core/sysfs.c``; the ABI in
``Documentation/ABI/stable/sysfs-class-infiniband``), each followed by a newline:

- ``state``: ``"%d: %s"`` of NOP, DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER (``4: ACTIVE``);
- ``phys_state``: ``"%u: %s"`` of Sleep, Polling, Disabled, PortConfigurationTraining, LinkUp,
  LinkErrorRecovery, Phy Test (``5: LinkUp``);
- ``rate``: ``"%d%s Gb/sec (%dX%s)"``, the rate in Gb/s (``.5`` when it has a half), the width and the
  speed word with its blank (``200 Gb/sec (4X HDR)``, ``2.5 Gb/sec (1X SDR)``; kernels before the HDR
  speed printed no word for SDR: ``10 Gb/sec (4X)``);
- ``lid``, ``sm_lid``: ``"0x%x"`` (``0x1``; ``0x0`` before an SM assigned one);
- ``link_layer``: ``InfiniBand``, ``Ethernet`` or ``Unknown``;
- ``pkeys/<n>``: ``"0x%04x"`` (``0xffff``: the Default partition, full member);
- ``gids/<n>``: ``"%pI6"``, eight groups of four hex digits (``fe80:0000:0000:0000:0c42:a103:0000:0101``);
  on an InfiniBand port ``gids/0`` is the subnet prefix and the port GUID (what ``ibstat`` reads as
  "Port GUID");
- ``counters/<name>``: ``"%u"`` / ``"%llu"``, or ``N/A (no PMA)`` when the HCA answers no PMA query.

Nothing here reads a file: the node reader (:mod:`tuning.node.ib_ports`) reads them in one round trip
and the lab writer (:mod:`tuning.lab.ib_nodes`) writes them through :func:`rate_text` and the tables here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tuning.errors import ParseError

__all__ = ["LANE_GBPS", "PHYS_STATES", "STATES", "IbRate", "parse_counter", "parse_gid", "parse_hex", "parse_numbered",
           "parse_rate", "rate_text"]

#: per-lane rate in Gb/s of each speed word ``rate_show`` prints, slowest first (FDR: 14, its deci-Gb/s
#: arithmetic; the words are the intent's ``speed`` values, :class:`tuning.model.ib_ports.IbPortsSpec`)
LANE_GBPS = {"SDR": 2.5, "DDR": 5.0, "QDR": 10.0, "FDR10": 10.0, "FDR": 14.0, "EDR": 25.0, "HDR": 50.0,
             "NDR": 100.0, "XDR": 200.0}
#: ``state`` numbers and names (``enum ib_port_state``, ``state_show``)
STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
#: ``phys_state`` numbers and names (``phys_state_to_str``)
PHYS_STATES = {1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining", 5: "LinkUp",
               6: "LinkErrorRecovery", 7: "Phy Test"}
_NUMBERED = re.compile(r"(\d+): (\S.*)")
_RATE = re.compile(r"(\d+)(\.5)? Gb/sec \((\d+)X(?: (" + "|".join(LANE_GBPS) + r"))?\)")
_HEX = re.compile(r"0x([0-9a-f]+)")
_GID = re.compile(r"[0-9a-f]{4}(?::[0-9a-f]{4}){7}")
_WHAT = "sysfs"


@dataclass(frozen=True)
class IbRate:
    """A port's ``rate``: ``gbps`` (200.0), ``lanes`` (4) and ``speed`` (``HDR``)."""

    gbps: float
    lanes: int
    speed: str

    @property
    def width(self) -> str:
        """``4X``."""
        return f"{self.lanes}X"


def parse_numbered(text: str, what: str) -> tuple[int, str]:
    """``4: ACTIVE`` -> ``(4, "ACTIVE")`` (``state``, ``phys_state``).

    Raises:
        ParseError: not ``N: NAME`` (names ``what``, the file read).
    """
    m = _NUMBERED.fullmatch(text.strip())
    if not m:
        raise ParseError(_WHAT, 0, f"'N: NAME' in {what}", text)
    return int(m.group(1)), m.group(2)


def parse_rate(text: str) -> IbRate:
    """``200 Gb/sec (4X HDR)`` -> ``IbRate(200.0, 4, "HDR")``; no speed word reads as SDR (older kernels).

    Raises:
        ParseError: another form, or a rate that is not width x the speed's lane rate.
    """
    m = _RATE.fullmatch(text.strip())
    if not m:
        raise ParseError(_WHAT, 0, "'<n> Gb/sec (<w>X <speed>)' in rate", text)
    rate = IbRate(int(m.group(1)) + (0.5 if m.group(2) else 0.0), int(m.group(3)), m.group(4) or "SDR")
    if abs(rate.gbps - rate.lanes * LANE_GBPS[rate.speed]) > 0.5:  # FDR: 4 x 14.0625 prints 56
        raise ParseError(_WHAT, 0, f"a rate of {rate.width} x {rate.speed}'s lane rate", text)
    return rate


def rate_text(lanes: int, speed: str) -> str:
    """What the kernel prints in ``rate`` for ``lanes`` x ``speed`` (``4, "HDR"`` -> ``200 Gb/sec (4X HDR)``):
    ``rate_show``'s deci-Gb/s arithmetic (FDR is 14 a lane there)."""
    deci = int(round(LANE_GBPS[speed] * 10)) * lanes
    return f"{deci // 10}{'.5' if deci % 10 else ''} Gb/sec ({lanes}X {speed})"


def parse_hex(text: str, what: str) -> int:
    """``0x1`` -> 1 (``lid``, ``sm_lid``, ``pkeys/<n>``).

    Raises:
        ParseError: not lowercase ``0x`` hex.
    """
    m = _HEX.fullmatch(text.strip())
    if not m:
        raise ParseError(_WHAT, 0, f"'0x<hex>' in {what}", text)
    return int(m.group(1), 16)


def parse_gid(text: str) -> tuple[int, int]:
    """``fe80:0000:0000:0000:0c42:a103:0000:0101`` -> ``(0xfe80000000000000, 0x0c42a10300000101)``: the
    subnet prefix and the port GUID of ``gids/0``.

    Raises:
        ParseError: not eight colon-separated groups of four lowercase hex digits.
    """
    t = text.strip()
    if not _GID.fullmatch(t):
        raise ParseError(_WHAT, 0, "'%pI6' (eight groups of four hex digits) in gids/", text)
    raw = int(t.replace(":", ""), 16)
    return raw >> 64, raw & (2 ** 64 - 1)


def parse_counter(text: str) -> int | None:
    """A ``counters/<name>`` value: its count, or None for ``N/A (no PMA)`` (unknown, never 0).

    Raises:
        ParseError: anything else.
    """
    t = text.strip()
    if t.isdigit():
        return int(t)
    if t == "N/A (no PMA)":
        return None
    raise ParseError(_WHAT, 0, "a count or 'N/A (no PMA)' in counters/", text)
