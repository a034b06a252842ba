"""Burn-in collection: one round trip per node reads every NIC's counters, link and PCIe state and
the GPUs' health; :func:`deltas` turns two reads into a round's ``nics`` / ``gpus`` (docs/burnin.md).

What one node's script reads (through the node's become: ``dmesg`` needs root under
``kernel.dmesg_restrict=1``; the rest reads as root what it could read anyway), per NIC:

- ``ethtool -S IF`` (mlx5 ``counters.rst`` names: ``rx_prioN_pause``, ``rx_discards_phy``,
  ``link_down_events_phy``, ...; parsed by :func:`tuning.parsers.nic.parse_ethtool_s`);
- the RDMA port counters, ``grep "" *`` in ``/sys/class/infiniband/DEV/ports/1/hw_counters``
  (``name:value``: ``np_cnp_sent``, ``rp_cnp_handled``, ``out_of_sequence``, ``out_of_buffer``...,
  the source ``rdma statistic show`` itself reads; kernel ``Documentation/ABI/stable/sysfs-class-infiniband``);
- ``ethtool IF`` (``Speed: 400000Mb/s``, the highest ``Supported link modes`` entry as the maximum);
- sysfs ``/sys/class/net/IF/carrier_down_count`` (kernel ``sysfs-class-net``);
- the NIC's PCI device ``current_link_width``, ``max_link_width``, ``current_link_speed``,
  ``max_link_speed`` (kernel ``sysfs-bus-pci``: ``32.0 GT/s PCIe``);

and per node: ``nvidia-smi --query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total,
clocks_event_reasons.active --format=csv,noheader,nounits`` (nvidia-smi ``--help-query-gpu``),
``nvidia-smi --query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure
--format=csv,noheader`` (``--help-query-remapped-rows``), where nvidia-smi is installed, and the
kernel log's ``NVRM: Xid (PCI:DDDD:BB:DD): N, ...`` lines (NVIDIA "XID Errors" catalog). A GPU the
driver lost prints ``Unable to determine the device handle for GPU<i>: <BDF>: ...`` instead of a row.
A node whose inventory gives ``ib_ports`` (an InfiniBand node) also has every HCA port read in the same
round trip (:func:`tuning.node.ib_ports.ports_command`: sysfs and ``ibv_devinfo``) and judged port by
port (:func:`ib_round`), as ``fabtune node check`` judges them on the node.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tuning.errors import ParseError, TuningError
from tuning.node import ib_ports
from tuning.parsers.nic import parse_ethtool_s
from tuning.transport.base import Host, q, sysroot_path

MARK = "@@fabtune-burnin"
GPU_QUERY = "index,pci.bus_id,ecc.errors.uncorrected.volatile.total,clocks_event_reasons.active"
REMAP_QUERY = "gpu_bus_id,remapped_rows.pending,remapped_rows.failure"
#: NVML ``nvmlClocksEventReasons`` bits (nvml.h) -> name; ``gpu_idle`` (0x1) is no throttle and is left out
THROTTLE_BITS = {0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
                 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
                 0x100: "display_clock_setting"}
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\): (\d+),", re.ASCII)
_LOST = re.compile(r"Unable to determine the device handle for GPU ?(\d*):? ?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
                   r"[0-9A-Fa-f]{2}\.\d)", re.ASCII)
_MODE = re.compile(r"([0-9]+)base\w+/Full", re.ASCII)
#: an ASCII decimal (``str.isdigit`` also accepts '²' and other non-ASCII digits ``int`` refuses)
_UINT = re.compile(r"[0-9]+", re.ASCII)
#: a PCI bus id as nvidia-smi (``00000000:1B:00.0``) or sysfs (``0000:1b:00.0``) prints it
_BUS_ID = re.compile(r"([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])", re.ASCII)


def _uint(text: str) -> int | None:
    """``"12"`` -> 12; anything else (``[N/A]``, ``-1``, ``²``, empty) -> None."""
    text = (text or "").strip()
    return int(text) if _UINT.fullmatch(text) else None


def node_script(dev: Any) -> str:
    """The one shell command that reads a node (module docstring); sections start with
    ``@@fabtune-burnin KIND ARG``. Inventory strings pass the grammar at load and are quoted here.

    Args:
        dev: an inventory node :class:`tuning.inventory.Device` (``spec.nics``: netdev, rdma_device;
            ``connection.sysroot``).
    """
    root = dev.connection.sysroot
    parts = []
    for nic in dev.spec.nics:
        net = sysroot_path(root, f"/sys/class/net/{nic.netdev}")
        hw = sysroot_path(root, f"/sys/class/infiniband/{nic.rdma_device}/ports/1/hw_counters")
        pci = f"{net}/device"
        parts += [f"echo {MARK} ethtool-S {q(nic.rdma_device)}", f"ethtool -S {q(nic.netdev)} 2>&1",
                  f"echo {MARK} hw {q(nic.rdma_device)}", f"(cd {q(hw)} 2>/dev/null && grep -H '' * 2>/dev/null)",
                  f"echo {MARK} link {q(nic.rdma_device)}", f"ethtool {q(nic.netdev)} 2>&1",
                  f"echo carrier_down_count=$(cat {q(net + '/carrier_down_count')} 2>/dev/null)",
                  f"echo {MARK} pcie {q(nic.rdma_device)}",
                  *(f"echo {f}=$(cat {q(pci + '/' + f)} 2>/dev/null)" for f in
                    ("current_link_width", "max_link_width", "current_link_speed", "max_link_speed"))]
    parts += ["if command -v nvidia-smi >/dev/null 2>&1; then "
              f"echo {MARK} gpu -; nvidia-smi --query-gpu={GPU_QUERY} --format=csv,noheader,nounits 2>&1; "
              f"echo {MARK} remap -; nvidia-smi --query-remapped-rows={REMAP_QUERY} --format=csv,noheader 2>&1; fi",
              f"echo {MARK} xid -", "dmesg 2>&1 | grep -F 'NVRM: Xid' || true"]
    if getattr(dev.spec, "ib_ports", None) is not None:  # an InfiniBand node: every HCA port, in a subshell
        parts += [f"echo {MARK} ib -", f"( {ib_ports.ports_command(root)} )"]  # (its `exit 0` ends only it)
    return "; ".join(parts)


def ib_round(node: str, text: str | None, intent: Any) -> dict[str, Any]:
    """One round's reading of a node's InfiniBand ports (:func:`node_script`'s ``ib`` section; None: the
    output had none), judged port by port against its ``ib_ports`` intent (:func:`tuning.node.ib_ports.judge`):
    ``{"ports": n, "findings": [{"code", "message", "evidence"}], "views": {"mlx5_0/1": {"guid": "0x0c42...",
    "state": "4: ACTIVE", ...}}}``; ``views`` holds what the host reads of each InfiniBand port of the intent's
    HCAs (:meth:`tuning.node.ib_ports.IbPort.view`), joined with the SM's read by :mod:`tuning.burnin.ib_views`.

    Raises:
        IbReadError: no section, or a port the read could not give (a harness error: the node not read).
    """
    if text is None:
        raise ib_ports.IbReadError("the node's read printed no InfiniBand section (cut short?)", phase="collect")
    hcas = ib_ports.parse_ports(text)
    found = ib_ports.judge(node, hcas, intent)
    views = {f"{name}/{p.port}": p.view() for name in intent.hcas for p in hcas.get(name, [])
             if p.raw.get("link_layer") == "InfiniBand"}
    return {"ports": sum(len(p) for p in hcas.values()),
            "findings": [{"code": f.code, "message": f.message, "evidence": f.evidence} for f in found], "views": views}


def _sections(text: str) -> list[tuple[str, str, list[str]]]:
    out: list[tuple[str, str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith(MARK + " "):
            kind, _, arg = line[len(MARK) + 1:].partition(" ")
            out.append((kind, arg, []))
        elif out:
            out[-1][2].append(line)
    return out


def _kv(lines: list[str]) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (ln.partition("=") for ln in lines) if k.strip()}


def _gts(text: str) -> float | None:
    m = re.match(r"([0-9]+(?:\.[0-9]+)?) GT/s", text or "", re.ASCII)
    return float(m.group(1)) if m else None


def _link(lines: list[str]) -> dict[str, Any]:
    """``ethtool IF`` + carrier count -> ``{"speed_mbps", "max_speed_mbps", "carrier_down_count"}``."""
    text = "\n".join(lines)
    m = re.search(r"^\s*Speed: ([0-9]+)Mb/s", text, re.M | re.ASCII)
    modes = [int(x) for x in _MODE.findall(text.split("Advertised link modes:")[0])]
    down = _kv([ln for ln in lines if ln.startswith("carrier_down_count=")]).get("carrier_down_count", "")
    return {"speed_mbps": int(m.group(1)) if m else None, "max_speed_mbps": max(modes) if modes else None,
            "carrier_down_count": _uint(down)}


def _pcie(lines: list[str]) -> dict[str, Any]:
    kv = _kv(lines)
    width = {k: _uint(kv.get(k, "")) for k in ("current_link_width", "max_link_width")}
    return {"width": width["current_link_width"], "max_width": width["max_link_width"],
            "speed_gts": _gts(kv.get("current_link_speed", "")), "max_speed_gts": _gts(kv.get("max_link_speed", ""))}


def _throttle(mask: str) -> list[str]:
    if not re.fullmatch(r"(0x)?[0-9A-Fa-f]+", mask or "", re.ASCII):
        return []
    bits = int(mask, 16)
    return [name for bit, name in THROTTLE_BITS.items() if bits & bit]


def _gpus(gpu: list[str], remap: list[str]) -> list[dict]:
    """nvidia-smi rows (and lost-GPU lines) -> ``[{"index", "bdf", "ecc_uncorrected", ...}]``.

    Raises:
        ParseError: a row of four cells whose bus id is not one (``[N/A]``, ``00000000:ZZ:00.0``),
            or a remapped-rows row of three cells whose first is not a bus id.
    """
    out: dict[str, dict] = {}
    for no, line in enumerate(gpu, 1):
        lost = _LOST.search(line)
        if lost:
            bdf = sysfs_bdf(lost.group(2))
            out[bdf] = {"index": int(lost.group(1)) if lost.group(1) else None, "bdf": bdf, "lost": True,
                        "ecc_uncorrected": None, "throttle_reasons": [], "remapped_rows_pending": None,
                        "remapped_rows_failed": None}
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 4 or _uint(cells[0]) is None:
            continue
        bdf = sysfs_bdf(cells[1], f"nvidia-smi --query-gpu={GPU_QUERY}", no, line)
        out[bdf] = {"index": _uint(cells[0]), "bdf": bdf, "lost": False, "ecc_uncorrected": _uint(cells[2]),
                    "throttle_reasons": _throttle(cells[3]), "remapped_rows_pending": None, "remapped_rows_failed": None}
    for no, line in enumerate(remap, 1):
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 3:
            continue
        bdf = sysfs_bdf(cells[0], f"nvidia-smi --query-remapped-rows={REMAP_QUERY}", no, line)
        if bdf in out:
            g = out[bdf]
            g["remapped_rows_pending"], g["remapped_rows_failed"] = (int(c in ("Yes", "1")) for c in cells[1:])
    return sorted(out.values(), key=lambda g: (g["index"] is None, g["index"] or 0, g["bdf"]))


def sysfs_bdf(bus_id: str, tool: str = "nvidia-smi", line_no: int = 0, line: str = "") -> str:
    """``00000000:1B:00.0`` / ``0000:1b:00.0`` -> ``0000:1b:00.0`` (sysfs form).

    Raises:
        ParseError: ``bus_id`` is not a PCI bus id (names ``tool``, ``line_no`` and ``line``).
    """
    m = _BUS_ID.fullmatch(bus_id.strip())
    if not m:
        raise ParseError(tool, line_no, "a PCI bus id like 00000000:1B:00.0", line or bus_id)
    return f"{int(m.group(1), 16):04x}:{m.group(2).lower()}"


def parse_node(text: str) -> dict[str, Any]:
    """One node's script output -> a snapshot ``{"nics": {dev: {"counters": {name: int}, "link": {...},
    "pcie": {...}}}, "gpus": [...], "xid_lines": [str]}``.

    Raises:
        ParseError: an ``ethtool -S`` section that is neither counters nor one error line; an
            nvidia-smi row whose bus id is not one (:func:`sysfs_bdf`). Other malformed values
            (``[N/A]``, non-ASCII digits) read as unknown (None / left out), never as a number.
    """
    snap: dict[str, Any] = {"nics": {}, "gpus": [], "xid_lines": []}
    gpu: list[str] = []
    remap: list[str] = []
    for kind, arg, lines in _sections(text):
        nic = snap["nics"].setdefault(arg, {"counters": {}, "link": {}, "pcie": {}}) if kind in (
            "ethtool-S", "hw", "link", "pcie") else None
        if kind == "ethtool-S" and nic is not None and any("NIC statistics" in ln for ln in lines):
            nic["counters"].update(parse_ethtool_s("\n".join(lines)).counters)
        elif kind == "hw" and nic is not None:
            for ln in lines:
                name, _, value = ln.rpartition(":")
                if _uint(value) is not None and name:
                    nic["counters"][name.rsplit("/", 1)[-1]] = _uint(value)
        elif kind == "link" and nic is not None:
            nic["link"] = _link(lines)
        elif kind == "pcie" and nic is not None:
            nic["pcie"] = _pcie(lines)
        elif kind == "gpu":
            gpu = lines
        elif kind == "remap":
            remap = lines
        elif kind == "xid":
            snap["xid_lines"] = [ln for ln in lines if _XID.search(ln)]
        elif kind == "ib":
            snap["ib"] = "".join(f"{ln}\n" for ln in lines)
    snap["gpus"] = _gpus(gpu, remap)
    return snap


def read_nodes(devices: list[Any], hosts: dict[str, Host], timeout_s: float = 60.0,
               workers: int = 16) -> dict[str, dict | str]:
    """Read every node once, in parallel: node -> snapshot (:func:`parse_node`) or a one-line error
    (unreachable, the command failed, output not understood)."""
    def one(dev: Any) -> tuple[str, dict | str]:
        host = hosts.get(dev.name)
        if host is None:
            return dev.name, "unreachable: no SSH session"
        try:
            res = host.run(node_script(dev), timeout=timeout_s, privileged=True)
            return dev.name, parse_node(res.stdout)
        except TuningError as e:
            return dev.name, " ".join(str(e).split())[:300]

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(devices)))) as ex:
        return dict(ex.map(one, devices))


def deltas(prev: dict | None, now: dict, reported_xid: set[str]) -> tuple[dict, list[dict]]:
    """A round's ``nics`` and ``gpus`` of one node from its previous and current snapshots.

    Counters: ``now - prev`` per name; a counter below its previous value was reset (driver reload,
    ``ethtool`` reset, reboot): its delta is its new value and its name is listed in the NIC's
    ``counter_resets``. ``carrier_down_delta`` likewise. GPU ``xid``: the codes of kernel-log XID lines
    not reported earlier in this run (``reported_xid`` is updated), matched to the GPU by bus id.

    Returns:
        (``{dev: {"counters", "link", "pcie", "counter_resets"}}``, ``[gpu dict, ...]``).
    """
    nics: dict[str, dict] = {}
    for dev, cur in now["nics"].items():
        old = (prev or {}).get("nics", {}).get(dev, {})
        d, resets = {}, []
        for name, v in cur["counters"].items():
            p = old.get("counters", {}).get(name)
            if p is not None and v < p:
                resets.append(name)
            d[name] = v if p is None or v < p else v - p
        link = dict(cur["link"])
        c_now, c_old = link.pop("carrier_down_count", None), old.get("link", {}).get("carrier_down_count")
        link["carrier_down_delta"] = None if c_now is None else (c_now if c_old is None or c_now < c_old else c_now - c_old)
        nics[dev] = {"counters": d, "link": link, "pcie": cur["pcie"], "counter_resets": resets}
    xids: dict[str, list[int]] = {}
    for line in now["xid_lines"]:
        if line in reported_xid:
            continue
        reported_xid.add(line)
        m = _XID.search(line)
        if m:
            xids.setdefault(m.group(1).lower(), []).append(int(m.group(2)))
    gpus = []
    for g in now["gpus"]:
        gpus.append({**g, "xid": xids.pop(g["bdf"].rsplit(".", 1)[0], []), "pcie_replays_delta": None})
    for tag, codes in xids.items():  # an XID of a GPU nvidia-smi no longer lists at all
        gpus.append({"index": None, "bdf": f"{tag}.0", "lost": True, "xid": codes, "ecc_uncorrected": None,
                     "throttle_reasons": [], "remapped_rows_pending": None, "remapped_rows_failed": None,
                     "pcie_replays_delta": None})
    return nics, gpus
