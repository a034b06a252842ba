"""Parsers for SONiC show commands (issues 3, 21): ``show pfc counters``, ``show queue counters`` and
``show interfaces status``; the transcript helpers the other SONiC parsers share (:func:`segments`).
ECN / WRED and CONFIG_DB are in :mod:`.sonic_qos`, ``config apply-patch`` and checkpoints in :mod:`.sonic_gcu`.

Formats: sonic-net/sonic-utilities (``scripts/pfcstat``, ``scripts/queuestat``, ``scripts/intfutil`` and
their tests ``tests/pfcstat_test.py``, ``tests/queue_counter_test.py``, ``tests/intfutil_test.py``);
samples in ``shared/cases/sonic_*`` and ``shared/cases/cli/sonic__*`` (INDEX.md, INDEX-switch.md).
Tables are tabulate ``simple``, right-aligned; counters may carry thousands separators (``15,437``,
``format_number_with_comma``) or be raw integers; ``N/A`` is None, never 0.
"""

from __future__ import annotations

import re

from collections import Counter

from pydantic import BaseModel

from tuning.errors import InputError, ParseError
from tuning.parsers.base import Finding, Parsed, clean_lines, context_findings, parser
from tuning.parsers.text import is_prompt, placeholder, to_int


def is_ruler(line: str) -> bool:
    """True for a tabulate rule (``-----  ------``)."""
    s = line.strip()
    return bool(s) and set(s.replace(" ", "")) == {"-"}


Segment = tuple[str | None, list[tuple[int, str]]]


def segments(text: str) -> list[Segment]:
    """A SONiC shell transcript cut at its prompts (``admin@leaf:~$ show ecn``): ``(command, lines)``
    per command, lines numbered from 1 and cleaned (:func:`clean_lines`). Text before the first
    prompt is a segment with command None (a bare output, without any prompt, is one such segment).
    Empty segments (a trailing bare prompt) are dropped."""
    out: list[Segment] = [(None, [])]
    for no, line in enumerate(clean_lines(text, expand_tabs=True), 1):
        if is_prompt(line):
            out.append((re.split(r"[#$]", line.strip(), maxsplit=1)[1].strip() or None, []))
        else:
            out[-1][1].append((no, line))
    return [(cmd, lines) for cmd, lines in out if any(ln.strip() for _, ln in lines) or cmd]


def split_cells(line: str) -> list[str]:
    """A tabulate row split on runs of 2+ spaces (a cell such as ``QSFP-DD Double Density`` keeps its single spaces)."""
    return re.split(r" {2,}", line.strip())

class SonicPfcCounters(Parsed):
    """``show pfc counters``: port -> 8 PFC frame counts (index = priority; N/A = None), per direction."""

    rx: dict[str, list[int | None]]
    tx: dict[str, list[int | None]]
    cached_time: str | None = None


def _sonic_int(tool: str, no: int, line: str, raw: str) -> int | None:
    try:
        return to_int(raw)
    except ValueError as exc:
        raise ParseError(tool, no, "a count (digits, thousands separators, or N/A)", line) from exc


@parser("sonic-pfc-counters", "sonic-show-pfc-counters")
def parse_sonic_pfc_counters(text: str) -> SonicPfcCounters:
    """Parse SONiC ``show pfc counters`` (``Port Rx`` and ``Port Tx`` tables; ``15,437`` -> 15437; PFC frames
    per priority; shared/cases/cli/sonic__show_pfc_counters.txt, shared/cases/sonic_show_pfc_counters__*)."""
    tables: dict[str, dict[str, list[int | None]]] = {}
    cur, cached = None, None
    for no, line in enumerate(clean_lines(text, expand_tabs=True), 1):
        t = line.split()
        if not t or is_prompt(line) or is_ruler(line):
            continue
        if line.strip().startswith("Last cached time was"):
            cached = line.strip()[len("Last cached time was"):].strip()
        elif t[:2] in (["Port", "Rx"], ["Port", "Tx"]) and t[2:] == [f"PFC{i}" for i in range(8)]:
            cur = tables.setdefault(t[1].lower(), {})
        elif cur is not None and len(t) == 9:
            cur[t[0]] = [_sonic_int("sonic-pfc-counters", no, line, v) for v in t[1:]]
        else:
            raise ParseError("sonic-pfc-counters", no, "'Port Rx|Tx PFC0..PFC7' header or 'PORT' + 8 counts", line)
    if not tables.get("rx") and not tables.get("tx"):
        raise ParseError("sonic-pfc-counters", 0, "'Port Rx' / 'Port Tx' tables")
    return SonicPfcCounters(tool="sonic-pfc-counters", rx=tables.get("rx", {}), tx=tables.get("tx", {}), cached_time=cached)


class SonicQueue(BaseModel):
    """One queue row. ``kind`` UC (unicast), MC (multicast) or ALL; ``counters``: column -> value (N/A = None)."""

    port: str
    queue: str
    kind: str
    index: int
    counters: dict[str, int | None]

    @property
    def drop_pkts(self) -> int | None:
        """The ``Drop/pkts`` column."""
        return self.counters.get("Drop/pkts")


class SonicQueueCounters(Parsed):
    """``show queue counters [PORT]`` result, rows in printed order (packets and bytes as counted).

    Attributes:
        namespace: the ``For namespace :`` header's ASIC namespace (``""`` on a single-ASIC switch;
            None in the legacy layout without the header, before sonic-net/sonic-utilities#3554).
        cached_time: the legacy ``Last cached time was ...`` line (counts since a ``sonic-clear queuecounters``).
    """

    queues: list[SonicQueue]
    namespace: str | None = None
    cached_time: str | None = None


def lossless_queue_drops(queues: list[SonicQueue], lossless: tuple[int, ...] = (3, 4)) -> list[Finding]:
    """``lossless_drops`` warnings for unicast queues in ``lossless`` (SONiC default 3, 4) that dropped packets."""
    return [Finding(code="lossless_drops", severity="warn", subject=f"{q.port} {q.queue}", message=(
        f"{q.port} {q.queue}: {q.drop_pkts} packets dropped in a lossless queue; PFC or headroom misconfigured"))
        for q in queues if q.kind == "UC" and q.index in lossless and q.drop_pkts]


@parser("sonic-queue-counters", "sonic-show-queue-counters")
def parse_sonic_queue_counters(text: str) -> SonicQueueCounters:
    """Parse SONiC ``show queue counters`` (shared/cases/cli/sonic__show_queue_counters_namespace_header_raw.txt,
    shared/cases/sonic_show_queue_counters__*; packets and bytes). Findings: :func:`lossless_queue_drops` (queues 3, 4)."""
    cols: list[str] | None = None
    queues: list[SonicQueue] = []
    extra: dict[str, str] = {}
    for no, line in enumerate(clean_lines(text, expand_tabs=True), 1):
        t = line.split()
        if not t or is_prompt(line) or is_ruler(line):
            continue
        head = re.fullmatch(r"(For namespace|Last cached time was)\s*:?\s*(.*)", line.strip())
        if head:
            extra["namespace" if head[1] == "For namespace" else "cached_time"] = head[2]
        elif t[:2] == ["Port", "TxQ"]:
            cols = t[2:]
        else:
            queues.append(_queue_row(no, line, t, cols))
    if not queues:
        raise ParseError("sonic-queue-counters", 0, "queue rows under a 'Port TxQ' header")
    result = SonicQueueCounters(tool="sonic-queue-counters", queues=queues, **extra)
    result.findings.extend(lossless_queue_drops(queues))
    return result


def _queue_row(no: int, line: str, t: list[str], cols: list[str] | None) -> SonicQueue:
    m = re.fullmatch(r"(UC|MC|ALL)(\d+)", t[1]) if len(t) > 1 else None
    if cols is None or not m or len(t) != len(cols) + 2:
        raise ParseError("sonic-queue-counters", no, "'Port TxQ ...' header, then 'PORT UCn|MCn counts'", line)
    counts = {c: _sonic_int("sonic-queue-counters", no, line, v) for c, v in zip(cols, t[2:])}
    return SonicQueue(port=t[0], queue=t[1], kind=m[1], index=int(m[2]), counters=counts)


@context_findings("sonic-queue-counters", "sonic-show-queue-counters", keys=("lossless_queues",))
def queue_context(result: Parsed, context: dict[str, str]) -> list[Finding]:
    """``lossless_drops`` for the switch's own lossless queues (``lossless_queues``, e.g. ``3`` or ``3,4``).

    Raises:
        InputError: not a comma-separated list of queue numbers 0-7.
    """
    assert isinstance(result, SonicQueueCounters)
    raw = context.get("lossless_queues", "")
    if not re.fullmatch(r"[0-7](?:,[0-7])*", raw.replace(" ", "")):
        raise InputError("--context", "lossless_queues", f"{raw!r}: expected queue numbers 0-7, e.g. 3,4")
    queues = tuple(int(q) for q in raw.replace(" ", "").split(","))
    kept = [f for f in result.findings if f.code != "lossless_drops"]
    return kept + lossless_queue_drops(result.queues, queues)


# ---------------------------------------------------------------- show interfaces status

#: ``show interfaces status`` headings (scripts/intfutil) -> field; the 2022+ layout has all 11, older
#: images lack FEC and Vlan (9 columns)
_STATUS_COLUMNS = {"Interface": "interface", "Lanes": "lanes", "Speed": "speed", "MTU": "mtu", "FEC": "fec",
                   "Alias": "alias", "Vlan": "vlan", "Oper": "oper", "Admin": "admin", "Type": "type",
                   "Asym PFC": "asym_pfc"}


class SonicPortStatus(BaseModel):
    """One row of ``show interfaces status``; ``N/A`` cells are None.

    Attributes:
        lanes: the ASIC lanes as printed (``1,2,3,4``). speed: as printed (``400G``). mtu: bytes.
        vlan: ``routed``, ``trunk`` or a VLAN (None in the 9-column layout). type: the transceiver.
    """

    interface: str
    lanes: str | None = None
    speed: str | None = None
    mtu: int | None = None
    fec: str | None = None
    alias: str | None = None
    vlan: str | None = None
    oper: str | None = None
    admin: str | None = None
    type: str | None = None
    asym_pfc: str | None = None


class SonicInterfacesStatus(Parsed):
    """``show interfaces status [PORT]`` result: one row per port (a port shown again later, e.g. by
    ``show interfaces status Ethernet16``, keeps its latest row); ``columns`` as printed."""

    columns: list[str]
    interfaces: list[SonicPortStatus]


def mtu_mismatch(mtus: dict[str, int | None], tool: str) -> list[Finding]:
    """``mtu_mismatch`` warnings for ports whose MTU (bytes) differs from the one most ports have
    (a RoCE path needs one MTU end to end); nothing when fewer than 3 ports have a known MTU."""
    known = {port: mtu for port, mtu in mtus.items() if mtu is not None}
    if len(known) < 3:
        return []
    common, _ = Counter(known.values()).most_common(1)[0]
    return [Finding(code="mtu_mismatch", severity="warn", subject=port, message=(
        f"{port}: MTU {mtu}, the other ports {common} ({tool})")) for port, mtu in known.items() if mtu != common]


@parser("sonic-show-interfaces-status")
def parse_sonic_interfaces_status(text: str) -> SonicInterfacesStatus:
    """Parse SONiC ``show interfaces status`` (shared/cases/cli/sonic__show_interfaces_status.txt;
    sonic-utilities scripts/intfutil, ``tabulate(..., stralign='right')``). Cells are split on 2+ spaces.
    Findings: :func:`mtu_mismatch` (Ethernet16 at 1500 among 9100 ports)."""
    tool = "sonic-show-interfaces-status"
    cols: list[str] = []
    rows: dict[str, SonicPortStatus] = {}
    for no, line in enumerate(clean_lines(text, expand_tabs=True), 1):
        if not line.strip() or is_prompt(line) or is_ruler(line):
            continue
        cells = split_cells(line)
        if cells[0] == "Interface":
            if not set(cells) <= set(_STATUS_COLUMNS) or "MTU" not in cells:
                raise ParseError(tool, no, f"a header of {', '.join(_STATUS_COLUMNS)}", line)
            cols = cells
        elif not cols or len(cells) != len(cols):
            raise ParseError(tool, no, f"a row of {len(cols) or 9}-11 cells split by 2+ spaces", line)
        else:
            row = _status_row(tool, no, line, dict(zip((_STATUS_COLUMNS[c] for c in cols), cells)))
            rows[row.interface] = row
    if not rows:
        raise ParseError(tool, 0, "an 'Interface  Lanes  Speed  MTU ...' table with rows")
    result = SonicInterfacesStatus(tool=tool, columns=cols, interfaces=list(rows.values()))
    result.findings = mtu_mismatch({r.interface: r.mtu for r in rows.values()}, "show interfaces status")
    return result


def _status_row(tool: str, no: int, line: str, cells: dict[str, str]) -> SonicPortStatus:
    try:
        mtu = to_int(cells.pop("mtu", "N/A"))
    except ValueError as exc:
        raise ParseError(tool, no, "an MTU in bytes (or N/A)", line) from exc
    if not re.fullmatch(r"\d+(?:,\d+)*|N/A", cells.get("lanes", "N/A")):
        raise ParseError(tool, no, "lanes as 'n,n,...'", line)
    return SonicPortStatus(mtu=mtu, **{k: placeholder(v) for k, v in cells.items()})
