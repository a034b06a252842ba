"""``inventory/example-nvl72`` (one GB200 NVL72 rack: 18 trays of 4 GPUs and 4 NICs, 4 rail
leaves, 2 spines) plans offline and verifies in a schedule of 4 pairs per tray, and the lab's tray
shape (:mod:`tuning.lab.hw_nvl72`) is what its docstring cites: 2 Grace NUMA nodes of 72 cores,
no SMT, NICs and GPUs 0-1 on Grace 0 and 2-3 on Grace 1; a Grace superchip's GPU is not flagged
for a NIC NODE from it (it has no nearer one)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import TEST_BASE_PORT
from tuning import inventory
from tuning.cli import app
from tuning.errors import InputError
from tuning.lab.fabric import fabric_for_inventory
from tuning.lab.hw_gpu import gpu_layout, smt_siblings
from tuning.lab.hw_nvl72 import tray_fabric, write_tray_inventory
from tuning.node.topology import Gpu, TopoNic, pair
from tuning.verify.schedule import plan_schedule

NVL72 = Path(__file__).resolve().parents[1] / "inventory" / "example-nvl72"
TRAYS = [f"nvl72-r1-t{t:02d}" for t in range(1, 19)]


@pytest.fixture(scope="module")
def rack() -> inventory.Inventory:
    return inventory.load(NVL72)


def test_the_rack_is_18_trays_of_4_nics_on_4_rail_leaves(rack: inventory.Inventory):
    assert [d.name for d in rack.nodes] == TRAYS
    assert [d.name for d in rack.select(["nvl72_rack1"])] == TRAYS  # one NVLink domain, one group
    t07 = rack.devices["nvl72-r1-t07"]
    assert [(n.rdma_device, n.rail, n.switch, n.switch_port, str(n.ipv4)) for n in t07.spec.nics] == [
        (f"mlx5_{r}", r, f"r1-leaf-r{r}", "swp7", f"10.{r}.1.7/24") for r in range(4)]


def test_the_rack_plans_offline(rack: inventory.Inventory):
    res = CliRunner().invoke(app, ["plan", "-i", str(NVL72), "--offline"])
    assert res.exit_code == 0, res.output
    assert "summary of 1032 change(s) on 24 device(s)" in res.stdout and "9000 x72" in res.stdout


def test_the_rack_verifies_4_nics_a_tray_over_its_cabling(rack: inventory.Inventory):
    s = plan_schedule(rack.nodes, rack.switches)
    assert not s.topology.derived and s.per_node == 4  # one pair per NIC per round, 4 a tray
    assert s.coverage.summary() == "72/72 NICs, 72/72 uplinks, 2/2 spines covered" and s.coverage.uncoverable == []
    assert len(s.rounds) <= 3


def test_the_lab_tray_is_two_graces_without_smt(tmp_path: Path):
    node = tray_fabric(n_nodes=2).nodes[1]
    assert node.numa_cpulists == ["0-71", "72-143"] and node.gpus == 4
    assert smt_siblings(node)[80] == [80] and len(smt_siblings(node)) == 144
    assert [(n.rdma_device, n.numa_node) for n in node.nics] == [("mlx5_0", 0), ("mlx5_1", 0), ("mlx5_2", 1),
                                                                ("mlx5_3", 1)]
    assert [(g["index"], g["numa_node"], g["switch"]) for g in gpu_layout(node)] == [
        (0, 0, "gpu0"), (1, 0, "gpu1"), (2, 1, "gpu2"), (3, 1, "gpu3")]  # off the NICs' PCIe switches: C2C
    inv = write_tray_inventory(tmp_path / "inv", 3, base_port=TEST_BASE_PORT)  # written, never listened on
    assert [len(n.nics) for n in fabric_for_inventory(inv).nodes] == [4, 4, 4]
    with pytest.raises(InputError, match="1..18 compute trays"):
        write_tray_inventory(tmp_path / "big", 19)
    with pytest.raises(InputError, match="19 nodes of 4 NICs: a lab rack of GB200 NVL72 compute trays holds 1..18"):
        tray_fabric(n_nodes=19)  # what lab up -i says to a 19-tray inventory


@pytest.mark.parametrize("model, link, flagged", [
    ("NVIDIA GB200", "NODE", False),  # a Grace superchip's GPU reaches its own Grace's NIC at NODE at best
    ("NVIDIA GB200", "SYS", True),  # the other Grace's NIC is still far
    ("NVIDIA H100 80GB HBM3", "NODE", True),  # on a PCIe-switched node NODE means a misplaced GPU
    ("NVIDIA H100 80GB HBM3", "PIX", False),
])
def test_a_grace_superchips_gpu_is_near_its_own_graces_nic(model: str, link: str, flagged: bool):
    gpu = Gpu(index=2, bdf="0000:52:00.0", numa_node=1, cpus="72-143", model=model)
    nic = TopoNic(rdma_device="mlx5_2", netdev="enp76s0np0", bdf="0000:4c:00.0", numa_node=1, cpus="72-143", rail=2)
    (got,) = pair([gpu], [nic], lambda g, n: link)
    assert (got.rail_link, got.flag is not None) == (link, flagged), got.flag
