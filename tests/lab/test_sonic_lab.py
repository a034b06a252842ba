"""Community SONiC in the lab: leaf01 speaks SONiC's bash and click CLI over SSH (tuning.lab.sonic
behind FakeNOS) beside the NVUE leaf02 and spine01, driven by tuning.switch.sonic through the engine
and the switch Target."""

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
from tuning.lab.scale import write_inventory
from tuning.rollout import engine
from tuning.rollout.engine import Options
from tuning.rollout.rollback import rollback_run
from tuning.targets.switch import open_driver
from tuning.verify.runner import Thresholds

pytestmark = pytest.mark.lab

#: the untuned nodes pass these marks: the gate judges the switch's change, not the nodes' tuning
MARKS = Thresholds(min_bw_gbps=1.0, max_lat_us=1000.0, bw_drop_pct=50.0, lat_rise_pct=500.0)


@pytest.fixture()
def sonic_lab(tmp_path: Path):
    """A power-on 4-node lab whose leaf01 runs SONiC (``fabtune lab init --switch-os leaf01=sonic``)."""
    inv = write_inventory(tmp_path / "inv", 4, switch_os={"leaf01": "sonic"})
    nodes = inv / "group_vars" / "gpu_nodes.yml"
    nodes.write_text(nodes.read_text().replace("mtu: 9000 ", "mtu: 1500 ", 1))
    with lab_up(inv) as leased:
        yield leased


def _leaf01(inv: Path):
    return inventory.load(inv).devices["leaf01"]


def _patch(path: str, value: str) -> str:
    return json.dumps([{"op": "add", "path": path, "value": value}])


def test_a_sonic_leaf_is_planned_from_its_dry_run_kept_behind_the_gate_and_rolled_back_byte_for_byte(
        sonic_lab: Path, tmp_path: Path):
    before = snapshot_fabric(sonic_lab)
    inv = inventory.load(sonic_lab)
    journal = tmp_path / "j"
    opts = Options(mode="rollout", journal_dir=journal, limit=["leaf01"], thresholds=MARKS, rails=(0,))

    plan = engine.run(inv, replace(opts, mode="plan"))
    got = {c["key"]: (c["before"], c["after"], c["tags"]) for c in plan.changes["leaf01"]}
    assert got["port/Ethernet0/mtu"] == ("9100", "9216", ["mtu_up"])
    assert got["port/Ethernet240/pfc_enable"] == ("3,4", "3", [])  # lossless before and after
    assert got["qos/dscp_to_tc/AZURE/26"] == ("1", "3", [])  # SONiC's default map: DSCP 26 lossy in TC1
    assert got["wred/AZURE_LOSSLESS/green_min_threshold"] == ("1048576", "150000", [])
    assert "port/Ethernet0/dscp_to_tc_map" not in got and "qos/dscp_to_tc/AZURE/48" not in got  # already so
    assert snapshot_fabric(sonic_lab) == before  # a plan is a dry run: nothing changes

    good = engine.run(inv, opts)
    assert good.outcome == "kept", (good.outcome, good.errors, [(r["pair"], r["reasons"]) for r in good.verify_after])
    assert good.verify_after and all(r["verdict"] == "pass" for r in good.verify_after)
    drv = open_driver(_leaf01(sonic_lab))
    try:
        flat = drv.config_settings(drv.running_config())
        assert flat["port/Ethernet8/mtu"] == "9216" and flat["qos/dscp_to_tc/AZURE/26"] == "3"
        assert not drv.has_pending_commit()  # confirmed: the dead-man timer disarmed
        startup = drv._send("cat /etc/sonic/config_db.json", phase="collect")
        assert drv.config_settings(startup) == flat  # saved for boot
    finally:
        drv.close()

    again = engine.run(inventory.load(sonic_lab), replace(opts, mode="plan"))
    assert not again.changes.get("leaf01"), again.changes.get("leaf01")

    back = rollback_run(journal, good.run_id)
    assert back.outcome == "rolled-back" and back.restored == ["leaf01"], (back.outcome, back.errors)
    assert snapshot_fabric(sonic_lab) == before


def test_the_dead_man_timer_reverts_a_commit_never_confirmed_and_a_refused_patch_commits_nothing(sonic_lab: Path):
    drv = open_driver(_leaf01(sonic_lab))
    try:
        start = drv.current_revision()
        drv.load_candidate(_patch("/PORT/Ethernet0/mtu", "9300"))
        with pytest.raises(CandidateError, match=r'Value "9300" does not satisfy the constraint "1\.\.9216"'):
            drv.compare()
        assert drv.current_revision() == start

        drv.load_candidate(_patch("/PORT/Ethernet0/mtu", "9000"))
        assert '"path": "/PORT/Ethernet0/mtu", "value": "9000"' in drv.compare()
        drv._send("sudo mkdir /run/lock/fabtune", phase="apply")  # another controller's commit
        with pytest.raises(CommitError, match="lock is held .*File exists"):
            drv.commit(confirm_within_s=2)
        drv._send("sudo rmdir /run/lock/fabtune", phase="apply")
        assert drv.current_revision() == start and not drv.has_pending_commit()
        rev = drv.commit(confirm_within_s=2)
        assert rev != start and drv.has_pending_commit() and drv.applied_parent() == start
        drv.load_candidate(_patch("/PORT/Ethernet8/mtu", "9000"))
        with pytest.raises(CommitError, match="already armed"):
            drv.commit(confirm_within_s=2)
        drv.discard()
        deadline = time.monotonic() + 10
        while drv.has_pending_commit() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not drv.has_pending_commit() and drv.current_revision() == start  # the switch went back
    finally:
        drv.close()


def test_an_ssh_session_cut_inside_a_sonic_commit_leaves_the_switch_fully_old(sonic_lab: Path, tmp_path: Path):
    """leaf01's session cut while its ``sudo config apply-patch`` runs (the lab holds it 4 s, then
    applies it: GCU finishes what its client left): the journal keeps ``pushing``, the run restores
    leaf01 over a new session: the applied revision is the one journaled as next (or the dead-man
    timer names the checkpoint it sits on), so it is this run's, and the checkpoint is rolled back
    to. Every device is as before; `fabtune rollback RUN` has nothing left."""
    before = snapshot_fabric(sonic_lab)
    journal = tmp_path / "j"
    rep, cut = cut_during_apply(sonic_lab, journal, "leaf01")
    assert any(i["kind"] == "ssh-cut" and i["target"] == "leaf01" for i in cut), cut
    assert (rep.outcome, rep.restored) == ("rolled-back", ["leaf01"]), (rep.outcome, rep.errors)
    assert "lost the session" in rep.errors["leaf01"] and "whether the switch acted on it is unknown" in rep.errors["leaf01"]
    now = snapshot_fabric(sonic_lab)
    assert [k for k in sorted(set(before) | set(now)) if before.get(k) != now.get(k)] == []
    res = subprocess.run([sys.executable, "-m", "tuning", "rollback", rep.run_id, "--journal-dir", str(journal)],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert res.returncode == 0 and "nothing to roll back" in res.stdout, res.stdout + res.stderr
