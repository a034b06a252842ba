"""End to end: start the lab (2 nodes, no switches), log in over real SSH, run commands."""

from __future__ import annotations

import socket
from pathlib import Path

import paramiko
import pytest

from tuning.errors import SetupError
from tuning.lab import controller
from tuning.lab.fabric import Fabric, default_fabric

pytestmark = pytest.mark.lab


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    nodes = default_fabric(n_nodes=2).nodes
    for node in nodes:
        node.port = free_port()
    fabric = Fabric(nodes=nodes, switches=[], links=[])
    state = tmp_path_factory.mktemp("lab") / ".state"
    controller.up(state, fabric)
    yield state, fabric
    assert controller.down(state) is True


def connect(state: Path, port: int, known_hosts: Path | None = None, user: str = "fabtune") -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts or state / "ssh" / "known_hosts"))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect("127.0.0.1", port=port, username=user, key_filename=str(state / "ssh" / "id_ed25519"),
                   look_for_keys=False, allow_agent=False, timeout=10)
    return client


def run(client: paramiko.SSHClient, command: str) -> tuple[int, str, str]:
    _, out, err = client.exec_command(command, timeout=20)
    stdout, stderr = out.read().decode(), err.read().decode()
    return out.channel.recv_exit_status(), stdout, stderr


@pytest.fixture(scope="module")
def node01(lab):
    state, fabric = lab
    client = connect(state, fabric.node("node01").port)
    yield client
    client.close()


def test_status_lists_every_endpoint_up(lab):
    state, fabric = lab
    st = controller.status(state)
    assert st["running"] is True
    assert [(e["name"], e["kind"], e["port"], e["up"]) for e in st["endpoints"]] == \
        [(n.name, "node", n.port, True) for n in fabric.nodes]


def test_read_and_set_mtu_over_ssh(node01):
    assert run(node01, "cat sysroot/sys/class/net/enp12s0np0/mtu") == (0, "1500\n", "")
    assert run(node01, "sudo -n ip link set dev enp12s0np0 mtu 9000") == (0, "", "")  # shells are unprivileged
    assert run(node01, "cat sysroot/sys/class/net/enp12s0np0/mtu") == (0, "9000\n", "")
    assert run(node01, "sudo -n ip link set dev enp12s0np0 mtu 9979") == (2, "", "Error: mtu greater than device maximum.\n")


def test_shell_environment_and_exit_status(lab, node01):
    state, _ = lab
    rc, out, _ = run(node01, 'pwd; echo "$FABTUNE_LAB_NODE $FABTUNE_LAB_SYSROOT"; echo "${PATH%%:*}"; exit 7')
    assert rc == 7
    assert out.splitlines() == [str(state.resolve() / "nodes/node01"), f"node01 {state.resolve()}/nodes/node01/sysroot",
                                str(state.resolve() / "bin")]


def test_nodes_have_their_own_sysroot(lab, node01):
    state, fabric = lab
    node02 = connect(state, fabric.node("node02").port)
    try:
        assert run(node02, "cat sysroot/sys/class/infiniband/mlx5_0/ports/1/gids/3")[1] == \
            "0000:0000:0000:0000:0000:ffff:0a00:0002\n"
    finally:
        node02.close()
    assert run(node01, "cat sysroot/sys/class/infiniband/mlx5_0/ports/1/gids/3")[1] == \
        "0000:0000:0000:0000:0000:ffff:0a00:0001\n"


def test_irq_affinity_write_updates_the_mask_view(node01):
    assert run(node01, "sudo -n bash -c 'echo 0-27 > sysroot/proc/irq/101/smp_affinity_list'")[0] == 0
    assert run(node01, "cat sysroot/proc/irq/101/smp_affinity") == (0, "0000,00000000,00000000,0fffffff\n", "")


def test_unknown_host_key_is_rejected(lab, tmp_path):
    state, fabric = lab
    lines = (state / "ssh" / "known_hosts").read_text().splitlines()
    node02_line = next(line for line in lines if line.startswith(f"[127.0.0.1]:{fabric.node('node02').port} "))
    node02_line = node02_line.split(" ", 1)[1]
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"[127.0.0.1]:{fabric.node('node01').port} {node02_line}\n")
    with pytest.raises(paramiko.BadHostKeyException):
        connect(state, fabric.node("node01").port, known_hosts=wrong)
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        connect(state, fabric.node("node01").port, known_hosts=empty)


def test_other_user_is_refused(lab):
    state, fabric = lab
    with pytest.raises(paramiko.AuthenticationException):
        connect(state, fabric.node("node01").port, user="root")


def test_second_up_says_the_lab_runs(lab):
    state, fabric = lab
    with pytest.raises(SetupError, match="already running"):
        controller.up(state, fabric)


def test_a_command_whose_client_is_gone_runs_on_until_its_next_write(lab, tmp_path):
    """As under sshd without a pty: the client closes while the command runs; the command is not
    signalled, its next write ("tick" is already in the pipe; "tock" is not) ends bash with SIGPIPE,
    and a child that writes nothing (``sleep; touch``, as a tool between its own steps) finishes."""
    import time

    state, fabric = lab
    run_dir = tmp_path / "marks"  # any uid the lab's shells run as may write here (no sudo: the
    run_dir.mkdir()               # lab's sudo serves only a live session's processes)
    run_dir.chmod(0o1777)
    tmp_path.chmod(0o755)
    client = connect(state, fabric.node("node01").port)
    _, out, _ = client.exec_command("echo started; (sleep 2; touch {d}/hup-child) & sleep 0.5; "
                                    "echo tick; sleep 1; touch {d}/hup-after-tick; echo tock; "
                                    "touch {d}/hup-after-tock".format(d=run_dir), timeout=20)
    assert out.readline() == "started\n"
    client.close()
    deadline = time.monotonic() + 15
    while not (run_dir / "hup-child").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1)
    assert [(run_dir / f"hup-{m}").exists() for m in ("child", "after-tick", "after-tock")] == [True, True, False]
