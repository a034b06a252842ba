"""Issue 21, fabric lint: one fixture inventory per rule (a copy of inventory/lab with one change)
makes exactly that rule fire; the good inventories make none. ``fabtune lint --offline`` prints it,
with rule ids, devices and the fix, and exits 2 on an error (0 on warnings only)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.adversarial._cli import cli
from tests.conftest import REPO, copy_lab_inventory_files
from tuning import inventory
from tuning.lab.scale import write_inventory
from tuning.lint import RULES, inventory_findings

G, S = "group_vars/gpu_nodes.yml", "group_vars/switches.yml"


def _edit(inv: Path, rel: str, **changes) -> None:
    path = inv / rel
    data = yaml.safe_load(path.read_text()) if path.exists() else {}
    for key, value in changes.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and isinstance(data.get(key), dict) else value
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _swap_rails(inv: Path) -> None:
    """node01's first two cables swapped: its rail-0 NIC on leaf02, its rail-1 NIC on leaf01."""
    path = inv / "host_vars" / "node01.yml"
    data = yaml.safe_load(path.read_text())
    a, b = data["nics"][0], data["nics"][1]
    (a["switch"], a["switch_port"]), (b["switch"], b["switch_port"]) = (b["switch"], b["switch_port"]), \
        (a["switch"], a["switch_port"])
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _leave_out_switches(inv: Path) -> None:
    """A node-only site: no switch in the inventory (the NICs still name leaf01 and leaf02)."""
    hosts = yaml.safe_load((inv / "hosts.yaml").read_text())
    del hosts["all"]["children"]["switches"]
    (inv / "hosts.yaml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    for name in ("host_vars/leaf01.yml", "host_vars/leaf02.yml", "host_vars/spine01.yml", S):
        (inv / name).unlink()


#: rule id -> the one change to inventory/lab that breaks it
FIXTURES = {
    "mtu-headroom": lambda inv: _edit(inv, "host_vars/leaf01.yml", port_mtu_overrides={"swp1": 9010}),
    "spine-mtu": lambda inv: _edit(inv, "host_vars/spine01.yml", port_mtu=9010),
    "cnp-dscp": lambda inv: _edit(inv, G, nic_qos={"cnp_dscp": 26}),
    "cnp-lossless": lambda inv: _edit(inv, G, nic_qos={"cnp_priority": 3}),
    "pfc-priority": lambda inv: _edit(inv, G, nic_qos={"pfc_priority": 4}),
    "trust": lambda inv: _edit(inv, G, nic_qos={"trust": "pcp"}),
    "dscp-map": lambda inv: _edit(inv, S, roce={"dscp_to_switch_priority": {26: 2, 48: 6}}),
    "cnp-priority": lambda inv: _edit(inv, S, roce={"cnp_priority": 5, "dscp_to_switch_priority": {26: 3, 48: 5}}),
    "qos-unmanaged": lambda inv: _edit(inv, "host_vars/spine01.yml", roce=None),
    "lossy-hop": lambda inv: _edit(inv, "host_vars/spine01.yml", roce={**yaml.safe_load((inv / S).read_text())["roce"],
                                                                      "mode": "lossy"}),
    "rail-cabling": _swap_rails,
    "uplink-mtu": lambda inv: _edit(inv, "host_vars/leaf01.yml", port_mtu_overrides={"swp31": 9000}),
    "switch-unmanaged": _leave_out_switches,
}


@pytest.mark.parametrize("rule", sorted(FIXTURES))
def test_each_fixture_inventory_makes_exactly_its_rule_fire(tmp_path: Path, rule: str):
    inv = copy_lab_inventory_files(tmp_path / "lab")
    FIXTURES[rule](inv)
    found = list(inventory_findings(inventory.load(inv, lint=False).devices))
    assert {f.rule for f in found} == {rule}, [(f.rule, f.message) for f in found]
    first = found[0]
    assert first.severity == RULES[rule] and first.fix and len(first.devices) >= 1
    if first.severity == "error":  # a load refuses it, naming the file, the key and the rule id
        with pytest.raises(Exception, match=rf"\[{rule}\]"):
            inventory.load(inv)
    else:
        inventory.load(inv)  # a warning does not stop a run


def test_every_inventory_rule_has_a_fixture():
    live = {r for r in RULES if r.startswith("live-") or r == "ecn-off"}
    assert set(FIXTURES) == set(RULES) - live


@pytest.mark.parametrize("make", ["lab", "example-su", "mixed-os"])
def test_the_good_inventories_break_no_rule(tmp_path: Path, make: str):
    inv = {"lab": REPO / "inventory" / "lab", "example-su": REPO / "inventory" / "example-su"}.get(make) or \
        write_inventory(tmp_path / "mixed", 4, switch_os={"leaf01": "sonic", "leaf02": "eos"})
    assert list(inventory_findings(inventory.load(inv, lint=False).devices)) == []


def _lint(*args: str) -> subprocess.CompletedProcess:
    """``fabtune lint ARGS`` run in this process (:func:`tests.adversarial._cli.cli`)."""
    code, out, err = cli("lint", *args, cwd=REPO)
    return subprocess.CompletedProcess(["fabtune", "lint", *args], code, out, err)


def test_lint_offline_prints_rule_devices_and_fix_and_exits_2_on_an_error(tmp_path: Path):
    inv = copy_lab_inventory_files(tmp_path / "lab")
    FIXTURES["trust"](inv)
    res = _lint("-i", str(inv), "--offline", "--json")
    assert res.returncode == 2, res.stderr
    doc = json.loads(res.stdout)
    trust = [f for f in doc["findings"] if f["rule"] == "trust"]
    assert trust and trust[0]["severity"] == "error" and trust[0]["devices"] == ["node01", "leaf01"]
    assert trust[0]["message"] == "node01 and leaf01: node trust pcp, switch roce.trust dscp"
    assert trust[0]["fix"] == "both trust the same field" and trust[0]["key"] == "nic_qos.trust"
    swapped = copy_lab_inventory_files(tmp_path / "swapped")
    _swap_rails(swapped)
    res = _lint("-i", str(swapped), "--offline")
    assert res.returncode == 0 and "rail-cabling" in res.stdout and "0 error(s), 2 warning(s)" in res.stdout, res.stdout
