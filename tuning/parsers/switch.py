"""Parsers for switch show commands: Cumulus NVUE ``nv show qos roce`` (also
``nv show interface IF qos roce status``) and ``nv show interface``; SONiC ``show pfc counters``
and ``show queue counters`` (issue 3).

Formats: CumulusNetworks/docs (RoCE and interface pages, Cumulus Linux 5.x), sonic-net/sonic-utilities
(``pfcstat``, ``queuestat`` and their tests); samples in ``shared/cases/``.
NVUE tables are column-positional (a blank operational cell is None), so their columns are
taken from the ``----`` ruler line under each header.
"""

from __future__ import annotations

import re
from collections import Counter

from pydantic import BaseModel

from tuning.errors import ParseError
from tuning.parsers.base import Finding, Parsed, Quantity, clean_lines, parser
from tuning.parsers.rdma import is_prompt, placeholder, size_quantity, to_int

# ---------------------------------------------------------------- NVUE column tables


def _spans(ruler: str) -> list[int]:
    return [m.start() for m in re.finditer(r"-+", ruler)]


def _cells(line: str, starts: list[int]) -> list[str]:
    ends = starts[1:] + [None]
    return [line[a:b].strip() for a, b in zip(starts, ends)]  # type: ignore[misc]


def _is_ruler(line: str, char: str = "-") -> bool:
    s = line.strip()
    return bool(s) and set(s.replace(" ", "")) == {char}


def _nv_lines(text: str) -> list[tuple[int, str]]:
    return [(no, ln) for no, ln in enumerate(clean_lines(text, expand_tabs=True), 1) if ln.strip() and not is_prompt(ln)]


class NvValue(BaseModel):
    """One key of an NVUE tree; None = blank cell."""

    operational: str | None = None
    applied: str | None = None
    pending: str | None = None
    description: str | None = None


class RoceSettings(BaseModel):
    """The RoCE tree read from one column (operational or applied). Thresholds in bytes."""

    enable: str | None = None
    mode: str | None = None
    pfc_priorities: list[int] | None = None
    congestion_mode: str | None = None
    ecn_enabled_tcs: list[int] | None = None
    min_threshold: Quantity | None = None
    max_threshold: Quantity | None = None
    probability: int | None = None
    trust_mode: list[str] | None = None


class NvQosRoce(Parsed):
    """``nv show qos roce`` result.

    Attributes:
        tree: dotted key (``congestion-control.min-threshold``) -> the columns as printed.
        operational / applied: the typed RoCE settings of each column, kept apart.
        pcp2sp, dscp2sp: PCP / DSCP -> switch priority. sp2tc: switch priority -> traffic class.
        sp_scheduler: switch priority -> ``DWRR-50%`` / ``strict-priority``.
        tables: every titled table (``RoCE pool config``...) as rows of column -> cell.
    """

    tree: dict[str, NvValue]
    operational: RoceSettings
    applied: RoceSettings
    pcp2sp: dict[int, int] = {}
    dscp2sp: dict[int, int] = {}
    sp2tc: dict[int, int] = {}
    sp_scheduler: dict[int, str] = {}
    tables: dict[str, list[dict[str, str | None]]] = {}


def _nv_tree(lines: list[tuple[int, str]]) -> tuple[dict[str, NvValue], int]:
    (hno, header), (_, ruler) = lines[0], lines[1]
    starts = _spans(ruler)
    names = [c.lower() for c in _cells(header, starts)][1:]
    if not _is_ruler(ruler) or "operational" not in names and "applied" not in names:
        raise ParseError("nv-show-qos-roce", hno, "header 'operational  applied' over a '----' ruler", header)
    tree: dict[str, NvValue] = {}
    stack: list[tuple[int, str]] = []
    i = 2
    while i < len(lines) and not (i + 1 < len(lines) and _is_ruler(lines[i + 1][1], "=")):
        no, line = lines[i]
        key = line[: starts[1]]
        indent = len(key) - len(key.lstrip())
        if not key.strip() or " " in key.strip():
            raise ParseError("nv-show-qos-roce", no, "'key  value...' tree row", line)
        stack = [(d, k) for d, k in stack if d < indent] + [(indent, key.strip())]
        cells = dict(zip(names, (placeholder(c) for c in _cells(line, starts)[1:])))
        tree[".".join(k for _, k in stack)] = NvValue(**{k: v for k, v in cells.items() if k in NvValue.model_fields})
        i += 1
    return tree, i


def _nv_tables(lines: list[tuple[int, str]]) -> dict[str, list[dict[str, str | None]]]:
    tables: dict[str, list[dict[str, str | None]]] = {}
    i = 0
    while i < len(lines):
        no, title = lines[i]
        if i + 1 >= len(lines) or not _is_ruler(lines[i + 1][1], "="):
            raise ParseError("nv-show-qos-roce", no, "a table title over a '====' line", title)
        rows: list[dict[str, str | None]] = tables.setdefault(title.strip(), [])
        i += 2
        if i + 1 < len(lines) and _is_ruler(lines[i + 1][1]):
            starts = _spans(lines[i + 1][1])
            names = ["#"] + _cells(lines[i][1], starts)[1:]
            i += 2
        else:
            starts, names = [], []
        body = i
        while i < len(lines) and not (i + 1 < len(lines) and _is_ruler(lines[i + 1][1], "=")):
            if starts and len(lines[i][1]) <= starts[-1]:  # NVUE fills every table cell ('-' when empty)
                raise ParseError("nv-show-qos-roce", lines[i][0], f"a full row of {title.strip()!r}", lines[i][1])
            if starts:
                rows.append(dict(zip(names, (placeholder(c) for c in _cells(lines[i][1], starts)))))
            i += 1
        if i == body:  # an empty table still prints 'No Data'
            raise ParseError("nv-show-qos-roce", no, f"rows (or 'No Data') under {title.strip()!r}", title)
    return tables


def _ints(raw: str | None) -> list[int] | None:
    return [int(x) for x in raw.replace(" ", "").split(",") if x] if raw else None


def _roce_settings(tree: dict[str, NvValue], column: str, no: int) -> RoceSettings:
    def get(key: str) -> str | None:
        return getattr(tree[key], column) if key in tree else None

    def size(key: str) -> Quantity | None:
        raw = get(key)
        m = re.fullmatch(r"([\d.]+)\s*([KMG]?B|Bytes)", raw or "")
        if raw and not m:
            raise ParseError("nv-show-qos-roce", no, f"{key} as 'NUMBER UNIT' (KB, MB)", raw)
        return size_quantity(m[1], m[2]) if m else None

    try:
        prob = get("congestion-control.probability")
        return RoceSettings(
            enable=get("enable") or get("state"), mode=get("mode"), pfc_priorities=_ints(get("pfc.pfc-priority")),
            congestion_mode=get("congestion-control.congestion-mode"),
            ecn_enabled_tcs=_ints(get("congestion-control.enabled-tc")),
            min_threshold=size("congestion-control.min-threshold"), max_threshold=size("congestion-control.max-threshold"),
            probability=int(prob) if prob else None,
            trust_mode=(get("trust.trust-mode") or "").replace(" ", "").split(",") if get("trust.trust-mode") else None)
    except ValueError as exc:
        raise ParseError("nv-show-qos-roce", no, f"numbers in the {column} column ({exc})") from exc


def _roce_maps(result: NvQosRoce) -> None:
    for title, rows in result.tables.items():
        for row in rows:
            sp = row.get("switch-prio")
            if sp is None or not sp.isdigit():
                continue
            if "DSCP->SP" in title:
                result.pcp2sp.update({p: int(sp) for p in _ints(row.get("pcp")) or []})
                result.dscp2sp.update({d: int(sp) for d in _ints(row.get("dscp")) or []})
            elif "SP->TC" in title and (tc := row.get("traffic-class")) and tc.isdigit():
                result.sp2tc[int(sp)] = int(tc)
                result.sp_scheduler[int(sp)] = row.get("scheduler-weight") or ""


@parser("nv-show-qos-roce")
def parse_nv_show_qos_roce(text: str) -> NvQosRoce:
    """Parse ``nv show qos roce`` or ``nv show interface IF qos roce status`` (NVUE, Cumulus Linux 5.x).

    Raises:
        ParseError: no ``operational``/``applied`` header, a bad tree row or table title,
            a threshold without a unit.
    """
    lines = _nv_lines(text)
    if len(lines) < 3:
        raise ParseError("nv-show-qos-roce", 0, "an NVUE 'operational  applied' tree")
    tree, end = _nv_tree(lines)
    no = lines[0][0]
    result = NvQosRoce(tool="nv-show-qos-roce", tree=tree, tables=_nv_tables(lines[end:]),
                       operational=_roce_settings(tree, "operational", no), applied=_roce_settings(tree, "applied", no))
    if "mode" not in tree or not result.tables:
        raise ParseError("nv-show-qos-roce", 0, "a RoCE tree with a 'mode' key, then the '====' titled tables")
    _roce_maps(result)
    return result


# ---------------------------------------------------------------- nv show interface


class NvInterface(BaseModel):
    """One interface of ``nv show interface``; ``summary`` has one item per row (continuation rows add more)."""

    name: str
    mtu: int | None = None
    speed: str | None = None
    state: str | None = None
    admin_status: str | None = None
    remote_host: str | None = None
    remote_port: str | None = None
    type: str | None = None
    description: str | None = None
    summary: list[str] = []


class NvShowInterface(Parsed):
    """``nv show interface`` result, interfaces in printed order."""

    interfaces: list[NvInterface]

    def get(self, name: str) -> NvInterface | None:
        """The interface called ``name``, or None."""
        return next((i for i in self.interfaces if i.name == name), None)


_IF_COLS = {"mtu": "mtu", "speed": "speed", "state": "state", "oper status": "state", "admin status": "admin_status",
            "remote host": "remote_host", "remote port": "remote_port", "type": "type", "description": "description"}


def _if_row(names: list[str], cells: list[str], no: int, line: str) -> dict:
    row = {_IF_COLS[n]: placeholder(c) for n, c in zip(names, cells) if n in _IF_COLS}
    try:
        row["mtu"] = to_int(row["mtu"]) if row.get("mtu") else None
    except ValueError as exc:
        raise ParseError("nv-show-interface", no, "an integer MTU", line) from exc
    return row


@parser("nv-show-interface")
def parse_nv_show_interface(text: str) -> NvShowInterface:
    """Parse NVUE ``nv show interface`` (``+`` starts an interface; other rows continue it).

    Findings: ``mtu_mismatch`` (warn) for a ``swp`` port whose MTU differs from the most common swp MTU.
    """
    lines = _nv_lines(text)
    if len(lines) < 2 or not lines[0][1].lstrip().startswith("Interface") or not _is_ruler(lines[1][1]):
        raise ParseError("nv-show-interface", lines[0][0] if lines else 0, "header 'Interface  MTU ...' over a ruler",
                         lines[0][1] if lines else "")
    starts = _spans(lines[1][1])
    names = [c.lower() for c in _cells(lines[0][1], starts)]
    interfaces: list[NvInterface] = []
    for no, line in lines[2:]:
        cells = _cells(line, starts)
        first, summary = cells[0], (cells[-1] if names[-1] == "summary" else "")
        if first.startswith("+"):
            interfaces.append(NvInterface(name=first[1:].strip(), **_if_row(names, cells, no, line)))
        elif interfaces and first == interfaces[-1].name:
            pass
        else:
            raise ParseError("nv-show-interface", no, "'+ IFNAME ...' or a continuation row of the previous one", line)
        if summary:
            interfaces[-1].summary.append(summary)
    if not interfaces:
        raise ParseError("nv-show-interface", 0, "interface rows")
    result = NvShowInterface(tool="nv-show-interface", interfaces=interfaces)
    swps = [i for i in interfaces if i.type == "swp" and i.mtu]
    if swps:
        usual = Counter(i.mtu for i in swps).most_common(1)[0][0]
        for i in swps:
            if i.mtu != usual:
                result.findings.append(Finding(code="mtu_mismatch", severity="warn", subject=i.name, message=(
                    f"{i.name} MTU {i.mtu} (towards {i.remote_host or '?'}) while other fabric ports use {usual}")))
    return result


# ---------------------------------------------------------------- SONiC


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


@parser("sonic-pfc-counters")
def parse_sonic_pfc_counters(text: str) -> SonicPfcCounters:
    """Parse SONiC ``show pfc counters`` (``Port Rx`` and ``Port Tx`` tables; ``15,437`` -> 15437)."""
    tables: dict[str, dict[str, list[int | None]]] = {}
    cur, cached = None, None
    for no, line in enumerate(clean_lines(text, expand_tabs=True), 1):
        t = line.split()
        if not t or is_prompt(line) or _is_ruler(line):
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
    """``show queue counters [PORT]`` result, rows in printed order."""

    queues: list[SonicQueue]


def lossless_queue_drops(queues: list[SonicQueue], lossless: tuple[int, ...] = (3, 4)) -> list[Finding]:
    """``lossless_drops`` warnings for unicast queues in ``lossless`` (SONiC default 3, 4) that dropped packets."""
    return [Finding(code="lossless_drops", severity="warn", subject=f"{q.port} {q.queue}", message=(
        f"{q.port} {q.queue}: {q.drop_pkts} packets dropped in a lossless queue; PFC or headroom misconfigured"))
        for q in queues if q.kind == "UC" and q.index in lossless and q.drop_pkts]


@parser("sonic-queue-counters")
def parse_sonic_queue_counters(text: str) -> SonicQueueCounters:
    """Parse SONiC ``show queue counters``. Findings: see :func:`lossless_queue_drops` (queues 3, 4)."""
    cols: list[str] | None = None
    queues: list[SonicQueue] = []
    for no, line in enumerate(clean_lines(text, expand_tabs=True), 1):
        t = line.split()
        if not t or is_prompt(line) or _is_ruler(line) or line.strip().startswith("For namespace"):
            continue
        if t[:2] == ["Port", "TxQ"]:
            cols = t[2:]
            continue
        m = re.fullmatch(r"(UC|MC|ALL)(\d+)", t[1]) if len(t) > 1 else None
        if cols is None or not m or len(t) != len(cols) + 2:
            raise ParseError("sonic-queue-counters", no, "'Port TxQ ...' header, then 'PORT UCn|MCn counts'", line)
        counts = {c: _sonic_int("sonic-queue-counters", no, line, v) for c, v in zip(cols, t[2:])}
        queues.append(SonicQueue(port=t[0], queue=t[1], kind=m[1], index=int(m[2]), counters=counts))
    if not queues:
        raise ParseError("sonic-queue-counters", 0, "queue rows under a 'Port TxQ' header")
    result = SonicQueueCounters(tool="sonic-queue-counters", queues=queues)
    result.findings.extend(lossless_queue_drops(queues))
    return result
