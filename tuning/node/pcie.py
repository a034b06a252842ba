"""PCIe between each GPU and its NIC: ACS on the switch ports (domain ``pcie``), the NIC's MaxReadReq
(domain ``mrrs``) and links trained below their capability (findings).

Everything is read from ONE ``lspci -D -vvv`` (pciutils; parser :mod:`tuning.parsers.lspci`), run as
root (without root lspci prints ``Capabilities: <access denied>`` and nothing can be planned), and
the NICs' sysfs ``current_link_speed`` / ``max_link_speed`` (``32.0 GT/s PCIe``) and
``current_link_width`` / ``max_link_width``. The tree comes from the bridges' ``Bus: ... secondary=``
lines: the downstream port above NIC k, the switch's upstream port above that, its other downstream
ports, and the GPU (``3D controller`` / ``VGA compatible controller`` of NVIDIA) behind one of them.

- ACS (``acs/<bridge bdf>`` = the ``ACSCtl`` flags): with ReqRedir/CmpltRedir/EgressCtrl on, the
  switch sends the NIC's peer-to-peer reads of GPU memory up to the root complex (and through the
  IOMMU) instead of across the switch: GPUDirect RDMA runs at a fraction of its bandwidth. Always
  reported (``acs-redirect``); cleared only with ``pcie.clear_acs`` by
  ``setpci -s BDF ECAP_ACS+6.w=0000`` (ACS Control register, the NCCL troubleshooting guide's
  command). That is ``not_persistent``: the BIOS/firmware sets ACS again at the next boot, and
  fabtune does not re-apply it from its boot script, since turning ACS off weakens the isolation
  between devices (IOMMU groups) that the platform chose. The lasting fixes are the BIOS setting
  (ACS / "PCIe ACS control" off), or a udev rule or boot unit owned by the site.
- MaxReadReq (``mrrs/<nic bdf>`` = bytes, 128..4096): the largest read request the NIC issues,
  Device Control bits 14:12. Set with ``setpci -s BDF CAP_EXP+8.w=V000:7000`` (setpci's
  ``value:mask`` is a read-modify-write: every other Device Control bit keeps its value; NVIDIA's
  "Understanding PCIe Configuration for Maximum Performance" sets the same field with ``68.w``).
  The device resets it at every boot, so domain ``mrrs`` is a boot-script domain: the generated
  ``fabtune-nic-setup`` writes it again and the change is ``live``.

Example profile::

    pcie: {clear_acs: true, max_read_request_bytes: 4096}
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from tuning.errors import ParseError
from tuning.model import NodeSpec
from tuning.node.base import ABSENT, Domain, Finding, NodeFacts, Unfit, decode
from tuning.parsers.lspci import ACS_FLAGS, Lspci, PciDevice, acs_word, link_below, parse_lspci
from tuning.transport.base import q, sysroot_path

#: ACS Control with every control off (what ``ECAP_ACS+6.w=0000`` leaves)
ACS_OFF = " ".join(f"{f}-" for f in ACS_FLAGS)
_RAW_LSPCI = "pcie/lspci"
_BDF = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_LINK_FILES = ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width")
_GPU_KINDS = ("3D controller", "VGA compatible controller")
_MRRS_BITS = {128: 0, 256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}


@dataclass
class Rail:
    """The PCIe path between NIC ``netdev`` and its GPU: ``bridges`` are the downstream ports of the
    switch they share (the NIC's first), only the NIC's own port when no GPU sits behind that switch."""

    netdev: str
    nic: str
    gpu: str | None = None
    bridges: list[str] = field(default_factory=list)


def lspci_read_line() -> str:
    """The read-script line both PCIe domains need; it runs once per script (shell guard)."""
    return f'[ -n "${{ft_lspci-}}" ] || {{ ft_lspci=1; bp {_RAW_LSPCI} {READ_CMD}; }}'


def read_lspci(facts: NodeFacts) -> Lspci | None:
    """The node's ``lspci -D -vvv``, parsed; None when lspci failed or was not run.

    Raises:
        ParseError: lspci printed something that is not lspci output.
    """
    raw = decode(facts.raw.get(_RAW_LSPCI, ABSENT))
    return None if raw == ABSENT else parse_lspci(raw)


def rails(spec: NodeSpec, facts: NodeFacts, pci: Lspci) -> list[Rail]:
    """For each NIC of ``spec`` that lspci lists: the bridges between it and the GPU behind its switch."""
    out = []
    for nic in spec.nics:
        bdf = facts.nics.get(nic.netdev, {}).get("bdf", "")
        dev = pci.device(bdf) if _BDF.fullmatch(bdf) else None
        if dev is None:
            continue
        rail = Rail(nic.netdev, dev.bdf)
        port = pci.parent(dev)
        if port is not None:
            rail.bridges.append(port.bdf)
            switch = pci.parent(port)
            for sibling in pci.children(switch) if switch else []:
                gpus = [d for d in pci.children(sibling) if d.kind in _GPU_KINDS and "NVIDIA" in d.name]
                if sibling.bdf != port.bdf and gpus:
                    rail.gpu = gpus[0].bdf
                    rail.bridges.append(sibling.bdf)
                    break
        out.append(rail)
    return out


def _need_lspci(facts: NodeFacts, key: str) -> Lspci:
    """lspci's view for planning; Unfit (naming profile ``key``) when it cannot be had."""
    try:
        pci = read_lspci(facts)
    except ParseError as e:
        raise Unfit(key, f"lspci output cannot be read on this node ({e})") from None
    if pci is None:
        raise Unfit(key, "`lspci -D -vvv` failed on this node (is pciutils installed?)")
    return pci


#: the read-back command of every ``acs/`` and ``mrrs/`` key: one lspci run serves them all (the node
#: read-back runs each distinct command once)
READ_CMD = "lspci -D -vvv"


@functools.lru_cache(maxsize=4)
def _parsed(output: str) -> Lspci:
    """One parse per read-back output (every key of the read-back shares it)."""
    return parse_lspci(output)


def _device(output: str, key: str) -> PciDevice:
    """The block of the key's device (``acs/<bdf>``, ``mrrs/<bdf>``) in ``lspci -D -vvv`` output.

    Raises:
        ParseError: the output is not lspci's, or lacks the device.
    """
    bdf = key.split("/", 1)[1]
    dev = _parsed(output).device(bdf)
    if dev is None:
        raise ParseError("lspci", 0, f"a device block for {bdf}", "none")
    return dev


class PcieDomain(Domain):
    """ACS of the switch ports between each GPU and its NIC: ``acs/<bridge bdf>`` = ``ACSCtl`` flags
    (``SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-``)."""

    name = "pcie"

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        lines = [lspci_read_line()]
        for nic in spec.nics:
            dev = sysroot_path(sysroot, f"/sys/class/net/{nic.netdev}/device")
            lines += [f"r {q(f'pcie/{nic.netdev}/{name}')} {q(dev + '/' + name)}" for name in _LINK_FILES]
        return lines

    def _acs(self, spec: NodeSpec, facts: NodeFacts, pci: Lspci) -> dict[str, str]:
        out = {}
        for rail in rails(spec, facts, pci):
            for bdf in rail.bridges:
                dev = pci.device(bdf)
                if dev is not None and dev.acs_ctl is not None:
                    out[f"acs/{bdf}"] = dev.acs_ctl
        return out

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        if not spec.pcie.clear_acs:
            return {}
        pci = read_lspci(facts)
        return self._acs(spec, facts, pci) if pci is not None else {}

    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        if not spec.pcie.clear_acs:
            return {}
        pci = _need_lspci(facts, "pcie.clear_acs")
        denied = [d.bdf for d in pci.devices if d.access_denied]
        if denied:
            raise Unfit("pcie.clear_acs", f"lspci could not read the capabilities of {denied[0]} (not root?): "
                                          "ACS cannot be snapshotted")
        found = {r.netdev for r in rails(spec, facts, pci)}
        lost = [n.netdev for n in spec.nics if n.netdev not in found]
        if lost:  # a check that found nothing to check must not pass as "ACS is fine"
            raise Unfit("pcie.clear_acs", f"NIC {lost[0]} is not in `lspci -D -vvv` (PCI address "
                                          f"{facts.nics.get(lost[0], {}).get('bdf') or 'unknown'}): the bridges "
                                          "between it and its GPU cannot be found")
        return {key: ACS_OFF for key in self._acs(spec, facts, pci)}

    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str | None:
        if value == ABSENT:
            return None
        return f"setpci -s {q(key.split('/', 1)[1])} ECAP_ACS+6.w={acs_word(value):04x}"

    def read_cmd(self, key: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        return READ_CMD

    def parse_read(self, key: str, output: str) -> str:
        return _device(output, key).acs_ctl or ABSENT

    def effect(self, key: str, before: str | None, after: str, facts: NodeFacts) -> str:
        """ACS cleared with setpci is back at the next boot (the BIOS sets it): ``not_persistent``."""
        return "not_persistent"

    def findings(self, device: str, spec: NodeSpec, facts: NodeFacts, current: dict[str, str]) -> list[Finding]:
        """``acs-redirect`` per rail bridge, ``pcie-link-degraded`` (NIC from sysfs, GPU from lspci),
        ``lspci-access-denied`` / ``lspci-failed``."""
        try:
            pci = read_lspci(facts)
        except ParseError as e:
            return [Finding(device, self.name, "lspci-failed", f"lspci output cannot be read: {e}")]
        if pci is None:
            return [Finding(device, self.name, "lspci-failed", "`lspci -D -vvv` failed: ACS and links not checked")]
        out = [Finding(device, self.name, "lspci-access-denied", f"{d.bdf}: capabilities not readable (not root)")
               for d in pci.devices if d.access_denied][:1]
        for rail in rails(spec, facts, pci):
            for bdf in rail.bridges:
                dev = pci.device(bdf)
                if dev is not None and dev.acs_redirects():
                    between = f"GPU {rail.gpu} and " if rail.gpu else ""
                    out.append(Finding(device, self.name, "acs-redirect",
                                       f"{bdf} (between {between}NIC {rail.netdev} {rail.nic}): ACS "
                                       f"{', '.join(dev.acs_redirects())} on: GPUDirect RDMA traffic goes up to the "
                                       "root complex instead of across the switch; pcie.clear_acs clears it until the "
                                       "next boot, the BIOS ACS setting for good", f"ACSCtl: {dev.acs_ctl}"))
            out += self._nic_link(device, rail.netdev, facts)
            gpu = pci.device(rail.gpu) if rail.gpu else None
            if gpu is not None and link_below(gpu):
                out.append(Finding(device, self.name, "pcie-link-degraded",
                                   f"GPU {gpu.bdf} (rail of {rail.netdev}): link x{gpu.link_sta.width} at "
                                   f"{gpu.link_sta.speed_gts}GT/s below its capability x{gpu.link_cap.width} at "
                                   f"{gpu.link_cap.speed_gts}GT/s", "lspci LnkSta/LnkCap"))
        return out

    def _nic_link(self, device: str, netdev: str, facts: NodeFacts) -> list[Finding]:
        v = {name: facts.raw.get(f"pcie/{netdev}/{name}", ABSENT) for name in _LINK_FILES}
        if ABSENT in v.values():
            return []
        speed = lambda s: float(s.split()[0]) if re.match(r"^[\d.]+ GT/s", s) else None  # noqa: E731
        slower = (speed(v["current_link_speed"]) or 0) < (speed(v["max_link_speed"]) or 0)
        narrower = v["current_link_width"].isdigit() and v["max_link_width"].isdigit() and \
            int(v["current_link_width"]) < int(v["max_link_width"])
        if not (slower or narrower):
            return []
        return [Finding(device, self.name, "pcie-link-degraded",
                        f"NIC {netdev}: PCIe link {v['current_link_speed']} x{v['current_link_width']} below its "
                        f"capability {v['max_link_speed']} x{v['max_link_width']} (reseat the card or check the "
                        "slot/riser; the NIC cannot reach line rate)",
                        f"current_link_speed={v['current_link_speed']} max_link_speed={v['max_link_speed']} "
                        f"current_link_width={v['current_link_width']} max_link_width={v['max_link_width']}")]


class MrrsDomain(Domain):
    """NIC MaxReadReq: ``mrrs/<nic bdf>`` = bytes (``512``); re-applied by the boot script."""

    name = "mrrs"
    boot_script = True

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        return [lspci_read_line()] if spec.pcie.max_read_request_bytes is not None else []

    def _nics(self, spec: NodeSpec, facts: NodeFacts, pci: Lspci) -> dict[str, PciDevice | None]:
        out = {}
        for nic in spec.nics:
            bdf = facts.nics.get(nic.netdev, {}).get("bdf", "")
            if _BDF.fullmatch(bdf):
                out[bdf] = pci.device(bdf)
        return out

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        if spec.pcie.max_read_request_bytes is None:
            return {}
        pci = read_lspci(facts)
        if pci is None:
            return {}
        return {f"mrrs/{bdf}": str(d.max_read_req) if d and d.max_read_req else ABSENT
                for bdf, d in self._nics(spec, facts, pci).items()}

    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        want = spec.pcie.max_read_request_bytes
        if want is None:
            return {}
        pci = _need_lspci(facts, "pcie.max_read_request_bytes")
        out = {}
        for i, nic in enumerate(spec.nics):
            bdf = facts.nics.get(nic.netdev, {}).get("bdf", "")
            dev = pci.device(bdf) if _BDF.fullmatch(bdf) else None
            if dev is None or dev.max_read_req is None:
                why = "capabilities not readable (not root?)" if dev is not None and dev.access_denied else \
                    "no PCI Express DevCtl in lspci"
                raise Unfit("pcie.max_read_request_bytes", f"NIC {nic.netdev} ({bdf or 'no PCI device'}): {why}; "
                                                           "its MaxReadReq cannot be read")
            out[f"mrrs/{dev.bdf}"] = str(want)
        return out

    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str | None:
        if value == ABSENT or not value.isdigit() or int(value) not in _MRRS_BITS:
            return None
        return f"setpci -s {q(key.split('/', 1)[1])} CAP_EXP+8.w={_MRRS_BITS[int(value)]}000:7000"

    def read_cmd(self, key: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        return READ_CMD

    def parse_read(self, key: str, output: str) -> str:
        dev = _device(output, key)
        return str(dev.max_read_req) if dev.max_read_req else ABSENT
