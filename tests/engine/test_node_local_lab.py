"""Node-local mode (issue 23): one node's part of a run done ON the node (``fabtune node apply``,
as the Slurm lab's ``srun`` starts it: as the srun user, the node shell's environment from the lab's
TaskProlog, ``SLURMD_NODENAME`` set, ``--sysroot`` the node's files), the
other node's pushed by the same stage over SSH (the Ansible front end's way), one journal. The
node-local push writes exactly what the SSH push writes (parity, setting by setting), journals
``pushing`` then ``applied`` in the controller's journal, and ``fabtune node restore`` puts the
node back byte for byte from the journal alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, running_lab, snapshot_fabric
from tuning import inventory
from tuning.lab.nodeserver import node_env
from tuning.rollout import steps
from tuning.rollout.journal import Journal

pytestmark = pytest.mark.lab

DOMAINS = {"sysctl", "mtu"}


def _on_node(state, node: str, *args: str) -> subprocess.CompletedProcess:
    """``fabtune ARGS --sysroot SYSROOT`` run as the Slurm lab runs a task on ``node``
    (tuning.lab.slurm: the node shell's environment, ``SLURMD_NODENAME``, the srun user)."""
    env = {**node_env(state, node), "SLURMD_NODENAME": node, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "tuning", *args, "--sysroot", env["FABTUNE_LAB_SYSROOT"]],
                          cwd=state.parent, env=env, capture_output=True, text=True, timeout=120)


def _node_files(snap: dict, node: str) -> dict:
    return {k.split(":", 1)[1]: v for k, v in snap.items() if k.startswith(f"{node}:")}


def test_a_node_pushes_its_part_from_itself_as_ssh_would_and_restores_from_the_journal(tmp_path):
    with running_lab(tmp_path) as inv:
        state, jdir = inv / ".state", tmp_path / "journal"
        untuned = snapshot_fabric(inv)
        inv_obj = inventory.load(inv)
        opts = steps.StepOptions(journal_dir=jdir, verify=False, domains=DOMAINS)
        run_id = steps.begin(inv_obj, ["node01", "node02"], opts, os.getpid())["run_id"]
        try:
            check = _on_node(state, "node01", "node", "apply", "-i", str(inv), "--check", "--json", "-d", "mtu")
            assert check.returncode == 0, check.stderr
            planned = json.loads(check.stdout)
            assert planned["node"] == "node01" and planned["pushed"] is False and planned["changes"]
            assert snapshot_fabric(inv) == untuned  # --check writes nothing

            here = _on_node(state, "node01", "node", "apply", "-i", str(inv), "--run-id", run_id,
                            "--journal-dir", str(jdir), "--json", "-d", "sysctl", "-d", "mtu")
            assert here.returncode == 0, here.stderr
            local = json.loads(here.stdout)
            assert local["pushed"] is True and {c["domain"] for c in local["changes"]} == DOMAINS
            over_ssh = steps.push(inv_obj.devices["node02"], inv_obj.policy, opts, run_id)
            # parity: the same settings, the same values, node for node
            assert sorted((c["key"], c["after"]) for c in local["changes"]) == \
                sorted((c["key"], c["after"]) for c in over_ssh["changes"])
            tuned = snapshot_fabric(inv)
            n1, n2 = _node_files(tuned, "node01"), _node_files(tuned, "node02")
            mtus = {k: v for k, v in n1.items() if k.startswith("sys/class/net/") and k.endswith("/mtu")}
            assert mtus and all(v.strip() == b"9000" for v in mtus.values()), mtus
            assert {k: n2[k] for k in mtus} == mtus  # the same files as the node pushed over SSH
            rec = Journal.load(jdir, run_id).data["devices"]["node01"]
            assert rec["state"] == "applied" and {c["key"] for c in rec["applied"]} == {c["key"] for c in local["changes"]}

            back = _on_node(state, "node01", "node", "restore", "--run-id", run_id, "--journal-dir", str(jdir), "--json")
            assert back.returncode == 0 and json.loads(back.stdout)["restored"] == ["node01"], back.stderr
            assert _node_files(snapshot_fabric(inv), "node01") == _node_files(untuned, "node01")
            wrong = _on_node(state, "node01", "node", "apply", "-i", str(inv), "--check", "--node", "leaf01")
            assert wrong.returncode == 2 and "leaf01" in wrong.stderr and "Traceback" not in wrong.stderr
        finally:
            steps.end(inv_obj, opts, run_id)
