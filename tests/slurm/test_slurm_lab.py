"""The Slurm lab (issue 23): ``fabtune lab up --slurm`` runs Debian's real Slurm (22.05) and munge
beside a 2-node lab, ``srun`` reaches each lab node as itself, and the burn-in drain adapter
(:mod:`tuning.burnin.drain`) drives the real ``scontrol``. The lab: ``tests/slurm/conftest.py``.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.slurm.conftest import client as _run, fab as _fab
from tuning.burnin import drain as dr
from tuning.lab import slurm
from tuning.lab.fabric import Fabric

pytestmark = pytest.mark.lab

RUN = "20261203T150000-slrm"
OTHER = "bad DIMM, ticket 4711"


def _states_when(env: dict, ready, timeout_s: float = 10.0) -> dict[str, str]:
    """``sinfo``'s node states (``{"node01": "idle", ...}``) once ``ready(states)``, or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = dict(line.split() for line in _run(env, "sinfo", "-h", "-N", "-o", "%N %T").splitlines())
        if ready(states) or time.monotonic() > deadline:
            return states
        time.sleep(0.1)


def test_srun_runs_one_task_on_each_lab_node_as_that_node(slurm_lab):
    inv, env = slurm_lab
    names = _run(env, "srun", "-N2", "--ntasks-per-node=1", "printenv", "SLURMD_NODENAME").split()
    assert sorted(names) == ["node01", "node02"]
    # the TaskProlog gives each task its node shell's identity: FABTUNE_LAB_* and the stand-ins first on PATH
    out = _run(env, "srun", "-N2", "--ntasks-per-node=1", "sh", "-c",
               'echo "$SLURMD_NODENAME $FABTUNE_LAB_NODE $FABTUNE_LAB_SYSROOT ${PATH%%:*}"')
    state = (inv / ".state").resolve()
    assert sorted(out.splitlines()) == [f"{n} {n} {state}/nodes/{n}/sysroot {state}/bin" for n in ("node01", "node02")]
    assert all((state / "nodes" / n / "sysroot" / "sys" / "class" / "net").is_dir() for n in ("node01", "node02"))
    # `lab reset` stops every process whose command line names the state folder: none of Slurm's does
    r = _fab("lab", "reset", "-i", str(inv))
    assert r.returncode == 0, r.stderr
    assert sorted(slurm.running(state)) == ["munged", "slurmctld", "slurmd node01", "slurmd node02"]
    assert sorted(_run(env, "srun", "-N2", "printenv", "SLURMD_NODENAME").split()) == ["node01", "node02"]


def test_drain_adapter_against_real_scontrol_never_touches_another_drain(slurm_lab, monkeypatch, tmp_path):
    inv, env = slurm_lab
    monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])  # the adapter runs scontrol from PATH with our env
    _run(env, "scontrol", "update", "NodeName=node02", "State=DRAIN", f"Reason={OTHER}")
    findings = [{"code": "gpu-xid", "kind": "node", "target": n, "message": f"{n}: GPU 3 (0000:1e:00.0) XID 79"}
                for n in ("node01", "node02")]
    try:
        out = dr.drain(findings, RUN, "slurm", act=True, max_drain=2, log=tmp_path / "drain.log")
        assert out["drained"] == ["node01"] and not out["failed"], out
        assert out["left"] == {"node02": f"drained by someone else: reason {OTHER!r} is not fabtune's"}
        want = dr.reason_text(RUN, findings[0])
        assert want.startswith(f"fabtune:{RUN}: gpu-xid node01: GPU 3")
        # what Slurm itself shows: sinfo -R (reason, node) and scontrol show node (state, reason)
        reasons = dict(line.split("|")[::-1] for line in
                       _run(env, "sinfo", "-R", "-h", "-N", "-o", "%E|%N").splitlines())
        assert reasons == {"node01": want, "node02": OTHER}
        assert dr.Slurm().reason("node01") == want and dr.Slurm().reason("node02") == OTHER
        assert "State=IDLE+DRAIN " in _run(env, "scontrol", "show", "node", "node01")
        # a clean re-test resumes only fabtune's drain
        back = dr.undrain(["node01", "node02"], "slurm", act=True)
        assert back["resumed"] == ["node01"] and back["left"] == {"node02": f"reason {OTHER!r} is not fabtune's"}
        # a resumed node shows `idle*` (not responding) until its slurmd answers slurmctld's ping, ~0.5 s
        states = _states_when(env, lambda st: "*" not in st["node01"])
        assert states == {"node01": "idle", "node02": "drained"}
        assert dr.Slurm().reason("node01") is None and dr.Slurm().reason("node02") == OTHER
    finally:  # the next test's nodes idle (RESUME of a node not drained is "Invalid node state specified")
        for node in ("node01", "node02"):
            subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], env=env, capture_output=True)


def test_drain_of_an_unknown_node_fails_with_what_scontrol_said(slurm_lab, monkeypatch):
    inv, env = slurm_lab
    monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])
    out = dr.drain([{"code": "gpu-xid", "kind": "node", "target": "node09", "message": "m"}], RUN, "slurm", act=True)
    assert out["drained"] == [] and out["failed"] == {
        "node09": "node09: scontrol show node node09: exit 1: Node node09 not found"}


def test_lab_up_slurm_is_refused_before_the_lab_starts_when_a_slurm_port_is_taken(slurm_lab):
    """The Slurm checks come before the lab's own start (exit 2, one line); here the running lab's
    Slurm holds the ports, and it keeps running."""
    inv, env = slurm_lab
    ctld = slurm.ports(Fabric.load(inv / ".state" / "fabric.json")).slurmctld
    r = _fab("lab", "up", "-i", str(inv), "--slurm")
    assert r.returncode == 2 and r.stderr.startswith(f"fabtune: error: the Slurm lab's ports are in use: [{ctld}, ")
    assert sorted(_run(env, "srun", "-N2", "printenv", "SLURMD_NODENAME").split()) == ["node01", "node02"]


def test_lab_status_lists_each_slurm_daemon_with_its_port(slurm_lab):
    inv, _ = slurm_lab
    r = _fab("lab", "status", "-i", str(inv), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {e["name"]: e for e in json.loads(r.stdout)["endpoints"] if e["kind"] == "slurm"}
    ports = slurm.ports(Fabric.load(inv / ".state" / "fabric.json"))
    assert {n: (e["port"], e["up"]) for n, e in rows.items()} == {
        "munged": (None, True), "slurmctld": (ports.slurmctld, True),
        "slurmd node01": (ports.slurmd["node01"], True), "slurmd node02": (ports.slurmd["node02"], True)}
    table = _fab("lab", "status", "-i", str(inv)).stdout
    cells = [[c.strip() for c in line.split("│")[1:5]] for line in table.splitlines() if "│" in line]
    assert ["slurmd node02", "slurm", str(ports.slurmd["node02"]), "yes"] in cells, table
    assert ["munged", "slurm", "-", "yes"] in cells, table
