"""The lab's NIC flash: each ConnectX-7's non-volatile configuration (mlxconfig parameters with their
Default, Current and Next Boot values) and its firmware (version in flash, version running), kept in
``<sysroot>/hw/nic/<bdf>.json`` (pseudo-hardware: ``fabtune lab reboot`` keeps ``hw/``).

- :func:`build` (an ``EXTRA_BUILDERS`` entry) writes a fresh NIC's file when the sysroot has none, and the
  running version into sysfs ``sys/class/infiniband/<dev>/fw_ver`` (kernel ABI: the running firmware).
- :func:`power_on` (a ``POWER_ON_HOOKS`` entry) is what the NIC does at power-on: every Next Boot value
  becomes Current and the flashed firmware starts running.
- :func:`reset` is what ``mlxfwreset`` makes of it (the same, except for the parameters a test put
  in ``faults.needs_power_cycle``: those stay inactive until a power cycle, as some NV parameters do),
  and, since its reset level 3 is "Driver restart and PCI reset", the NIC's live state is lost as the
  mlx5 driver re-probes it: MTU 1500, IRQ affinity as at boot, DCB (trust, PFC, DSCP map) and ECN
  enables at their defaults (:func:`driver_restart`).

File shape (values as the firmware holds them: integers; :data:`PARAMS` says how mlxconfig prints them)::

    {"bdf": "0000:0c:00.0", "device_type": "ConnectX7", "name": "MCX75310AAS-NEA_Ax",
     "description": "...", "psid": "MT_0000000834", "rdma_device": "mlx5_0", "mac": "0c42a1000001",
     "fw": {"flash": "28.39.2048", "running": "28.39.2048"},
     "params": {"SRIOV_EN": {"default": 0, "current": 0, "next_boot": 0}, ...},
     "faults": {"needs_power_cycle": []}, "resets": 0}

The parameter set is the one of the shared/cases ``mlxconfig -e q`` sample (a ConnectX-5: values
illustrative) plus the issue's PCI parameters (ATS_ENABLED, MAX_ACC_OUT_READ), as single-port cards
(``_P1`` only; ``_P2`` names are known to mlxconfig's database but not supported by the card).
The array parameter of the sample (``ESWITCH_HAIRPIN_DESCRIPTORS``) is not modelled. On a real
ConnectX-7, MAX_ACC_OUT_READ is hidden until ADVANCED_PCI_SETTINGS is active; the lab always shows it.
Standard library only (the stand-ins import it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

#: how the firmware encodes each parameter: ``("enum", {name: value})`` or ``("uint", bits, max)``;
#: dict order is the order ``mlxconfig q`` prints them
PARAMS: dict[str, tuple] = {
    "MEMIC_BAR_SIZE": ("uint", 4, 15),
    "MEMIC_SIZE_LIMIT": ("enum", {"DISABLED": 0, "_256KB": 1, "_512KB": 2, "_1MB": 3}),
    "HOST_CHAINING_MODE": ("enum", {"DISABLED": 0, "BASIC": 1, "ADVANCED": 2}),
    "FLEX_PARSER_PROFILE_ENABLE": ("uint", 4, 15),
    "ROCE_NEXT_PROTOCOL": ("uint", 8, 255),
    "NUM_OF_VFS": ("uint", 16, 127),  # firmware maximum of the card (checked at "Applying...")
    "SRIOV_EN": ("enum", {"False": 0, "True": 1}),
    "PF_LOG_BAR_SIZE": ("uint", 5, 31),
    "LINK_TYPE_P1": ("enum", {"IB": 1, "ETH": 2}),
    "ROCE_CC_PRIO_MASK_P1": ("uint", 8, 255),
    "CNP_DSCP_P1": ("uint", 6, 63),
    "CNP_802P_PRIO_P1": ("uint", 3, 7),
    "PHY_FEC_OVERRIDE_P1": ("enum", {"DEVICE_DEFAULT": 0, "NO_FEC": 1, "FIRECODE_FEC": 2, "RS_FEC": 3}),
    "PF_NUM_PF_MSIX": ("uint", 12, 4095),
    "ROCE_CONTROL": ("enum", {"DEVICE_DEFAULT": 0, "ROCE_DISABLE": 1, "ROCE_ENABLE": 2}),
    "PCI_WR_ORDERING": ("enum", {"per_mkey": 0, "force_relax": 1}),
    "ATS_ENABLED": ("enum", {"False": 0, "True": 1}),
    "ADVANCED_PCI_SETTINGS": ("enum", {"False": 0, "True": 1}),
    "MAX_ACC_OUT_READ": ("uint", 8, 255),
    "SAFE_MODE_THRESHOLD": ("uint", 8, 255),
    "SAFE_MODE_ENABLE": ("enum", {"False": 0, "True": 1}),
}
#: (default, value at delivery) of each parameter: LINK_TYPE_P1's default is IB (an NDR card), the
#: lab's NICs were set to Ethernet (RoCE) and power-cycled before delivery
INITIAL: dict[str, tuple[int, int]] = {
    "MEMIC_BAR_SIZE": (0, 0), "MEMIC_SIZE_LIMIT": (1, 1), "HOST_CHAINING_MODE": (0, 0),
    "FLEX_PARSER_PROFILE_ENABLE": (0, 0), "ROCE_NEXT_PROTOCOL": (254, 254), "NUM_OF_VFS": (0, 0),
    "SRIOV_EN": (0, 0), "PF_LOG_BAR_SIZE": (5, 5), "LINK_TYPE_P1": (1, 2), "ROCE_CC_PRIO_MASK_P1": (255, 255),
    "CNP_DSCP_P1": (48, 48), "CNP_802P_PRIO_P1": (6, 6), "PHY_FEC_OVERRIDE_P1": (0, 0), "PF_NUM_PF_MSIX": (63, 63),
    "ROCE_CONTROL": (2, 2), "PCI_WR_ORDERING": (0, 0), "ATS_ENABLED": (0, 0), "ADVANCED_PCI_SETTINGS": (0, 0),
    "MAX_ACC_OUT_READ": (0, 0), "SAFE_MODE_THRESHOLD": (10, 10), "SAFE_MODE_ENABLE": (1, 1),
}
#: parameters mlxconfig's database knows that a single-port card does not support
UNSUPPORTED = tuple(p.replace("_P1", "_P2") for p in PARAMS if p.endswith("_P1"))

DEVICE_TYPE = "ConnectX7"
PART = "MCX75310AAS-NEA_Ax"
DESCRIPTION = ("NVIDIA ConnectX-7 HHHL Adapter Card; 400GbE / NDR IB (default mode); Single-port OSFP; "
               "PCIe 5.0 x16; Crypto Disabled; Secure Boot Enabled")
PSID = "MT_0000000834"
FW_VERSION = "28.39.2048"  # as the shared/cases ibv_devinfo sample's ConnectX-7 runs


def nic_dir(sysroot: Path) -> Path:
    """``<sysroot>/hw/nic``: one JSON file per NIC."""
    return sysroot / "hw" / "nic"


def nic_path(sysroot: Path, bdf: str) -> Path:
    """``<sysroot>/hw/nic/<bdf>.json``."""
    return nic_dir(sysroot) / f"{bdf}.json"


def load(sysroot: Path, bdf: str) -> dict:
    """A NIC's flash state. Raises FileNotFoundError for a device the node does not have."""
    return json.loads(nic_path(sysroot, bdf).read_text())


def save(sysroot: Path, nic: dict) -> None:
    """Write a NIC's flash state atomically (stable bytes: sorted keys, one space indent), 0600: the
    flash is the device's, which only root reaches (through the firmware tools run with sudo)."""
    path = nic_path(sysroot, nic["bdf"])
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(nic, indent=1, sort_keys=True) + "\n")
    os.chmod(tmp, 0o600)
    tmp.replace(path)


class locked:  # noqa: N801 - a context manager, like open()
    """Exclusive ``flock`` of ``hw/nic`` around a read-modify-write (mlxconfig sets run in parallel
    with queries and resets). No file is created: the folder itself is locked."""

    def __init__(self, sysroot: Path):
        self._dir = nic_dir(sysroot)

    def __enter__(self) -> "locked":
        import fcntl

        self._fd = os.open(self._dir, os.O_RDONLY)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)


def bdfs(sysroot: Path) -> list[str]:
    """The PCI addresses of the node's NICs, in address order."""
    return sorted(p.name[:-5] for p in nic_dir(sysroot).glob("*.json"))


def show(name: str, value: int) -> str:
    """A value as mlxconfig prints it: ``True(1)``, ``ETH(2)``, ``16`` (mstflint ``printValue``)."""
    kind = PARAMS[name]
    if kind[0] == "enum":
        names = [k for k, v in kind[1].items() if v == value]
        return f"{names[0]}({value})" if names else str(value)
    return str(value)


def fresh(bdf: str, rdma_device: str, mac: str) -> dict:
    """The flash state of a NIC as delivered (see :data:`INITIAL`)."""
    return {"bdf": bdf, "device_type": DEVICE_TYPE, "name": PART, "description": DESCRIPTION, "psid": PSID,
            "rdma_device": rdma_device, "mac": mac.replace(":", ""),
            "fw": {"flash": FW_VERSION, "running": FW_VERSION},
            "params": {p: {"default": d, "current": v, "next_boot": v} for p, (d, v) in INITIAL.items()},
            "faults": {"needs_power_cycle": []}, "resets": 0}


def _write_fw_ver(sysroot: Path, nic: dict) -> None:
    """sysfs ``fw_ver`` of the RDMA device: the version RUNNING (``28.39.2048``). On a real host
    ``/sys/class/infiniband/<dev>`` and ``/sys/bus/pci/devices/<bdf>/infiniband/<dev>`` are one
    folder; the lab builds them as two, so the file is written in both."""
    for folder in (sysroot / "sys/class/infiniband" / nic["rdma_device"],
                   sysroot / "sys/bus/pci/devices" / nic["bdf"] / "infiniband" / nic["rdma_device"]):
        if folder.is_dir():
            (folder / "fw_ver").write_text(nic["fw"]["running"] + "\n")


def activate(nic: dict, *, power_cycle: bool) -> None:
    """Next Boot becomes Current and the flashed firmware runs (in place). Without ``power_cycle``
    (mlxfwreset), parameters listed in ``faults.needs_power_cycle`` stay as they are."""
    keep = set() if power_cycle else set(nic.get("faults", {}).get("needs_power_cycle", []))
    for name, p in nic["params"].items():
        if name not in keep:
            p["current"] = p["next_boot"]
    nic["fw"]["running"] = nic["fw"]["flash"]


def build(root: Path, node) -> None:
    """EXTRA_BUILDERS entry: ``hw/nic/<bdf>.json`` for each NIC that has none, and sysfs ``fw_ver``."""
    from tuning.lab.sysroot import nic_mac

    nic_dir(root).mkdir(parents=True, exist_ok=True)
    for n in node.nics:
        path = nic_path(root, n.bdf)
        nic = json.loads(path.read_text()) if path.exists() else fresh(n.bdf, n.rdma_device, nic_mac(n))
        if not path.exists():
            save(root, nic)
        _write_fw_ver(root, nic)


def power_on(sysroot: Path, node) -> None:
    """POWER_ON_HOOKS entry: every NIC loads its Next Boot configuration and its flashed firmware."""
    for bdf in bdfs(sysroot):
        nic = load(sysroot, bdf)
        activate(nic, power_cycle=True)
        save(sysroot, nic)
        _write_fw_ver(sysroot, nic)


def reset(sysroot: Path, bdf: str) -> dict:
    """What ``mlxfwreset -d BDF reset`` does to the NIC (under :class:`locked`); returns the new state."""
    with locked(sysroot):
        nic = load(sysroot, bdf)
        activate(nic, power_cycle=False)
        nic["resets"] = nic.get("resets", 0) + 1
        save(sysroot, nic)
        _write_fw_ver(sysroot, nic)
    driver_restart(sysroot, bdf)
    return nic


def driver_restart(sysroot: Path, bdf: str) -> None:
    """The NIC's live (volatile) state as the mlx5 driver leaves it after re-probing the device: netdev
    MTU 1500, its IRQs' affinity as at boot, DCB state and ``qos/trust`` at the defaults, ECN per-priority
    enables off (what the sysroot builder lays out for a fresh node)."""
    from tuning.lab.sysroot import (INITIAL_IRQ_CPULIST, cpumask_hex, dcb_lock, dcb_path, default_dcb,
                                    parse_cpulist, write_json)

    pci = sysroot / "sys/bus/pci/devices" / bdf
    n = max(parse_cpulist((sysroot / "sys/devices/system/cpu/online").read_text().strip())) + 1
    for irq in sorted((pci / "msi_irqs").iterdir()) if (pci / "msi_irqs").is_dir() else []:
        folder = sysroot / "proc/irq" / irq.name
        if folder.is_dir():
            (folder / "smp_affinity_list").write_text(INITIAL_IRQ_CPULIST + "\n")
            (folder / "smp_affinity").write_text(cpumask_hex(parse_cpulist(INITIAL_IRQ_CPULIST), n) + "\n")
    for netdev in sorted(p.name for p in (pci / "net").iterdir()) if (pci / "net").is_dir() else []:
        net = sysroot / "sys/class/net" / netdev
        (net / "mtu").write_text("1500\n")
        if (net / "qos/trust").exists():
            (net / "qos/trust").write_text("pcp\n")
        for enable in sorted(net.glob("ecn/roce_*/enable/*")):
            enable.write_text("0\n")
        if dcb_path(sysroot, netdev).exists():
            with dcb_lock(sysroot):
                write_json(dcb_path(sysroot, netdev), default_dcb())
