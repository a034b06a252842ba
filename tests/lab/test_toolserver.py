"""The stand-ins' fork server (tuning.lab.toolserver): the same output, exit status and privileges
as a stand-in run in its own interpreter, a killed caller kills its tool, another caller's
credentials are refused. Runs the servers on a bare node sysroot (no lab daemon, no SSH)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.adversarial.test_node_standins_unprivileged import NIC, Box
from tuning.lab import toolserver

REPO = Path(__file__).resolve().parents[2]
CALLS = [  # (privileged, script): reads, refused writes, failures, stdin, a folder and a umask
    (False, "mlnx_qos -i enp12s0np0"),
    (True, "mlnx_qos -i enp12s0np0"),
    (False, "mlnx_qos --trust dscp -i enp12s0np0"),
    (False, "ethtool -a enp12s0np0; ethtool -A enp12s0np0 rx off"),
    (False, "lspci -vvv -s 0c:00.0"),
    (True, "lspci -vvv -s 0c:00.0 | head -40"),
    (False, f"setpci -s {NIC} CAP_EXP+8.w"),
    (True, f"setpci -s {NIC} CAP_EXP+8.w"),
    (False, "cma_roce_tos -d mlx5_0"),
    (False, "sysctl -n net.ipv4.tcp_ecn; sysctl -w net.ipv4.tcp_ecn=1"),
    (False, "nvidia-smi topo -m; lscpu | tail -3"),
    (False, "cd /; umask 077; ethtool --no-such-flag enp12s0np0"),
    (True, f"echo n | mlxconfig -d {NIC} set ADVANCED_PCI_SETTINGS=1"),
    (False, "mlxconfig"),
]


@pytest.fixture(scope="module")
def box():
    path = Path(tempfile.mkdtemp(prefix="fabtune-ts-"))
    yield Box(path / "state")
    shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if int(Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


def test_served_stand_ins_answer_as_their_own_interpreter_does(box):
    alone = [box.sh(script, privileged) for privileged, script in CALLS]
    servers = toolserver.start(box.state)
    try:
        served = [box.sh(script, privileged) for privileged, script in CALLS]
    finally:
        toolserver.stop(servers)
    for (privileged, script), a, s in zip(CALLS, alone, served):
        assert (s.returncode, s.stdout, s.stderr) == (a.returncode, a.stdout, a.stderr), (privileged, script)
    # what each call printed is the real text, not an empty pair of streams on both sides
    assert "Priority trust state: pcp\n" in served[0].stdout and served[2].returncode == 1
    assert "Capabilities: <access denied>" in served[4].stdout and "MaxReadReq" in served[5].stdout


def test_a_killed_caller_kills_its_tool_and_leaves_the_setting_unchanged(box):
    servers = toolserver.start(box.state)
    try:
        before = box.sh(f"mlxconfig -d {NIC} q ADVANCED_PCI_SETTINGS", True).stdout
        # without -y mlxconfig waits for its answer on stdin: the wrapper waits for the server
        wrapper = subprocess.Popen(["bash", "-c", f"exec mlxconfig -d {NIC} set ADVANCED_PCI_SETTINGS=1"],
                                   cwd=box.login, env=box.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        root = servers[0].pid
        deadline = time.monotonic() + 20
        while not _children(root) and time.monotonic() < deadline:
            time.sleep(0.02)
        tools = _children(root)
        assert len(tools) == 1, "the root server never forked the call"
        wrapper.kill()
        wrapper.wait()
        deadline = time.monotonic() + 10
        while any(_alive(c) for c in _children(root)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(tools[0]) and not [c for c in _children(root) if _alive(c)], "the tool outlived its caller"
        deadline = time.monotonic() + 20  # then the server reaps it (its loop may lag under a loaded CI)
        while _children(root) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _children(root) == [], "the server never reaped the killed tool"
        assert box.sh(f"mlxconfig -d {NIC} q ADVANCED_PCI_SETTINGS", True).stdout == before
    finally:
        toolserver.stop(servers)


def test_a_caller_with_other_credentials_runs_the_tool_itself(box):
    """A server serves only its own uid, groups, capabilities and no_new_privs: a caller with
    ``no_new_privs`` set is refused (``ask`` returns None) and the wrapper runs the tool in its own
    interpreter, with the same result."""
    servers = toolserver.start(box.state)
    tools_dir = str(toolserver.socket_path(box.state, "root").parent)
    code = ("import sys; sys.path.insert(0, %r); from tuning.lab.toolclient import ask; "
            "print('rc', ask('lsmod', [], %r), file=sys.stderr)") % (str(REPO), tools_dir)
    try:
        same = subprocess.run([sys.executable, "-S", "-c", code], env=box.env, cwd=box.login,
                              capture_output=True, text=True, timeout=30)
        other = subprocess.run(["setpriv", "--no-new-privs", sys.executable, "-S", "-c", code], env=box.env,
                               cwd=box.login, capture_output=True, text=True, timeout=30)
        wrapped = subprocess.run(["setpriv", "--no-new-privs", "lsmod"], env=box.env, cwd=box.login,
                                 capture_output=True, text=True, timeout=30)
    finally:
        toolserver.stop(servers)
    assert same.stderr == "rc 0\n" and same.stdout.startswith("Module                  Size  Used by\n")
    assert (other.stderr, other.stdout) == ("rc None\n", "")
    assert (wrapped.returncode, wrapped.stdout) == (0, same.stdout)


def test_the_servers_stop_with_the_daemon_that_started_them(box):
    """A server whose parent is gone exits by itself (a killed daemon leaves no server behind)."""
    code = ("import sys, time; sys.path.insert(0, %r); from pathlib import Path; "
            "from tuning.lab import toolserver; ps = toolserver.start(Path(%r)); "
            "print(' '.join(str(p.pid) for p in ps), flush=True); time.sleep(60)") % (str(REPO), str(box.state))
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids), [Path(f"/proc/{p}/status").read_text()[:300] for p in pids if _alive(p)]
