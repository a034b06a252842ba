"""A node's InfiniBand HCA ports on the IB lab (issue 22, node side): the node's sysfs trees hold what the
real OpenSM programmed into ibsim's HCAs, faults injected through the lab show there, and the node health
check (``fabtune node check``'s gate and passive check) judges EVERY port: one port down of eight fails
the node naming exactly that port, with the sysfs value as evidence.

One lab for the module (node01 with its 8 HCAs); each test puts back what it injected.
"""

from __future__ import annotations

import os

import pytest
import yaml

from tuning import inventory
from tuning.burnin import node_check as nc
from tuning.lab.fabric import default_fabric
from tuning.lab.ib import DEFAULT_PARTITIONS, IbLab
from tuning.lab.ib_partitions import IbMember, IbPartition
from tuning.parsers.ib_links import parse_iblinkinfo
from tuning.parsers.ib_sm import parse_pkeys, parse_portinfo, parse_sminfo

pytestmark = pytest.mark.lab

HCAS = [f"mlx5_{i}" for i in range(8)]
TENANT = IbPartition("tenant1", 0x0001, (IbMember("node01-mlx5_0", "full"),), ipoib=True)


@pytest.fixture(scope="module")
def ib(tmp_path_factory):
    lab = IbLab(tmp_path_factory.mktemp("ibnodes"), default_fabric(n_nodes=1), partitions=DEFAULT_PARTITIONS + (TENANT,),
                node_trees=True)
    lab.up()
    yield lab
    assert lab.down()


def node_dev(lab: IbLab, root, node: str = "node01", **intent):
    """The inventory node ``node`` (an IB-only node: ib_ports, no nics) whose sysroot is the lab node's;
    ``intent``: more ``ib_ports`` keys (``active_mtu``)."""
    inv = root / "inv"
    (inv / "group_vars").mkdir(parents=True, exist_ok=True)
    hosts = {node: {"ansible_host": "127.0.0.1", "fabtune_sysroot": str(lab.node_sysroot(node))}}
    (inv / "hosts.yaml").write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    (inv / "group_vars" / "gpu_nodes.yml").write_text(yaml.safe_dump({"ib_ports": {"hcas": HCAS, "width": "4X",
                                                                                  "speed": "HDR", **intent}}))
    return inventory.load(inv).devices[node]


def port_file(lab: IbLab, hca: str, name: str, node: str = "node01") -> str:
    return (lab.node_sysroot(node) / "sys/class/infiniband" / hca / "ports/1" / name).read_text()


def test_node_trees_hold_what_the_sm_programmed(ib):
    links = parse_iblinkinfo(ib.run("iblinkinfo"))
    sm = parse_sminfo(ib.run("sminfo"))
    for hca in ib.topology.hcas:
        lid = links.port(hca.description, 1).lid
        assert [port_file(ib, hca.device, f) for f in ("state", "phys_state", "rate", "lid", "sm_lid", "link_layer")] == \
            ["4: ACTIVE\n", "5: LinkUp\n", "200 Gb/sec (4X HDR)\n", f"0x{lid:x}\n", f"0x{sm.sm_lid:x}\n", "InfiniBand\n"]
        table = parse_pkeys(ib.run("smpquery", "pkeys", "-G", hex(hca.port_guid), "1"))
        used = {int(e.raw, 16) for e in table.entries}
        files = {port_file(ib, hca.device, f"pkeys/{i}").strip() for i in range(table.capacity)}
        assert {int(v, 16) for v in files} - {0} == used
    assert {int(port_file(ib, "mlx5_0", f"pkeys/{i}"), 16) for i in range(2)} == {0xFFFF, 0x8001}
    assert port_file(ib, "mlx5_0", "gids/0") == f"fe80:0000:0000:0000:0c42:a103:0000:0101\n"


def test_injected_faults_show_in_the_node_sysfs(ib):
    ib.link_down("node01-mlx5_2")
    ib.set_width("node01-mlx5_5", "1X")
    ib.set_counter("node01-mlx5_6", "SymbolErrorCounter", 1234)
    try:
        assert (port_file(ib, "mlx5_2", "state"), port_file(ib, "mlx5_2", "phys_state")) == ("1: DOWN\n", "2: Polling\n")
        assert port_file(ib, "mlx5_5", "rate") == "50 Gb/sec (1X HDR)\n"
        assert port_file(ib, "mlx5_6", "counters/symbol_error") == "1234\n"
    finally:
        ib.link_up("node01-mlx5_2")
        ib.set_width("node01-mlx5_5", "4X")
        ib.set_counter("node01-mlx5_6", "SymbolErrorCounter", 0)
    assert [port_file(ib, h, "state") for h in ("mlx5_2", "mlx5_5")] == ["4: ACTIVE\n"] * 2
    assert (port_file(ib, "mlx5_5", "rate"), port_file(ib, "mlx5_6", "counters/symbol_error")) == ("200 Gb/sec (4X HDR)\n", "0\n")


def test_all_eight_ports_good_passes_health(ib, tmp_path):
    dev = node_dev(ib, tmp_path)
    assert nc.gate(dev, None) == []
    v = nc.passive(dev, None, act=False)
    assert v.problems == [] and v.drain is None


def test_one_port_down_of_eight_fails_health_naming_exactly_that_port(ib, tmp_path):
    dev = node_dev(ib, tmp_path)
    ib.link_down("node01-mlx5_3")
    try:
        v = nc.passive(dev, None, act=False)
    finally:
        ib.link_up("node01-mlx5_3")
    assert v.problems == ["ib-port-not-active mlx5_3 port 1: state 1: DOWN, not ACTIVE",
                          "ib-port-phys-down mlx5_3 port 1: phys_state 2: Polling, not LinkUp"]
    assert v.exit_code == nc.EXIT_UNHEALTHY and (v.drain["dry_run"], v.drain["drained"]) == (True, ["node01"]), v.drain
    assert "node-check ib-port-not-active mlx5_3 port 1: state 1: DOWN" in v.drain["calls"][0]  # the drain reason
    assert nc.gate(dev, None) == []


def test_a_port_the_sm_never_swept_reads_no_sm_as_its_own_finding(tmp_path):
    lab = IbLab(tmp_path / "nosm", default_fabric(n_nodes=1), node_trees=True)
    lab.up(sm=False)  # ibsim alone: OpenSM never swept, as when it stopped before the node's first sweep
    try:
        problems = nc.gate(node_dev(lab, tmp_path), None)
    finally:
        assert lab.down()
    assert problems[:3] == ["ib-port-not-active mlx5_0 port 1: state 2: INIT, not ACTIVE",
                            "ib-no-sm mlx5_0 port 1: sm_lid 0x0: no subnet manager configured it",
                            "ib-no-lid mlx5_0 port 1: lid 0x0: no LID assigned"]
    assert len(problems) == 3 * len(HCAS) and {p.split()[1] for p in problems} == set(HCAS)


def test_the_ports_active_mtu_that_opensm_negotiated_is_judged_against_the_intent(ib, tmp_path, monkeypatch):
    """ibsim's ports cap at 2048 (MtuCap), so OpenSM leaves every HCA port at NeighborMTU 2048: an intent of
    4096 is a finding on each of the eight ports, with the value the node's ibv_devinfo read; 2048 is none."""
    for hca in ib.topology.hcas:
        info = parse_portinfo(ib.run("smpquery", "portinfo", "-G", hex(hca.port_guid), "1"))
        assert (info.mtu_cap_bytes, info.fields["NeighborMTU"]) == (2048, "2048")
    monkeypatch.setenv("PATH", f"{ib.node_sysroot('node01') / 'bin'}:{os.environ['PATH']}")  # the node's ibv_devinfo
    assert nc.gate(node_dev(ib, tmp_path / "4096", active_mtu=4096), None) == [
        f"ib-mtu-below {h} port 1: active_mtu 2048, intent 4096" for h in HCAS]
    assert nc.gate(node_dev(ib, tmp_path / "2048", active_mtu=2048), None) == []
