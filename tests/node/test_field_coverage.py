"""Field coverage of the node model and issue 6 item 3 (node half): every NodeSpec field, changed,
shows in the plan, is pushed, read back, and survives ``fabtune lab reboot``; boot runs the files
generated from the plan's own values only through the ENABLED unit."""

from __future__ import annotations

import os

from tests.node.conftest import Node, with_spec
from tuning import node
from tuning.lab.boot import reboot

#: field -> (spec update, a key the plan must show on node01 (OFED) / node04 (inbox driver))
FIELDS = {
    "mtu": ({"mtu": 4200}, "mtu/enp12s0np0", "mtu/enp12s0np0"),
    "nic_qos.trust": ({"nic_qos": {"trust": "pcp"}}, "trust/enp12s0np0", "trust/enp12s0np0"),
    "nic_qos.pfc_priority": ({"nic_qos": {"pfc_priority": 4}}, "pfc/enp12s0np0", "pfc/enp12s0np0"),
    "nic_qos.ecn": ({"nic_qos": {"ecn": False}}, "ecn/enp12s0np0/roce_np/3", None),
    "nic_qos.roce_dscp": ({"nic_qos": {"roce_dscp": 24}}, "tos/mlx5_0", "tos/mlx5_0"),
    "nic_qos.cnp_dscp": ({"nic_qos": {"cnp_dscp": 46}}, "cnp_dscp/enp12s0np0", "cc/enp12s0np0/np_cnp_dscp"),
    "nic_qos.cnp_priority": ({"nic_qos": {"cnp_priority": 5}}, "cnp_prio/enp12s0np0", "cc/enp12s0np0/np_cnp_prio"),
    "nic_qos.dcbx": ({"nic_qos": {"dcbx": "fw"}}, "dcbx/enp12s0np0", "dcbx/enp12s0np0"),
    "sysctl": ({"sysctl": {"net.core.rmem_max": "134217728"}}, "sysctl/net.core.rmem_max", "sysctl/net.core.rmem_max"),
    "irq_cpus": ({"irq_cpus": "0-7"}, "irq/enp12s0np0/109", "irq/enp12s0np0/109"),
    "irq_affinity": ({"irq_affinity": "numa-local"}, None, None),  # the default: "off" plans no IRQ key
}
# "irqbalance" (domain services) is covered in test_readback.py: it needs a running agent to change.

ROUND_A = {"mtu": 4200, "irq_cpus": "0-7", "sysctl": {"net.core.rmem_max": "134217728", "kernel.numa_balancing": "1"},
           "nic_qos": {"trust": "pcp", "pfc_priority": 4, "roce_dscp": 24, "cnp_dscp": 46, "cnp_priority": 5,
                       "dcbx": "fw"}}
ROUND_B = {**ROUND_A, "nic_qos": {**ROUND_A["nic_qos"], "ecn": False}}


def test_every_node_field_plans_pushes_reads_back_and_survives_reboot(node_lab):
    state_dir = node_lab / ".state"
    n, inbox = Node(node_lab, "node01"), Node(node_lab, "node04")
    try:
        node.apply(n.host, n.dev, n.plan())  # the lab inventory's profile, then each field changes from there
        node.apply(inbox.host, inbox.dev, inbox.plan())
        tuned, tuned_inbox = node.collect(n.host, n.dev), node.collect(inbox.host, inbox.dev)
        for field, (update, key, inbox_key) in FIELDS.items():
            planned = {c.key for c in node.plan(with_spec(n.dev, update), tuned)}
            planned_inbox = {c.key for c in node.plan(with_spec(inbox.dev, update), tuned_inbox)}
            assert key is None or key in planned, field
            assert inbox_key is None or inbox_key in planned_inbox, field
        assert not {c.key for c in node.plan(with_spec(n.dev, {"irq_affinity": "off"}), tuned)
                    if c.domain == "irq"}
        for update in (ROUND_A, ROUND_B):  # pushed and read back (apply raises on any mismatch)
            dev = with_spec(n.dev, update)
            node.apply(n.host, dev, node.plan(dev, node.collect(n.host, dev)))
        dev = with_spec(n.dev, ROUND_B)
        root = n.sysroot
        assert os.readlink(root / "etc/systemd/system/multi-user.target.wants/fabtune-nic.service") == \
            "/etc/systemd/system/fabtune-nic.service"
        assert (root / "proc/irq/109/smp_affinity_list").read_text() == "0\n"  # irq_cpus 0-7: the 9th IRQ wraps
        reboot(state_dir, "node01", dev.connection)
        h = Node(node_lab, "node01")
        try:
            assert node.plan(dev, node.collect(h.host, dev)) == []  # every value came back at boot
            assert (root / "sys/class/net/enp12s0np0/mtu").read_text() == "4200\n"
            assert (root / "proc/sys/net/core/rmem_max").read_text() == "134217728\n"
            assert (root / "sys/class/net/enp12s0np0/ecn/roce_np/enable/4").read_text() == "0\n"
            h.host.run("systemctl --root=sysroot disable fabtune-nic.service").check("node01")
        finally:
            h.close()
        reboot(state_dir, "node01", dev.connection)  # installed but not enabled: boot does not run it
        h = Node(node_lab, "node01")
        try:
            keys = {c.key for c in node.plan(dev, node.collect(h.host, dev))}
            assert {"mtu/enp12s0np0", "irq/enp12s0np0/101", "unit/fabtune-nic.service"} <= keys
            assert "sysctl/net.core.rmem_max" not in keys  # sysctl.d is read at boot on its own
        finally:
            h.close()
    finally:
        n.close()
        inbox.close()
