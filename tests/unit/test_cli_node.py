"""``fabtune node apply|restore`` refuse bad input in one line before touching anything (issue 23):
a node name that is no host name or no node of the inventory, a push without a run, a sysroot
with '..', a run that does not exist; a switch is never driven from itself."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.adversarial._cli import cli
from tests.conftest import REPO
from tuning import inventory
from tuning.errors import InputError
from tuning.targets import local_target_for

LAB = REPO / "inventory" / "lab"


def _fabtune(*args: str) -> subprocess.CompletedProcess:
    """``fabtune ARGS`` run in this process from the repository (:func:`tests.adversarial._cli.cli`)."""
    code, out, err = cli(*args, cwd=REPO)
    return subprocess.CompletedProcess(["fabtune", *args], code, out, err)


@pytest.mark.parametrize("args,words", [
    (["node", "apply", "-i", str(LAB), "--node", "node01;reboot", "--check"], ["--node", "is not a host name"]),
    (["node", "apply", "-i", str(LAB), "--node", "node09", "--check"], ["--node", "names no node of"]),
    (["node", "apply", "-i", str(LAB), "--node", "leaf01", "--check"], ["leaf01", "names no node of"]),
    (["node", "apply", "-i", str(LAB), "--node", "node01"], ["--run-id", "a push belongs to a run"]),
    (["node", "apply", "-i", str(LAB), "--node", "node01", "--check", "--sysroot", "/host/../etc"],
     ["--sysroot", "without '..'"]),
    (["node", "restore", "--node", "node01", "--run-id", "../x"], ["--run-id"]),
])
def test_bad_input_is_one_line_and_exit_2(args, words):
    res = _fabtune(*args)
    assert res.returncode == 2, (res.stdout, res.stderr)
    line = res.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith("fabtune: error:") and "Traceback" not in line, line
    assert all(w in line for w in words), line


def test_a_switch_is_not_driven_from_itself():
    dev = inventory.load(LAB).devices["leaf01"]
    with pytest.raises(InputError, match="a switch is not driven from itself"):
        local_target_for(dev)
    node = local_target_for(inventory.load(LAB).devices["node01"], "/host")
    assert node.connection.sysroot == "/host" and node.name == "node01"
