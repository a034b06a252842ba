"""The lab node's GPUs and CPU topology: the sysfs / procfs files fabtune's topology discovery reads,
and the placement the ``nvidia-smi`` stand-in prints (``tuning.lab.tools.topo``).

Built at power-on (``EXTRA_BUILDERS`` of :mod:`tuning.lab.sysroot`, so ``fabtune lab reboot`` lays it
anew from ``fabric.json``). Standard library only: the stand-ins import it.

Files (formats: kernel PCI sysfs ABI and ``Documentation/ABI/stable/sysfs-devices-system-cpu``,
``shared/cases/cli/SYSFS.md``; the NVIDIA driver's ``/proc/driver/nvidia/gpus/<bdf>/information`` as
published in public test fixtures, e.g. a Datadog agent ``safenvml`` test and a Colab transcript):

- ``sys/bus/pci/devices/<gpu bdf>/{vendor,device,class,numa_node,local_cpulist,local_cpus}``
  (``0x10de``, ``0x2330`` = H100 SXM5 80GB, ``0x030200`` = 3D controller)
- ``proc/driver/nvidia/gpus/<gpu bdf>/information`` (``Model: \\t\\t NVIDIA H100 80GB HBM3`` ...
  ``Device Minor: \\t N``)
- ``sys/devices/system/cpu/cpu<N>/topology/{thread_siblings_list,core_id,physical_package_id}``
- ``run/lab/topology.json``: private stand-in state, the PCIe placement of every GPU and NIC
  (``{"gpus": [{"index", "bdf", "numa_node", "switch", "minor", "uuid"}], "nics": [{"rdma_device",
  "bdf", "numa_node", "switch"}]}``); ``switch`` names the PCIe switch a device sits behind.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

from tuning.cpulist import cpumask_hex, format_cpulist, parse_cpulist
from tuning.lab import sysroot_share
from tuning.lab.fabric import GPU_BDFS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tuning.lab.fabric import Node

GPU_MODEL = "NVIDIA H100 80GB HBM3"
NVIDIA_VENDOR, H100_SXM_DEVICE, CLASS_3D = "0x10de", "0x2330", "0x030200"
#: private stand-in state under the sysroot (rebuilt at power-on)
TOPOLOGY_JSON = "run/lab/topology.json"


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def gpu_layout(node: Node) -> list[dict]:
    """Where each GPU of ``node`` sits: ``[{"index": i, "bdf", "numa_node", "switch", "minor", "uuid"}]``.

    GPU i sits behind the PCIe switch of the NIC on rail i (``switch`` ``"rail<i>"``, as
    :func:`tuning.lab.fabric.pcie_layout`), on that NIC's NUMA node; a rail named in
    ``node.gpu_misplaced`` moves it behind a switch of its own (``"gpu<i>"``), on the same NUMA node
    (``NODE``) or on the other one (``SYS``). A GPU without a NIC on its rail sits on NUMA node
    ``i * nodes // gpus``. The minor number (``/dev/nvidia<minor>``) is the index.
    """
    nics = {n.rail: n for n in node.nics}
    nodes = len(node.numa_cpulists)
    out = []
    for i in range(min(node.gpus, len(GPU_BDFS))):
        nic = nics.get(i)
        numa, switch = (nic.numa_node, f"rail{i}") if nic else (i * nodes // node.gpus, f"gpu{i}")
        fault = node.gpu_misplaced.get(str(i))
        if fault in ("NODE", "SYS"):
            switch = f"gpu{i}"
            numa = (numa + 1) % nodes if fault == "SYS" else numa
        uuid = f"GPU-{zlib.crc32(node.name.encode()):08x}-{i:04x}-4{i:03x}-8000-0c42a1{i:06x}"
        out.append({"index": i, "bdf": GPU_BDFS[i], "numa_node": numa, "switch": switch, "minor": i, "uuid": uuid,
                    "model": node.gpu_model or GPU_MODEL})
    return out


def nic_layout(node: Node) -> list[dict]:
    """``[{"rdma_device", "bdf", "numa_node", "switch"}]`` for every NIC, in PCI address order."""
    return [{"rdma_device": n.rdma_device, "bdf": n.bdf, "numa_node": n.numa_node, "switch": f"rail{n.rail}"}
            for n in sorted(node.nics, key=lambda n: n.bdf)]


def smt_siblings(node: Node) -> dict[int, list[int]]:
    """CPU -> the CPUs of its core. Each NUMA node's list holds its first threads, then their
    siblings in the same order (``0-27,56-83``: CPU c and c+56 share a core); a node with one
    thread per core (``node.threads_per_core``, a Grace) has every CPU alone on its core."""
    out: dict[int, list[int]] = {}
    for cpulist in node.numa_cpulists:
        cpus = parse_cpulist(cpulist)
        half = len(cpus) // 2
        smt = len(cpus) % 2 == 0 and node.threads_per_core == 2
        pairs = zip(cpus[:half], cpus[half:]) if smt else ((c,) for c in cpus)
        for core in pairs:
            for cpu in core:
                out[cpu] = sorted(core)
    return out


def information(gpu: dict) -> str:
    """``/proc/driver/nvidia/gpus/<bdf>/information`` of a lab GPU (tabs as the driver prints them)."""
    return (f"Model: \t\t {gpu.get('model', GPU_MODEL)}\nIRQ:   \t\t {300 + gpu['index']}\nGPU UUID: \t {gpu['uuid']}\n"
            f"Video BIOS: \t 96.00.89.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
            f"DMA Mask: \t 0xfffffffffffff\nBus Location: \t {gpu['bdf']}\nDevice Minor: \t {gpu['minor']}\n"
            f"GPU Firmware: \t 550.90.07\nGPU Excluded:\t No")


def build(root: Path, node: Node) -> None:
    """Lay the GPU PCI devices, the driver's per-GPU ``information``, the CPU topology files and
    ``run/lab/topology.json`` under the sysroot ``root`` (an ``EXTRA_BUILDERS`` entry)."""
    nr = max(max(parse_cpulist(c)) for c in node.numa_cpulists) + 1
    gpus = gpu_layout(node)
    for gpu in gpus:
        pci = root / "sys/bus/pci/devices" / gpu["bdf"]
        cpulist = node.numa_cpulists[gpu["numa_node"]]
        for name, value in (("vendor", NVIDIA_VENDOR), ("device", H100_SXM_DEVICE), ("class", CLASS_3D),
                            ("numa_node", str(gpu["numa_node"])), ("local_cpulist", cpulist),
                            ("local_cpus", cpumask_hex(parse_cpulist(cpulist), nr))):
            _put(pci / name, value)
        _put(root / "proc/driver/nvidia/gpus" / gpu["bdf"] / "information", information(gpu))
    package = {c: i for i, cl in enumerate(node.numa_cpulists) for c in parse_cpulist(cl)}
    siblings = smt_siblings(node)
    core_ids: dict[int, int] = {}
    for cpu in sorted(siblings):
        first = siblings[cpu][0]
        core_ids.setdefault(first, sum(1 for c in core_ids if package[c] == package[cpu]))
        topo = f"sys/devices/system/cpu/cpu{cpu}/topology"
        (root / topo).mkdir(parents=True, exist_ok=True)
        for name, value in (("thread_siblings_list", format_cpulist(siblings[cpu])), ("core_id", str(core_ids[first])),
                            ("physical_package_id", str(package[cpu]))):
            sysroot_share.put(root, f"{topo}/{name}", value)  # read-only: one inode for every node
    _put(root / TOPOLOGY_JSON, json.dumps({"gpus": gpus, "nics": nic_layout(node)}, sort_keys=True))
