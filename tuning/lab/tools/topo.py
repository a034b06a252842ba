"""Stand-ins of the topology tools: ``nvidia-smi`` (``topo -m``, ``-L``), ``lscpu`` and ``numactl -H``.

They read the node's sysroot (``$FABTUNE_LAB_SYSROOT``): the NUMA node and CPU topology files, the
GPUs' sysfs, and the PCIe placement ``run/lab/topology.json`` laid by :mod:`tuning.lab.hw_gpu`.
Formats as in ``shared/cases/``: ``nvidia_smi_topo_m__8gpu_10nic_raw_tabs_ansi_header_gpu_numa_id.txt``
(raw tabs, ANSI underlined header, NIC rows without affinity cells, legends),
``lscpu__util_linux_new_grouped_sections.txt`` (util-linux >= 2.38 grouped layout, values at column 25)
and ``numactl_H__2node_ht_siblings_high_range.txt``; ``nvidia-smi -L`` as in public transcripts
(``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)``). None of them needs root. Standard library only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tuning.cpulist import format_cpulist, parse_cpulist
from tuning.lab.hw_gpu import GPU_MODEL, TOPOLOGY_JSON
from tuning.lab.tools.node import _read, _sysroot as _root

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""
#: what nvidia-smi says to arguments it does not take (as remembered, not from a recorded transcript)
NVSMI_BAD_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
#: NVLink between every two GPUs of an HGX H100 board (18 links through the NVSwitches)
NVLINK = "NV18"


def _numa_nodes(root: Path) -> dict[int, list[int]]:
    """NUMA node -> its CPUs, from ``sys/devices/system/node/node<N>/cpulist``."""
    base = root / "sys/devices/system/node"
    nodes = sorted(int(p.name[4:]) for p in base.glob("node[0-9]*"))
    return {n: parse_cpulist(_read(base / f"node{n}/cpulist")) for n in nodes}


# ---- nvidia-smi ------------------------------------------------------------------------------

def _link(a: dict, b: dict) -> str:
    """The ``topo -m`` cell between two devices of ``topology.json``."""
    if a is b:
        return " X "
    if "index" in a and "index" in b:
        return NVLINK
    if a["numa_node"] != b["numa_node"]:
        return "SYS"
    return "PIX" if a["switch"] == b["switch"] else "NODE"


def _topo_matrix(root: Path) -> str:
    layout = json.loads((root / TOPOLOGY_JSON).read_text())
    gpus, nics = layout["gpus"], layout["nics"]
    names = [f"GPU{g['index']}" for g in gpus] + [f"NIC{k}" for k in range(len(nics))]
    devs = gpus + nics
    head = "\x1b[4m\t" + "\t".join(names + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]) + "\x1b[0m"
    rows = [head]
    for name, dev in zip(names, devs):
        cells = "\t".join(_link(dev, other) for other in devs)
        if "index" in dev:
            cpus = _read(root / "sys/bus/pci/devices" / dev["bdf"] / "local_cpulist")
            rows.append(f"{name}\t{cells}\t{cpus}\t{dev['numa_node']}\t\tN/A")
        else:
            rows.append(f"{name}\t{cells}\t\t\t\t")
    legend = "\n".join(f"  NIC{k}: {nic['rdma_device']}" for k, nic in enumerate(nics))
    return "\n".join(rows) + "\n" + LEGEND + "\nNIC Legend:\n\n" + legend + "\n\n"


def nvidia_smi(argv: list[str]) -> int:
    """``nvidia-smi topo -m`` (``--matrix``), ``nvidia-smi -L`` (``--list-gpus``) and the health
    queries of :mod:`tuning.lab.tools.health`; anything else is refused (exit 2) rather than guessed."""
    from tuning.lab.tools.health import query  # --query-gpu / --query-remapped-rows (burn-in health)

    rc = query(argv)
    if rc is not None:
        return rc
    root = _root()
    if argv in (["topo", "-m"], ["topo", "--matrix"]):
        sys.stdout.write(_topo_matrix(root))
        return 0
    if argv in (["-L"], ["--list-gpus"]):
        gpus = json.loads((root / TOPOLOGY_JSON).read_text())["gpus"]
        for g in gpus:
            print(f"GPU {g['index']}: {g.get('model', GPU_MODEL)} (UUID: {g['uuid']})")
        return 0
    print(NVSMI_BAD_ARGS)
    return 2


# ---- lscpu -----------------------------------------------------------------------------------

def _row(key: str, value: str, indent: int = 0) -> str:
    """``key:`` padded so values start at column 25, as util-linux lays out a pipe's output."""
    return f"{' ' * indent}{key + ':':<{25 - indent}}{value}"


def lscpu(argv: list[str]) -> int:
    """``lscpu`` (no options) in the grouped layout, from the sysroot's CPU and NUMA files."""
    if argv:  # getopt's texts; the lab supports no option (real lscpu has -p, -e, -J ...): refused, not guessed
        bad = f"unrecognized option '{argv[0]}'" if argv[0].startswith("--") else f"invalid option -- '{argv[0][1:2]}'"
        print(f"lscpu: {bad}\nTry 'lscpu --help' for more information.", file=sys.stderr)
        return 1
    root = _root()
    cpu_dir = root / "sys/devices/system/cpu"
    online = parse_cpulist(_read(cpu_dir / "online"))
    threads = len(parse_cpulist(_read(cpu_dir / f"cpu{online[0]}/topology/thread_siblings_list")))
    sockets = len({_read(cpu_dir / f"cpu{c}/topology/physical_package_id") for c in online})
    numa = _numa_nodes(root)
    cores = len(online) // threads // sockets
    lines = [
        _row("Architecture", "x86_64"), _row("CPU op-mode(s)", "32-bit, 64-bit", 2),
        _row("Address sizes", "46 bits physical, 57 bits virtual", 2), _row("Byte Order", "Little Endian", 2),
        _row("CPU(s)", str(len(online))), _row("On-line CPU(s) list", format_cpulist(online), 2),
        _row("Vendor ID", "GenuineIntel"), _row("Model name", "Intel(R) Xeon(R) Gold 6348 CPU @ 2.60GHz", 2),
        _row("CPU family", "6", 4), _row("Model", "106", 4), _row("Thread(s) per core", str(threads), 4),
        _row("Core(s) per socket", str(cores), 4), _row("Socket(s)", str(sockets), 4), _row("Stepping", "6", 4),
        _row("CPU max MHz", "3500.0000", 4), _row("CPU min MHz", "800.0000", 4), _row("BogoMIPS", "5200.00", 4),
        _row("Flags", "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush ht "
                      "syscall nx pdpe1gb rdtscp lm constant_tsc avx avx2 avx512f", 4),
        _row("Virtualization features", ""), _row("Virtualization", "VT-x", 2),
        _row("Caches (sum of all)", ""),
        _row("L1d", f"{cores * sockets * 48 / 1024:.1f} MiB ({cores * sockets} instances)", 2),
        _row("L3", f"{42 * sockets} MiB ({sockets} instances)", 2),
        _row("NUMA", ""), _row("NUMA node(s)", str(len(numa)), 2),
    ] + [_row(f"NUMA node{n} CPU(s)", format_cpulist(cpus), 2) for n, cpus in numa.items()]
    print("\n".join(lines))  # section headers keep their padding, as util-linux prints them
    return 0


# ---- numactl ---------------------------------------------------------------------------------

#: memory per NUMA node of the lab (MB as numactl prints them, 2^20 bytes) and what is free of it
NODE_MB, FREE_MB = 1031710, 1006421


def numactl(argv: list[str]) -> int:
    """``numactl -H`` (``--hardware``): nodes, their CPUs and memory, and the distance table
    (10 local, 21 remote as on a 2-socket node)."""
    if argv not in (["-H"], ["--hardware"]):
        print("usage: numactl [--all | -a] [--interleave= | -i <nodes>] [--preferred= | -p <node>]\n"
              "               [--physcpubind= | -C <cpus>] [--cpunodebind= | -N <nodes>] ...\n"
              "       numactl [--hardware | -H] ...", file=sys.stderr)
        return 1
    numa = _numa_nodes(_root())
    ids = sorted(numa)
    lines = [f"available: {len(ids)} nodes ({format_cpulist(ids)})"]
    for n in ids:
        lines += [f"node {n} cpus: {' '.join(str(c) for c in numa[n])}", f"node {n} size: {NODE_MB} MB",
                  f"node {n} free: {FREE_MB - 977 * n} MB"]
    lines += ["node distances:", "node" + "".join(f"{n:>4}" for n in ids)]
    lines += [f"{a:>3}:" + "".join(f"{10 if a == b else 21:>4}" for b in ids) for a in ids]
    print("\n".join(lines))
    return 0
