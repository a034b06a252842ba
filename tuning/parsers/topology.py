"""Parsers for host topology tools: ``nvidia-smi topo -m``, ``/proc/interrupts``, ``lscpu`` and
``numactl -H`` (issue 3), plus CPU list helpers and the NUMA findings built on them.

Formats: NVIDIA nvidia-smi (``topo -m`` matrix and legends), Linux ``fs/proc/interrupts.c`` /
``kernel/irq/proc.c`` (``show_interrupts``), util-linux ``lscpu``, numactl ``numactl.c``;
CPU lists and masks as in Linux ``Documentation/admin-guide/cputopology.rst``.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from tuning.errors import ParseError
from tuning.cpulist import format_cpulist, parse_cpulist, parse_hex_mask  # noqa: F401  (re-exported)
from tuning.errors import InputError
from tuning.parsers.base import Finding, Parsed, Quantity, clean_lines, context_findings, parser
from tuning.parsers.text import is_prompt, placeholder, size_quantity

# ---------------------------------------------------------------- CPU lists


# ---------------------------------------------------------------- nvidia-smi topo -m

#: link kinds from nearest to farthest (nvidia-smi legend).
LINK_RANK = {"X": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}
_AFFINITY = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


class TopoDevice(BaseModel):
    """A row of the matrix. ``links``: column device -> link kind (``PIX``, ``NV18``, ``X``...).

    ``device`` is the RDMA device of a NIC through the NIC legend (``NIC1`` -> ``mlx5_3``).
    ``cpu_affinity`` and ``numa_affinity`` are CPU / node lists (GPU rows only; None when N/A).
    """

    name: str
    device: str | None = None
    links: dict[str, str]
    cpu_affinity: list[int] | None = None
    numa_affinity: list[int] | None = None
    gpu_numa_id: int | None = None


class NvidiaSmiTopo(Parsed):
    """``nvidia-smi topo -m`` result: GPU rows, NIC rows and the NIC legend (``NIC0`` -> ``mlx5_0``)."""

    gpus: list[TopoDevice]
    nics: list[TopoDevice]
    nic_legend: dict[str, str] = {}

    def nearest_nic(self, gpu: str) -> tuple[str, str] | None:
        """``(rdma_device, link)`` of the NIC nearest to ``gpu`` (ties: lowest NIC column), or None."""
        row = next(g for g in self.gpus if g.name == gpu)
        cands = [(LINK_RANK.get(link, 9), i, n) for i, n in enumerate(self.nics) if (link := row.links.get(n.name))]
        if not cands:
            return None
        _, _, nic = min(cands)
        return (nic.device or nic.name, row.links[nic.name])


def _topo_header(no: int, line: str) -> list[str]:
    merged = line
    for name in _AFFINITY:
        merged = re.sub(r"\s+".join(name.split()), name.replace(" ", "_"), merged)
    cols = merged.split()
    if not cols or not re.fullmatch(r"GPU\d+", cols[0]):
        raise ParseError("nvidia-smi-topo", no, "header 'GPU0 ... CPU Affinity NUMA Affinity'", line)
    return [c.replace("_", " ") if c.replace("_", " ") in _AFFINITY else c for c in cols]


def _topo_row(cols: list[str], no: int, line: str) -> TopoDevice:
    devs = [c for c in cols if c not in _AFFINITY]
    t = line.split()
    if len(t) < len(devs) + 1 or len(t) > len(cols) + 1:
        raise ParseError("nvidia-smi-topo", no, f"a device name and {len(devs)} link cells", line)
    aff = dict(zip([c for c in cols if c in _AFFINITY], (placeholder(v) for v in t[len(devs) + 1:])))
    try:
        return TopoDevice(name=t[0], links=dict(zip(devs, t[1:len(devs) + 1])),
                          cpu_affinity=parse_cpulist(aff["CPU Affinity"]) if aff.get("CPU Affinity") else None,
                          numa_affinity=parse_cpulist(aff["NUMA Affinity"]) if aff.get("NUMA Affinity") else None,
                          gpu_numa_id=int(aff["GPU NUMA ID"]) if aff.get("GPU NUMA ID") else None)
    except ValueError as exc:
        raise ParseError("nvidia-smi-topo", no, f"CPU list / NUMA id cells ({exc})", line) from exc


@parser("nvidia-smi-topo")
def parse_nvidia_smi_topo(text: str) -> NvidiaSmiTopo:
    """Parse ``nvidia-smi topo -m`` (tabs or spaces, ANSI header). NIC names always map through the legend.

    Findings: ``gpu_nic_far`` (warn) for a GPU whose nearest NIC is only PHB or SYS (GPUDirect RDMA
    weak; NCCL may not use GDR).
    """
    cols: list[str] | None = None
    rows: list[TopoDevice] = []
    legend: dict[str, str] = {}
    for no, line in enumerate(clean_lines(text), 1):
        s = line.strip()
        if not s or is_prompt(line) or s.endswith("Legend:") or re.match(r"(X|SYS|NODE|PHB|PXB|PIX|NV#)\s+=", s):
            continue
        if m := re.fullmatch(r"(NIC\d+):\s*(\S+)", s):
            legend[m[1]] = m[2]
        elif cols is None:
            cols = _topo_header(no, line)
        elif re.match(r"(GPU|NIC|mlx)\w*\s", s):
            rows.append(_topo_row(cols, no, line))
        else:
            raise ParseError("nvidia-smi-topo", no, "a GPUn/NICn matrix row or a legend line", line)
    gpus = [r for r in rows if re.fullmatch(r"GPU\d+", r.name)]
    nics = [r for r in rows if r not in gpus]
    if not gpus or cols is None or [r.name for r in rows] != [c for c in cols if c not in _AFFINITY]:
        raise ParseError("nvidia-smi-topo", 0, "a topology matrix with one row per GPU/NIC column")
    for nic in nics:
        if re.fullmatch(r"NIC\d+", nic.name) and nic.name not in legend:
            raise ParseError("nvidia-smi-topo", 0, f"a 'NIC Legend:' entry for {nic.name} (never guess the mapping)")
        nic.device = legend.get(nic.name, nic.name)
    result = NvidiaSmiTopo(tool="nvidia-smi-topo", gpus=gpus, nics=nics, nic_legend=legend)
    for gpu in gpus:
        near = result.nearest_nic(gpu.name)
        if near and near[1] in ("PHB", "SYS"):
            result.findings.append(Finding(code="gpu_nic_far", severity="warn", subject=gpu.name, message=(
                f"{gpu.name}: nearest NIC {near[0]} is {near[1]}; GPUDirect RDMA is weaker, NCCL may not use GDR")))
    return result


# ---------------------------------------------------------------- /proc/interrupts


class IrqLine(BaseModel):
    """A ``/proc/interrupts`` row. ``counts`` per CPU; ``bdf`` the PCI address in the chip or name, if any."""

    irq: str
    counts: list[int]
    chip: str | None = None
    name: str = ""
    bdf: str | None = None

    @property
    def busiest_cpu(self) -> int | None:
        """The CPU that handled most of this IRQ, or None if it never fired."""
        return max(range(len(self.counts)), key=self.counts.__getitem__) if any(self.counts) else None


class Interrupts(Parsed):
    """``/proc/interrupts`` result: the CPU numbers of the header and every row."""

    cpus: list[int]
    irqs: list[IrqLine]


_BDF = re.compile(r"([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])")
_TRIGGER = re.compile(r"(edge|level|fasteoi|simple)$", re.I)


def _irq_line(ncpu: int, no: int, line: str) -> IrqLine:
    label, _, rest = line.strip().partition(":")
    t = rest.split()
    counts: list[int] = []
    while len(counts) < min(ncpu, len(t)) and t[len(counts)].isdigit():
        counts.append(int(t[len(counts)]))
    tail = t[len(counts):]
    if label.isdigit() and len(counts) != ncpu:
        raise ParseError("interrupts", no, f"IRQ number and {ncpu} per-CPU counts", line)
    if not re.fullmatch(r"\w+", label) or not counts:
        raise ParseError("interrupts", no, "'IRQ: count ...' row", line)
    cut = next((i + 1 for i, tok in enumerate(tail) if _TRIGGER.search(tok)), 1 if label.isdigit() else 0)
    chip, name = " ".join(tail[:cut]) or None, " ".join(tail[cut:])
    m = _BDF.search(" ".join(tail))
    return IrqLine(irq=label, counts=counts, chip=chip, name=name, bdf=m[1].lower() if m else None)


@parser("interrupts")
def parse_interrupts(text: str) -> Interrupts:
    """Parse ``/proc/interrupts``: header ``CPU0 CPU1 ...``, rows ``IRQ: counts chip hwirq-edge name``.

    ``NMI``/``LOC``-style rows (no IRQ number) may carry fewer counts (``ERR:``, ``MIS:``).
    """
    cpus: list[int] | None = None
    irqs: list[IrqLine] = []
    for no, line in enumerate(clean_lines(text), 1):
        if not line.strip() or is_prompt(line):
            continue
        if cpus is None:
            cpus = [int(c[3:]) for c in line.split() if re.fullmatch(r"CPU\d+", c)]
            if not cpus or len(cpus) != len(line.split()):
                raise ParseError("interrupts", no, "header 'CPU0 CPU1 ...'", line)
            continue
        irqs.append(_irq_line(len(cpus), no, line))
    if not cpus or not irqs:
        raise ParseError("interrupts", 0, "a 'CPU0 ...' header and IRQ rows")
    return Interrupts(tool="interrupts", cpus=cpus, irqs=irqs)


def remote_numa_irqs(interrupts: Interrupts, bdf: str, local_cpus: list[int]) -> list[IrqLine]:
    """Completion IRQs (``mlx5_compN``) of the NIC at ``bdf`` whose busiest CPU is not NUMA-local.

    Args:
        interrupts: a parsed ``/proc/interrupts``.
        bdf: the NIC's PCI address (``0000:c1:00.0``); matched by address, not ifname.
        local_cpus: the CPUs of the NIC's NUMA node (sysfs ``local_cpulist``).
    """
    local, bdf = set(local_cpus), bdf.lower()
    return [q for q in interrupts.irqs if q.bdf == bdf and re.search(r"comp\d+", q.name)
            and q.busiest_cpu is not None and interrupts.cpus[q.busiest_cpu] not in local]


def irq_remote_numa(interrupts: Interrupts, bdf: str, local_cpus: list[int]) -> list[Finding]:
    """One ``irq_remote_numa`` warning when any completion IRQ of ``bdf`` runs off its NUMA node."""
    bdf = bdf.lower()
    remote = remote_numa_irqs(interrupts, bdf, local_cpus)
    if not remote:
        return []
    where = format_cpulist([interrupts.cpus[q.busiest_cpu] for q in remote if q.busiest_cpu is not None])
    return [Finding(code="irq_remote_numa", severity="warn", subject=bdf, message=(
        f"{len(remote)} completion IRQs of {bdf} run on CPUs {where}, outside its NUMA node"
        f" ({format_cpulist(local_cpus)})"))]


_BDF_SHORT = re.compile(r"[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")


@context_findings("interrupts", keys=("bdf", "local_cpus"))
def interrupts_context(result: Parsed, context: dict[str, str]) -> list[Finding]:
    """Findings of ``/proc/interrupts`` for one NIC: ``irq_remote_numa`` (see :func:`irq_remote_numa`).

    Args:
        result: the parsed ``/proc/interrupts``.
        context: ``bdf`` (``0000:c1:00.0``, or ``c1:00.0``) and ``local_cpus`` (sysfs ``local_cpulist``
            of the NIC, ``16-31``).

    Returns:
        The result's findings plus ``irq_remote_numa`` (warn), or ``irq_bdf_absent`` (warn) when no
        ``mlx5_compN`` IRQ of that address is listed (wrong address, or the driver is not bound).

    Raises:
        InputError: a missing key, an address that is not a PCI BDF, a bad CPU list.
    """
    assert isinstance(result, Interrupts)
    for key in ("bdf", "local_cpus"):
        if not context.get(key):
            raise InputError("--context", key, "interrupts findings need both bdf and local_cpus")
    bdf = context["bdf"].lower()
    bdf = f"0000:{bdf}" if _BDF_SHORT.fullmatch(bdf) else bdf
    if not _BDF.fullmatch(bdf):
        raise InputError("--context", "bdf", f"{context['bdf']!r} is not a PCI address like 0000:c1:00.0")
    try:
        local = parse_cpulist(context["local_cpus"])
    except ValueError as exc:
        raise InputError("--context", "local_cpus", f"{context['local_cpus']!r}: {exc}") from None
    if not any(q.bdf == bdf and re.search(r"comp\d+", q.name) for q in result.irqs):
        return [*result.findings, Finding(code="irq_bdf_absent", severity="warn", subject=bdf, message=(
            f"no completion IRQ (mlx5_compN) of {bdf} in /proc/interrupts: wrong address or driver not bound"))]
    return [*result.findings, *irq_remote_numa(result, bdf, local)]


# ---------------------------------------------------------------- lscpu


class Lscpu(Parsed):
    """``lscpu`` result. ``fields``: every key (nesting dropped) -> value; ``numa_nodes``: node -> CPUs."""

    fields: dict[str, str]
    cpus: int
    online_cpus: list[int] | None = None
    threads_per_core: int | None = None
    cores_per_socket: int | None = None
    sockets: int | None = None
    model_name: str | None = None
    numa_nodes: dict[int, list[int]] = {}
    flags: list[str] = []


def _lscpu_fields(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    key, col = None, 0
    for no, line in enumerate(clean_lines(text), 1):
        if not line.strip() or is_prompt(line):
            continue
        indent = len(line) - len(line.lstrip())
        if key and col and indent >= col:  # a wrapped value (Flags): continue it as printed
            fields[key] += line.strip()
            continue
        m = re.match(r"^\s*([^:]+?):(\s*)(.*)$", line)
        if not m:
            raise ParseError("lscpu", no, "'Key: value'", line)
        key, col = m[1].strip(), (m.start(3) if m[3] else 0)
        fields[key] = m[3].strip()
    return fields


@parser("lscpu")
def parse_lscpu(text: str) -> Lscpu:
    """Parse ``lscpu`` (old flat or new grouped layout; wrapped ``Flags`` joined as printed)."""
    f = _lscpu_fields(text)
    if "CPU(s)" not in f or not f["CPU(s)"].isdigit():
        raise ParseError("lscpu", 0, "'CPU(s): N'")
    ints = {k: int(f[k]) if f.get(k, "").isdigit() else None for k in ("Thread(s) per core", "Core(s) per socket", "Socket(s)")}
    try:
        numa = {int(m[1]): parse_cpulist(v) for k, v in f.items() if (m := re.fullmatch(r"NUMA node(\d+) CPU\(s\)", k))}
        online = parse_cpulist(f["On-line CPU(s) list"]) if "On-line CPU(s) list" in f else None
    except ValueError as exc:
        raise ParseError("lscpu", 0, f"CPU lists ({exc})") from exc
    return Lscpu(tool="lscpu", fields=f, cpus=int(f["CPU(s)"]), online_cpus=online, model_name=f.get("Model name"),
                 threads_per_core=ints["Thread(s) per core"], cores_per_socket=ints["Core(s) per socket"],
                 sockets=ints["Socket(s)"], numa_nodes=numa, flags=f.get("Flags", "").split())


# ---------------------------------------------------------------- numactl -H


class NumaNode(BaseModel):
    """One node of ``numactl -H``: CPUs, memory size and free (bytes, from ``MB`` = 2^20)."""

    node: int
    cpus: list[int] = []
    size: Quantity | None = None
    free: Quantity | None = None


class NumactlH(Parsed):
    """``numactl -H`` result: nodes and ``distances[from][to]``."""

    nodes: list[NumaNode]
    distances: dict[int, dict[int, int]] = {}


def _numa_line(nodes: dict[int, NumaNode], dist_cols: list[int], dist: dict, no: int, line: str) -> None:
    s = line.strip()
    if m := re.fullmatch(r"node (\d+) cpus:((?:\s+\d+)*)", s):
        nodes.setdefault(int(m[1]), NumaNode(node=int(m[1]))).cpus = [int(c) for c in m[2].split()]
    elif m := re.fullmatch(r"node (\d+) (size|free):\s+(\d+)\s*([KMG]B)", s):
        setattr(nodes.setdefault(int(m[1]), NumaNode(node=int(m[1]))), m[2], size_quantity(m[3], m[4]))
    elif re.fullmatch(r"node(\s+\d+)+", s):
        dist_cols[:] = [int(c) for c in s.split()[1:]]
    elif (m := re.fullmatch(r"(\d+):((?:\s+\d+)+)", s)) and len(m[2].split()) == len(dist_cols):
        dist[int(m[1])] = dict(zip(dist_cols, (int(v) for v in m[2].split())))
    elif not (s.startswith("available:") or s == "node distances:"):
        raise ParseError("numactl-H", no, "a numactl -H line ('node N cpus:', 'node N size:', distances)", line)


@parser("numactl-H")
def parse_numactl_h(text: str) -> NumactlH:
    """Parse ``numactl -H`` (``--hardware``)."""
    nodes: dict[int, NumaNode] = {}
    dist_cols: list[int] = []
    dist: dict[int, dict[int, int]] = {}
    for no, line in enumerate(clean_lines(text), 1):
        if line.strip() and not is_prompt(line):
            _numa_line(nodes, dist_cols, dist, no, line)
    if not nodes or set(dist) != set(nodes):
        raise ParseError("numactl-H", 0, "'node N cpus:' lines and a full 'node distances:' table")
    return NumactlH(tool="numactl-H", nodes=[nodes[k] for k in sorted(nodes)], distances=dist)


# ---------------------------------------------------------------- NVIDIA driver: GPUs


class GpuInformation(Parsed):
    """``/proc/driver/nvidia/gpus/<bdf>/information``: ``fields`` (key -> value as printed), the
    ``model``, ``bdf`` (``Bus Location``, lower case) and ``minor`` (``Device Minor``: ``/dev/nvidia<minor>``)."""

    fields: dict[str, str]
    model: str = ""
    bdf: str | None = None
    minor: int | None = None


@parser("nvidia-gpu-information")
def parse_gpu_information(text: str) -> GpuInformation:
    """Parse the NVIDIA driver's per-GPU ``information`` file (``Key: \\t value`` lines, tabs after the
    colon as the driver pads them; e.g. ``Device Minor: \\t 3``).

    Raises:
        ParseError: a line without ``key:``, or no ``Device Minor`` line.
    """
    fields: dict[str, str] = {}
    for no, line in enumerate(clean_lines(text), 1):
        if not line.strip() or is_prompt(line):
            continue
        key, sep, value = line.partition(":")
        if not sep or not key.strip():
            raise ParseError("nvidia-gpu-information", no, "'Key: value'", line)
        fields[key.strip()] = value.strip()
    minor = fields.get("Device Minor", "")
    if not minor.isdigit():
        raise ParseError("nvidia-gpu-information", 0, "a 'Device Minor: N' line")
    bdf = fields.get("Bus Location", "").lower() or None
    return GpuInformation(tool="nvidia-gpu-information", fields=fields, model=fields.get("Model", ""),
                          bdf=bdf, minor=int(minor))


class SmiGpu(BaseModel):
    """A ``nvidia-smi -L`` line: index, model name and UUID (``GPU-...``; MIG lines are skipped)."""

    index: int
    name: str
    uuid: str


class NvidiaSmiList(Parsed):
    """``nvidia-smi -L`` result."""

    gpus: list[SmiGpu]


@parser("nvidia-smi-L")
def parse_nvidia_smi_list(text: str) -> NvidiaSmiList:
    """Parse ``nvidia-smi -L``: ``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-f750...)`` per GPU
    (indented ``MIG ...`` lines under a GPU are skipped).

    Raises:
        ParseError: another line, or no GPU line.
    """
    gpus = []
    for no, line in enumerate(clean_lines(text), 1):
        if not line.strip() or is_prompt(line) or line.startswith((" ", "\t")) and "MIG" in line:
            continue
        m = re.fullmatch(r"GPU (\d+): (.+) \(UUID: (GPU-[0-9a-fA-F-]+)\)", line.strip())
        if not m:
            raise ParseError("nvidia-smi-L", no, "'GPU N: NAME (UUID: GPU-...)'", line)
        gpus.append(SmiGpu(index=int(m[1]), name=m[2], uuid=m[3]))
    if not gpus:
        raise ParseError("nvidia-smi-L", 0, "at least one 'GPU N: ...' line")
    return NvidiaSmiList(tool="nvidia-smi-L", gpus=gpus)
