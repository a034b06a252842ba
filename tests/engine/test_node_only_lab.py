"""Issue 19, node-only sites: an inventory that leaves the switches out (the network team owns them)
loads, lints with one ``switch-unmanaged`` warning per switch its NICs name, plans, rolls out with
verification (pairs and incasts through switches fabtune never connects to) and burns in, on the
lab. The lab's switches are first tuned with the full inventory, as the network team would have
done; the node-only inventory then reaches the same lab (its nodes' ports, its state)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.lab


def _fab(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuning", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO)


def _node_only(full: Path, dest: Path) -> Path:
    """A copy of ``full`` without its switches, on the same lab (``.state`` links to its state)."""
    shutil.copytree(full, dest, ignore=shutil.ignore_patterns(".state", ".fabtune*"))
    hosts = yaml.safe_load((dest / "hosts.yaml").read_text())
    switches = hosts["all"]["children"].pop("switches")
    for name in ("leaf01", "leaf02", "spine01"):
        (dest / "host_vars" / f"{name}.yml").unlink()
    (dest / "group_vars" / "switches.yml").unlink()
    (dest / "hosts.yaml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    os.symlink(os.readlink(full / ".state"), dest / ".state")
    assert "leaves" in switches["children"]
    return dest


def test_a_node_only_inventory_plans_rolls_out_verifies_and_burns_in(lab_inventory: Path, tmp_path: Path):
    res = _fab("apply", "-i", str(lab_inventory), "--limit", "leaf01,leaf02,spine01", "--journal-dir",
               str(tmp_path / "net"))
    assert res.returncode == 0, res.stderr[-800:]  # the network team's switches: tuned, then left alone
    inv = _node_only(lab_inventory, tmp_path / "nodes")

    res = _fab("lint", "-i", str(inv), "--offline", "--json")
    assert res.returncode == 0, res.stderr[-800:]
    found = json.loads(res.stdout)["findings"]
    assert [(f["rule"], f["severity"], f["devices"][0]) for f in found] == [
        ("switch-unmanaged", "warning", "leaf01"), ("switch-unmanaged", "warning", "leaf02")]

    res = _fab("rollout", "-i", str(inv), "--journal-dir", str(tmp_path / "j"), "--report-json", str(tmp_path / "r.json"))
    assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-800:]
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["outcome"] == "kept" and [d["name"] for d in doc["devices"]] == ["node01", "node02", "node03", "node04"]
    assert doc["pairs"] and all(p["outcome"] == "pass" for p in doc["pairs"])
    assert {p["path"] for p in doc["pairs"]} == {"leaf", "spine"}  # across the leaves it never touched
    assert [i["verdict"] for i in doc["incast"]] == ["pass", "pass"]
    # fabtune runs counts the run from where the rollout's own summary does (issue 21's tryout: they differed)
    (row,) = json.loads(_fab("runs", "--journal-dir", str(tmp_path / "j"), "--json").stdout)
    assert row["run_id"] == doc["run_id"] and abs(row["seconds"] - doc["seconds"]) < 1.0, (row, doc["seconds"])
    assert f"in {doc['seconds']:.1f} s" in res.stdout

    res = _fab("burnin", "-i", str(inv), "--iterations", "1", "--rail", "0", "--json")
    assert res.returncode == 0, res.stderr[-800:]
    assert json.loads(res.stdout)["findings"] == []
