"""Parsers for Cumulus NVUE show commands (issue 3): ``nv show qos roce`` (also
``nv show interface IF qos roce status``), ``nv show interface`` and
``nv show interface IF qos roce counters``. SONiC is in :mod:`.sonic`.

Formats: CumulusNetworks/docs (RoCE and interface pages, Cumulus Linux 5.x); samples in ``shared/cases/``
and tests/parsers/nvue/ (``nv show qos roce`` of CL 5.0 (a description column, an ``Exception List`` of a
header and a ruler only) and CL 5.15 (``lossy-multi-tc``: a DSCP column 89 characters wide, ``-`` cells,
blank lines between the tables, an ``Extended Features`` table with no index column), copied from
``content/cumulus-linux-50|515/.../RDMA-over-Converged-Ethernet-RoCE.md``).
NVUE tables are column-positional (a blank operational cell is None), so their columns are
taken from the ``----`` ruler line under each header.
"""

from __future__ import annotations

import re
from collections import Counter

from pydantic import BaseModel

from tuning.errors import ParseError
from tuning.parsers.base import Finding, Parsed, Quantity, clean_lines, parser
from tuning.parsers.text import is_prompt, placeholder, size_quantity, to_int

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


def _nv_tree(lines: list[tuple[int, str]], tool: str = "nv-show-qos-roce") -> tuple[dict[str, NvValue], int]:
    (hno, header), (_, ruler) = lines[0], lines[1]
    starts = _spans(ruler)
    names = [c.lower() for c in _cells(header, starts)][1:]
    if not _is_ruler(ruler) or "operational" not in names and "applied" not in names:
        raise ParseError(tool, hno, "header 'operational  applied' over a '----' ruler", header)
    tree: dict[str, NvValue] = {}
    stack: list[tuple[int, str]] = []
    i = 2
    while i < len(lines) and not (i + 1 < len(lines) and _is_ruler(lines[i + 1][1], "=")):
        no, line = lines[i]
        key = line[: starts[1]]
        indent = len(key) - len(key.lstrip())
        if not key.strip() or " " in key.strip():
            raise ParseError(tool, no, "'key  value...' tree row", line)
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
            if len(lines[i + 1][1].rstrip()) < len(lines[i][1].rstrip()):  # NVUE rules the whole header
                raise ParseError("nv-show-qos-roce", lines[i + 1][0], "a ruler as wide as its header", lines[i + 1][1])
            starts = _spans(lines[i + 1][1])
            names = [c or "#" for c in _cells(lines[i][1], starts)]  # a blank first heading: the row index
            i += 2
        else:
            starts, names = [], []
        body = i - (2 if starts else 0)  # a header over its ruler is a table, rows or none (CL 5.0)
        while i < len(lines) and not (i + 1 < len(lines) and _is_ruler(lines[i + 1][1], "=")):
            if starts and len(lines[i][1]) <= starts[-1]:  # NVUE fills every table cell ('-' when empty)
                raise ParseError("nv-show-qos-roce", lines[i][0], f"a full row of {title.strip()!r}", lines[i][1])
            if starts:
                rows.append(dict(zip(names, (placeholder(c) for c in _cells(lines[i][1], starts)))))
            i += 1
        if i == body:  # an empty table still prints 'No Data' (CL 5.0: its header and ruler only)
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
def parse_nv_show_interface(text: str) -> NvShowInterface | NvRoceCounters:
    """Parse NVUE ``nv show interface`` (``+`` starts an interface; other rows continue it).

    An ``operational  applied`` tree (``nv show interface IF qos roce counters``) is handed to
    :func:`parse_nv_roce_counters`.

    Findings: ``mtu_mismatch`` (warn) for a ``swp`` port whose MTU differs from the most common swp MTU.
    """
    lines = _nv_lines(text)
    if lines and "operational" in lines[0][1].split():
        return parse_nv_roce_counters(text)
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


# ---------------------------------------------------------------- nv show interface IF qos roce counters


class NvRoceCounters(Parsed):
    """``nv show interface IF qos roce counters`` (Cumulus Linux 5.x RoCE page).

    Attributes:
        interface: the port, when the echoed command line is part of the text.
        tree: dotted key (``tx-stats.tx-roce-stats.unicast-no-buffer-discard``) -> columns as printed.
        counts: plain counters (packets, discards, pause duration) by dotted key.
        sizes: byte counters and buffer usages (``144 Bytes``, ``56.52 MB``) normalised to bytes.
    """

    interface: str | None = None
    tree: dict[str, NvValue]
    counts: dict[str, int] = {}
    sizes: dict[str, Quantity] = {}


#: counters whose non-zero value means packets of a lossless class were dropped
_LOSSLESS_DISCARDS = ("rx-stats.rx-roce-stats.no-buffer-discard", "tx-stats.tx-roce-stats.unicast-no-buffer-discard",
                      "tx-stats.tx-cnp-stats.unicast-no-buffer-discard")
_COUNTERS_TOOL = "nv-show-interface-qos-roce-counters"


def _counter_value(result: NvRoceCounters, key: str, raw: str, no: int, line: str) -> None:
    if re.fullmatch(r"\d+", raw):
        result.counts[key] = int(raw)
    elif m := re.fullmatch(r"([\d.]+)\s*([KMGT]?B|Bytes?)", raw):
        result.sizes[key] = size_quantity(m[1], m[2])
    else:
        raise ParseError(_COUNTERS_TOOL, no, f"{key}: an integer or 'NUMBER UNIT' (Bytes, KB, MB, GB)", line)


def _require_leaf_values(lines: list[tuple[int, str]]) -> None:
    """Every counter (a row with no deeper row under it) prints an operational value, if only ``N/A``.

    ``lines``: the ruler, then the tree rows. A blank leaf is a row cut short (or a parent whose
    children were cut off); it must not read as a missing, None counter.
    """
    (_, ruler), rows = lines[0], lines[1:]
    start, end = (_spans(ruler) + [None])[1:3]
    for k, (no, line) in enumerate(rows):
        indent = len(line) - len(line.lstrip())
        deeper = k + 1 < len(rows) and len(rows[k + 1][1]) - len(rows[k + 1][1].lstrip()) > indent
        if not deeper and not line[start:end].strip():
            raise ParseError(_COUNTERS_TOOL, no, "an operational value for this counter (output cut short?)", line)


@parser(_COUNTERS_TOOL)
def parse_nv_roce_counters(text: str) -> NvRoceCounters:
    """Parse ``nv show interface IF qos roce counters`` (an ``operational  applied  description`` tree).

    Findings: ``lossless_drops`` (warn) for a non-zero RoCE or CNP no-buffer discard counter.

    Raises:
        ParseError: no ``operational`` header over a ruler, a bad tree row, a counter that is not a number
            or is blank (a row cut short).
    """
    lines = _nv_lines(text)
    if len(lines) < 3:
        raise ParseError(_COUNTERS_TOOL, lines[0][0] if lines else 0, "an NVUE 'operational  applied' counter tree")
    tree, end = _nv_tree(lines, _COUNTERS_TOOL)
    _require_leaf_values(lines[1:end])
    if end != len(lines) or not any(k.endswith("-stats") for k in tree):
        raise ParseError(_COUNTERS_TOOL, lines[min(end, len(lines) - 1)][0], "rx-stats / tx-stats counter rows")
    cmd = re.search(r"nv show interface (\S+) qos roce counters", text)
    result = NvRoceCounters(tool=_COUNTERS_TOOL, interface=cmd[1] if cmd else None, tree=tree)
    for (key, value), (no, line) in zip(tree.items(), lines[2:end]):  # tree keys are in line order
        if value.operational is not None:
            _counter_value(result, key, value.operational, no, line)
    where = result.interface or "port"
    for key in _LOSSLESS_DISCARDS:
        if result.counts.get(key):
            result.findings.append(Finding(code="lossless_drops", severity="warn", subject=f"{where} {key}", message=(
                f"{where}: {key} = {result.counts[key]}: packets of a lossless class dropped for lack of buffer;"
                " check PFC priority, headroom and the RoCE pool")))
    return result
