"""The incast section of the run reports (no lab): judge_incast on hand-built measurements, the
JSON report's ``incast`` rows validate against report.schema.json (every IncastResult field
documented, nothing undocumented), one JUnit case per incast validating against JUnit.xsd, and the
Prometheus gauges of share_min and counter rises."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jsonschema
import pytest

from tests.reports._check import prom_samples, valid_json, valid_junit
from tuning import inventory
from tuning.reports import prometheus, verify_report
from tuning.reports import junit
from tuning.reports.json_report import Context, build, schema
from tuning.rollout.verify_run import Verification
from tuning.verify.incast import Expectation, IncastResult, _rounds, judge_incast, leaves_of, plan_incasts

LAB = Path(__file__).resolve().parents[2] / "inventory" / "lab"
SENDERS = ["node02:mlx5_0", "node03:mlx5_0", "node04:mlx5_0"]
EXPECT = Expectation(lossless=True, ecn=True, priority=3)


def _result(gbps: list[float], counters: dict[str, dict[str, int]], error: str | None = None) -> IncastResult:
    return IncastResult("leaf01: 3->node01:mlx5_0", "leaf01", "node01:mlx5_0", list(SENDERS),
                        dict(zip(SENDERS, gbps)), line_gbps=400.0, counters=counters, error=error)


def _zero(**rises: int) -> dict[str, int]:
    base = dict.fromkeys(("out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "np_cnp_sent",
                          "rp_cnp_handled", "rx_prio3_pause", "tx_prio3_pause", "rx_prio3_discards",
                          "rx_discards_phy"), 0)
    return {**base, **rises}


def _ecn_ok() -> IncastResult:
    return _result([129.1, 130.0, 128.9], {"node01:mlx5_0": _zero(np_cnp_sent=15600, tx_prio3_pause=135),
                                           **{s: _zero(rp_cnp_handled=5200, rx_prio3_pause=45) for s in SENDERS}})


def _lossy() -> IncastResult:
    return _result([42.0, 60.0, 78.0], {"node01:mlx5_0": _zero(out_of_sequence=4113, packet_seq_err=685,
                                                               rx_prio0_discards=1371),
                                        **{s: _zero(local_ack_timeout_err=3) for s in SENDERS}})


def test_judge_pass_and_each_failure() -> None:
    r = _ecn_ok()
    assert judge_incast(r, EXPECT) and r.verdict == "pass" and r.reasons == []
    assert (r.total_gbps, r.fair_gbps, r.share_min) == (388.0, 133.33, 0.967)
    assert r.evidence[0].startswith("total 388.0 Gb/s of line 400; fair share 133.3 Gb/s; senders node02:mlx5_0 129.1")

    r = _lossy()
    assert not judge_incast(r, EXPECT)
    assert r.reasons[0] == ("sender node02:mlx5_0 got 42.0 Gb/s, 0.32 of its fair share 133.3 Gb/s (below 0.5)")
    assert r.reasons[1].startswith("lossy under incast: node01:mlx5_0 out_of_sequence +4113, node01:mlx5_0 "
                                   "packet_seq_err +685, node01:mlx5_0 rx_prio0_discards +1371, node02:mlx5_0 "
                                   "local_ack_timeout_err +3")
    assert r.reasons[2].startswith("lossless expected but no PFC pause on priority 3")
    assert r.reasons[3].startswith("ECN expected but no CNP")
    assert judge_incast(_lossy(), Expectation(False, False)) is False  # loss fails whatever is expected

    pfc = _result([126.0, 128.0, 130.0], {"node01:mlx5_0": _zero(tx_prio3_pause=27000),
                                          **{s: _zero(rx_prio3_pause=9000) for s in SENDERS}})
    assert judge_incast(pfc, Expectation(True, False)) and not judge_incast(pfc, EXPECT)
    assert pfc.reasons == ["ECN expected but no CNP sent or handled (np_cnp_sent and rp_cnp_handled did not rise)"]

    down = _result([], {}, error="node03: ConnectError: connection refused")
    down.sender_gbps = {}
    assert not judge_incast(down, EXPECT)
    assert down.reasons == ["incast did not run: node03: ConnectError: connection refused"]


def test_plan_on_the_lab_inventory() -> None:
    inv = inventory.load(LAB)
    assert leaves_of(inv) == {"leaf01", "leaf02"} and leaves_of(inv, ["node01"]) == {"leaf01", "leaf02"}
    assert leaves_of(inv, ["leaf02"]) == {"leaf02"} and leaves_of(inv, ["spine01"]) == set()
    plan = plan_incasts(inv, {"leaf02", "leaf01", "spine01"}, k=2)
    assert [p.name for p in plan] == ["leaf01: 2->node01:mlx5_0", "leaf02: 2->node01:mlx5_1"]
    # both incasts go into node01 (mlx5_0 and mlx5_1) at once (they share no NIC: one round), and
    # perftest binds every address of a node: the second one's servers need other ports
    assert plan[0].ports == (18515, 18517) and _rounds(plan) == [[0, 1]]
    assert plan[1].sender_names == ["node02:mlx5_1", "node03:mlx5_1"] and plan[1].ports == (18519, 18521)
    assert len(plan_incasts(inv, {"leaf01"}, k=16)[0].senders) == 3  # the rail has 3 other nodes
    with pytest.raises(ValueError):
        plan_incasts(inv, {"leaf01"}, k=17)
    assert Expectation.from_inventory(inv) == EXPECT


def test_reports_carry_every_incast() -> None:
    ok, bad = _ecn_ok(), _lossy()
    judge_incast(ok, EXPECT), judge_incast(bad, EXPECT)
    ok = dataclasses.replace(ok, incast="leaf02: 3->node01:mlx5_1", leaf="leaf02", receiver="node01:mlx5_1")
    rows = [dataclasses.asdict(ok), dataclasses.asdict(bad)]
    s = schema()
    assert {f.name for f in dataclasses.fields(IncastResult)} | {"batch"} == set(s["$defs"]["incast"]["properties"])
    doc = valid_json(build(verify_report(Verification(False, [], rows), 3.0), Context("verify", inventory=str(LAB), exit_code=1)))
    assert [r["incast"] for r in doc["incast"]] == ["leaf02: 3->node01:mlx5_1", "leaf01: 3->node01:mlx5_0"]
    doc["incast"][0]["undocumented"] = 1
    with pytest.raises(jsonschema.ValidationError):
        valid_json(doc)
    del doc["incast"][0]["undocumented"]

    cases = valid_junit(junit.to_xml(doc))
    assert cases["fabtune.verify.incast/leaf02: 3->node01:mlx5_1"] == (None, "", "")
    kind, message, text = cases["fabtune.verify.incast/leaf01: 3->node01:mlx5_0"]
    assert kind == "failure" and "lossy under incast: node01:mlx5_0 out_of_sequence +4113" in message
    assert "node01:mlx5_0: out_of_sequence +4113" in text

    from prometheus_client import generate_latest

    prom = prom_samples(generate_latest(prometheus.registry(doc)).decode())

    def labels(leaf: str, recv: str, **more: str) -> tuple:
        return tuple(sorted({"incast": f"{leaf}: 3->{recv}", "inventory": str(LAB), "leaf": leaf,
                             "receiver": recv, **more}.items()))
    bad_l, ok_l = labels("leaf01", "node01:mlx5_0"), labels("leaf02", "node01:mlx5_1")
    assert (prom[("fabtune_incast_passed", bad_l)], prom[("fabtune_incast_passed", ok_l)]) == (0.0, 1.0)
    assert (prom[("fabtune_incast_share_min_ratio", bad_l)], prom[("fabtune_incast_share_min_ratio", ok_l)]) == (
        0.315, 0.967)
    assert prom[("fabtune_incast_throughput_bytes_per_second", ok_l)] == 388.0e9 / 8
    assert prom[("fabtune_incast_counter_delta", labels("leaf01", "node01:mlx5_0", end="node01:mlx5_0",
                                                        counter="out_of_sequence"))] == 4113.0
    assert prom[("fabtune_incast_counter_delta", labels("leaf02", "node01:mlx5_1", end="node02:mlx5_0",
                                                        counter="rp_cnp_handled"))] == 5200.0
