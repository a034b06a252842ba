"""``fabtune parse``: what fabtune understands of a saved tool output, with findings. Registered
in :mod:`tuning.cli`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from tuning.cli_emit import out
from tuning.errors import InputError


def _parse_context(pairs: list[str], named: dict[str, Optional[str]]) -> dict[str, str]:
    """``--context KEY=VALUE`` pairs plus the named shortcuts (``--bdf``...) as one context dict."""
    context: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError("--context", pair, "expected KEY=VALUE, e.g. --context local_cpus=16-31")
        context[key.strip().replace("-", "_")] = value.strip()
    context.update({k: v for k, v in named.items() if v is not None})
    return context


def parse_cmd(tool: str = typer.Argument(..., help="Tool name, e.g. ib_write_bw, mlnx_qos, interrupts."),
              file: str = typer.Argument("-", help="Saved output, or - for stdin."),
              fmt: str = typer.Option("json", "--format", help="json or table."),
              bdf: Optional[str] = typer.Option(None, "--bdf", help="interrupts: the NIC's PCI address."),
              local_cpus: Optional[str] = typer.Option(None, "--local-cpus", help="interrupts: the NIC's local CPUs."),
              ipv4: Optional[str] = typer.Option(None, "--ipv4", help="show-gids, ibv_devinfo: the traffic's IPv4."),
              context: Optional[list[str]] = typer.Option(None, "--context", help="KEY=VALUE fact a finding needs "
                                                          "(repeatable), e.g. lossless_queues=3,4.")) -> None:
    """Print what fabtune understands of a saved tool output, with findings.

    Tools: ib_write_bw ib_read_bw ib_send_bw ib_write_lat ib_read_lat ib_send_lat rping nccl-tests all_reduce_perf
    all_gather_perf alltoall_perf broadcast_perf reduce_perf reduce_scatter_perf sendrecv_perf scatter_perf
    gather_perf hypercube_perf mlnx_qos mlxconfig mlxfwmanager ibdev2netdev ibv_devinfo show-gids nvidia-smi-topo
    nvidia-smi-L nvidia-gpu-information interrupts lscpu numactl-H ethtool-S ethtool-a lspci-vvv cpupower-idle-info
    hw-counters rdma-statistic nv-show-qos-roce nv-show-interface nv-show-interface-qos-roce-counters
    sonic-show-interfaces-status sonic-show-pfc-counters sonic-show-queue-counters sonic-ecnconfig sonic-config-db
    sonic-apply-patch sonic-checkpoints eos-show-interfaces-json eos-show-sessions-json eos-running-config ibstat
    iblinkinfo ibqueryerrors perfquery saquery-pr smpquery-pkeys smpquery-portinfo sminfo.

    Exit 0 parsed (a classified tool error included), 2 unreadable or a bad option.
    Example: fabtune parse interrupts saved/interrupts.txt --bdf 0000:c1:00.0 --local-cpus 16-31
    """
    from tuning.parsers import parse

    if fmt not in ("json", "table"):
        raise InputError("--format", "format", f"{fmt!r}; allowed: json, table")
    ctx = _parse_context(context or [], {"bdf": bdf, "local_cpus": local_cpus, "ipv4": ipv4})
    try:
        data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as e:
        raise InputError(file, "FILE", f"cannot read: {e.strerror}") from None
    result = parse(tool, data.decode("utf-8", errors="replace"), ctx or None)
    doc = result.model_dump(mode="json")
    if fmt == "json":
        print(json.dumps(doc, indent=2))
        return
    from tuning.report import parsed_table

    out.print(parsed_table(doc))
