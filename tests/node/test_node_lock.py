"""The node-side lock: an apply or restore script waits for another fabtune script on the same
node (a killed controller's apply still running) instead of racing it, and says so when it
stays held."""

from __future__ import annotations

import time

import pytest

from tests.node.conftest import Node, node_files
from tuning import node
from tuning.node import nodelock
from tuning.errors import CommandError


def _hold_lock(n: Node, seconds: float):
    """Hold the node lock from a root shell on the node, as a running fabtune script does."""
    lock = n.sysroot / nodelock.NODE_LOCK.lstrip("/")
    started = n.host.start(privileged=True, command=f"exec 9>>'{lock}' && flock 9 && echo held && sleep {seconds}")
    assert started.read_until("held", timeout=20)
    return started


def test_an_unprivileged_user_cannot_hold_fabtune_off(node_lab):
    n = Node(node_lab, "node03")
    try:
        lock = n.sysroot / nodelock.NODE_LOCK.lstrip("/")
        res = n.host.run(f"flock -n '{lock}' true; exec 9<'{lock}'", privileged=False)
        assert res.rc != 0 and "Permission denied" in res.stderr, res
    finally:
        n.close()


def test_apply_waits_for_a_running_script_then_applies(node_lab):
    n = Node(node_lab, "node01")
    try:
        changes = [c for c in n.plan() if c.domain == "mtu"][:1]
        assert changes
        holder = _hold_lock(n, 3)
        t0 = time.monotonic()
        node.apply(n.host, n.dev, changes)
        waited = time.monotonic() - t0
        holder.wait(30)
        assert waited >= 2.0, waited
        key = changes[0].key.split("/", 1)[1]
        assert (n.sysroot / f"sys/class/net/{key}/mtu").read_text().strip() == changes[0].after
        node.restore(n.host, "node01", changes)
    finally:
        n.close()


def test_a_lock_held_too_long_fails_before_any_write(node_lab, monkeypatch):
    monkeypatch.setattr(nodelock, "NODE_LOCK_WAIT_S", 1)
    n = Node(node_lab, "node02")
    try:
        changes = [c for c in n.plan() if c.domain == "mtu"]
        before = node_files(n.sysroot)
        holder = _hold_lock(n, 4)
        with pytest.raises(CommandError) as err:
            node.apply(n.host, n.dev, changes)
        holder.wait(30)
        assert err.value.applied == []  # type: ignore[attr-defined]
        assert "another fabtune run holds" in str(err.value) and "75" in str(err.value)
        assert node_files(n.sysroot) == before
    finally:
        n.close()
