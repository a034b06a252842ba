"""Verification you can trust (issue 8), pure: a test that did not run is classified with its cause
from perftest's real texts and is never a regression; a ``0.00`` average is not a value; a
baseline is compared only like with like (each differing parameter refused by name); a GID index
changed since the baseline is drift, reported and not failed; intermediate batches judge
regression only; a share of line rate; a stalled device hits the fan-out's phase timeout.

Samples (their error lines as the tools printed them):
- shared/cases ``ib_write_bw__client_err_couldnt_connect_concatenated.txt`` (perftest#228) and
  ``ib_write_bw__client_err_modify_qp_rtr.txt`` (perftest source texts; shared/cases/INDEX.md);
- tests/parsers/cases ``ib_write_bw__client_err_modify_qp_rts.txt``: the client's error in
  linux-rdma/perftest#132 (``ib_write_bw -R``, 2023-08-24);
- ``ib_write_bw__client_err_completion_status4_syndrom51.txt``: linux-rdma/perftest#173 (A100
  peer-to-peer run, 2022-10-26);
- ``ib_send_bw__client_err_completion_status12_one_line.txt``: zrlio/softiwarp#27 (2023-07-27, the
  message as one line);
- ``ib_write_bw__err_no_device_in_container.txt``: Mellanox/k8s-rdma-shared-dev-plugin#169
  (``ib_write_bw`` in a pod without the device, 2025-04-06);
- ``ib_write_bw__client_err_gid_types_incompatible.txt``: the two lines perftest's
  ``src/write_bw.c`` prints when ``ctx_check_gid_compatibility`` finds an IPv4-mapped GID on one
  end and an IPv6 one on the other (perftest 00b55b6; no public transcript found).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tuning import inventory
from tuning.errors import DeviceTimeout
from tuning.parsers.perftest import parse_perftest
from tuning.rollout.fanout import fan_out, nornir_for, outcomes
from tuning.verify.runner import (BW_ARGS, LAT_ARGS, ERROR_KINDS, PairResult, Thresholds, as_baseline,
                                  TESTS, compare_params, judge, no_result, run_params)

CASES = Path(__file__).resolve().parents[1] / "parsers" / "cases"
LAB = Path(__file__).resolve().parents[2] / "inventory" / "lab"
BW = {"tool": "ib_write_bw", "size_bytes": 65536, "duration_s": 2, "iters": None, "qps": 1, "direction": "uni"}
LAT = {"tool": "ib_read_lat", "size_bytes": 2, "duration_s": None, "iters": 1000, "qps": 1, "direction": "uni"}

#: (folder, file, tool, error_kind, a word of the cause)
SAMPLES = [
    ("shared", "ib_write_bw__client_err_couldnt_connect_concatenated.txt", "ib_write_bw", "connect_failed",
     "not listening"),
    ("shared", "ib_write_bw__client_err_modify_qp_rtr.txt", "ib_write_bw", "qp_rtr_failed", "link-local"),
    ("ours", "ib_write_bw__client_err_modify_qp_rts.txt", "ib_write_bw", "qp_rts_failed", "RTS"),
    ("ours", "ib_write_bw__client_err_completion_status4_syndrom51.txt", "ib_write_bw", "completion_error",
     "status 4 = IBV_WC_LOC_PROT_ERR"),
    ("ours", "ib_send_bw__client_err_completion_status12_one_line.txt", "ib_send_bw", "completion_error",
     "transport retry counter exceeded"),
    ("ours", "ib_write_bw__err_no_device_in_container.txt", "ib_write_bw", "no_rdma_device", "mlx5_ib"),
    ("ours", "ib_write_bw__client_err_gid_types_incompatible.txt", "ib_write_bw", "gid_type_mismatch",
     "IPv4-mapped"),
]


def _text(cases_dir: Path, where: str, name: str) -> str:
    return ((cases_dir if where == "shared" else CASES) / name).read_text()


@pytest.mark.parametrize("where,name,tool,kind,cause", SAMPLES, ids=[s[1] for s in SAMPLES])
def test_every_kind_from_a_real_text(cases_dir, where, name, tool, kind, cause):
    res = parse_perftest(_text(cases_dir, where, name), tool)
    got = no_result(res, tool)
    assert got is not None and got[0] == kind and kind in ERROR_KINDS, got
    assert cause in got[1] and got[1].startswith(f"{tool}: "), got


def test_rtr_text_without_gids_stays_an_rtr_failure_and_rts_is_not_rtr():
    # the RTR sample's error lines alone (no GID lines to compare): RTR; the RTS sample's second
    # line is the same "Unable to Connect the HCA's" text, yet its kind is RTS
    rtr = parse_perftest("Failed to modify QP 263 to RTR\n Unable to Connect the HCA's through the link\n")
    assert rtr.failure.kind == "qp_rtr_failed"
    rts = parse_perftest((CASES / "ib_write_bw__client_err_modify_qp_rts.txt").read_text())
    assert rts.failure.kind == "qp_rts_failed" and "max_qp_rd_atom" in rts.failure.likely_cause


def test_a_zero_average_is_not_a_value_and_a_zero_peak_in_duration_mode_is_normal(cases_dir):
    srv = parse_perftest((cases_dir / "ib_write_bw__roce_server_duration_mbsec_peak0_tabs.txt").read_text())
    assert srv.bw_rows[0].bw_peak is None and no_result(srv, "ib_write_bw") is None  # peak 0.00: normal
    row = srv.bw_rows[0]
    zero = srv.model_copy(update={"bw_rows": [row.model_copy(update={"bw_avg": row.bw_avg.model_copy(
        update={"value": 0.0, "raw": "0.00"})})]})
    assert no_result(zero, "ib_write_bw") == ("no_value", "ib_write_bw: average bandwidth 0.00: not a measurement")
    lat = parse_perftest((cases_dir / "ib_read_lat__roce_mtu1024_gid12_cpufreq_warnings.txt").read_text(),
                         "ib_read_lat")
    assert no_result(lat, "ib_read_lat") is None
    assert no_result(lat.model_copy(update={"lat_rows": []}), "ib_read_lat")[0] == "no_value"


def test_params_come_from_the_command_line_fabtune_runs():
    assert run_params("ib_write_bw", BW_ARGS) == BW
    assert run_params("ib_read_lat", LAT_ARGS) == LAT
    assert run_params("ib_write_bw", "-F -b -n 200 -s 4096 -q 4")["direction"] == "bi"
    assert run_params("ib_write_bw", "-F -b -n 200 -s 4096 -q 4")["iters"] == 200


def _pair(bw=390.0, lat=2.0, **kw) -> PairResult:
    r = PairResult("node01:mlx5_0->node02:mlx5_0", "leaf", "node01:mlx5_0", "node02:mlx5_0",
                   "leaf01:swp1", "leaf01:swp2", bw_gbps=bw, lat_us=lat, mtu_bytes=4096, mtu_allowed=4096,
                   client_gid_index=3, server_gid_index=3, client_gid_type="RoCE v2", server_gid_type="RoCE v2",
                   client_speed_mbps=400000, server_speed_mbps=400000, params={"bw": dict(BW), "lat": dict(LAT)})
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def test_a_test_that_did_not_run_is_an_error_never_a_regression():
    base = as_baseline([_pair()])
    r = _pair(bw=None, lat=None, error_kind="connect_failed",
              error="ib_write_bw: Couldn't connect to 10.0.0.2:18515 (TCP out-of-band connect failed)")
    assert judge([r], Thresholds(), base) is False
    assert (r.status, r.verdict, r.baseline) == ("error", "fail", "compared")
    assert r.reasons == ["did not run: connect_failed: ib_write_bw: Couldn't connect to 10.0.0.2:18515 "
                         "(TCP out-of-band connect failed)"]
    assert not any("regressed" in x for x in r.reasons)
    assert as_baseline([r]) == {}  # a test that did not run never becomes a baseline


@pytest.mark.parametrize("test,field,value,said", [
    ("bw", "size_bytes", 4096, "size 65536 vs 4096 B (ib_write_bw)"),
    ("bw", "duration_s", 10, "duration 2 vs 10 s (ib_write_bw)"),
    ("lat", "iters", 5000, "iterations 1000 vs 5000 (ib_read_lat)"),
    ("bw", "qps", 4, "QPs 1 vs 4 (ib_write_bw)"),
    ("bw", "direction", "bi", "direction uni vs bi (ib_write_bw)"),
    ("bw", "tool", "ib_send_bw", "test ib_write_bw vs ib_send_bw (ib_write_bw)"),
])
def test_a_baseline_of_another_test_is_refused_not_judged(test, field, value, said):
    then = _pair(bw=390.0, lat=2.0)
    then.params[test][field] = value
    base = as_baseline([then])
    now = _pair(bw=100.0, lat=9.0)  # would be a regression of both, judged against a like baseline
    assert judge([now], Thresholds(min_bw_gbps=0, max_lat_us=100), base) is True
    assert now.baseline == f"mismatch: {said}" and now.status == "pass" and now.reasons == []


def test_a_like_baseline_is_compared_and_an_old_one_without_params_is_a_mismatch():
    base = as_baseline([_pair(bw=390.0, lat=2.0)])
    now = _pair(bw=300.0, lat=2.0)
    assert judge([now], Thresholds(min_bw_gbps=0), base) is False
    assert now.baseline == "compared" and now.reasons == ["bandwidth regressed 390.0 -> 300.0 Gb/s"]
    old = {now.pair: {"pair": now.pair, "bw_gbps": 390.0, "lat_us": 2.0, "gid_index": 3}}  # before issue 8
    assert judge([now], Thresholds(min_bw_gbps=0), old) is True
    assert now.baseline == "mismatch: the baseline has no test parameters"
    assert compare_params(now.params, None) == "none"


def test_a_baseline_measured_in_another_traffic_class_is_not_compared():
    class0 = as_baseline([_pair(bw=390.0, lat=2.0)])  # no --tclass: traffic class 0
    now = _pair(bw=300.0, lat=2.0)
    now.params = {k: run_params(tool, args + " --tclass=106") for k, (tool, args) in TESTS.items()}
    assert now.params["bw"]["tos"] == 106 and "tos" not in class0[now.pair]["params"]["bw"]
    assert judge([now], Thresholds(min_bw_gbps=0), class0) is True
    assert now.baseline == "mismatch: ToS 106 vs none (ib_write_bw), ToS 106 vs none (ib_read_lat)", now.baseline


def test_a_gid_index_changed_since_the_baseline_is_drift_not_a_failure():
    base = as_baseline([_pair()])
    now = _pair(server_gid_index=5)
    assert judge([now], Thresholds(), base) is True
    assert now.drift == ["server node02:mlx5_0 GID index 3 -> 5"]
    assert now.reasons == ["drift: server node02:mlx5_0 GID index 3 -> 5"] and now.verdict == "pass"
    now = _pair(client_gid_index=7, client_gid_type="IB/RoCE v1")
    judge([now], Thresholds(), base)
    assert now.drift == ["client node01:mlx5_0 GID index 3 -> 7", "client node01:mlx5_0 GID type RoCE v2 -> IB/RoCE v1"]
    old = {now.pair: {"gid_index": 3}}  # an older baseline knew the client's index only
    judge([now], Thresholds(), old)
    assert now.drift == ["client node01:mlx5_0 GID index 3 -> 7"]


def test_intermediate_batches_judge_regression_only():
    low = _pair(bw=150.0, lat=20.0, mtu_bytes=1024)  # half-tuned: every absolute mark missed
    assert judge([low], Thresholds(), None, absolute=False) is True and low.status == "pass"
    assert judge([low], Thresholds(), None) is False and len(low.reasons) == 3
    base = as_baseline([_pair(bw=300.0)])
    assert judge([low], Thresholds(), base, absolute=False) is False
    assert low.reasons == ["bandwidth regressed 300.0 -> 150.0 Gb/s", "latency regressed 2.00 -> 20.00 us"]
    gone = _pair(bw=None, lat=None, error_kind="timeout", error="node02: no answer in verify after 60 s")
    assert judge([gone], Thresholds(), None, absolute=False) is False and gone.status == "error"


def test_share_of_the_slower_ends_line_rate():
    th = Thresholds(min_bw_gbps=0, min_bw_share=0.9)
    slow = _pair(bw=350.0, server_speed_mbps=400000)
    assert judge([slow], th) is False
    assert slow.reasons == ["bandwidth 350.0 Gb/s below 0.90 of the slower end's 400 Gb/s link (360.0)"]
    fine = _pair(bw=185.0, client_speed_mbps=200000)  # a 200G end: its line rate is the mark
    assert judge([fine], th) is True
    unknown = _pair(server_speed_mbps=None)  # a check that cannot run fails
    assert judge([unknown], th) is False and "link speed of an end unknown" in unknown.reasons[0]


def test_device_timeout_says_who_where_and_how_long():
    e = DeviceTimeout("node03", "collect", 120)
    assert str(e) == "node03: no answer in collect after 120 s" and e.exit_code == 4
    assert (e.host, e.phase, e.seconds) == ("node03", "collect", 120)


def test_a_stalled_device_times_out_and_the_fan_out_does_not_wait_for_it():
    devices = list(inventory.load(LAB).nodes)
    release = []

    def collect(dev):
        if dev.name == "node03":
            while not release:  # a device that never answers (until the test lets it go)
                time.sleep(0.05)
        return dev.name

    t0 = time.monotonic()
    try:
        ok, failed = outcomes(fan_out(nornir_for(devices), collect, "collect", timeout_s=0.5))
    finally:
        release.append(True)
    assert time.monotonic() - t0 < 3
    assert ok == {d.name: d.name for d in devices if d.name != "node03"}
    assert list(failed) == ["node03"] and isinstance(failed["node03"], DeviceTimeout)
    assert str(failed["node03"]) == "node03: no answer in collect after 0.5 s"
    ok, failed = outcomes(fan_out(nornir_for(devices), lambda d: 1 / 0 if d.name == "node01" else 1, "apply",
                                  timeout_s=5))
    assert isinstance(failed["node01"], ZeroDivisionError) and len(ok) == len(devices) - 1  # errors stay errors


def test_report_rows_carry_the_new_fields_and_junit_says_did_not_run():
    import dataclasses

    from tests.reports._check import valid_json, valid_junit
    from tuning.reports import junit
    from tuning.reports.json_report import Context, build
    from tuning.rollout.run_report import RunReport

    base = as_baseline([_pair()])
    ok = _pair(server_gid_index=5)
    down = _pair(bw=None, lat=None, error_kind="qp_rts_failed",
                 error="ib_write_bw: Failed to modify QP to RTS / Unable to Connect the HCA's through the link")
    down.pair = "node01:mlx5_1->node02:mlx5_1"
    judge([ok, down], Thresholds(), base)
    rep = RunReport(None, "verify", outcome="failed", verify_ok=False)
    rep.verify_after = [dataclasses.asdict(ok), dataclasses.asdict(down)]
    ctx = Context("verify", inventory=str(LAB), devices={"node01": "node", "node02": "node"}, started=0.0,
                  finished=1.0, thresholds=dataclasses.asdict(Thresholds()), baseline=base, exit_code=1)
    doc = valid_json(build(rep, ctx))
    rows = {p["pair"]: p for p in doc["pairs"]}
    assert rows[ok.pair]["drift"] == ["server node02:mlx5_0 GID index 3 -> 5"] and rows[ok.pair]["outcome"] == "pass"
    assert rows[ok.pair]["params"]["bw"] == BW and rows[ok.pair]["baseline"] == "compared"
    assert (rows[down.pair]["status"], rows[down.pair]["error_kind"], rows[down.pair]["outcome"]) == \
        ("error", "qp_rts_failed", "error")
    cases = valid_junit(junit.to_xml(doc))
    kind, msg, _ = cases[f"fabtune.verify.pair.leaf/{down.pair}"]
    assert kind == "error" and msg == ("did not run: qp_rts_failed: ib_write_bw: Failed to modify QP to RTS / "
                                       "Unable to Connect the HCA's through the link")
    assert cases[f"fabtune.verify.pair.leaf/{ok.pair}"][0] is None
