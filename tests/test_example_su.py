"""``inventory/example-su``: a 32-node, 8-rail scalable unit renders and plans offline
(no device contacted), deterministically, for all 44 devices.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuning import inventory
from tuning.cli import app

SU = Path(__file__).resolve().parents[1] / "inventory" / "example-su"
NODES = [f"gpu-su1-n{n:02d}" for n in range(1, 33)]
LEAVES = [f"su1-leaf-r{r}" for r in range(8)]
SPINES = [f"su1-spine{s:02d}" for s in range(1, 5)]


def fabtune(*args: str) -> str:
    """Run the ``fabtune`` CLI in-process; return stdout (asserting exit 0)."""
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res.stdout


@pytest.fixture(scope="module")
def su() -> inventory.Inventory:
    return inventory.load(SU)


def test_inventory_shape(su: inventory.Inventory) -> None:
    assert [d.name for d in su.nodes] == NODES
    assert [d.name for d in su.switches] == LEAVES + SPINES
    n07 = su.devices["gpu-su1-n07"]
    assert n07.connection.sysroot == "/" and n07.connection.known_hosts is None
    assert n07.connection.username == "fabtune" and n07.connection.hostname == "192.0.2.17"
    assert [(n.rail, n.switch, n.switch_port, str(n.ipv4)) for n in n07.spec.nics][3] == \
        (3, "su1-leaf-r3", "swp7", "10.3.1.7/24")
    # every leaf port swp1-32 has exactly one node NIC of its rail
    cabled = sorted((n.switch, n.switch_port, n.rail) for d in su.nodes for n in d.spec.nics)
    assert cabled == sorted((f"su1-leaf-r{r}", f"swp{k}", r) for r in range(8) for k in range(1, 33))


def test_render_writes_44_files_deterministically(tmp_path: Path) -> None:
    out = fabtune("render", "-i", str(SU), "-o", str(tmp_path / "a"))
    assert "wrote 44 file(s)" in out
    fabtune("render", "-i", str(SU), "-o", str(tmp_path / "b"))
    a = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()}
    b = {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()}
    assert sorted(a) == sorted([f"{n}.files" for n in NODES] + [f"{s}.nvue" for s in LEAVES + SPINES])
    assert a == b
    leaf = a["su1-leaf-r3.nvue"].decode()
    assert "nv set interface swp40 link mtu 9216\n" in leaf and "swp41 " not in leaf
    assert "nv set interface swp16 link mtu 9216\n" in a["su1-spine04.nvue"].decode()
    assert "net.core.rmem_max = 268435456\n" in a["gpu-su1-n32.files"].decode()


def test_offline_plan_lists_every_device() -> None:
    plan = json.loads(fabtune("plan", "--offline", "-i", str(SU), "--json"))
    changes = plan["changes"]
    assert list(changes) == NODES + LEAVES + SPINES
    n32 = {c["key"]: c for c in changes["gpu-su1-n32"]}
    assert {k: c["after"] for k, c in n32.items() if c["domain"] == "mtu"} == {
        f"mtu/{nd}": "9000" for nd in ("enp12s0np0", "enp18s0np0", "enp76s0np0", "enp93s0np0",
                                       "enp140s0np0", "enp157s0np0", "enp186s0np0", "enp204s0np0")}
    assert n32["tos/mlx5_7"]["after"] == "106" and n32["sysctl/kernel.numa_balancing"]["after"] == "0"
    assert all(c["before"] is None for ch in changes.values() for c in ch)  # offline: nothing read
    leaf_ports = [c["key"] for c in changes["su1-leaf-r0"] if c["key"].startswith("port/")]
    assert leaf_ports == [f"port/swp{k}/mtu" for k in range(1, 41)]
    assert [c["key"] for c in changes["su1-spine01"] if c["key"].startswith("port/")] == \
        [f"port/swp{k}/mtu" for k in range(1, 17)]
    assert {c["key"]: c["after"] for c in changes["su1-spine01"]}["roce/dscp/26"] == "3"
