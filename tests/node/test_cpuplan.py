"""The per-GPU CPU plan (pure): whole cores with their SMT siblings, IRQ cores and reserved CPUs kept out,
Slurm gres.conf lines with LOGICAL core indices and the driver's /dev/nvidia minor, the JSON map, refusals
of a plan that leaves a GPU without a core, ``isolated_cpus`` computed from a collect's facts, and NVML
discovery falling back to sysfs per missing call (no GPU here: a stand-in pynvml and a sysfs tree)."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest
from pydantic import ValidationError

from tuning.cpulist import format_cpulist
from tuning.model import NodeSpec
from tuning.model.node_tuning import CpuSpec
from tuning.node import cpuplan, facts as facts_mod
from tuning.node.base import READ_EPILOGUE, READ_PRELUDE, Unfit
from tuning.node.topology import Gpu, TopoNic, Topology, pair, numa_link, read_script

REPO = Path(__file__).resolve().parents[2]


def _interleaved() -> Topology:
    """2 sockets x 16 cores x 2 threads, CPUs numbered across sockets (even: socket 0, odd: socket 1;
    CPU c and c+32 share a core), 2 GPUs per NUMA node whose /dev/nvidia minors are not their indices."""
    sockets = {s: [c for c in range(64) if c % 2 == s] for s in (0, 1)}
    gpus = [Gpu(0, "0000:17:00.0", 0, format_cpulist(sockets[0]), 2, "NVIDIA A100-SXM4-80GB"),
            Gpu(1, "0000:31:00.0", 0, format_cpulist(sockets[0]), 3, "NVIDIA A100-SXM4-80GB"),
            Gpu(2, "0000:b1:00.0", 1, format_cpulist(sockets[1]), 0, "NVIDIA A100-SXM4-80GB"),
            Gpu(3, "0000:ca:00.0", 1, format_cpulist(sockets[1]), 1, "NVIDIA A100-SXM4-80GB")]
    nics = [TopoNic(f"mlx5_{i}", f"ib{i}", "", i // 2, "", i) for i in range(4)]
    return Topology(gpus, nics, pair(gpus, nics, numa_link), numa_nodes={s: format_cpulist(c) for s, c in sockets.items()},
                    online="0-63", siblings={c: (c % 32, c % 32 + 32) for c in range(64)},
                    packages={c: c % 2 for c in range(64)})


def _spec(**cpu) -> NodeSpec:
    nic = {"netdev": "enp12s0np0", "rdma_device": "mlx5_0", "rail": 0, "ipv4": "10.0.0.1/24", "switch": "leaf01",
           "switch_port": "swp1"}
    return NodeSpec.model_validate({"nics": [nic], "cpu": cpu})


def test_gres_lines_use_logical_core_indices_and_the_device_minor():
    topo = _interleaved()
    plan = cpuplan.plan(_spec(reserved_cpus="0,32", irq_cores_per_numa=1), topo)
    assert [(p.node, p.reserved, p.irq) for p in plan.nodes] == [(0, [0, 32], [2, 34]), (1, [], [1, 33])]
    assert plan.gpu(0) == [4, 6, 8, 10, 12, 14, 16, 36, 38, 40, 42, 44, 46, 48]  # 7 whole cores, siblings along
    assert cpuplan.gres_lines(plan, topo) == [
        "Name=gpu Type=a100 File=/dev/nvidia2 Cores=2-8",     # CPUs 4..16 (even): socket 0's cores 2..8
        "Name=gpu Type=a100 File=/dev/nvidia3 Cores=9-15",
        "Name=gpu Type=a100 File=/dev/nvidia0 Cores=17-24",   # socket 1: logical cores 16..31; 15 cores: 8 + 7
        "Name=gpu Type=a100 File=/dev/nvidia1 Cores=25-31"]
    doc = cpuplan.json_map(plan, topo)
    assert doc["gpus"][2] == {"index": 2, "bdf": "0000:b1:00.0", "minor": 0, "numa_node": 1,
                              "local_cpus": format_cpulist([c for c in range(64) if c % 2]),
                              "cpus": "3,5,7,9,11,13,15,17,35,37,39,41,43,45,47,49", "slurm_cores": "17-24",
                              "rail_nic": "mlx5_2", "rail_link": None, "nearest_nic": "mlx5_2", "link": None}
    assert doc["numa_nodes"][0] == {"node": 0, "cpus": format_cpulist(list(range(0, 64, 2))), "reserved": "0,32",
                                    "irq_cpus": "2,34", "spare": ""}
    assert not set(plan.gpu_workers()) & {0, 32, 2, 34, 1, 33}


def test_a_half_reserved_core_goes_to_nobody_and_the_plan_is_deterministic():
    topo = _interleaved()
    plan = cpuplan.plan(_spec(reserved_cpus="0", irq_cores_per_numa=1), topo)
    assert plan.nodes[0].spare == [32] and 32 not in plan.gpu_workers()
    assert cpuplan.plan(_spec(reserved_cpus="0", irq_cores_per_numa=1), topo) == plan
    assert cpuplan.gres_lines(cpuplan.plan(_spec(), topo), topo, "a100-80g")[0] == \
        "Name=gpu Type=a100-80g File=/dev/nvidia2 Cores=0-7"  # no profile: no IRQ cores, 16 cores / 2 GPUs


@pytest.mark.parametrize(("cpu", "key", "problem"), [
    ({"reserved_cpus": "0,64-65"}, "cpu.reserved_cpus", "CPUs 64-65 do not exist on this node; allowed: online CPUs 0-63"),
    ({"irq_cores_per_numa": 15}, "cpu.irq_cores_per_numa", "1 are left for its 2 GPUs (GPU0, GPU1); allowed: each GPU "
                                                          "needs a whole core, so at most 14 IRQ cores"),
    ({"reserved_cpus": "0-29,32-61"}, "cpu.reserved_cpus", "0 are kept for NIC IRQs (cpu.irq_cores_per_numa None), "
                                                          "1 are left for its 2 GPUs"),
])
def test_a_plan_leaving_a_gpu_without_cores_is_refused(cpu, key, problem):
    with pytest.raises(Unfit) as err:
        cpuplan.plan(_spec(**cpu), _interleaved())
    assert err.value.key == key and problem in err.value.problem


@pytest.mark.parametrize("irq_cores", [None, 1])
def test_a_nic_whose_numa_node_is_all_reserved_is_refused(irq_cores):
    topo = _interleaved()
    topo.gpus = topo.gpus[:2]  # NUMA node 1: NICs ib2, ib3 and no GPU
    odd = format_cpulist(list(range(1, 64, 2)))
    with pytest.raises(Unfit) as err:
        cpuplan.plan(_spec(reserved_cpus=odd, irq_cores_per_numa=irq_cores), topo)
    free = "one whole core" if irq_cores else "one CPU"
    assert err.value.key == "cpu.reserved_cpus" and err.value.problem.endswith(
        f"for the completion IRQs of NIC ib2 (NIC completion IRQs never go to a reserved CPU); allowed: keep at "
        f"least {free} of its local CPUs {odd} out of cpu.reserved_cpus")


def test_gpu_numa_node_unknown_is_refused_on_two_nodes_and_taken_on_one():
    topo = _interleaved()
    topo.gpus[1] = Gpu(1, "0000:31:00.0", -1, "")
    with pytest.raises(Unfit, match="GPU1 .* has no known NUMA node"):
        cpuplan.plan(_spec(), topo)
    one = Topology([Gpu(0, "0000:17:00.0", -1, "")], [], [], numa_nodes={0: "0-7"}, online="0-7")
    assert cpuplan.plan(_spec(), one).gpu(0) == list(range(8))


def test_isolate_needs_irq_cores_at_load():
    with pytest.raises(ValidationError, match="isolate: true needs irq_cores_per_numa"):
        CpuSpec(isolate=True)


def test_isolated_cpus_from_a_collects_facts_on_a_lab_sysroot(tmp_path):
    from tuning import inventory
    from tuning.lab.fabric import default_fabric
    from tuning.lab.sysroot import build_sysroot

    build_sysroot(tmp_path / "sysroot", default_fabric().node("node01"))
    dev = inventory.load(REPO / "inventory/lab").devices["node01"]
    spec = dev.spec.model_copy(update={"cpu": CpuSpec(reserved_cpus="0,56,28,84", irq_cores_per_numa=2, isolate=True)})
    script = "\n".join([READ_PRELUDE, *facts_mod.read_script(spec, "sysroot"), *read_script(spec, "sysroot"),
                        READ_EPILOGUE])
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    facts = facts_mod.from_raw(spec, dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line))
    assert cpuplan.isolated_cpus(spec, facts) == "3-27,31-55,59-83,87-111"
    with pytest.raises(ValueError, match="topo/ keys"):
        cpuplan.isolated_cpus(spec, facts_mod.from_raw(spec, {}))


def _pci_tree(root: Path) -> None:
    """A sysfs with real PCI paths: GPU0 and mlx5_0 under one switch (NUMA 0), GPU1 on socket 1."""
    devs = {"0000:1b:00.0": "pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:00.0/0000:1b:00.0",
            "0000:1c:00.0": "pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:01.0/0000:1c:00.0",
            "0000:9b:00.0": "pci0000:97/0000:97:01.0/0000:98:00.0/0000:99:00.0/0000:9b:00.0"}
    numa = {"0000:1b:00.0": 0, "0000:1c:00.0": 0, "0000:9b:00.0": 1}
    for bdf, path in devs.items():
        d = root / "sys/devices" / path
        d.mkdir(parents=True)
        (d / "numa_node").write_text(f"{numa[bdf]}\n")
        (d / "local_cpulist").write_text("0-7\n" if numa[bdf] == 0 else "8-15\n")
        if bdf != "0000:1c:00.0":
            (d / "vendor").write_text("0x10de\n"), (d / "class").write_text("0x030200\n")
        (root / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
        (root / "sys/bus/pci/devices" / bdf).symlink_to(d)
    ib = root / "sys/class/infiniband/mlx5_0"
    ib.mkdir(parents=True)
    (ib / "device").symlink_to(root / "sys/devices" / devs["0000:1c:00.0"])
    (root / "sys/devices" / devs["0000:1c:00.0"] / "net/ib0").mkdir(parents=True)
    for n, cpus in ((0, "0-7"), (1, "8-15")):
        (root / f"sys/devices/system/node/node{n}").mkdir(parents=True)
        (root / f"sys/devices/system/node/node{n}/cpulist").write_text(cpus + "\n")
    (root / "sys/devices/system/cpu").mkdir(parents=True, exist_ok=True)
    (root / "sys/devices/system/cpu/online").write_text("0-15\n")


def test_nvml_discovery_falls_back_to_sysfs_per_missing_call(tmp_path, monkeypatch):
    from tuning import nvml

    _pci_tree(tmp_path)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    topo = nvml.discover(str(tmp_path), {"mlx5_0": 0})
    assert topo.sources["nvml"].startswith("not used: pynvml") and topo.sources["links"] == "sysfs PCI paths"
    assert [(g.index, g.bdf, g.numa_node) for g in topo.gpus] == [(0, "0000:1b:00.0", 0), (1, "0000:9b:00.0", 1)]
    assert [(l.nearest_nic, l.link, l.flag) for l in topo.links] == [("mlx5_0", "PIX", None), ("mlx5_0", "SYS", None)]

    class Err(Exception):
        pass

    class Handle:
        def __init__(self, i):
            self.i = i

    old = types.SimpleNamespace(  # an old pynvml: no nvmlDeviceGetNumaNodeId; CPU affinity unsupported
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=Handle,
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=[b"00000000:1B:00.0", b"00000000:9B:00.0"][h.i]),
        nvmlDeviceGetName=lambda h: "NVIDIA H100 80GB HBM3", nvmlDeviceGetMinorNumber=lambda h: 1 - h.i,
        nvmlDeviceGetCpuAffinity=lambda h, n: (_ for _ in ()).throw(Err("Not Supported")))
    monkeypatch.setitem(sys.modules, "pynvml", old)
    topo = nvml.discover(str(tmp_path), {"mlx5_0": 1})
    assert [(g.bdf, g.minor, g.numa_node, g.cpus, g.model) for g in topo.gpus] == [
        ("0000:1b:00.0", 1, 0, "0-7", "NVIDIA H100 80GB HBM3"), ("0000:9b:00.0", 0, 1, "8-15", "NVIDIA H100 80GB HBM3")]
    assert topo.sources["gpus"] == "nvml" and "nvmlDeviceGetNumaNodeId missing" in topo.sources["gpu0.numa_node"]
    assert topo.sources["gpu1.cpus"] == "sysfs (nvmlDeviceGetCpuAffinity: Not Supported)"
    assert topo.flagged()[0].flag == "rail 1: NIC mlx5_0 is SYS from GPU1 (on another NUMA node)"
