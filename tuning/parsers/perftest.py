"""Parser for the perftest family: ib_{write,read,send}_{bw,lat} (linux-rdma/perftest,
``src/perftest_parameters.[ch]``; samples in shared/cases/ib_*.txt).

Layout: an optional server banner (``Waiting for client to connect``), a title
(``RDMA_Write BW Test``), ``key : value`` settings (one or two pairs a line), the
``local/remote address`` lines each followed by a ``GID:`` line, then the result
header (`` #bytes  #iterations  BW peak[MiB/sec]  BW average[MiB/sec]  MsgRate[Mpps]``
or the latency one) and its rows, between dashed lines.

Units always come from the result header; bandwidths are normalised to Gb/s
(10^9 bit/s) and latencies to microseconds. A duration-mode (``-D``) peak of
``0.00`` and any placeholder (``N/A``, ``-``, ``nan``) are ``None``. A cell that is a number but
not finite (``+inf``, ``infinity``, ``1e309``), a negative bandwidth or latency, a header
without ``BW peak`` and a QPN not in perftest's hex are ParseErrors naming the line."""

from __future__ import annotations

import functools
import math
import re

from pydantic import BaseModel, Field

from tuning.errors import ParseError
from tuning.parsers.base import (
    Finding,
    Parsed,
    Quantity,
    bandwidth,
    clean_lines,
    parser,
    require_text,
)
from tuning.parsers.perftest_failures import classify_failure, gid_kind, refine_with_gids
from tuning.parsers.text import PLACEHOLDERS, is_noise

__all__ = ["BwRow", "LatRow", "PerftestResult", "parse_perftest", "classify_failure", "gid_kind", "is_noise"]

#: tool name -> (verb printed in the title, test kind printed in the title)
PERFTEST_TOOLS: dict[str, tuple[str, str]] = {
    "ib_write_bw": ("RDMA_Write", "BW"),
    "ib_read_bw": ("RDMA_Read", "BW"),
    "ib_send_bw": ("Send", "BW"),
    "ib_write_lat": ("RDMA_Write", "Latency"),
    "ib_read_lat": ("RDMA_Read", "Latency"),
    "ib_send_lat": ("Send", "Latency"),
}

_TITLE = re.compile(r"^(Send|RDMA_Write|RDMA_Read|Atomic)\b.*\b(BW|Latency) Test$")
_DASHES = re.compile(r"^-{20,}$")
_ADDRESS = re.compile(r"^(local|remote) address: (.*)$")
_GID = re.compile(r"^M?GID: ?((?:[0-9a-fA-F]{1,3}:){15}[0-9a-fA-F]{1,3})\b")
_KV = re.compile(r"(?P<key>[A-Za-z][A-Za-z0-9_*.\- ]*?)\s*:\s*(?P<val>\S+)")
#: perftest prints ``QPN %#06x`` (BASIC_ADDR_FMT, src/perftest_communication.c): hex with ``0x``, or
#: ``000000`` for 0 (C's ``#`` flag adds no prefix to 0); a decimal QPN is not perftest's
_QPN = re.compile(r"\bQPN (\S+)")
_QPN_HEX = re.compile(r"0x[0-9a-fA-F]+|0+")
#: header name (unit stripped) -> row field, per kind
_FIELDS = {
    "bw": {"BW peak": "bw_peak", "BW average": "bw_avg", "MsgRate": "msg_rate_mpps"},
    "lat": {"t_min": "t_min", "t_max": "t_max", "t_typical": "t_typical", "t_avg": "t_avg",
            "t_stdev": "stdev", "99% percentile": "p99", "99.9% percentile": "p999"},
}
_TIME_TO_US = {"usec": 1.0, "nsec": 1e-3, "msec": 1e3}


class BwRow(BaseModel):
    """One bandwidth result row.

    Attributes:
        size_bytes: message size (bytes).
        iterations: iterations run (in duration mode, iterations completed).
        bw_peak: peak bandwidth (Gb/s, raw kept); None in duration mode (``0.00``) or a placeholder.
        bw_avg: average bandwidth (Gb/s, raw kept).
        msg_rate_mpps: message rate (million packets/s), None if not printed.
        extra: any further column (``BW Port1[MB/sec]``, ``CPU_Util[%]``) as printed header -> value.
    """

    size_bytes: int
    iterations: int
    bw_peak: Quantity | None
    bw_avg: Quantity
    msg_rate_mpps: float | None = None
    extra: dict[str, float | None] = Field(default_factory=dict)


class LatRow(BaseModel):
    """One latency result row; every time is in microseconds, None where not printed.

    Attributes:
        size_bytes, iterations: as printed.
        t_min, t_max, t_typical, t_avg, stdev, p99, p999: latency statistics (us).
        extra: further columns (``tps average``) as printed header -> value.
    """

    size_bytes: int
    iterations: int
    t_min: float | None = None
    t_max: float | None = None
    t_typical: float | None = None
    t_avg: float | None = None
    stdev: float | None = None
    p99: float | None = None
    p999: float | None = None
    extra: dict[str, float | None] = Field(default_factory=dict)


class PerftestResult(Parsed):
    """A perftest run as printed by one side.

    Attributes:
        title: the test title, e.g. ``RDMA_Write BW Test``.
        kind: ``bw`` or ``lat``.
        role: ``server`` (the ``Waiting for client to connect`` banner) or ``client``.
        device: RDMA device (``mlx5_0``); link_type ``Ethernet`` (RoCE) or ``IB``.
        transport, connection: ``IB``, ``RC``/``UC``/``UD``...; gid_index, mtu_bytes (path MTU), qps.
        settings: every header ``key : value`` pair as printed (key with collapsed spaces).
        local_gid, remote_gid: the GIDs as printed (decimal bytes, ``...:255:255:10:07:14:08``).
        local_qpn, remote_qpn: QP numbers (decimal).
        bw_rows / lat_rows: the result table; empty when ``failure`` is set.
    """

    title: str | None = None
    kind: str | None = None
    role: str = "client"
    device: str | None = None
    link_type: str | None = None
    transport: str | None = None
    connection: str | None = None
    gid_index: int | None = None
    mtu_bytes: int | None = None
    qps: int | None = None
    settings: dict[str, str] = Field(default_factory=dict)
    local_gid: str | None = None
    remote_gid: str | None = None
    local_qpn: int | None = None
    remote_qpn: int | None = None
    bw_rows: list[BwRow] = Field(default_factory=list)
    lat_rows: list[LatRow] = Field(default_factory=list)

    def best_bw_gbps(self) -> float | None:
        """Return the highest average bandwidth over all rows (Gb/s), None without rows."""
        return max((r.bw_avg.value for r in self.bw_rows), default=None)

    def row_at(self, size_bytes: int) -> BwRow | LatRow | None:
        """Return the (last) row measured at ``size_bytes``, None if that size was not run."""
        rows: list[BwRow | LatRow] = [*self.bw_rows, *self.lat_rows]
        return next((r for r in reversed(rows) if r.size_bytes == size_bytes), None)


def _norm(line: str) -> str:
    return " ".join(line.split())


def _cell(tool: str, no: int, line: str, raw: str, what: str) -> float | None:
    """Read one numeric cell; placeholders are None.

    Raises:
        ParseError: not a number, or a number that is not finite (``+inf``, ``infinity``,
            ``1e309``: perftest prints ``%.2f`` of a measured double, never those).
    """
    if raw.lower() in PLACEHOLDERS:
        return None
    try:
        val = float(raw)
    except ValueError:
        raise ParseError(tool, no, f"a number for {what}", line) from None
    if not math.isfinite(val):
        raise ParseError(tool, no, f"a finite number for {what}", line)
    return val


def _columns(header: str) -> list[str]:
    """Split a result header into column names; names may hold spaces (``BW peak[MB/sec]``).

    A name ends at a ``]`` or is a lone ``#word``; unbracketed trailing words
    (``tps average``) form one last column.
    """
    cols: list[str] = []
    words: list[str] = []
    for word in header.split():
        if word.startswith("#") and not words:
            cols.append(word)
            continue
        words.append(word)
        if word.endswith("]"):
            cols.append(" ".join(words))
            words = []
    if words:
        cols.append(" ".join(words))
    return cols


def _split_unit(col: str) -> tuple[str, str | None]:
    m = re.fullmatch(r"(.*?)\[([^\]]*)\]", col)
    return (m.group(1), m.group(2)) if m else (col, None)


class _Reader:
    """State of one parse: walks the cleaned lines once and fills a PerftestResult."""

    def __init__(self, tool: str, lines: list[str]):
        self.tool, self.lines = tool, lines
        self.res = PerftestResult(tool=tool)
        self.in_header = False
        self.columns: list[str] | None = None
        self.header_no = 0
        self.last_side: str | None = None
        self.failed = False  # a failed run: read the header, let no row through
        self.closed = False  # the dashed line after the rows was seen

    def run(self) -> PerftestResult:
        for no, line in enumerate(self.lines, 1):
            norm = _norm(line)
            if not norm or is_noise(norm):
                continue
            self.line(no, line, norm)
        return self.res

    def line(self, no: int, line: str, norm: str) -> None:
        if "Waiting for client to connect" in norm:
            self.res.role = "server"
        elif _DASHES.match(norm):
            self.in_header = False
            self.closed = bool(self.res.bw_rows or self.res.lat_rows)
        elif (m := _TITLE.match(norm)) and self.res.title is None:
            self.title(no, line, norm, m)
        elif m := _ADDRESS.match(norm):
            self.address(no, line, m.group(1), m.group(2))
        elif m := _GID.match(norm):
            setattr(self.res, f"{self.last_side or 'local'}_gid", m.group(1))
        elif norm.startswith("#bytes"):
            self.header(no, line, norm)
        elif self.columns is not None and not self.failed:
            self.row(no, line, norm)
        elif self.in_header:
            for m in _KV.finditer(norm):
                self.res.settings[_norm(m.group("key"))] = m.group("val")

    def title(self, no: int, line: str, norm: str, m: re.Match[str]) -> None:
        verb, kind = PERFTEST_TOOLS[self.tool]
        if (m.group(1), m.group(2)) != (verb, kind):
            raise ParseError(self.tool, no, f"a '{verb} ... {kind} Test' title ({self.tool} output)", line)
        self.res.title, self.res.kind, self.in_header = norm, ("bw" if kind == "BW" else "lat"), True

    def address(self, no: int, line: str, side: str, rest: str) -> None:
        self.last_side = side
        if m := _QPN.search(rest):
            if not _QPN_HEX.fullmatch(m.group(1)):
                raise ParseError(self.tool, no, "a QPN in hex as perftest prints it ('QPN 0x0107')", line)
            setattr(self.res, f"{side}_qpn", int(m.group(1).removeprefix("0x"), 16))

    def header(self, no: int, line: str, norm: str) -> None:
        if self.failed:
            return
        if self.res.title is None:
            raise ParseError(self.tool, no, "the perftest title line before the result header", line)
        self.columns, self.header_no = _columns(norm), no
        names = {_split_unit(c)[0] for c in self.columns}
        # perftest's bandwidth headers (RESULT_FMT*, src/perftest_parameters.h) always hold BW peak
        # (0.00 under --noPeak / -D) and BW average
        want = ["BW peak", "BW average"] if self.res.kind == "bw" else ["t_"]
        if not all(any(n.startswith(w) for n in names) for w in want) or "#iterations" not in names:
            raise ParseError(self.tool, no, f"a {self.res.kind} result header with #iterations, "
                             f"{', '.join(w + '...' for w in want)}", line)
        for col in self.columns:
            name, unit = _split_unit(col)
            if self.res.kind == "lat" and name in _FIELDS["lat"] and unit not in _TIME_TO_US:
                raise ParseError(self.tool, no, f"a latency unit in {sorted(_TIME_TO_US)} for {name}", line)

    def row(self, no: int, line: str, norm: str) -> None:
        cells = norm.split()
        assert self.columns is not None
        if not cells[0].isdigit() or len(cells) != len(self.columns):
            expected = f"a result row of {len(self.columns)} numbers ({' | '.join(self.columns)})"
            raise ParseError(self.tool, no, expected, line)
        row: dict = {"extra": {}}
        self.closed = False
        for col, raw in zip(self.columns, cells):
            self.cell(row, col, raw, _cell(self.tool, no, line, raw, col), no, line)
        if self.res.kind == "bw":
            if row.get("bw_avg") is None:
                raise ParseError(self.tool, no, "a measured BW average", line)
            self.res.bw_rows.append(BwRow(**row))
        else:
            self.res.lat_rows.append(LatRow(**row))

    def cell(self, row: dict, col: str, raw: str, val: float | None, no: int, line: str) -> None:
        """Store one cell in ``row`` under its field, converted with the header's unit."""
        name, unit = _split_unit(col)
        field = _FIELDS[self.res.kind or "bw"].get(name)
        if name in ("#bytes", "#iterations"):
            if not raw.isdigit():
                raise ParseError(self.tool, no, f"an integer {name}", line)
            row["size_bytes" if name == "#bytes" else "iterations"] = int(raw)
        elif field is None:
            row["extra"][col] = val
        elif val is not None and val < 0:  # -0.00 is 0.00; perftest prints no negative measurement
            raise ParseError(self.tool, no, f"a non-negative number for {col}", line)
        elif val is None or (field == "bw_peak" and val == 0.0):  # -D prints peak 0.00
            row[field] = None
        elif field.startswith("bw_"):
            try:
                row[field] = bandwidth(raw, unit or "")
            except ValueError as exc:
                raise ParseError(self.tool, no, str(exc), line) from None
        else:
            row[field] = val if field == "msg_rate_mpps" else round(val * _TIME_TO_US[unit or "usec"], 6)
            if not math.isfinite(row[field]):  # 1e308 msec
                raise ParseError(self.tool, no, f"a finite number for {col}", line)


def _typed_settings(res: PerftestResult) -> None:
    """Copy the well-known header settings into typed fields."""
    s = res.settings
    res.device, res.link_type = s.get("Device"), s.get("Link type")
    res.transport, res.connection = s.get("Transport type"), s.get("Connection type")
    for field, key in (("gid_index", "GID index"), ("mtu_bytes", "Mtu"), ("qps", "Number of qps")):
        m = re.match(r"-?\d+", s.get(key, ""))
        setattr(res, field, int(m.group(0)) if m else None)


def _findings(res: PerftestResult) -> list[Finding]:
    out = []
    if res.link_type == "Ethernet" and res.mtu_bytes is not None and res.mtu_bytes < 4096:
        out.append(Finding(
            code="roce_mtu_low", severity="warn", subject=res.device,
            message=(f"RoCE path MTU is {res.mtu_bytes} B (< 4096): the netdev MTU is likely ~1500; "
                     "raise the netdev MTU to >= 4200 on both ends and the switch ports"),
        ))
    return out


def parse_perftest(text: str, tool: str = "ib_write_bw") -> PerftestResult:
    """Parse the output of one perftest side (client or server).

    Args:
        text: the tool's stdout+stderr as captured (CRLF, tabs, MPI prefixes tolerated).
        tool: one of :data:`PERFTEST_TOOLS` (``ib_write_bw``...); the title must match it.

    Returns:
        A :class:`PerftestResult`. When the tool printed a known error
        (connect failure, QP RTR failure, completion error...), ``failure`` is set and
        ``bw_rows``/``lat_rows`` are empty.

    Raises:
        ParseError: empty/binary input, another tool's output, a result header
            without rows (or without ``BW peak`` / ``BW average`` / ``t_...``), a row that is
            not all numbers, a number that is not finite, a negative bandwidth or latency,
            an unknown unit, a QPN not printed in hex.
    """
    if tool not in PERFTEST_TOOLS:
        raise ParseError(tool, 0, f"a perftest tool name in {sorted(PERFTEST_TOOLS)}")
    require_text(tool, text)
    lines = clean_lines(text, expand_tabs=True)
    failure = classify_failure([_norm(x) for x in lines])
    reader = _Reader(tool, lines)
    reader.failed = failure is not None
    res = reader.run()
    _typed_settings(res)
    res.findings = _findings(res)
    if failure is not None:
        res.failure = refine_with_gids(failure, res.local_gid, res.remote_gid, res.gid_index)
        res.bw_rows, res.lat_rows = [], []
        return res
    _require_table(tool, lines, reader)
    return res


def _require_table(tool: str, lines: list[str], reader: _Reader) -> None:
    """A successful run must have a title, a result header and at least one row."""
    res = reader.res
    if res.title is None:
        no, line = next(((i, x) for i, x in enumerate(lines, 1) if x.strip()), (0, ""))
        verb, kind = PERFTEST_TOOLS[tool]
        raise ParseError(tool, no, f"{tool} output with a '{verb} ... {kind} Test' title", line)
    if reader.columns is None:
        raise ParseError(tool, len(lines), "a result header (' #bytes  #iterations ...')", lines[-1])
    if not res.bw_rows and not res.lat_rows:
        raise ParseError(tool, reader.header_no, "at least one result row after the header",
                         lines[reader.header_no - 1])
    if not reader.closed:
        raise ParseError(tool, len(lines), "the dashed line that closes the result table (output cut short?)",
                         lines[-1])


for _name in PERFTEST_TOOLS:
    parser(_name)(functools.partial(parse_perftest, tool=_name))
