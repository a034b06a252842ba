"""Domain ``hugepages`` and NUMA balancing on a lab node over SSH (issue 7, "Kernel and power"): 2 MiB
and 1 GiB pools per NUMA node planned, pushed, read back, restored byte for byte (meminfo included)
and back after ``fabtune lab reboot``; a pool beyond a NUMA node's memory is refused before anything
is pushed; beyond its FREE memory the kernel allocates fewer pages and the read-back says so;
``kernel.numa_balancing`` is the sysctl ``kernel.numa_balancing``, written once.

Lab memory per NUMA node (``node<N>/meminfo``): node0 MemTotal 1056466084 kB (1007 x 1 GiB),
MemFree 1031234568 kB (983 x 1 GiB)."""

from __future__ import annotations

import pytest

from tests.node.conftest import Node, node_files, with_spec
from tuning import node
from tuning.errors import InputError
from tuning.lab.boot import reboot

KERNEL = {"hugepages_2m_per_numa": 1024, "hugepages_1g_per_numa": 16}
POOL = "sys/devices/system/node/node{}/hugepages/hugepages-{}kB/nr_hugepages"


def _mine(changes, domains=("hugepages", "sysctl", "files")):
    return [c for c in changes if c.domain in domains]


def _plan(n: Node, dev=None):
    dev = dev or n.dev
    return node.plan(dev, node.collect(n.host, dev))


def test_pools_plan_apply_read_back_restore_and_reboot(node_lab):
    n = Node(node_lab, "node01", {"kernel": KERNEL, "sysctl": {}})
    try:
        before = node_files(n.sysroot)
        changes = _mine(n.plan(), ("hugepages", "files"))
        assert [(c.key, c.before, c.after, c.effect) for c in changes if c.domain == "hugepages"] == [
            ("hugepages/node0/1048576kB", "0", "16", "live"), ("hugepages/node0/2048kB", "0", "1024", "live"),
            ("hugepages/node1/1048576kB", "0", "16", "live"), ("hugepages/node1/2048kB", "0", "1024", "live")]
        assert changes[1].apply_cmd == ("printf '%s\\n' 1024 | tee sysroot/sys/devices/system/node/node0/hugepages/"
                                        "hugepages-2048kB/nr_hugepages >/dev/null")
        node.apply(n.host, n.dev, changes)
        meminfo = (n.sysroot / "sys/devices/system/node/node1/meminfo").read_text()
        assert "Node 1 HugePages_Total:  1024\n" in meminfo and "Node 1 MemFree:        1014844428 kB\n" in meminfo
        assert "Hugetlb:        37748736 kB\n" in (n.sysroot / "proc/meminfo").read_text()
        assert _mine(_plan(n), ("hugepages", "files")) == []
        node.restore(n.host, "node01", [c.as_dict() for c in changes])
        assert node_files(n.sysroot) == before  # pools, meminfo and the boot files as they were
        node.apply(n.host, n.dev, changes)
    finally:
        n.close()
    reboot(node_lab / ".state", "node01", n.dev.connection)
    with_boot = Node(node_lab, "node01", {"kernel": KERNEL, "sysctl": {}})
    try:
        assert _mine(_plan(with_boot), ("hugepages", "files")) == []  # the boot script sized the pools again
        assert (with_boot.sysroot / POOL.format(1, 1048576)).read_text() == "16\n"
    finally:
        with_boot.close()


def test_beyond_memory_or_free_memory_refused_before_push(node_lab):
    n = Node(node_lab, "node02", {"sysctl": {}})
    try:
        before = node_files(n.sysroot)
        too_big = with_spec(n.dev, {"kernel": {"hugepages_1g_per_numa": 1008}})  # node0 holds 1007 GiB
        with pytest.raises(InputError, match=r"kernel\.hugepages_1g_per_numa: 1008 x 1 GiB per NUMA node is "
                                             r"1008\.0 GiB, more than node0's memory \(1007\.5 GiB MemTotal\); "
                                             r"allowed: at most 1007 x 1 GiB"):
            _plan(n, too_big)
        assert node_files(n.sysroot) == before
        short = with_spec(n.dev, {"kernel": {"hugepages_1g_per_numa": 1000}})  # fits memory, not free memory
        with pytest.raises(InputError, match=r"kernel\.hugepages_1g_per_numa: 1000 x 1 GiB per NUMA node is "
                                             r"1000\.0 GiB, more than node0 can give \(983\.5 GiB MemFree"):
            _plan(n, short)  # the kernel would allocate only 983 pages, and a pool that size invites the OOM killer
        assert node_files(n.sysroot) == before
    finally:
        n.close()


def test_numa_balancing_is_the_sysctl_written_once(node_lab):
    n = Node(node_lab, "node03", {"kernel": {"numa_balancing": False}, "sysctl": {}})
    try:
        changes = _mine(n.plan(), ("sysctl",))
        assert [(c.key, c.before, c.after, c.apply_cmd) for c in changes] == [
            ("sysctl/kernel.numa_balancing", "1", "0", "sysctl -q -w kernel.numa_balancing=0")]
        files = {c.key: c.after for c in n.plan() if c.domain == "files"}
        assert "kernel.numa_balancing = 0" in files["file/etc/sysctl.d/90-fabtune.conf"]  # persisted for boot
        node.apply(n.host, n.dev, changes)
        assert (n.sysroot / "proc/sys/kernel/numa_balancing").read_text() == "0\n"
        node.restore(n.host, "node03", changes)
        both = with_spec(n.dev, {"sysctl": {"kernel.numa_balancing": 1}})
        with pytest.raises(InputError, match=r"kernel\.numa_balancing: false \(sysctl 0\) but "
                                             r"sysctl\.kernel\.numa_balancing is 1; allowed: set it in one place"):
            _plan(n, both)
    finally:
        n.close()
