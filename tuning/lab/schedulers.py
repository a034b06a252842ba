"""The schedulers started beside a lab (``fabtune lab up --slurm`` / ``--k8s``: :mod:`tuning.lab.slurm`,
:mod:`tuning.lab.k8s`) as rows of ``fabtune lab status``: one per process each recorded in its
``pids.json``, with the port it serves (none for munged's socket and the k8s agents) and whether it
runs and, where it has a port, answers on it. A scheduler that was not started has no rows.
"""

from __future__ import annotations

from pathlib import Path

from tuning.lab import k8s, slurm
from tuning.lab.fabric import Fabric


def endpoints(state_dir: Path, fabric: Fabric, port_open) -> list[dict]:
    """``[{"name", "kind", "port", "up"}]`` (kind ``slurm`` or ``k8s``; port None where the process
    serves none), in start order. ``port_open(port) -> bool``: the lab's TCP probe."""
    rows = []
    ports = slurm.ports(fabric)
    for name, pid in slurm.recorded(state_dir).items():
        program, _, node = name.partition(" ")
        port = ports.slurmctld if program == "slurmctld" else ports.slurmd.get(node) if program == "slurmd" else None
        rows.append(_row(name, "slurm", port, slurm.runs(pid, program), port_open))
    for name, pid in k8s.recorded(state_dir).items():
        rows.append(_row(name, "k8s", k8s.port(fabric) if name == "apiserver" else None, k8s.runs(pid), port_open))
    return rows


def _row(name: str, kind: str, port: int | None, runs: bool, port_open) -> dict:
    return {"name": name, "kind": kind, "port": port, "up": runs and (port is None or port_open(port))}
