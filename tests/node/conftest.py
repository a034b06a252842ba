"""Fixtures of the node tests: one lab per test module (starting one costs seconds on 2 cores)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, running_lab, served_stand_ins


@pytest.fixture(scope="module")
def node_lab(tmp_path_factory):
    """A fresh lab for a copy of ``inventory/lab``, shared by the tests of one module; yields the inventory dir."""
    with running_lab(tmp_path_factory.mktemp("nodelab")) as inv:
        yield inv


class Node:
    """One lab node opened over SSH as the engine opens it (become: sudo)."""

    def __init__(self, inv_dir: Path, name: str, spec_update: dict | None = None):
        from tuning import inventory
        from tuning.transport.ssh import SshHost

        self.inv_dir, self.name = inv_dir, name
        self.dev = inventory.load(inv_dir).devices[name]
        if spec_update:
            self.dev = with_spec(self.dev, spec_update)
        self.host = SshHost(name, self.dev.connection)
        self.sysroot = inv_dir / ".state" / "nodes" / name / "sysroot"

    def plan(self):
        from tuning import node

        return node.plan(self.dev, node.collect(self.host, self.dev))

    def close(self) -> None:
        self.host.close()

    def reboot(self) -> None:
        """``fabtune lab reboot`` this node (its sshd restarts) and open a new session to it."""
        from tuning.lab.boot import reboot
        from tuning.transport.ssh import SshHost

        reboot(self.inv_dir / ".state", self.name, self.dev.connection)
        self.host.close()
        self.host = SshHost(self.name, self.dev.connection)


def with_spec(dev, update: dict):
    """``dev`` with its NodeSpec updated (nested ``nic_qos`` dicts merged), revalidated."""
    from dataclasses import replace

    from tuning.model import NodeSpec

    data = dev.spec.model_dump(mode="json")
    for key, value in update.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and key == "nic_qos" else value
    return replace(dev, spec=NodeSpec.model_validate(data))


def node_files(sysroot: Path) -> dict[str, bytes]:
    """Every regular file of a node sysroot (relative path -> bytes), and every symlink (-> its target)."""
    from tests.conftest import tree_files

    return tree_files(sysroot, links=True)

def on_node(state: Path, node: str, *args: str) -> subprocess.CompletedProcess:
    """``fabtune ARGS`` as a Slurm task of the lab runs it on ``node`` (tuning.lab.slurm's TaskProlog:
    the node shell's environment, ``SLURMD_NODENAME``, ``FABTUNE_SYSROOT`` the node's sysroot), in
    the node's folder; output captured as text."""
    import sys

    from tuning.lab.nodeserver import node_env
    from tuning.transport.base import SYSROOT_ENV

    env = {**node_env(state, node), "PYTHONPATH": str(REPO), "SLURMD_NODENAME": node}
    env[SYSROOT_ENV] = env["FABTUNE_LAB_SYSROOT"]
    return subprocess.run([sys.executable, "-m", "tuning", *args], capture_output=True, text=True, env=env,
                          cwd=state / "nodes" / node, timeout=120)


@pytest.fixture(scope="module")
def laid(tmp_path_factory):
    """node01 of the default lab laid out without a daemon: its sysroot at power-on, the stand-ins'
    wrappers and the lab's two tool servers (:mod:`tuning.lab.toolserver`: each call forked from a
    preloaded interpreter, as in a running lab); yields (state dir, node01's inventory device)."""
    from tuning import inventory
    from tuning.lab.controller import write_wrappers
    from tuning.lab.fabric import default_fabric
    from tuning.lab.sysroot import build_sysroot

    state = (tmp_path_factory.mktemp("laid") / "state").resolve()
    fabric = default_fabric()
    build_sysroot(state / "nodes" / "node01" / "sysroot", fabric.node("node01"))
    write_wrappers(state / "bin")
    fabric.save(state / "fabric.json")
    with served_stand_ins(state):
        yield state, inventory.load(REPO / "inventory" / "lab").devices["node01"]
