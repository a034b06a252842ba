"""The Slurm lab of the tests in this folder (issue 23): ``fabtune lab up --slurm`` (Debian's real Slurm
22.05 and munge) beside a 2-node lab, one per test module. As real root, as CI runs: a normal user's
``make test`` runs in a user namespace, where slurmctld and slurmd stop at setgroups, and the fixture
asserts the one-line refusal instead. Slurm missing is a failure, never a skip: ``.ci/run`` installs it.

Ports from 50 into this process's own test port range (``tests.conftest.TEST_BASE_PORT``): its nodes
at +1..+2, switches +101..+103, Slurm +104.. (``tuning.lab.slurm.ports``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, TEST_BASE_PORT
from tuning.errors import SetupError
from tuning.lab import privileges, slurm


def fab(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """``fabtune ARGS`` from the repository, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "tuning", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=env)


def _base_port() -> int:
    """50 ports into this process's own test port range (``TEST_BASE_PORT``, claimed for the process's
    life, so no other pytest process listens there; the tests' fixed ports and the pool's +300 lie
    elsewhere in it). Stop 38's CI: taking one of two fixed ranges (31800, 31000) left a worker none
    when the others held both, and every Slurm and k8s lab test of that worker errored."""
    return TEST_BASE_PORT + 50


def client(env: dict, *argv: str) -> str:
    """A Slurm client's stdout (sinfo, scontrol, srun; ``env`` has the lab's SLURM_CONF); exit 0 asserted."""
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30)
    assert p.returncode == 0, f"{argv}: exit {p.returncode}: {p.stderr}"
    return p.stdout


def reasons(env: dict) -> dict[str, str]:
    """``sinfo -R``'s reason per node (``{"node02": "bad DIMM"}``): what Slurm shows an operator."""
    return dict(line.split("|")[::-1] for line in client(env, "sinfo", "-R", "-h", "-N", "-o", "%E|%N").splitlines())


@pytest.fixture(scope="module")
def slurm_lab(tmp_path_factory):
    """``(inventory, client env)`` of a running 2-node lab with its Slurm; stopped after the module."""
    missing = [tool for tool in slurm.DAEMONS + slurm.CLIENTS if slurm.tool_path(tool) is None]
    assert not missing, f"Slurm is not installed ({missing}): apt-get install slurmctld slurmd slurm-client munge"
    if os.geteuid() != 0 or privileges.in_user_namespace():  # `make test` as a normal user: refused, one line
        from tuning.lab.fabric import default_fabric

        with pytest.raises(SetupError, match="the Slurm lab needs real root"):
            slurm.check(default_fabric(n_nodes=2))
        pytest.xfail("refused as it must be: the Slurm lab needs real root (slurmd stops at setgroups in a "
                     "user namespace); the lab tests run under root (CI)")
    base = _base_port()
    daemons: dict[str, int] = {}
    inv = tmp_path_factory.mktemp("slurm") / "lab2"
    try:
        r = fab("lab", "init", str(inv), "--nodes", "2", "--base-port", str(base))
        assert r.returncode == 0, r.stderr
        # no second start: "munged made no socket: munged exited" with an empty log was the lab reading
        # an empty /proc/PID/cmdline of a daemon still inside execve (tuning.lab.slurm.runs)
        r = fab("lab", "up", "-i", str(inv), "--slurm")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "SLURM_CONF=" in r.stdout
        daemons = slurm.running(inv / ".state")
        assert sorted(daemons) == ["munged", "slurmctld", "slurmd node01", "slurmd node02"]
        yield inv, {**os.environ, **slurm.client_env(inv / ".state")}
    finally:
        r = fab("lab", "down", "-i", str(inv))
    left = [pid for pid in daemons.values() if _cmdline(pid)]  # a zombie's is empty
    assert r.returncode == 0 and not left, f"Slurm left running after lab down: {left}"


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
