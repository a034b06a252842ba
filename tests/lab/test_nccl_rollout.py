"""A rollout with the policy's nccl enabled runs all_reduce_perf in the lab (Open MPI's mpirun on the
first node, over real SSH, each node's NCCL environment read from it), records its bus bandwidth in
the report and the baseline, and a NIC degraded between its baseline and its verification (on rail
3, which the rail-0 pairs never cross: only NCCL sees it) is judged regressed and rolled back, and
the restored fabric is measured with NCCL again. `fabtune verify` alone judges the job against the
baseline a kept rollout recorded.
Each rollout changes the nodes' MTU alone (9000: RoCE MTU 4096 instead of 1024; the switches and
the nodes' QoS stay as they are, lossy), verified on rail 0 only, incast off, to stay short."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.engine.test_verify_rails import _inject_when_verifying
from tuning import inventory
from tuning.lab.inject import inject
from tuning.model.policy import IncastPolicy, NcclPolicy, RolloutPolicy
from tuning.rollout import engine
from tuning.rollout.baseline import baseline_path
from tuning.rollout.engine import Options
from tuning.verify.pair_verdict import Thresholds

pytestmark = pytest.mark.lab

POLICY = RolloutPolicy(nccl=NcclPolicy(enabled=True), incast=IncastPolicy(enabled=False))


NODES = ["node01", "node02", "node03", "node04"]


def _options(journal: Path, nodes: list[str] = NODES) -> Options:
    """Rollout of ``nodes``' MTU alone: the fabric stays lossy, so the pairs are judged on
    regression, their absolute marks set out of the way."""
    return Options(mode="rollout", journal_dir=journal, limit=nodes, rails=(0,), policy=POLICY, domains={"mtu"},
                   thresholds=Thresholds(min_bw_gbps=1.0, max_lat_us=1000.0))


def test_a_kept_rollout_records_the_bus_bandwidth_of_its_nccl_job(lab_inventory: Path, tmp_path: Path):
    journal = tmp_path / "j"
    rep = engine.run(inventory.load(lab_inventory), _options(journal))
    assert rep.outcome == "kept", rep.nccl_after
    [before], [after] = rep.nccl_before, rep.nccl_after
    assert before["nodes"] == after["nodes"] == NODES and after["status"] == "pass"
    assert after["command"].startswith("mpirun -np 1 --host node01 -x NCCL_IB_HCA==mlx5_0:1,")
    assert after["env"]["node02"]["NCCL_IB_TC"] == "106" and after["tos"] == 106 and after["n_ranks"] == 32
    assert "NCCL_IB_GID_INDEX" not in after["env"]["node03"]  # its NICs' RoCE v2 GIDs differ (3 and 5): a note
    # netdev MTU 1500 before (RoCE MTU 1024: 91.3 % of line rate), 9000 after (4096: 97.7 %)
    assert after["busbw_gbs"] > 1.05 * before["busbw_gbs"] > 0, (before["busbw_gbs"], after["busbw_gbs"])
    assert "within the 5 % mark" in after["judged"]
    saved = json.loads(baseline_path(journal, lab_inventory).read_text())
    assert saved["nccl:all_reduce_perf:node01,node02,node03,node04"]["busbw_gbs"] == after["busbw_gbs"]
    # people read it too: `fabtune report RUN_ID` (from the journal) prints the job's line
    shown = subprocess.run([sys.executable, "-m", "tuning", "report", rep.run_id, "--journal-dir", str(journal)],
                           capture_output=True, text=True, cwd=REPO, timeout=60)
    assert (f"nccl-tests all_reduce_perf over node01..node04: {after['busbw_gbs']:.1f} GB/s bus bandwidth (baseline "
            f"{after['baseline_gbs']:.1f} GB/s): pass") in " ".join(shown.stdout.split()), shown.stdout[-1500:]
    # a second rollout changes nothing: it runs no nccl-tests job nothing would be judged against
    again = engine.run(inventory.load(lab_inventory), _options(journal))
    assert (again.outcome, again.nccl_before, again.nccl_after) == ("no-change", [], []), again.outcome
    # `fabtune verify` alone, the policy's nccl on: the job again, judged against the kept run's
    with (lab_inventory / "group_vars" / "all.yml").open("a") as f:
        f.write("fabtune_rollout: {nccl: {enabled: true, pairs: true}, incast: {enabled: false}}\n")
    got = subprocess.run([sys.executable, "-m", "tuning", "verify", "-i", str(lab_inventory), "--journal-dir",
                          str(journal), "--rail", "0", "--min-bw", "1", "--max-lat", "1000", "--json"],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert got.returncode == 0, got.stdout[-1500:] + got.stderr[-1500:]
    job, *pairs = json.loads(got.stdout)["nccl_after"]
    assert (job["nodes"], job["status"], job["baseline_gbs"]) == (NODES, "pass", after["busbw_gbs"]), job
    assert job["judged"].startswith(f"bus bandwidth {job['busbw_gbs']:g} GB/s vs baseline {after['busbw_gbs']:g}")
    # nccl.pairs: a job per node pair too (no baseline of theirs yet: judged on a value alone)
    assert [(p["nodes"], p["status"], p["baseline_gbs"]) for p in pairs] == [
        (["node01", "node02"], "pass", None), (["node03", "node04"], "pass", None)], pairs
    assert all(p["busbw_gbs"] > 0 and p["n_ranks"] == 16 for p in pairs), pairs


def test_a_nic_degraded_after_the_baseline_makes_the_nccl_judgement_regress_and_roll_back(
        lab_inventory: Path, tmp_path: Path, monkeypatch):
    journal = tmp_path / "j"
    monkeypatch.setenv("FABTUNE_TEST_PAUSE_AT", "verify:2")  # time for the watcher to inject
    watcher = _inject_when_verifying(journal, lab_inventory / ".state", "node04:mlx5_3")
    try:
        rep = engine.run(inventory.load(lab_inventory), _options(journal))
    finally:
        watcher.join(timeout=5)
        inject(lab_inventory / ".state", "node04:mlx5_3", "clear")
    assert [p["pair"] for p in rep.verify_after if p["status"] != "pass"] == []  # rail 0 only: the pairs pass
    [after] = rep.nccl_after
    assert after["status"] == "fail" and "past the 5 % mark" in after["judged"], after
    assert after["busbw_gbs"] < 0.6 * after["baseline_gbs"]  # the ring waits on its slowest NIC: -50 %
    assert rep.outcome == "rolled-back" and set(rep.restored) == set(NODES)
    # the restored fabric is measured again with NCCL: the NIC is still degraded (the change was not
    # the fault), so the restore is NOT back to the baseline, and the report says so
    [again] = rep.nccl_restored
    assert again["status"] == "fail" and again["busbw_gbs"] < 0.6 * again["baseline_gbs"], again
    assert rep.restored_verified is False
    # the halt names NCCL, not the pairs that passed (the journal's last event holds why)
    events = json.loads((journal / f"{rep.run_id}.json").read_text())["events"]
    assert "batch 1: every pair passed, nccl-tests did not: all_reduce_perf over node01..node04 regressed" in events[-1][1], events[-3:]
