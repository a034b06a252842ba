"""How ``rollout --engine slurm`` reads what Slurm said (fast tier, no Slurm needed): the per-task
result files of an ``srun`` step, srun's failed-task lines as Slurm 22.05 prints them (taken from
the Slurm lab: ``srun: error: node02: task 1: Exited with exit code 4``), and which node states and
reasons it leaves alone."""

from __future__ import annotations

import json

import pytest

from tuning.errors import ConnectError, InputError, RollbackError, SetupError, TuningError
from tuning.slurm_engine import refusal
from tuning.slurm_tasks import task_results
from tuning.slurm_holds import journaled

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


def test_a_task_that_refused_its_input_is_a_setup_error_with_what_to_fix(tmp_path):
    """Exit 2 of a task is the node refusing its input before any write (fabtune's bad-input exit,
    and execve's ENOENT as slurmstepd reports a command not on the node): exit 2 for the run, with
    the node's words and what to set."""
    _task(tmp_path, "collect", 0, err="slurmstepd-node01: error: execve(): fabtune: No such file or directory\n")
    _task(tmp_path, "collect", 1, err="fabtune: error: /shared/inv: inventory folder not found\n")
    srun = ("srun: error: node01: task 0: Exited with exit code 2\n"
            "srun: error: node02: task 1: Exited with exit code 2\n")
    _, errors = task_results(tmp_path, "collect", ["node01", "node02"], srun, 2)
    assert isinstance(errors["node01"], SetupError) and errors["node01"].exit_code == 2
    assert str(errors["node01"]) == ("node01: srun task on node01: Exited with exit code 2: slurmstepd-node01: error: "
                                     "execve(): fabtune: No such file or directory; set FABTUNE_NODE_COMMAND to "
                                     "fabtune's path on the nodes")
    assert str(errors["node02"]).endswith("inventory folder not found; the inventory and journal folder must be at "
                                          "the same paths on the nodes (a shared file system)")


def test_the_holds_a_journal_names_pass_the_grammar_before_any_slurm_call():
    """What ``fabtune rollback`` ends (tuning/slurm_holds.py) comes from a file: a job id that is not
    digits or a node name outside the host-name grammar is refused, never handed to scancel/scontrol."""
    reason = f"fabtune:{RUN}: rollout batch 1/2"
    doc = {"slurm_holds": {"42": {"nodes": ["node01", "node02"], "drained": {"node01": reason}},
                           "7": {"nodes": ["node03"], "drained": {}}}}
    assert [(h.job, h.nodes, h.drained) for h in journaled(doc)] == [
        ("7", ["node03"], {}), ("42", ["node01", "node02"], {"node01": reason})]
    assert journaled({}) == []
    for bad in ({"42; reboot": {"nodes": ["node01"]}}, {"-1": {"nodes": []}}, {"42": ["node01"]},
                {"42": {"nodes": ["node01 --all"]}}, {"42": {"nodes": [], "drained": {"../x": reason}}}):
        with pytest.raises(InputError, match="slurm_holds"):
            journaled({"slurm_holds": bad})


def test_a_slurm_conf_that_is_not_there_is_refused_at_once_before_anything(tmp_path):
    """``$SLURM_CONF`` naming no file: exit 2 naming it, before the lock, the journal or any device
    (sinfo itself would retry the file for 60 s)."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO, copy_lab_inventory_files

    inv = copy_lab_inventory_files(tmp_path / "inv")
    env = {**os.environ, "SLURM_CONF": str(tmp_path / "nowhere" / "slurm.conf")}
    r = subprocess.run([sys.executable, "-m", "tuning", "rollout", "-i", str(inv), "--engine", "slurm",
                        "--journal-dir", str(tmp_path / "j")], capture_output=True, text=True, cwd=REPO, env=env,
                       timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        f"fabtune: error: --engine slurm: $SLURM_CONF is {tmp_path}/nowhere/slurm.conf: no such file; set "
        "SLURM_CONF to the cluster's slurm.conf")
    assert not (tmp_path / "j").exists() and not list(inv.glob(".fabtune*"))


def test_rollback_of_a_held_run_without_a_readable_slurm_config_is_exit_2_naming_it(tmp_path):
    """A killed run's hold ended by `fabtune rollback` with ``$SLURM_CONF`` naming no file: one line,
    exit 2, naming the variable (the tryout's rollback said scancel's DNS SRV words, exit 1), and the
    hold stays in the journal for the next try."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO
    from tuning.rollout.journal import Journal

    j = Journal.create(tmp_path, "inventory/lab", "rollout", run_id=RUN)
    j.data["slurm_holds"] = {"42": {"nodes": ["node01"], "drained": {"node01": f"fabtune:{RUN}: rollout batch 1/1"}}}
    j.save()
    env = {**os.environ, "SLURM_CONF": str(tmp_path / "nowhere.conf")}
    r = subprocess.run([sys.executable, "-m", "tuning", "rollback", RUN, "--journal-dir", str(tmp_path)],
                       capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        f"fabtune: error: slurm: $SLURM_CONF is {tmp_path}/nowhere.conf: no such file; set SLURM_CONF to the "
        "cluster's slurm.conf")
    assert Journal.load(tmp_path, RUN).data["slurm_holds"] == j.data["slurm_holds"]


def test_a_task_that_exited_0_without_a_result_is_a_setup_error_naming_the_node_command(tmp_path):
    """``FABTUNE_NODE_COMMAND=/bin/true`` (a tryout): srun exits 0, no task failed and none printed a
    result: the node command is not fabtune's (or its output is not where the controller reads it):
    exit 2 naming the variable, not an unreachable node (exit 4, "nothing said")."""
    _task(tmp_path, "collect", 0)
    _, errors = task_results(tmp_path, "collect", ["node01"], "", 0)
    assert isinstance(errors["node01"], SetupError) and errors["node01"].exit_code == 2
    assert str(errors["node01"]) == (
        "node01: srun task on node01 exited 0 without a JSON result: set FABTUNE_NODE_COMMAND to fabtune's path on "
        "the nodes; the journal folder must be at the same path on the nodes (a shared file system)")


def test_holds_of_a_run_whose_controller_still_runs_are_not_ended_by_a_rollback(tmp_path, monkeypatch):
    """`fabtune rollback RUN` while RUN's controller is alive and has touched nothing yet (a tryout:
    during its drain; the rollback scancelled its job under it, exit 0): the inventory's run lock
    held by a live process refuses it (exit 2, naming the holder) before any Slurm call, and the
    journal keeps the hold and the request."""
    from tuning.rollout.journal import Journal
    from tuning.rollout.lock import LockError, RunLock, lock_path
    from tuning.slurm_holds import end_journaled

    inv = tmp_path / "inv"
    inv.mkdir()
    conf = tmp_path / "slurm.conf"
    conf.write_text("")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    j = Journal.create(tmp_path / "j", str(inv), "rollout", run_id=RUN)
    j.data["slurm_holds"] = {"42": {"nodes": ["node01"], "drained": {"node01": f"fabtune:{RUN}: rollout batch 1/1"}}}
    j.data["slurm_request"] = ["node02"]
    j.save()
    with RunLock(lock_path(inv), RUN, "rollout", j.path):  # this live process is the run's controller
        with pytest.raises(LockError, match=f"another run holds this inventory: run {RUN} \\(rollout, pid "):
            end_journaled(j, lambda m: None)
    assert Journal.load(tmp_path / "j", RUN).data["slurm_holds"] == j.data["slurm_holds"]
    assert Journal.load(tmp_path / "j", RUN).data["slurm_request"] == ["node02"]


def test_a_slurm_controller_that_does_not_answer_is_exit_2_before_anything(tmp_path, monkeypatch):
    """slurmctld stopped (a tryout on the Slurm lab: `fabtune rollout --engine slurm` said sinfo's
    words with exit 4, an unreachable device's code): a setup error, exit 2, with sinfo's words and
    what to check. The stand-in sinfo prints what Debian's sinfo 22.05 printed there."""
    from tuning.slurm_engine import preflight

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sinfo").write_text("#!/bin/sh\necho 'slurm_load_partitions: Unable to contact slurm controller "
                                   "(connect failure)' >&2\nexit 1\n")
    (bin_dir / "sinfo").chmod(0o755)
    (tmp_path / "slurm.conf").write_text("ClusterName=lab\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    with pytest.raises(SetupError) as e:
        preflight(["node01"])
    assert e.value.exit_code == 2 and str(e.value) == (
        "--engine slurm: sinfo: exit 1: slurm_load_partitions: Unable to contact slurm controller (connect failure); "
        "check that slurmctld (and munged) run and answer, or set SLURM_CONF to the cluster's slurm.conf")


def test_a_killed_controllers_collect_folders_are_swept_by_the_next_collect_of_its_host(tmp_path):
    import os
    import socket
    import subprocess

    from tuning.slurm_tasks import COLLECT_PREFIX, collect_dir

    host = socket.gethostname()
    done = subprocess.Popen(["true"])
    done.wait()  # a pid no process has now (reaped)
    dead = tmp_path / f"{COLLECT_PREFIX}{host}-{done.pid}-abcd1234"
    live = tmp_path / f"{COLLECT_PREFIX}{host}-{os.getpid()}-efgh5678"
    other = tmp_path / f"{COLLECT_PREFIX}otherhost-{done.pid}-ijkl9012"
    old = tmp_path / ".fabtune-collect-mnop3456"  # an older release's name: whose it was is unknown
    for d in (dead, live, other, old):
        d.mkdir()
        (d / "collect-0.out").write_text("{}")
    link = tmp_path / f"{COLLECT_PREFIX}{host}-{done.pid}-link0000"
    link.symlink_to(other)
    made = collect_dir(tmp_path)
    assert made.is_dir() and made.name.startswith(f"{COLLECT_PREFIX}{host}-{os.getpid()}-")
    assert not dead.exists() and live.is_dir() and other.is_dir() and old.is_dir()
    assert link.is_symlink() and (other / "collect-0.out").read_text() == "{}"
