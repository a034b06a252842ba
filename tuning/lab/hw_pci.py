"""The lab's PCIe devices, loaded kernel modules and link-level pause: sysroot builder, power-on hook
and the configuration-space codec the ``lspci`` / ``setpci`` stand-ins share (standard library only
at import: the stand-ins import it).

For every rail of :func:`tuning.lab.fabric.pcie_layout` the builder lays out the PCIe switch
between GPU i and NIC i (upstream port ``switch_up``, downstream ports ``switch_down[0]`` towards
the NIC and ``switch_down[1]`` towards the GPU), the NIC and the GPU, each as
``sys/bus/pci/devices/<bdf>/`` with:

- ``config``: the binary configuration space (4096 bytes, kept root-only in ``run/lab/pci/<bdf>.config``;
  the world-readable sysfs ``config`` holds the 64 bytes an unprivileged reader gets) that the ``lspci`` / ``setpci``
  stand-ins (:mod:`tuning.lab.tools.pci`) decode and write: header, PCI Express capability
  (version 1) and, on the downstream ports, Access Control Services with the firmware default
  ``ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-``
  (0x001d: P2P requests and completions redirected to the root complex, as a BIOS with ACS on
  leaves them). NIC and GPU: MaxPayload 256, MaxReadReq 512 bytes. Links: 32GT/s x16.
- ``current_link_speed`` / ``max_link_speed`` (kernel ``pci_speed_string()``: ``32.0 GT/s PCIe``),
  ``current_link_width`` / ``max_link_width`` (``16``), ``vendor``, ``device``, ``class``
  (``0x15b3``, ``0x1021``, ``0x020000``), ``numa_node`` (where no other builder wrote it) and the
  ``driver`` link (``../../drivers/<name>``: mlx5_core, nvidia, pcieport).

It also writes ``proc/modules`` (the drivers udev loads at boot; no nvidia_peermem, so no
``sys/kernel/mm/memory_peers``) and ``run/lab/pause/<if>.json`` (RX and TX pause on: the mlx5
default). All of it is volatile: a ``fabtune lab reboot`` rebuilds it, which puts ACS back to
the firmware default and unloads modules, as a power cycle does.

Faults live in the non-volatile ``hw/lab-faults/`` (kept across reboots, applied by
:func:`power_on` and, for a running node, by :func:`inject`):

- ``pcie-link.json`` ``{"<bdf>": {"speed": "16.0 GT/s PCIe", "width": 8}}``: the link of a device
  trained below its capability (LnkSta and ``current_link_*`` of the device and of the
  downstream port above it).
- ``peermem.json`` ``{"registers": false}``: nvidia-peermem loads without registering with the
  RDMA core (read by the ``modprobe`` stand-in).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tuning.lab.fabric import pcie_layout

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: the lspci/setpci stand-ins import this module
if TYPE_CHECKING:
    from tuning.lab.fabric import Node

CONFIG_SIZE = 4096
UNPRIVILEGED_BYTES = 64
CAP_EXP, ECAP_ACS = 0x10, 0x0D
#: PCI Express capability registers (offsets from the capability), pciutils lib/header.h
DEVCAP, DEVCTL, DEVSTA, LNKCAP, LNKCTL, LNKSTA = 0x4, 0x8, 0xA, 0xC, 0x10, 0x12
ACS_CAP, ACS_CTRL = 0x4, 0x6

#: kernel ``pci_speed_string()`` of the LnkCap/LnkSta speed codes (sysfs ``current_link_speed`` / ``max_link_speed``)
SYSFS_SPEEDS = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe",
                5: "32.0 GT/s PCIe", 6: "64.0 GT/s PCIe"}

# ---- configuration space (read and written by the lspci / setpci stand-ins too) ---------------

def config_path(root: Path, bdf: str) -> Path:
    """``<sysroot>/sys/bus/pci/devices/<bdf>/config``."""
    return root / "sys/bus/pci/devices" / bdf / "config"


def rd(cfg: bytes | bytearray, addr: int, width: int) -> int:
    """Little-endian register of ``width`` bytes at ``addr``."""
    return int.from_bytes(cfg[addr:addr + width], "little")


def wr(cfg: bytearray, addr: int, width: int, value: int) -> None:
    """Store a little-endian register."""
    cfg[addr:addr + width] = value.to_bytes(width, "little")


def find_cap(cfg: bytes | bytearray, cap_id: int) -> int | None:
    """Offset of the first traditional capability ``cap_id`` (lib/caps.c ``pci_scan_trad_caps``)."""
    if not rd(cfg, 0x06, 2) & 0x10:
        return None
    where, seen = rd(cfg, 0x34, 1) & ~3, set()
    while where and where not in seen:
        seen.add(where)
        if cfg[where] == 0xFF:
            return None
        if cfg[where] == cap_id:
            return where
        where = cfg[where + 1] & ~3
    return None


def find_ecap(cfg: bytes | bytearray, cap_id: int) -> int | None:
    """Offset of the first extended capability ``cap_id`` (``pci_scan_ext_caps``; needs the PCIe cap)."""
    if find_cap(cfg, CAP_EXP) is None:
        return None
    where, seen = 0x100, set()
    while where and where not in seen:
        seen.add(where)
        header = rd(cfg, where, 4)
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == cap_id:
            return where
        where = (header >> 20) & ~3
    return None


def writable_mask(cfg: bytes | bytearray, addr: int, width: int) -> int:
    """Bits of the register at ``addr`` that a write can change (hardware keeps read-only bits)."""
    mask = 0
    exp, acs = find_cap(cfg, CAP_EXP), find_ecap(cfg, ECAP_ACS)
    for i in range(width):
        a, byte_mask = addr + i, 0
        if a in (0x04, 0x05):  # Command
            byte_mask = (0x0547 >> (8 * (a - 0x04))) & 0xFF
        elif exp is not None and a in (exp + DEVCTL, exp + DEVCTL + 1):
            byte_mask = 0xFF if a == exp + DEVCTL else 0x7F  # bit 15 (Initiate FLR) reads 0
        elif exp is not None and a in (exp + LNKCTL, exp + LNKCTL + 1):
            byte_mask = 0xDB if a == exp + LNKCTL else 0x0F  # Retrain Link reads 0
        elif acs is not None and a == acs + ACS_CTRL:
            byte_mask = rd(cfg, acs + ACS_CAP, 1) & 0x7F  # only the controls the port implements
        mask |= byte_mask << (8 * i)
    return mask


#: where the lab keeps each device's whole configuration space (root only, 0600, volatile): the
#: world-readable sysfs ``config`` holds what a reader without CAP_SYS_ADMIN gets (``pci_read_config``:
#: the first 64 bytes), so an unprivileged ``cat``/``wc`` of it reads 64 bytes as on a real node; the
#: lab's limit: a root ``cat`` of the sysfs file reads 64 bytes too (lspci/setpci as root read all 4096)
KERNEL_CONFIG = "run/lab/pci"


def kernel_config_path(root: Path, bdf: str) -> Path:
    """``<sysroot>/run/lab/pci/<bdf>.config``: the whole config space (:data:`KERNEL_CONFIG`)."""
    return root / KERNEL_CONFIG / f"{bdf}.config"


def load(root: Path, bdf: str, privileged: bool = True) -> bytearray:
    """The config space of ``bdf`` as a reader sees it: all 4096 bytes with CAP_SYS_ADMIN
    (``privileged``), else the first :data:`UNPRIVILEGED_BYTES` (the sysfs file). Raises OSError."""
    whole = kernel_config_path(root, bdf)
    if privileged and whole.is_file():
        return bytearray(whole.read_bytes())
    return bytearray(config_path(root, bdf).read_bytes()[:CONFIG_SIZE if privileged else UNPRIVILEGED_BYTES])


def _replace(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    tmp.replace(path)


def store(root: Path, bdf: str, cfg: bytearray) -> None:
    """Write a config space back atomically (a concurrent lspci never sees half a file): the whole
    space root-only (:func:`kernel_config_path`, 0600), the first 64 bytes to sysfs ``config``
    (mode kept, 0644 as the kernel makes it)."""
    whole = kernel_config_path(root, bdf)
    whole.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _replace(whole, bytes(cfg), 0o600)
    path = config_path(root, bdf)
    _replace(path, bytes(cfg[:UNPRIVILEGED_BYTES]), path.stat().st_mode & 0o7777 if path.exists() else 0o644)


def devices(root: Path) -> list[str]:
    """BDFs of every device with a config space, in lspci's order (domain, bus, device, function)."""
    base = root / "sys/bus/pci/devices"
    names = [p.name for p in base.iterdir() if (p / "config").is_file()] if base.is_dir() else []
    return sorted(names)


#: ACS Control at power-on (SrcValid, ReqRedir, CmpltRedir, UpstreamFwd): what BIOSes with ACS on set
ACS_DEFAULT = 0x001D
#: ACS Capability of the lab's switch downstream ports: every control implemented
ACS_CAPS = 0x007F
LINK_SPEED, LINK_WIDTH = 5, 16  # 32GT/s x16 (PCIe Gen5)
FAULTS = "hw/lab-faults"
#: secondary bus of a switch port with nothing behind it (the GPU of a ``gpu_misplaced`` rail is elsewhere)
EMPTY_BUS = 0xFF
#: (vendor, device, revision, class code, prog-if, driver) per device kind
KINDS = {
    "nic": (0x15B3, 0x1021, 0x00, 0x0200, 0, "mlx5_core"),
    "gpu": (0x10DE, 0x2330, 0xA1, 0x0302, 0, "nvidia"),
    "up": (0x1000, 0xC030, 0xB0, 0x0604, 0, "pcieport"),
    "down": (0x1000, 0xC030, 0xB0, 0x0604, 0, "pcieport"),
}
#: PCI Express Device/Port type per kind (PCI_EXP_TYPE_*)
EXP_TYPE = {"nic": 0, "gpu": 0, "up": 5, "down": 6}


def _bus(bdf: str) -> int:
    return int(bdf.split(":")[1], 16)


# ---- slot filter (pciutils lib/filter.c pci_filter_parse_slot: the forms fabtune and people type)

def parse_slot(text: str) -> tuple[int | None, int | None, int | None, int | None] | None:
    """``[[[[<domain>]:]<bus>]:][<slot>][.[<func>]]`` -> (domain, bus, dev, func), None = any; None if bad."""
    try:
        head, _, func = text.partition(".")
        parts = head.split(":")
        if len(parts) > 3:
            return None
        dev = parts[-1]
        bus = parts[-2] if len(parts) >= 2 else ""
        dom = parts[-3] if len(parts) == 3 else ""
        conv = [int(x, 16) if x not in ("", "*") else None for x in (dom, bus, dev, func)]
    except ValueError:
        return None
    if conv[2] is not None and conv[2] > 0x1F or conv[3] is not None and conv[3] > 7:
        return None
    return conv[0], conv[1], conv[2], conv[3]


def slot_match(bdf: str, slot: tuple) -> bool:
    """Whether ``bdf`` (``0000:0b:00.0``) is selected by a :func:`parse_slot` result."""
    dom, rest = bdf.split(":", 1)
    bus, rest = rest.split(":")
    dev, func = rest.split(".")
    have = (int(dom, 16), int(bus, 16), int(dev, 16), int(func, 16))
    return all(w is None or w == h for w, h in zip(slot, have))


def config_space(kind: str, port: int = 0, buses: tuple[int, int, int] = (0, 0, 0)) -> bytearray:
    """The power-on configuration space of one lab device.

    Args:
        kind: ``nic``, ``gpu``, ``up`` (switch upstream port) or ``down`` (downstream port).
        port: the link's port number (LnkCap ``Port #``) of a switch port.
        buses: (primary, secondary, subordinate) bus numbers of a bridge.
    """
    vendor, device, rev, klass, progif, _ = KINDS[kind]
    cfg = bytearray(CONFIG_SIZE)
    bridge = kind in ("up", "down")
    wr(cfg, 0x00, 2, vendor)
    wr(cfg, 0x02, 2, device)
    wr(cfg, 0x04, 2, 0x0507 if bridge else 0x0506)  # Mem+ BusMaster+ SERR+ DisINTx+ (bridges: I/O+ too)
    wr(cfg, 0x06, 2, 0x0010)  # Cap+, DEVSEL=fast
    cfg[0x08], cfg[0x09] = rev, progif
    wr(cfg, 0x0A, 2, klass)
    cfg[0x0C] = 0x10  # cache line 64 bytes
    cfg[0x0E] = 0x01 if bridge else 0x00
    exp = 0x40 if bridge else 0x60
    cfg[0x34] = exp
    if bridge:
        cfg[0x18], cfg[0x19], cfg[0x1A] = (b % 256 for b in buses)  # 8-bit bus numbers
        wr(cfg, 0x3E, 2, 0x0002)  # BridgeCtl SERR+
    _express(cfg, exp, kind, port)
    if kind == "down":
        wr(cfg, 0x100, 4, 0x000D | 1 << 16)  # ACS, version 1, last extended capability
        wr(cfg, 0x100 + ACS_CAP, 2, ACS_CAPS)
        wr(cfg, 0x100 + ACS_CTRL, 2, ACS_DEFAULT)
    return cfg


def _express(cfg: bytearray, exp: int, kind: str, port: int) -> None:
    """The PCI Express capability (version 1) at ``exp``: Dev/Lnk registers of a healthy Gen5 x16 link."""
    bridge = kind in ("up", "down")
    cfg[exp], cfg[exp + 1] = CAP_EXP, 0
    wr(cfg, exp + 2, 2, 0x0001 | EXP_TYPE[kind] << 4)  # version 1, no slot
    if bridge:
        devcap = 0x2 | 0x20 | 0x8000 | ((75 << 18) if kind == "up" else 0)
        devctl = 0x000F | 0x0020 | 0x2000  # error reporting, MaxPayload 256, MaxReadReq 512
        lnkcap = LINK_SPEED | LINK_WIDTH << 4 | 0x400000 | (0x300000 if kind == "down" else 0) | port << 24
        lnksta = LINK_SPEED | LINK_WIDTH << 4 | (0x2000 if kind == "down" else 0)
    else:
        devcap = 0x2 | 0x20 | 0x1C0 | 0xE00 | 0x8000 | 75 << 18 | 0x10000000
        devctl = 0x000F | 0x0010 | 0x0020 | 0x0100 | 0x0800 | 0x2000  # RlxdOrd+ ExtTag+ NoSnoop+
        lnkcap = LINK_SPEED | LINK_WIDTH << 4 | 0x400000
        lnksta = LINK_SPEED | LINK_WIDTH << 4 | 0x1000
    wr(cfg, exp + DEVCAP, 4, devcap)
    wr(cfg, exp + DEVCTL, 2, devctl)
    wr(cfg, exp + LNKCAP, 4, lnkcap)
    wr(cfg, exp + LNKCTL, 2, 0x0040)  # CommClk+
    wr(cfg, exp + LNKSTA, 2, lnksta)


def _put(path: Path, text: str, only_new: bool = False) -> None:
    if only_new and path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _device(root: Path, bdf: str, kind: str, numa: int, cfg: bytearray) -> None:
    d = root / "sys/bus/pci/devices" / bdf
    d.mkdir(parents=True, exist_ok=True)
    store(root, bdf, cfg)
    vendor, device, _, klass, progif, driver = KINDS[kind]
    _put(d / "vendor", f"0x{vendor:04x}", only_new=True)
    _put(d / "device", f"0x{device:04x}", only_new=True)
    _put(d / "class", f"0x{klass:04x}{progif:02x}", only_new=True)
    _put(d / "numa_node", str(numa), only_new=True)
    _put(d / "max_link_speed", SYSFS_SPEEDS[LINK_SPEED])
    _put(d / "max_link_width", str(LINK_WIDTH))
    _put(d / "current_link_speed", SYSFS_SPEEDS[LINK_SPEED])
    _put(d / "current_link_width", str(LINK_WIDTH))
    (root / "sys/bus/pci/drivers" / driver).mkdir(parents=True, exist_ok=True)
    if not (d / "driver").is_symlink():
        (d / "driver").symlink_to(f"../../drivers/{driver}")


def build(root: Path, node: Node) -> None:
    """Sysroot builder (``EXTRA_BUILDERS``): PCIe tree, ``proc/modules``, pause state (module docstring)."""
    misplaced = getattr(node, "gpu_misplaced", {})  # topology fault of tuning.lab.hw_gpu: GPU elsewhere
    for rail in pcie_layout(node):
        numa, up = rail["numa_node"], rail["switch_up"]
        to_nic, to_gpu = rail["switch_down"]
        nic_bus, gpu_bus, down_bus = _bus(rail["nic"]), _bus(rail["gpu"]), _bus(to_nic)
        port_bus = EMPTY_BUS if str(rail["rail"]) in misplaced else gpu_bus
        _device(root, up, "up", numa, config_space("up", 0, (_bus(up) - 1, down_bus, max(nic_bus, gpu_bus))))
        _device(root, to_nic, "down", numa, config_space("down", 1, (down_bus, nic_bus, nic_bus)))
        _device(root, to_gpu, "down", numa, config_space("down", 2, (down_bus, port_bus, port_bus)))
        _device(root, rail["nic"], "nic", numa, config_space("nic"))
        _device(root, rail["gpu"], "gpu", numa, config_space("gpu"))
    from tuning.lab.tools import modtools
    from tuning.lab.tools.ethtool import pause_path

    modtools.write_modules(root, modtools.boot_modules(inbox=node.driver == "inbox"))
    (root / "sys/kernel/mm").mkdir(parents=True, exist_ok=True)
    (root / "etc/modules-load.d").mkdir(parents=True, exist_ok=True)
    for nic in node.nics:
        path = pause_path(root, nic.netdev)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"autoneg": False, "rx": True, "tx": True}, sort_keys=True) + "\n")


def _code(speed: str) -> int:
    """``16.0 GT/s PCIe`` -> 4 (LnkSta speed code). Raises ValueError for an unknown speed."""
    for code, text in SYSFS_SPEEDS.items():
        if text == speed:
            return code
    raise ValueError(f"unknown link speed {speed!r}; allowed: {', '.join(SYSFS_SPEEDS.values())}")


def _train(root: Path, bdf: str, speed: int, width: int) -> None:
    """Set the negotiated link of ``bdf`` (and of the bridge above it) in LnkSta and sysfs."""
    above = [b.name for b in (root / "sys/bus/pci/devices").iterdir()
             if (b / "config").is_file() and load(root, b.name)[0x0E] & 0x7F == 1
             and load(root, b.name)[0x19] == _bus(bdf)]
    for dev in [bdf] + above:
        cfg = load(root, dev)
        exp = find_cap(cfg, CAP_EXP)
        if exp is None:
            continue
        sta = rd(cfg, exp + LNKSTA, 2)
        wr(cfg, exp + LNKSTA, 2, (sta & ~0x3FF) | speed | width << 4)
        store(root, dev, cfg)
        d = root / "sys/bus/pci/devices" / dev
        (d / "current_link_speed").write_text(SYSFS_SPEEDS[speed] + "\n")
        (d / "current_link_width").write_text(f"{width}\n")


def power_on(root: Path, node: Node) -> None:
    """Power-on hook (``POWER_ON_HOOKS``): links listed in ``hw/lab-faults/pcie-link.json`` train
    below capability again. ACS defaults and unloaded modules come with the rebuilt tree."""
    faults = root / FAULTS / "pcie-link.json"
    if not faults.is_file():
        return
    for bdf, link in json.loads(faults.read_text()).items():
        if (root / "sys/bus/pci/devices" / bdf / "config").is_file():
            _train(root, bdf, _code(link["speed"]), int(link["width"]))


def inject(root: Path, kind: str, bdf: str | None = None, speed: str | None = None,
           width: int | None = None) -> None:
    """Add a fault to a node's sysroot (kept in ``hw/``, so it outlives reboots) and apply it now.

    Args:
        root: the node's sysroot.  kind: ``pcie-link`` (needs ``bdf``, ``speed`` as the kernel
            prints it, e.g. ``16.0 GT/s PCIe``, and ``width``) or ``peermem-unregistered``.

    Raises:
        ValueError: unknown kind, speed or device.
    """
    folder = root / FAULTS
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "peermem-unregistered":
        (folder / "peermem.json").write_text(json.dumps({"registers": False}) + "\n")
        return
    if kind != "pcie-link" or bdf is None or speed is None or width is None:
        raise ValueError(f"unknown fault {kind!r}; allowed: pcie-link BDF SPEED WIDTH, peermem-unregistered")
    if not config_path(root, bdf).is_file():
        raise ValueError(f"no PCI device {bdf} on this node")
    path = folder / "pcie-link.json"
    links = json.loads(path.read_text()) if path.is_file() else {}
    links[bdf] = {"speed": speed, "width": int(width)}
    _train(root, bdf, _code(speed), int(width))
    tmp = path.with_name(f".pcie-link.{os.getpid()}")
    tmp.write_text(json.dumps(links, sort_keys=True) + "\n")
    tmp.replace(path)
