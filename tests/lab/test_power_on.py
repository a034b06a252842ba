"""A reset puts a tuned, faulted, rebooted lab back to its power-on fabric byte for byte
(``tuning.lab.power_on``): what lets the suite start a lab once and share it between tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import snapshot_fabric
from tuning import inventory
from tuning.lab import power_on, privileges
from tuning.lab.inject import inject
from tuning.rollout import engine
from tuning.rollout.engine import Options



def test_a_tuned_faulted_lab_resets_to_its_power_on_fabric(lab_inventory: Path, tmp_path: Path):
    state = lab_inventory / ".state"
    power_on_fabric = snapshot_fabric(lab_inventory)
    rep = engine.run(inventory.load(lab_inventory), Options(mode="apply", journal_dir=tmp_path / "j"))
    assert rep.outcome == "applied" and rep.n_changes > 100
    inject(state, "leaf01:swp1", "degrade")
    inject(state, "node02", "irqbalance")  # an agent process that rewrites IRQ affinities
    privileges.require_password(state, "hunter2")
    (state / "nodes" / "node03" / "sysroot" / "tmp-new-file").write_text("left behind\n")
    tuned = snapshot_fabric(lab_inventory)
    assert tuned["node02:sys/class/net/enp12s0np0/mtu"] == b"9000\n" and tuned != power_on_fabric
    assert tuned["leaf01:revision"] != power_on_fabric["leaf01:revision"]

    done = power_on.reset(state)

    assert done["switches"] == {"leaf01": 1, "leaf02": 1, "spine01": 1}
    assert done["paths_restored"] > 100 and done["processes_stopped"] >= 1  # the agent
    assert snapshot_fabric(lab_inventory) == power_on_fabric
    assert json.loads((state / "fabric.json").read_text()).get("injections", []) == []
    assert not privileges.policy_path(state).exists() or json.loads(privileges.policy_path(state).read_text()) == {}
    again = engine.run(inventory.load(lab_inventory), Options(mode="plan", journal_dir=tmp_path / "j"))
    assert again.n_changes == rep.n_changes  # the same plan as on the first power-on


def test_a_rebooted_node_and_a_pending_commit_are_reset_too(lab_inventory: Path):
    from tests.node.conftest import Node
    from tuning.targets.switch import open_driver

    state = lab_inventory / ".state"
    power_on_fabric = snapshot_fabric(lab_inventory)
    node = Node(lab_inventory, "node01")
    try:
        assert node.host.run("sysctl -w net.core.rmem_max=4608").rc == 0  # a change the reset must undo
        node.reboot()  # a fresh sysroot: every path of node01 has a new inode
    finally:
        node.close()
    drv = open_driver(inventory.load(lab_inventory).devices["leaf01"])
    try:
        drv.load_candidate("nv set interface swp3 link mtu 1500\n")
        drv.commit(confirm_within_s=600)  # pending: the switch waits for a confirm that never comes
    finally:
        drv.close()
    power_on.reset(state)
    assert snapshot_fabric(lab_inventory) == power_on_fabric


def test_a_reset_refuses_a_folder_without_a_running_lab(tmp_path: Path):
    from tuning.errors import TuningError

    with pytest.raises(TuningError, match="no lab is running"):
        power_on.reset(tmp_path)
