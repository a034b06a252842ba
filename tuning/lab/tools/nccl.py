"""``all_reduce_perf`` / ``alltoall_perf`` (NVIDIA/nccl-tests) and ``mpirun`` (Open MPI) stand-ins
for the lab's nodes.

Output: nccl-tests v2.19.6 (``src/util.cu`` writeDeviceReport, writeResultHeader,
writeBenchmarkLinePreamble/Body with getFloatStr, writeResultFooter; ``src/common.cu`` prints from
proc 0 only), to the character as ``tests/parsers/cases/nccl_tests__v2.19.6_all_reduce_single_rank.txt``
(rendered from those printf formats). A failed run prints nccl-tests' ``NCCLCHECK`` line
(``<host>: Test NCCL failure common.cu:<line> '<error> / <last error>'``) and exits 1.

Launch, as on a cluster:

- ``mpirun`` (Open MPI syntax: app contexts separated by ``:``, each ``-np N``, ``--host|-H a,b``,
  ``-x NAME=VALUE`` or ``-x NAME``; ``--mca K V``, ``--bind-to X``, ``--map-by X`` taken and
  ignored) starts one MPI job: its ranks are the contexts' processes, placed on their hosts in
  order; each process drives ``-g`` GPUs (nccl-tests' ranks = processes x GPUs). Every process's
  NCCL environment is its context's ``-x`` values over mpirun's own environment, as Open MPI
  exports them. Rank 0 prints the job (MPI=1 build: only proc 0 prints).
- the tool started alone (no ``OMPI_COMM_WORLD_SIZE``): a job of one process on this node
  (``FABTUNE_LAB_NODE``). Several such processes (an ``ssh``/``srun`` per node of a binary that
  is not one MPI job) each print a whole 1-rank run: together the parser's ``ranks_alone``.

Bus bandwidth (GB/s, the fabric model :func:`tuning.lab.model.compute_sizes` on every ring hop):
one node: the node's NVLink (:data:`NVLINK_BUSBW_GBS`), 0 for one rank (busbw = algbw x 2(n-1)/n).
Several nodes: NCCL stripes its channels over the node's HCAs (``NCCL_IB_HCA``: ``=`` exact
names, ``^`` excluded, else prefixes; unset: every RDMA device), the k-th HCA of each node
talking to the k-th of the next in the ring; each hop is a ``write_bw`` of 4 MiB messages in the
class ``NCCL_IB_TC`` sets (unset: traffic class 0, NCCL's default, lossy where PFC protects
another priority) with GID ``NCCL_IB_GID_INDEX`` (unset: the first RoCE v2 IPv4 entry, as NCCL
picks). The job moves ``HCAs x the slowest hop`` (a ring waits on its slowest link; degrades,
noise, MTU and class penalties come with the model) x :data:`NCCL_EFFICIENCY`. An
``NCCL_IB_HCA`` that matches no device leaves NCCL on its socket transport
(:data:`SOCKET_GBPS`); a hop that cannot connect (link down, a GID that is no RoCE v2 entry of
its address) fails the run. Per size: busbw(s) = B x s / (s + :data:`HALF_BYTES`); algbw =
busbw / (2(n-1)/n) for all_reduce, / ((n-1)/n) for alltoall; time = size / algbw.

Only the stdlib and the lab's stdlib-only model are imported (as the perftest stand-ins).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tuning.lab.fabric import GPU_BDFS, Fabric
from tuning.lab.hw_gpu import GPU_MODEL

VERSION_LINE = "# nccl-tests version 2.19.6 nccl-headers=22807 nccl-library=22807"
#: the collectives served: binary -> (type, redop, busbw / algbw factor of n ranks)
COLLECTIVES = {"all_reduce_perf": ("float", "sum", lambda n: 2 * (n - 1) / n),
               "alltoall_perf": ("float", "none", lambda n: (n - 1) / n)}
#: NCCL's share of the hops' RDMA bandwidth a ring reaches (protocol and synchronisation overhead)
NCCL_EFFICIENCY = 0.92
#: busbw of one node's GPUs over NVLink (H100 HGX, GB/s, all_reduce at large sizes)
NVLINK_BUSBW_GBS = 360.0
#: the socket transport NCCL falls back to without an IB device (Gb/s over the bootstrap network)
SOCKET_GBPS = 10.0
#: message size at which a size's busbw is half the large-message busbw (bytes)
HALF_BYTES = 4 * 2**20
#: the message size each ring hop is measured with (bytes)
HOP_BYTES = 4 * 2**20
BASE_LAT_US = 12.0
HEADER = ["#", "#                                                              out-of-place                       in-place"
          "          ",
          "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   "
          "busbw  #wrong ",
          "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  "
          "(GB/s)         "]
NCCL_ERRORS = {"connect_failed": "remote process exited or there was a network error",
               "qp_rtr_failed": "unhandled system error (run with NCCL_DEBUG=INFO for details)"}


def parse_size(text: str) -> int:
    """nccl-tests' ``parsesize``: a number with an optional K/M/G suffix (powers of 1024).

    Raises:
        ValueError: not such a size.
    """
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    t = text.strip().upper()
    mult = units.get(t[-1:], 1)
    digits = t[:-1] if t[-1:] in units else t
    if not digits.isdigit():
        raise ValueError(f"invalid size {text!r}")
    return int(digits) * mult


def test_args(argv: list[str]) -> dict:
    """The nccl-tests options the lab reads: ``-b/-e`` sizes, ``-f`` factor, ``-g`` GPUs, ``-n``
    iterations, ``-w`` warmup, ``-c`` check; others with a value are taken and ignored.

    Raises:
        ValueError: a bad value or an option without its value.
    """
    out = {"b": 32 * 2**20, "e": 32 * 2**20, "f": 2, "g": 1, "n": 20, "w": 1, "c": 1, "t": 1}
    flags = {"-b": "b", "--minbytes": "b", "-e": "e", "--maxbytes": "e", "-f": "f", "--stepfactor": "f",
             "-g": "g", "--ngpus": "g", "-n": "n", "--iters": "n", "-w": "w", "--warmup_iters": "w",
             "-c": "c", "--check": "c", "-t": "t", "--nthreads": "t"}
    i = 0
    while i < len(argv):
        key = flags.get(argv[i])
        if i + 1 >= len(argv):
            raise ValueError(f"option {argv[i]} needs a value")
        if key is not None:
            out[key] = parse_size(argv[i + 1]) if key in ("b", "e") else int(argv[i + 1])
        i += 2
    if out["b"] > out["e"] or out["f"] < 2 or out["g"] < 1:
        raise ValueError(f"invalid sizes/factor/GPUs: {argv}")
    return out


def hcas(node, spec: str | None) -> list:
    """The node's NICs NCCL uses under ``NCCL_IB_HCA`` ``spec`` (NCCL's ``parseStringList``:
    ``=`` exact names, ``^`` excluded, else name prefixes; ``:port`` ignored), in rail order."""
    nics = sorted(node.nics, key=lambda n: n.rail)
    if not spec:
        return nics
    exact, exclude = spec.startswith("="), spec.startswith("^")
    names = [p.split(":")[0] for p in spec.lstrip("=^").split(",") if p]
    if exclude:
        return [n for n in nics if n.rdma_device not in names]
    return [n for n in nics if any(n.rdma_device == x if exact else n.rdma_device.startswith(x) for x in names)]


def ring_gbps(lab: Path, fabric: Fabric, ranks: list[dict]) -> tuple[float, str | None, str]:
    """The job's per-rank RDMA bandwidth (Gb/s) over the ring of its nodes (module docstring), the
    error of a hop that cannot connect (``connect_failed`` / ``qp_rtr_failed``) and its reason."""
    from tuning.lab.model import compute_sizes

    order = list(dict.fromkeys(r["node"] for r in ranks))
    env = {r["node"]: r["env"] for r in reversed(ranks)}
    nodes = {n.name: n for n in fabric.nodes}
    used = {n: hcas(nodes[n], env[n].get("NCCL_IB_HCA")) for n in order}
    width = min(len(v) for v in used.values())
    if width == 0:
        return SOCKET_GBPS, None, "no IB device matches NCCL_IB_HCA: NCCL uses its socket transport"
    slowest = None
    for i, a in enumerate(order):
        b = order[(i + 1) % len(order)]
        tc = env[a].get("NCCL_IB_TC")
        gid = env[a].get("NCCL_IB_GID_INDEX")
        for k in range(width):
            o = compute_sizes(lab, a, used[a][k].rdma_device, b, used[b][k].rdma_device,
                              int(gid) if gid and gid.isdigit() else None, "write_bw",
                              server_gid_index=int(env[b]["NCCL_IB_GID_INDEX"])
                              if env[b].get("NCCL_IB_GID_INDEX", "").isdigit() else None,
                              sizes=[HOP_BYTES], flow_tos=int(tc) & 0xFF if tc and tc.isdigit() else 0)[0]
            if o.error:
                return 0.0, o.error, "; ".join(o.reasons)
            slowest = o.bw_avg_gbps if slowest is None else min(slowest, o.bw_avg_gbps)
    return width * (slowest or 0.0) * NCCL_EFFICIENCY, None, ""


def _float_str(value: float, width: int) -> str:
    """nccl-tests' ``getFloatStr`` (src/util.cu): 2, 1 or 0 decimals to fit ``width``, else %e."""
    power, val = 0, 1
    while value >= val:
        power += 1
        val *= 10
    if power < width - 2:
        return "%*.2f" % (width, value)
    if power < width - 1:
        return "%*.1f" % (width, value)
    if power < width + 1:
        return "%*.0f" % (width, value)
    return "%*.1e" % (width, value)


def rows(coll: str, n_ranks: int, busbw_gbs: float, args: dict) -> tuple[list[str], float]:
    """The result rows (``writeBenchmarkLinePreamble`` + two ``writeBenchmarkLineBody``) and the
    ``Avg bus bandwidth`` (the mean of every printed half's busbw, GB/s). As nccl-tests does, the
    time is measured (here: :data:`BASE_LAT_US` + size over the size's bandwidth), algbw = size /
    time and busbw = algbw x the collective's factor (0 for one rank)."""
    dtype, op, factor = COLLECTIVES[coll]
    f = factor(n_ranks)
    out, total, count = [], 0.0, 0
    size = args["b"]
    while size <= args["e"]:
        # one rank: a local copy at the GPU's memory speed; busbw is 0 whatever it takes
        speed = busbw_gbs * size / (size + HALF_BYTES) / f if f else 200.0
        halves = ""
        for t in (BASE_LAT_US + size / speed / 1e3, (BASE_LAT_US + size / speed / 1e3) * 1.002):
            alg = size / t / 1e3
            halves += "  %7s  %6s  %6s  %6g" % (_float_str(t, 7), _float_str(alg, 6), _float_str(alg * f, 6), 0)
            total, count = total + alg * f, count + 1
        out.append("%12li  %12li  %8s  %6s  %6s" % (size, size // 4, dtype, op, "%6i" % -1) + halves)
        size *= args["f"]
    return out, (total / count if count else 0.0)


def rank_lines(ranks: list[dict], gpus: int) -> list[str]:
    """``#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s`` per GPU of each process."""
    lines, local = [], {}
    for proc, r in enumerate(ranks):
        for g in range(gpus):
            dev = local.get(r["node"], 0)
            local[r["node"]] = dev + 1
            bdf = GPU_BDFS[dev % len(GPU_BDFS)]
            lines.append("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s"
                         % (proc * gpus + g, 0, r["pid"], r["node"], dev, bdf.rsplit(".", 1)[0], GPU_MODEL))
    return lines


def run_job(coll: str, ranks: list[dict], argv: list[str]) -> int:
    """Print one nccl-tests job (rank 0's output) and return its exit status.

    Args:
        coll: ``all_reduce_perf`` or ``alltoall_perf``.
        ranks: one ``{"node", "env", "pid"}`` per process, in rank order.
        argv: the tool's arguments (:func:`test_args`).
    """
    try:
        args = test_args(argv)
    except ValueError as e:
        print(f"{coll}: {e}", file=sys.stderr)
        return 1
    lab = Path(os.environ["FABTUNE_LAB_DIR"])
    fabric = Fabric.load(lab / "fabric.json")
    n = len(ranks) * args["g"]
    head = [VERSION_LINE, f"# Collective test starting: {coll}",
            f"# nThread {args['t']} nGpus {args['g']} minBytes {args['b']} maxBytes {args['e']} step: {args['f']}(factor)"
            f" warmup iters: {args['w']} iters: {args['n']} agg iters: 1 validation: {args['c']} graph: 0 unalign: 0",
            "#", "# Using devices", *rank_lines(ranks, args["g"])]
    print("\n".join(head), flush=True)
    if len({r["node"] for r in ranks}) > 1:
        gbps, error, why = ring_gbps(lab, fabric, ranks)
        if error:
            print(f"{ranks[0]['node']}: Test NCCL failure common.cu:1031 '{NCCL_ERRORS[error]} / {why}'", flush=True)
            return 1
        busbw = gbps / 8
    else:
        busbw = NVLINK_BUSBW_GBS
    body, avg = rows(coll, n, busbw, args)
    print("\n".join([*HEADER, *body, "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : %g " % avg,
                     "#", f"# Collective test concluded: {coll}", "#", ""]), flush=True)
    return 0


def _standalone(coll: str, argv: list[str]) -> int:
    """The tool run on its own (not under the lab's ``mpirun``): one process on this node."""
    node = os.environ.get("FABTUNE_LAB_NODE")
    if not node or not os.environ.get("FABTUNE_LAB_DIR"):
        print(f"{coll} (lab): FABTUNE_LAB_DIR and FABTUNE_LAB_NODE must be set", file=sys.stderr)
        return 1
    env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    return run_job(coll, [{"node": node, "env": env, "pid": os.getpid()}], argv)


def all_reduce_perf(argv: list[str]) -> int:
    """``all_reduce_perf`` stand-in (module docstring). Returns the exit status."""
    return _standalone("all_reduce_perf", argv)


def alltoall_perf(argv: list[str]) -> int:
    """``alltoall_perf`` stand-in (module docstring). Returns the exit status."""
    return _standalone("alltoall_perf", argv)


#: Open MPI options the stand-in takes and ignores, with their one value
_IGNORED = {"--mca": 2, "--bind-to": 1, "--map-by": 1, "--rank-by": 1}
_SWITCHES = {"--allow-run-as-root", "--oversubscribe", "--tag-output", "-q", "--quiet"}


def app_contexts(argv: list[str]) -> list[dict]:
    """mpirun's argv as app contexts ``{"np", "hosts", "env", "program", "args"}`` (module docstring).

    Raises:
        ValueError: an option without its value, a context without a program or ``-np``.
    """
    out = []
    for part in _split(argv, ":"):
        ctx: dict = {"np": None, "hosts": [], "env": {}, "program": None, "args": []}
        i = 0
        while i < len(part) and ctx["program"] is None:
            w = part[i]
            if w in ("-np", "-n", "--np", "-H", "--host", "-x") and i + 1 >= len(part):
                raise ValueError(f"option {w} needs a value")
            if w in ("-np", "-n", "--np"):
                ctx["np"], i = int(part[i + 1]), i + 2
            elif w in ("-H", "--host"):
                ctx["hosts"] += [h.split(":")[0] for h in part[i + 1].split(",") if h]
                i += 2
            elif w == "-x":
                name, eq, value = part[i + 1].partition("=")
                ctx["env"][name] = value if eq else os.environ.get(name, "")
                i += 2
            elif w in _IGNORED:
                i += 1 + _IGNORED[w]
            elif w in _SWITCHES:
                i += 1
            else:
                ctx["program"], ctx["args"] = w, part[i + 1:]
        if ctx["program"] is None or not ctx["np"] or not ctx["hosts"]:
            raise ValueError("each app context needs -np N, --host HOSTS and a program")
        out.append(ctx)
    return out


def _split(words: list[str], sep: str) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    for w in words:
        if w == sep:
            parts.append([])
        else:
            parts[-1].append(w)
    return parts


_RULE = "-" * 74
#: Open MPI 1.8-4.x (ORTE, help-plm-base.txt) after ssh could not reach a host, as users' reports on
#: the Open MPI users list quote it (mpirun 1.8.8 and 1.10.0: "ssh: Could not resolve hostname ...")
ORTE_NO_DAEMONS = f"""{_RULE}
ORTE was unable to reliably start one or more daemons.
This usually is caused by:

* not finding the required libraries and/or binaries on
  one or more nodes. Please check your PATH and LD_LIBRARY_PATH
  settings, or configure OMPI with --enable-orterun-prefix-by-default

* lack of authority to execute on one or more specified nodes.
  Please verify your allocation and authorities.

* the inability to write startup files into /tmp (--tmpdir/orte_tmpdir_base).
  Please check with your sys admin to determine the correct location to use.

*  compilation of the orted with dynamic libraries when static are required
  (e.g., on Cray). Please check your configure cmd line and consider using
  one of the contrib/platform definitions for your system type.

* an inability to create a connection back to mpirun due to a
  lack of common network interfaces and/or no route found between
  them. Please check network connectivity (including firewalls
  and network routing requirements).
{_RULE}
"""
#: Open MPI (help-orterun.txt) for a program a node cannot run, as quoted in users' reports and an
#: MTT result (exit status 131)
NO_EXECUTABLE = f"""{_RULE}
mpirun was unable to launch the specified application as it could not access
or execute an executable:

Executable: {{program}}
Node: {{node}}

while attempting to start process rank {{rank}}.
{_RULE}
"""


def mpirun(argv: list[str]) -> int:
    """``mpirun`` stand-in: one MPI job of the app contexts' processes (module docstring); only the
    lab's nccl-tests stand-ins run under it. Returns the exit status."""
    try:
        contexts = app_contexts(argv)
    except ValueError as e:
        print(f"mpirun: {e}", file=sys.stderr)
        return 1
    lab = os.environ.get("FABTUNE_LAB_DIR")
    nodes = {n.name for n in Fabric.load(Path(lab) / "fabric.json").nodes} if lab else set()
    base = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    ranks = []
    for ctx in contexts:
        unknown = [h for h in ctx["hosts"] if h not in nodes]
        if unknown:
            print(f"ssh: Could not resolve hostname {unknown[0]}: Name or service not known\n{ORTE_NO_DAEMONS}",
                  file=sys.stderr, end="")
            return 1
        if ctx["program"] not in COLLECTIVES:
            print(NO_EXECUTABLE.format(program=ctx["program"], node=ctx["hosts"][0], rank=len(ranks)),
                  file=sys.stderr, end="")
            return 131
        for k in range(ctx["np"]):
            ranks.append({"node": ctx["hosts"][k % len(ctx["hosts"])], "env": {**base, **ctx["env"]},
                          "pid": os.getpid() + len(ranks) + 1, "program": ctx["program"], "args": ctx["args"]})
    return run_job(ranks[0]["program"], ranks, ranks[0]["args"])
