"""Files and processes another user owns (a root's lab folder, journal or lab daemon, as a new
user's tryout met them running fabtune unprivileged): one line naming the path and what to do,
exit 2, never a Python traceback; and `lab down` never removes the pid file of a lab it may not
stop (that would orphan a live lab).

As root the command runs without the capabilities that let root ignore file modes and signal any
process (setpriv, util-linux: CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_KILL), against
folders and a process of uid 65534; as a normal user against its own folders with their modes
taken away (0555, 000) and, for the daemon, a process it cannot signal (pid 1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, TEST_BASE_PORT

ROOT = os.geteuid() == 0
NOBODY = 65534
AS_ANOTHER = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner,-kill", "--"] if ROOT else []


def _fab(*args: str) -> subprocess.CompletedProcess:
    """fabtune as root without its file-mode and kill capabilities, or as this user."""
    return subprocess.run([*AS_ANOTHER, sys.executable, "-m", "tuning", *args], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def _one_line(res: subprocess.CompletedProcess) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr[-1200:]
    return lines[0]


def test_lab_init_in_a_folder_it_may_not_write_is_one_line_naming_it(tmp_path: Path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    if ROOT:
        os.chown(theirs, NOBODY, NOBODY)
    else:
        theirs.chmod(0o555)
    try:
        line = _one_line(_fab("lab", "init", str(theirs / "lab"), "--base-port", str(TEST_BASE_PORT + 250)))
    finally:
        theirs.chmod(0o755)
    assert line.startswith("fabtune: error: ") and str(theirs) in line and "ermission denied" in line, line
    assert not (theirs / "lab").exists()


def test_runs_and_rollback_of_a_journal_folder_it_may_not_read_are_one_line_never_an_empty_list(tmp_path: Path):
    shut = tmp_path / "shut"
    shut.mkdir(mode=0o700)
    (shut / "20261203T101010-abcdef.json").write_text("{}")
    if ROOT:
        os.chown(shut, NOBODY, NOBODY)
    else:
        shut.chmod(0)
    try:
        for args in (("runs", "--journal-dir", str(shut)), ("rollback", "20261203T101010-abcdef", "--journal-dir",
                                                             str(shut))):
            line = _one_line(_fab(*args))
            assert line.startswith(f"fabtune: error: {shut}"), line
    finally:
        shut.chmod(0o700)


def test_lab_down_of_a_lab_another_user_runs_says_so_and_keeps_its_pid_file(tmp_path: Path):
    state = tmp_path / "lab" / ".state"
    state.mkdir(parents=True)
    theirs = None
    if ROOT:  # a process of uid 65534 whose command line is the lab daemon's
        theirs = subprocess.Popen(["bash", "-c", "exec -a tuning.lab.daemon sleep 60"], user=NOBODY, group=NOBODY,
                                  cwd="/")
        pid = theirs.pid
    else:
        pid = 1  # never this user's to signal; its command line is not the daemon's, so it reads as stopped
    (state / "lab.pid").write_text(f"{pid}\n")
    try:
        res = _fab("lab", "down", "--state-dir", str(state))
        if ROOT:
            line = _one_line(res)
            assert line == (f"fabtune: error: the lab in {state} runs as another user (daemon pid {pid}); stop it as "
                            "that user (nothing was stopped)"), line
            assert (state / "lab.pid").read_text() == f"{pid}\n" and theirs.poll() is None  # still its lab
        else:
            assert res.returncode == 0 and "lab was not running" in res.stdout, res.stderr
    finally:
        if theirs is not None:
            theirs.kill()
            theirs.wait()


def test_an_ssh_key_it_may_not_read_is_named_not_a_failed_tcp_connection(tmp_path: Path):
    """paramiko and netmiko report an unreadable key as a failed TCP connection ('1. Incorrect
    hostname ... is the lab up?'); the key is named instead, before any connection."""
    from tuning.lab.scale import write_inventory

    inv = write_inventory(tmp_path / "inv", 2)
    key = inv / ".state" / "ssh" / "id_ed25519"
    key.parent.mkdir(parents=True)
    key.write_bytes(b"not read\n")
    key.chmod(0o600)
    if ROOT:
        os.chown(key, NOBODY, NOBODY)
    else:
        key.chmod(0)
    lines = (res := _fab("lint", "-i", str(inv))).stderr.strip().splitlines()
    assert res.returncode == 4 and len(lines) == 1, res.stderr[-1200:]
    assert lines[0].startswith("fabtune: error: ") and f"cannot read the SSH key {key}: Permission denied" in lines[0]
    assert "lab up" not in lines[0] and "hostname" not in lines[0], lines[0]


def test_a_lab_never_started_says_to_start_it(tmp_path: Path):
    """A lab inventory whose lab was never started has no known_hosts yet: the one line says so
    and points at `fabtune lab up` (a new user got 'cannot read known_hosts ...' alone)."""
    from tuning.lab.scale import write_inventory

    inv = write_inventory(tmp_path / "inv", 2)
    res = subprocess.run([sys.executable, "-m", "tuning", "plan", "-i", str(inv)], capture_output=True, text=True,
                         timeout=60, cwd=REPO)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 4 and lines[-1].endswith("No such file or directory (is the lab up? `fabtune lab up`)"), \
        res.stderr[-800:]
    assert "cannot read known_hosts" in lines[-1]
