"""NIC firmware and mlxconfig (domain ``firmware``) on lab nodes over SSH: collect, plan (exact keys,
values and effects), apply with read-back, a second apply that changes nothing, pending values
reported from the Current and Next Boot columns only, automatic restore keeping them, restore with
``irreversible`` giving back the NIC flash byte for byte, a reboot making them current, an unknown
parameter refused before anything is pushed, at most one ``mlxfwreset``, and a pinned firmware burn."""

from __future__ import annotations

import json

import pytest

from tests.node.conftest import Node, node_files
from tuning import node
from tuning.errors import InputError, VerifyError
from tuning.lab.boot import reboot
from tuning.lab.fabric import NIC_BDFS
from tuning.node.firmware import FW_KEY_PREFIX, pending_resets

MLX = {"SRIOV_EN": "True", "NUM_OF_VFS": 8, "ADVANCED_PCI_SETTINGS": "True"}
#: (printed Next Boot before, printed after) of the lab's ConnectX-7 for each MLX parameter
PRINTED = {"SRIOV_EN": ("False(0)", "True(1)"), "NUM_OF_VFS": ("0", "8"),
           "ADVANCED_PCI_SETTINGS": ("False(0)", "True(1)")}


def _node(lab, name: str, firmware: dict, nics: int | None = None) -> Node:
    update: dict = {"firmware": firmware}
    if nics is not None:  # fewer NICs: a reset or a burn per NIC costs a tool start each
        from tuning import inventory

        update["nics"] = inventory.load(lab).devices[name].spec.model_dump(mode="json")["nics"][:nics]
    return Node(lab, name, update)


def _state(n: Node):
    return node.collect(n.host, n.dev, only={"firmware"})


def _hw(n: Node) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((n.sysroot / "hw/nic").glob("*.json"))}


def _nic(n: Node, bdf: str) -> dict:
    return json.loads((n.sysroot / "hw/nic" / f"{bdf}.json").read_text())


def test_plan_covers_every_rdma_nic_of_the_node(node_lab):
    n = _node(node_lab, "node02", {"mlxconfig": MLX})
    try:
        assert [(c.key, c.before, c.after, c.effect, c.reversible) for c in node.plan(n.dev, _state(n))] == [
            (f"mlxconfig/{bdf}/{p}", PRINTED[p][0], str(v), "pending_reset", False)
            for bdf in NIC_BDFS for p, v in MLX.items()]
    finally:
        n.close()


def test_plan_apply_second_apply_restore_and_reboot(node_lab):
    n = _node(node_lab, "node01", {"mlxconfig": MLX}, nics=4)  # 4 of 8 NICs: each set is a tool start
    try:
        state = _state(n)
        changes = node.plan(n.dev, state)
        assert [(c.key, c.before, c.after, c.effect, c.reversible) for c in changes] == [
            (f"mlxconfig/{bdf}/{p}", PRINTED[p][0], str(v), "pending_reset", False)
            for bdf in NIC_BDFS[:4] for p, v in MLX.items()]
        first = changes[0]
        assert (first.apply_cmd, first.restore_cmd, first.read_cmd) == (
            "mlxconfig -y -d 0000:0c:00.0 set SRIOV_EN=True", "mlxconfig -y -d 0000:0c:00.0 set SRIOV_EN=False",
            "mlxconfig -d 0000:0c:00.0 -e q")
        assert pending_resets(state) == [] and node.findings(n.dev, state) == []
        original = _hw(n)

        assert node.apply(n.host, n.dev, changes) == changes  # each key read back (Next Boot)
        state = _state(n)
        assert node.plan(n.dev, state) == []  # Next Boot holds the values: a second apply writes nothing
        assert node.apply(n.host, n.dev, node.plan(n.dev, state)) == []
        assert pending_resets(state) == [
            {"key": f"mlxconfig/{bdf}/{p}", "bdf": bdf, "netdev": f"enp{int(bdf[5:7], 16)}s0np0",
             "current": PRINTED[p][0], "next_boot": PRINTED[p][1]}
            for bdf in NIC_BDFS[:4] for p in ("NUM_OF_VFS", "SRIOV_EN", "ADVANCED_PCI_SETTINGS")]
        assert {(f.domain, f.code) for f in node.findings(n.dev, state)} == {("firmware", "pending-reset")}
        nic = _nic(n, "0000:0c:00.0")
        assert (nic["params"]["NUM_OF_VFS"], nic["resets"]) == ({"default": 0, "current": 0, "next_boot": 8}, 0)
        applied = _hw(n)

        journaled = json.loads(json.dumps([c.as_dict() for c in changes]))
        kept = node.restore(n.host, "node01", journaled)  # an automatic rollback: firmware is kept
        assert [c.key for c in kept] == [c.key for c in changes] and _hw(n) == applied
        assert node.restore(n.host, "node01", journaled, irreversible=True) == []
        assert _hw(n) == original  # rollback --firmware: the NIC flash byte for byte

        node.apply(n.host, n.dev, changes)
        reboot(node_lab / ".state", "node01", n.dev.connection)  # power cycle: Next Boot becomes Current
        state = _state(n)
        assert node.plan(n.dev, state) == [] and pending_resets(state) == []
        assert _nic(n, "0000:5d:00.0")["params"]["SRIOV_EN"] == {"default": 0, "current": 1, "next_boot": 1}
        assert _nic(n, "0000:cc:00.0")["params"]["SRIOV_EN"]["next_boot"] == 0  # not in the profile
    finally:
        n.close()


def test_unknown_parameter_and_bad_values_refused_before_anything_is_pushed(node_lab):
    before = node_files(node_lab / ".state/nodes/node02/sysroot")
    for firmware, key, text in (
            ({"mlxconfig": {"SRIOV_EN": "True", "NO_SUCH_PARAM": 1}}, "firmware.mlxconfig.NO_SUCH_PARAM",
             "NIC 0000:0c:00.0 (enp12s0np0) has no mlxconfig parameter NO_SUCH_PARAM"),
            ({"mlxconfig": {"NUM_OF_VFS": "many"}}, "firmware.mlxconfig.NUM_OF_VFS", "takes a number"),
            ({"version": "28.42.1000"}, "firmware.image_dir", "needs the folder of its image")):
        n = _node(node_lab, "node02", firmware, nics=1)
        try:
            with pytest.raises(InputError) as err:
                node.plan(n.dev, _state(n))
            assert err.value.key == key and text in str(err.value)
        finally:
            n.close()
    assert node_files(node_lab / ".state/nodes/node02/sysroot") == before
    n = Node(node_lab, "node02")
    try:  # the stand-ins refuse as MFT does (stdout, exit 3), and without root
        res = n.host.run("mlxconfig -y -d 0000:0c:00.0 set NO_SUCH_PARAM=1")
        assert (res.rc, res.stdout.splitlines()[-1]) == (3, "-E- Unknown Parameter: NO_SUCH_PARAM")
        res = n.host.run("mlxconfig -y -d 0000:0c:00.0 set SRIOV_EN=maybe")
        assert (res.rc, res.stdout.splitlines()[-1]) == (3, "-E- Unknown value maybe")
        res = n.host.run("mlxconfig -d 0000:0c:00.0 -e q", privileged=False)
        assert (res.rc, res.stdout) == (3, "-E- Failed to open the device\n")
        res = n.host.run("mlxfwreset -d 0000:0c:00.0 reset -y", privileged=False)
        assert (res.rc, res.stdout) == (1, "-E- Only root user can run this tool.\n")
    finally:
        n.close()
    assert node_files(node_lab / ".state/nodes/node02/sysroot") == before


def test_at_most_one_reset_and_a_value_it_cannot_activate_is_an_error(node_lab):
    n = _node(node_lab, "node03", {"mlxconfig": {"SRIOV_EN": "True", "NUM_OF_VFS": 8}, "allow_reset": True}, nics=2)
    fault = n.sysroot / "hw/nic/0000:0c:00.0.json"
    nic = json.loads(fault.read_text())
    nic["faults"]["needs_power_cycle"] = ["NUM_OF_VFS"]  # this NIC loads NUM_OF_VFS at power-on only
    fault.write_text(json.dumps(nic, indent=1, sort_keys=True) + "\n")
    try:
        changes = node.plan(n.dev, _state(n))
        assert [c.key for c in changes] == [
            "mlxconfig/0000:0c:00.0/SRIOV_EN", "mlxconfig/0000:0c:00.0/NUM_OF_VFS",
            "mlxconfig/0000:12:00.0/SRIOV_EN", "mlxconfig/0000:12:00.0/NUM_OF_VFS"]
        with pytest.raises(VerifyError) as err:
            node.apply(n.host, n.dev, changes)
        assert err.value.mismatches == ["mlxconfig/0000:0c:00.0/NUM_OF_VFS: Current '0' after mlxfwreset, "
                                        "wanted '8' (Next Boot '8')"]
        assert "not resetting again" in str(err.value)
        a, b = _nic(n, "0000:0c:00.0"), _nic(n, "0000:12:00.0")
        assert (a["resets"], b["resets"]) == (1, 1)
        assert (a["params"]["SRIOV_EN"]["current"], a["params"]["NUM_OF_VFS"]["current"]) == (1, 0)
        assert (b["params"]["SRIOV_EN"]["current"], b["params"]["NUM_OF_VFS"]["current"]) == (1, 8)

        state = _state(n)  # the next run: nothing to write, the value reported, no second reset
        assert node.plan(n.dev, state) == []
        assert node.apply(n.host, n.dev, node.plan(n.dev, state)) == []
        assert [(p["key"], p["current"], p["next_boot"]) for p in pending_resets(state)] == [
            ("mlxconfig/0000:0c:00.0/NUM_OF_VFS", "0", "8")]
        assert (_nic(n, "0000:0c:00.0")["resets"], _nic(n, "0000:12:00.0")["resets"]) == (1, 1)
    finally:
        n.close()


def test_pinned_firmware_is_burned_then_runs_after_its_one_reset_before_live_settings(node_lab):
    images = node_lab / ".state/nodes/node04/sysroot/usr/local/share/mlnx-fw"
    images.mkdir(parents=True)
    (images / "fw-ConnectX7-rel-28_42_1000-MCX75310AAS-NEA_Ax.bin").write_text("LABFW MT_0000000834 28.42.1000\n")
    n = _node(node_lab, "node04", {"version": "28.42.1000", "image_dir": "/usr/local/share/mlnx-fw",
                                   "allow_reset": True}, nics=2)
    try:
        changes = node.plan(n.dev, node.collect(n.host, n.dev, only={"firmware", "mtu"}))
        assert [(c.key, c.before, c.after, c.effect, c.reversible, c.apply_cmd, c.restore_cmd) for c in changes
                if c.domain == "firmware"] == [
            (f"{FW_KEY_PREFIX}{bdf}", "28.39.2048", "28.42.1000", "pending_reset", False,
             f"mlxfwmanager -u -f -y -d {bdf} -D sysroot/usr/local/share/mlnx-fw", None)
            for bdf in NIC_BDFS[:2]]
        assert [c.key for c in changes if c.domain == "mtu"] == ["mtu/enp12s0np0", "mtu/enp18s0np0"]
        node.apply(n.host, n.dev, changes)  # burned, read back, reset once (driver restart), then the MTU
        state = node.collect(n.host, n.dev, only={"firmware", "mtu"})
        assert node.plan(n.dev, state) == [] and pending_resets(state) == []
        assert (n.sysroot / "sys/class/net/enp12s0np0/mtu").read_text() == "9000\n"
        assert (n.sysroot / "sys/class/infiniband/mlx5_1/fw_ver").read_text() == "28.42.1000\n"
        assert _nic(n, "0000:12:00.0")["fw"] == {"flash": "28.42.1000", "running": "28.42.1000"}
        assert _nic(n, "0000:4c:00.0")["fw"] == {"flash": "28.39.2048", "running": "28.39.2048"}  # not in the profile
    finally:
        n.close()
