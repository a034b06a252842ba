"""Vendor-tool stand-ins of the lab nodes, dispatched by tool name.

Each lab node's shell has ``<state>/bin/<tool>`` on its PATH: a tiny wrapper whose
shebang is the venv's Python and which calls :func:`main`. A stand-in reads and
writes the node's sysroot (``$FABTUNE_LAB_SYSROOT``) and prints exactly what the
real tool prints (``shared/cases/``). Stand-ins start fast: this package and the
modules it names import the standard library only (plus the stdlib-only
``tuning.lab.fabric`` / ``tuning.lab.sysroot``).
"""

from __future__ import annotations

import importlib
import sys
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
}

#: stand-ins whose wrapper relays their lab requests when :mod:`tuning.lab.toolserver` runs them:
#: the perftest pair asks its node's sudo socket to count its traffic, and that socket admits
#: only descendants of the node's shells (:func:`tuning.lab.privileges.node_of`), as the wrapper is
RELAYED = frozenset({"ib_write_bw", "ib_read_lat"})

#: stand-ins written in bash (no interpreter start-up: ``tee`` runs once per sysfs write):
#: tool name -> script file, copied into ``bin/`` as is
SHELL_TOOLS: dict[str, Path] = {"tee": Path(__file__).with_name("tee.sh")}


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
    try:
        return int(func(list(argv)) or 0)
    except BrokenPipeError:
        return 141
