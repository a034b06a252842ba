"""What an unprivileged node user may try against the lab (the `unpriv` tester's attacks) fails:

- ``run/`` and ``run/sudo/`` are the daemon's (0755): nobody moves or replaces the sudo socket to
  read the become password (``attack/sudo_mitm.py``);
- the daemon knows a caller's node by its ancestry, never by ``FABTUNE_LAB_NODE``;
- ``run/perftest/`` is sticky (1777) and a sudo'ed perftest client writes its result with
  O_CREAT|O_EXCL|O_NOFOLLOW under a random name: a planted symlink is never followed;
- the become password is never masked out of command output (a short password used to corrupt
  readings and the journal) and is nowhere: command lines, outputs, journal, lab files;
- ``tee`` as the unprivileged user: the kernel's EACCES comes before any value check.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tuning import inventory
from tuning.lab import privileges
from tuning.transport.ssh import SshHost

pytestmark = pytest.mark.lab
#: the user-namespace lab (a normal user's `make test`) is more lenient by design (docs/lab.md)
ROOT_LAB = pytest.mark.skipif(privileges.lab_user() is None, reason="needs the root lab (CI): the shells own "
                              "run/ in the user-namespace lab (docs/lab.md)")
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RMEM = "sysroot/proc/sys/net/core/rmem_max"


def _host(inv: Path, node: str) -> SshHost:
    return SshHost(node, inventory.load(inv).devices[node].connection)


def _shell(inv: Path, node: str, command: str, timeout: float = 60.0):
    """``command`` in an unprivileged shell of ``node`` (no sudo)."""
    host = _host(inv, node)
    try:
        return host.run(command, privileged=False, timeout=timeout)
    finally:
        host.close()


def _fabtune(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuning", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300, cwd=REPO)


# ---- the sudo socket ------------------------------------------------------------------------------

def test_run_folders_belong_to_the_daemon_and_perftest_is_sticky(lab):
    for folder, mode in (("run", 0o755), ("run/sudo", 0o755), ("run/perftest", 0o1777)):
        st = (lab / folder).stat()
        assert (folder, st.st_uid, stat.S_IMODE(st.st_mode)) == (folder, os.geteuid(), mode)


@ROOT_LAB
def test_node_user_cannot_move_replace_or_add_sudo_sockets(lab_inventory):
    res = _shell(lab_inventory, "node01", 'cd "$FABTUNE_LAB_DIR/run" && { mv sudo sudo.moved; '
                 'mv sudo/node01.sock sudo/x; rm -f sudo/node01.sock; touch sudo/y; mkdir z; '
                 'mv tools tools.moved; mv tools/root.sock tools/x; rm -f tools/user.sock; touch tools/y; true; }')
    assert res.stderr.count("Permission denied") == 9, res.stderr
    run = lab_inventory / ".state" / "run"
    assert sorted(p.name for p in run.iterdir()) == ["perftest", "sudo", "tools"]
    assert sorted(p.name for p in (run / "tools").iterdir()) == ["root.sock", "user.sock"]


@ROOT_LAB
def test_node_user_cannot_capture_the_become_password(lab_inventory, monkeypatch):
    """The MITM of attack/sudo_mitm.py cannot even start; sudo with a password still works."""
    state, canary = lab_inventory / ".state", "canary-mitm-7d1e"
    privileges.require_password(state, canary)
    mitm = _shell(lab_inventory, "node01", f"python3 {HERE}/attack/sudo_mitm.py 2")
    assert mitm.rc == 1 and "PermissionError" in mitm.stderr, mitm.stdout + mitm.stderr
    monkeypatch.setenv("FABTUNE_BECOME_PASSWORD", canary)
    host = _host(lab_inventory, "node01")
    try:
        res = host.run("id -u")
    finally:
        host.close()
    assert (res.rc, res.stdout) == (0, "0\n")
    assert not (state / "run" / "loot.node01").exists()
    assert not (state / "run" / "sudo.real").exists()


def test_lab_env_vars_do_not_reach_another_nodes_root(lab_inventory):
    res = _shell(lab_inventory, "node01", 'FABTUNE_LAB_NODE=node02 sudo -n sh -c "echo \\$FABTUNE_LAB_NODE"')
    assert (res.rc, res.stdout, res.stderr) == (1, "", "sudo: this lab socket serves only node02's own shells\n")
    res = _shell(lab_inventory, "node01", 'sudo -n sh -c "echo \\$FABTUNE_LAB_NODE; sudo -n id -u"')
    assert (res.rc, res.stdout) == (0, "node01\n0\n")  # a sudo'ed command's own sudo is still node01's


# ---- perftest's rendezvous -------------------------------------------------------------------------

def _victim(tmp_path: Path) -> Path:
    vault = tmp_path / "rootonly"
    vault.mkdir(mode=0o700)
    victim = vault / "target"
    victim.write_text("ORIGINAL\n")
    victim.chmod(0o600)
    return victim


def test_result_writer_never_follows_a_planted_name(tmp_path, monkeypatch):
    """Every name the writer could pick is a planted symlink: it refuses instead of writing through."""
    from tuning.lab.tools import perftest

    victim = _victim(tmp_path)
    run = tmp_path / "perftest"
    run.mkdir()
    result = run / "10.0.0.2_18599.result.json"
    monkeypatch.setattr(perftest.os, "urandom", lambda n: b"\x01" * n)
    (run / f".{result.name}.{os.getpid()}.{'01' * 6}").symlink_to(victim)
    with pytest.raises(FileExistsError):
        perftest._write_json(result, {"rows": []})
    assert victim.read_text() == "ORIGINAL\n" and not result.exists()
    monkeypatch.undo()
    perftest._write_json(result, {"rows": []})
    assert json.loads(result.read_text()) == {"rows": []} and victim.read_text() == "ORIGINAL\n"


def test_node_user_cannot_make_root_write_through_a_perftest_symlink(lab_inventory, tmp_path):
    state, victim = lab_inventory / ".state", _victim(tmp_path)
    privileges.grant_search(tmp_path, *(privileges.lab_user() or (os.geteuid(), os.getegid())))
    planted = _shell(lab_inventory, "node03", f"python3 {HERE}/attack/perftest_plant.py {victim} 10.0.0.2:18599 20000")
    assert planted.stdout.startswith("PLANTED"), planted.stdout + planted.stderr
    srv, cli = _host(lab_inventory, "node02"), _host(lab_inventory, "node01")
    try:
        s = srv.start("ib_write_bw -d mlx5_0 -i 1 -x 3 -s 65536 -D 2 --report_gbits -p 18599")
        assert s.read_until("Waiting for client to connect", 15)
        res = cli.run("ib_write_bw -d mlx5_0 -i 1 -x 3 -s 65536 -D 2 --report_gbits -p 18599 10.0.0.2", timeout=90)
        served = s.wait(timeout=20)
    finally:
        srv.close()
        cli.close()
    assert victim.read_text() == "ORIGINAL\n"
    assert (res.rc, served.rc) == (0, 0), res.stderr + served.stderr
    left = [p.name for p in (state / "run" / "perftest").iterdir() if not p.is_symlink()]
    assert left == []  # the unprivileged server removed the root client's result (handed to it)


# ---- the become password ---------------------------------------------------------------------------

def test_a_short_become_password_does_not_corrupt_readings_or_the_journal(lab_inventory, tmp_path):
    """Password "2" once turned 212992 into "********1********99********" in snapshots and the journal."""
    state, journal = lab_inventory / ".state", tmp_path / "j"
    rmem = state / "nodes" / "node03" / RMEM
    before = rmem.read_text()
    assert "2" in before
    privileges.require_password(state, "2")
    env = {"FABTUNE_BECOME_PASSWORD": "2"}
    applied = _fabtune("apply", "-i", str(lab_inventory), "--limit", "node03", "--domain", "sysctl",
                       "--journal-dir", str(journal), env=env)
    assert (applied.returncode, rmem.read_text()) == (0, "268435456\n"), applied.stderr[-600:]
    text = "".join(p.read_text() for p in journal.glob("*.json"))
    assert "********" not in text and json.dumps(before.strip()) in text
    run_id = sorted(p.stem for p in journal.glob("*.json"))[-1]
    rolled = _fabtune("rollback", run_id, "--journal-dir", str(journal), env=env)
    assert (rolled.returncode, rmem.read_text()) == (0, before), rolled.stderr[-600:]


def test_become_password_is_on_no_command_line(lab_inventory, tmp_path):
    state, canary = lab_inventory / ".state", "canary-ps-51c0e"
    privileges.require_password(state, canary)
    seen: set[str] = set()
    done = threading.Event()

    def scan() -> None:
        while not done.is_set():
            for d in Path("/proc").iterdir():
                if d.name.isdigit():
                    try:
                        seen.add((d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
                    except OSError:
                        pass
            time.sleep(0.01)

    t = threading.Thread(target=scan)
    t.start()
    try:
        applied = _fabtune("apply", "-i", str(lab_inventory), "--limit", "node04", "--domain", "sysctl",
                           "--journal-dir", str(tmp_path / "j"), env={"FABTUNE_BECOME_PASSWORD": canary})
    finally:
        done.set()
        t.join()
    assert applied.returncode == 0, applied.stderr[-600:]
    assert any("sudo -S" in c for c in seen)  # the scan saw the sudo command lines
    assert not [c for c in seen if canary in c]
    assert canary not in applied.stdout + applied.stderr


# ---- tee: EACCES first ---------------------------------------------------------------------------------

@pytest.mark.parametrize("command, err", [
    (f"echo abc | tee {RMEM} >/dev/null", f"tee: {RMEM}: Permission denied\n"),
    ("echo 1 | tee sysroot/sys/kernel/debug/mlx5/0000:0c:00.0/cc_params/rp_ai_rate >/dev/null",
     "tee: sysroot/sys/kernel/debug/mlx5/0000:0c:00.0/cc_params/rp_ai_rate: Permission denied\n"),
    ("echo 1 | tee sysroot/proc/sys/net/core/no_such_key >/dev/null",
     "tee: sysroot/proc/sys/net/core/no_such_key: No such file or directory\n"),
])
def test_unprivileged_tee_says_permission_denied_before_checking_the_value(lab_inventory, command, err):
    node04 = lab_inventory / ".state" / "nodes" / "node04"
    before = {p: p.read_bytes() for p in (node04 / "sysroot" / "proc").rglob("*") if p.is_file()}
    res = _shell(lab_inventory, "node04", command)
    assert (res.rc, res.stdout, res.stderr) == (1, "", err)
    assert {p: p.read_bytes() for p in (node04 / "sysroot" / "proc").rglob("*") if p.is_file()} == before
