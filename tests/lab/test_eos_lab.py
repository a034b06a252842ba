"""Arista EOS in the lab: leaf02 speaks EOS over SSH (tuning.lab.eos behind FakeNOS) beside the
NVUE leaf01 and spine01, driven by tuning.switch.eos through the engine and the switch Target."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import REPO, lab_up, snapshot_fabric
from tests.engine.test_apply_killed_at_progress import cut_during_apply
from tuning import inventory
from tuning.errors import CandidateError, CommitError
from tuning.lab.inject import inject
from tuning.lab.scale import write_inventory
from tuning.lint import live_findings
from tuning.rollout import engine
from tuning.rollout.engine import Options
from tuning.rollout.rollback import rollback_run
from tuning.targets.switch import open_driver
from tuning.verify.runner import Thresholds

pytestmark = pytest.mark.lab

#: the untuned nodes pass these marks: the gate judges the switch's change, not the nodes' tuning
MARKS = Thresholds(min_bw_gbps=1.0, max_lat_us=1000.0, bw_drop_pct=50.0, lat_rise_pct=500.0)


@pytest.fixture()
def eos_lab(tmp_path: Path):
    """A power-on 4-node lab whose leaf02 runs EOS (``fabtune lab init --switch-os leaf02=eos``)."""
    inv = write_inventory(tmp_path / "inv", 4, switch_os={"leaf02": "eos"})
    # the nodes keep their power-on MTU: the gate's RoCE MTU verdict then expects what they run
    nodes = inv / "group_vars" / "gpu_nodes.yml"
    nodes.write_text(nodes.read_text().replace("mtu: 9000 ", "mtu: 1500 ", 1))
    with lab_up(inv) as leased:
        yield leased


def _leaf02(inv: Path):
    return inventory.load(inv).devices["leaf02"]


def _state(inv: Path):
    drv = open_driver(_leaf02(inv))
    try:
        return drv.get_state()
    finally:
        drv.close()


def test_an_eos_leaf_is_planned_from_its_own_diff_kept_behind_the_gate_and_rolled_back_byte_for_byte(
        eos_lab: Path, tmp_path: Path):
    before = snapshot_fabric(eos_lab)
    inv = inventory.load(eos_lab)
    journal = tmp_path / "j"
    opts = Options(mode="rollout", journal_dir=journal, limit=["leaf02"], thresholds=MARKS, rails=(1,))

    # the live lint reads leaf02's effective QoS as EOS reports it: at power-on nothing is lossless
    live = {f.rule for f in live_findings(inv.devices, {"leaf02": _state(eos_lab)})}
    assert {"live-pfc", "ecn-off"} <= live, live

    plan = engine.run(inv, replace(opts, mode="plan"))
    # the plan's live lint leaves leaf02 to its diff, which changes what the lint found
    assert not [f for f in plan.findings if f["device"] == "leaf02" and f["domain"] == "switch"], plan.findings
    got = {c["key"]: (c["before"], c["after"], c["tags"]) for c in plan.changes["leaf02"]}
    assert got["port/Ethernet1/mtu"] == (None, "9214", ["mtu_up"])  # no mtu line: EOS's 1500
    assert got["port/Ethernet1/pfc_priority/3"] == (None, "no-drop", ["lossless_on"])
    assert got["port/Ethernet31/txq/3/ecn_min"] == (None, "150 kbytes", ["lossless_on"])
    assert got["qos/dscp/26/tc"] == (None, "3", [])
    assert snapshot_fabric(eos_lab) == before  # a plan stages and aborts a session: nothing changes

    good = engine.run(inv, opts)
    assert good.outcome == "kept", (good.outcome, good.errors, [(r["pair"], r["reasons"]) for r in good.verify_after])
    assert good.verify_after and all(r["verdict"] == "pass" for r in good.verify_after)
    drv = open_driver(_leaf02(eos_lab))
    try:
        running = drv.running_config()
        assert "interface Ethernet5\n   description" in running and "   mtu 9214\n" in running
        assert "   priority-flow-control priority 3 no-drop\n" in running
        assert "qos map dscp 26 to traffic-class 3\n" in running
        assert not drv.has_pending_commit()  # confirmed: the timer stopped
        startup = drv._send("show startup-config", phase="collect")
        assert drv.config_settings(startup) == drv.config_settings(running)  # saved for boot
    finally:
        drv.close()

    assert list(live_findings(inv.devices, {"leaf02": _state(eos_lab)})) == []  # lossless end to end now
    # the rollout's findings were read from leaf02 as the run left it: none of the plan's live ones
    assert not [f for f in good.findings if f["device"] == "leaf02" and f["domain"] == "switch"], good.findings
    again = engine.run(inventory.load(eos_lab), replace(opts, mode="plan"))
    assert not again.changes.get("leaf02"), again.changes.get("leaf02")
    # operational differs from applied (a port that runs 9000 under `mtu 9214`): the plan says so
    inject(eos_lab / ".state", "leaf02:Ethernet1", "oper-mtu", "9000")
    try:
        drift = engine.run(inventory.load(eos_lab), replace(opts, mode="plan"))
    finally:
        inject(eos_lab / ".state", "leaf02:Ethernet1", "clear")
    assert [(c["key"], c["before"], c["after"]) for c in drift.changes["leaf02"]] == \
        [("port/Ethernet1/oper_mtu", "9000", "9214")]
    assert not [f for f in drift.findings if f["device"] == "leaf02"]  # 9000 still carries node01's 1500 + 22
    # applied (no diff), yet the port runs below node01's frame: the plan's live lint says so
    inject(eos_lab / ".state", "leaf02:Ethernet1", "oper-mtu", "1500")
    try:
        short = engine.run(inventory.load(eos_lab), replace(opts, mode="plan"))
    finally:
        inject(eos_lab / ".state", "leaf02:Ethernet1", "clear")
    assert [(f["code"], f["evidence"]) for f in short.findings if f["device"] == "leaf02"] == \
        [("live-mtu", "leaf02 (read from the switch): port Ethernet1")], short.findings
    assert "leaf02:Ethernet1 runs MTU 1500 (read from the switch) < node01 MTU 1500 + 22" in short.findings[0]["message"]

    back = rollback_run(journal, good.run_id)
    assert back.outcome == "rolled-back" and back.restored == ["leaf02"], (back.outcome, back.errors)
    assert snapshot_fabric(eos_lab) == before


def test_an_eos_commit_timer_reverts_a_commit_never_confirmed_and_a_refused_line_commits_nothing(eos_lab: Path):
    dev = _leaf02(eos_lab)
    drv = open_driver(dev)
    try:
        start = drv.current_revision()
        with pytest.raises(CandidateError, match=r"mtu 10000.*% Invalid input \(at token 1: '10000'\)"):
            drv.load_candidate("interface Ethernet1\n   mtu 10000\n")
        assert drv.current_revision() == start and drv.compare() == ""

        drv.load_candidate("interface Ethernet1\n   mtu 9000\n")
        assert "+   mtu 9000" in drv.compare()
        rev = drv.commit(confirm_within_s=2)
        assert rev != start and drv.has_pending_commit()
        drv.load_candidate("interface Ethernet2\n   mtu 9000\n")
        with pytest.raises(CommitError, match="already running"):
            drv.commit(confirm_within_s=2)
        drv.discard()
        deadline = time.monotonic() + 10
        while drv.has_pending_commit() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not drv.has_pending_commit() and drv.current_revision() == start  # the switch went back
    finally:
        drv.close()


def test_an_ssh_session_cut_inside_an_eos_commit_leaves_the_switch_fully_old(eos_lab: Path, tmp_path: Path):
    """leaf02's session cut while its ``configure session ... commit timer`` runs (the lab holds the
    commit 4 s, then makes it: EOS finishes what its client left): the journal keeps ``pushing``, the
    run restores leaf02 over a new session: the pending session is named after the snapshot it was
    staged on, so it is this run's and is aborted; EOS puts the old configuration back. Every device
    is as before; `fabtune rollback RUN` has nothing left."""
    before = snapshot_fabric(eos_lab)
    journal = tmp_path / "j"
    rep, cut = cut_during_apply(eos_lab, journal, "leaf02")
    assert any(i["kind"] == "ssh-cut" and i["target"] == "leaf02" for i in cut), cut
    assert (rep.outcome, rep.restored) == ("rolled-back", ["leaf02"]), (rep.outcome, rep.errors)
    assert "lost the session" in rep.errors["leaf02"] and "whether the switch acted on it is unknown" in rep.errors["leaf02"]
    now = snapshot_fabric(eos_lab)
    assert [k for k in sorted(set(before) | set(now)) if before.get(k) != now.get(k)] == []
    res = subprocess.run([sys.executable, "-m", "tuning", "rollback", rep.run_id, "--journal-dir", str(journal)],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert res.returncode == 0 and "nothing to roll back" in res.stdout, res.stdout + res.stderr


def test_lint_reads_every_switch_of_the_mixed_lab_as_it_reports(eos_lab: Path):
    """``fabtune lint`` (live) on the power-on mixed lab: the inventory breaks no rule, and every
    switch, NVUE and EOS, reports QoS that is not lossless for the nodes: exit 2, named per switch."""
    res = subprocess.run([sys.executable, "-m", "tuning", "lint", "-i", str(eos_lab), "--json"],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert res.returncode == 2, res.stderr
    found = json.loads(res.stdout)["findings"]
    assert not [f for f in found if not f["rule"].startswith("live-") and f["rule"] != "ecn-off"], found
    pfc = {f["devices"][1] for f in found if f["rule"] == "live-pfc"}
    assert pfc == {"leaf01", "leaf02", "spine01"}, found
    assert all("read from the switch" in f["message"] for f in found)
