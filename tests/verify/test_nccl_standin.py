"""The lab's nccl-tests and mpirun stand-ins (tuning.lab.tools.nccl), read by the real parser
(tuning.parsers.nccl): the bus bandwidth is the fabric model's (tuning.lab.model.compute on every
ring hop), the class NCCL_IB_TC sets (unset: class 0, lossy), an injected degrade, a wrong
NCCL_IB_HCA, a GID that is no RoCE v2 entry, and N lone ranks (the parser's ranks_alone). Fast:
the state folder is built as tests/lab/test_fabric_model.py builds it, no lab runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lab.test_fabric_model import make_state
from tuning.lab.inject import inject
from tuning.lab.model import compute
from tuning.lab.tools import nccl as standin
from tuning.parsers.nccl import parse_nccl

HCA = "=mlx5_0:1,mlx5_1:1"
SIZE = 64 * 2**20
ARGS = f"all_reduce_perf -b {SIZE} -e {SIZE} -f 2 -g 1"


@pytest.fixture
def lab(tmp_path: Path, monkeypatch) -> Path:
    state = make_state(tmp_path, tuned=True)
    monkeypatch.setenv("FABTUNE_LAB_DIR", str(state))
    monkeypatch.setenv("FABTUNE_LAB_NODE", "node01")
    for k in ("NCCL_IB_HCA", "NCCL_IB_TC", "NCCL_IB_GID_INDEX"):
        monkeypatch.delenv(k, raising=False)
    return state


def _mpirun(capsys, env: str = f"-x NCCL_IB_HCA={HCA} -x NCCL_IB_TC=106", args: str = ARGS) -> tuple[int, str]:
    ctx = [f"-np 1 --host {n} {env} {args}" for n in ("node01", "node02")]
    rc = standin.mpirun(" : ".join(ctx).split())
    return rc, capsys.readouterr().out


def _expected_avg(state: Path, tos: int | None) -> float:
    """The Avg bus bandwidth (GB/s) the module docstring's rule gives for ARGS on node01 <-> node02
    over mlx5_0 and mlx5_1: 2 HCAs x the slowest hop x efficiency, ramped to SIZE, time + latency."""
    hops = [compute(state, a, d, b, d, None, "write_bw", size=standin.HOP_BYTES, flow_tos=tos or 0).bw_avg_gbps
            for a, b in (("node01", "node02"), ("node02", "node01")) for d in ("mlx5_0", "mlx5_1")]
    bus = 2 * min(hops) * standin.NCCL_EFFICIENCY / 8
    speed = bus * SIZE / (SIZE + standin.HALF_BYTES)  # 2 ranks: algbw = busbw
    t = standin.BASE_LAT_US + SIZE / speed / 1e3
    return (SIZE / t / 1e3 + SIZE / (t * 1.002) / 1e3) / 2


def test_two_nodes_in_the_tuned_class_print_the_model_bus_bandwidth_in_the_real_format(lab, capsys):
    rc, out = _mpirun(capsys)
    res = parse_nccl(out, "all_reduce_perf")
    assert rc == 0 and res.failure is None and res.collective == "all_reduce_perf"
    assert [(r.rank, r.host, r.device) for r in res.ranks] == [(0, "node01", 0), (1, "node02", 0)]
    assert res.columns == ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                           "time", "algbw", "busbw", "#wrong"]
    want = _expected_avg(lab, 106)
    assert float(res.avg_busbw.raw) == pytest.approx(want, abs=0.002)
    assert 80 < want < 100  # 2 x 400 Gb/s NICs, lossless, MTU 4096: ~92 GB/s
    lines = out.splitlines()  # the v2.19.6 frame, as tests/parsers/cases' single-rank sample has it
    assert lines[0] == standin.VERSION_LINE and lines[-4:] == ["#", "# Collective test concluded: all_reduce_perf",
                                                                "#", ""]
    assert lines[8:11] == standin.HEADER[1:]


def test_without_nccl_ib_tc_the_job_rides_class_0_and_is_lossy(lab, capsys):
    tuned = float(parse_nccl(_mpirun(capsys)[1]).avg_busbw.raw)
    rc, out = _mpirun(capsys, env=f"-x NCCL_IB_HCA={HCA}")
    lossy = float(parse_nccl(out).avg_busbw.raw)
    assert rc == 0 and lossy == pytest.approx(_expected_avg(lab, None), abs=0.002)
    assert lossy / tuned == pytest.approx(0.70, abs=0.01)  # the model's lossy penalty


def test_a_degraded_nic_slows_the_whole_ring(lab, capsys):
    before = float(parse_nccl(_mpirun(capsys)[1]).avg_busbw.raw)
    inject(lab, "node02:mlx5_1", "degrade", "20")
    after = float(parse_nccl(_mpirun(capsys)[1]).avg_busbw.raw)
    assert after / before == pytest.approx(0.80, abs=0.01)


def test_an_nccl_ib_hca_matching_no_device_falls_back_to_sockets(lab, capsys):
    rc, out = _mpirun(capsys, env="-x NCCL_IB_HCA==mlx5_9:1 -x NCCL_IB_TC=106")
    assert rc == 0 and float(parse_nccl(out).avg_busbw.raw) < standin.SOCKET_GBPS / 8


def test_a_gid_index_that_is_no_roce_v2_entry_fails_with_nccls_line(lab, capsys):
    rc, out = _mpirun(capsys, env=f"-x NCCL_IB_HCA={HCA} -x NCCL_IB_TC=106 -x NCCL_IB_GID_INDEX=0")
    res = parse_nccl(out, "all_reduce_perf")
    assert rc == 1 and res.failure is not None and res.avg_busbw is None
    assert "node01: Test NCCL failure common.cu:1031 'unhandled system error" in out


def test_lone_processes_each_print_a_1_rank_run_which_the_parser_calls_ranks_alone(lab, capsys, monkeypatch):
    outs = []
    for node in ("node01", "node02"):
        monkeypatch.setenv("FABTUNE_LAB_NODE", node)
        assert standin.all_reduce_perf(ARGS.split()[1:]) == 0
        outs.append(capsys.readouterr().out)
    one = parse_nccl(outs[0], "all_reduce_perf")
    assert one.n_ranks == 1 and float(one.avg_busbw.raw) == 0  # busbw = algbw x 2(n-1)/n = 0
    both = parse_nccl("".join(outs), "all_reduce_perf")
    assert both.failure.kind == "ranks_alone" and both.avg_busbw is None


def test_mpirun_refuses_an_unknown_host_or_program_with_open_mpis_texts(lab, capsys):
    assert standin.mpirun("-np 1 --host node09 all_reduce_perf -b 8 -e 8".split()) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[:3] == ["ssh: Could not resolve hostname node09: Name or service not known", "-" * 74,
                       "ORTE was unable to reliably start one or more daemons."], err
    assert err[-2:] == ["  and network routing requirements).", "-" * 74]
    assert standin.mpirun("-np 1 --host node01 ib_write_bw".split()) == 131
    assert capsys.readouterr().err.splitlines() == [
        "-" * 74, "mpirun was unable to launch the specified application as it could not access",
        "or execute an executable:", "", "Executable: ib_write_bw", "Node: node01", "",
        "while attempting to start process rank 0.", "-" * 74]
    assert standin.mpirun("-np 1 all_reduce_perf".split()) == 1
    assert "--host" in capsys.readouterr().err


def test_sizes_and_getfloatstr_as_nccl_tests_print_them():
    assert [standin.parse_size(x) for x in ("8", "8K", "128M", "1G")] == [8, 8192, 134217728, 2**30]
    assert [standin._float_str(v, 6) for v in (0.0, 1.234, 123.456, 1234.5, 123456.0)] == \
        ["  0.00", "  1.23", "123.46", "1234.5", "123456"]
    with pytest.raises(ValueError):
        standin.test_args(["-b", "1M", "-e", "8"])
