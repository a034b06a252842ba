"""The batch gate restores (issue 9, "gated by the same verification and rollback as the Nornir
path"): a lab link degraded before the run fails the gate's verification after the push; the batch
(here every device: one batch) is restored from the journal, verified restored, the play stops
with a one-line failure and the journal says ``rolled-back``; every lab byte is back.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.ansible.playbook_run import journals, play
from tests.conftest import snapshot_fabric
from tuning.lab.inject import inject

pytestmark = pytest.mark.ansible


def test_a_failed_gate_restores_the_batch(lab_inventory: Path, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    inject(lab_inventory / ".state", "node03:mlx5_0", "degrade")
    untuned = snapshot_fabric(lab_inventory)
    try:
        run = play(lab_inventory, "tune.yml", "-e", '{"fabtune_rollout": {"incast": {"enabled": false}}}',
                   journal=journal)
    finally:
        now = snapshot_fabric(lab_inventory)
        inject(lab_inventory / ".state", "node03:mlx5_0", "clear")
    assert run.rc == 2, run.out[-4000:]
    # the task's line names the failed pair with its evidence, then what it restored
    assert re.search(r"batch 1: verification failed or regressed; node\d\d:mlx5_\d->node\d\d:mlx5_\d: [^;]*"
                     r".*; restored \([a-z0-9, ]*node03[a-z0-9, ]*\); run \S+ rolled-back", run.out), run.out[-4000:]
    [doc] = journals(journal)
    assert doc["outcome"] == "rolled-back" and doc["restored_verified"] is True
    assert doc["batches"][0]["outcome"] == "restored" and doc["batches"][0]["verify_ok"] is False
    assert any("node03:mlx5_0" in x["pair"] and x["status"] != "pass" for x in doc["verify"]["after"])
    assert all(rec.get("restored") for rec in doc["devices"].values() if rec.get("state"))
    assert sorted(k for k in set(now) | set(untuned) if now.get(k) != untuned.get(k) and not k.endswith(":revision")) == []
    assert not (lab_inventory / ".fabtune.lock").exists()  # the halted run released its lock
