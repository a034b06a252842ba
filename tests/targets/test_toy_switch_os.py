"""A switch OS registered from the test folder only (driver, template, diff reader and lab stand-in:
:mod:`tests.targets.toyos`) is planned, pushed behind a verification gate, fails and is restored,
and rolled back from its journal, by the engine as it is: no file under ``tuning/`` names it.

Against the lab (its nodes carry the verification gate over real SSH); the toy switch is one more
switch of the inventory, reached through its own stand-in."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.targets.toyos import PLAIN_PLATFORM, PLATFORM, POWER_ON, PlainToyDriver, ToyDevice, ToyDriver
from tuning import inventory
from tuning.rollout import engine
from tuning.rollout.engine import Options
from tuning.rollout.rollback import rollback_run
from tuning.verify.runner import Thresholds

pytestmark = pytest.mark.lab


@pytest.fixture()
def toy01(tmp_path: Path):
    """The toy OS registered (as a plugin would: one call), and toy01 powered on."""
    from tuning.model.platforms import SWITCH_DRIVERS
    from tuning.targets import register_switch_os

    register_switch_os(PLATFORM, ToyDriver)
    ToyDriver.DEVICES = tmp_path / "toys"
    try:
        yield ToyDevice.power_on(ToyDriver.DEVICES / "toy01", "toy01")
    finally:
        SWITCH_DRIVERS.pop(PLATFORM, None)
        ToyDriver.DEVICES = None


def _add_toy(inv: Path, platform: str = PLATFORM) -> None:
    """toy01 joins the inventory's switches (its own group, ``platform``, ports swp1-2)."""
    hosts = inv / "hosts.yaml"
    hosts.write_text(hosts.read_text().replace(
        "        spines:\n",
        "        toys:\n          hosts:\n            toy01:\n              ansible_host: 127.0.0.1\n"
        "              ansible_port: 22999\n        spines:\n"))
    (inv / "host_vars" / "toy01.yml").write_text(f"platform: {platform}\nports: [swp1-2]\n")
    # the nodes keep their power-on MTU: the gate's RoCE MTU verdict then expects what they run
    nodes = inv / "group_vars" / "gpu_nodes.yml"
    nodes.write_text(nodes.read_text().replace("mtu: 9000 ", "mtu: 1500 ", 1))


def test_a_switch_os_from_the_test_folder_is_planned_gated_failed_restored_and_rolled_back(
        lab_inventory: Path, tmp_path: Path, toy01: ToyDevice):
    _add_toy(lab_inventory)
    inv = inventory.load(lab_inventory)
    journal = tmp_path / "j"
    # the untuned lab passes these marks: the gate judges the toy's change, not the fabric's tuning
    marks = Thresholds(min_bw_gbps=1.0, max_lat_us=1000.0, bw_drop_pct=50.0, lat_rise_pct=500.0)
    opts = Options(mode="rollout", journal_dir=journal, limit=["toy01"], thresholds=marks, rails=(0,))

    plan = engine.run(inv, replace(opts, mode="plan"))
    got = {c["key"]: (c["before"], c["after"], c["tags"]) for c in plan.changes["toy01"]}
    assert got == {"port/swp1/mtu": ("1500", "9216", ["mtu_up"]), "port/swp2/mtu": ("1500", "9216", ["mtu_up"]),
                   "toy/lossless": ("off", "on", ["lossless_on"])}
    assert toy01.applied() == "1" and not (toy01.root / "candidate").exists()  # a plan commits nothing

    # a forced failure: the ports run at most 9000 bytes whatever the configuration says; the read
    # back fails, the commit is rolled back on the switch and the run says so
    (toy01.root / "faults").write_text("clamp-mtu 9000\n")
    bad = engine.run(inv, replace(opts, mode="apply"))
    assert bad.outcome == "rolled-back", (bad.outcome, bad.errors)
    assert "port/swp1/oper_mtu wanted '9216', runs 9000" in bad.errors["toy01"]
    assert "revision 2 rolled back to 1" in bad.errors["toy01"]
    assert toy01.config() == POWER_ON.format(name="toy01") and toy01.pending() is None
    (toy01.root / "faults").unlink()

    # behind the verification gate: pushed with a confirm window, verified, confirmed, kept
    start = toy01.applied()  # the undo applied revision 1's configuration again as a new revision
    assert start == "3" and toy01.config(start) == toy01.config("1")
    good = engine.run(inv, opts)
    assert good.outcome == "kept", (good.outcome, good.errors, [(r["pair"], r["reasons"]) for r in good.verify_after])
    assert good.verify_after and all(r["verdict"] == "pass" for r in good.verify_after)
    assert "mtu swp1 9216" in toy01.config() and "lossless on" in toy01.config() and toy01.pending() is None
    rec = json.loads((journal / f"{good.run_id}.json").read_text())["devices"]["toy01"]
    assert (rec["platform"], rec["revision_before"], rec["revision"], rec["confirmed"]) == (PLATFORM, start, toy01.applied(), True)

    # rolled back from the journal alone: the toy switch holds its power-on configuration again
    back = rollback_run(journal, good.run_id)
    assert back.outcome == "rolled-back" and back.restored == ["toy01"]
    assert toy01.config() == POWER_ON.format(name="toy01") and toy01.pending() is None

    # and the engine was not edited for it: nothing under tuning/ names the toy OS
    assert not [p for p in (REPO / "tuning").rglob("*.py") if PLATFORM in p.read_text()]


def test_a_switch_os_without_commit_confirm_is_pushed_plainly_kept_and_rolled_back(
        lab_inventory: Path, tmp_path: Path, toy01: ToyDevice):
    """The driver's Capabilities decide the commit model: an OS without commit-confirm (its commit
    refuses a confirm window) is committed without one behind the gate, nothing is left to
    confirm, and the journal's revision_before still rolls it back."""
    from tuning.model.platforms import SWITCH_DRIVERS
    from tuning.targets import register_switch_os

    register_switch_os(PLAIN_PLATFORM, PlainToyDriver)
    try:
        _add_toy(lab_inventory, PLAIN_PLATFORM)
        inv = inventory.load(lab_inventory)
        journal = tmp_path / "j"
        marks = Thresholds(min_bw_gbps=1.0, max_lat_us=1000.0, bw_drop_pct=50.0, lat_rise_pct=500.0)
        good = engine.run(inv, Options(mode="rollout", journal_dir=journal, limit=["toy01"], thresholds=marks,
                                       rails=(0,)))
        assert good.outcome == "kept", (good.outcome, good.errors)
        assert "mtu swp1 9216" in toy01.config() and toy01.pending() is None
        rec = json.loads((journal / f"{good.run_id}.json").read_text())["devices"]["toy01"]
        assert (rec["platform"], rec["revision_before"], rec["revision"]) == (PLAIN_PLATFORM, "1", toy01.applied())
        assert "confirmed" not in rec  # nothing waited for a confirm
        back = rollback_run(journal, good.run_id)
        assert back.outcome == "rolled-back" and back.restored == ["toy01"]
        assert toy01.config() == POWER_ON.format(name="toy01") and toy01.pending() is None
    finally:
        SWITCH_DRIVERS.pop(PLAIN_PLATFORM, None)
