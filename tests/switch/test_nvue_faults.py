"""A device's failure text is never read as success (issue 6 item 8), a confirm proves the
committed revision is still applied (item 2), and the lab's switch faults behave as the
devices they stand for. Real SSH to the lab's NVUE switch; faults set as an operator does
(``fabtune lab inject``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.switch.conftest import leaf
from tuning.cli import app
from tuning.errors import CandidateError, CommitConfirmError, CommitError, InputError, RollbackError
from tuning.lab.inject import inject
from tuning.targets import switch as switch_ops
from tuning.switch.nvue import NvueDriver

pytestmark = pytest.mark.lab


def lab_inject(inv_dir: Path, *args: str) -> None:
    """``fabtune lab inject ARGS -i INV``, asserting exit 0."""
    res = CliRunner().invoke(app, ["lab", "inject", *args, "-i", str(inv_dir)])
    assert res.exit_code == 0, res.output


@pytest.fixture()
def sw(module_lab: Path):
    """(inventory dir, a driver on leaf01 with a 2 s apply timeout); every switch fault is cleared after."""
    c = leaf(module_lab).connection
    drv = NvueDriver(c.hostname, port=c.port, username=c.username, key_file=c.key_file,
                     known_hosts=c.known_hosts, name="leaf01", apply_timeout_s=2)
    drv.open()
    try:
        yield module_lab, drv
    finally:
        for target in ("leaf01", "leaf01:swp1"):
            inject(module_lab / ".state", target, "clear")
        drv.close()
        with NvueDriver(c.hostname, port=c.port, username=c.username, key_file=c.key_file,
                        known_hosts=c.known_hosts, name="leaf01") as clean:
            if clean.has_pending_commit():
                clean.rollback()
            clean.discard()


def _stage(drv: NvueDriver, mtu: int) -> None:
    drv.load_candidate(f"nv set interface swp5 link mtu {mtu}\n")


def test_apply_fails_is_a_commit_error_naming_the_text(sw) -> None:
    inv_dir, drv = sw
    lab_inject(inv_dir, "leaf01", "apply-fails")
    before = drv.current_revision()
    _stage(drv, 4000)
    with pytest.raises(CommitError, match="Failed to prepare to apply: Unrecoverable internal error"):
        drv.commit()
    assert drv.current_revision() == before and "mtu: 4000" in drv.compare()  # the diff stays, as on the device


def test_confirm_and_rollback_that_fail_raise(sw) -> None:
    inv_dir, drv = sw
    _stage(drv, 4100)
    rev = drv.commit(confirm_within_s=60)
    lab_inject(inv_dir, "leaf01", "apply-fails")
    with pytest.raises(CommitConfirmError, match="Failed to prepare to apply"):
        drv.confirm(rev)
    with pytest.raises(RollbackError, match="Failed to prepare to apply"):
        drv.rollback()
    assert drv.has_pending_commit() and drv.current_revision() == rev
    lab_inject(inv_dir, "leaf01", "clear")
    drv.rollback()
    assert not drv.has_pending_commit() and drv.current_revision() != rev


def test_nvued_down_progress_word_run_into_the_error(sw) -> None:
    inv_dir, drv = sw
    _stage(drv, 4200)
    lab_inject(inv_dir, "leaf01", "nvued-down")
    raw = drv._conn.send_command("nv config apply -y", expect_string=r"mgmt:~\$")
    assert "reloadingError: Could not connect to nvued." in raw  # the real concatenation
    with pytest.raises(CommitError, match="Error: Could not connect to nvued"):
        drv.commit()
    with pytest.raises(CandidateError, match="Could not connect to nvued"):
        _stage(drv, 4300)
    with pytest.raises(RollbackError, match="Could not connect to nvued"):
        drv.rollback_to("1")


@pytest.mark.parametrize("slow_s", [3, 5])  # 3: the prompt comes in the second wait; 5: after a new session
def test_slow_apply_reads_the_state_before_deciding(sw, slow_s: int) -> None:
    inv_dir, drv = sw
    _stage(drv, 4400)
    before = drv.current_revision()
    lab_inject(inv_dir, "leaf01", "slow-apply", str(slow_s))  # the driver waits 2 s, 2 s more, then reopens
    t0 = time.monotonic()
    rev = drv.commit(confirm_within_s=60)
    assert time.monotonic() - t0 >= slow_s and int(rev) > int(before)
    assert drv.revision_states()[rev] == "confirm"
    drv.confirm(rev)  # times out too; the device then shows it kept
    assert drv.revision_states()[rev] != "confirm" and drv.current_revision() == rev
    drv.rollback_to(before)
    assert drv.current_revision() == before


def test_confirm_after_the_window_expired_raises_naming_revisions(sw) -> None:
    _, drv = sw
    _stage(drv, 4500)
    before = drv.current_revision()
    rev = drv.commit(confirm_within_s=1)
    deadline = time.monotonic() + 10
    while drv.has_pending_commit() and time.monotonic() < deadline:
        time.sleep(0.2)
    with pytest.raises(CommitConfirmError, match=f"revision {rev} is not kept: the applied revision is {before}"):
        switch_ops.confirm(drv, rev)
    with pytest.raises(CommitConfirmError):
        switch_ops.confirm(drv)  # the old call shape proves it too (the driver's own commit)


def test_oper_mtu_drift_shows_in_plan_and_fails_the_read_back(sw) -> None:
    inv_dir, drv = sw
    dev = leaf(inv_dir)
    state = switch_ops.collect(drv, dev)
    switch_ops.apply(drv, dev, switch_ops.plan(dev, state), None, state.revision)
    fabric_json = inv_dir / ".state" / "switches" / "leaf01.fabric.json"
    lab_inject(inv_dir, "leaf01:swp1", "oper-mtu", "9000")
    # what the fabric model reads for verification, before the switch ran any command
    assert json.loads(fabric_json.read_text())["ports"]["swp1"]["mtu"] == 9000
    state = switch_ops.collect(drv, dev)
    drift = [c for c in switch_ops.plan(dev, state) if c.key == "port/swp1/oper_mtu"]
    assert [(c.before, c.after) for c in drift] == [("9000", "9216")]
    with pytest.raises(CommitError, match="port/swp1/oper_mtu wanted '9216', runs 9000"):
        switch_ops.apply(drv, dev, switch_ops.plan(dev, state), None, state.revision)
    assert json.loads(fabric_json.read_text())["ports"]["swp1"]["mtu"] == 9000
    lab_inject(inv_dir, "leaf01:swp1", "clear")
    assert json.loads(fabric_json.read_text())["ports"]["swp1"]["mtu"] == 9216
    assert switch_ops.plan(dev, switch_ops.collect(drv, dev)) == []
    assert json.loads(fabric_json.read_text())["ports"]["swp1"]["mtu"] == 9216


def _startup_mtu(drv: NvueDriver, inv_dir: Path) -> str:
    """swp5's MTU after a switch reboot (``fabtune lab inject leaf01 reboot``), read over SSH."""
    lab_inject(inv_dir, "leaf01", "reboot")
    return drv.config_settings(drv.running_config()).get("port/swp5/mtu", "")


def test_a_confirmed_change_survives_a_switch_reboot(sw) -> None:
    """Issue 21: CL <= 5.8 does not save on apply; the driver saves on confirm and reads it back."""
    inv_dir, drv = sw
    assert drv.auto_saves() is False  # the lab is CL 5.8
    before = drv.current_revision()
    _stage(drv, 4200)
    rev = drv.commit(confirm_within_s=60)
    assert drv.startup_diff() != ""  # applied, not saved
    drv.confirm(rev)
    assert drv.startup_diff() == "" and drv.startup_saved_by == "nv config save"
    assert _startup_mtu(drv, inv_dir) == "4200" and drv.current_revision() == rev
    drv.rollback_to(before)  # a restore leaves startup == the restored revision
    assert drv.startup_diff() == "" and _startup_mtu(drv, inv_dir) != "4200"


def test_a_rejected_change_does_not_come_back_after_a_reboot(sw) -> None:
    inv_dir, drv = sw
    _stage(drv, 4300)
    rev = drv.commit(confirm_within_s=60)
    drv.rollback()
    assert drv.startup_diff() == "" and drv.current_revision() != rev
    assert _startup_mtu(drv, inv_dir) != "4300" and drv.current_revision() != rev


def test_a_configured_port_down_on_the_switch_is_a_finding_at_collect(sw) -> None:
    """Issue 21: a port the switch's configuration carries, down on the switch side (a `down` link
    injected on SWITCH:PORT), is reported at collect; a port nothing configures is not."""
    from tuning.targets.switch import SwitchTarget

    inv_dir, _ = sw
    dev = leaf(inv_dir)
    lab_inject(inv_dir, "leaf01:swp5", "down")
    target = SwitchTarget("leaf01", dev.connection, dev.spec.platform, dev)
    target.open()
    try:
        found = [(f.code, f.domain, f.message) for f in target.findings(target.collect())]
    finally:
        target.close()
        inject(inv_dir / ".state", "leaf01:swp5", "clear")
    assert found == [("switch-port-down", "switch", "swp5 is oper down on the switch: its link carries no traffic")]


def test_inject_refuses_bad_switch_faults(module_lab: Path) -> None:
    state = module_lab / ".state"
    for target, kind, value, why in [("leaf01", "slow-apply", None, "needs SECONDS"),
                                     ("leaf01", "slow-apply", "-1", "needs SECONDS"),
                                     ("leaf01", "apply-fails", "3", "takes no value"),
                                     ("leaf09", "nvued-down", None, "not a switch of the lab"),
                                     ("leaf01:swp99", "oper-mtu", "9000", "not a switch port"),
                                     ("leaf01:swp1", "oper-mtu", "99999", "needs MTU")]:
        with pytest.raises(InputError, match=why):
            inject(state, target, kind, value)
    assert not [i for i in json.loads((state / "fabric.json").read_text())["injections"]
                if i["target"].startswith("leaf")]
