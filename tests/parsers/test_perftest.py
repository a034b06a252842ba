"""perftest parser against the reference outputs in shared/cases (values from cases/INDEX.md)."""

from __future__ import annotations

import pytest

from tuning.errors import ParseError
from tuning.parsers import parse
from tuning.parsers.perftest import parse_perftest


def _read(cases_dir, name: str) -> str:
    return (cases_dir / name).read_text()


def test_client_mib_sec_new_perftest(cases_dir):
    r = parse_perftest(_read(cases_dir, "ib_write_bw__roce_client_MiBsec_new_perftest.txt"), "ib_write_bw")
    assert (r.title, r.kind, r.role, r.device) == ("RDMA_Write BW Test", "bw", "client", "mlx5_3")
    assert (r.link_type, r.transport, r.connection, r.gid_index, r.mtu_bytes, r.qps) == (
        "Ethernet", "IB", "RC", 3, 4096, 1)
    assert r.settings["Lock-free"] == "OFF" and r.settings["Using DDP"] == "OFF"
    assert r.settings["CQE Poll Batch"] == "16"
    assert r.local_gid == "00:00:00:00:00:00:00:00:00:00:255:255:10:07:14:08"
    assert r.remote_gid == "00:00:00:00:00:00:00:00:00:00:255:255:10:07:14:07"
    assert (r.local_qpn, r.remote_qpn) == (0x0291, 0x028F)
    [row] = r.bw_rows
    assert (row.size_bytes, row.iterations, row.msg_rate_mpps) == (65536, 5000, 0.726855)
    assert (row.bw_avg.raw, row.bw_avg.unit, row.bw_avg.unit_norm) == ("45428.46", "MiB/sec", "Gb/s")
    assert row.bw_avg.value == pytest.approx(381.08, abs=0.01)
    assert row.bw_peak is not None and row.bw_peak.raw == "45446.68"
    assert r.best_bw_gbps() == pytest.approx(381.1, abs=0.05)
    assert r.findings == [] and r.failure is None


def test_server_duration_mode_peak_is_none(cases_dir):
    r = parse_perftest(_read(cases_dir, "ib_write_bw__roce_server_duration_mbsec_peak0_tabs.txt"))
    assert (r.role, r.link_type, r.gid_index, r.mtu_bytes, r.qps) == ("server", "Ethernet", 3, 4096, 1)
    assert r.settings["rdma_cm QPs"] == "OFF"
    [row] = r.bw_rows
    assert (row.size_bytes, row.iterations) == (65536, 664644)
    assert row.bw_peak is None
    assert row.bw_avg.raw == "4153.87" and row.bw_avg.unit == "MB/sec"
    assert row.bw_avg.value == pytest.approx(34.84, abs=0.01)
    assert row.msg_rate_mpps == 0.066462


def test_client_all_sizes_gbits_low_mtu(cases_dir):
    r = parse_perftest(_read(cases_dir, "ib_write_bw__client_all_sizes_gbits_mtu1024_gid5.txt"))
    assert len(r.bw_rows) == 23 and {x.iterations for x in r.bw_rows} == {5000}
    assert [r.bw_rows[0].size_bytes, r.bw_rows[-1].size_bytes] == [2, 8388608]
    assert r.gid_index == 5 and r.mtu_bytes == 1024
    assert r.best_bw_gbps() == 92.46
    assert max(r.bw_rows, key=lambda x: x.bw_avg.value).size_bytes == 16384
    assert r.row_at(65536).bw_avg.value == 92.38
    assert r.row_at(8388608).bw_avg.value == 92.39
    assert r.row_at(3) is None
    assert r.bw_rows[0].bw_avg.unit == "Gb/sec"
    [finding] = r.findings
    assert (finding.code, finding.severity, finding.subject) == ("roce_mtu_low", "warn", "mlx5_0")
    assert "4200" in finding.message


def test_read_lat_nine_columns_and_cpufreq_noise(cases_dir):
    r = parse(  # through the registry, as `fabtune parse` does
        "ib_read_lat", _read(cases_dir, "ib_read_lat__roce_mtu1024_gid12_cpufreq_warnings.txt"))
    assert (r.title, r.kind, r.gid_index, r.mtu_bytes, r.device) == (
        "RDMA_Read Latency Test", "lat", 12, 1024, "mlx5_2")
    assert r.settings["Outstand reads"] == "16"
    [row] = r.lat_rows
    assert (row.size_bytes, row.iterations) == (2, 1000)
    assert (row.t_min, row.t_max, row.t_typical, row.t_avg) == (6.88, 16.81, 7.04, 7.06)
    assert (row.stdev, row.p99, row.p999) == (0.31, 7.38, 16.81)
    assert r.row_at(2) is row and r.bw_rows == [] and r.best_bw_gbps() is None
    assert [f.code for f in r.findings] == ["roce_mtu_low"]


def test_couldnt_connect_concatenated(cases_dir):
    r = parse_perftest(_read(cases_dir, "ib_write_bw__client_err_couldnt_connect_concatenated.txt"))
    assert r.failure is not None and r.failure.kind == "connect_failed"
    assert "Couldn't connect to 192.168.50.21:18515" in r.failure.message
    assert "Unable to init the socket connection" in r.failure.message
    assert "18515" in r.failure.likely_cause
    assert r.bw_rows == [] and r.lat_rows == [] and r.best_bw_gbps() is None


def test_modify_qp_rtr(cases_dir):
    r = parse_perftest(_read(cases_dir, "ib_write_bw__client_err_modify_qp_rtr.txt"))
    assert r.failure is not None and r.failure.kind == "qp_rtr_failed"
    assert "Failed to modify QP 263 to RTR" in r.failure.message
    assert r.local_qpn == 263  # decimal in the message, 0x0107 in the address line
    assert "link-local" in r.failure.likely_cause and "GID index 1" in r.failure.likely_cause
    assert r.gid_index == 1 and r.bw_rows == []


COMPLETION_ERROR = """\
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      5000             381.50             381.41               0.727473
 Completion with error at client
 Failed status 12: wr_id 0 syndrom 0x81
scnt=128, ccnt=0
 Failed to complete run_iter_bw function successfully
"""


@pytest.mark.parametrize(
    "text,kind",
    [
        (" RDMA_Write BW Test\n" + COMPLETION_ERROR, "completion_error"),
        ("No IB devices found\n", "no_rdma_device"),
        (" Couldn't get device\n", "no_rdma_device"),
        ("IB device mlx5_9 not found\n Unable to find the Infiniband/RoCE device\n", "no_rdma_device"),
        ("Failed to modify QP 7 to RTR\n", "qp_rtr_failed"),
        (" Couldn't read remote address\n Failed to exchange data between server and clients\n", "unknown"),
    ],
)
def test_error_outputs_never_yield_numbers(text, kind):
    r = parse_perftest(text)
    assert r.failure is not None and r.failure.kind == kind
    assert r.bw_rows == [] and r.lat_rows == [] and r.best_bw_gbps() is None


def test_completion_error_status():
    r = parse_perftest(" RDMA_Write BW Test\n" + COMPLETION_ERROR)
    assert r.failure.status == "12" and "RETRY_EXC" in r.failure.likely_cause


def test_gid_kinds_differ_on_rtr_failure(cases_dir):
    text = _read(cases_dir, "ib_write_bw__client_err_modify_qp_rtr.txt").replace(
        "254:128:00:00:00:00:00:00:14:66:161:255:254:18:52:87",
        "00:00:00:00:00:00:00:00:00:00:255:255:10:07:14:07")
    assert parse_perftest(text).failure.kind == "gid_type_mismatch"


def test_latency_placeholders_are_none():
    text = (" Send Latency Test\n #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]"
            "    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]\n"
            " 2       1          1.10           1.10        1.10              1.10         -nan      N/A        N/A\n"
            + "-" * 87 + "\n")
    [row] = parse_perftest(text, "ib_send_lat").lat_rows
    assert (row.t_typical, row.stdev, row.p99, row.p999) == (1.1, None, None, None)


def test_placeholder_average_is_refused():
    text = (" RDMA_Read BW Test\n #bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]\n"
            " 65536 10 N/A N/A N/A\n")
    with pytest.raises(ParseError) as err:
        parse_perftest(text, "ib_read_bw")
    assert err.value.line_no == 3


@pytest.mark.parametrize("text,line_no", [("", 0), ("   \n\n", 0), ("\x00\x01\x02binary", 0)])
def test_empty_and_binary_raise(text, line_no):
    with pytest.raises(ParseError) as err:
        parse_perftest(text)
    assert err.value.line_no == line_no and err.value.tool == "ib_write_bw"


def test_truncated_table_names_the_header(cases_dir):
    text = _read(cases_dir, "ib_write_bw__roce_client_MiBsec_new_perftest.txt")
    cut = text[: text.index(" 65536      5000")]
    with pytest.raises(ParseError) as err:
        parse_perftest(cut)
    assert err.value.line_no == 24 and "#bytes" in err.value.line


def test_table_cut_short_is_refused(cases_dir):
    """A run killed mid ``-a`` must not report the sizes it reached as the whole table."""
    lines = _read(cases_dir, "ib_write_bw__client_all_sizes_gbits_mtu1024_gid5.txt").splitlines()
    with pytest.raises(ParseError, match="cut short") as err:
        parse_perftest("\n".join(lines[:30]))
    assert err.value.line_no == 30 and err.value.line.startswith(" 256 ")


def test_truncated_row_and_non_number(cases_dir):
    text = _read(cases_dir, "ib_write_bw__roce_client_MiBsec_new_perftest.txt")
    for bad in (text.replace("0.726855", ""), text.replace("45428.46", "45428.4x")):
        with pytest.raises(ParseError) as err:
            parse_perftest(bad)
        assert err.value.line_no == 25 and err.value.line.startswith(" 65536")


def test_unknown_unit_is_refused(cases_dir):
    text = _read(cases_dir, "ib_write_bw__roce_client_MiBsec_new_perftest.txt").replace("MiB/sec", "KB/sec")
    with pytest.raises(ParseError, match="KB/sec") as err:
        parse_perftest(text)
    assert err.value.line_no == 25


@pytest.mark.parametrize(
    "name,tool,line_no",
    [
        ("mlnx_qos__legacy_trust_dscp_pfc3_tsa_vendor.txt", "ib_write_bw", 1),
        ("ib_read_lat__roce_mtu1024_gid12_cpufreq_warnings.txt", "ib_write_bw", 2),
        ("ib_write_bw__roce_client_MiBsec_new_perftest.txt", "ib_write_lat", 3),
        ("ib_write_bw__roce_client_MiBsec_new_perftest.txt", "ib_read_bw", 3),
        ("nccl_tests__all_reduce_2node_good_new_format.txt", "ib_send_bw", 1),
    ],
)
def test_wrong_tool_output_raises(cases_dir, name, tool, line_no):
    with pytest.raises(ParseError) as err:
        parse_perftest(_read(cases_dir, name), tool)
    assert err.value.line_no == line_no and err.value.tool == tool
