"""Incast (issue 8) over real SSH against ONE lab: 3 senders of rail 0 into node01:mlx5_0 on
leaf01. Untuned (PFC off) the incast is caught as lossy, naming the counters; after a tune of
the nodes' QoS and the leaf's RoCE (PFC + ECN) it passes; with ECN off in the profile it passes
as expected (pauses, no CNP) and fails an expectation of ECN."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tuning import inventory
from tuning.rollout import engine
from tuning.rollout.engine import Options
from tuning.transport.ssh import SshHost
from tuning.verify.incast import Expectation, plan_incasts, run_incasts

pytestmark = pytest.mark.lab


def _incast(inv_dir: Path, expect: Expectation | None = None, **tos):
    """The leaf01 incast; ``tos=N`` runs it in another class than the profile's (None: class 0)."""
    inv = inventory.load(inv_dir)
    incasts = [dataclasses.replace(i, **tos) for i in plan_incasts(inv, {"leaf01"}, k=4)]
    assert [i.name for i in incasts] == ["leaf01: 3->node01:mlx5_0"]
    hosts = {n: SshHost(n, inv.devices[n].connection) for n in ("node01", "node02", "node03", "node04")}
    try:
        ok, results = run_incasts(incasts, hosts, expect or Expectation.from_inventory(inv))
    finally:
        for h in hosts.values():
            h.close()
    return ok, results[0]


def _tune(inv_dir: Path, journal: Path) -> None:
    rep = engine.run(inventory.load(inv_dir), Options(mode="apply", journal_dir=journal, verify=False,
                                                      domains={"nic_qos", "switch"},
                                                      limit=["node01", "node02", "node03", "node04", "leaf01"]))
    assert rep.outcome == "applied", rep.errors


def test_incast_caught_lossy_then_passes_with_pfc_and_ecn(lab_inventory: Path, tmp_path: Path):
    inv = inventory.load(lab_inventory)
    assert Expectation.from_inventory(inv) == Expectation(lossless=True, ecn=True, priority=3)

    # untuned: trust pcp, PFC off on the NICs, RoCE off on the leaf
    ok, r = _incast(lab_inventory)
    assert not ok and r.verdict == "fail" and r.error is None
    assert r.senders == ["node02:mlx5_0", "node03:mlx5_0", "node04:mlx5_0"] and r.line_gbps == 400.0
    assert r.total_gbps == pytest.approx(0.45 * 400, rel=0.01) and r.share_min < 0.5
    recv = r.counters["node01:mlx5_0"]
    assert recv["out_of_sequence"] > 0 and recv["packet_seq_err"] > 0 and recv["rx_prio0_discards"] > 0
    assert all(r.counters[s]["local_ack_timeout_err"] > 0 for s in r.senders)
    lossy = next(x for x in r.reasons if x.startswith("lossy under incast: "))
    assert "node01:mlx5_0 out_of_sequence +" in lossy and "node02:mlx5_0 local_ack_timeout_err +" in lossy
    assert any("no PFC pause on priority 3" in x for x in r.reasons)
    assert any(x.startswith("ECN expected but no CNP") for x in r.reasons)
    starved = r"sender node0\d:mlx5_0 got [\d.]+ Gb/s, 0\.\d+ of its fair share 133\.3"
    assert any(re.match(starved, x) for x in r.reasons)

    # PFC + ECN (the profile): fair, CNPs, few pauses, nothing lost
    _tune(lab_inventory, tmp_path / "j")
    ok, r = _incast(lab_inventory)
    assert ok and r.verdict == "pass" and r.reasons == [], r.reasons
    assert r.total_gbps == pytest.approx(0.97 * 400, rel=0.01) and r.share_min > 0.95
    recv = r.counters["node01:mlx5_0"]
    assert recv["np_cnp_sent"] > 0 and all(r.counters[s]["rp_cnp_handled"] > 0 for s in r.senders)
    assert 0 < recv["tx_prio3_pause"] < 1000
    assert all(c.get(n, 0) == 0 for c in r.counters.values()
               for n in ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "rx_prio3_discards"))
    ecn_pauses = recv["tx_prio3_pause"]
    assert r.tos == 106  # the flows rode the profile's class (DSCP 26), and the result names it

    # the same incast in traffic class 0 (perftest without --tclass, NCCL without NCCL_IB_TC) on this
    # correctly tuned fabric: DSCP 0 goes to priority 0, which PFC does not protect: lossy
    ok0, r0 = _incast(lab_inventory, tos=None)
    assert not ok0 and r0.tos is None and r0.total_gbps == pytest.approx(0.45 * 400, rel=0.01)
    assert r0.counters["node01:mlx5_0"]["rx_prio0_discards"] > 0
    assert any(x.startswith("lossy under incast: ") for x in r0.reasons)

    # PFC without ECN: pauses by the thousands, no CNP; judged per the expectation
    gv = lab_inventory / "group_vars" / "gpu_nodes.yml"
    gv.write_text(gv.read_text().replace("  ecn: true", "  ecn: false"))
    assert Expectation.from_inventory(inventory.load(lab_inventory)) == Expectation(True, False, 3)
    _tune(lab_inventory, tmp_path / "j")
    ok, r = _incast(lab_inventory)
    assert ok, r.reasons
    assert r.total_gbps == pytest.approx(0.96 * 400, rel=0.01) and r.share_min > 0.9
    recv = r.counters["node01:mlx5_0"]
    assert recv["tx_prio3_pause"] > 1000 and ecn_pauses * 100 < recv["tx_prio3_pause"]
    assert all(r.counters[s]["rx_prio3_pause"] > 1000 for s in r.senders)
    assert all(c.get(n, 0) == 0 for c in r.counters.values() for n in ("np_cnp_sent", "rp_cnp_handled"))
    ok, r = _incast(lab_inventory, Expectation(lossless=True, ecn=True, priority=3))
    assert not ok and r.reasons == ["ECN expected but no CNP sent or handled "
                                    "(np_cnp_sent and rp_cnp_handled did not rise)"]

    # `fabtune verify` runs the incast of the selected leaf and reports it (JSON, JUnit); --no-incast skips it
    junit = tmp_path / "verify.xml"
    argv = [sys.executable, "-m", "tuning", "verify", "-i", str(lab_inventory), "--limit", "leaf01", "--rail", "0",
            "--journal-dir", str(tmp_path / "j"), "--min-bw", "0", "--max-lat", "100", "--json"]
    res = subprocess.run([*argv, "--no-incast"], capture_output=True, text=True, timeout=300)
    assert json.loads(res.stdout)["incast"] == [] and "incast" not in res.stderr, res.stderr
    res = subprocess.run([*argv, "--junit", str(junit)], capture_output=True, text=True, timeout=300)
    doc = json.loads(res.stdout)
    assert [(i["incast"], i["verdict"]) for i in doc["incast"]] == [("leaf01: 3->node01:mlx5_0", "pass")], res.stderr
    assert doc["incast"][0]["counters"]["node01:mlx5_0"]["tx_prio3_pause"] > 1000
    assert 'classname="fabtune.verify.incast" name="leaf01: 3-&gt;node01:mlx5_0"' in junit.read_text() or \
        'name="leaf01: 3-&gt;node01:mlx5_0" classname="fabtune.verify.incast"' in junit.read_text()
    assert "incast round 1/1: leaf01: 3->node01:mlx5_0" in res.stderr


def test_a_leaf_no_incast_can_prove_is_a_finding_and_fails_where_required(lab_inventory: Path, tmp_path: Path):
    """A tuned lab, then a change of node01 and node02 alone rolled out with leaf01: leaf01's incast
    would have one same-rail sender among the tuned selection (node02), so it cannot run. The report
    names it (finding ``incast-not-run``) instead of a progress line only; with the policy's
    ``incast.required`` the verification fails and the change is rolled back."""
    from tuning.model.policy import IncastPolicy, RolloutPolicy

    domains = {"mtu", "nic_qos", "switch", "sysctl"}
    rep = engine.run(inventory.load(lab_inventory), Options(mode="apply", journal_dir=tmp_path / "t", verify=False,
                                                            domains=domains))
    assert rep.outcome == "applied", rep.errors
    for node in ("node01", "node02"):  # one sysctl changed on these two only
        hv = lab_inventory / "host_vars" / f"{node}.yml"
        hv.write_text(hv.read_text() + "sysctl:\n  net.core.rmem_max: 134217728\n")

    def rollout(required: bool, journal: Path):
        return engine.run(inventory.load(lab_inventory), Options(
            mode="rollout", journal_dir=journal, domains=domains, rails=(0,), limit=["node01", "node02", "leaf01"],
            policy=RolloutPolicy(incast=IncastPolicy(required=required))))

    rep = rollout(False, tmp_path / "a")
    assert rep.outcome == "kept" and rep.incast == [], (rep.outcome, rep.errors)
    found = {f["device"]: f for f in rep.findings if f["code"] == "incast-not-run"}
    assert sorted(found) == ["leaf01", "leaf02"], found  # the two leaves node01's and node02's NICs reach
    assert found["leaf01"]["domain"] == "verify"
    assert found["leaf01"]["message"] == ("no k-to-1 incast could run on leaf01 (fewer than 2 same-rail senders on "
                                          "other tuned nodes): its lossless class was not proven under congestion")
    res = subprocess.run([sys.executable, "-m", "tuning", "rollback", rep.run_id, "--journal-dir", str(tmp_path / "a")],
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    rep = rollout(True, tmp_path / "b")
    assert rep.outcome == "rolled-back", (rep.outcome, rep.errors)
    assert any(f["code"] == "incast-not-run" and "(incast.required: the verification fails)" in f["message"]
               for f in rep.findings), rep.findings
