"""``ansible-playbook playbooks/tune.yml --check --diff`` on a fresh lab, every tag (issue 9):

- it plans, and prints a diff for, every domain ``fabtune plan`` (the Nornir engine) plans there;
- the Nornir and the Ansible engines plan IDENTICAL changes, device by device, domain by domain;
- neither changes a byte on any lab device (tests/conftest.py ``snapshot_fabric`` before/after);
- every node domain (``tuning.node.domains()``) and ``switch`` is a tag of the playbook.

The lab runs from a copy of ``inventory/lab`` in tmp_path (fixture ``lab_inventory``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import ansible_runner
import pytest

from tests.conftest import snapshot_fabric
from tuning import inventory, node
from tuning.rollout import engine

pytestmark = pytest.mark.ansible

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
#: what the lab inventory plans at the very least, on an untuned lab (a smaller plan would make the
#: parity below prove less than "every domain")
LAB_DOMAINS = {"mtu", "sysctl", "nic_qos", "irq", "files", "switch"}

Plan = dict[str, dict[str, list[dict]]]  # device -> domain -> changes, in the engine's order


def by_domain(changes: dict[str, list[dict]]) -> Plan:
    """``{device: [change, ...]}`` -> ``{device: {domain: [change, ...]}}`` (devices with no change dropped)."""
    out: Plan = {}
    for device, chs in changes.items():
        for ch in chs:
            out.setdefault(device, {}).setdefault(ch["domain"], []).append(ch)
    return out


def nornir_plan(inv: Path) -> Plan:
    """What ``fabtune plan -i INV`` plans (the Nornir engine), every device and domain."""
    return by_domain(engine.run(inventory.load(inv), engine.Options(mode="plan")).changes)


def ansible_check(inv: Path, work: Path) -> tuple[Plan, dict[str, dict[str, list[dict]]], str]:
    """Run ``ansible-playbook -i INV playbooks/tune.yml --check --diff`` (every tag) through ansible-runner.

    Returns:
        (the ``changes`` of every ``fabtune_tune`` task result, per device and domain; the ``diff``
        entries of the results that changed a domain, per device and domain; the run's stdout as the
        default callback printed it).
    """
    work.mkdir()
    r = ansible_runner.run(private_data_dir=str(work), project_dir=str(REPO), playbook="playbooks/tune.yml",
                           inventory=str(inv), cmdline="--check --diff", quiet=True,
                           envvars={"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "ANSIBLE_NOCOLOR": "1"},
                           extravars={"fabtune_journal_dir": str(work / "journal")})
    stdout = r.stdout.read()
    assert (r.status, r.rc) == ("successful", 0), stdout
    changes: dict[str, list[dict]] = defaultdict(list)
    diffs: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for ev in r.events:
        data = ev.get("event_data", {})
        if ev.get("event") == "runner_on_ok" and data.get("task_action") == "fabtune_tune":
            res = data["res"]
            assert res["changed"] is bool(res["changes"]), res  # honest `changed` in check mode
            changes[data["host"]].extend(res["changes"])
            for domain in {ch["domain"] for ch in res["changes"]}:
                diffs[data["host"]][domain].extend(res.get("diff", []))
    return by_domain(changes), diffs, stdout


def test_check_diff_plans_every_domain_as_nornir_and_touches_nothing(lab_inventory: Path, tmp_path: Path) -> None:
    before = snapshot_fabric(lab_inventory)
    want = nornir_plan(lab_inventory)
    planned_domains = {d for per_dev in want.values() for d in per_dev}
    assert LAB_DOMAINS <= planned_domains, planned_domains

    got, diffs, stdout = ansible_check(lab_inventory, tmp_path / "check")
    assert got.keys() == want.keys()
    for device, per_domain in want.items():  # parity, device by device and domain by domain
        assert got[device].keys() == per_domain.keys(), device
        for domain, chs in per_domain.items():
            assert got[device][domain] == chs, f"{device} {domain}"

    for device, per_domain in want.items():  # a diff for every planned device and domain, printed
        for domain in per_domain:
            entries = diffs[device][domain]
            assert entries, f"{device} {domain}: the task result has no diff"
            for d in entries:  # Ansible's default callback prints each entry under its headers
                assert f"--- before: {d['before_header']}" in stdout, f"{device} {domain}: {d['before_header']}"
                assert f"+++ after: {d['after_header']}" in stdout, f"{device} {domain}: {d['after_header']}"

    assert snapshot_fabric(lab_inventory) == before  # neither fabtune plan nor check mode changed a byte


def test_every_domain_is_a_tag() -> None:
    res = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(REPO / "inventory" / "lab"), "playbooks/tune.yml",
                          "--list-tags"], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env=os.environ | {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"})
    assert res.returncode == 0, res.stderr
    tags = {t.strip() for line in res.stdout.splitlines() if "TASK TAGS:" in line
            for t in line.split("TASK TAGS:")[1].strip(" []").split(",")}
    assert {d.name for d in node.domains()} | {"switch"} <= tags, res.stdout
