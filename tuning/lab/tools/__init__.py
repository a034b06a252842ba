"""Vendor-tool stand-ins of the lab nodes, dispatched by tool name.

Each lab node's shell has ``<state>/bin/<tool>`` on its PATH: a tiny wrapper whose
shebang is the venv's Python and which calls :func:`main`. A stand-in reads and
writes the node's sysroot (``$FABTUNE_LAB_SYSROOT``) and prints exactly what the
real tool prints (``shared/cases/``). Stand-ins start fast: this package and the
modules it names import the standard library only (plus the stdlib-only
``tuning.lab.fabric`` / ``tuning.lab.sysroot``).

The node fault ``slow-tools`` (``fabtune lab inject NODE slow-tools SECONDS``,
:mod:`tuning.lab.hw_faults`) is the file :data:`SLOW_TOOLS` in the node's sysroot: while it
exists, every stand-in run on that node (``tee`` too) waits the SECONDS it holds before it acts.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path

#: tool name -> "module:function"; the function takes argv (without the tool name) and returns the exit status.
TOOLS: dict[str, str] = {
    "ip": "tuning.lab.tools.node:ip",
    "sysctl": "tuning.lab.tools.node:sysctl",
    "mlnx_qos": "tuning.lab.tools.qos:mlnx_qos",
    "cma_roce_tos": "tuning.lab.tools.node:cma_roce_tos",
    "ibdev2netdev": "tuning.lab.tools.node:ibdev2netdev",
    "show_gids": "tuning.lab.tools.node:show_gids",
    "ib_write_bw": "tuning.lab.tools.perftest:ib_write_bw",
    "ib_read_lat": "tuning.lab.tools.perftest:ib_read_lat",
    "systemctl": "tuning.lab.tools.services:systemctl",
    # part A (firmware) tools
    "mlxconfig": "tuning.lab.tools.mlx:mlxconfig",
    "mlxfwmanager": "tuning.lab.tools.mlx:mlxfwmanager",
    "mlxfwreset": "tuning.lab.tools.mlx:mlxfwreset",
    # part B (topology) tools
    "nvidia-smi": "tuning.lab.tools.topo:nvidia_smi",
    "lscpu": "tuning.lab.tools.topo:lscpu",
    "numactl": "tuning.lab.tools.topo:numactl",
    # part C (kernel, power) tools
    "cpupower": "tuning.lab.tools.kernel:cpupower",
    "update-grub": "tuning.lab.tools.kernel:update_grub",
    # part D (modules, PCIe, pause) tools
    "lspci": "tuning.lab.tools.pci:lspci",
    "setpci": "tuning.lab.tools.pci:setpci",
    "modprobe": "tuning.lab.tools.modtools:modprobe",
    "lsmod": "tuning.lab.tools.modtools:lsmod",
    "ethtool": "tuning.lab.tools.ethtool:ethtool",
    # issue 10 (burn-in health)
    "dmesg": "tuning.lab.tools.health:dmesg",
    # issue 20 (NCCL): nccl-tests and the MPI launcher that starts them across nodes
    "all_reduce_perf": "tuning.lab.tools.nccl:all_reduce_perf",
    "alltoall_perf": "tuning.lab.tools.nccl:alltoall_perf",
    "mpirun": "tuning.lab.tools.nccl:mpirun",
}

#: stand-ins whose wrapper relays their lab requests when :mod:`tuning.lab.toolserver` runs them:
#: the perftest pair asks its node's sudo socket to count its traffic, and that socket admits
#: only descendants of the node's shells (:func:`tuning.lab.privileges.node_of`), as the wrapper is
RELAYED = frozenset({"ib_write_bw", "ib_read_lat"})

#: stand-ins written in bash (no interpreter start-up: ``tee`` runs once per sysfs write):
#: tool name -> script file, copied into ``bin/`` as is
SHELL_TOOLS: dict[str, Path] = {"tee": Path(__file__).with_name("tee.sh"),
                                 # configfs rdma_cm groups made and removed as the kernel does in the same call
                                 "mkdir": Path(__file__).with_name("configfs.sh"),
                                 "rmdir": Path(__file__).with_name("configfs.sh")}

#: the ``slow-tools`` fault of a node, relative to its sysroot: SECONDS (a decimal) every stand-in
#: waits before it acts; absent when the fault is not set (``tee.sh`` reads the same path)
SLOW_TOOLS = "hw/lab-faults/slow-tools"
#: the longest such wait (s)
MAX_SLOW_TOOLS_S = 600
#: the ``port-held`` fault of a node (``fabtune lab inject NODE port-held PORT``), relative to its
#: sysroot: the TCP port another process of the node holds (the perftest stand-in's server refuses it)
PORT_HELD = "hw/lab-faults/port-held"


def slow_tools_s(sysroot: str | None) -> float:
    """The seconds of the ``slow-tools`` fault of the node whose sysroot is ``sysroot`` (0: none).
    One failed ``open`` when the fault is not set: this runs before every stand-in."""
    if not sysroot:
        return 0.0
    try:
        with open(os.path.join(sysroot, SLOW_TOOLS)) as f:
            seconds = float(f.read(32).strip() or 0)
    except (OSError, ValueError):
        return 0.0
    return seconds if 0 < seconds <= MAX_SLOW_TOOLS_S else 0.0  # (nan, inf: none)


def main(tool: str, argv: list[str]) -> int:
    """Run stand-in ``tool`` with ``argv`` and return its exit status.

    An unknown tool, or one whose module is missing, exits 127 like a shell's
    ``command not found``, with the reason on stderr.
    """
    target = TOOLS.get(tool)
    if target is None:
        print(f"{tool}: command not found (no lab stand-in)", file=sys.stderr)
        return 127
    module_name, _, func_name = target.partition(":")
    try:
        func = getattr(importlib.import_module(module_name), func_name)
    except (ImportError, AttributeError) as exc:
        print(f"{tool}: lab stand-in unavailable: {exc}", file=sys.stderr)
        return 127
    delay = slow_tools_s(os.environ.get("FABTUNE_LAB_SYSROOT"))
    if delay:
        time.sleep(delay)  # the slow-tools fault: only latency, the tool then acts as always
    try:
        return int(func(list(argv)) or 0)
    except BrokenPipeError:
        return 141
