"""Issue 6 items 4 and 5 over real SSH against the lab: a check that would run nothing is refused
before anything is pushed, a run stays restorable after the inventory changed (the journal alone
restores it), and a RoCE active MTU of 1024 where every hop allows 4096 fails its pairs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, snapshot_fabric

pytestmark = pytest.mark.lab


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuning", *args], capture_output=True, text=True, timeout=240,
                          cwd=REPO)


def _errors(res: subprocess.CompletedProcess) -> list[str]:
    return [line for line in res.stderr.splitlines() if not line.startswith("...")]


def _diff(a: dict, b: dict) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and not k.endswith(":revision"))


def _set(path: Path, **changes: object) -> None:
    data = yaml.safe_load(path.read_text()) or {}
    for key, value in changes.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and isinstance(data.get(key), dict) else value
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_zero_pairs_refused_inventory_change_rolled_back_and_low_mtu_fails(lab_inventory: Path, tmp_path: Path):
    inv, journal = lab_inventory, tmp_path / "j"
    jd = ("-i", str(inv), "--journal-dir", str(journal))
    untuned = snapshot_fabric(inv)

    # item 5: zero pairs scheduled is exit 2 before anything is pushed (rollout and verify)
    for args in (("rollout", "--rail", "9", *jd), ("verify", "--rail", "9", *jd)):
        res = _run(*args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert _errors(res) == ["fabtune: error: --rail: 9: no node has a NIC on rail(s) 9; the inventory's "
                                f"rails: 0, 1, 2, 3, 4, 5, 6, 7 (see `fabtune {args[0]} --help`)"], args
        assert "PASS" not in res.stdout
    # item 2: an impossible confirm window is refused before anything is pushed
    for bad in ("-5", "0", "10"):
        res = _run("rollout", "--confirm-s", bad, *jd)
        assert res.returncode == 2 and len(_errors(res)) == 1 and "--confirm-s" in _errors(res)[0], res.stderr
    assert not journal.exists() and _diff(untuned, snapshot_fabric(inv)) == []

    # item 4: a run made with PFC priority 4, the inventory then set back to 3: rollback restores it
    gv = {f: (inv / "group_vars" / f).read_text() for f in ("gpu_nodes.yml", "switches.yml")}
    _set(inv / "group_vars" / "gpu_nodes.yml", nic_qos={"pfc_priority": 4})
    _set(inv / "group_vars" / "switches.yml", roce={"pfc_priority": 4, "lossless_tc": 4,
                                                  "dscp_to_switch_priority": {26: 4, 48: 6}})
    res = _run("apply", "-l", "node01", "-d", "nic_qos", *jd)
    assert res.returncode == 0, res.stderr
    run_id = re.search(r"\(run (\S+)\)", res.stdout)[1]
    pfc = json.loads((inv / ".state/nodes/node01/sysroot/run/lab/dcb/enp12s0np0.json").read_text())["pfc"]
    assert pfc == [0, 0, 0, 0, 1, 0, 0, 0]
    for name, text in gv.items():
        (inv / "group_vars" / name).write_text(text)
    res = _run("rollback", run_id, "--journal-dir", str(journal))
    assert res.returncode == 0, res.stderr
    assert re.search(r"node01 .*pfc/enp12s0np0 .*0,0,0,0,1,0,0,0 .*0,0,0,0,0,0,0,0", res.stdout), res.stdout
    assert _diff(untuned, snapshot_fabric(inv)) == []

    # item 5: a NIC back at netdev MTU 1500 behind fabtune's back: RoCE MTU 1024 where 4096 is allowed
    res = _run("apply", *jd)
    assert res.returncode == 0, res.stderr
    (inv / ".state/nodes/node02/sysroot/sys/class/net/enp12s0np0/mtu").write_text("1500\n")
    res = _run("verify", "--rail", "0", "--json", "--report-json", str(tmp_path / "verify.json"), *jd)
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)  # one document: what --report-json writes, schema and all
    assert doc == json.loads((tmp_path / "verify.json").read_text())
    assert (doc["command"], doc["verify_ok"], doc["exit_code"]) == ("verify", False, 1)
    pairs = {p["pair"]: p for p in doc["pairs"]}
    low = pairs["node01:mlx5_0->node02:mlx5_0"]
    assert low["verdict"] == "fail" and low["mtu_bytes"] == 1024 and low["mtu_allowed"] == 4096
    assert "RoCE active MTU 1024 B where every hop allows 4096 B" in low["reasons"][0]
    assert pairs["node03:mlx5_0->node04:mlx5_0"]["verdict"] == "pass"
