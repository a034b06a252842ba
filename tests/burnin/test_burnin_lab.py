"""Issue 10's must: two faults injected into an 8-node lab (a node fault: a GPU XID; a link fault: a
degraded leaf port), three burn-in runs each name exactly those two, with the right kind, and the
burn-in document carries the evidence (real SSH, the real runner, the real collection)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, TEST_BASE_PORT, lab_up
from tuning import inventory
from tuning.burnin.localise import localise
from tuning.burnin.run import BurninOptions, run_burnin

pytestmark = pytest.mark.lab

RAILS = (0, 1)  # two rails: a port fault leaves the node's other rail fast, so it is a link, not the node


@pytest.fixture(scope="module")
def lab8(tmp_path_factory):
    from tuning.lab.inject import inject
    from tuning.lab.scale import write_inventory

    with lab_up(write_inventory(tmp_path_factory.mktemp("burnin") / "lab8", 8, base_port=TEST_BASE_PORT)) as inv_dir:
        port = {n.rdma_device: n for n in inventory.load(inv_dir).devices["node06"].spec.nics}["mlx5_1"]
        inject(inv_dir / ".state", "node03", "gpu-xid", "79")
        inject(inv_dir / ".state", f"{port.switch}:{port.switch_port}", "degrade")
        yield inv_dir, f"node06:mlx5_1<->{port.switch}:{port.switch_port}"


def _named(findings: list[dict]) -> list[tuple[str, str, str]]:
    return sorted((f["code"], f["kind"], f["target"]) for f in findings)


def test_three_burnin_runs_name_exactly_the_two_injected_faults(lab8, tmp_path: Path):
    inv_dir, link = lab8
    want = sorted([("gpu-xid", "node", "node03"), ("link-slow", "link", link)])
    inv = inventory.load(inv_dir)
    docs = []
    for run in range(2):  # two runs through the Python API ...
        lines: list[str] = []
        doc = run_burnin(inv, BurninOptions(iterations=1, rails=RAILS), lines.append)
        assert _named(doc["findings"]) == want, (run, doc["findings"])
        assert any("ETA" in ln for ln in lines) and lines[-1].startswith("2 finding(s)")
        docs.append(doc)
    out = tmp_path / "doc.json"  # ... and the third through the command line, as an operator runs it
    r = subprocess.run([sys.executable, "-m", "tuning", "burnin", "-i", str(inv_dir), "--iterations", "1",
                        "--rail", "0", "--rail", "1", "--report-json", str(out), "--drain-adapter", "slurm",
                        "--drain-log", str(tmp_path / "drain.log")], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 1, r.stderr[-2000:]
    third = json.loads(out.read_text())
    assert _named(third["findings"]) == want and _named(localise(third)) == want
    assert third["thresholds"] == {"slow_ratio": 0.8, "min_line_share": 0.5}  # what the HTML page states
    assert third["run_id"] in (tmp_path / "drain.log").read_text()  # the dry-run drain names the run

    rnd = docs[0]["rounds"][0]
    assert len(rnd["pairs"]) == 56 and rnd["errors"] == {}
    lost = [g for g in rnd["gpus"]["node03"] if g["xid"]]
    assert [(g["bdf"], g["xid"], g["lost"]) for g in lost] == [("0000:1b:00.0", [79], True)]
    assert all(not g["xid"] for n, gs in rnd["gpus"].items() if n != "node03" for g in gs)
    assert len(rnd["gpus"]["node01"]) == 8 and len(rnd["gpus"]["node03"]) == 8  # 7 rows + the lost GPU
    slow = [p for p in rnd["pairs"] if "node06:mlx5_1" in (p["client_nic"], p["server_nic"])]
    fast = [p for p in rnd["pairs"] if "node06:mlx5_1" not in (p["client_nic"], p["server_nic"])]
    assert len(slow) == 7 and max(p["bw_gbps"] for p in slow) < 0.6 * min(p["bw_gbps"] for p in fast)
    assert docs[1]["rounds"][0]["gpus"]["node03"][0]["xid"] == [79]  # a new run reports the log's XID again
