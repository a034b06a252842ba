"""Rendering: real lines for the lab inventory, identical bytes on a second run."""

from __future__ import annotations

from pathlib import Path

from tuning import inventory
from tuning.render import render_node
from tuning.rollout.offline import render_inventory

REPO = Path(__file__).resolve().parents[2]


def test_render_lab_twice_identical_and_real_lines(tmp_path: Path):
    inv = inventory.load(REPO / "inventory" / "lab")
    a = render_inventory(inv, tmp_path / "a")
    b = render_inventory(inv, tmp_path / "b")
    assert [p.name for p in a] == [p.name for p in b]
    assert len(a) == 7
    for pa, pb in zip(a, b):
        assert pa.read_bytes() == pb.read_bytes()
    leaf = (tmp_path / "a" / "leaf01.nvue").read_text().splitlines()
    assert "nv set interface swp1 link mtu 9216" in leaf
    assert "nv set interface swp31 link mtu 9216" in leaf
    assert "nv set qos roce mode lossless" in leaf
    assert "nv set qos mapping default-global dscp 26 switch-priority 3" in leaf
    assert "nv set qos congestion-control default-global traffic-class 3 min-threshold 150000" in leaf
    node = (tmp_path / "a" / "node01.files").read_text()
    assert "### /etc/sysctl.d/90-fabtune.conf\n" in node
    assert "net.core.rmem_max = 268435456\n" in node
    assert "mlnx_qos -i enp12s0np0 --trust dscp >/dev/null\n" in node
    assert "mlnx_qos -i enp12s0np0 --pfc 0,0,0,1,0,0,0,0 >/dev/null\n" in node
    assert "mlnx_qos -i enp12s0np0 --dscp2prio set,26,3 >/dev/null\n" in node
    assert "cma_roce_tos -d mlx5_0 -t 106 >/dev/null\n" in node
    assert "ExecStart=/usr/local/sbin/fabtune-nic-setup\n" in node
    assert "WorkingDirectory=/\n" in node


def test_boot_script_is_the_plan_commands_not_a_reimplementation():
    """The offline render holds exactly the commands the plan would push (no IRQ spread in Jinja)."""
    from tuning.node import domains
    from tuning.node.base import NodeFacts

    inv = inventory.load(REPO / "inventory" / "lab")
    dev = inv.devices["node01"]
    script = render_node(dev).split("### /usr/local/sbin/fabtune-nic-setup\n")[1].split("### ")[0]
    body = [l for l in script.splitlines() if l and not l.startswith("#") and l != "set -eu"]
    raw = {f"sysctl/{k}": "?" for k in dev.spec.sysctl} | {f"mtu/{n.netdev}": "?" for n in dev.spec.nics}
    facts = NodeFacts(raw=raw)
    want = [d.command(k, v, dev.spec, facts, ".") for d in domains() if d.name in ("mtu", "nic_qos", "irq")
            for k, v in d.desired(dev.spec, facts).items()]
    assert body == want
    assert "spread" not in script and "awk" not in script


def test_a_new_line_cannot_reach_a_node_file():
    import pytest

    from tuning.render import node_files_from_plan

    with pytest.raises(ValueError, match="new line"):
        node_files_from_plan([], {"kernel.numa_balancing": "0\nkernel.pwned = 1"})


def test_offline_render_says_what_it_cannot_hold():
    """An offline render has no IRQ numbers or NIC driver: its setup script says so on its first
    command line instead of looking complete (the inventory asks for IRQ affinity and ECN)."""
    from tuning import inventory
    from tuning.render import OFFLINE_NOTE, node_files

    dev = inventory.load(REPO / "inventory" / "example-su").devices["gpu-su1-n01"]
    assert dev.spec.nic_qos.ecn and dev.spec.irq_affinity == "numa-local"
    script = node_files(dev)["/usr/local/sbin/fabtune-nic-setup"]
    assert script.splitlines()[5] == OFFLINE_NOTE
    assert "smp_affinity" not in script
