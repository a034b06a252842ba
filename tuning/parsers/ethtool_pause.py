"""Parser for ``ethtool -a IF`` (``--show-pause``): 802.3x link-level (global) pause of a netdev.

Format (ethtool ``netlink/pause.c`` ``pause_reply_cb``; the older ioctl ethtool prints the same lines;
shared/cases/cli ``ethtool_a__global_pause_formats.txt``)::

    Pause parameters for ens1f0np0:
    Autonegotiate:\\toff
    RX:\\t\\ton
    TX:\\t\\ton
    RX negotiated: on          (only with autoneg on and link-partner data)
    TX negotiated: on
    Statistics:                (``ethtool -I -a``)
      tx_pause_frames: 0

A device without pause support prints ``Cannot get device pause settings: Operation not supported``
(ioctl ethtool) or ``netlink error: Operation not supported``. Published copies often have the tabs
expanded to spaces; both read the same.

Findings need a fact the output lacks, whether PFC is used on the NIC: with the context
``{"pfc": "3"}`` (PFC priorities, comma-separated; empty for none) pause on beside PFC is reported
with its direction (:func:`pause_findings`, shared by the node domain ``pause``).
"""

from __future__ import annotations

import re

from tuning.errors import InputError, ParseError
from tuning.parsers.base import Finding, Parsed, ToolFailure, clean_lines, context_findings, parser
from tuning.parsers.text import is_prompt

_HEAD = re.compile(r"^Pause parameters for (\S+):$")
_FIELDS = {"Autonegotiate": "autoneg", "RX": "rx", "TX": "tx", "RX negotiated": "rx_negotiated",
           "TX negotiated": "tx_negotiated"}
_UNSUPPORTED = re.compile(r"^(Cannot get device pause settings|netlink error): (.+)$")


class PauseParams(Parsed):
    """Global pause of one netdev as ``ethtool -a`` prints it.

    Attributes:
        ifname: the interface.  autoneg / rx / tx: the configured state (None when the tool failed).
        rx_negotiated / tx_negotiated: the autonegotiated result, when printed.
        stats: ``Statistics:`` counters (``tx_pause_frames`` ...), when printed.
    """

    ifname: str = ""
    autoneg: bool | None = None
    rx: bool | None = None
    tx: bool | None = None
    rx_negotiated: bool | None = None
    tx_negotiated: bool | None = None
    stats: dict[str, int] = {}

    def value(self) -> str:
        """The node domain's value: ``rx on tx off``."""
        return f"rx {'on' if self.rx else 'off'} tx {'on' if self.tx else 'off'}"


@parser("ethtool-a")
def parse_ethtool_a(text: str) -> PauseParams:
    """Parse one ``ethtool -a IF`` output.

    Raises:
        ParseError: no ``Pause parameters for IF:`` header, or a line that is not a pause field.
    """
    lines = [l for l in clean_lines(text) if l.strip() and not is_prompt(l)]
    if not lines or not _HEAD.match(lines[0].strip()):
        raise ParseError("ethtool-a", 1, "'Pause parameters for IF:'", lines[0] if lines else "")
    out: dict = {"ifname": _HEAD.match(lines[0].strip()).group(1), "stats": {}}
    in_stats = False
    for no, line in enumerate(lines[1:], start=2):
        s = line.strip()
        bad = _UNSUPPORTED.match(s)
        if bad:
            out["failure"] = ToolFailure(kind="not_supported", message=s,
                                         likely_cause="the driver has no link-level pause control")
            continue
        if s == "Statistics:":
            in_stats = True
            continue
        key, sep, val = s.partition(":")
        val = val.strip()
        if in_stats and sep and val.isdigit():
            out["stats"][key.strip()] = int(val)
        elif sep and key.strip() in _FIELDS and val in ("on", "off"):
            out[_FIELDS[key.strip()]] = val == "on"
        else:
            raise ParseError("ethtool-a", no, "'Autonegotiate:|RX:|TX:' with on|off", line)
    result = PauseParams(tool="ethtool-a", **out)
    if result.failure is None and (result.rx is None or result.tx is None):
        raise ParseError("ethtool-a", len(lines), "'RX:' and 'TX:' lines", lines[-1])
    return result


def pause_findings(ifname: str, rx: bool, tx: bool, pfc: list[int]) -> list[Finding]:
    """What global pause on beside PFC does, one finding per direction (none without PFC).

    RX on: the NIC obeys the peer's (the switch port's) 802.3x pause frames, which stop ALL traffic
    on the link, the lossless and the lossy priorities alike; TX on: the NIC sends them itself when its
    receive buffers fill, pausing everything the switch port sends it. With PFC the pause must be per
    priority; mlx5 and the switch should not mix the two (NVIDIA RoCE configuration guides turn global
    pause off: ``ethtool -A IF rx off tx off``).
    """
    if not pfc:
        return []
    prios = ",".join(str(p) for p in pfc)
    out = []
    if rx:
        out.append(Finding(code="global-pause-rx", severity="warn", subject=ifname,
                           message=f"{ifname}: 802.3x pause RX on beside PFC (priority {prios}): the peer's "
                                   "pause frames throttle this NIC on every priority"))
    if tx:
        out.append(Finding(code="global-pause-tx", severity="warn", subject=ifname,
                           message=f"{ifname}: 802.3x pause TX on beside PFC (priority {prios}): this NIC "
                                   "pauses its peer (the switch port) on every priority"))
    return out


def parse_pfc(text: str) -> list[int]:
    """PFC priorities from ``3`` / ``3,4`` / ``0,0,0,1,0,0,0,0`` (8 flags) / ``""``.

    Raises:
        ValueError: not a priority list.
    """
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if len(parts) == 8 and set(parts) <= {"0", "1"}:
        return [i for i, p in enumerate(parts) if p == "1"]
    prios = [int(p) for p in parts]
    if any(not 0 <= p <= 7 for p in prios):
        raise ValueError(text)
    return sorted(set(prios))


@context_findings("ethtool-a", keys=("pfc",))
def _with_pfc(result: PauseParams, context: dict[str, str]) -> list[Finding]:
    try:
        pfc = parse_pfc(context.get("pfc", ""))
    except ValueError:
        raise InputError("--context", "pfc", f"{context.get('pfc')!r} is not a PFC priority list; allowed: "
                         "priorities 0..7 like 3 or 3,4, or 8 flags like 0,0,0,1,0,0,0,0") from None
    if result.failure is not None:
        return list(result.findings)
    return list(result.findings) + pause_findings(result.ifname, bool(result.rx), bool(result.tx), pfc)
