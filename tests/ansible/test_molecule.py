"""``molecule test`` of the scenario ``molecule/default`` (delegated driver, the lab is the platform):
every step of its sequence succeeds, converge changes every device of an untuned lab, Molecule's
own idempotence step ran and saw changed=0 everywhere, verify read the real state, and destroy
stopped the lab.

The scenario's lab listens on this pytest process's ports (``TEST_BASE_PORT``); Molecule's
ephemeral directory is in tmp_path. The rollout's RDMA verification gate is off here
(``FABTUNE_MOLECULE_VERIFY=false``: tests/ansible/test_playbooks*.py cover it); the scenario's
verify step still reads every device.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import TEST_BASE_PORT

pytestmark = [pytest.mark.ansible, pytest.mark.lab]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SEQUENCE = ["destroy", "syntax", "create", "converge", "idempotence", "verify", "destroy"]
DEVICES = {"node01", "node02", "node03", "node04", "leaf01", "leaf02", "spine01"}
ANSI = re.compile(r"\x1b\[[0-9;]*m")
ARROW = "(?:➜|>)"  # Molecule 26 prints "default ➜ converge", or "default > converge" under NO_COLOR
#: a PLAY RECAP line as Ansible's default callback prints it
RECAP = re.compile(r"^\W*(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def step_output(out: str, step: str, nth: int = 0) -> str:
    """The text Molecule printed between ``default ➜ STEP: Executing`` (``[default > STEP] Executing``
    without colour) and its ``Executed`` line; ``nth``: which run of the step (0: the first)."""
    mark = rf"default {ARROW} {step}\]?:? Execut"
    parts = re.findall(rf"{mark}ing(.*?){mark}ed", out, re.S)
    assert len(parts) > nth, f"step {step} did not run:\n{out[-3000:]}"
    return parts[nth]


def recap(text: str) -> dict[str, tuple[int, int, int, int]]:
    """``{host: (ok, changed, unreachable, failed)}`` of the PLAY RECAP lines in ``text``."""
    return {m[0]: tuple(int(x) for x in m[1:]) for m in RECAP.findall(text)}


def listening(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:port."""
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_molecule_test_converges_is_idempotent_and_verifies(tmp_path: Path) -> None:
    # a short folder: the lab's sudo sockets (<state>/run/sudo/node01.sock) must fit AF_UNIX's 108
    # bytes, and pytest-xdist's tmp_path (.../popen-gwN/test_molecule_test_converges_i0/) is long
    short = Path(tempfile.mkdtemp(prefix="mol-"))
    try:
        _molecule_test(tmp_path, short)
    finally:
        shutil.rmtree(short, ignore_errors=True)


def _molecule_test(tmp_path: Path, short: Path) -> None:
    env = os.environ | {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                        "MOLECULE_EPHEMERAL_DIRECTORY": str(short / "molecule"),
                        "FABTUNE_MOLECULE_BASE_PORT": str(TEST_BASE_PORT), "FABTUNE_MOLECULE_VERIFY": "false",
                        "NO_COLOR": "1", "ANSIBLE_NOCOLOR": "1", "PY_COLORS": "0", "COLUMNS": "200",
                        "PYTHONUNBUFFERED": "1"}  # Molecule's log (stderr) and Ansible's output (stdout) in order
    res = subprocess.run([str(BIN / "molecule"), "test"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=1500)
    out = ANSI.sub("", res.stdout)
    (tmp_path / "molecule.log").write_text(out)  # the whole run, for a failure's reader
    assert res.returncode == 0, "\n".join(line for line in out.splitlines()
                                          if re.search(r"fatal|FAILED|ERROR|Executed", line))[-6000:]

    details = out[out.rindex("DETAILS"):]
    assert re.findall(rf"default {ARROW} (\w+): Executed: (\w+)", details) == [(s, "Successful") for s in SEQUENCE], details

    converged = recap(step_output(out, "converge"))
    assert converged.keys() == DEVICES, converged
    assert all(changed > 0 and failed == 0 and unreachable == 0
               for _, changed, unreachable, failed in converged.values()), converged  # an untuned lab changes
    again = recap(step_output(out, "idempotence"))
    assert again.keys() == DEVICES and all(r[1:] == (0, 0, 0) for r in again.values()), again
    verified = recap(step_output(out, "verify"))
    assert verified.keys() == DEVICES and all(r[0] > 0 and r[1:] == (0, 0, 0) for r in verified.values()), verified

    assert recap(step_output(out, "destroy", 1))["localhost"][1] == 1  # "Stop the lab" ran
    assert not any(listening(TEST_BASE_PORT + k) for k in (1, 2, 3, 4, 101, 102, 103))  # destroy stopped it


def test_verify_step_fails_on_an_untuned_lab(lab_inventory: Path) -> None:
    """The scenario's verify.yml reads real state: on a fresh (untuned) lab it fails, naming the values.
    Nodes and switches are checked in two runs (Ansible ends a playbook once every host of a play failed)."""
    def verify(limit: str) -> str:
        res = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(lab_inventory), "molecule/default/verify.yml",
                              "--limit", limit], cwd=REPO, capture_output=True, text=True, timeout=600,
                             env=os.environ | {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                                               "ANSIBLE_NOCOLOR": "1"})
        assert res.returncode == 2, res.stdout
        return res.stdout

    out = verify("gpu_nodes")
    for node in ("node01", "node02", "node03", "node04"):
        assert f"{node} enp12s0np0: MTU 1500, inventory 9000" in out, out
    out = verify("switches")
    for switch in ("leaf01", "leaf02", "spine01"):
        assert f"{switch}: running configuration differs from the inventory" in out, out
