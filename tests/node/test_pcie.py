"""Domains ``pcie`` (ACS on the switch ports between each GPU and its NIC) and ``mrrs`` (NIC MaxReadReq)
on the lab over SSH: ACS redirect always reported, cleared with setpci only with ``pcie.clear_acs`` and
planned ``not_persistent`` (back after ``fabtune lab reboot``); MaxReadReq set by read-modify-write,
read back, idempotent, restored to the original bytes, re-applied at boot; a link trained below its
capability is reported; setpci and lspci without root behave as pciutils on a real kernel."""

from __future__ import annotations

import pydantic
import pytest

from tests.node.conftest import Node, node_files, with_spec
from tuning import node
from tuning.lab.fabric import default_fabric, pcie_layout
from tuning.lab.hw_pci import inject

pytestmark = pytest.mark.lab

ON = "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
OFF = "SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-"
PROFILE = {"pcie": {"clear_acs": True, "max_read_request_bytes": 4096}}
MINE = {"pcie", "mrrs"}
RAILS = pcie_layout(default_fabric().nodes[0])


def _devctl(n: Node, bdf: str) -> list[str]:
    out = n.host.run(f"lspci -D -vvv -s {bdf}").stdout.splitlines()
    i = next(k for k, line in enumerate(out) if line.startswith("\t\tDevCtl:"))
    return out[i:i + 3]


def test_acs_and_maxreadreq_plan_apply_read_back_restore_and_reboot(node_lab):
    n = Node(node_lab, "node01", PROFILE)
    try:
        before = node_files(n.sysroot)
        state = node.collect(n.host, n.dev, only=MINE)
        findings = node.findings(n.dev, state)
        assert [f.code for f in findings] == ["acs-redirect"] * 16
        assert findings[0].message.startswith("0000:0b:00.0 (between GPU 0000:1b:00.0 and NIC enp12s0np0 "
                                              "0000:0c:00.0): ACS ReqRedir, CmpltRedir on: GPUDirect RDMA traffic "
                                              "goes up to the root")
        assert findings[0].evidence == f"ACSCtl: {ON}"
        changes = node.plan(n.dev, state)
        bridges = [b for r in RAILS for b in r["switch_down"]]
        assert [(c.key, c.before, c.after, c.apply_cmd, c.restore_cmd, c.read_cmd, c.effect) for c in changes] == [
            (f"acs/{b}", ON, OFF, f"setpci -s {b} ECAP_ACS+6.w=0000", f"setpci -s {b} ECAP_ACS+6.w=001d",
             "lspci -D -vvv", "not_persistent") for b in bridges] + [
            (f"mrrs/{r['nic']}", "512", "4096", f"setpci -s {r['nic']} CAP_EXP+8.w=5000:7000",
             f"setpci -s {r['nic']} CAP_EXP+8.w=2000:7000", "lspci -D -vvv", "live") for r in RAILS]
        devctl = _devctl(n, "0000:0c:00.0")
        node.apply(n.host, n.dev, changes)  # read back inside
        assert _devctl(n, "0000:0c:00.0") == devctl[:2] + ["\t\t\tMaxPayload 256 bytes, MaxReadReq 4096 bytes"]
        state = node.collect(n.host, n.dev, only=MINE)
        assert node.plan(n.dev, state) == [] and node.findings(n.dev, state) == []
        node.restore(n.host, "node01", [c.as_dict() for c in changes])
        after = node_files(n.sysroot)
        assert [k for k in before.keys() | after.keys() if before.get(k) != after.get(k)] == []
        # persisted: apply with the boot script (domain files), a degraded link, then a power cycle
        full = node.plan(n.dev, node.collect(n.host, n.dev))
        node.apply(n.host, n.dev, [c for c in full if c.domain in MINE | {"files"}])
        inject(n.sysroot, "pcie-link", "0000:4c:00.0", "16.0 GT/s PCIe", 8)
        n.reboot()
        state = node.collect(n.host, n.dev, only=MINE)
        again = node.plan(n.dev, state)
        assert {c.key for c in again} == {f"acs/{b}" for b in bridges}  # ACS back: the plan said not_persistent
        assert {c.before for c in again} == {ON}  # MaxReadReq came back with the boot script
        [link] = [f for f in node.findings(n.dev, state) if f.code == "pcie-link-degraded"]
        assert link.message.startswith("NIC enp76s0np0: PCIe link 16.0 GT/s PCIe x8 below its capability "
                                       "32.0 GT/s PCIe x16")
        assert "\t\tLnkSta:\tSpeed 16GT/s (downgraded), Width x8 (downgraded)" in \
            n.host.run("lspci -D -vvv -s 0000:4c:00.0").stdout.splitlines()
    finally:
        n.close()


def test_setpci_and_lspci_without_root_behave_as_pciutils(node_lab):
    n = Node(node_lab, "node02")
    try:
        config = (n.sysroot / "sys/bus/pci/devices/0000:0b:00.0/config").read_bytes()
        res = n.host.run("setpci -s 0000:0b:00.0 ECAP_ACS+6.w=0000", privileged=False)
        assert res.rc == 1 and res.stdout == ""
        assert res.stderr == "pcilib: Cannot open /sys/bus/pci/devices/0000:0b:00.0/config\n" * 4 + (
            "setpci: 0000:0b:00.0: Instance #0 of Extended capability 000d not found - there are no capabilities "
            "with that id.\n")
        assert (n.sysroot / "sys/bus/pci/devices/0000:0b:00.0/config").read_bytes() == config
        out = n.host.run("lspci -D -vvv -s 0000:0b:00.0", privileged=False).stdout.splitlines()
        assert "\tCapabilities: <access denied>" in out and not any("ACSCtl" in line for line in out)
        res = n.host.run("setpci -s 0000:0c:00.0 CAP_EXP+8.w")  # root: the word, as setpci prints it
        assert (res.rc, res.stdout) == (0, "293f\n")
    finally:
        n.close()


def test_bad_maxreadreq_is_refused_at_load(node_lab):
    n = Node(node_lab, "node03")
    try:
        with pytest.raises(pydantic.ValidationError, match="max_read_request_bytes"):
            with_spec(n.dev, {"pcie": {"max_read_request_bytes": 3000}})
    finally:
        n.close()


def test_clear_acs_refuses_a_nic_lspci_does_not_list(node_lab):
    """A check that found no bridge to check is refused at plan (Unfit -> InputError), never "ACS is fine"."""
    import base64

    from tuning.node.base import NodeFacts, Unfit
    from tuning.node.pcie import PcieDomain

    n = Node(node_lab, "node03", PROFILE)
    try:
        lspci = n.host.run("lspci -D -vvv -s 0000:0b:00.0").stdout  # the bridge only: no NIC block
        facts = NodeFacts(raw={"pcie/lspci": base64.b64encode(lspci.encode()).decode()},
                          nics={"enp12s0np0": {"bdf": "0000:0c:00.0"}})
        with pytest.raises(Unfit, match=r"pcie.clear_acs: NIC enp12s0np0 is not in `lspci -D -vvv` \(PCI address "
                                        r"0000:0c:00.0\)"):
            PcieDomain().desired(n.dev.spec, facts)
    finally:
        n.close()
