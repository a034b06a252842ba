"""Stand-ins of pciutils 3.10 ``lspci`` and ``setpci`` on a lab node. Stdlib only (they start per call).

Both read and write each device's configuration space, the binary sysfs file
``sys/bus/pci/devices/<bdf>/config`` (4096 bytes, little endian) that
:mod:`tuning.lab.hw_pci` lays out, so a ``setpci`` write is exactly what the next ``lspci``
decodes. The decoding follows pciutils v3.10.0 (``lspci.c`` ``show_terse`` / ``show_verbose`` /
``show_htype1``, ``ls-caps.c`` ``cap_express_dev`` / ``cap_express_link``, ``ls-ecaps.c``
``cap_acs``; ``setpci.c``), for the registers the lab models: the header (Control, Status,
Latency, bridge bus numbers), the PCI Express capability (version 1: DevCap/DevCtl/DevSta,
LnkCap/LnkCtl/LnkSta; a v1 capability has no ``*2`` registers, so none are printed) and the Access
Control Services extended capability. A device the lab does not give BARs, an IRQ pin, MSI-X or
other capabilities prints no line for them.

Privileges as on a real kernel (``drivers/pci/pci-sysfs.c`` ``pci_read_config``): a reader without
CAP_SYS_ADMIN gets only the first 64 bytes of ``config``, so unprivileged ``lspci -vvv`` prints
``\\tCapabilities: <access denied>``; ``setpci`` opens ``config`` read-write for a write, which
fails for a non-root user (``pcilib: Cannot open ...``) and the capability lookup then fails
(``setpci: <bdf>: Instance #0 of Extended capability 000d not found - there are no capabilities
with that id.``, exit 1). The number of ``pcilib:`` warning lines (one per config read pciutils
retries) follows pciutils' read sequence for a capability lookup (M confidence).

Kernel write semantics the lab enforces (read-only bits keep their value, as hardware does): the
ACS Control bits a port's ACS Capability lacks, Link Capabilities/Status, Device Capabilities and
Status; Device Control bit 15 (Initiate FLR) reads 0.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from tuning.lab.hw_pci import (ACS_CAP, ACS_CTRL, CAP_EXP, CONFIG_SIZE, DEVCAP, DEVCTL, DEVSTA, ECAP_ACS, LNKCAP, LNKCTL,
                               LNKSTA, devices, find_cap, find_ecap, load, parse_slot, rd, slot_match,
                               store, wr, writable_mask)
from tuning.lab.sudo import is_privileged
from tuning.lab.tools.node import _sysroot  # the node's sysroot ($FABTUNE_LAB_SYSROOT), one helper for all stand-ins

ACS_FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
#: Device/Port type names of cap_express (PCI_EXP_TYPE_*)
EXP_TYPES = {0: "Endpoint", 1: "Legacy Endpoint", 4: "Root Port", 5: "Upstream Port", 6: "Downstream Port",
             7: "PCI-Express to PCI/PCI-X Bridge", 8: "PCI/PCI-X to PCI-Express Bridge"}
LINK_SPEEDS = {1: "2.5GT/s", 2: "5GT/s", 3: "8GT/s", 4: "16GT/s", 5: "32GT/s", 6: "64GT/s"}
#: pci.ids names of the devices a lab node has: (vendor, device) -> (vendor name, device name)
NAMES = {
    (0x15B3, 0x1021): ("Mellanox Technologies", "MT2910 Family [ConnectX-7]"),
    (0x10DE, 0x2330): ("NVIDIA Corporation", "GH100 [H100 SXM5 80GB]"),
    (0x1000, 0xC030): ("Broadcom / LSI", "PEX890xx PCIe Gen 5 Switch"),
}
CLASSES = {0x0200: "Ethernet controller", 0x0207: "Infiniband controller", 0x0302: "3D controller",
           0x0604: "PCI bridge"}
PROG_IF = {(0x0604, 0): "Normal decode"}


def _flag(value: int, bit: int) -> str:
    return "+" if value & bit else "-"


# ---- lspci ----------------------------------------------------------------------------------

def _latency_l0s(v: int) -> str:
    return ("<64ns", "<128ns", "<256ns", "<512ns", "<1us", "<2us", "<4us", "unlimited")[v]


def _latency_l1(v: int) -> str:
    return ("<1us", "<2us", "<4us", "<8us", "<16us", "<32us", "<64us", "unlimited")[v]


def _power_limit(value: int, scale: int) -> str:
    if scale == 0 and value == 0xFF:
        return ">600W"
    if scale == 0 and 0xF0 <= value <= 0xFE:
        value = 250 + 25 * (value - 0xF0)
    return f"{value * (1.0, 0.1, 0.01, 0.001)[scale]:g}W"


def _express_dev(cfg: bytes, w: int, kind: int) -> list[str]:
    t = rd(cfg, w + DEVCAP, 4)
    endpoint = kind in (0, 1)
    line = f"\t\tDevCap:\tMaxPayload {128 << (t & 7)} bytes, PhantFunc {(1 << ((t & 0x18) >> 3)) - 1}"
    if endpoint:
        line += f", Latency L0s {_latency_l0s((t & 0x1C0) >> 6)}, L1 {_latency_l1((t & 0xE00) >> 9)}"
    out = [line]
    line = f"\t\t\tExtTag{_flag(t, 0x20)}"
    if endpoint or kind in (5, 7):
        line += f" AttnBtn{_flag(t, 0x1000)} AttnInd{_flag(t, 0x2000)} PwrInd{_flag(t, 0x4000)}"
    line += f" RBE{_flag(t, 0x8000)}"
    if endpoint:
        line += f" FLReset{_flag(t, 0x10000000)}"
    if kind in (0, 5, 7):
        line += f" SlotPowerLimit {_power_limit((t & 0x3FC0000) >> 18, (t & 0xC000000) >> 26)}"
    out.append(line)
    c = rd(cfg, w + DEVCTL, 2)
    out.append(f"\t\tDevCtl:\tCorrErr{_flag(c, 1)} NonFatalErr{_flag(c, 2)} FatalErr{_flag(c, 4)} "
               f"UnsupReq{_flag(c, 8)}")
    line = (f"\t\t\tRlxdOrd{_flag(c, 0x10)} ExtTag{_flag(c, 0x100)} PhantFunc{_flag(c, 0x200)} "
            f"AuxPwr{_flag(c, 0x400)} NoSnoop{_flag(c, 0x800)}")
    if kind == 7:
        line += f" BrConfRtry{_flag(c, 0x8000)}"
    if endpoint and t & 0x10000000:
        line += f" FLReset{_flag(c, 0x8000)}"
    out.append(line)
    out.append(f"\t\t\tMaxPayload {128 << ((c & 0xE0) >> 5)} bytes, MaxReadReq {128 << ((c & 0x7000) >> 12)} bytes")
    s = rd(cfg, w + DEVSTA, 2)
    out.append(f"\t\tDevSta:\tCorrErr{_flag(s, 1)} NonFatalErr{_flag(s, 2)} FatalErr{_flag(s, 4)} "
               f"UnsupReq{_flag(s, 8)} AuxPwr{_flag(s, 0x10)} TransPend{_flag(s, 0x20)}")
    return out


def _compare(kind: int, sta: int, cap: int) -> str:
    if sta > cap:
        return " (overdriven)"
    if sta == cap or kind in (4, 6, 8):
        return ""
    return " (downgraded)"


def _express_link(cfg: bytes, w: int, kind: int) -> list[str]:
    t = rd(cfg, w + LNKCAP, 4)
    aspm, cap_speed, cap_width = (t & 0xC00) >> 10, t & 0xF, (t & 0x3F0) >> 4
    line = (f"\t\tLnkCap:\tPort #{t >> 24}, Speed {LINK_SPEEDS.get(cap_speed, 'unknown')}, Width x{cap_width}, "
            f"ASPM {('not supported', 'L0s', 'L1', 'L0s L1')[aspm]}")
    if aspm:
        line += ", Exit Latency "
        if aspm & 1:
            line += f"L0s {_latency_l0s((t & 0x7000) >> 12)}"
        if aspm & 2:
            line += f"{', ' if aspm & 1 else ''}L1 {_latency_l1((t & 0x38000) >> 15)}"
    out = [line, f"\t\t\tClockPM{_flag(t, 0x40000)} Surprise{_flag(t, 0x80000)} LLActRep{_flag(t, 0x100000)} "
                 f"BwNot{_flag(t, 0x200000)} ASPMOptComp{_flag(t, 0x400000)}"]
    c = rd(cfg, w + LNKCTL, 2)
    line = f"\t\tLnkCtl:\tASPM {('Disabled', 'L0s Enabled', 'L1 Enabled', 'L0s L1 Enabled')[c & 3]};"
    if kind in (4, 0, 1, 7):
        line += f" RCB {128 if c & 8 else 64} bytes,"
    out.append(line + f" Disabled{_flag(c, 0x10)} CommClk{_flag(c, 0x40)}")
    out.append(f"\t\t\tExtSynch{_flag(c, 0x80)} ClockPM{_flag(c, 0x100)} AutWidDis{_flag(c, 0x200)} "
               f"BWInt{_flag(c, 0x400)} AutBWInt{_flag(c, 0x800)}")
    s = rd(cfg, w + LNKSTA, 2)
    speed, width = s & 0xF, (s & 0x3F0) >> 4
    out.append(f"\t\tLnkSta:\tSpeed {LINK_SPEEDS.get(speed, 'unknown')}{_compare(kind, speed, cap_speed)}, "
               f"Width x{width}{_compare(kind, width, cap_width)}")
    out.append(f"\t\t\tTrErr{_flag(s, 0x400)} Train{_flag(s, 0x800)} SlotClk{_flag(s, 0x1000)} "
               f"DLActive{_flag(s, 0x2000)} BWMgmt{_flag(s, 0x4000)} ABWMgmt{_flag(s, 0x8000)}")
    return out


def acs_flags(value: int) -> str:
    """``SrcValid+ TransBlk- ...`` of an ACS Capability or Control word (``cap_acs``)."""
    return " ".join(f"{name}{_flag(value, 1 << i)}" for i, name in enumerate(ACS_FLAGS))


def _caps(cfg: bytes, visible: int) -> list[str]:
    """``show_caps`` + ``show_ext_caps`` for the capabilities the lab builds."""
    out: list[str] = []
    if not rd(cfg, 0x06, 2) & 0x10:
        return out
    where, ext = rd(cfg, 0x34, 1) & ~3, False
    while where:
        if where + 4 > visible:
            out.append("\tCapabilities: <access denied>")
            break
        cap_id, nxt, flags = cfg[where], cfg[where + 1] & ~3, rd(cfg, where + 2, 2)
        if cap_id == CAP_EXP:
            kind = (flags & 0xF0) >> 4
            name = EXP_TYPES.get(kind, f"Unknown type {kind}")
            if kind in (4, 6, 8):
                name += f" (Slot{_flag(flags, 0x100)})"
            out.append(f"\tCapabilities: [{where:02x}] Express (v{flags & 0xF}) {name}, "
                       f"MSI {(flags & 0x3E00) >> 9:02x}")
            out += _express_dev(cfg, where, kind) + _express_link(cfg, where, kind)
            ext = True
        else:
            out.append(f"\tCapabilities: [{where:02x}] Capability ID {cap_id:#02x} [{flags:04x}]")
        where = nxt
    where = 0x100
    while ext and where and where + 4 <= visible:
        header = rd(cfg, where, 4)
        if header in (0, 0xFFFFFFFF):
            break
        if header & 0xFFFF == ECAP_ACS:
            out.append(f"\tCapabilities: [{where:03x} v{(header >> 16) & 0xF}] Access Control Services")
            out.append(f"\t\tACSCap:\t{acs_flags(rd(cfg, where + ACS_CAP, 2))}")
            out.append(f"\t\tACSCtl:\t{acs_flags(rd(cfg, where + ACS_CTRL, 2))}")
        where = (header >> 20) & ~3
    return out


def _header(root: Path, bdf: str, cfg: bytes) -> list[str]:
    vendor, device, klass = rd(cfg, 0, 2), rd(cfg, 2, 2), rd(cfg, 0x0A, 2)
    vname, dname = NAMES.get((vendor, device), (f"Device {vendor:04x}", f"Device {device:04x}"))
    line = f"{bdf} {CLASSES.get(klass, f'Class {klass:04x}')}: {vname} {dname}"
    if cfg[0x08]:
        line += f" (rev {cfg[0x08]:02x})"
    prog = PROG_IF.get((klass, cfg[0x09]))
    if cfg[0x09] or prog:
        line += f" (prog-if {cfg[0x09]:02x}" + (f" [{prog}]" if prog else "") + ")"
    cmd, st = rd(cfg, 4, 2), rd(cfg, 6, 2)
    devsel = {0: "fast", 0x200: "medium", 0x400: "slow"}.get(st & 0x600, "??")
    out = [line,
           f"\tControl: I/O{_flag(cmd, 1)} Mem{_flag(cmd, 2)} BusMaster{_flag(cmd, 4)} SpecCycle{_flag(cmd, 8)} "
           f"MemWINV{_flag(cmd, 0x10)} VGASnoop{_flag(cmd, 0x20)} ParErr{_flag(cmd, 0x40)} Stepping{_flag(cmd, 0x80)} "
           f"SERR{_flag(cmd, 0x100)} FastB2B{_flag(cmd, 0x200)} DisINTx{_flag(cmd, 0x400)}",
           f"\tStatus: Cap{_flag(st, 0x10)} 66MHz{_flag(st, 0x20)} UDF{_flag(st, 0x40)} FastB2B{_flag(st, 0x80)} "
           f"ParErr{_flag(st, 0x100)} DEVSEL={devsel} >TAbort{_flag(st, 0x800)} <TAbort{_flag(st, 0x1000)} "
           f"<MAbort{_flag(st, 0x2000)} >SERR{_flag(st, 0x4000)} <PERR{_flag(st, 0x8000)} INTx{_flag(st, 8)}"]
    if cmd & 4:
        out.append(f"\tLatency: {cfg[0x0D]}" + (f", Cache Line Size: {cfg[0x0C] * 4} bytes" if cfg[0x0C] else ""))
    numa = root / "sys/bus/pci/devices" / bdf / "numa_node"
    if numa.is_file() and numa.read_text().strip() not in ("", "-1"):
        out.append(f"\tNUMA node: {numa.read_text().strip()}")
    if cfg[0x0E] & 0x7F == 1:
        out.append(f"\tBus: primary={cfg[0x18]:02x}, secondary={cfg[0x19]:02x}, subordinate={cfg[0x1A]:02x}, "
                   f"sec-latency={cfg[0x1B]}")
        ss, brc = rd(cfg, 0x1E, 2), rd(cfg, 0x3E, 2)
        sdevsel = {0: "fast", 0x200: "medium", 0x400: "slow"}.get(ss & 0x600, "??")
        out.append(f"\tSecondary status: 66MHz{_flag(ss, 0x20)} FastB2B{_flag(ss, 0x80)} ParErr{_flag(ss, 0x100)} "
                   f"DEVSEL={sdevsel} >TAbort{_flag(ss, 0x800)} <TAbort{_flag(ss, 0x1000)} <MAbort{_flag(ss, 0x2000)} "
                   f"<SERR{_flag(ss, 0x4000)} <PERR{_flag(ss, 0x8000)}")
        out.append(f"\tBridgeCtl: Parity{_flag(brc, 1)} SERR{_flag(brc, 2)} NoISA{_flag(brc, 4)} VGA{_flag(brc, 8)} "
                   f"VGA16{_flag(brc, 0x10)} MAbort{_flag(brc, 0x20)} >Reset{_flag(brc, 0x40)} "
                   f"FastB2B{_flag(brc, 0x80)}")
        out.append(f"\t\tPriDiscTmr{_flag(brc, 0x100)} SecDiscTmr{_flag(brc, 0x200)} DiscTmrStat{_flag(brc, 0x400)} "
                   f"DiscTmrSERREn{_flag(brc, 0x800)}")
    return out


#: kernel modules libkmod finds for a bound driver (``Kernel modules:`` of ls-kernel.c; pcieport is built in)
DRIVER_MODULES = {"mlx5_core": ["mlx5_core"], "nvidia": ["nvidiafb", "nouveau", "nvidia_drm", "nvidia"]}


def _kernel_lines(root: Path, bdf: str) -> list[str]:
    """``Kernel driver in use`` / ``Kernel modules`` (ls-kernel.c) from the device's ``driver`` link."""
    link = root / "sys/bus/pci/devices" / bdf / "driver"
    if not link.is_symlink():
        return []
    name = os.path.basename(os.readlink(link))
    out = [f"\tKernel driver in use: {name}"]
    mods = DRIVER_MODULES.get(name, [])
    if mods:
        out.append("\tKernel modules: " + ", ".join(mods))
    return out


def lspci(argv: list[str]) -> int:
    """``lspci [-D] [-v|-vv|-vvv] [-s SLOT]`` (see the module docstring)."""
    verbose, slot, args = 0, None, list(argv)
    while args:
        arg = args.pop(0)
        if arg == "-s" and args:
            slot = parse_slot(args.pop(0))
            if slot is None:
                print("lspci: -s: Invalid slot number", file=sys.stderr)
                return 2
        elif arg.startswith("-s") and len(arg) > 2:
            slot = parse_slot(arg[2:])
            if slot is None:
                print("lspci: -s: Invalid slot number", file=sys.stderr)
                return 2
        elif arg.startswith("-") and set(arg[1:]) <= {"v", "D"} and len(arg) > 1:
            verbose += arg.count("v")
        else:
            print(f"fabtune lab: lspci supports -D, -v[v[v]] and -s SLOT, not {arg!r}", file=sys.stderr)
            return 2
    root = _sysroot()
    privileged = is_privileged()
    out: list[str] = []
    for bdf in devices(root):
        if slot is not None and not slot_match(bdf, slot):
            continue
        cfg = load(root, bdf, privileged)
        visible = len(cfg)
        cfg = bytes(cfg) + b"\xff" * (CONFIG_SIZE - visible)
        if verbose < 2:
            out.append(_header(root, bdf, cfg)[0])
            continue
        out += _header(root, bdf, cfg) + _caps(cfg, visible) + _kernel_lines(root, bdf) + [""]
    if out:
        sys.stdout.write("\n".join(out) + "\n")
    return 0


# ---- setpci ---------------------------------------------------------------------------------

#: setpci.c ``pci_reg_names`` (pciutils v3.10.0): name -> (cap type 0/1/2, cap id, offset, width); the
#: header registers the lab's devices have and every capability name
REG_NAMES = {"VENDOR_ID": (0, 0, 0x00, 2), "DEVICE_ID": (0, 0, 0x02, 2), "COMMAND": (0, 0, 0x04, 2),
             "STATUS": (0, 0, 0x06, 2), "REVISION": (0, 0, 0x08, 1), "CLASS_PROG": (0, 0, 0x09, 1),
             "CLASS_DEVICE": (0, 0, 0x0A, 2), "CACHE_LINE_SIZE": (0, 0, 0x0C, 1),
             "LATENCY_TIMER": (0, 0, 0x0D, 1), "HEADER_TYPE": (0, 0, 0x0E, 1), "BIST": (0, 0, 0x0F, 1)}
REG_NAMES.update({f"CAP_{n}": (1, i, 0, 0) for i, n in enumerate(
    "PM AGP VPD SLOTID MSI CHSWP PCIX HT VNDR DBG CCRC HOTPLUG SSVID AGP3 SECURE EXP MSIX SATA AF EA".split(), 1)})
REG_NAMES.update({f"ECAP_{n}": (2, i, 0, 0) for i, n in (
    (1, "AER"), (2, "VC"), (3, "DSN"), (4, "PB"), (5, "RCLINK"), (6, "RCILINK"), (7, "RCEC"), (8, "MFVC"),
    (9, "VC2"), (0xA, "RBCB"), (0xB, "VNDR"), (0xD, "ACS"), (0xE, "ARI"), (0xF, "ATS"), (0x10, "SRIOV"),
    (0x11, "MRIOV"), (0x12, "MCAST"), (0x13, "PRI"), (0x15, "REBAR"), (0x16, "DPA"), (0x17, "TPH"),
    (0x18, "LTR"), (0x19, "SECPCI"), (0x1A, "PMUX"), (0x1B, "PASID"), (0x1C, "LNR"), (0x1D, "DPC"),
    (0x1E, "L1PM"), (0x1F, "PTM"), (0x20, "M_PCIE"), (0x21, "FRS"), (0x22, "RTR"), (0x23, "DVSEC"),
    (0x24, "VF_REBAR"), (0x25, "DLNK"), (0x26, "16GT"), (0x27, "LMR"), (0x28, "HIER_ID"), (0x29, "NPEM"))})
U32 = 0xFFFFFFFF


def _parse_err(msg: str) -> int:
    print(f"setpci: {msg}.\nTry `setpci --help' for more information.", file=sys.stderr)
    return 1


def _x32(text: str) -> tuple[int, int | None, str]:
    """setpci.c ``parse_x32`` (``strtoul(c, &stop, 16)``): (-1 error | 0 stopped early | 1 whole text,
    value, the rest from where strtoul stopped)."""
    if not text:
        return -1, None, ""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?)(0[xX](?=[0-9a-fA-F]))?([0-9a-fA-F]*)", text)
    digits = m.group(3)
    if not digits:
        return 0, 0, text
    value = int(digits, 16)
    if value > 0xFFFFFFFFFFFFFFFF:
        return -1, None, ""  # ERANGE
    if m.group(1) == "-":
        value = (-value) & 0xFFFFFFFFFFFFFFFF
    if value & U32 != value:
        return -1, None, ""
    rest = text[m.end():]
    return (0 if rest else 1), value, rest


def _parse_register(op: dict, base: str) -> str | None:
    """setpci.c ``parse_register``: a hex address, a named register, ``CAPxx`` or ``ECAPxxx``."""
    rc, value, _ = _x32(base)
    if rc > 0:
        op["addr"] = value
        return None
    reg = REG_NAMES.get(base.upper())
    if reg is not None:
        op["cap_type"], op["cap_id"], op["addr"] = reg[0], reg[1], reg[2]
        op["width"] = op["width"] or reg[3]
        return None
    for prefix, kind, limit in (("CAP", 1, 0x100), ("ECAP", 2, 0x1000)):
        if base[:len(prefix)].upper() == prefix:
            rc, value, _ = _x32(base[len(prefix):])
            if rc > 0 and value < limit:
                op["cap_type"], op["cap_id"], op["addr"] = kind, value, 0
                return None
            break  # a CAP... name that does not parse is unknown (setpci's else-if)
    return f'Unknown register "{base}"'


def _parse_op(text: str) -> tuple[dict, str | None]:
    """setpci.c ``parse_op``: ``<base>[+<offset>][.(B|W|L)][=<values>]`` -> (op, None) or ({}, error text)."""
    base, eq, value = text.partition("=")
    if eq and not value:
        return {}, "Missing value"
    if "@" in base:
        return {}, "fabtune lab: setpci stand-in does not take @<number>"
    base, dot, width = base.partition(".")
    base, plus, offset = base.partition("+")
    n = value.count(",") + 1 if eq else 0
    op = {"cap_type": 0, "cap_id": 0, "addr": 0, "width": 0, "values": []}
    if dot:
        if len(width) != 1:
            return {}, f'Invalid width "{width}"'
        op["width"] = {"B": 1, "W": 2, "L": 4}.get(width.upper(), 0)
        if not op["width"]:
            return {}, f'Invalid width "{width}"'
    err = _parse_register(op, base)
    if err:
        return {}, err
    if not op["width"]:
        return {}, "Missing width"
    if plus:
        rc, off, _ = _x32(offset)
        if rc <= 0 or off >= 0x1000:
            return {}, f'Invalid offset "{offset}"'
        op["addr"] += off
    if op["addr"] >= 0x1000 or op["addr"] + op["width"] * (n or 1) > 0x1000:
        return {}, f"Register number {op['addr']:02x} out of range"
    if op["addr"] & (op["width"] - 1):
        return {}, f"Unaligned register address {op['addr']:02x}"
    values, err = _parse_values(value if eq else "", (1 << (8 * op["width"])) - 1)
    op["values"] = values
    return (op, None) if err is None else ({}, err)


def _parse_values(value: str, limit: int) -> tuple[list[tuple[int, int]], str | None]:
    """``<hex>[:<mask>][,...]`` -> [(value & mask, mask)] (mask all ones without ``:``), or an error text
    (``parse_op``: a value or mask above the width's limit is out of range unless it is a small
    negative number, ``ll < ~0U - lim``)."""
    out = []
    for item in value.split(",") if value else []:
        rc, v, rest = _x32(item)
        if rc < 0 or rc == 0 and not rest.startswith(":"):
            return [], f'Invalid value "{item}"'
        if limit < v < U32 - limit:
            return [], f'Value "{item}" is out of range'
        m = U32
        if rc == 0:
            mask = rest[1:]
            rc, m, _ = _x32(mask)
            if rc <= 0:
                return [], f'Invalid mask "{mask}"'
            if limit < m < U32 - limit:
                return [], f'Mask "{mask}" is out of range'
            v &= m
        out.append((v & limit, m & limit))
    return out, None


def _cannot_open(bdf: str, times: int) -> None:
    """pcilib ``sysfs_setup``: an O_RDWR open of ``config`` that fails warns once per access."""
    sys.stderr.write(f"pcilib: Cannot open /sys/bus/pci/devices/{bdf}/config\n" * times)


def _exec_op(root: Path, bdf: str, op: dict, writeable: bool) -> int:
    """setpci.c ``exec_op`` on one device; print what setpci prints. Returns the exit status.

    ``writeable``: some operation of this run writes (pcilib then opens ``config`` read-write for
    every access, which fails without root: each access warns and reads all ones, a write is lost
    and setpci goes on)."""
    privileged = is_privileged()
    denied = writeable and not privileged
    cfg = load(root, bdf, privileged)
    seen = b"\xff" * CONFIG_SIZE if denied else bytes(cfg) + b"\xff" * (CONFIG_SIZE - len(cfg))
    addr = op["addr"]
    if op["cap_type"]:
        if denied:  # the capability scan's reads (M: how many pciutils makes)
            _cannot_open(bdf, 4)
        where = find_cap(seen, op["cap_id"]) if op["cap_type"] == 1 else find_ecap(seen, op["cap_id"])
        if where is None:
            kind = "Capability" if op["cap_type"] == 1 else "Extended capability"
            print(f"setpci: {bdf}: Instance #0 of {kind} {op['cap_id']:04x} not found - there are no "
                  "capabilities with that id.", file=sys.stderr)
            return 1
        addr += where
    width = op["width"]
    if addr & (width - 1):
        print(f"setpci: {bdf}: Unaligned access of width {width} to register {addr:04x}", file=sys.stderr)
        return 1
    if addr + width > 0x1000:
        print(f"setpci: {bdf}: Access of width {width} to register {addr:04x} out of range", file=sys.stderr)
        return 1
    if not op["values"]:
        if denied:
            _cannot_open(bdf, 1)
        print(f"{rd(seen, addr, width):0{2 * width}x}")
        return 0
    full = (1 << (8 * width)) - 1
    for value, mask in op["values"]:
        if denied:  # a masked write reads first; the write fails too: sysfs_write returns 0, ignored
            _cannot_open(bdf, 1 if mask == full else 2)
            addr += width
            continue
        old = rd(cfg, addr, width)
        new = value if mask == full else (old & ~mask) | value
        keep = writable_mask(cfg, addr, width)
        wr(cfg, addr, width, (old & ~keep) | (new & keep))
        addr += width
    if not denied:
        store(root, bdf, cfg)
    return 0


def setpci(argv: list[str]) -> int:
    """``setpci [-v] [-f] [-D] -s SLOT REG[+OFF][.W][=VAL[:MASK]]...`` (see the module docstring)."""
    args, demo, force = list(argv), False, False
    while args and args[0].startswith("-") and args[0] != "-s":
        opt = args.pop(0)
        if not set(opt[1:]) <= {"v", "f", "D"}:
            return _parse_err(f"Invalid or misplaced option -{opt[1:2]}")
        demo, force = demo or "D" in opt, force or "f" in opt
    if not args or args[0] != "-s" or len(args) < 2:
        return _parse_err("Option -s requires an argument" if args else "No operation specified")
    slot = parse_slot(args[1])
    if slot is None:
        return _parse_err(f"Unable to parse filter -s {args[1]}")
    ops = []
    for text in args[2:]:
        op, err = _parse_op(text)
        if err:
            return _parse_err(err)
        ops.append(op)
    if not ops:
        return _parse_err("No operation specified")
    root = _sysroot()
    chosen = [b for b in devices(root) if slot_match(b, slot)]
    if not chosen and not force:
        print("setpci: Warning: No devices selected for operation group 1.", file=sys.stderr)
    writeable = not demo and any(op["values"] for op in ops)  # scan_ops: pacc->writeable
    for bdf in chosen:
        for op in ops:
            if demo and op["values"]:
                continue
            rc = _exec_op(root, bdf, op, writeable)
            if rc:
                return rc
    return 0
