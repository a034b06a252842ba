"""The Ansible front end against the lab: ``playbooks/tune.yml`` plans exactly what the engine
plans (parity, STYLE.md section 6), check mode pushes nothing, apply reaches the nodes' sysroot
files, and a second apply changes nothing (idempotent twin).

The lab runs from a copy of ``inventory/lab`` in tmp_path (fixture ``lab_inventory``, tests/conftest.py).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import ansible_runner
import pytest

from tuning import inventory
from tuning.rollout import engine

pytestmark = pytest.mark.ansible

REPO = Path(__file__).resolve().parents[2]
DOMAINS = {"mtu", "sysctl"}
NODES = ["node01", "node02"]  # two of the four lab nodes keep the three playbook runs short
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"
# ansible-runner finds ansible-playbook on PATH: put the venv's first
VENV_PATH = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def run_playbook(inv: Path, work: Path, cmdline: str = "") -> tuple[dict[str, list[dict]], dict[str, list[dict]]]:
    """Run ``playbooks/tune.yml`` (tags mtu and sysctl, unverified) with ansible-runner.

    Returns:
        (host -> changes of every task, in task order; host -> each task's ``diff`` entries).
    """
    work.mkdir()
    r = ansible_runner.run(private_data_dir=str(work), project_dir=str(REPO), playbook="playbooks/tune.yml",
                           inventory=str(inv), limit=",".join(NODES), cmdline=f"--tags mtu,sysctl {cmdline}", quiet=True,
                           envvars={"PATH": VENV_PATH}, extravars={"fabtune_journal_dir": str(work / "journal"),
                                                                    "fabtune_verify": False})
    assert (r.status, r.rc) == ("successful", 0), r.stdout.read()
    changes: dict[str, list[dict]] = {}
    diffs: dict[str, list[dict]] = {}
    for ev in r.events:
        if ev.get("event") == "runner_on_ok" and ev["event_data"].get("task_action") == "fabtune_tune":
            host, res = ev["event_data"]["host"], ev["event_data"]["res"]
            assert res["changed"] is bool(res["changes"])
            changes.setdefault(host, []).extend(res["changes"])
            diffs.setdefault(host, []).extend(res.get("diff", []))
    return changes, diffs


def engine_plan(inv: Path) -> dict[str, list[dict]]:
    """What ``fabtune plan --limit NODES`` plans for the mtu and sysctl domains, per node (each present)."""
    report = engine.run(inventory.load(inv), engine.Options(mode="plan", limit=NODES, domains=DOMAINS))
    return {name: report.changes.get(name, []) for name in NODES}


def test_check_diff_parity_then_apply_then_idempotent(lab_inventory: Path, tmp_path: Path) -> None:
    want = engine_plan(lab_inventory)
    assert all(want.values()), "an untuned lab must need mtu and sysctl changes on every node"
    assert {c["after"] for ch in want.values() for c in ch if c["domain"] == "mtu"} == {"9000"}

    planned, diffs = run_playbook(lab_inventory, tmp_path / "check", "--check --diff")
    assert planned == want
    for host, ch in planned.items():
        assert [d["after"] for d in diffs[host]] == [f"{c['key']} = {c['after']}\n" for c in ch]
    assert engine_plan(lab_inventory) == want  # check mode pushed nothing

    applied, _ = run_playbook(lab_inventory, tmp_path / "apply")
    assert applied == want
    for host in want:
        root = lab_inventory / ".state" / "nodes" / host / "sysroot"
        nics = inventory.load(lab_inventory).devices[host].spec.nics
        assert {(root / "sys/class/net" / n.netdev / "mtu").read_text().strip() for n in nics} == {"9000"}
        assert (root / "proc/sys/net/core/rmem_max").read_text().strip() == "268435456"
        assert (root / "proc/sys/kernel/numa_balancing").read_text().strip() == "0"
        assert (root / "proc/sys/net/ipv4/conf/all/arp_announce").read_text().strip() == "2"
    untouched = lab_inventory / ".state" / "nodes" / "node03" / "sysroot" / "sys/class/net/enp12s0np0/mtu"
    assert untouched.read_text().strip() == "1500"  # outside the limit
    runs = list((tmp_path / "apply" / "journal").glob("*.json"))
    assert len(runs) == 1  # one run (one journal) for every host and task of the playbook

    again, _ = run_playbook(lab_inventory, tmp_path / "again")
    assert again == {host: [] for host in want}


def test_syntax_check() -> None:
    res = subprocess.run([str(PLAYBOOK_BIN), "-i", str(REPO / "inventory" / "lab"), "playbooks/tune.yml",
                          "--syntax-check"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "playbook: playbooks/tune.yml" in res.stdout


def test_connect_error_is_a_one_line_unreachable_host(tmp_path: Path) -> None:
    """A ConnectError (here: the inventory's known_hosts file is missing, no lab) makes the host
    UNREACHABLE with the core's one line, as Ansible reports an SSH failure; exit 4."""
    inv = tmp_path / "inventory"
    shutil.copytree(REPO / "inventory" / "lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    res = subprocess.run([str(PLAYBOOK_BIN), "-i", str(inv), "playbooks/tune.yml", "--check", "--limit", "node01"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 4, res.stdout[-2000:]
    known_hosts = inv / ".state" / "ssh" / "known_hosts"
    assert ('fatal: [node01]: UNREACHABLE! => {"changed": false, "msg": "node01: cannot read known_hosts '
            f'{known_hosts}: No such file or directory", "unreachable": true}}') in res.stdout


def test_diff_entries_show_key_lines_and_whole_files() -> None:
    sys.path.insert(0, str(REPO / "playbooks" / "action_plugins"))
    spec = importlib.util.spec_from_file_location("_fabtune_common", REPO / "playbooks/action_plugins/_fabtune_common.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    changes = [{"device": "node01", "domain": "mtu", "key": "mtu/enp12s0np0", "before": "1500", "after": "9000"},
               {"device": "node01", "domain": "files", "key": "file/etc/sysctl.d/90-fabtune.conf",
                "before": None, "after": "kernel.numa_balancing = 0\n"}]
    assert plugin.diff_entries(changes) == [
        {"before_header": "node01 mtu/enp12s0np0", "after_header": "node01 mtu/enp12s0np0",
         "before": "mtu/enp12s0np0 = 1500\n", "after": "mtu/enp12s0np0 = 9000\n"},
        {"before_header": "node01 file/etc/sysctl.d/90-fabtune.conf",
         "after_header": "node01 file/etc/sysctl.d/90-fabtune.conf",
         "before": "", "after": "kernel.numa_balancing = 0\n"}]
