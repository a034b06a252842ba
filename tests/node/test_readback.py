"""Contract 1 and issue 6 items 7 and 10 on a lab node: every write is read back (an agent that
puts a value back fails the device, naming key, wanted and read value), the plan reports the
agents and the profile chooses what to do, the NIC's DSCP map is owned, and restore needs
nothing but the journaled change dicts."""

from __future__ import annotations

import json
import time

import pytest

from tests.node.conftest import Node, node_files
from tuning import node
from tuning.errors import VerifyError
from tuning.lab.inject import inject
from tuning.lab.power_on import reset


def test_restore_from_journaled_dicts_alone_gives_the_node_back_byte_for_byte(node_lab):
    reset(node_lab / ".state")  # power-on: the module's other tests start and stop irqbalance agents
    n = Node(node_lab, "node02")
    try:
        before = node_files(n.sysroot)
        changes = n.plan()
        assert changes and all(c.apply_cmd and c.read_cmd for c in changes)
        journaled = json.loads(json.dumps([c.as_dict() for c in changes]))  # what the journal holds
        node.apply(n.host, n.dev, changes)
        assert n.plan() == []  # applied, read back, and the next plan agrees
        assert node_files(n.sysroot) != before
        node.restore(n.host, "node02", journaled)
        after = node_files(n.sysroot)
        assert {k for k in after.keys() ^ before.keys()} == set()
        assert [k for k in before if before[k] != after[k]] == []
    finally:
        n.close()


def test_irqbalance_rewriter_fails_apply_naming_key_wanted_and_read(node_lab):
    inject(node_lab / ".state", "node03", "irqbalance")
    n = Node(node_lab, "node03", {"irqbalance": "leave"})
    try:
        changes = [c for c in n.plan() if c.domain == "irq"]
        assert changes and not [c for c in n.plan() if c.key == "service/irqbalance"]
        with pytest.raises(VerifyError) as err:
            node.apply(n.host, n.dev, changes)
        first = changes[0]
        assert f"{first.key}: wanted '{first.after}', read '0-15'" in str(err.value)
        node.restore(n.host, "node03", err.value.applied)  # the engine restores what went through
        assert (n.sysroot / f"proc/irq/{first.key.rsplit('/', 1)[1]}/smp_affinity_list").read_text() == "0-15\n"
    finally:
        n.close()


def test_plan_reports_running_irqbalance_and_stop_is_restored(node_lab):
    # irqbalance: stop (the default); its own agent, as xdist's work stealing may run this test
    # without the previous one (which leaves one running) or before it
    inject(node_lab / ".state", "node03", "irqbalance")
    n = Node(node_lab, "node03")
    try:
        changes = n.plan()
        svc = [c for c in changes if c.domain == "services"]
        assert [(c.key, c.before, c.after, c.apply_cmd, c.restore_cmd) for c in svc] == [
            ("service/irqbalance", "active", "inactive", "systemctl stop irqbalance.service",
             "systemctl start irqbalance.service")]
        node.apply(n.host, n.dev, changes)  # stopped first, so the IRQ writes hold
        time.sleep(0.3)
        assert n.plan() == []
        node.restore(n.host, "node03", changes)
        assert n.host.run("systemctl is-active irqbalance.service").stdout == "active\n"
    finally:
        inject(node_lab / ".state", "node03", "clear")
        n.close()


def test_dcbx_agent_resets_pfc_unless_the_nic_is_os_controlled(node_lab):
    inject(node_lab / ".state", "node04", "dcbx")
    fw = Node(node_lab, "node04", {"nic_qos": {"dcbx": "fw"}})
    try:
        out = fw.host.run("mlnx_qos -i enp12s0np0").stdout
        assert out.startswith("DCBX mode: Firmware controlled\n")
        changes = fw.plan()
        assert not [c for c in changes if c.key.startswith("dcbx/")]
        with pytest.raises(VerifyError, match=r"pfc/enp12s0np0: wanted '0,0,0,1,0,0,0,0', read '0,0,0,0,0,0,0,0'"):
            node.apply(fw.host, fw.dev, changes)
    finally:
        fw.close()
    n = Node(node_lab, "node04")  # dcbx: os (default)
    try:
        node.restore(n.host, "node04", changes)
        changes = n.plan()
        dcbx = [(c.key, c.before, c.after) for c in changes if c.key.startswith("dcbx/")]
        assert ("dcbx/enp12s0np0", "fw", "os") in dcbx and len(dcbx) == 8
        order = [c.key for c in changes]
        assert order.index("dcbx/enp12s0np0") < order.index("pfc/enp12s0np0")
        node.apply(n.host, n.dev, changes)
        time.sleep(0.2)
        assert n.plan() == []
    finally:
        inject(node_lab / ".state", "node04", "clear")
        n.close()


def test_dscp_to_priority_map_is_planned_set_read_back_and_restored(node_lab):
    n = Node(node_lab, "node01")
    try:
        n.host.run("mlnx_qos -i enp12s0np0 --trust dscp --dscp2prio set,26,0 >/dev/null").check("node01")
        changes = [c for c in n.plan() if c.key.startswith("dscp2prio/enp12s0np0/")]
        assert [(c.key, c.before, c.after, c.apply_cmd, c.restore_cmd) for c in changes] == [
            ("dscp2prio/enp12s0np0/26", "0", "3", "mlnx_qos -i enp12s0np0 --dscp2prio set,26,3 >/dev/null",
             "mlnx_qos -i enp12s0np0 --dscp2prio set,26,0 >/dev/null")]
        node.apply(n.host, n.dev, changes)
        assert "\tprio:3 dscp:31,30,29,28,27,26,25,24,\n" in n.host.run("mlnx_qos -i enp12s0np0").stdout
        node.restore(n.host, "node01", [c.as_dict() for c in changes])
        assert "\tprio:0 dscp:26,07,06,05,04,03,02,01,00,\n" in n.host.run("mlnx_qos -i enp12s0np0").stdout
    finally:
        n.close()


def test_irqbalance_ban_keeps_it_running_away_from_the_tuned_irqs(node_lab):
    inject(node_lab / ".state", "node02", "irqbalance")
    n = Node(node_lab, "node02", {"irqbalance": "ban"})
    env = n.sysroot / "etc/default/irqbalance"
    try:
        before = env.read_bytes()
        changes = n.plan()
        ban = [c for c in changes if c.domain == "services"]
        assert [(c.key, c.before) for c in ban] == [("irqbalance/banirq", "")]
        assert ban[0].after.startswith("101,102,103,") and "--banirq" not in ban[0].after
        node.apply(n.host, n.dev, changes)  # the IRQ writes hold: the restarted irqbalance skips them
        time.sleep(0.3)
        assert n.plan() == []
        assert "IRQBALANCE_ARGS='--banirq=101 --banirq=102 " in env.read_text()
        assert n.host.run("systemctl is-active irqbalance.service").stdout == "active\n"
        node.restore(n.host, "node02", [c.as_dict() for c in changes])
        assert env.read_bytes() == before
    finally:
        inject(node_lab / ".state", "node02", "clear")
        n.close()
