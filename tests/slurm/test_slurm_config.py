"""The Slurm lab's files without starting anything (fast tier): ports above the lab's own, the
``slurm.conf`` lines (slurm.conf(5), Slurm 22.05), munged's key and folder modes, the TaskProlog's
per-node environment, and the grammar checks on what reaches the files."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, TEST_BASE_PORT
from tuning.errors import InputError, TuningError
from tuning.lab import slurm
from tuning.lab.fabric import default_fabric, fabric_for_inventory


def test_ports_lie_above_the_lab_and_are_unique():
    p = slurm.ports(fabric_for_inventory(REPO / "inventory" / "lab"))
    assert p.slurmctld == 22204 and p.slurmd == {"node01": 22205, "node02": 22206, "node03": 22207, "node04": 22208}
    assert p.srun == (22209, 22240) and len(set(p.all())) == len(p.all()) == 1 + 4 + slurm.SRUN_PORTS
    big = slurm.ports(default_fabric(base_port=23000, n_nodes=100))
    assert big.slurmctld == 23111 and big.slurmd["node100"] == 23211 and big.srun[1] == 23243  # 8 leaves, 2 spines


def test_write_lays_out_conf_key_and_task_env(tmp_path):
    state = tmp_path / "lab" / ".state"
    conf = slurm.write(state, default_fabric(base_port=31000, n_nodes=2), tmp_path / "lab")
    text = conf.read_text()
    base = state.resolve() / "slurm"
    for line in ("ClusterName=fabtune-lab", "SlurmctldHost=localhost", "SlurmctldPort=31104",
                 "SrunPortRange=31107-31138", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
                 "SelectType=select/cons_tres", "ReturnToService=2", f"AuthInfo=socket={base}/munge/run/munge.sock",
                 f"StateSaveLocation={base}/state", f"SlurmdSpoolDir={base}/spool/%n", f"TaskProlog={base}/task_prolog",
                 f"RebootProgram={base}/reboot_program", "ResumeTimeout=180",
                 "NodeName=node01 NodeHostname=localhost Port=31105 CPUs=1 State=UNKNOWN",
                 "NodeName=node02 NodeHostname=localhost Port=31106 CPUs=1 State=UNKNOWN"):
        assert line in text.splitlines(), line
    key = base / "munge" / "etc" / "munge.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o400 and len(key.read_bytes()) == 1024
    assert stat.S_IMODE((base / "munge" / "etc").stat().st_mode) == 0o700
    env = (base / "env" / "node02.env").read_text().splitlines()
    assert env == [f"export FABTUNE_LAB_DIR={state.resolve()}", "export FABTUNE_LAB_NODE=node02",
                   f"export FABTUNE_LAB_SYSROOT={state.resolve()}/nodes/node02/sysroot",
                   f"export PATH={state.resolve()}/bin:/usr/local/bin:/usr/bin:/bin",
                   f"export FABTUNE_SYSROOT={state.resolve()}/nodes/node02/sysroot"]
    assert slurm.client_env(state) == {"SLURM_CONF": str(conf)}
    # the RebootProgram: this interpreter runs tuning.lab.slurm_reboot on the lab's state and inventory
    program = (base / "reboot_program").read_text().splitlines()
    assert program[-1] == (f'PYTHONPATH="{REPO.resolve()}" exec "{sys.executable}" -m tuning.lab.slurm_reboot '
                           f'"{state.resolve()}" "{(tmp_path / "lab").resolve()}"')
    assert stat.S_IMODE((base / "reboot_program").stat().st_mode) == 0o755


def test_a_state_folder_slurm_conf_cannot_carry_is_refused(tmp_path):
    with pytest.raises(InputError, match="slurm.conf"):
        slurm.write(tmp_path / "my lab" / ".state", default_fabric(base_port=31000, n_nodes=2), tmp_path)
    with pytest.raises(InputError, match="--inventory"):
        slurm.write(tmp_path / "lab" / ".state", default_fabric(base_port=31000, n_nodes=2), tmp_path / "my lab")
    fabric = default_fabric(base_port=31000, n_nodes=2)
    fabric.nodes[1].name = "node02 Port=1"
    with pytest.raises(InputError, match="node02 Port=1"):
        slurm.write(tmp_path / "lab", fabric, tmp_path)
    assert not (tmp_path / "lab" / "slurm").exists()


def test_down_without_a_slurm_lab_does_nothing(tmp_path: Path):
    assert slurm.down(tmp_path) is False and slurm.running(tmp_path) == {}


def test_a_daemon_that_exits_fails_up_at_once_with_its_log(tmp_path: Path, monkeypatch):
    """A daemon that exits while ``up`` waits (here munged on a 5-byte key, which it refuses) stops
    everything at once and names the daemon with its log's tail, instead of waiting out 30 s."""
    import os
    import time

    assert slurm.tool_path("munged") is not None, "munge is not installed: apt-get install munge"
    if os.geteuid() != 0 or slurm.privileges.in_user_namespace():  # a normal user's run: refused before any start
        with pytest.raises(TuningError, match="the Slurm lab needs real root"):
            slurm.check(default_fabric(base_port=TEST_BASE_PORT + 150, n_nodes=1))
        return
    write = slurm.write

    def write_short_key(state_dir, fabric, inventory):
        conf = write(state_dir, fabric, inventory)
        (conf.parent / "munge" / "etc" / "munge.key").write_bytes(b"short")
        return conf

    monkeypatch.setattr(slurm, "write", write_short_key)
    state, start = tmp_path / "lab" / ".state", time.monotonic()
    with pytest.raises(TuningError, match=r"munged made no socket: munged exited\):\n(.|\n)*munged.log: "):
        slurm.up(state, default_fabric(base_port=TEST_BASE_PORT + 150, n_nodes=1), tmp_path / "lab")
    assert time.monotonic() - start < 10 and slurm.running(state) == {}


def test_a_daemon_still_inside_execve_counts_as_running():
    """Right after Popen returns, ``/proc/PID/cmdline`` of the child may still read empty (35 of 300
    starts of munged here): ``running`` and ``down`` must not take that for an exited daemon."""
    import subprocess

    procs, seen = [], []
    try:
        for _ in range(100):  # each read at once after its Popen (the old rule said "exited" for 20 of 100)
            procs.append(subprocess.Popen(["sleep", "30"], start_new_session=True))
            seen.append(slurm.runs(procs[-1].pid, "sleep"))
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert all(seen) and not any(slurm.runs(p.pid, "sleep") for p in procs)
