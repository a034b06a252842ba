"""rping and nccl-tests parsers against the reference outputs in shared/cases (values from cases/INDEX.md)."""

from __future__ import annotations

import pytest

from tuning.errors import ParseError
from tuning.parsers import parse
from tuning.parsers.nccl import parse_nccl
from tuning.parsers.rping import parse_rping

RPING = "rping__client_verbose_ok.txt"
NCCL = "nccl_tests__all_reduce_2node_good_new_format.txt"


def _read(cases_dir, name: str) -> str:
    return (cases_dir / name).read_text()


# ---------------------------------------------------------------- rping


def test_rping_client_verbose_ok(cases_dir):
    r = parse_rping(_read(cases_dir, RPING))
    assert (r.role, r.requested_count, r.ping_count, r.disconnect_seen) == ("client", 3, 3, True)
    assert [p.index for p in r.pings] == [0, 1, 2]
    assert r.pings[0].payload == "ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"
    assert r.pings[2].payload.startswith("CDE") and r.pings[2].payload.endswith("rst")
    assert r.findings == [] and r.failure is None and r.ok()


def test_rping_payload_that_does_not_rotate(cases_dir):
    text = _read(cases_dir, RPING).replace("rdma-ping-1: BCDEFGH", "rdma-ping-1: ABCDEFG")
    r = parse_rping(text)
    assert [(f.code, f.subject) for f in r.findings] == [("rping_payload_corrupt", "rdma-ping-1")]
    assert not r.ok()


def test_rping_short_count_and_no_disconnect(cases_dir):
    lines = _read(cases_dir, RPING).splitlines()
    r = parse_rping("\n".join(lines[:3]) + "\n")
    assert r.ping_count == 2 and not r.disconnect_seen
    assert [f.code for f in r.findings] == ["rping_count_short"]
    assert not r.ok()


def test_rping_server_and_wrap_past_z():
    r = parse_rping("server ping data: rdma-ping-0: ABC\nserver DISCONNECT EVENT...\n")
    assert (r.role, r.disconnect_seen, r.findings) == ("server", True, [])
    # ping 57 starts at 'z' (65 + 57 = 122) and wraps to 'A'; alone it is a sequence gap, not corruption
    good = parse_rping("ping data: rdma-ping-57: zABC\n")
    assert [f.code for f in good.findings] == ["rping_sequence_gap"]
    bad = parse_rping("ping data: rdma-ping-57: z{AB\n")
    assert [f.code for f in bad.findings] == ["rping_sequence_gap", "rping_payload_corrupt"]


@pytest.mark.parametrize(
    "text,kind,status",
    [
        ("cma event RDMA_CM_EVENT_ADDR_ERROR, error -19\nwaiting for addr/route resolution state 1\n",
         "connect_failed", "-19"),
        ("cma event RDMA_CM_EVENT_REJECTED, error 8\nwait for CONNECTED state 4\nconnect error -1\n",
         "connect_failed", "8"),
        ("rdma_bind_addr: No such device\n", "no_rdma_device", None),
        ("ping data: rdma-ping-0: ABC\ncq completion failed status 5\n", "completion_error", "5"),
    ],
)
def test_rping_errors_never_yield_pings(text, kind, status):
    r = parse_rping(text)
    assert (r.failure.kind, r.failure.status) == (kind, status)
    assert r.pings == [] and not r.ok()


@pytest.mark.parametrize("text", ["", "\x00\x00", "DCBX mode: OS controlled\nPriority trust state: dscp\n"])
def test_rping_unreadable_raises(text):
    with pytest.raises(ParseError) as err:
        parse_rping(text)
    assert err.value.tool == "rping" and err.value.line_no == (1 if "DCBX" in text else 0)


# ---------------------------------------------------------------- nccl-tests


def test_nccl_all_reduce_new_format(cases_dir):
    r = parse("nccl-tests", _read(cases_dir, NCCL))
    assert (r.collective, r.n_threads, r.n_gpus, r.min_bytes, r.max_bytes) == (
        "all_reduce_perf", 1, 1, 8, 134217728)
    assert len(r.ranks) == 8 and r.hosts == ["nodea01", "nodea02"]
    assert (r.ranks[4].host, r.ranks[4].pid, r.ranks[4].bus_id, r.ranks[4].gpu) == (
        "nodea02", 154517, "0009:01:00", "NVIDIA GH200 120GB")
    assert r.columns[:5] == ["size", "count", "type", "redop", "root"]
    assert len(r.rows) == 25
    assert r.avg_busbw.raw == "19.7866" and r.avg_busbw.unit == "GB/s"
    assert r.avg_busbw_gbps == pytest.approx(19.7866 * 8)
    big = r.row_at(134217728)
    assert (big.count, big.dtype, big.redop, big.root) == (33554432, "float", "sum", -1)
    assert (big.out_of_place.busbw.raw, big.in_place.busbw.raw) == ("122.57", "123.11")
    assert big.out_of_place.busbw.value == pytest.approx(980.56)
    assert big.out_of_place.time_us == 1916.4 and big.in_place.algbw.raw == "70.35"
    assert r.row_at(262144).out_of_place.time_us == 127.0  # 1-decimal time
    assert all(h.wrong == 0 for row in r.rows for h in (row.out_of_place, row.in_place))
    assert (r.out_of_bounds, r.out_of_bounds_ok, r.findings, r.failure) == (0, True, [], None)


OLD_FORMAT = """\
# nThread 1 nGpus 8 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  12345 on     dgx01 device  0 [0x07] Tesla V100-SXM2-32GB
#
#                                                     out-of-place                       in-place
#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2   float    30.11    0.00    0.00  0e+00    29.90    0.00    0.00  0e+00
     1048576        262144   float    95.52   10.98   19.21  1e-07    94.10   11.14     N/A    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 4.8012
"""


def test_nccl_old_columns_no_redop_root_error_column():
    r = parse_nccl(OLD_FORMAT, "all_gather_perf")
    assert r.collective == "all_gather_perf" and r.columns[:3] == ["size", "count", "type"]
    assert r.ranks[0].group is None and r.ranks[0].gpu == "Tesla V100-SXM2-32GB"
    row = r.row_at(1048576)
    assert (row.redop, row.root, row.out_of_place.max_error, row.out_of_place.wrong) == (None, None, 1e-07, None)
    assert row.in_place.busbw is None and row.in_place.max_error is None  # N/A, never a number
    assert row.in_place.algbw.raw == "11.14" and r.avg_busbw.raw == "4.8012"


def test_nccl_wrong_results_flagged(cases_dir):
    text = _read(cases_dir, NCCL).replace("1916.4   70.04  122.57      0", "1916.4   70.04  122.57      3")
    r = parse_nccl(text)
    assert r.row_at(134217728).out_of_place.wrong == 3
    assert [f.code for f in r.findings] == ["nccl_wrong_results"]


def test_nccl_failure_gives_no_rows(cases_dir):
    text = _read(cases_dir, NCCL).replace(
        "# Out of bounds values : 0 OK",
        "nodea01: Test NCCL failure common.cu:1005 'unhandled system error (run with NCCL_DEBUG=INFO for details)'")
    r = parse_nccl(text)
    assert r.failure is not None and "Test NCCL failure" in r.failure.message
    assert r.rows == []


def test_nccl_truncated_and_bad_rows(cases_dir):
    lines = _read(cases_dir, NCCL).splitlines()
    with pytest.raises(ParseError) as err:  # header, no row
        parse_nccl("\n".join(lines[:17]))
    assert err.value.line_no == 16 and "size" in err.value.line
    with pytest.raises(ParseError) as err:  # a row cut short
        parse_nccl("\n".join(lines[:18] + [lines[18][:60]]))
    assert err.value.line_no == 19
    with pytest.raises(ParseError, match="cut short") as err:  # killed before the summary
        parse_nccl("\n".join(lines[:25]))
    assert err.value.line_no == 25
    with pytest.raises(ParseError) as err:  # a non-number
        parse_nccl("\n".join(lines).replace("17.65", "17.6x"))
    assert err.value.line_no == 19


@pytest.mark.parametrize("name", ["ib_write_bw__roce_client_MiBsec_new_perftest.txt", RPING])
def test_nccl_wrong_tool_raises(cases_dir, name):
    with pytest.raises(ParseError) as err:
        parse_nccl(_read(cases_dir, name))
    assert err.value.line_no == 1


@pytest.mark.parametrize("text", ["", " \n", "\x00ELF"])
def test_nccl_empty_and_binary_raise(text):
    with pytest.raises(ParseError) as err:
        parse_nccl(text)
    assert err.value.line_no == 0
