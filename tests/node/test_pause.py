"""Domain ``pause`` on the lab over SSH: 802.3x global pause on beside PFC reported with its direction;
``pause.global_pause: off`` planned exactly, applied with ``ethtool -A``, read back, idempotent, restored
to the original bytes and re-applied at boot; ``ethtool -A`` without root fails as ethtool 6 does."""

from __future__ import annotations

import pytest

from tests.node.conftest import Node, node_files
from tuning import node
from tuning.lab.fabric import default_fabric

pytestmark = pytest.mark.lab

NETDEVS = [nic.netdev for nic in default_fabric().nodes[0].nics]
OFF = {"pause": {"global_pause": "off"}}


def test_pause_on_beside_pfc_is_reported_with_its_direction(node_lab):
    n = Node(node_lab, "node01")  # lab profile: PFC on priority 3, global_pause "report"
    try:
        state = node.collect(n.host, n.dev, only={"pause", "nic_qos"})
        # untuned NICs (PFC off now): judged against the PFC the plan sets, as a --domain pause plan is
        untuned = node.findings(n.dev, state)
        assert [(f.code, f.message.split(":")[0]) for f in untuned] == [
            (code, netdev) for netdev in NETDEVS for code in ("global-pause-rx", "global-pause-tx")]
        assert untuned[0].evidence == ("ethtool -a: rx on tx on; PFC priorities [3] (planned: profile "
                                       "nic_qos.pfc_priority; mlnx_qos now [])")
        assert [c for c in node.plan(n.dev, state) if c.domain == "pause"] == []  # report only: no change
        pfc = "; ".join(f"mlnx_qos -i {d} --pfc 0,0,0,1,0,0,0,0 >/dev/null" for d in NETDEVS)
        assert n.host.run(pfc).rc == 0  # PFC on priority 3, as the profile's nic_qos sets it
        state = node.collect(n.host, n.dev, only={"pause", "nic_qos"})
        found = node.findings(n.dev, state)
        assert [(f.code, f.message.split(":")[0]) for f in found] == [
            (code, netdev) for netdev in NETDEVS for code in ("global-pause-rx", "global-pause-tx")]
        rx, tx = found[:2]
        assert rx.message == ("enp12s0np0: 802.3x pause RX on beside PFC (priority 3): the peer's pause frames "
                              "throttle this NIC on every priority")
        assert tx.message == ("enp12s0np0: 802.3x pause TX on beside PFC (priority 3): this NIC pauses its peer "
                              "(the switch port) on every priority")
        assert rx.evidence == "ethtool -a: rx on tx on; PFC priorities [3] (planned: profile nic_qos.pfc_priority)"
        # without the NIC's QoS read: the same findings, from the same planned PFC
        alone = node.findings(n.dev, node.collect(n.host, n.dev, only={"pause"}))
        assert [(f.code, f.message, f.evidence) for f in alone] == [(f.code, f.message, f.evidence) for f in found]
    finally:
        n.close()


def test_pause_off_plan_apply_read_back_restore_and_reboot(node_lab):
    n = Node(node_lab, "node02", OFF)
    try:
        before = node_files(n.sysroot)
        changes = node.plan(n.dev, node.collect(n.host, n.dev, only={"pause"}))
        assert [(c.key, c.before, c.after, c.apply_cmd, c.restore_cmd, c.read_cmd, c.effect) for c in changes] == [
            (f"pause/{d}", "rx on tx on", "rx off tx off", f"ethtool -A {d} rx off tx off",
             f"ethtool -A {d} rx on tx on", f"ethtool -a {d}", "live") for d in NETDEVS]
        node.apply(n.host, n.dev, changes)  # read back inside
        assert n.host.run("ethtool -a enp12s0np0", privileged=False).stdout == (
            "Pause parameters for enp12s0np0:\nAutonegotiate:\toff\nRX:\t\toff\nTX:\t\toff\n\n")
        assert node.plan(n.dev, node.collect(n.host, n.dev, only={"pause"})) == []
        node.restore(n.host, "node02", [c.as_dict() for c in changes])
        after = node_files(n.sysroot)
        assert [k for k in before.keys() | after.keys() if before.get(k) != after.get(k)] == []
        full = node.plan(n.dev, node.collect(n.host, n.dev))
        node.apply(n.host, n.dev, [c for c in full if c.domain in ("pause", "files")])
        script = (n.sysroot / "usr/local/sbin/fabtune-nic-setup").read_text()
        assert "ethtool -A enp12s0np0 rx off tx off\n" in script
        n.reboot()
        state = node.collect(n.host, n.dev, only={"pause"})
        assert node.plan(n.dev, state) == [] and node.findings(n.dev, state) == []  # off again after boot
    finally:
        n.close()


def test_ethtool_pause_set_without_root_is_refused(node_lab):
    n = Node(node_lab, "node03")
    try:
        state = (n.sysroot / "run/lab/pause/enp12s0np0.json").read_bytes()
        res = n.host.run("ethtool -A enp12s0np0 rx off tx off", privileged=False)
        assert (res.rc, res.stdout, res.stderr) == (76, "", "netlink error: Operation not permitted\n")
        res = n.host.run("ethtool -A enp12s0np0 autoneg on")
        assert (res.rc, res.stderr) == (76, "netlink error: Invalid argument\n")  # mlx5: no pause autoneg
        assert (n.sysroot / "run/lab/pause/enp12s0np0.json").read_bytes() == state
        assert n.host.run("ethtool -K enp12s0np0 tso off").rc == 1  # other verbs fail, never pretend
    finally:
        n.close()


def test_bare_yaml_off_is_refused_at_load_with_the_reason():
    from tuning.model.node_tuning import PauseSpec

    with pytest.raises(ValueError, match=r'False is a boolean \(YAML reads a bare off/on as one\); allowed: "off"'):
        PauseSpec.model_validate({"global_pause": False})
    assert PauseSpec.model_validate({"global_pause": "off"}).global_pause == "off"
