"""``fabtune node check --passive`` (Slurm's HealthCheckProgram) and ``--prolog`` (a job's gate) on the
Slurm lab (issue 23): run as slurmd runs them, on the node itself with its ``SLURMD_NODENAME`` and
sysroot, draining through the real ``scontrol``. The lab: ``tests/slurm/conftest.py`` (as a normal
user: the one-line refusal)."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.slurm.conftest import client, fab, reasons
from tuning.lab.inject import inject
from tuning.lab.nodeserver import node_env
from tuning.transport.base import SYSROOT_ENV

pytestmark = pytest.mark.lab

OTHER = "bad DIMM, ticket 4711"
HOLD = "fabtune:20261203T150000-slrm: rollout batch 1/1"  # a rollout's batch hold (tuning.slurm_engine)
#: HealthCheckProgram is killed after 60 s (slurm.conf(5)); a check that runs near it is no check
BUDGET_S = 20.0


@pytest.fixture(scope="module")
def tuned(slurm_lab, tmp_path_factory):
    """The Slurm lab with both nodes' MTU, PFC and trust tuned (the gate's settings): healthy nodes
    (journaled in a folder of the test's, not the repository's default ``.fabtune/journal``)."""
    inv, env = slurm_lab
    journal = tmp_path_factory.mktemp("tuned-journal")
    r = fab("apply", "-i", str(inv), "-d", "mtu", "-d", "nic_qos", "--journal-dir", str(journal))
    assert r.returncode == 0, r.stdout + r.stderr
    return inv, env


def _check(inv, env: dict, node: str, mode: str) -> tuple[subprocess.CompletedProcess, float]:
    """``fabtune node check --MODE --json`` as slurmd starts it on ``node`` (its SLURMD_NODENAME, and the
    node's own shell environment: its sysroot and tools), and its wall time in seconds."""
    state = inv / ".state"
    nenv = {**env, **node_env(state, node), "SLURMD_NODENAME": node}
    nenv[SYSROOT_ENV] = nenv["FABTUNE_LAB_SYSROOT"]
    t0 = time.monotonic()
    r = fab("node", "check", f"--{mode}", "-i", str(inv), *(["--json"] if mode == "passive" else []), env=nenv)
    return r, time.monotonic() - t0


def _resume(env: dict, *nodes: str) -> None:
    for node in nodes:  # RESUME of a node not drained is "Invalid node state specified": ignored
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], env=env, capture_output=True)


def test_a_healthy_tuned_node_passes_both_checks_and_stays_up(tuned):
    inv, env = tuned
    r, wall = _check(inv, env, "node01", "passive")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert (doc["node"], doc["healthy"], doc["problems"], doc["drain"]) == ("node01", True, [], None)
    assert doc["undrain"]["resumed"] == [] and doc["undrain"]["left"] == {"node01": "not drained"}
    assert "node01" not in reasons(env) and wall < BUDGET_S
    r, wall = _check(inv, env, "node01", "prolog")
    assert (r.returncode, r.stdout.strip(), r.stderr) == (0, "node01: ready", "") and wall < BUDGET_S


def test_a_port_down_drains_with_a_fabtune_reason_and_the_next_clean_check_resumes_it(tuned):
    inv, env = tuned
    state = inv / ".state"
    try:
        inject(state, "node01:mlx5_0", "down")
        r, _ = _check(inv, env, "node01", "prolog")  # one line; Slurm drains and requeues on a non-zero exit
        assert r.returncode == 1 and r.stderr == "fabtune: error: node01: not ready for a job: mlx5_0: port 1: DOWN, not ACTIVE\n"
        r, wall = _check(inv, env, "node01", "passive")
        assert r.returncode == 1 and wall < BUDGET_S, r.stdout + r.stderr
        doc = json.loads(r.stdout)
        assert doc["problems"][0] == "mlx5_0: port 1: DOWN, not ACTIVE" and doc["drain"]["drained"] == ["node01"]
        why = reasons(env)["node01"]
        assert why.startswith(f"fabtune:{doc['run_id']}: node-check mlx5_0: port 1: DOWN, not ACTIVE")
        assert doc["run_id"].startswith("health-")
        inject(state, "node01:mlx5_0", "clear")
        r, _ = _check(inv, env, "node01", "passive")
        assert r.returncode == 0, r.stdout + r.stderr
        assert json.loads(r.stdout)["undrain"]["resumed"] == ["node01"] and "node01" not in reasons(env)
    finally:
        inject(state, "node01:mlx5_0", "clear")
        _resume(env, "node01")


def test_a_drain_someone_else_made_stays_with_its_reason_failing_or_passing(tuned):
    inv, env = tuned
    nenv = {**env, **node_env(inv / ".state", "node02")}
    mtu = (inv / ".state/nodes/node02/sysroot/sys/class/net/enp12s0np0/mtu").read_text().strip()
    ip = ["ip", "link", "set", "dev", "enp12s0np0", "mtu"]  # the node's own ip (the lab's stand-in on its PATH)
    try:
        client(env, "scontrol", "update", "NodeName=node02", "State=DRAIN", f"Reason={OTHER}")
        client(nenv, *ip, "1500")
        r, _ = _check(inv, env, "node02", "passive")
        assert r.returncode == 1, r.stdout + r.stderr
        doc = json.loads(r.stdout)
        assert doc["problems"] == [f"mtu/enp12s0np0: 1500, tuned {mtu}"] and doc["drain"]["drained"] == []
        assert doc["drain"]["left"] == {"node02": f"drained by someone else: reason {OTHER!r} is not fabtune's"}
        assert reasons(env)["node02"] == OTHER
        client(nenv, *ip, mtu)
        r, _ = _check(inv, env, "node02", "passive")
        assert r.returncode == 0 and json.loads(r.stdout)["undrain"]["resumed"] == [], r.stdout + r.stderr
        assert reasons(env)["node02"] == OTHER
        # a rollout's batch hold is fabtune's but not a health check's: its run resumes it, never this check
        client(env, "scontrol", "update", "NodeName=node02", "State=DRAIN", f"Reason={HOLD}")
        r, _ = _check(inv, env, "node02", "passive")
        assert r.returncode == 0 and json.loads(r.stdout)["undrain"]["left"] == {
            "node02": f"reason {HOLD!r} is not a fabtune:health-... drain"}
        assert reasons(env)["node02"] == HOLD
    finally:
        subprocess.run([*ip, mtu], env=nenv, capture_output=True)
        _resume(env, "node02")
