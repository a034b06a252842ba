"""Stand-ins of the health readers a burn-in uses: ``nvidia-smi --query-gpu=... / --query-remapped-rows=...``
and ``dmesg``. Standard library only.

``nvidia-smi --query-gpu=F1,F2 --format=csv[,noheader][,nounits]``: one CSV row per GPU (``, ``
between values, the header row names the fields as given), fields :data:`GPU_FIELDS` (nvidia-smi
``--help-query-gpu``; ``clocks_throttle_reasons.*`` is the pre-535 spelling of
``clocks_event_reasons.*``, both accepted; the active reasons print as a 64-bit hex mask,
``0x0000000000000000`` when none). ``--query-remapped-rows=...`` likewise with
:data:`REMAP_FIELDS` (``--help-query-remapped-rows``). A field it does not know: ``Field "X" is not a
valid field to query.`` and exit 2 (as remembered, not from a recorded transcript). A GPU that fell
off the bus (``gpu-xid 79``, :mod:`tuning.lab.hw_faults`) has no row; instead stderr carries
``Unable to determine the device handle for GPU<i>: <BDF upper case>: Unknown Error`` (public
transcripts of XID 79) and the exit status is 15 (nvidia-smi(1) RETURN VALUE: "GPU has fallen off
the bus or has otherwise become inaccessible"), after the other GPUs' rows. The lab GPUs are healthy
otherwise: no ECC error, no remapped row, no throttle reason.

``dmesg``: the node's kernel log (``run/lab/kmsg``, ``[seconds] text`` lines, written by the lab's
faults). Reading it needs root, as under ``kernel.dmesg_restrict=1`` (the Debian and Ubuntu default):
without it ``dmesg: read kernel buffer failed: Operation not permitted``, exit 1 (util-linux
``sys-utils/dmesg.c``). Options are accepted and ignored except that none changes the format.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tuning.lab.hw_faults import GPU_FAULTS, KMSG
from tuning.lab.hw_gpu import GPU_MODEL, TOPOLOGY_JSON
from tuning.lab.sudo import is_privileged
from tuning.lab.tools.node import _sysroot

NO_THROTTLE = "0x0000000000000000"
GPU_FIELDS = {
    "index": lambda g: str(g["index"]), "name": lambda g: g.get("model", GPU_MODEL), "uuid": lambda g: g["uuid"],
    "pci.bus_id": lambda g: _bus_id(g["bdf"]), "gpu_bus_id": lambda g: _bus_id(g["bdf"]),
    "ecc.errors.uncorrected.volatile.total": lambda g: "0", "ecc.errors.corrected.volatile.total": lambda g: "0",
    "ecc.errors.uncorrected.aggregate.total": lambda g: "0",
    "clocks_event_reasons.active": lambda g: NO_THROTTLE, "clocks_throttle_reasons.active": lambda g: NO_THROTTLE,
    "pcie.link.gen.current": lambda g: "5", "pcie.link.gen.max": lambda g: "5",
    "pcie.link.width.current": lambda g: "16", "pcie.link.width.max": lambda g: "16",
}
REMAP_FIELDS = {
    "gpu_bus_id": lambda g: _bus_id(g["bdf"]), "gpu_uuid": lambda g: g["uuid"],
    "remapped_rows.correctable": lambda g: "0", "remapped_rows.uncorrectable": lambda g: "0",
    "remapped_rows.pending": lambda g: "No", "remapped_rows.failure": lambda g: "No",
}
#: nvidia-smi(1) RETURN VALUE 15
EXIT_GPU_LOST = 15


def _bus_id(bdf: str) -> str:
    """nvidia-smi's bus id: 8-digit domain, upper case (``00000000:1B:00.0``)."""
    dom, rest = bdf.split(":", 1)
    return f"{int(dom, 16):08X}:{rest.upper()}"


def query(argv: list[str]) -> int | None:
    """``nvidia-smi --query-gpu=...`` / ``--query-remapped-rows=...``; None when ``argv`` is neither."""
    opts = dict(a.split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    kind = "--query-gpu" if "--query-gpu" in opts else "--query-remapped-rows" if "--query-remapped-rows" in opts else None
    if kind is None:
        return None
    table = GPU_FIELDS if kind == "--query-gpu" else REMAP_FIELDS
    fields = [f.strip() for f in opts[kind].split(",") if f.strip()]
    fmt = opts.get("--format", "")
    if not fmt.startswith("csv"):
        print("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
        return 2
    for f in fields:
        if f not in table:
            print(f'Field "{f}" is not a valid field to query.')
            return 2
    root = _sysroot()
    gpus = json.loads((root / TOPOLOGY_JSON).read_text())["gpus"]
    try:
        faults = json.loads((root / GPU_FAULTS).read_text())
    except (OSError, ValueError):
        faults = {}
    if "noheader" not in fmt:
        print(", ".join(fields))
    lost = []
    for g in gpus:
        if faults.get(g["bdf"], {}).get("lost"):
            lost.append(g)
            continue
        print(", ".join(table[f](g) for f in fields))
    for g in lost:
        print(f"Unable to determine the device handle for GPU{g['index']}: {_bus_id(g['bdf'])[4:]}: Unknown Error",
              file=sys.stderr)
    return EXIT_GPU_LOST if lost else 0


def dmesg(argv: list[str]) -> int:
    """``dmesg``: the node's kernel log; root only (see the module docstring)."""
    if not is_privileged():
        print("dmesg: read kernel buffer failed: Operation not permitted", file=sys.stderr)
        return 1
    path = Path(_sysroot()) / KMSG
    if path.is_file():
        sys.stdout.write(path.read_text())
    return 0
