"""Issue 6 item 1 (shell side): inventory strings that reach a node shell are quoted. Specs are
built with ``model_construct`` to get past the model's grammar, as a bug in it would."""

from __future__ import annotations

import pytest

from tests.node.conftest import Node
from tuning import node
from tuning.errors import CommandError, TuningError
from tuning.model import NodeSpec

MARKERS = ("pwned", "pwned2", "pwned3", "pwned4")


def _markers(inv_dir):
    return [p for p in (inv_dir / ".state").rglob("pwned*")]


def _evil(dev, **fields):
    from dataclasses import replace

    return replace(dev, spec=NodeSpec.model_construct(**{**dict(dev.spec), **fields}))


def test_malicious_sysctl_keys_run_nothing_during_plan(node_lab):
    n = Node(node_lab, "node01")
    try:
        dev = _evil(n.dev, sysctl={"kernel.numa_balancing;touch pwned": "0", "$(touch pwned2)": "1",
                                   "`touch pwned3`": "1", "kernel.numa_balancing": "0"})
        state = node.collect(n.host, dev, only={"sysctl"})
        assert state.current["sysctl"]["sysctl/kernel.numa_balancing;touch pwned"] != "0"
        with pytest.raises(TuningError, match=r"kernel parameter kernel\.numa_balancing;touch pwned"):
            node.plan(dev, state)  # refused as a missing parameter, not run
        assert _markers(node_lab) == []
    finally:
        n.close()


def test_malicious_value_is_refused_by_the_kernel_not_written_as_text(node_lab):
    n = Node(node_lab, "node01")
    try:
        dev = _evil(n.dev, sysctl={"kernel.numa_balancing": "1; touch pwned4"})
        changes = node.plan(dev, node.collect(n.host, dev, only={"sysctl"}))
        assert [c.key for c in changes] == ["sysctl/kernel.numa_balancing"]
        assert changes[0].apply_cmd == "sysctl -q -w 'kernel.numa_balancing=1; touch pwned4'"
        with pytest.raises(CommandError, match='sysctl: setting key "kernel.numa_balancing": Invalid argument'):
            node.apply(n.host, dev, changes)
        assert (n.sysroot / "proc/sys/kernel/numa_balancing").read_text() == "1\n"
        assert _markers(node_lab) == []
    finally:
        n.close()


def test_malicious_netdev_and_rdma_names_are_quoted_in_every_read(node_lab):
    n = Node(node_lab, "node01")
    try:
        nic = n.dev.spec.nics[0].model_construct(**{**dict(n.dev.spec.nics[0]), "netdev": "x$(touch pwned)",
                                                  "rdma_device": "m;touch pwned2"})
        dev = _evil(n.dev, nics=[nic])
        state = node.collect(n.host, dev)  # every domain's read script
        with pytest.raises(TuningError):
            node.plan(dev, state)  # the node has no such netdev: refused before anything is pushed
        assert _markers(node_lab) == []
    finally:
        n.close()


@pytest.mark.parametrize("output, rc", [("garbage that is no status table\n", 0), ("", 1)])
def test_unreadable_mlnx_qos_is_an_error_before_any_write_not_absent(node_lab, output, rc):
    """Item 4 (node side): a QoS that cannot be read cannot be journaled as "absent" (nothing to restore)."""
    tool = node_lab / ".state" / "bin" / "mlnx_qos"
    real = tool.read_text()
    n = Node(node_lab, "node02")
    try:
        tool.write_text(f"#!/bin/sh\nprintf '%s' '{output}'\nexit {rc}\n")
        before = (n.sysroot / "sys/class/net/enp12s0np0/mtu").read_text()
        with pytest.raises(TuningError, match="mlnx_qos"):
            node.plan(n.dev, node.collect(n.host, n.dev))
        assert (n.sysroot / "sys/class/net/enp12s0np0/mtu").read_text() == before
    finally:
        tool.write_text(real)
        n.close()
