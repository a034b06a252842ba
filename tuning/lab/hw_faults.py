"""Burn-in faults of the lab (issue 10): a flapping port, a NIC at reduced PCIe width, a GPU XID and a
lossy path (``fabtune lab inject TARGET KIND [VALUE]``). Standard library only (the perftest and
``nvidia-smi`` stand-ins import it). The slow link is ``degrade`` (:mod:`tuning.lab.inject`).

Kinds, their targets and what hardware shows (every one kept in ``fabric.json`` ``injections`` as
``{"target", "kind"[, "value"]}``, one per target and kind, ``clear`` on the target removes them):

``NODE:DEV flap`` / ``SWITCH:PORT flap``
    The link goes down and up during every bandwidth test crossing it: the NIC at that cable end
    (the port's own NIC for a ``SWITCH:PORT`` of a node cable) counts, per test, sysfs
    ``carrier_down_count`` +1, ``carrier_up_count`` +1, ``carrier_changes`` +2 (kernel
    ``Documentation/ABI/testing/sysfs-class-net``) and the mlx5 ``ethtool -S`` counter
    ``link_down_events_phy`` +1 (Linux ``Documentation/networking/device_drivers/ethernet/mellanox/
    mlx5/counters.rst``: "the number of times where the link operative state changed to down").
    The test loses the time the link is down: bandwidth x 0.6, latency +3 us (``PENALTIES["flap"]``).
``NODE:DEV pcie-width W``
    The NIC's PCIe link trained at xW (W in 1, 2, 4, 8, 16) at its full speed: ``lspci -vv`` LnkSta
    ``Width xW (downgraded)`` and sysfs ``current_link_width`` W of the NIC and the switch port
    above it (:func:`tuning.lab.hw_pci.inject`, kept across reboots in ``hw/lab-faults``). The
    fabric model caps the NIC's bandwidth at :func:`pcie_gbps` of that link (x8 Gen5: 228.8 Gb/s).
``NODE gpu-xid N`` (GPU 0) / ``NODE:gpuI gpu-xid N``
    The NVIDIA driver writes to the kernel log (read by ``dmesg``, root only under
    ``kernel.dmesg_restrict=1``) ``NVRM: Xid (PCI:0000:1b:00): N, pid='<unknown>', name=<unknown>,
    <text>`` (NVIDIA "XID Errors" catalog, docs.nvidia.com/deploy/xid-errors; the PCI tag is
    domain:bus:device, the pid/name of a fault no process owns as ``<unknown>``); for 79 (GPU has fallen off
    the bus) also ``NVRM: GPU 0000:1b:00.0: GPU has fallen off the bus.`` and ``nvidia-smi``
    can no longer reach the GPU (``Unable to determine the device handle for GPU0: 0000:1B:00.0:
    Unknown Error`` on stderr, exit 15: nvidia-smi(1) RETURN VALUE "15 ... GPU has fallen off the
    bus or has otherwise become inaccessible"). Volatile (``run/lab/``): a ``lab reboot`` clears it.
``NODE:DEV lossy`` / ``SWITCH:PORT lossy``
    Frames are dropped on that cable: every bandwidth test crossing it loses d = max(1, 2 % of its
    packets): the receiving NIC counts ``rx_discards_phy`` and ``rx_prio{P}_discards`` +d,
    ``out_of_sequence`` +3d, ``packet_seq_err`` +max(1, d/2); the sender ``local_ack_timeout_err``
    +max(1, d/400) (as the model's lossy incast); bandwidth x 0.7 (``PENALTIES["lossy"]``) unless
    the path is lossy already.
``NODE slow-tools SECONDS`` (issue 18)
    Every vendor-tool stand-in run on the node (``tee`` too; not ``sudo``) waits SECONDS (a decimal,
    0.001..600, at most 3 decimals) before it acts, then acts as always: a node whose tools are slow
    (a loaded host, a slow vendor tool), so that a test can stop an apply or restore script at a
    known point of its progress. Only latency: nothing is refused or changed that a real node would
    not. Kept in the node's ``hw/lab-faults/slow-tools`` (:data:`tuning.lab.tools.SLOW_TOOLS`, read by
    each stand-in), so a reboot keeps it; ``clear`` on the node removes it.
``NODE port-held PORT`` (issue 19)
    Another process of the node holds TCP PORT (1..65535; a leftover server, a site service): a
    perftest server started there cannot listen (perftest's ``Couldn't listen to port PORT``, exit
    1), as on a real node, where perftest binds every address. A failure of the verification
    harness, not of the fabric. Kept in the node's ``hw/lab-faults/port-held`` (:data:`tuning.lab.tools.PORT_HELD`,
    read by the perftest stand-in); ``clear`` on the node removes it.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from pathlib import Path

from tuning.lab.tools import MAX_SLOW_TOOLS_S, PORT_HELD, SLOW_TOOLS

KINDS = ("flap", "pcie-width", "gpu-xid", "lossy", "slow-tools", "port-held")
#: kind -> what its VALUE is (the kinds here that take one)
VALUE_KINDS = {"pcie-width": "WIDTH", "gpu-xid": "XID", "slow-tools": "SECONDS", "port-held": "PORT"}
#: the kinds that target a whole node (``NODE``), not a NIC or a switch port
NODE_KINDS = ("slow-tools", "port-held")
PCIE_WIDTHS = (1, 2, 4, 8, 16)
#: NVIDIA XID catalog texts of the codes a burn-in meets most (docs.nvidia.com/deploy/xid-errors)
XID_TEXT = {13: "Graphics Engine Exception", 31: "MMU Fault", 48: "DBE (Double Bit Error) ECC Error",
            63: "ECC page retirement or row remapping recording event",
            64: "ECC page retirement or row remapper recording failure", 74: "NVLINK Error",
            79: "GPU has fallen off the bus.", 92: "High single-bit ECC error rate",
            94: "Contained ECC error", 95: "Uncontained ECC error"}
KMSG = "run/lab/kmsg"
GPU_FAULTS = "run/lab/gpu-faults.json"
#: PCIe data rate per lane (GT/s) -> line-code efficiency (8b/10b to Gen2, 128b/130b from Gen3)
_CODING = {2.5: 0.8, 5.0: 0.8, 8.0: 128 / 130, 16.0: 128 / 130, 32.0: 128 / 130, 64.0: 242 / 256}
#: TLP efficiency at MaxPayload 256 (the lab NICs'): 256 / (256 + 24 header/framing + 2 DLLP share)
TLP_EFFICIENCY = 256 / 282


def pcie_gbps(speed_gts: float, width: int) -> float:
    """Usable PCIe bandwidth of a link, Gb/s: ``speed x width x coding x TLP efficiency``
    (32 GT/s x8: 228.8; x16: 457.6, above a 400 Gb/s port). PCI Express Base Specification 5.0
    (128b/130b), MaxPayload 256 bytes per TLP."""
    return speed_gts * width * _CODING.get(speed_gts, 128 / 130) * TLP_EFFICIENCY


def read_pcie(root: Path, bdf: str) -> tuple[float, int] | None:
    """A device's negotiated link from sysfs (``current_link_speed`` ``32.0 GT/s PCIe``,
    ``current_link_width`` ``16``); None when unreadable."""
    d = root / "sys/bus/pci/devices" / bdf
    try:
        speed = float((d / "current_link_speed").read_text().split()[0])
        return speed, int((d / "current_link_width").read_text().strip())
    except (OSError, ValueError, IndexError):
        return None


def check(kind: str, target: str, value: str | None, nics: set[str], ports: set[str], nodes: set[str]) -> str:
    """Validate one injection; returns the normalised value ('' for none).

    Raises:
        ValueError: one line naming the target or value and what is allowed.
    """
    node, _, dev = target.partition(":")
    if kind == "port-held":
        if target not in nodes:
            raise ValueError(f"port-held targets a node ({', '.join(sorted(nodes))}), not {target!r}")
        if value is None or not re.fullmatch(r"[0-9]{1,5}", value) or not 1 <= int(value) <= 65535:
            raise ValueError(f"port-held takes a TCP PORT 1..65535, not {value!r}")
        return str(int(value))
    if kind == "slow-tools":
        if target not in nodes:
            raise ValueError(f"slow-tools targets a node ({', '.join(sorted(nodes))}), not {target!r}")
        if (value is None or not re.fullmatch(r"[0-9]{1,3}(\.[0-9]{1,3})?", value)
                or not 0 < float(value) <= MAX_SLOW_TOOLS_S):
            raise ValueError(f"slow-tools takes SECONDS 0.001..{MAX_SLOW_TOOLS_S} (at most 3 decimals), not {value!r}")
        return f"{float(value):g}"
    if kind == "gpu-xid":
        if node not in nodes or (dev and not (dev.startswith("gpu") and dev[3:].isdigit() and int(dev[3:]) < 8)):
            raise ValueError(f"gpu-xid targets a node or NODE:gpu0..gpu7, not {target!r}")
        if value is None or not value.isdigit() or not 1 <= int(value) <= 999:
            raise ValueError(f"gpu-xid takes an XID code 1..999, not {value!r}")
        return str(int(value))
    if kind == "pcie-width":
        if target not in nics:
            raise ValueError(f"pcie-width targets a node NIC (NODE:mlx5_N), not {target!r}")
        if value is None or not value.isdigit() or int(value) not in PCIE_WIDTHS:
            raise ValueError(f"pcie-width takes a width {', '.join(map(str, PCIE_WIDTHS))}, not {value!r}")
        return str(int(value))
    if target not in nics | ports:
        raise ValueError(f"{kind} targets a NIC or a switch port, not {target!r}")
    if value is not None:
        raise ValueError(f"{kind} takes no value")
    return ""


def apply(sysroot: Path, nic_bdf: str | None, kind: str, target: str, value: str, gpu_bdfs: list[str]) -> None:
    """Make a node's files show an injection now (``pcie-width``, ``gpu-xid``, ``slow-tools``,
    ``port-held``); the
    others act at test time (:func:`traffic_counters`) and in the model."""
    from tuning.lab import hw_pci

    if kind == "pcie-width" and nic_bdf:
        hw_pci.inject(sysroot, "pcie-link", nic_bdf, hw_pci.SYSFS_SPEEDS[hw_pci.LINK_SPEED], int(value))
    elif kind in ("slow-tools", "port-held"):
        path = sysroot / (SLOW_TOOLS if kind == "slow-tools" else PORT_HELD)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(value + "\n")
        tmp.chmod(0o644)  # every caller's stand-ins read it: the node user's and root's
        tmp.replace(path)  # a stand-in reads the old value or the new one, never half a number
    elif kind == "gpu-xid":
        dev = target.partition(":")[2]
        gpu = gpu_bdfs[int(dev[3:]) if dev else 0]
        _xid(sysroot, gpu, int(value))


def clear(sysroot: Path, nic_bdf: str | None, kinds: set[str]) -> None:
    """Undo the node-file part of ``kinds`` on one target: the PCIe link trains at full width again,
    a lost GPU answers again (the kernel log keeps its lines, as a kernel does until it reboots), the
    stand-ins stop waiting."""
    from tuning.lab import hw_pci

    if "pcie-width" in kinds and nic_bdf:
        path = sysroot / hw_pci.FAULTS / "pcie-link.json"
        links = json.loads(path.read_text()) if path.is_file() else {}
        links.pop(nic_bdf, None)
        path.write_text(json.dumps(links, sort_keys=True) + "\n")
        hw_pci._train(sysroot, nic_bdf, hw_pci.LINK_SPEED, hw_pci.LINK_WIDTH)
    if "gpu-xid" in kinds:
        (sysroot / GPU_FAULTS).unlink(missing_ok=True)
    if "slow-tools" in kinds:
        (sysroot / SLOW_TOOLS).unlink(missing_ok=True)
    if "port-held" in kinds:
        (sysroot / PORT_HELD).unlink(missing_ok=True)


def _xid(sysroot: Path, gpu_bdf: str, code: int) -> None:
    """Append the driver's XID line(s) to the node's kernel log and mark the GPU (lost for 79)."""
    kmsg = sysroot / KMSG
    kmsg.parent.mkdir(parents=True, exist_ok=True)
    since = kmsg.parent.stat().st_mtime if kmsg.parent.exists() else time.time()
    stamp = f"[{max(1.0, time.time() - since) + 4:12.6f}]"
    tag = gpu_bdf.rsplit(".", 1)[0]
    text = XID_TEXT.get(code, "Unknown Error")
    lines = [f"{stamp} NVRM: Xid (PCI:{tag}): {code}, pid='<unknown>', name=<unknown>, {text}"]
    if code == 79:
        lines.append(f"{stamp} NVRM: GPU {gpu_bdf}: GPU has fallen off the bus.")
    with open(kmsg, "a") as f:
        f.write("\n".join(lines) + "\n")
    faults = read_gpu_faults(sysroot)
    entry = faults.setdefault(gpu_bdf, {"xid": [], "lost": False})
    entry["xid"].append(code)
    entry["lost"] = entry["lost"] or code == 79
    tmp = sysroot / f"{GPU_FAULTS}.{os.getpid()}"
    tmp.write_text(json.dumps(faults, sort_keys=True) + "\n")
    tmp.replace(sysroot / GPU_FAULTS)


def read_gpu_faults(sysroot: Path) -> dict[str, dict]:
    """``run/lab/gpu-faults.json``: ``{gpu_bdf: {"xid": [codes], "lost": bool}}`` ({} when none)."""
    try:
        return json.loads((sysroot / GPU_FAULTS).read_text())
    except (OSError, ValueError):
        return {}


def on_path(injections: list[dict], path: list[str], kind: str) -> list[str]:
    """The targets of ``kind`` injections that lie on a model path (NIC or switch-port hops)."""
    return [i["target"] for i in injections if i.get("kind") == kind and i.get("target") in path]


def traffic_counters(injections: list[dict], path: list[str], cable_nic: dict[str, str], client: str,
                     server: str, data_to_server: bool, nbytes: int, active_mtu: int,
                     prio: int) -> tuple[dict[str, int], dict[str, int]]:
    """Counter increments (client's NIC, server's NIC) one bandwidth test adds through the ``flap``
    and ``lossy`` injections on its ``path`` (module docstring).

    Args:
        cable_nic: switch port (``leaf01:swp5``) -> the NIC cabled to it (``node02:mlx5_2``).
        client / server: the ends, ``node01:mlx5_0``.  data_to_server: write (True) or read test.
        nbytes: bytes moved.  active_mtu: RoCE MTU (packets = bytes / MTU).  prio: the receiver's
            priority of the traffic.
    """
    mine: dict[str, int] = {}
    theirs: dict[str, int] = {}

    def add(end: str, name: str, v: int) -> None:
        into = mine if end == client else theirs if end == server else None
        if into is not None:
            into[name] = into.get(name, 0) + v

    for t in on_path(injections, path, "flap"):
        nic = t if t in (client, server) else cable_nic.get(t)
        for name, v in (("carrier_down_count", 1), ("carrier_up_count", 1), ("carrier_changes", 2),
                        ("link_down_events_phy", 1)):
            add(nic or "", name, v)
    if on_path(injections, path, "lossy"):
        rx, tx = (server, client) if data_to_server else (client, server)
        d = max(1, int(math.ceil(nbytes / max(1, active_mtu)) * 0.02))
        for name, v in (("rx_discards_phy", d), (f"rx_prio{prio}_discards", d), ("out_of_sequence", 3 * d),
                        ("packet_seq_err", max(1, d // 2))):
            add(rx, name, v)
        add(tx, "local_ack_timeout_err", max(1, d // 400))
    return mine, theirs
