"""N-node labs (issue 10): `fabtune lab init DIR --nodes N`, sized fabrics, 8 and 16 nodes up."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, TEST_BASE_PORT
from tuning import inventory
from tuning.errors import InputError
from tuning.lab import controller
from tuning.lab.fabric import default_fabric, fabric_for_inventory
from tuning.lab.scale import write_inventory
from tuning.transport.base import sysroot_path
from tuning.transport.ssh import SshHost


def _files(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file() and ".state" not in p.parts)


def test_four_nodes_on_the_default_ports_are_inventory_lab_byte_for_byte(tmp_path: Path):
    inv = write_inventory(tmp_path / "lab4", 4)
    lab = REPO / "inventory" / "lab"
    assert _files(inv) == _files(lab)
    _, mismatch, errors = filecmp.cmpfiles(lab, inv, _files(lab), shallow=False)
    assert mismatch == [] and errors == []


def test_the_four_node_fabric_keeps_its_uplink_and_eight_nodes_move_it_past_the_node_ports():
    four, eight = default_fabric(n_nodes=4), default_fabric(n_nodes=8)
    assert [(l.a, l.a_port) for l in four.links] == [("leaf01", "swp31"), ("leaf02", "swp31")]
    assert [(l.a, l.a_port) for l in eight.links] == [("leaf01", "swp33"), ("leaf02", "swp33")]
    node_ports = {c.switch_port for n in eight.nodes for c in n.nics}
    assert len(node_ports) == 32 and "swp33" not in node_ports and "swp31" in node_ports
    assert eight.switch("leaf01").ports[-1] == "swp33" and len(eight.switch("leaf01").ports) == 33


def test_an_eight_node_inventory_validates_and_sizes_its_fabric(tmp_path: Path):
    inv = write_inventory(tmp_path / "lab8", 8, base_port=TEST_BASE_PORT)
    devices = inventory.load(inv).devices
    assert sorted(devices) == ["leaf01", "leaf02"] + [f"node0{k}" for k in range(1, 9)] + ["spine01"]
    assert devices["node08"].connection.port == TEST_BASE_PORT + 8
    fabric = fabric_for_inventory(inv)
    assert len(fabric.nodes) == 8 and fabric.node("node08").nics[7].switch_port == "swp32"
    assert {n.rdma_device: n.switch_port for n in devices["node05"].spec.nics}["mlx5_2"] == "swp13"
    assert fabric.switch("spine01").port == TEST_BASE_PORT + 103


def test_a_256_node_fabric_has_8_sus_16_leaves_2_spines_and_ports_below_the_ephemeral_range():
    fabric = default_fabric(base_port=32493, n_nodes=256)
    leaves = [s for s in fabric.switches if s.role == "leaf"]
    assert [s.name for s in leaves] == [f"leaf{i:02d}" for i in range(1, 17)]
    assert [s.name for s in fabric.switches if s.role == "spine"] == ["spine01", "spine02"]
    ports = [n.port for n in fabric.nodes] + [s.port for s in fabric.switches]
    assert len(set(ports)) == 274 and min(ports) == 32494 and max(ports) == 32767
    node40 = fabric.node("node40")  # SU 2, its 8th node
    assert [(c.switch, c.switch_port, c.ipv4) for c in node40.nics[:3]] == [
        ("leaf03", "swp8", "10.0.1.8/24"), ("leaf04", "swp8", "10.1.1.8/24"), ("leaf03", "swp40", "10.2.1.8/24")]
    assert len({c.ipv4 for n in fabric.nodes for c in n.nics}) == 2048
    assert leaves[0].ports[-3:] == ["swp128", "swp129", "swp130"] and len(leaves[0].ports) == 130
    assert [(l.a, l.a_port, l.b, l.b_port) for l in fabric.links if l.a == "leaf16"] == [
        ("leaf16", "swp129", "spine01", "swp16"), ("leaf16", "swp130", "spine02", "swp16")]
    # the 33-node lab: its second SU holds one node; a leaf lists only its cabled ports and uplinks
    small = default_fabric(n_nodes=33)
    assert small.switch("leaf03").ports == ["swp1", "swp33", "swp65", "swp97", "swp129", "swp130"]


def test_a_256_node_inventory_loads_with_its_leaves_cabling(tmp_path: Path):
    inv = write_inventory(tmp_path / "lab256", 256, base_port=TEST_BASE_PORT)
    assert (inv / "host_vars" / "leaf05.yml").read_text() == (
        "# leaf05 (leaf)\nports:\n- swp1-130\nuplinks:\n  swp129: spine01:swp5\n  swp130: spine02:swp5\n")
    devices = inventory.load(inv).devices
    assert len(devices) == 274 and devices["node256"].connection.port == TEST_BASE_PORT + 256
    assert devices["leaf01"].connection.port == TEST_BASE_PORT + 257
    fabric = fabric_for_inventory(inv)
    assert fabric.switch("spine02").port == TEST_BASE_PORT + 274 and len(fabric.nodes) == 256


def test_a_gap_in_the_node_names_is_refused_naming_the_host(tmp_path: Path):
    inv = write_inventory(tmp_path / "lab8", 8, base_port=TEST_BASE_PORT)
    text = (inv / "hosts.yaml").read_text().replace("node05:", "node09:")
    (inv / "hosts.yaml").write_text(text)
    (inv / "host_vars" / "node05.yml").rename(inv / "host_vars" / "node09.yml")
    with pytest.raises(InputError, match=r"node09.*missing node05"):
        fabric_for_inventory(inv)


@pytest.mark.parametrize("argv, text", [
    (["--nodes", "0"], "--nodes"), (["--nodes", "257"], "--nodes"), (["--nodes", "eight"], "--nodes"),
    (["--nodes", "8", "--base-port", "40000"], "--base-port"),
    (["--nodes", "256", "--base-port", "32494"], "1024..32493"),
])
def test_lab_init_refuses_bad_sizes_with_one_line(tmp_path: Path, argv: list[str], text: str):
    dest = tmp_path / "inv"
    r = subprocess.run([sys.executable, "-m", "tuning", "lab", "init", str(dest), *argv],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and text in r.stderr
    assert r.stderr.startswith("fabtune: error:") and not dest.exists()


def test_lab_init_refuses_a_folder_that_holds_files(tmp_path: Path):
    (tmp_path / "hosts.yaml").write_text("all: {}\n")
    with pytest.raises(InputError, match="not an empty folder"):
        write_inventory(tmp_path, 8)
    assert (tmp_path / "hosts.yaml").read_text() == "all: {}\n"


@pytest.mark.parametrize("n_nodes", [8, 16])
def test_eight_and_sixteen_node_labs_come_up_and_answer_ssh(tmp_path: Path, n_nodes: int):
    inv = tmp_path / "inv"
    r = subprocess.run([sys.executable, "-m", "tuning", "lab", "init", str(inv), "--nodes", str(n_nodes),
                        "--base-port", str(TEST_BASE_PORT)], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    controller.up(inv / ".state", fabric_for_inventory(inv))
    try:
        st = controller.status(inv / ".state")
        names = {e["name"] for e in st["endpoints"] if e["up"]}
        assert names == {f"node{k:02d}" for k in range(1, n_nodes + 1)} | {"leaf01", "leaf02", "spine01"}
        last = f"node{n_nodes:02d}"
        dev = inventory.load(inv).devices[last]
        host = SshHost(last, dev.connection)
        try:
            r = host.run(f"cat {sysroot_path(host.sysroot, '/sys/class/infiniband/mlx5_7/ports/1/state')}; "
                         "echo $FABTUNE_LAB_NODE", privileged=False)
        finally:
            host.close()
        assert r.stdout.split("\n")[:2] == ["4: ACTIVE", last]
    finally:
        controller.down(inv / ".state")
