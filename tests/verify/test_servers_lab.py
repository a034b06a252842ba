"""A perftest server whose client never came is ended, not left holding its port (over real SSH on
the lab): closing the SSH channel does not end it (no pty), so ``end_server`` kills it by the pid
its start line names, once /proc shows that pid is still that server; the port is then free for
the next server of the node. A server that ends by itself is collected as it was."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tuning import inventory
from tuning.transport.ssh import SshHost
from tuning.verify.servers import end_server, server_pid, start_server

pytestmark = pytest.mark.lab

SERVER = "ib_write_bw -d mlx5_0 -i 1 -x 3 -F --report_gbits -D 2 -s 65536 -q 1 -p {port}"


def _alive(pid: int) -> bool:
    try:
        return "ib_write_bw" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def test_a_server_without_its_client_is_ended_and_its_port_freed(lab_inventory: Path):
    dev = inventory.load(lab_inventory).devices["node02"]
    host = SshHost("node02", dev.connection)
    try:
        srv = start_server(host, SERVER.format(port=18601))
        assert srv.read_until("Waiting for client to connect", timeout=10)
        pid = server_pid(srv.output())
        assert pid is not None and pid != os.getpid() and _alive(pid)
        # a second server on the node's port cannot listen: the first one holds it
        other = start_server(host, SERVER.format(port=18601))
        res = end_server(host, other, "ib_write_bw", 18601)
        assert res is not None and res.rc == 1 and "Couldn't listen to port 18601" in res.stderr
        assert end_server(host, srv, "ib_write_bw", 18601, grace_s=0.5) is None
        deadline = time.monotonic() + 5
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid)
        again = start_server(host, SERVER.format(port=18601))  # the port is free again
        assert again.read_until("Waiting for client to connect", timeout=10)
        assert end_server(host, again, "ib_write_bw", 18601, grace_s=0.2) is None
    finally:
        host.close()


def test_a_pid_that_is_no_longer_the_server_is_left_alone(lab_inventory: Path):
    """The kill checks /proc first: a pid whose command line is not the server's is not signalled."""
    dev = inventory.load(lab_inventory).devices["node02"]
    host = SshHost("node02", dev.connection)
    try:
        sleeper = host.start("echo @@fabtune-pid $$; exec sleep 30", privileged=False)
        assert sleeper.read_until("@@fabtune-pid", timeout=10)
        pid = server_pid(sleeper.output())
        assert end_server(host, sleeper, "ib_write_bw", 18601, grace_s=0.2) is None
        assert Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep")  # still running
        os.kill(pid, 15)
    finally:
        host.close()
