"""Bad input exits 2 with ONE line naming the file, the key and the allowed values, and
nothing is pushed (every sysroot file and switch config unchanged, checked over the lab)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import snapshot_fabric

pytestmark = pytest.mark.lab


def _edit(path: Path, **changes) -> None:
    data = yaml.safe_load(path.read_text()) or {}
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key].update(value)
        else:
            data[key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _no_group(inv: Path) -> None:
    hosts = yaml.safe_load((inv / "hosts.yaml").read_text())
    hosts["all"]["hosts"] = {"stray01": {"ansible_host": "127.0.0.1"}}
    (inv / "hosts.yaml").write_text(yaml.safe_dump(hosts, sort_keys=False))


CASES = {
    "host mtu": (lambda i: _edit(i / "group_vars/gpu_nodes.yml", mtu=9500),
                 ["group_vars/gpu_nodes.yml: mtu:", "9500 is outside 68..9216"]),
    "switch mtu": (lambda i: _edit(i / "group_vars/switches.yml", port_mtu=9300),
                   ["group_vars/switches.yml: port_mtu:", "9300 is outside 552..9216"]),
    "priority": (lambda i: _edit(i / "group_vars/gpu_nodes.yml", nic_qos={"pfc_priority": 8}),
                 ["gpu_nodes.yml: nic_qos.pfc_priority:", "8 is outside 0..7"]),
    "dscp": (lambda i: _edit(i / "group_vars/gpu_nodes.yml", nic_qos={"roce_dscp": 64}),
             ["gpu_nodes.yml: nic_qos.roce_dscp:", "64 is outside 0..63"]),
    "ecn order": (lambda i: _edit(i / "group_vars/switches.yml", roce={"ecn_min_bytes": 2000000}),
                  ["switches.yml: roce:", "ecn_min_bytes 2000000 is above ecn_max_bytes 1500000"]),
    "cpu list": (lambda i: _edit(i / "host_vars/node02.yml", irq_cpus="0-15,200-207"),
                 ["host_vars/node02.yml: irq_cpus:", "CPUs 200-207 do not exist", "allowed: online CPUs 0-111"]),
    "unknown key": (lambda i: _edit(i / "group_vars/gpu_nodes.yml", nic_qso={"pfc_priority": 3}),
                    ["gpu_nodes.yml: nic_qso: unknown key", "did you mean nic_qos?", "allowed:", "nic_qos"]),
    "bool as int": (lambda i: _edit(i / "group_vars/gpu_nodes.yml", nic_qos={"pfc_priority": True}),
                    ["gpu_nodes.yml: nic_qos.pfc_priority:", "True is a bool; allowed: an integer in 0..7"]),
    "sysctl injection": (lambda i: _edit(i / "group_vars/gpu_nodes.yml", sysctl={"kernel.x;touch pwned": 1}),
                         ["gpu_nodes.yml: sysctl.kernel.x;touch pwned:", "is not a sysctl name"]),
    "dscp clash": (lambda i: _edit(i / "group_vars/gpu_nodes.yml", nic_qos={"cnp_dscp": 26}),
                   ["gpu_nodes.yml: nic_qos.cnp_dscp: node01: roce_dscp and cnp_dscp are both 26"]),
    "priority clash": (lambda i: _edit(i / "group_vars/gpu_nodes.yml", nic_qos={"cnp_priority": 3}),
                       ["gpu_nodes.yml: nic_qos.cnp_priority: node01: pfc_priority and cnp_priority are both 3"]),
    "pfc mismatch": (lambda i: _edit(i / "group_vars/switches.yml", roce={"pfc_priority": 4,
                                                                          "dscp_to_switch_priority": {26: 4, 48: 6}}),
                     ["gpu_nodes.yml: nic_qos.pfc_priority: node01 and leaf01: node PFC priority 3, "
                      "switch roce.pfc_priority 4; rule: one lossless priority"]),
    "trust mismatch": (lambda i: _edit(i / "group_vars/gpu_nodes.yml", nic_qos={"trust": "pcp"}),
                       ["nic_qos.trust: node01 and leaf01: node trust pcp, switch roce.trust dscp"]),
    "dscp map": (lambda i: _edit(i / "group_vars/switches.yml", roce={"dscp_to_switch_priority": {26: 0, 48: 6}}),
                 ["switches.yml: roce.dscp_to_switch_priority: node01 and leaf01: leaf01 maps the RoCE DSCP 26 "
                  "of node01 to priority 0; rule: the RoCE DSCP maps to the lossless priority 3"]),
    "port mtu": (lambda i: _edit(i / "host_vars/leaf01.yml", port_mtu_overrides={"swp2": 9000}),
                 ["host_vars/leaf01.yml: port_mtu_overrides: node02 and leaf01: leaf01:swp2 MTU 9000 < node MTU "
                  "9000 + 22 header bytes", "allowed: >= 9022"]),
    "lossless on the cnp tc": (lambda i: _edit(i / "group_vars/switches.yml", roce={"lossless_tc": 6}),
                               ["switches.yml: roce:", "lossless_tc 6 is the traffic class of CNPs (cnp_priority 6 maps to TC 6",
                                "allowed: any other TC in 0..7"]),
    "ecn marks every packet": (lambda i: _edit(i / "group_vars/switches.yml", roce={"ecn_min_bytes": 1,
                                                                                   "ecn_max_bytes": 1}),
                               ["switches.yml: roce:", "ecn_max_bytes 1 is below one frame (9216 bytes",
                                "allowed: >= 9216"]),
    "override of a missing port": (lambda i: _edit(i / "host_vars/leaf01.yml", port_mtu_overrides={"swp99": 9216}),
                                   ["host_vars/leaf01.yml: port_mtu_overrides:", "names swp99, not a port of this switch",
                                    "allowed: the ports swp1-16, swp31"]),
    "no group": (_no_group, ["hosts.yaml: all.*.hosts.stray01:", "exactly one of the groups gpu_nodes, switches"]),
}


def test_each_bad_input_exits_2_with_one_line_and_pushes_nothing(lab_inventory: Path, tmp_path: Path):
    import shutil

    before = snapshot_fabric(lab_inventory)
    for name, (mutate, expected) in CASES.items():
        inv = tmp_path / name.replace(" ", "_")
        shutil.copytree(lab_inventory, inv, symlinks=True, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
        (inv / ".state").symlink_to(lab_inventory / ".state")
        mutate(inv)
        res = subprocess.run([sys.executable, "-m", "tuning", "apply", "-i", str(inv), "--journal-dir",
                              str(tmp_path / "j")], capture_output=True, text=True, timeout=60)
        errors = [l for l in res.stderr.splitlines() if not l.startswith("...")]
        assert res.returncode == 2, (name, res.stderr)
        assert len(errors) == 1, (name, errors)
        for part in expected:
            assert part in errors[0], (name, errors[0])
    assert snapshot_fabric(lab_inventory) == before
