"""Topology and CPU plan on lab nodes over SSH: discovery in one round trip (sysfs, nvidia-smi topo -m,
lscpu, numactl -H), completion IRQs of NIC k only on the IRQ CPUs of NIC k's NUMA node (never a reserved
or GPU-pinned CPU, no CPU used twice while one is free), the exact gres.conf lines of `fabtune topology`,
refusals before anything is pushed, and a rail whose GPU was moved behind another switch / NUMA node
flagged after `fabtune lab reboot`."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import typer
from typer.testing import CliRunner

from tests.node.conftest import Node, with_spec
from tuning import node
from tuning.cli_topology import topology as topology_cmd
from tuning.cpulist import parse_cpulist
from tuning.errors import InputError
from tuning.lab.fabric import GPU_BDFS, Fabric
from tuning.lab.power_on import reset
from tuning.node import cpuplan
from tuning.node.topology import discover, from_facts

CPU = {"reserved_cpus": "0,56,28,84", "irq_cores_per_numa": 2}
NUMA = {0: set(parse_cpulist("0-27,56-83")), 1: set(parse_cpulist("28-55,84-111"))}


class Counting:
    """A host that counts the commands sent through it (the SSH round trips)."""

    def __init__(self, host):
        self.host, self.sysroot, self.calls = host, host.sysroot, 0

    def run(self, command, **kw):
        self.calls += 1
        return self.host.run(command, **kw)


def _cli(*args: str):
    app = typer.Typer()
    app.command()(topology_cmd)
    app.command("noop")(lambda: None)  # two commands: typer keeps "topology" as a sub-command name
    return CliRunner().invoke(app, ["topology", *args])


def test_discover_maps_each_gpu_to_its_pix_nic_numa_and_cpus_in_one_round_trip(node_lab):
    n = Node(node_lab, "node01")
    try:
        host = Counting(n.host)
        topo = discover(host, n.dev)
        assert host.calls == 1
        assert [(g.index, g.bdf, g.numa_node, g.cpus, g.minor) for g in topo.gpus] == [
            (i, GPU_BDFS[i], i // 4, "0-27,56-83" if i < 4 else "28-55,84-111", i) for i in range(8)]
        assert [(l.gpu, l.nearest_nic, l.link, l.rail_nic, l.rail_link) for l in topo.links] == [
            (i, f"mlx5_{i}", "PIX", f"mlx5_{i}", "PIX") for i in range(8)]
        assert topo.flagged() == [] and topo.sources["links"] == "nvidia-smi topo -m"
        assert topo.numa_nodes == {0: "0-27,56-83", 1: "28-55,84-111"} and topo.siblings[5] == (5, 61)
        assert {n.rdma_device: (n.numa_node, n.rail) for n in topo.nics}["mlx5_6"] == (1, 6)
        raw = n.host.run("lscpu; numactl -H").stdout  # the stand-ins agree with sysfs
        assert "NUMA node1 CPU(s):     28-55,84-111" in raw and "node 1 cpus: 28 29 30" in raw
    finally:
        n.close()


def test_completion_irqs_stay_on_their_numa_nodes_irq_cores_over_ssh(node_lab):
    n = Node(node_lab, "node02", {"cpu": CPU})
    try:
        state = node.collect(n.host, n.dev, only={"irq"})
        plan = cpuplan.plan(n.dev.spec, from_facts(n.dev.spec, state.facts))
        assert [(p.node, p.irq) for p in plan.nodes] == [(0, [1, 2, 57, 58]), (1, [29, 30, 85, 86])]
        changes = node.plan(n.dev, state)
        node.apply(n.host, n.dev, changes)
        irqs = {nic.netdev: state.facts.nics[nic.netdev]["comp_irqs"] for nic in n.dev.spec.nics}
        script = "; ".join(f"echo {q} $(cat sysroot/proc/irq/{q}/smp_affinity_list)" for qs in irqs.values() for q in qs)
        live = {int(a): parse_cpulist(b) for a, b in (l.split() for l in n.host.run(script).stdout.splitlines())}
        pinned, reserved = set(plan.gpu_workers()), set(parse_cpulist(CPU["reserved_cpus"]))
        numa_of = {nic.netdev: int(state.facts.nics[nic.netdev]["numa_node"]) for nic in n.dev.spec.nics}
        for nic in n.dev.spec.nics:
            for irq in irqs[nic.netdev]:
                assert len(live[irq]) == 1 and set(live[irq]) <= set(plan.irq_cpus(numa_of[nic.netdev])), (nic, irq)
                assert set(live[irq]) <= NUMA[numa_of[nic.netdev]] and not set(live[irq]) & (reserved | pinned)
        for numa in (0, 1):  # 4 NICs x 16 IRQs over 4 CPUs: every CPU takes 16, none more
            load = Counter(live[q][0] for nic, qs in irqs.items() if numa_of[nic] == numa for q in qs)
            assert set(load) == set(plan.irq_cpus(numa)) and set(load.values()) == {16}
        assert node.plan(n.dev, node.collect(n.host, n.dev, only={"irq"})) == []
        node.restore(n.host, "node02", changes)
    finally:
        n.close()


def test_irq_cpus_on_a_reserved_cpu_and_a_plan_without_gpu_cores_are_refused_before_any_push(node_lab):
    reset(node_lab / ".state")  # power-on: a later test moves node03's GPUs (its NUMA layout) and reboots
    n = Node(node_lab, "node03")
    try:
        state = node.collect(n.host, n.dev, only={"irq"})
        with pytest.raises(InputError, match=r"irq_cpus: CPUs 0 are cpu.reserved_cpus \(0,56\)"):
            node.plan(with_spec(n.dev, {"cpu": {"reserved_cpus": "0,56"}, "irq_cpus": "0-7"}), state)
        with pytest.raises(InputError) as err:
            node.plan(with_spec(n.dev, {"cpu": {"reserved_cpus": "0,56,28,84", "irq_cores_per_numa": 26}}), state)
        assert err.value.key == "cpu.irq_cores_per_numa"
        assert ("NUMA node 0 has 28 physical cores: 1 hold reserved CPUs (cpu.reserved_cpus 0,56,28,84), 26 are kept "
                "for NIC IRQs (cpu.irq_cores_per_numa 26), 1 are left for its 4 GPUs (GPU0, GPU1, GPU2, GPU3); "
                "allowed: each GPU needs a whole core, so at most 23 IRQ cores") in str(err.value)
        assert n.host.run("cat sysroot/proc/irq/101/smp_affinity_list").stdout == "0-15\n"  # nothing pushed
    finally:
        n.close()


def test_fabtune_topology_prints_the_exact_gres_lines_and_refuses_a_starved_plan(node_lab):
    vars_file = node_lab / "host_vars/node04.yml"
    original = vars_file.read_text()
    try:
        res = _cli("-i", str(node_lab), "node04", "--gres")
        assert res.exit_code == 0, res.output
        assert res.output.splitlines() == [f"Name=gpu Type=h100 File=/dev/nvidia{i} Cores={c}" for i, c in enumerate(
            ["0-6", "7-13", "14-20", "21-27", "28-34", "35-41", "42-48", "49-55"])]
        vars_file.write_text(original + "cpu:\n  reserved_cpus: 0,56,28,84\n  irq_cores_per_numa: 2\n")
        res = _cli("-i", str(node_lab), "node04", "--gres")
        assert res.output.splitlines() == [f"Name=gpu Type=h100 File=/dev/nvidia{i} Cores={c}" for i, c in enumerate(
            ["3-9", "10-15", "16-21", "22-27", "31-37", "38-43", "44-49", "50-55"])]
        doc = json.loads(_cli("-i", str(node_lab), "node04", "--json").output)
        assert doc["cpu_plan"]["gpus"][0]["cpus"] == "3-9,59-65" and doc["cpu_plan"]["numa_nodes"][1]["irq_cpus"] == \
            "29-30,85-86"
        table = _cli("-i", str(node_lab), "node04").output
        assert "GPU0" in table and "0 rail(s) flagged" in table
        vars_file.write_text(original + "cpu:\n  reserved_cpus: 0,56,28,84\n  irq_cores_per_numa: 26\n")
        res = _cli("-i", str(node_lab), "node04", "--gres")
        assert isinstance(res.exception, InputError) and res.exception.key == "cpu.irq_cores_per_numa"
        assert str(vars_file) in str(res.exception)
    finally:
        vars_file.write_text(original)


def test_a_gpu_moved_behind_another_switch_or_numa_node_is_flagged_after_reboot(node_lab):
    from tuning.lab.boot import reboot

    state = node_lab / ".state"
    fabric = Fabric.load(state / "fabric.json")
    fabric.node("node03").gpu_misplaced = {"2": "NODE", "5": "SYS"}  # re-seated at the next power cycle
    fabric.save(state / "fabric.json")
    n = Node(node_lab, "node03")
    try:
        reboot(state, "node03", n.dev.connection)
        found = node.findings(n.dev, node.collect(n.host, n.dev, only={"irq"}))  # sysfs only: the NUMA move
        assert [(f.code, f.message) for f in found] == [
            ("rail-remote-nic", "rail 5: NIC mlx5_5 is SYS from GPU5 (on another NUMA node)")]
    finally:
        n.close()
    topo = json.loads(_cli("-i", str(node_lab), "node03", "--json").output)["topology"]
    assert [(l["gpu"], l["rail_nic"], l["rail_link"], l["flag"]) for l in topo["links"] if l["flag"]] == [
        (2, "mlx5_2", "NODE", "rail 2: NIC mlx5_2 is NODE from GPU2 (behind another PCIe host bridge of the same "
                              "NUMA node)"),
        (5, "mlx5_5", "SYS", "rail 5: NIC mlx5_5 is SYS from GPU5 (on another NUMA node)")]
    assert topo["gpus"][5]["numa_node"] == 0 and topo["links"][5]["nearest_nic"] == "mlx5_0"
