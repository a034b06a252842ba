"""nccl-tests formats of every release, and launches that are not one run.

Fixtures: tests/parsers/cases/nccl_tests__v*.txt, rendered with the printf formats of the tags
named in their names; tests/parsers/cases/nccl_tests__FORMATS.md gives the tag, file and lines
each follows and what changed between tags. Values asserted here are read off the fixtures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tuning.errors import ParseError
from tuning.parsers import parse
from tuning.parsers.nccl import parse_nccl

CASES = Path(__file__).parent / "cases"
V1 = "nccl_tests__v1.0.0_all_reduce_8ranks_2node_mpi.txt"
V1_BCAST = "nccl_tests__v1.0.0_broadcast_8ranks_2node_mpi.txt"
V1_ALONE = "nccl_tests__v1.0.0_all_reduce_4_lone_ranks_no_mpi.txt"
V211 = "nccl_tests__v2.11.0_all_reduce_16ranks_2node_no_check.txt"
V2196_ALONE = "nccl_tests__v2.19.6_all_reduce_16_lone_ranks_no_mpi_interleaved.txt"
V2196_ONE = "nccl_tests__v2.19.6_all_reduce_single_rank.txt"
SHARED_NEW = "nccl_tests__all_reduce_2node_good_new_format.txt"


def _read(name: str) -> str:
    return (CASES / name).read_text()


# ---------------------------------------------------------------- v1.0.0: no '#' on the summary, ms times


def test_v1_all_reduce_no_hash_summary_parses():
    r = parse("all_reduce_perf", _read(V1))
    assert (r.n_threads, r.n_gpus, r.min_bytes, r.max_bytes, r.runs) == (1, 1, 8, 134217728, 1)
    assert r.n_ranks == 8 and r.hosts == ["dgx1-01", "dgx1-02"]
    assert (r.ranks[5].rank, r.ranks[5].pid, r.ranks[5].group, r.ranks[5].device, r.ranks[5].bus_id) == (
        5, None, None, 1, "0x07")
    assert r.ranks[5].gpu == "Tesla V100-SXM2-32GB"
    assert r.columns == ["bytes", "N", "type", "op", "time", "algbw", "busbw", "res",
                         "time", "algbw", "busbw", "res"]
    assert r.time_unit == "ms" and len(r.rows) == 25
    assert r.avg_busbw.raw == "4.28498" and r.avg_busbw_gbps == pytest.approx(4.28498 * 8, abs=1e-4)
    assert (r.out_of_bounds, r.out_of_bounds_ok, r.min_bw_ok) == (0, True, None)
    big = r.row_at(134217728)
    assert (big.count, big.dtype, big.redop, big.root) == (33554432, "float", "sum", None)
    assert (big.out_of_place.busbw.raw, big.in_place.busbw.raw) == ("10.43", "10.38")
    assert big.out_of_place.busbw.value == pytest.approx(83.44)
    assert (big.out_of_place.time_us, big.in_place.time_us) == (22528.0, 22634.0)  # 22.528 ms
    assert (big.out_of_place.max_error, big.in_place.max_error, big.out_of_place.wrong) == (1e-07, 2e-07, None)
    small = r.row_at(8)
    assert (small.out_of_place.time_us, small.out_of_place.max_error) == (29.0, 0.0)
    assert [row.out_of_place.busbw.raw for row in r.rows[-4:]] == ["10.53", "10.37", "10.47", "10.43"]
    assert (r.findings, r.failure) == ([], None)


def test_v1_broadcast_one_half_root_column():
    r = parse_nccl(_read(V1_BCAST), "broadcast_perf")
    assert r.columns == ["bytes", "N", "type", "root", "time", "algbw", "busbw", "res"]
    assert len(r.rows) == 7 and all(row.in_place is None for row in r.rows)
    row = r.row_at(16777216)
    assert (row.root, row.redop, row.out_of_place.time_us) == (0, None, 1648.0)
    assert row.out_of_place.algbw.raw == row.out_of_place.busbw.raw == "10.18"  # broadcast: busbw = algbw
    assert r.avg_busbw.raw == "9.46452" and (r.out_of_bounds, r.findings) == (0, [])


def test_v1_cut_before_summary_still_refused():
    lines = _read(V1).splitlines()
    with pytest.raises(ParseError, match="cut short") as err:
        parse_nccl("\n".join(lines[:-3]))
    assert err.value.line_no == len(lines) - 3


# ---------------------------------------------------------------- v2.x


def test_v2_11_error_column_placeholders_pid():
    r = parse_nccl(_read(V211), "all_reduce_perf")
    assert r.n_ranks == 16 and r.hosts == ["a100-n1", "a100-n2"] and r.runs == 1
    assert (r.ranks[9].pid, r.ranks[9].group, r.ranks[9].bus_id) == (51261, None, "0x0f")
    assert r.columns[:4] == ["size", "count", "type", "redop"] and r.time_unit == "us"
    big = r.row_at(134217728)
    assert (big.out_of_place.time_us, big.out_of_place.busbw.raw, big.in_place.busbw.raw) == (11817.0, "21.30", "21.50")
    assert big.out_of_place.max_error is None and big.in_place.max_error is None  # -c 0 prints N/A
    assert r.row_at(67108864).out_of_place.time_us == 6214.4
    assert r.avg_busbw.raw == "7.19237" and (r.out_of_bounds, r.findings, r.failure) == (0, [], None)


def test_cputime_header_and_min_bw_check(cases_dir):
    """v2.13.4+ ``-C 1`` names the time column ``cputime``; ``NCCL_TESTS_MIN_BW`` adds OK/FAILED."""
    base = (cases_dir / SHARED_NEW).read_text()
    header = "redop    root     time   algbw   busbw #wrong     time"
    assert header in base
    r = parse_nccl(base.replace(header, "redop    root  cputime   algbw   busbw #wrong  cputime")
                   .replace("# Avg bus bandwidth    : 19.7866 ", "# Avg bus bandwidth    : 19.7866 FAILED"))
    assert r.columns[5] == "cputime" and r.row_at(134217728).out_of_place.time_us == 1916.4
    assert r.avg_busbw.raw == "19.7866" and r.min_bw_ok is False


# ---------------------------------------------------------------- launches that are not one run


@pytest.mark.parametrize("name,runs,hosts", [(V2196_ALONE, 16, ["gpu-b017", "gpu-b018"]),
                                             (V1_ALONE, 4, ["dgx1-01", "dgx1-02"])])
def test_every_rank_alone_is_a_failure_not_a_bandwidth(name, runs, hosts):
    r = parse_nccl(_read(name), "all_reduce_perf")
    assert r.runs == runs and r.n_ranks == runs and r.hosts == hosts
    assert {(k.rank, k.device) for k in r.ranks} == {(0, 0)}
    assert r.failure.kind == "ranks_alone" and "MPI=1" in r.failure.likely_cause
    [f] = r.findings
    assert (f.code, f.severity) == ("nccl_ranks_alone", "error")
    assert f"{runs} separate 1-rank runs" in f.message and "never crossed the network" in f.message
    assert f"on 2 host(s) ({', '.join(hosts)})" in f.message
    assert r.rows == [] and r.avg_busbw is None and r.avg_busbw_gbps is None


def test_lone_ranks_with_mpirun_tags_and_cut_short():
    tagged = "\n".join(f"[1,{i % 16}]<stdout>:{line}" for i, line in enumerate(_read(V2196_ALONE).splitlines()))
    r = parse_nccl(tagged)
    assert (r.failure.kind, r.runs) == ("ranks_alone", 16)
    lines = _read(V2196_ALONE).splitlines()
    last_avg = max(i for i, x in enumerate(lines) if "Avg bus bandwidth" in x)
    r = parse_nccl("\n".join(lines[:last_avg]))  # the last process killed before its summary
    assert (r.failure.kind, r.runs) == ("ranks_alone", 16)


def test_separate_multi_rank_runs(cases_dir):
    """One launch per node (nccl-tests #306 shape): ranks restart at 0, no result spans both."""
    r = parse_nccl((cases_dir / SHARED_NEW).read_text() * 2)
    assert (r.failure.kind, r.runs, r.n_ranks) == ("separate_runs", 2, 16)
    assert [f.code for f in r.findings] == ["nccl_separate_runs"] and "2 separate runs" in r.findings[0].message
    assert r.rows == [] and r.avg_busbw is None


def test_one_rank_run_keeps_its_numbers_and_says_so():
    r = parse_nccl(_read(V2196_ONE), "all_reduce_perf")
    assert (r.runs, r.n_ranks, r.failure) == (1, 1, None)
    assert r.ranks[0].bus_id == "0000:18:00" and r.ranks[0].pid == 127 and r.ranks[0].group == 0
    assert r.avg_busbw.raw == "0" and r.avg_busbw_gbps == 0.0
    assert {row.out_of_place.busbw.raw for row in r.rows} == {"0.00"}
    big = r.row_at(134217728)
    assert (big.out_of_place.algbw.raw, big.in_place.algbw.raw, big.in_place.time_us) == ("246.56", "443676", 0.3)
    assert [(f.code, f.severity, f.subject) for f in r.findings] == [("nccl_single_rank", "warn", "gpu-b017")]
    assert "measures no fabric" in r.findings[0].message


def test_shared_new_format_is_one_run_without_findings(cases_dir):
    r = parse_nccl((cases_dir / SHARED_NEW).read_text())
    assert (r.runs, r.n_ranks, r.time_unit, r.findings, r.failure) == (1, 8, "us", [], None)
    assert r.avg_busbw.raw == "19.7866" and all(row.in_place is not None for row in r.rows)
