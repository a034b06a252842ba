"""Safe defaults: a node setting the inventory does not ask for is left alone.

With the gpu_nodes group's tuning keys removed (only the connection keys left), the offline plan
of a node holds no MTU, NIC QoS, IRQ or sysctl change, the cross-host QoS and MTU rules have
nothing to hold the node to (a switch may then leave QoS alone too), and the verification does
not expect a lossless fabric or judge the RoCE MTU against an MTU the inventory never named.
Each setting, once written, is planned exactly as written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tuning import inventory
from tuning.rollout.offline import offline_plan
from tuning.verify.incast import Expectation
from tuning.verify.pairs import rail_pairs, with_mtu_allowed

REPO = Path(__file__).resolve().parents[2]
#: what an inventory must say to reach the lab nodes; everything else of gpu_nodes.yml is tuning
CONNECTION_ONLY = {"fabtune_sysroot": "sysroot", "ansible_become": True, "ansible_become_method": "sudo"}


def _lab(tmp_path: Path, nodes: dict, switches_roce: object = "keep") -> Path:
    inv = tmp_path / "inv"
    shutil.copytree(REPO / "inventory" / "lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    (inv / "group_vars" / "gpu_nodes.yml").write_text(yaml.safe_dump(nodes))
    if switches_roce != "keep":
        sw = yaml.safe_load((inv / "group_vars" / "switches.yml").read_text())
        (inv / "group_vars" / "switches.yml").write_text(yaml.safe_dump({**sw, "roce": switches_roce}))
    return inv


def _keys(report, node: str = "node01") -> dict[str, str]:
    return {c["key"]: c["after"] for c in report.changes[node]}


def test_an_empty_profile_plans_nothing_for_mtu_qos_irqs_or_sysctls(tmp_path):
    inv = inventory.load(_lab(tmp_path, CONNECTION_ONLY))
    node01 = inv.devices["node01"].spec
    assert (node01.mtu, node01.nic_qos, node01.irq_affinity, node01.sysctl) == (None, None, "off", {})
    planned = _keys(offline_plan(inv, ["node01"]))
    touched = {k.split("/")[0] for k in planned}
    assert touched.isdisjoint({"mtu", "dcbx", "trust", "pfc", "dscp2prio", "tos", "ecn", "irq", "sysctl"}), planned
    # nor boot files with nothing in them: no empty sysctl drop-in, no setup script, no unit enabled
    assert not [c for c in offline_plan(inv, ["node01"]).changes["node01"] if c["domain"] == "files"], planned


def test_each_setting_once_written_is_planned_as_written(tmp_path):
    inv = inventory.load(_lab(tmp_path, {**CONNECTION_ONLY, "mtu": 4200, "nic_qos": {},
                                         "sysctl": {"net.core.rmem_max": 268435456}}))
    planned = _keys(offline_plan(inv, ["node01"]))
    assert planned["mtu/enp12s0np0"] == "4200"
    assert planned["trust/enp12s0np0"] == "dscp"  # nic_qos: {} asks for NVIDIA's RoCE defaults
    assert planned["pfc/enp12s0np0"] == "0,0,0,1,0,0,0,0"
    assert planned["tos/mlx5_0"] == "106"
    assert planned["sysctl/net.core.rmem_max"] == "268435456"


def test_a_switch_may_leave_qos_alone_when_no_node_asks_for_it(tmp_path):
    inv = inventory.load(_lab(tmp_path, CONNECTION_ONLY, switches_roce=None))
    assert inv.devices["leaf01"].spec.roce is None
    assert Expectation.from_inventory(inv).lossless is False  # nothing says the fabric is lossless


def test_a_node_that_asks_for_pfc_still_needs_every_switch_lossless(tmp_path):
    with pytest.raises(inventory.InputError) as e:
        inventory.load(_lab(tmp_path, {**CONNECTION_ONLY, "nic_qos": {}}, switches_roce=None))
    assert e.value.key == "roce"
    assert "has roce: null (QoS left alone) while node01 runs PFC on priority 3" in e.value.problem


def test_the_roce_mtu_is_not_judged_against_an_mtu_nobody_named(tmp_path):
    inv = inventory.load(_lab(tmp_path, CONNECTION_ONLY))
    pairs = with_mtu_allowed(rail_pairs(inv.nodes, 0), inv.nodes, inv.switches)
    assert pairs and {p.mtu_allowed for p in pairs} == {None}
    inv = inventory.load(_lab(tmp_path / "set", {**CONNECTION_ONLY, "mtu": 9000}))
    pairs = with_mtu_allowed(rail_pairs(inv.nodes, 0), inv.nodes, inv.switches)
    assert {p.mtu_allowed for p in pairs} == {4096}
