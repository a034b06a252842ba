"""Parser for nccl-tests (NVIDIA/nccl-tests ``src/common.cu``, from v2.17.3 ``src/util.cu``, and
the collectives' ``src/<coll>.cu``): all_reduce_perf, all_gather_perf, broadcast_perf, reduce_perf,
reduce_scatter_perf, alltoall_perf, sendrecv_perf, scatter_perf, gather_perf, hypercube_perf.

Layout since v2.16.7 (shared/cases/nccl_tests__all_reduce_2node_good_new_format.txt)::

    # Collective test starting: all_reduce_perf          <- newer releases only
    # nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 1 iters: 20 ...
    #  Rank  0 Group  0 Pid 202829 on    nodea01 device  0 [0009:01:00] NVIDIA GH200 120GB
    #                          out-of-place                       in-place
    #       size   count   type   redop    root     time   algbw   busbw #wrong     time ...
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us) ...
               8       2  float     sum      -1    17.80    0.00    0.00      0    17.71 ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 19.7866

Column sets differ by release and collective (the header is read, not assumed; every tag's
changes are listed in tests/parsers/cases/nccl_tests__FORMATS.md):

- v1.0.0 (common.cu:573,865,929,1027-1028; all_reduce.cu:10-18): ``nThread``, ``Out of bounds
  values`` and ``Avg bus bandwidth`` without ``#``; ``#   Rank %2d on %10s device %2d [0x%02x]``
  (no Pid); header ``bytes N type op time algbw busbw res`` with no units row: time is in
  **ms** (``%7.3f`` of seconds x 1e3), ``res`` the max abs error (``%7.0le``), as v2's ``error``;
  broadcast prints only the out-of-place half.
- v2.0.0: ``#`` on every line but the rows, ``Pid``, ``size count type redop``, units row ``(us)``, ``error``.
- v2.13.0: ``root`` and ``#wrong``; v2.13.4: ``Group`` and ``cputime`` (``-C 1``) for ``time``.

``N/A`` is None. nccl-tests' GB/s is 10^9 bytes/s; bandwidths are kept as printed and
normalised to Gb/s (x8); times are normalised to us.

Launches: each nccl-tests process that is not part of an MPI job prints its own header, a single
``Rank  0`` and (all_reduce) busbw = algbw x 2(n-1)/n = 0. Several headers in one output (an
``mpirun -np 16`` of a binary built without ``MPI=1``, a launcher starting N processes) are N
separate runs, not one N-rank run: the result gets failure ``ranks_alone`` (finding
``nccl_ranks_alone``) or ``separate_runs``, and no rows or average. One valid 1-rank run keeps its
numbers with the finding ``nccl_single_rank`` (nccl-tests issues #249, #294).
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

_RANK = re.compile(r"^#\s*Rank\s+(\d+)(?:\s+Group\s+(\d+))?(?:\s+Pid\s+(\d+))?\s+on\s+(\S+)\s+device\s+(\d+)"
                   r"\s+\[([^\]]*)\]\s*(.*)$")
_STARTING = re.compile(r"^# Collective test starting: (\S+)")
# v1.0.0 prints these three without '#' (common.cu:865,1027,1028); the lines arrive whitespace-normalised
_PARAMS = re.compile(r"^(?:# )?nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+)")
_OOB = re.compile(r"^(?:# )?Out of bounds values : (\d+) (\S+)")
_AVG = re.compile(r"^(?:# )?Avg bus bandwidth : (\S+)(?: (OK|FAILED))?$")
_HEADER = re.compile(r"^#\s*(?:size|bytes)\b")
_FAILURE = re.compile(r"Test (?:NCCL|CUDA) failure|NCCL WARN|unhandled (?:system|cuda) error|"
                      r"Segmentation fault|Aborted")
_PREFIX = ("size", "count", "type", "redop", "root")
_HALF = ("time", "algbw", "busbw")
#: v1.0.0's header names (all_reduce.cu:12) and v2.13.4's ``cputime`` -> the names rows are read by
_ALIAS = {"bytes": "size", "N": "count", "op": "redop", "res": "error", "cputime": "time"}
_GBPS_PER_GBYTES = 8.0


class NcclHalf(BaseModel):
    """One side (out-of-place or in-place) of a row (nccl-tests ``src/common.cu`` BenchTime, from
    v2.17.3 ``src/util.cu`` writeBenchmarkLineBody).

    Attributes:
        time_us: time per iteration in us (v1.0.0 prints ms, ``%7.3f``; converted), None if ``N/A``.
        algbw, busbw: bandwidths (value in Gb/s, raw in GB/s as printed), None if ``N/A``.
        wrong: ``#wrong`` (v2.13.0+, count of wrong elements), None if ``N/A`` or not printed.
        max_error: the max absolute error column (v1.0.0 ``res``, v2.0.0 to v2.11.0 ``error``),
            None where not printed or ``N/A``.
    """

    time_us: float | None
    algbw: Quantity | None
    busbw: Quantity | None
    wrong: int | None = None
    max_error: float | None = None


class NcclRow(BaseModel):
    """One size: ``size_bytes``, ``count`` (elements), ``dtype``, ``redop``/``root`` (None if absent);
    ``in_place`` is None where only out-of-place is printed (v1.0.0 ``src/broadcast.cu`` print_header)."""

    size_bytes: int
    count: int | None
    dtype: str | None = None
    redop: str | None = None
    root: int | None = None
    out_of_place: NcclHalf
    in_place: NcclHalf | None


class NcclRank(BaseModel):
    """One ``# Rank`` line (``src/common.cu``, v2.17.3+ ``src/util.cu``): rank, group (v2.13.4+), pid
    (v2.0.0+), host, device index, PCI bus id (``0x%02x``; ``%04x:%02x:%02x`` from v2.14.1), GPU name."""

    rank: int
    group: int | None
    pid: int | None
    host: str
    device: int
    bus_id: str
    gpu: str


class NcclResult(Parsed):
    """An nccl-tests run, any release v1.0.0 to v2.19.6 (``src/common.cu``, ``src/util.cu``).

    Attributes:
        collective: ``all_reduce_perf`` (from the starting marker or the tool name), None if unknown.
        n_threads, n_gpus, min_bytes, max_bytes: from the ``# nThread`` line.
        ranks: the ``# Rank`` lines; ``hosts`` lists their hosts in first-seen order.
        columns: the header's column names as printed; ``time_unit`` the unit the times were
            printed in (``ms`` for v1.0.0, else ``us``; ``time_us`` is always us).
        rows: one per size (empty when ``failure`` is set).
        out_of_bounds: ``# Out of bounds values`` count; ``out_of_bounds_ok`` its OK/FAILED flag.
        avg_busbw: ``# Avg bus bandwidth`` (value Gb/s, raw GB/s as printed); None when ``failure``
            is set. ``min_bw_ok``: its OK/FAILED against ``NCCL_TESTS_MIN_BW``, None if not set.
        runs: separate nccl-tests launches seen (headers, ``Rank 0`` lines, summaries); 1 normally.
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
    min_bw_ok: bool | None = None
    time_unit: str = "us"
    runs: int = 1

    @property
    def n_ranks(self) -> int:
        """Ranks of the run (``# Rank`` lines); with ``runs`` > 1 the lines of all runs together."""
        return len(self.ranks)

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
    """Validate and return the column names of ``#  size  count ... time algbw busbw #wrong ...``
    (or v1.0.0's ``#  bytes  N  type  op  time algbw busbw res ...``), as printed."""
    cols = line.lstrip("#").split()
    names = [_ALIAS.get(c, c) for c in cols]
    prefix = [c for c in names if c in _PREFIX]
    rest = names[len(prefix):]
    half = 4 if len(rest) == 8 or rest[3:4] in (["#wrong"], ["error"]) else 3
    ok = names[:len(prefix)] == prefix and prefix[:2] == ["size", "count"] and len(rest) in (half, 2 * half)
    ok = ok and rest[:3] == list(_HALF) and rest[half:] in ([], rest[:half])
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


def _half(no: int, line: str, vals: dict[str, str], us_per: float) -> NcclHalf:
    """One side's cells (``time``, ``algbw``, ``busbw``, ``#wrong`` or ``error``) read into a half."""
    bw = {k: (None if _num(no, line, vals[k]) is None else _gbytes(vals[k])) for k in ("algbw", "busbw")}
    t = _num(no, line, vals["time"])
    return NcclHalf(time_us=None if t is None else round(t * us_per, 6), **bw,
                    wrong=_num(no, line, vals["#wrong"], int) if "#wrong" in vals else None,
                    max_error=_num(no, line, vals["error"]) if "error" in vals else None)


def _row(no: int, line: str, cols: list[str], us_per: float = 1.0) -> NcclRow:
    """Read one data row against the header's columns (``us_per``: us per printed time unit)."""
    cells = line.split()
    if len(cells) != len(cols) or not cells[0].isdigit():
        raise ParseError("nccl-tests", no, f"a row of {len(cols)} cells ({' '.join(cols)})", line)
    names = [_ALIAS.get(c, c) for c in cols]
    n = len([c for c in names if c in _PREFIX])
    pre = dict(zip(names[:n], cells[:n]))
    half = 4 if "#wrong" in names or "error" in names else 3
    sides = [_half(no, line, dict(zip(names[i:i + half], cells[i:i + half])), us_per)
             for i in range(n, len(cols), half)]
    root = pre.get("root")
    return NcclRow(size_bytes=int(pre["size"]), count=_num(no, line, pre["count"], int),
                   dtype=pre.get("type"), redop=pre.get("redop"),
                   root=None if root is None else _num(no, line, root, int),
                   out_of_place=sides[0], in_place=sides[1] if len(sides) > 1 else None)


def _findings(res: NcclResult) -> list[Finding]:
    out = []
    wrong = [r.size_bytes for r in res.rows for h in (r.out_of_place, r.in_place) if h and h.wrong]
    if wrong:
        out.append(Finding(code="nccl_wrong_results", severity="error",
                           message=f"#wrong > 0 at sizes {sorted(set(wrong))}: data corrupted (bad GPU, NIC or link)"))
    if res.out_of_bounds:
        out.append(Finding(code="nccl_out_of_bounds", severity="error",
                           message=f"{res.out_of_bounds} out-of-bounds values"))
    if res.n_ranks == 1:
        r = res.ranks[0]
        out.append(Finding(code="nccl_single_rank", severity="warn", subject=r.host, message=(
            f"1 rank ({r.host} device {r.device}): no data crossed a link between GPUs or nodes; "
            "busbw = algbw x 2(n-1)/n is 0 for all_reduce with n=1 (a local copy for broadcast/reduce), "
            "so this Avg bus bandwidth measures no fabric")))
    return out


def _meta(res: NcclResult, line: str) -> bool:
    """Read a metadata line (``#``, or one of v1.0.0's three without it) into ``res``; True if it was one."""
    if m := _RANK.match(line):
        g = m.groups()
        res.ranks.append(NcclRank(rank=int(g[0]), group=None if g[1] is None else int(g[1]),
                                  pid=None if g[2] is None else int(g[2]),
                                  host=g[3], device=int(g[4]), bus_id=g[5], gpu=g[6]))
    elif m := _STARTING.match(line):
        res.collective = m.group(1)
    elif m := _PARAMS.match(line):
        res.n_threads, res.n_gpus, res.min_bytes, res.max_bytes = map(int, m.groups())
        res.runs += 1
    elif m := _OOB.match(line):
        res.out_of_bounds, res.out_of_bounds_ok = int(m.group(1)), m.group(2) == "OK"
    elif m := _AVG.match(line):
        res.avg_busbw = _gbytes(m.group(1)) if m.group(1).lower() not in PLACEHOLDERS else None
        res.min_bw_ok = None if m.group(2) is None else m.group(2) == "OK"
    else:
        return line.startswith("#")
    return True


def _scan(res: NcclResult, lines: list[str]) -> tuple[list[str] | None, int, list[str], int]:
    """Walk the lines once: metadata into ``res``, rows against the header.

    Returns:
        (the header's columns or None, the header's line number, the failure lines, the number of
        ``Avg bus bandwidth`` lines).
    """
    cols: list[str] | None = None
    header_no, failures, n_avg, us_per = 0, [], 0, 1.0
    res.runs = 0
    for no, raw in enumerate(lines, 1):
        line = " ".join(raw.split())
        if not line or is_noise(line):
            continue
        if _FAILURE.search(line):
            failures.append(line)
        elif _HEADER.match(line) and "time" in line:
            cols, header_no = _header(no, raw), no
            # v1.0.0 prints seconds x 1e3 under 'time' and no units row (common.cu:573)
            res.time_unit, us_per = ("ms", 1000.0) if cols[0] == "bytes" else ("us", 1.0)
        elif line.startswith("# (B)"):
            _check_units(no, raw)
        elif _meta(res, line):
            n_avg += bool(_AVG.match(line))
            continue
        elif cols is not None and line[0].isdigit():
            res.rows.append(_row(no, raw, cols, us_per))
    return cols, header_no, failures, n_avg


def _separate_runs(res: NcclResult, n_avg: int) -> ToolFailure | None:
    """Several launches in one output (module docstring): the failure and its finding, else None."""
    res.runs = max(res.runs, n_avg, sum(r.rank == 0 for r in res.ranks), 1)
    if res.runs == 1:
        return None
    coll, hosts = res.collective or res.tool, res.hosts
    where = f"on {len(hosts)} host(s) ({', '.join(hosts)})" if hosts else "(no Rank lines)"
    if all(r.rank == 0 for r in res.ranks):
        kind, code = "ranks_alone", "nccl_ranks_alone"
        msg = (f"{res.runs} separate 1-rank runs of {coll} {where}, each with its own header and a single "
               "'Rank 0': every process ran alone (nranks 1, so all_reduce busbw = algbw x 2(n-1)/n = 0); "
               "NCCL never crossed the network, no multi-node result")
        cause = ("nccl-tests built without MPI (make MPI=1) started by mpirun/srun, or a launcher that starts "
                 "N independent processes")
    else:
        kind, code = "separate_runs", "nccl_separate_runs"
        msg = (f"{res.runs} separate runs of {coll} {where} ({res.n_ranks} Rank lines, ranks restart at 0): "
               "the runs never talked to each other, none is a result across all of them")
        cause = "one launch per node (binary built without MPI=1, or -g N per node) instead of one MPI job"
    res.findings.append(Finding(code=code, severity="error", message=msg))
    return ToolFailure(kind=kind, message=msg, likely_cause=cause)


#: :class:`ParseError` ``expected`` of an output without a result header: no nccl-tests run printed it
NO_HEADER = "nccl-tests output with a '#  size  count  type ...' header"


def parse_nccl(text: str, tool: str = "nccl-tests") -> NcclResult:
    """Parse an nccl-tests output (any collective, any rank's stdout or the merged one), every format
    from NVIDIA/nccl-tests v1.0.0 (``src/common.cu``, ``src/all_reduce.cu``) to v2.19.6 (``src/util.cu``).

    Args:
        text: the output as captured (MPI ``[r,c]<stdout>:`` prefixes, CRLF, noise tolerated).
        tool: ``nccl-tests`` or the binary name (``all_reduce_perf``), used when the output has no
            ``# Collective test starting`` marker.

    Returns:
        An :class:`NcclResult`. A ``Test NCCL failure`` / ``NCCL WARN`` output gives ``failure``
        and no rows; so do several launches in one output (``ranks_alone``, ``separate_runs``).

    Raises:
        ParseError: empty/binary input, no result header (another tool's output), a header
            without rows, a row whose cells do not match the header.
    """
    require_text(tool, text)
    lines = clean_lines(text, expand_tabs=True)
    res = NcclResult(tool=tool, collective=None if tool == "nccl-tests" else tool)
    cols, header_no, failures, n_avg = _scan(res, lines)
    if failures:
        res.failure = ToolFailure(kind="unknown", message=" / ".join(failures),
                                  likely_cause="NCCL/CUDA error: see NCCL_DEBUG=INFO (often the network transport)")
        res.rows, res.runs = [], max(res.runs, n_avg, 1)
        return res
    if cols is None:
        no, line = next(((i, x) for i, x in enumerate(lines, 1) if x.strip()), (0, ""))
        raise ParseError(tool, no, NO_HEADER, line)
    if not res.rows:
        raise ParseError(tool, header_no, "at least one result row after the header", lines[header_no - 1])
    if not n_avg:
        raise ParseError(tool, len(lines), "the closing '# Avg bus bandwidth' line (output cut short?)", lines[-1])
    res.columns = cols
    if failure := _separate_runs(res, n_avg):
        res.failure, res.rows, res.avg_busbw, res.min_bw_ok = failure, [], None, None
        return res
    res.findings = _findings(res)
    return res


for _name in NCCL_TOOLS:
    parser(_name)(lambda text, _t=_name: parse_nccl(text, _t))
