"""How ``rollout --engine slurm`` reads what Slurm said (fast tier, no Slurm needed): the per-task
result files of an ``srun`` step, srun's failed-task lines as Slurm 22.05 prints them (taken from
the Slurm lab: ``srun: error: node02: task 1: Exited with exit code 4``), and which node states and
reasons it leaves alone."""

from __future__ import annotations

import json

from tuning.errors import ConnectError, RollbackError, TuningError
from tuning.slurm_engine import refusal, task_results

RUN = "20261203T150000-ab12cd"


def _task(tmp_path, tag: str, t: int, out: str = "", err: str = "") -> None:
    (tmp_path / f"{tag}-{t}.out").write_text(out)
    (tmp_path / f"{tag}-{t}.err").write_text(err)


def test_results_and_failed_tasks_as_srun_reports_them(tmp_path):
    ok = {"command": "node apply", "node": "node01", "run_id": RUN, "pushed": True, "changes": []}
    _task(tmp_path, "apply-b1", 0, json.dumps(ok, indent=2))
    _task(tmp_path, "apply-b1", 1, err="fabtune: error: node02: sysctl: tee: Permission denied\n")
    _task(tmp_path, "apply-b1", 2, err="fabtune: error: restore failed on node03: ...\n")
    _task(tmp_path, "apply-b1", 3)
    srun = ("srun: error: node02: task 1: Exited with exit code 1\n"
            "srun: error: node03: task 2: Exited with exit code 3\n"
            "srun: error: node04: task 3: Killed\n")
    results, errors = task_results(tmp_path, "apply-b1", ["node01", "node02", "node03", "node04", "node05"], srun, 137)
    assert results == {"node01": ok}
    assert type(errors["node02"]) is TuningError and str(errors["node02"]) == (
        "node02: srun task on node02: Exited with exit code 1: fabtune: error: node02: sysctl: tee: Permission denied")
    assert isinstance(errors["node03"], RollbackError) and errors["node03"].exit_code == 3
    assert isinstance(errors["node04"], ConnectError) and "Killed: no error text" in str(errors["node04"])
    # no result and no line about it: srun's own words (a node lost with the step)
    assert isinstance(errors["node05"], ConnectError) and str(errors["node05"]).startswith(
        "node05: srun (exit 137) gave no result for node05: srun: error: node02: task 1:")


def test_nodes_slurm_cannot_hold_for_the_run():
    assert refusal(RUN, "node01", "idle", "") is None
    assert refusal(RUN, "node01", "mixed", "") is None  # busy: the allocation waits --immediate, then fails
    assert refusal(RUN, "node02", "drained", "bad DIMM") == \
        "Slurm: node02 is drained with reason 'bad DIMM', not this run's: left alone"
    assert refusal(RUN, "node02", "idle", "fabtune:20261203T140000-ffffff: rollout batch 1/2") is not None
    assert refusal(RUN, "node03", "down*", "") == "Slurm: node03 is down*: no task can run there"
    assert refusal(RUN, "node04", "", "") == "Slurm: node04 is not in sinfo: no task can run there"
    assert refusal(RUN, "node05", "drained", f"fabtune:{RUN}: rollout batch 1/2") is not None  # a leftover of its own
