"""Parser for nccl-tests (NVIDIA/nccl-tests ``src/common.cu``): all_reduce_perf,
all_gather_perf, broadcast_perf, reduce_perf, reduce_scatter_perf, alltoall_perf,
sendrecv_perf, scatter_perf, gather_perf, hypercube_perf.

Layout (shared/cases/nccl_tests__all_reduce_2node_good_new_format.txt)::

    # Collective test starting: all_reduce_perf          <- newer releases only
    # nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 1 iters: 20 ...
    #  Rank  0 Group  0 Pid 202829 on    nodea01 device  0 [0009:01:00] NVIDIA GH200 120GB
    #                          out-of-place                       in-place
    #       size   count   type   redop    root     time   algbw   busbw #wrong     time ...
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us) ...
               8       2  float     sum      -1    17.80    0.00    0.00      0    17.71 ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 19.7866

Column sets differ by release and collective: ``redop`` and ``root`` may be absent
and old releases print ``error`` (max abs error, a float) instead of ``#wrong``; the
header is read, not assumed. ``N/A`` is None. nccl-tests' GB/s is 10^9 bytes/s;
bandwidths are kept as printed and normalised to Gb/s (x8).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from tuning.errors import ParseError
from tuning.parsers.base import Finding, Parsed, Quantity, ToolFailure, clean_lines, parser, require_text
from tuning.parsers.text import PLACEHOLDERS, is_noise

__all__ = ["NcclHalf", "NcclRank", "NcclRow", "NcclResult", "parse_nccl", "NCCL_TOOLS"]

NCCL_TOOLS = ("nccl-tests", "all_reduce_perf", "all_gather_perf", "broadcast_perf", "reduce_perf",
              "reduce_scatter_perf", "alltoall_perf", "sendrecv_perf", "scatter_perf", "gather_perf",
              "hypercube_perf")

_RANK = re.compile(r"^#\s*Rank\s+(\d+)(?:\s+Group\s+(\d+))?\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)"
                   r"\s+\[([^\]]*)\]\s*(.*)$")
_STARTING = re.compile(r"^# Collective test starting: (\S+)")
_PARAMS = re.compile(r"^# nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+)")
_OOB = re.compile(r"^# Out of bounds values : (\d+) (\S+)")
_AVG = re.compile(r"^# Avg bus bandwidth : (\S+)")
_FAILURE = re.compile(r"Test (?:NCCL|CUDA) failure|NCCL WARN|unhandled (?:system|cuda) error|"
                      r"Segmentation fault|Aborted")
_PREFIX = ("size", "count", "type", "redop", "root")
_HALF = ("time", "algbw", "busbw")
_GBPS_PER_GBYTES = 8.0


class NcclHalf(BaseModel):
    """One side (out-of-place or in-place) of a row.

    Attributes:
        time_us: time per iteration (us), None if ``N/A``.
        algbw, busbw: bandwidths (value in Gb/s, raw in GB/s as printed), None if ``N/A``.
        wrong: ``#wrong`` (count of wrong elements), None if ``N/A`` or not printed.
        max_error: the old ``error`` column (max absolute error), None where not printed.
    """

    time_us: float | None
    algbw: Quantity | None
    busbw: Quantity | None
    wrong: int | None = None
    max_error: float | None = None


class NcclRow(BaseModel):
    """One size: ``size_bytes``, ``count`` (elements), ``dtype``, ``redop``/``root`` (None if absent)."""

    size_bytes: int
    count: int | None
    dtype: str | None = None
    redop: str | None = None
    root: int | None = None
    out_of_place: NcclHalf
    in_place: NcclHalf


class NcclRank(BaseModel):
    """One ``# Rank`` line: rank, group, pid, host, device index, PCI bus id, GPU name."""

    rank: int
    group: int | None
    pid: int
    host: str
    device: int
    bus_id: str
    gpu: str


class NcclResult(Parsed):
    """An nccl-tests run.

    Attributes:
        collective: ``all_reduce_perf`` (from the starting marker or the tool name), None if unknown.
        n_threads, n_gpus, min_bytes, max_bytes: from the ``# nThread`` line.
        ranks: the ``# Rank`` lines; ``hosts`` lists their hosts in first-seen order.
        columns: the header's column names as printed.
        rows: one per size.
        out_of_bounds: ``# Out of bounds values`` count; ``out_of_bounds_ok`` its OK/FAILED flag.
        avg_busbw: ``# Avg bus bandwidth`` (value Gb/s, raw GB/s as printed).
    """

    collective: str | None = None
    n_threads: int | None = None
    n_gpus: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    ranks: list[NcclRank] = Field(default_factory=list)
    columns: list[str] = Field(default_factory=list)
    rows: list[NcclRow] = Field(default_factory=list)
    out_of_bounds: int | None = None
    out_of_bounds_ok: bool | None = None
    avg_busbw: Quantity | None = None

    @property
    def hosts(self) -> list[str]:
        """Hosts of the ranks, first-seen order, no repeats."""
        return list(dict.fromkeys(r.host for r in self.ranks))

    @property
    def avg_busbw_gbps(self) -> float | None:
        """Average bus bandwidth in Gb/s (10^9 bit/s); the printed GB/s is ``avg_busbw.raw``."""
        return None if self.avg_busbw is None else self.avg_busbw.value

    def row_at(self, size_bytes: int) -> NcclRow | None:
        """Return the row for ``size_bytes``, None if that size was not run."""
        return next((r for r in self.rows if r.size_bytes == size_bytes), None)


def _gbytes(raw: str) -> Quantity:
    return Quantity(value=round(float(raw) * _GBPS_PER_GBYTES, 4), raw=raw, unit="GB/s", unit_norm="Gb/s")


def _header(no: int, line: str) -> list[str]:
    """Validate and return the column names of ``#  size  count ... time algbw busbw #wrong ...``."""
    cols = line.lstrip("#").split()
    prefix = [c for c in cols if c in _PREFIX]
    rest = cols[len(prefix):]
    half = len(rest) // 2
    ok = cols[:len(prefix)] == prefix and prefix[:1] == ["size"] and len(rest) in (6, 8)
    ok = ok and rest[:3] == list(_HALF) and rest[:half] == rest[half:]
    if not ok or rest[3:half] not in ([], ["#wrong"], ["error"]):
        expected = "a header 'size count type [redop] [root] time algbw busbw [#wrong|error]' x2"
        raise ParseError("nccl-tests", no, expected, line)
    return cols


def _check_units(no: int, line: str) -> None:
    """The units line must say bytes, elements, us and GB/s (what the values are read as)."""
    units = set(re.findall(r"\(([^)]*)\)", line))
    if not units <= {"B", "elements", "us", "GB/s"} or not {"us", "GB/s"} <= units:
        raise ParseError("nccl-tests", no, "units (B) (elements) (us) (GB/s)", line)


def _num(no: int, line: str, raw: str, conv: type = float) -> float | int | None:
    if raw.lower() in PLACEHOLDERS:
        return None
    try:
        return conv(raw)
    except ValueError:
        raise ParseError("nccl-tests", no, f"a number, got {raw!r}", line) from None


def _row(no: int, line: str, cols: list[str]) -> NcclRow:
    """Read one data row against the header's columns."""
    cells = line.split()
    if len(cells) != len(cols) or not cells[0].isdigit():
        raise ParseError("nccl-tests", no, f"a row of {len(cols)} cells ({' '.join(cols)})", line)
    n = len([c for c in cols if c in _PREFIX])
    pre = dict(zip(cols[:n], cells[:n]))
    half = (len(cols) - n) // 2
    sides = []
    for start in (n, n + half):
        vals = dict(zip(cols[start:start + half], cells[start:start + half]))
        bw = {k: (None if _num(no, line, vals[k]) is None else _gbytes(vals[k])) for k in ("algbw", "busbw")}
        sides.append(NcclHalf(time_us=_num(no, line, vals["time"]), **bw,
                              wrong=_num(no, line, vals["#wrong"], int) if "#wrong" in vals else None,
                              max_error=_num(no, line, vals["error"]) if "error" in vals else None))
    root = pre.get("root")
    return NcclRow(size_bytes=int(pre["size"]), count=_num(no, line, pre["count"], int),
                   dtype=pre.get("type"), redop=pre.get("redop"),
                   root=None if root is None else _num(no, line, root, int),
                   out_of_place=sides[0], in_place=sides[1])


def _findings(res: NcclResult) -> list[Finding]:
    out = []
    wrong = [r.size_bytes for r in res.rows for h in (r.out_of_place, r.in_place) if h.wrong]
    if wrong:
        out.append(Finding(code="nccl_wrong_results", severity="error",
                           message=f"#wrong > 0 at sizes {sorted(set(wrong))}: data corrupted (bad GPU, NIC or link)"))
    if res.out_of_bounds:
        out.append(Finding(code="nccl_out_of_bounds", severity="error",
                           message=f"{res.out_of_bounds} out-of-bounds values"))
    return out


def _meta(res: NcclResult, line: str) -> bool:
    """Read a ``#`` metadata line into ``res``; True if it was one."""
    if m := _RANK.match(line):
        g = m.groups()
        res.ranks.append(NcclRank(rank=int(g[0]), group=None if g[1] is None else int(g[1]), pid=int(g[2]),
                                  host=g[3], device=int(g[4]), bus_id=g[5], gpu=g[6]))
    elif m := _STARTING.match(line):
        res.collective = m.group(1)
    elif m := _PARAMS.match(line):
        res.n_threads, res.n_gpus, res.min_bytes, res.max_bytes = map(int, m.groups())
    elif m := _OOB.match(line):
        res.out_of_bounds, res.out_of_bounds_ok = int(m.group(1)), m.group(2) == "OK"
    elif m := _AVG.match(line):
        res.avg_busbw = _gbytes(m.group(1)) if m.group(1).lower() not in PLACEHOLDERS else None
    else:
        return line.startswith("#")
    return True


def _scan(res: NcclResult, lines: list[str]) -> tuple[list[str] | None, int, list[str]]:
    """Walk the lines once: metadata into ``res``, rows against the header.

    Returns:
        (the header's columns or None, the header's line number, the failure lines).
    """
    cols: list[str] | None = None
    header_no, failures = 0, []
    for no, raw in enumerate(lines, 1):
        line = " ".join(raw.split())
        if not line or is_noise(line):
            continue
        if _FAILURE.search(line):
            failures.append(line)
        elif re.match(r"^#\s*size\b", line) and "time" in line:
            cols, header_no = _header(no, raw), no
        elif line.startswith("# (B)"):
            _check_units(no, raw)
        elif _meta(res, line):
            continue
        elif cols is not None and line[0].isdigit():
            res.rows.append(_row(no, raw, cols))
    return cols, header_no, failures


def parse_nccl(text: str, tool: str = "nccl-tests") -> NcclResult:
    """Parse an nccl-tests output (any collective, any rank's stdout or the merged one).

    Args:
        text: the output as captured (MPI ``[r,c]<stdout>:`` prefixes, CRLF, noise tolerated).
        tool: ``nccl-tests`` or the binary name (``all_reduce_perf``), used when the output has no
            ``# Collective test starting`` marker.

    Returns:
        An :class:`NcclResult`. A ``Test NCCL failure`` / ``NCCL WARN`` output gives ``failure``
        and no rows.

    Raises:
        ParseError: empty/binary input, no result header (another tool's output), a header
            without rows, a row whose cells do not match the header.
    """
    require_text(tool, text)
    lines = clean_lines(text, expand_tabs=True)
    res = NcclResult(tool=tool, collective=None if tool == "nccl-tests" else tool)
    cols, header_no, failures = _scan(res, lines)
    if failures:
        res.failure = ToolFailure(kind="unknown", message=" / ".join(failures),
                                  likely_cause="NCCL/CUDA error: see NCCL_DEBUG=INFO (often the network transport)")
        res.rows = []
        return res
    if cols is None:
        no, line = next(((i, x) for i, x in enumerate(lines, 1) if x.strip()), (0, ""))
        raise ParseError(tool, no, "nccl-tests output with a '#  size  count  type ...' header", line)
    if not res.rows:
        raise ParseError(tool, header_no, "at least one result row after the header", lines[header_no - 1])
    if res.avg_busbw is None and not any(_AVG.match(" ".join(x.split())) for x in lines):
        raise ParseError(tool, len(lines), "the closing '# Avg bus bandwidth' line (output cut short?)", lines[-1])
    res.columns, res.findings = cols, _findings(res)
    return res


for _name in NCCL_TOOLS:
    parser(_name)(lambda text, _t=_name: parse_nccl(text, _t))
