"""The fast layer of the node domains: plan, apply with read back, idempotency and restore of the
real domains on a lab node's sysroot, in this process's machine (no SSH, no lab daemon: the
commands run through :class:`tuning.transport.local.LocalHost` with the lab's stand-ins, as the
lab's SSH server would run them). The lab tests (tests/node, tests/engine) prove the same over SSH
with sudo; these run in the fast tier."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.node.conftest import node_files
from tuning import node
from tuning.lab.fabric import default_fabric
from tuning.lab.localnode import lab_node

NODE = "node01"
#: domains pushed together (their reads are one round trip); values from inventory/lab's profile
CASES = {"mtu+sysctl": {"mtu", "sysctl"}, "nic_qos": {"nic_qos"}, "files": {"files"}}
#: node01's NICs but the first (enp12s0np0, mlx5_0): their settings are left to the lab tests
OTHER_NICS = tuple(name for nic in next(n for n in default_fabric().nodes if n.name == NODE).nics[1:]
                   for name in (f"/{nic.netdev}", f"/{nic.rdma_device}"))

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the stand-ins refuse privileged writes to a non-root "
                                "user, as the kernel does (the lab tests cover sudo)")


@pytest.mark.parametrize("domains", list(CASES.values()), ids=list(CASES))
def test_a_domain_plans_applies_reads_back_and_restores_in_process(laid, domains: set[str]):
    state, dev = laid
    host = lab_node(state, NODE)
    sysroot = Path(host.cwd) / host.sysroot  # the lab node's own files, read beside the host
    before = node_files(sysroot)

    def planned() -> list:
        return [c for c in node.plan(dev, node.collect(host, dev, only=domains)) if c.domain in domains]

    every = planned()
    assert every and {c.domain for c in every} == domains
    # the first NIC's settings and the node-wide ones: each kind of command, at a fast tier's cost
    changes = [c for c in every if not any(nic in c.key for nic in OTHER_NICS)]
    assert all(c.apply_cmd and c.read_cmd for c in changes)
    done = node.apply(host, dev, changes)  # every write read back (VerifyError otherwise)
    assert [c.key for c in done] == [c.key for c in changes]
    # idempotent: a second plan finds what was pushed as the profile wants it, the rest untouched
    assert [c.key for c in planned()] == [c.key for c in every if c not in changes]
    if "mtu" in domains:
        assert (sysroot / "sys/class/net/enp12s0np0/mtu").read_text().strip() == str(dev.spec.mtu)
    if "files" in domains:
        assert "net.core.rmem_max = 268435456" in (sysroot / "etc/sysctl.d/90-fabtune.conf").read_text()
    node.restore(host, NODE, done, False)
    assert node_files(sysroot) == before  # byte for byte, links included
    assert [c.key for c in planned()] == [c.key for c in every]
