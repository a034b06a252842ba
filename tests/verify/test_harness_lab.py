"""Issue 19, "a harness failure is never a fabric fault", over real SSH against the lab: another
process of node02 holds TCP port 18515 (``fabtune lab inject node02 port-held 18515``), the port
node02's first perftest server is given. ``fabtune verify`` reports that one pair as a harness
failure (``port_in_use``, naming node02's server) while the others are measured; ``fabtune burnin``
names node02 as a ``harness-error`` (no node, link or switch fault), drafts no drain and exits 4."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.lab

CAUSE = ("node02 (server): ib_write_bw could not listen on TCP port 18515 (another process on the node holds it); "
         "the fabric was not tested")


def _fab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuning", *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO)


def test_a_port_held_on_a_node_is_a_harness_failure_never_a_fault_or_a_drain(lab_inventory: Path, tmp_path: Path):
    inv = str(lab_inventory)
    assert _fab("lab", "inject", "-i", inv, "node02", "port-held", "18515").returncode == 0
    res = _fab("verify", "-i", inv, "--limit", "node01", "--journal-dir", str(tmp_path / "j"), "--min-bw", "0",
               "--max-lat", "100", "--json")
    assert res.returncode == 1, res.stderr[-800:]
    pairs = json.loads(res.stdout)["pairs"]
    held = [p for p in pairs if p.get("error_kind")]
    assert [(p["pair"], p["status"], p["error_kind"], p["error_class"], p["error"]) for p in held] == [
        ("node01:mlx5_0->node02:mlx5_0", "error", "port_in_use", "harness", CAUSE)]
    assert held[0]["reasons"] == [f"did not run: port_in_use: {CAUSE}"]
    # every other pair ran (the untuned lab fails them on the RoCE MTU rule alone)
    assert len(pairs) == 9 and all(p["bw_gbps"] > 0 and p["error_class"] is None for p in pairs if p not in held)

    log = tmp_path / "drain.log"
    res = _fab("burnin", "-i", inv, "--iterations", "1", "--rail", "0", "--drain-adapter", "slurm",
               "--drain-log", str(log), "--json")
    assert res.returncode == 4, res.stderr[-800:]
    doc = json.loads(res.stdout)
    assert [(f["code"], f["kind"], f["target"]) for f in doc["findings"]] == [("harness-error", "harness", "node02")]
    assert "(port_in_use): the fabric was not tested there" in doc["findings"][0]["message"]
    assert (doc["drain"]["drained"], doc["drain"]["over_cap"], doc["drain"]["calls"]) == ([], [], [])
    assert "State=DRAIN" not in log.read_text()
