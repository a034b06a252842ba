"""The node's InfiniBand port reader and verdicts (tuning.node.ib_ports) on sysfs trees written with the
kernel's own texts (drivers/infiniband/core/sysfs.c), read through a real local shell: every port judged,
one problem one finding with the value read, an unreadable port a harness error. The active MTU comes from
``ibv_devinfo`` in the same round trip: here the IB lab's stand-in (tuning/lab/ib_devinfo.py) over the tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tuning.errors import ParseError
from tuning.lab.ib_devinfo import MTU_DIR, mtu_files, wrapper
from tuning.model.ib_ports import IbPortsSpec
from tuning.node.ib_ports import IbReadError, judge, ports_command, read_ports
from tuning.transport.local import LocalHost

HCAS = [f"mlx5_{i}" for i in range(8)]
GOOD = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "200 Gb/sec (4X HDR)", "lid": "0x1a",
        "sm_lid": "0x1", "link_layer": "InfiniBand", "gids/0": "fe80:0000:0000:0000:0c42:a103:0000:0101",
        "counters/symbol_error": "0", "counters/link_downed": "0", "pkeys/0": "0xffff", "pkeys/1": "0x8001",
        "pkeys/2": "0x0000"}
INTENT = IbPortsSpec(hcas=HCAS, width="4X", speed="HDR")


class Counting(LocalHost):
    """A local shell that counts its round trips."""

    calls = 0

    def run(self, command, **kw):
        self.calls += 1
        return super().run(command, **kw)


def tree(root, **changed: dict[str, str]):
    """Eight single-port HCAs under ``root``; ``changed``: HCA -> files that differ from GOOD (None: absent)."""
    for hca in HCAS:
        for name, text in {**GOOD, **changed.get(hca, {})}.items():
            path = root / "sys/class/infiniband" / hca / "ports/1" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if text is not None:
                path.write_text(text + "\n")
    return Counting("node01", str(root))


def findings(host):
    return [(f.code, f.message, f.evidence) for f in judge("node01", read_ports(host), INTENT)]


def test_every_port_is_read_in_one_round_trip_and_eight_good_ports_pass(tmp_path):
    host = tree(tmp_path)
    ports = read_ports(host)
    assert host.calls == 1 and sorted(ports) == HCAS
    p = ports["mlx5_3"][0]
    assert (p.port, p.value("rate"), p.pkeys, p.counters) == (1, "200 Gb/sec (4X HDR)", {0: 0xFFFF, 1: 0x8001},
                                                              {"link_downed": 0, "symbol_error": 0})
    assert judge("node01", ports, INTENT) == []


def test_one_bad_port_of_eight_is_named_with_its_values(tmp_path):
    host = tree(tmp_path, mlx5_3={"state": "1: DOWN", "phys_state": "3: Disabled"})
    assert findings(host) == [
        ("ib-port-not-active", "mlx5_3 port 1: state 1: DOWN, not ACTIVE", "state=1: DOWN"),
        ("ib-port-phys-down", "mlx5_3 port 1: phys_state 3: Disabled, not LinkUp", "phys_state=3: Disabled")]


def test_width_speed_sm_and_lid_each_their_own_finding(tmp_path):
    host = tree(tmp_path, mlx5_1={"rate": "50 Gb/sec (1X HDR)"}, mlx5_2={"rate": "100 Gb/sec (4X EDR)"},
                mlx5_4={"sm_lid": "0x0"}, mlx5_5={"lid": "0x0"}, mlx5_6={"link_layer": "Ethernet"})
    assert findings(host) == [
        ("ib-width-degraded", "mlx5_1 port 1: width 1X, intent 4X", "rate=50 Gb/sec (1X HDR)"),
        ("ib-speed-degraded", "mlx5_2 port 1: speed EDR, intent HDR", "rate=100 Gb/sec (4X EDR)"),
        ("ib-no-sm", "mlx5_4 port 1: sm_lid 0x0: no subnet manager configured it", "sm_lid=0x0"),
        ("ib-no-lid", "mlx5_5 port 1: lid 0x0: no LID assigned", "lid=0x0"),
        ("ib-not-infiniband", "mlx5_6 port 1: link_layer Ethernet, not InfiniBand", "link_layer=Ethernet")]


def test_a_faster_port_than_the_intent_passes_and_a_missing_hca_is_named(tmp_path):
    host = tree(tmp_path, mlx5_0={"rate": "400 Gb/sec (4X NDR)"})
    wider = IbPortsSpec(hcas=[*HCAS, "mlx5_8"], width="4X", speed="HDR")
    assert [(f.code, f.message, f.evidence) for f in judge("node01", read_ports(host), wider)] == [
        ("ib-hca-missing", "mlx5_8: no such HCA with ports under /sys/class/infiniband",
         "/sys/class/infiniband: " + ", ".join(HCAS))]


@pytest.mark.parametrize("changed, said", [
    ({"state": None}, "cannot read /sys/class/infiniband/mlx5_7/ports/1/state"),
    ({"rate": "104"}, "mlx5_7 port 1: sysfs: output: expected '<n> Gb/sec (<w>X <speed>)' in rate: got '104'"),
    ({"counters/symbol_error": "-1"}, None),
])
def test_a_port_that_cannot_be_read_is_a_harness_error_never_a_fault(tmp_path, changed, said):
    host = tree(tmp_path, mlx5_7=changed)
    ports = read_ports(host)
    if said is None:  # a counter the kernel never prints: refused where it is read
        with pytest.raises(ParseError, match="a count or 'N/A \\(no PMA\\)' in counters/: got '-1'"):
            ports["mlx5_7"][0].counters
        return
    with pytest.raises(IbReadError) as e:
        judge("node01", ports, INTENT)
    assert str(e.value) == said


def test_a_directory_in_place_of_a_file_reads_unreadable(tmp_path):
    host = tree(tmp_path)
    sm = tmp_path / "sys/class/infiniband/mlx5_2/ports/1/sm_lid"
    sm.unlink()
    sm.mkdir()
    with pytest.raises(IbReadError, match="cannot read /sys/class/infiniband/mlx5_2/ports/1/sm_lid"):
        judge("node01", read_ports(host), INTENT)


def test_the_command_quotes_the_sysroot():
    assert ports_command("/x y").startswith("cd '/x y/sys/class/infiniband' 2>/dev/null || exit 0; ")


def devinfo_tree(root, path: bool = True, **active: int):
    """:func:`tree`'s eight good ports with what the lab's ``ibv_devinfo`` reads (device files, ``lid_mask_count``
    and the MTU files: MtuCap 4096, active 4096 or ``active[hca]``), that stand-in on the shell's PATH when ``path``."""
    tree(root)
    for hca in HCAS:
        dev = root / "sys/class/infiniband" / hca
        for name, text in {"node_guid": "0c42:a103:0000:0101", "sys_image_guid": "0c42:a103:0000:0101",
                           "fw_ver": "28.39.2048", "hw_rev": "0", "hca_type": "MT4129", "ports/1/lid_mask_count": "0"}.items():
            (dev / name).write_text(text + "\n")
        mtus = root / MTU_DIR / hca / "ports/1"
        mtus.mkdir(parents=True)
        for name, text in mtu_files(4096, active.get(hca, 4096)).items():
            (mtus / name).write_text(text + "\n")
    (root / "bin").mkdir()
    (root / "bin/ibv_devinfo").write_text(wrapper(root))
    (root / "bin/ibv_devinfo").chmod(0o755)
    dirs = [str(root / "bin")] * path + [d for d in os.environ["PATH"].split(":") if not (Path(d) / "ibv_devinfo").exists()]
    return Counting("node01", str(root), env={**os.environ, "PATH": ":".join(dirs)})


def test_an_active_mtu_below_the_intent_is_its_own_finding_read_in_the_same_round_trip(tmp_path):
    host = devinfo_tree(tmp_path, mlx5_3=1024, mlx5_6=2048)
    ports = read_ports(host)
    assert host.calls == 1 and [p.active_mtu for h in HCAS for p in ports[h]] == [4096] * 3 + [1024] + [4096] * 2 + [2048, 4096]
    asks = IbPortsSpec(hcas=HCAS, active_mtu=4096)
    assert [(f.code, f.message, f.evidence) for f in judge("node01", ports, asks)] == [
        ("ib-mtu-below", "mlx5_3 port 1: active_mtu 1024, intent 4096", "ibv_devinfo active_mtu=1024"),
        ("ib-mtu-below", "mlx5_6 port 1: active_mtu 2048, intent 4096", "ibv_devinfo active_mtu=2048")]
    assert [f.message for f in judge("node01", ports, IbPortsSpec(hcas=HCAS, active_mtu=2048))] == [
        "mlx5_3 port 1: active_mtu 1024, intent 2048"]
    assert judge("node01", ports, INTENT) == []  # no active_mtu in the intent: not judged


def test_an_active_mtu_the_intent_asks_and_no_ibv_devinfo_gives_is_a_harness_error(tmp_path):
    ports = read_ports(devinfo_tree(tmp_path, path=False))
    assert judge("node01", ports, INTENT) == []  # a node without rdma-core reads its ports all the same
    with pytest.raises(IbReadError) as e:
        judge("node01", ports, IbPortsSpec(hcas=HCAS, active_mtu=4096))
    assert str(e.value).startswith("cannot read the active MTU of mlx5_0 port 1: ibv_devinfo exited 127: ")
    assert "ibv_devinfo" in str(e.value).split("exited 127: ")[1]


def test_the_burn_in_read_judges_every_port_of_an_ib_node_and_names_the_bad_one(tmp_path):
    """``fabtune health`` / ``burnin`` over SSH (issue 22): an ``ib_ports`` node's HCA ports are read in the
    node's one round trip (:func:`tuning.burnin.collect.node_script`) and judged port by port; the round
    carries the verdicts and localise names the node by the worst code, with every port's evidence. A
    node with eight good ports has none and is not a node that read nothing; a read without the section
    is the node not read that round (never a pass)."""
    import time

    from tuning.burnin.collect import read_nodes
    from tuning.burnin.localise import NODE_CODES, localise
    from tuning.burnin.run import BurninOptions, one_round
    from tuning.inventory import Connection, Device
    from tuning.model.settings import NodeSpec

    def node_at(root: Path) -> Device:  # an InfiniBand-only node (ib_ports, no nics) whose files are under root
        return Device("node01", ["gpu_nodes"], Connection("127.0.0.1", 22, "fabtune", None, None, str(root)),
                      NodeSpec.model_validate({"ib_ports": INTENT.model_dump()}))

    dev = node_at(tmp_path)
    host = tree(tmp_path, mlx5_3={"state": "1: DOWN", "phys_state": "2: Polling"}, mlx5_6={"rate": "50 Gb/sec (1X HDR)"})
    snap = read_nodes([dev], {"node01": host})["node01"]
    assert host.calls == 1 and "mlx5_7/ports/1/state\t4: ACTIVE" in snap["ib"]
    rnd = one_round(1, time.time(), [], [dev], {"node01": host}, BurninOptions(iterations=1), {}, {})
    assert rnd["errors"] == {} and rnd["ib_ports"]["node01"]["ports"] == 8
    assert [f["code"] for f in rnd["ib_ports"]["node01"]["findings"]] == [
        "ib-port-not-active", "ib-port-phys-down", "ib-width-degraded"]
    doc = {"topology": {"nodes": {}, "switches": {}, "links": []}, "rounds": [rnd]}
    [f] = localise(doc)
    assert (f["kind"], f["target"], f["code"]) == ("node", "node01", "ib-port-not-active")
    assert NODE_CODES.index("ib-port-not-active") < NODE_CODES.index("pcie-degraded")
    assert f["message"] == ("node01: mlx5_3 port 1: state 1: DOWN, not ACTIVE; also ib-port-phys-down, "
                            "ib-width-degraded")
    assert f["evidence"]["counters"]["ib-width-degraded"] == {"mlx5_6 port 1 rate=50 Gb/sec (1X HDR)": 1}
    good = tree(tmp_path / "good")
    rnd = one_round(1, time.time(), [], [node_at(tmp_path / "good")], {"node01": good}, BurninOptions(iterations=1),
                    {}, {})
    assert {k: v for k, v in rnd["ib_ports"]["node01"].items() if k != "views"} == {"ports": 8, "findings": []}
    assert rnd["ib_ports"]["node01"]["views"]["mlx5_7/1"] == {  # what the host reads, for the SM's view (ib_views)
        "guid": "0x0c42a10300000101", "state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "200 Gb/sec (4X HDR)",
        "lid": "0x1a", "sm_lid": "0x1"}
    assert localise({"topology": doc["topology"], "rounds": [rnd]}) == []  # read: not node-nothing-read

    class Cut(Counting):  # the node's output ends before its InfiniBand section (a killed read)
        def run(self, command, **kw):
            import dataclasses

            res = super().run(command, **kw)
            return dataclasses.replace(res, stdout=res.stdout.split("@@fabtune-burnin ib")[0])

    rnd = one_round(1, time.time(), [], [node_at(tmp_path / "good")], {"node01": Cut("node01", str(tmp_path / "good"))},
                    BurninOptions(iterations=1), {}, {})
    assert "ib_ports" not in rnd and rnd["errors"] == {
        "node01": "InfiniBand ports: the node's read printed no InfiniBand section (cut short?)"}
