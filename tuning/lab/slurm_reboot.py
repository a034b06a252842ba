"""The Slurm lab's ``RebootProgram``: a lab node's reboot, as slurmctld asks for it (``scontrol reboot``).

``slurm.conf(5)`` (Slurm 22.05): RebootProgram is "executed on each compute node to reboot it", once
the node is idle after ``scontrol reboot``; "a node will be marked DOWN if it doesn't reboot within
ResumeTimeout". slurmd runs it with ``system()`` and no arguments (Slurm 22.05 ``src/slurmd/slurmd/req.c``
``_rpc_reboot``: the first word of the setting only), in slurmd's own environment; the lab starts
each slurmd with :data:`NODE_ENV` naming its node, so the program knows which node it is.

What it does, as a real node's reboot would (:func:`main`):

1. returns at once (a detached child does the rest), as ``systemctl reboot`` returns to its caller;
2. stops that node's ``slurmd`` (the machine goes down: slurmctld stops hearing from it);
3. reboots the lab node with ``fabtune lab reboot NODE`` (:func:`tuning.lab.boot.reboot`: live
   values back to power-on, the boot loader's command line into ``/proc/cmdline``, then boot runs
   what is persisted);
4. starts the node's ``slurmd -D -b -N NODE`` again: ``-b`` "Report node rebooted when daemon
   restarted. Used for testing purposes." (``slurmd(8)``), so slurmctld sees a new BootTime, as
   after a real boot. A failed step 3 leaves slurmd down, as a node that does not boot: slurmctld
   marks it DOWN after ResumeTimeout ("reboot timed out").

Each step is logged in ``<state>/slurm/log/reboot.<node>.log``; the new slurmd's pid replaces the
old one in ``pids.json`` under an flock (two nodes may reboot at once).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tuning.model.grammar import check_host_name

#: the environment variable naming a slurmd's lab node (set by :func:`tuning.lab.slurm.up` per slurmd)
NODE_ENV = "FABTUNE_SLURMD_NODE"
STOP_S = 5.0  # a slurmd that does not end on SIGTERM within this is killed


def program_text(python: str, repo: str, state_dir: Path, inventory: Path) -> str:
    """The ``RebootProgram`` script (all paths already through the path grammar)."""
    return (f"#!/bin/sh\n# fabtune lab RebootProgram (tuning.lab.slurm_reboot); slurmd runs it with {NODE_ENV} set\n"
            f'PYTHONPATH="{repo}" exec "{python}" -m tuning.lab.slurm_reboot "{state_dir}" "{inventory}"\n')


def _pids(base: Path, update: dict[str, int] | None = None) -> dict[str, int]:
    """``pids.json`` of the Slurm lab (read, or read and updated with ``update``), under its flock."""
    with open(base / "pids.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = base / "pids.json"
        pids = json.loads(path.read_text()) if path.is_file() else {}
        if update:
            pids.update(update)
            tmp = path.with_name("pids.json.tmp")
            tmp.write_text(json.dumps(pids, indent=2) + "\n")
            tmp.replace(path)
        return pids


def _stop(pid: int) -> None:
    """SIGTERM, then SIGKILL after :data:`STOP_S`; returns once ``pid`` is gone (or is not slurmd)."""
    from tuning.lab.slurm import runs

    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not runs(pid, "slurmd"):
            return
        os.kill(pid, sig)
        deadline = time.monotonic() + STOP_S
        while time.monotonic() < deadline and runs(pid, "slurmd"):
            time.sleep(0.05)


def reboot(state_dir: Path, inventory: Path, node: str, log) -> int:
    """Steps 2-4 of the module docstring for ``node``; 0 when its slurmd runs again, 1 when the
    node's boot failed (slurmd left down)."""
    from tuning.lab.slurm import FOLDER, _spawn, tool_path

    base = state_dir / FOLDER
    old = _pids(base).get(f"slurmd {node}")
    print(f"reboot {node}: stopping slurmd (pid {old})", file=log, flush=True)
    if old:
        _stop(int(old))
    boot = subprocess.run([sys.executable, "-m", "tuning", "lab", "reboot", node, "-i", str(inventory),
                           "--state-dir", str(state_dir)], capture_output=True, text=True, timeout=600)
    print(f"reboot {node}: fabtune lab reboot: exit {boot.returncode}: {(boot.stdout + boot.stderr).strip()}",
          file=log, flush=True)
    if boot.returncode != 0:
        return 1
    pid = _spawn([tool_path("slurmd") or "slurmd", "-D", "-b", "-N", node], base / "log" / f"slurmd.{node}.out",
                 dict(os.environ), base)
    _pids(base, {f"slurmd {node}": pid})
    print(f"reboot {node}: slurmd -b started (pid {pid})", file=log, flush=True)
    return 0


def main(argv: list[str]) -> int:
    """``python -m tuning.lab.slurm_reboot STATE_DIR INVENTORY`` as slurmd runs it (module docstring).
    Exit 2 when the node or the arguments are not the lab's; else 0 at once (the reboot goes on detached)."""
    node = os.environ.get(NODE_ENV, "")
    try:
        check_host_name(node)
    except ValueError as e:
        print(f"fabtune lab RebootProgram: {NODE_ENV}: {e}", file=sys.stderr)
        return 2
    if len(argv) != 2:
        print("fabtune lab RebootProgram: arguments: STATE_DIR INVENTORY", file=sys.stderr)
        return 2
    from tuning.lab.slurm import FOLDER

    state_dir, inventory = Path(argv[0]), Path(argv[1])
    if os.fork():
        return 0  # slurmd's system() returns; the node goes down meanwhile
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # not slurmd's output: that slurmd is about to end
        os.dup2(null, fd)
    with open(state_dir / FOLDER / "log" / f"reboot.{node}.log", "a") as log:
        os._exit(reboot(state_dir, inventory, node, log))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
