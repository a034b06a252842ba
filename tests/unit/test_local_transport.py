"""The local transport (tuning.transport.local.LocalHost): the Host contract over subprocesses, as
a perftest server needs it: a banner seen while the command runs on, output and exit status kept,
a command past its time killed and named."""

from __future__ import annotations

import time

import pytest

from tuning.errors import ConnectError
from tuning.transport.local import LocalHost


def test_a_running_command_shows_its_banner_then_its_result():
    host = LocalHost("node01")
    running = host.start("echo 'waiting for connections'; sleep 1; echo served >&2; exit 3")
    t0 = time.monotonic()
    assert running.read_until("waiting for connections", timeout=5) and time.monotonic() - t0 < 0.9
    res = running.wait(10)
    assert (res.rc, res.stdout, res.stderr) == (3, "waiting for connections\n", "served\n")
    assert not host.start("exit 0").read_until("never printed", timeout=5)  # ended: False, not a 5 s wait


def test_a_command_past_its_time_is_killed_and_named():
    with pytest.raises(ConnectError, match="`sleep 30` did not finish within 1 s"):
        LocalHost("node01").run("sleep 30", timeout=1)
