"""``fabtune health``: one quick burn-in round, for cron, a Slurm ``HealthCheckProgram`` or a
node-problem-detector plugin (issue 10).

Over SSH (:func:`run_health`): a baseline read of every node, the pairs of ONE rail (the lowest the
nodes share, or ``--rail``), a second read; the document is a burn-in document of ``kind``
``health`` with that one round (docs/burnin.md), judged by the same localisation.

On this machine (:func:`local_document`, ``--local``, no SSH, no traffic): one read of the NICs
from sysfs (``/sys/class/infiniband/DEV/ports/1/hw_counters``, ``/sys/class/net/IF/{speed,
carrier_down_count}``, the PCI device's ``current_link_*`` / ``max_link_*``), ``ethtool -S IF`` and
``ethtool IF`` where ethtool is installed, the GPUs through NVML (nvidia-ml-py: ECC
``nvmlDeviceGetTotalEccErrors`` uncorrected volatile, ``nvmlDeviceGetRemappedRows``,
``nvmlDeviceGetCurrentClocksEventReasons`` (older drivers: ``...ThrottleReasons``),
``nvmlDeviceGetPcieReplayCounter``; every call guarded: older drivers lack newer functions) and the
kernel log's XID lines (``dmesg``, root). Counters are totals since boot there unless an earlier
read is given (``prev``: the passive node check's state, :mod:`tuning.burnin.node_check`).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from tuning.burnin.collect import THROTTLE_BITS, sysfs_bdf, deltas, parse_node
from tuning.burnin.run import BurninOptions, Progress, finish, run_burnin, run_id


def run_health(inv: Any, opts: BurninOptions, progress: Progress | None = None) -> dict:
    """One quick round over SSH (module docstring); ``opts.rails`` None picks the lowest shared rail."""
    if opts.rails is None:
        rails = sorted({n.rail for d in inv.nodes for n in d.spec.nics})
        opts.rails = tuple(rails[:1])
    opts.kind, opts.iterations, opts.duration_s, opts.nccl = "health", 1, None, False
    return run_burnin(inv, opts, progress)


def _sh(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def local_text(root: Path = Path("/")) -> tuple[str, dict[str, dict]]:
    """This machine's NICs in :func:`tuning.burnin.collect.parse_node`'s section format, and the
    topology entry per RDMA device (``{"netdev", "rail": None, "switch": "unknown", "switch_port": netdev}``:
    this machine alone does not know its leaf, so a link finding reads ``vm:mlx5_0<->unknown:enp12s0np0``)."""
    from tuning.burnin.collect import MARK

    parts, topo = [], {}
    for ib in sorted((root / "sys/class/infiniband").glob("*")):
        nets = sorted(p.name for p in (ib / "device/net").glob("*")) if (ib / "device/net").is_dir() else []
        if not nets:
            continue
        dev, net = ib.name, nets[0]
        topo[dev] = {"netdev": net, "rail": None, "switch": "unknown", "switch_port": net}  # no LLDP read here
        hw = ib / "ports/1/hw_counters"
        parts += [f"{MARK} ethtool-S {dev}", _sh(["ethtool", "-S", net]), f"{MARK} hw {dev}"]
        parts += [f"{f.name}:{_read(f)}" for f in sorted(hw.glob("*")) if _read(f).isdigit()]
        sysnet = root / "sys/class/net" / net
        parts += [f"{MARK} link {dev}", _sh(["ethtool", net]) or f"\tSpeed: {_read(sysnet / 'speed')}Mb/s",
                  f"carrier_down_count={_read(sysnet / 'carrier_down_count')}", f"{MARK} pcie {dev}"]
        parts += [f"{k}={_read(ib / 'device' / k)}" for k in
                  ("current_link_width", "max_link_width", "current_link_speed", "max_link_speed")]
    parts += [f"{MARK} xid -", *(ln for ln in _sh(["dmesg"]).splitlines() if "NVRM: Xid" in ln)]
    return "\n".join(parts) + "\n", topo


def nvml_gpus() -> list[dict] | None:
    """GPU health through NVML (module docstring); None without NVML (no pynvml, no driver)."""
    try:
        import pynvml as nv

        nv.nvmlInit()
    except Exception:  # pynvml missing, libnvidia-ml.so missing, no driver: no GPUs to judge here
        return None

    def call(name: str, *args: Any) -> Any:
        fn = getattr(nv, name, None)
        try:
            return fn(*args) if fn else None
        except Exception:  # NVMLError_NotSupported and friends: that fact is unknown
            return None

    out = []
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            pci = call("nvmlDeviceGetPciInfo", h)
            bus = pci.busId.decode() if pci is not None and isinstance(pci.busId, bytes) else getattr(pci, "busId", "")
            rows = call("nvmlDeviceGetRemappedRows", h)
            mask = call("nvmlDeviceGetCurrentClocksEventReasons", h)
            mask = call("nvmlDeviceGetCurrentClocksThrottleReasons", h) if mask is None else mask
            out.append({"index": i, "bdf": sysfs_bdf(bus, "nvmlDeviceGetPciInfo") if bus else "",
                        "lost": False, "xid": [],
                        "ecc_uncorrected": call("nvmlDeviceGetTotalEccErrors", h, 1, 0),
                        "remapped_rows_pending": int(bool(rows[2])) if rows else None,
                        "remapped_rows_failed": int(bool(rows[3])) if rows else None,
                        "throttle_reasons": [n for b, n in THROTTLE_BITS.items() if mask and mask & b],
                        "pcie_replays_delta": call("nvmlDeviceGetPcieReplayCounter", h)})
    finally:
        call("nvmlShutdown")
    return out


def local_read(root: Path = Path("/")) -> tuple[dict, dict[str, dict]]:
    """One read of this machine: (:func:`tuning.burnin.collect.parse_node`'s snapshot of
    :func:`local_text`, the topology entry per RDMA device). Counters in it are totals since boot."""
    text, topo = local_text(root)
    return parse_node(text), topo


def local_document(root: Path = Path("/"), opts: BurninOptions | None = None,
                   progress: Progress | None = None, name: str | None = None,
                   read: tuple[dict, dict] | None = None, prev: dict | None = None) -> dict:
    """The health document of this machine (module docstring), findings and reports included;
    ``name``: the node's name in it (checked by the caller; default the short host name).

    ``read``: a :func:`local_read` already made (default: read now); ``prev``: an earlier snapshot of
    this machine (``{"nics": {dev: {"counters": {name: int}, "link": {"carrier_down_count": int}}}}``):
    counters are judged as what they rose since it (:func:`tuning.burnin.collect.deltas`), else as
    totals since boot (``fabtune health --local``)."""
    opts = opts or BurninOptions(kind="health")
    opts.kind = "health"
    name = name or socket.gethostname().split(".")[0]
    snap, topo = read or local_read(root)
    nics, gpus = deltas(prev, snap, set())
    by_bdf = {g["bdf"]: g for g in gpus}
    for g in nvml_gpus() or []:
        g["xid"] = by_bdf.pop(g["bdf"], {}).get("xid", [])
        by_bdf[g["bdf"]] = g
    t0 = time.time()
    doc = {"run_id": run_id().replace("burnin-", "health-"), "inventory": f"local:{name}", "started": t0,
           "seconds": 0.0, "kind": "health", "topology": {"nodes": {name: topo}, "links": []}, "unreachable": {},
           "rounds": [{"index": 0, "t": 0.0, "pairs": [], "nics": {name: nics},
                       "gpus": {name: sorted(by_bdf.values(), key=lambda g: (g["index"] is None, g["index"] or 0))},
                       "errors": {}}]}
    doc["notes"] = [] if os.geteuid() == 0 else ["not root: the kernel log (XIDs) was not read"]
    return finish(doc, opts, progress or (lambda _m: None))
