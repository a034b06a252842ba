"""``fabtune lab status`` rows of the schedulers started beside a lab (issue 23): each recorded
process with its port, ``NO`` when it no longer runs, none when no scheduler was started. In-process
on a state folder whose ``pids.json`` files name processes that are gone (the running daemons' rows:
tests/slurm/test_slurm_lab.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from tuning.lab import k8s, schedulers, slurm
from tuning.lab.fabric import default_fabric


def _gone_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_rows_name_each_recorded_process_and_its_port_and_say_no_when_it_is_gone(tmp_path):
    fabric = default_fabric(n_nodes=2)
    assert schedulers.endpoints(tmp_path, fabric, lambda port: True) == []  # none started: no rows
    pid = _gone_pid()
    (tmp_path / slurm.FOLDER).mkdir()
    (tmp_path / slurm.FOLDER / "pids.json").write_text(json.dumps(
        {"munged": pid, "slurmctld": pid, "slurmd node01": pid, "slurmd node02": pid}))
    k8s.folder(tmp_path).mkdir()
    (k8s.folder(tmp_path) / "pids.json").write_text(json.dumps({"apiserver": pid, "agent node01": pid}))
    ports = slurm.ports(fabric)
    rows = schedulers.endpoints(tmp_path, fabric, lambda port: True)
    assert [(r["name"], r["kind"], r["port"], r["up"]) for r in rows] == [
        ("munged", "slurm", None, False), ("slurmctld", "slurm", ports.slurmctld, False),
        ("slurmd node01", "slurm", ports.slurmd["node01"], False),
        ("slurmd node02", "slurm", ports.slurmd["node02"], False),
        ("apiserver", "k8s", k8s.port(fabric), False), ("agent node01", "k8s", None, False)]
    assert k8s.port(fabric) == ports.srun[1] + 1
