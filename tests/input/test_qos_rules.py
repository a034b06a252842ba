"""Issue 6 item 13: QoS that must agree across a node and its switch is refused at load, naming the
file, the key, both devices and the rule (the lab test tests/engine/test_bad_input.py shows exit 2
and nothing pushed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tuning import inventory
from tuning.lint import MTU_HEADER_BYTES
from tuning.errors import InputError

REPO = Path(__file__).resolve().parents[2]


def _load_with(tmp_path: Path, rel: str, **changes) -> str:
    inv = tmp_path / "lab"
    shutil.copytree(REPO / "inventory/lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    data = yaml.safe_load((inv / rel).read_text())
    for key, value in changes.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and key in data else value
    (inv / rel).write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InputError) as e:
        inventory.load(inv)
    return str(e.value).replace(f"{inv}/", "")


G, S = "group_vars/gpu_nodes.yml", "group_vars/switches.yml"


@pytest.mark.parametrize("rel, changes, expected", [
    (G, {"nic_qos": {"cnp_dscp": 26}}, "group_vars/gpu_nodes.yml: nic_qos.cnp_dscp: node01: roce_dscp and cnp_dscp "
                                       "are both 26; rule: CNPs need their own DSCP"),
    (G, {"nic_qos": {"cnp_priority": 3}}, "group_vars/gpu_nodes.yml: nic_qos.cnp_priority: node01: pfc_priority and "
                                         "cnp_priority are both 3; rule: CNPs travel outside the lossless priority"),
    (G, {"nic_qos": {"pfc_priority": 5}}, "group_vars/gpu_nodes.yml: nic_qos.pfc_priority: node01 and leaf01: node "
                                          "PFC priority 5, switch roce.pfc_priority 3; rule: one lossless priority"),
    (G, {"nic_qos": {"trust": "pcp"}}, "group_vars/gpu_nodes.yml: nic_qos.trust: node01 and leaf01: node trust pcp, "
                                       "switch roce.trust dscp; rule: both trust the same field"),
    (S, {"roce": {"dscp_to_switch_priority": {48: 6}}}, "group_vars/switches.yml: roce.dscp_to_switch_priority: "
                                                        "node01 and leaf01: leaf01 leaves the RoCE DSCP 26 of node01 "
                                                        "unmapped; rule: the RoCE DSCP maps to the lossless"),
    (S, {"port_mtu": 9020}, "group_vars/switches.yml: port_mtu: node01 and leaf01: leaf01:swp1 MTU 9020 < node MTU "
                            "9000 + 22 header bytes; rule: the port carries the node's largest frame (allowed: >= 9022)"),
])
def test_each_rule_names_both_devices_and_the_rule(tmp_path: Path, rel, changes, expected):
    assert _load_with(tmp_path, rel, **changes).startswith(expected)


def test_the_boundary_mtu_is_accepted(tmp_path: Path):
    inv = tmp_path / "lab"
    shutil.copytree(REPO / "inventory/lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    (inv / S).write_text((inv / S).read_text().replace("port_mtu: 9216", f"port_mtu: {9000 + MTU_HEADER_BYTES}"))
    assert inventory.load(inv).devices["leaf01"].spec.port_mtu == 9022


def test_legacy_ansible_aliases_are_refused(tmp_path: Path):
    msg = _load_with(tmp_path, "group_vars/all.yml", ansible_ssh_port=2222)
    assert msg == ("group_vars/all.yml: ansible_ssh_port: an old Ansible alias fabtune does not read "
                   "(host node01); allowed: ansible_port")
