"""``fabtune verify --limit node01`` over real SSH against the lab: node01's 8 NICs each in a
same-rail pair, one more pair through the spine so both leaf uplinks are crossed, partners taken
from the rest of the fabric, all 9 pairs in one round (they share no NIC). The lab is untuned
(netdev MTU 1500): every pair runs and fails on the RoCE MTU rule alone."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tuning import inventory
from tuning.rollout.engine import verify_pairs

pytestmark = pytest.mark.lab


def test_verify_limit_proves_one_node_and_the_uplinks(lab_inventory: Path, tmp_path: Path):
    want = [p.name for p in verify_pairs(inventory.load(lab_inventory), None, ["node01"])]
    res = subprocess.run([sys.executable, "-m", "tuning", "verify", "-i", str(lab_inventory), "--limit", "node01",
                          "--journal-dir", str(tmp_path / "j"), "--min-bw", "0", "--max-lat", "100", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 1, res.stderr
    pairs = json.loads(res.stdout)["pairs"]
    assert [p["pair"] for p in pairs] == want and len(want) == 9
    assert want[:8] == [f"node01:mlx5_{i}->node02:mlx5_{i}" for i in range(8)]
    spine = [p for p in pairs if p["path"] == "spine"]
    assert len(spine) == 1
    assert {spine[0]["client_link"].split(":")[0], spine[0]["server_link"].split(":")[0]} == {"leaf01", "leaf02"}
    for p in pairs:  # measured, and judged on the untuned MTU only
        assert p["bw_gbps"] > 0 and p["lat_us"] > 0 and p["mtu_bytes"] == 1024, p
        assert p["reasons"] == ["RoCE active MTU 1024 B where every hop allows 4096 B "
                                "(an end's netdev MTU is lower than the inventory's)"], p
    assert "verify: 9 pair(s) in 1 round(s), up to 9 at once" in res.stderr
    assert re.search(r"verify round 1/1: 9/9 measured in \d+\.\d s\n", res.stderr), res.stderr
    assert "verify 1/9" not in res.stderr  # no line per pair: at 10,000 nodes that is 40,000 lines
