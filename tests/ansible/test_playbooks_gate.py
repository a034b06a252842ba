"""The batch gate of ``playbooks/tune.yml`` against the lab over real SSH (issue 9): a verified run
of every domain in two serial batches measures the baseline, pushes the switches with
commit-confirm, verifies each node batch as the Nornir rollout does, confirms the switches and
keeps the run, merges the baseline, and ``fabtune report RUN_ID`` reads the journal unchanged.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ansible.playbook_run import journals, play
from tuning.rollout.baseline import baseline_path

pytestmark = pytest.mark.ansible


def test_verified_run_in_two_batches_is_kept(lab_inventory: Path, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    run = play(lab_inventory, "tune.yml", "-e", '{"fabtune_serial": [2], "fabtune_rollout": {"incast": {"enabled": false}}}',
               journal=journal)
    assert run.rc == 0, run.out[-4000:]
    [doc] = journals(journal)
    assert (doc["engine"], doc["mode"], doc["outcome"]) == ("ansible", "rollout", "kept")
    assert [(b["nodes"], b["outcome"], b["verify_ok"]) for b in doc["batches"]] == [
        (["node01", "node02"], "kept", True), (["node03", "node04"], "kept", True)]
    assert all(doc["devices"][s]["confirmed"] for s in ("leaf01", "leaf02", "spine01"))
    # begin's snapshot of every selected device (batch, plan, connection) survives the pushes' merges
    assert {n: rec["batch"] for n, rec in doc["devices"].items()} == {
        "node01": 1, "node02": 1, "node03": 2, "node04": 2, "leaf01": 1, "leaf02": 1, "spine01": 1}
    assert doc["verify"]["before"] and all(x["status"] == "pass" for x in doc["verify"]["after"])
    assert [e[0] for e in doc["events"]][:3] == ["snapshot", "baseline", "apply"]
    assert baseline_path(journal, lab_inventory).exists()
    rep = subprocess.run([sys.executable, "-m", "tuning", "report", doc["run_id"], "--journal-dir", str(journal),
                          "--json"], capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr[-2000:]
    got = json.loads(rep.stdout)
    assert got["outcome"] == "kept" and [b["outcome"] for b in got["batches"]] == ["kept", "kept"]
