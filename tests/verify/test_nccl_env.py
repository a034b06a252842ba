"""``fabtune topology NODE --nccl-env``: the NCCL environment a job should use on a tuned node (issue
20: NCCL's default traffic class 0 is lossy when PFC protects priority 3, and fabtune never said so).
On a lab node's sysroot read with ``--local --root`` (the GID tables as sysfs holds them), no lab."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tuning import inventory
from tuning.errors import VerifyError
from tuning.lab.fabric import default_fabric
from tuning.lab.sysroot import build_sysroot
from tuning.verify.nccl_env import nccl_env

LAB = REPO / "inventory" / "lab"


@pytest.fixture(scope="module")
def sysroot(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("nccl") / "sysroot"
    build_sysroot(root, next(n for n in default_fabric().nodes if n.name == "node01"))
    return root


def _topology(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuning", "topology", *args], capture_output=True, text=True,
                          timeout=60, cwd=REPO)


def test_the_environment_of_a_tuned_node_names_its_nics_gid_and_class(sysroot: Path):
    res = _topology("-i", str(LAB), "node01", "--local", "--root", str(sysroot), "--nccl-env")
    assert res.returncode == 0, res.stderr
    hca = ",".join(f"mlx5_{i}:1" for i in range(8))
    assert res.stdout.splitlines()[1:] == [f"export NCCL_IB_HCA='={hca}'", "export NCCL_IB_GID_INDEX='3'",
                                           "export NCCL_IB_TC='106'"]
    assert res.stdout.startswith("# NCCL_SOCKET_IFNAME: set it to the management interface")
    doc = json.loads(_topology("-i", str(LAB), "node01", "--local", "--root", str(sysroot), "--nccl-env",
                               "--json").stdout)
    assert doc["env"] == {"NCCL_IB_HCA": f"={hca}", "NCCL_IB_GID_INDEX": "3", "NCCL_IB_TC": "106"}
    sourced = subprocess.run(["bash", "-c", 'source /dev/stdin; echo "$NCCL_IB_HCA|$NCCL_IB_TC"'], input=res.stdout,
                             capture_output=True, text=True, timeout=10)
    assert sourced.stdout == f"={hca}|106\n"


def test_what_cannot_be_one_value_is_named_not_guessed(tmp_path: Path):
    dev = inventory.load(LAB).devices["node01"]
    env, notes = nccl_env(dev, {"mlx5_0": 3, "mlx5_1": 5})
    assert "NCCL_IB_GID_INDEX" not in env and env["NCCL_IB_TC"] == "106"
    assert "NCCL_IB_GID_INDEX not set: the NICs' RoCE v2 IPv4 GIDs differ (mlx5_0 3, mlx5_1 5)" in notes[0]
    env, notes = nccl_env(dev, {"mlx5_0": VerifyError("no RoCE v2 GID holds 10.0.0.1", host="node01")})
    assert notes[0] == "NCCL_IB_GID_INDEX not set: mlx5_0: no RoCE v2 GID holds 10.0.0.1"
    inv = tmp_path / "lab"
    shutil.copytree(LAB, inv, ignore=shutil.ignore_patterns(".state"))
    gv = inv / "group_vars" / "gpu_nodes.yml"
    gv.write_text(re.sub(r"(?ms)^nic_qos:.*?(?=^\S)", "", gv.read_text()))
    plain = inventory.load(inv).devices["node01"]
    assert plain.spec.nic_qos is None
    env, notes = nccl_env(plain, {"mlx5_0": 3})
    assert "NCCL_IB_TC" not in env
    assert "NCCL_IB_TC not set: node01 leaves its RoCE QoS alone (no nic_qos); NCCL then sends traffic class 0" in notes


def test_a_host_is_needed():
    res = _topology("-i", str(LAB), "--nccl-env")
    assert res.returncode == 2 and "--nccl-env needs the node's inventory entry" in res.stderr, res.stderr
