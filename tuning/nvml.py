"""NVML discovery of THIS host's GPU map (nvidia-ml-py, ``import pynvml``), in the shape of
:func:`tuning.node.topology.discover`, for ``fabtune topology --local`` and the device check.

NVML gives each GPU's index, PCI address, name, ``/dev/nvidia`` minor, NUMA node and CPU affinity;
every call is guarded (older drivers lack newer functions, NOTES.md): a missing function, a failing
call, a missing ``pynvml`` or a missing ``libnvidia-ml.so`` falls back to sysfs for that fact, and
:attr:`~tuning.node.topology.Topology.sources` says which. NVML relates GPUs to GPUs and CPUs, not
to NICs, so the NICs (``/sys/class/infiniband/*/device``) and the GPU-NIC link classes come from sysfs
(PCI paths, then NUMA nodes), as :func:`tuning.node.topology.build` reads them.

Run on a node: ``python -m tuning.nvml [--json] [--root /]``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import sys
from pathlib import Path

from tuning.cpulist import format_cpulist
from tuning.node.topology import Gpu, TopoNic, Topology, build

_BDF = re.compile(r"^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def normalise_bdf(bus_id: str | bytes) -> str:
    """NVML's ``00000000:1B:00.0`` (8-digit domain, upper case) -> sysfs's ``0000:1b:00.0``."""
    text = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
    m = _BDF.match(text.strip())
    if not m:
        return text.strip().lower()
    return f"{int(m[1], 16):04x}:{m[2]}:{m[3]}.{m[4]}".lower()


def sysfs_raw(root: str = "/") -> dict[str, str]:
    """The ``topo/...`` keys of :func:`tuning.node.topology.read_script` read from files here, with
    Python instead of a shell (values base64 where the script encodes them)."""
    base = Path(root)
    raw: dict[str, str] = {}
    pci = base / "sys/bus/pci/devices"
    gpus = sorted(d.name for d in pci.glob("*") if _read(d / "vendor") == "0x10de"
                  and (_read(d / "class") or "").startswith(("0x0300", "0x0302")))
    raw["topo/gpus"] = " ".join(gpus)
    for bdf in gpus + [n["bdf"] for n in sysfs_nics(root)]:
        raw[f"topo/path/{bdf}"] = os.path.realpath(pci / bdf)
    for bdf in gpus:
        for name in ("numa_node", "local_cpulist"):
            if (value := _read(pci / bdf / name)) is not None:
                raw[f"topo/gpu/{bdf}/{name}"] = value
        info = base / "proc/driver/nvidia/gpus" / bdf / "information"
        if info.is_file():
            raw[f"topo/gpu/{bdf}/info"] = base64.b64encode(info.read_bytes()).decode()
    for node in (base / "sys/devices/system/node").glob("node[0-9]*"):
        if (value := _read(node / "cpulist")) is not None:
            raw[f"topo/node/{node.name[4:]}"] = value
    for cpu in (base / "sys/devices/system/cpu").glob("cpu[0-9]*"):
        for key, name in (("siblings", "thread_siblings_list"), ("package", "physical_package_id")):
            if (value := _read(cpu / "topology" / name)) is not None:
                raw[f"topo/cpu/{cpu.name[3:]}/{key}"] = value
    return raw


def sysfs_nics(root: str = "/") -> list[dict]:
    """RDMA devices: ``[{"rdma_device", "netdev", "bdf", "numa_node", "cpus"}]`` from
    ``/sys/class/infiniband/<dev>/device`` (netdev: the first of ``device/net/``)."""
    out = []
    for dev in sorted((Path(root) / "sys/class/infiniband").glob("*")):
        pci = dev / "device"
        nets = sorted(p.name for p in (pci / "net").glob("*")) if (pci / "net").is_dir() else []
        numa = _read(pci / "numa_node") or "-1"
        out.append({"rdma_device": dev.name, "netdev": nets[0] if nets else None,
                    "bdf": os.path.basename(os.path.realpath(pci)),
                    "numa_node": int(numa) if re.fullmatch(r"-?\d+", numa) else -1,
                    "cpus": _read(pci / "local_cpulist") or ""})
    return out


class _Nvml:
    """Guarded NVML calls: ``call(fact, fn_name, *args)`` returns the value, or None after noting in
    ``sources`` why the fact comes from sysfs."""

    def __init__(self, sources: dict[str, str]):
        self.sources, self.lib = sources, None
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            self.lib = pynvml
        except ImportError:
            sources["nvml"] = "not used: pynvml (nvidia-ml-py) is not installed"
        except Exception as exc:  # pynvml.NVMLError_LibraryNotFound, _DriverNotLoaded, ...
            sources["nvml"] = f"not used: nvmlInit failed ({exc})"

    def call(self, fact: str, name: str, *args):
        fn = getattr(self.lib, name, None)
        if fn is None:
            self.sources[fact] = f"sysfs ({name} missing in this pynvml)"
            return None
        try:
            return fn(*args)
        except Exception as exc:  # pynvml.NVMLError_NotSupported, _FunctionNotFound (old driver), ...
            self.sources[fact] = f"sysfs ({name}: {exc})"
            return None

    def close(self) -> None:
        if self.lib is not None:
            self.call("nvml", "nvmlShutdown")


def _mask_cpus(words: list[int]) -> list[int]:
    """NVML's CPU affinity (64-bit words, CPU 0 = bit 0 of word 0) -> CPU numbers."""
    return [64 * w + b for w, word in enumerate(words) for b in range(64) if int(word) >> b & 1]


def _nvml_gpus(nv: _Nvml, sysfs: dict[str, Gpu]) -> list[Gpu] | None:
    """GPUs as NVML lists them, each fact from NVML or (noted) from the sysfs GPU at its address."""
    count = nv.call("gpus", "nvmlDeviceGetCount")
    if count is None:
        return None
    nv.sources["gpus"] = "nvml"
    ncpu = os.cpu_count() or 64
    out = []
    for i in range(count):
        h = nv.call(f"gpu{i}", "nvmlDeviceGetHandleByIndex", i)
        pci = nv.call(f"gpu{i}.bdf", "nvmlDeviceGetPciInfo", h) if h is not None else None
        bdf = normalise_bdf(pci.busId) if pci is not None else ""
        base = sysfs.get(bdf, Gpu(i, bdf, -1, ""))
        name = nv.call(f"gpu{i}.model", "nvmlDeviceGetName", h) if h is not None else None
        minor = nv.call(f"gpu{i}.minor", "nvmlDeviceGetMinorNumber", h) if h is not None else None
        numa = nv.call(f"gpu{i}.numa_node", "nvmlDeviceGetNumaNodeId", h) if h is not None else None
        mask = nv.call(f"gpu{i}.cpus", "nvmlDeviceGetCpuAffinity", h, (ncpu + 63) // 64) if h is not None else None
        out.append(Gpu(i, bdf, base.numa_node if numa is None else int(numa),
                       base.cpus if mask is None else format_cpulist(_mask_cpus(list(mask))),
                       base.minor if minor is None else int(minor),
                       base.model if name is None else (name.decode() if isinstance(name, bytes) else str(name))))
    return out


def discover(root: str = "/", rails: dict[str, int] | None = None) -> Topology:
    """This host's map: NVML for the GPUs (sysfs per missing call), sysfs for NICs, CPUs and links.

    Args:
        root: the sysfs/procfs root (``/``; a folder holding ``sys/`` and ``proc/`` in tests).
        rails: RDMA device -> rail (from the inventory), so rail flags can be computed.

    Returns:
        A :class:`~tuning.node.topology.Topology`; ``sources["nvml"]`` says why NVML was not used.
    """
    raw = sysfs_raw(root)
    nics = [TopoNic(n["rdma_device"], n["netdev"], n["bdf"], n["numa_node"], n["cpus"],
                    (rails or {}).get(n["rdma_device"])) for n in sysfs_nics(root)]
    online = _read(Path(root) / "sys/devices/system/cpu/online") or ""
    sysfs_topo = build(raw, nics, online)
    sources: dict[str, str] = {}
    nv = _Nvml(sources)
    try:
        gpus = _nvml_gpus(nv, {g.bdf: g for g in sysfs_topo.gpus}) if nv.lib is not None else None
    finally:
        nv.close()
    topo = build(raw, nics, online, gpus=gpus) if gpus is not None else sysfs_topo
    topo.sources.update(sources)
    return topo


def main(argv: list[str] | None = None) -> int:
    """``python -m tuning.nvml [--json] [--root DIR]``: print this host's GPU map."""
    ap = argparse.ArgumentParser(prog="python -m tuning.nvml", description=main.__doc__)
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--root", default="/", help="sysfs/procfs root (default /)")
    args = ap.parse_args(argv)
    topo = discover(args.root)
    if args.json:
        print(json.dumps(topo.as_dict(), indent=2))
        return 0
    links = {link.gpu: link for link in topo.links}
    print("GPU\tBDF\tNUMA\tMINOR\tCPUs\tNEAREST\tLINK\tRAIL-NIC\tFLAG")
    for g in topo.gpus:
        link = links.get(g.index)
        print("\t".join(str(x) for x in (f"GPU{g.index}", g.bdf or "-", g.numa_node, g.minor, g.cpus or "-",
                                         link.nearest_nic if link else "-", link.link if link else "-",
                                         link.rail_nic if link else "-", link.flag if link and link.flag else "")))
    for key, value in sorted(topo.sources.items()):
        print(f"# {key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
