"""Issue 6 item 9: the lab's node shells are unprivileged; what needs root is refused with the
real texts without sudo and works through the lab's sudo (what fabtune's become sends).

Texts: bash's redirect error; procps-ng sysctl (shared/cases/cli/sysctl_w__set_and_errors.txt);
mlnx-tools ``cma_roce_tos`` (configfs_rdma_cm__cma_roce_tos_and_mode.txt) and ``mlnx_qos``
(``check_privilege`` prints the netlink OSError; a sysfs trust write that fails says "not
supported"); iproute2's ``RTNETLINK answers`` for EPERM.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tuning import inventory
from tuning.lab import privileges
from tuning.transport.ssh import SshHost

pytestmark = pytest.mark.lab

RMEM = "sysroot/proc/sys/net/core/rmem_max"


@pytest.fixture()
def node01(lab_inventory: Path):
    host = SshHost("node01", inventory.load(lab_inventory).devices["node01"].connection)
    yield host
    host.close()


def _sysroot(inv: Path, node: str) -> Path:
    return inv / ".state" / "nodes" / node / "sysroot"


REFUSED = [
    (f"echo 1 > {RMEM}", 1, "", f"bash: line 1: {RMEM}: Permission denied\n"),
    ("sysctl -w net.core.rmem_max=1", 1, "", "sysctl: permission denied on key 'net.core.rmem_max'\n"),
    ("mlnx_qos -i enp12s0np0 --trust dscp", 1, "Priority trust state is not supported on your system\n", ""),
    ("mlnx_qos -i enp12s0np0 --pfc 0,0,0,1,0,0,0,0", 1, "Netlink error: Operation not permitted (1)\n", ""),
    ("cma_roce_tos -d mlx5_0 -t 106", 1, "You must be root to run this\n", ""),
    ("ip link set dev enp12s0np0 mtu 9000", 2, "", "RTNETLINK answers: Operation not permitted\n"),
    # configfs is root's: the mkdir/rmdir stand-ins pass the real tools' refusal on (coreutils in C.UTF-8: ‘’ quotes)
    ("mkdir sysroot/sys/kernel/config/rdma_cm/mlx5_0", 1, "",
     "mkdir: cannot create directory \u2018sysroot/sys/kernel/config/rdma_cm/mlx5_0\u2019: Permission denied\n"),
]


def _contents(root: Path) -> dict[Path, bytes]:
    """Every readable file of a sysroot: not the links of empty GID attributes, which read EINVAL as on a node."""
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


def test_unprivileged_shell_is_refused_with_the_real_texts(lab_inventory, node01):
    before = _contents(_sysroot(lab_inventory, "node01"))
    for command, rc, out, err in REFUSED:
        res = node01.run(command, privileged=False)
        assert (command, res.rc, res.stdout, res.stderr) == (command, rc, out, err)
    assert _contents(_sysroot(lab_inventory, "node01")) == before


def test_shell_is_not_root_and_debugfs_is_root_only(lab_inventory):
    host = SshHost("node04", inventory.load(lab_inventory).devices["node04"].connection)  # inbox driver: debugfs
    try:
        res = host.run("grep CapEff /proc/self/status; ls sysroot/sys/kernel/debug/mlx5", privileged=False)
        assert (res.rc, res.stdout) == (2, "CapEff:\t0000000000000000\n")  # no capability at all
        assert res.stderr == "ls: cannot access 'sysroot/sys/kernel/debug/mlx5': Permission denied\n"
        res = host.run("grep CapEff /proc/self/status; ls sysroot/sys/kernel/debug/mlx5 | wc -l")
        assert res.stdout.endswith("\n8\n") and res.stdout != "CapEff:\t0000000000000000\n8\n"
    finally:
        host.close()


def test_become_runs_the_same_commands_as_root(lab_inventory, node01):
    root = _sysroot(lab_inventory, "node01")
    # values the kernel takes (rmem_max / wmem_max are at least SOCK_MIN_RCVBUF / SOCK_MIN_SNDBUF)
    res = node01.run(f"echo 8192 > {RMEM} && sysctl -w net.core.wmem_max=9216 && cma_roce_tos -d mlx5_0 -t 106 "
                     "&& mlnx_qos -i enp12s0np0 --pfc 0,0,0,1,0,0,0,0 >/dev/null && ip link set dev enp12s0np0 mtu 9000")
    assert res.command.startswith("sudo -n -u root -- /bin/bash -c ")
    assert (res.rc, res.stdout, res.stderr) == (0, "net.core.wmem_max = 9216\n106\n", "")
    assert (root / "proc/sys/net/core/rmem_max").read_text() == "8192\n"
    assert (root / "proc/sys/net/core/wmem_max").read_text() == "9216\n"
    assert (root / "sys/class/net/enp12s0np0/mtu").read_text() == "9000\n"
    assert "\tenabled     0   0   0   1   0   0   0   0   " in node01.run("mlnx_qos -i enp12s0np0", privileged=False).stdout


def test_background_start_is_unprivileged_by_default(node01):
    assert node01.start("grep CapEff /proc/self/status").wait().stdout == "CapEff:\t0000000000000000\n"
    assert node01.start("grep CapEff /proc/self/status", privileged=True).wait().stdout != "CapEff:\t0000000000000000\n"


def test_lab_sudo_refuses_a_process_that_is_not_a_node_shell(lab):
    import json
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(str(privileges.socket_path(lab, "node01")))  # the test process: no node shell above it
        reply = json.loads(s.recv(65536))  # refused before the request is read
    assert reply == {"rc": 1, "error": "sudo: this lab socket serves only node01's own shells"}


def test_sudo_with_a_password(lab_inventory, node01, monkeypatch):
    state = lab_inventory / ".state"
    privileges.require_password(state, "canary-7f3a")
    assert "canary-7f3a" not in (state / "sudoers.json").read_text()
    res = node01.run("true")  # no password in the environment: sudo -n
    assert (res.rc, res.stderr) == (1, "sudo: a password is required\n")
    res = node01.run("printf 'wrong\\n' | sudo -S -p '' true", privileged=False)
    assert (res.rc, res.stderr) == (1, "Sorry, try again.\nsudo: no password was provided\n"
                                       "sudo: 1 incorrect password attempt\n")
    monkeypatch.setenv("FABTUNE_BECOME_PASSWORD", "canary-7f3a")
    host = SshHost("node01", inventory.load(lab_inventory).devices["node01"].connection)
    try:
        res = host.run(f"cat {RMEM}; id -u")
        assert res.command == f"sudo -S -p '' -u root -- /bin/bash -c 'cat {RMEM}; id -u'"
        assert (res.rc, res.stdout.splitlines()[1], res.stderr) == (0, "0", "")
        assert "canary" not in res.command
    finally:
        host.close()


def test_sftp_reads_but_never_writes(lab_inventory):
    import paramiko

    state = lab_inventory / ".state"
    port = inventory.load(lab_inventory).devices["node01"].connection.port
    client = paramiko.SSHClient()
    client.load_host_keys(str(state / "ssh" / "known_hosts"))
    client.connect("127.0.0.1", port=port, username="fabtune", key_filename=str(state / "ssh" / "id_ed25519"),
                   look_for_keys=False, allow_agent=False, timeout=10)
    try:
        sftp = client.open_sftp()
        with sftp.open("/sysroot/proc/sys/net/core/rmem_max") as f:
            assert f.read() == _sysroot(lab_inventory, "node01").joinpath("proc/sys/net/core/rmem_max").read_bytes()
        for write in (lambda: sftp.open("/sysroot/proc/sys/net/core/rmem_max", "w"), lambda: sftp.mkdir("/x"),
                      lambda: sftp.remove("/sysroot/proc/sys/net/core/rmem_max"), lambda: sftp.open("/new", "w")):
            with pytest.raises(PermissionError):
                write()
    finally:
        client.close()
