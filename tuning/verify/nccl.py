"""Run nccl-tests (``all_reduce_perf``, ``alltoall_perf``) on tuned nodes: one launch path for
verification (:mod:`tuning.verify.nccl_verdict`) and burn-in (:mod:`tuning.burnin.run`).

Launch. A job of several nodes is ONE MPI job: nccl-tests forms a communicator across processes
only through MPI (built with ``MPI=1``); processes started one per node (``ssh``, ``srun`` without
PMI) each run alone (the parser's ``ranks_alone``, no multi-node result). fabtune therefore runs
Open MPI's ``mpirun`` on the job's first node, over the same SSH session verification uses,
unprivileged, with one app context per node::

    mpirun -np 1 --host node01 -x NCCL_IB_HCA==mlx5_0:1,... -x NCCL_IB_GID_INDEX=3 -x NCCL_IB_TC=106 \\
        all_reduce_perf -b 8388608 -e 134217728 -f 2 -g 8 : -np 1 --host node02 -x ... all_reduce_perf ...

so each node's process gets that node's own NCCL environment (:func:`tuning.verify.nccl_env.nccl_env`,
GID indexes read from the node right before the job); ``-g`` is the node's NICs (one GPU per rail
of a rail-optimised node). mpirun reaches the other nodes by their inventory names (the cluster's
own MPI set-up: host names resolvable, SSH between nodes). A job of one node starts the tool
directly with the environment in front of it (``NCCL_IB_TC=106 all_reduce_perf ... -g 8``: one
process, the node's GPUs over NVLink). Before a job every node is asked ``command -v`` for the
tool (and the launch node for ``mpirun``): a missing one is the harness error ``tool_missing``
and the job does not start.

The record is :class:`NcclRun`: bus bandwidth in GB/s as nccl-tests prints it (``# Avg bus
bandwidth``, :func:`tuning.parsers.nccl.parse_nccl`), or why there is none and whose fault that
is (:data:`HARNESS_KINDS`: the harness, never the fabric).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tuning.errors import InputError, ParseError, TuningError
from tuning.parsers.nccl import NO_HEADER, parse_nccl
from tuning.transport.base import Host, q
from tuning.verify.nccl_env import nccl_env

#: the nccl-tests binaries a job may run
TESTS = ("all_reduce_perf", "alltoall_perf")
#: why a job gave no bus bandwidth; the harness kinds are the verification's own failure on a node
#: (a tool missing, a launch whose ranks never met, a node that did not answer, output that is no
#: nccl-tests format: another program or build answered), never a fabric fault; ``no_value`` (a
#: job that ran in nccl-tests' format and ended without a bus bandwidth) and ``nccl_failure`` are the fabric's
ERROR_KINDS = ("tool_missing", "ranks_alone", "separate_runs", "single_rank", "nccl_failure", "no_value",
               "unreachable", "unreadable")
HARNESS_KINDS = ("tool_missing", "ranks_alone", "separate_runs", "single_rank", "unreachable", "unreadable")
#: a name mpirun's ``--host`` is given (RFC 1123 host name label rules, dots allowed)
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}", re.ASCII)
#: an NCCL variable's value: what nccl_env makes (``=mlx5_0:1,...``, digits)
_VALUE = re.compile(r"[=^]?[A-Za-z0-9_:,.-]{1,512}", re.ASCII)


@dataclass
class NcclRun:
    """One nccl-tests job.

    Attributes:
        test: ``all_reduce_perf`` | ``alltoall_perf``.  nodes: its nodes, in rank order.
        command: the command line run on ``nodes[0]``.  env: node -> the NCCL variables it ran with.
        notes: what :func:`tuning.verify.nccl_env.nccl_env` could not set.
        tos: ``NCCL_IB_TC`` (the ToS byte of its RDMA traffic); None: unset (traffic class 0).
        n_ranks: nccl-tests ranks (``# Rank`` lines).  rows: result rows.
        busbw_gbs: ``# Avg bus bandwidth`` in GB/s (10^9 bytes/s), the mean of ``samples``; None
            when no sample gave one.  samples: every run's value, in order.
        error_kind: one of :data:`ERROR_KINDS` (no value); ``error_class``: ``harness`` | ``fabric``
            | None; ``error``: the cause, one line.
        status / reasons / judged / baseline_gbs: set by :mod:`tuning.verify.nccl_verdict`.
    """

    test: str
    nodes: list[str]
    command: str = ""
    env: dict[str, dict[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    tos: int | None = None
    n_ranks: int = 0
    rows: int = 0
    busbw_gbs: float | None = None
    samples: list[float] = field(default_factory=list)
    error_kind: str | None = None
    error_class: str | None = None
    error: str | None = None
    status: str = "pass"
    reasons: list[str] = field(default_factory=list)
    judged: str | None = None
    baseline_gbs: float | None = None

    @property
    def name(self) -> str:
        """``all_reduce_perf node01,node02,...`` (the key a baseline holds it under: :func:`baseline_key`)."""
        return baseline_key(self.test, self.nodes)

    def failed(self, kind: str, cause: str) -> "NcclRun":
        """This run without a value: ``kind`` (:data:`ERROR_KINDS`), its class and ``cause``."""
        self.error_kind, self.error = kind, " ".join(cause.split())[:400]
        self.error_class = "harness" if kind in HARNESS_KINDS else "fabric"
        return self


def baseline_key(test: str, nodes: list[str]) -> str:
    """The key of a job in a baseline: ``nccl:all_reduce_perf:node01,node02`` (its test and nodes)."""
    return f"nccl:{test}:{','.join(nodes)}"


def node_env(dev, host: Host, timeout_s: float) -> tuple[dict[str, str], list[str]]:
    """Node ``dev``'s NCCL environment (:func:`tuning.verify.nccl_env.nccl_env`, its GID indexes
    read over ``host`` now), each value checked against :data:`_VALUE` before it reaches a shell.

    Raises:
        InputError: a value outside that grammar (names the variable).
    """
    from tuning.verify.ends import node_gid_indexes

    env, notes = nccl_env(dev, node_gid_indexes(host, dev.spec.nics, timeout_s))
    for k, v in env.items():
        if not _VALUE.fullmatch(v):
            raise InputError(dev.name, k, f"{v!r:.60} is not an NCCL value; allowed: letters, digits, '_:,.-'")
    return env, [n for n in notes if not n.startswith("NCCL_SOCKET_IFNAME")]


def tool_args(min_bytes: int, max_bytes: int, gpus: int) -> str:
    """nccl-tests' arguments: ``-b MIN -e MAX -f 2 -g GPUS`` (bytes; x2 per size)."""
    return f"-b {int(min_bytes)} -e {int(max_bytes)} -f 2 -g {max(1, int(gpus))}"


def command(test: str, nodes: list[str], envs: dict[str, dict[str, str]], args: str) -> str:
    """The job's command line on ``nodes[0]`` (module docstring): the tool with its environment
    for one node, ``mpirun`` with an app context per node for several.

    Raises:
        InputError: an unknown test or a node name that is no host name.
    """
    if test not in TESTS:
        raise InputError("fabtune_rollout", "nccl.tests", f"{test!r:.40}; allowed: {', '.join(TESTS)}")
    for n in nodes:
        if not _HOST.fullmatch(n):
            raise InputError("inventory", n, "is no host name mpirun can be given (letters, digits, '.', '-')")
    if len(nodes) == 1:
        return " ".join([*(f"{k}={q(v)}" for k, v in envs.get(nodes[0], {}).items()), test, args])
    contexts = [" ".join(["-np 1 --host", n, *(f"-x {k}={q(v)}" for k, v in envs.get(n, {}).items()), test, args])
                for n in nodes]
    return "mpirun " + " : ".join(contexts)


def missing_tools(test: str, node: str, host: Host, launcher: bool, timeout_s: float) -> list[str]:
    """``node01: all_reduce_perf`` for the tool (and, on the ``launcher`` of a job of several nodes,
    ``mpirun``) the node lacks, asked with ``command -v`` in one round trip; a node that does not
    answer is named with its error."""
    want = [test] + (["mpirun"] if launcher else [])
    try:
        res = host.run("; ".join(f"command -v {t} >/dev/null || echo {t}" for t in want), timeout=timeout_s,
                       privileged=False)
    except TuningError as e:
        return [f"{node}: unreachable ({' '.join(str(e).split())[:160]})"]
    return [f"{node}: {t}" for t in res.stdout.split() if t in want]


#: Open MPI's own launch failures (its help texts: help-orterun.txt, help-plm-base.txt) -> the
#: harness kind: the job never started, so it says nothing of the fabric
_LAUNCH_TEXTS = (("was unable to launch the specified application", "tool_missing"),
                 ("ORTE was unable to reliably start one or more daemons", "unreachable"))


def _launch_failure(rc: int, stderr: str) -> str | None:
    """The harness kind of a job that did not start: the shell could not run the launcher (exit
    126/127) or Open MPI said it could not start a daemon or the program; None when it started."""
    if rc in (126, 127):
        return "tool_missing"
    return next((kind for text, kind in _LAUNCH_TEXTS if text in stderr), None)


def _first_words(stderr: str) -> str:
    """The telling line of a launcher's stderr: the first that is not a rule of dashes."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and set(ln.strip()) != {"-"}]
    return (lines or ["no output"])[0][:160]


def span(nodes: list[str]) -> str:
    """A job's nodes for people: ``node01, node02`` or ``node01..node04`` (more than two)."""
    return f"{nodes[0]}..{nodes[-1]}" if len(nodes) > 2 else ", ".join(nodes) or "no node"


def run_once(job: NcclRun, hosts: dict[str, Host], timeout_s: float) -> NcclRun:
    """Run ``job.command`` once on its first node and read one sample into ``job`` (its value, or
    why there is none: :meth:`NcclRun.failed`)."""
    try:
        res = hosts[job.nodes[0]].run(job.command, timeout=timeout_s, privileged=False)
    except TuningError as e:
        return job.failed("unreachable", f"{job.nodes[0]}: {e}")
    launch = _launch_failure(res.rc, res.stderr)
    if launch is not None:
        return job.failed(launch, f"{job.nodes[0]}: {job.test} could not start (exit {res.rc}: "
                                  f"{_first_words(res.stderr)})")
    try:
        parsed = parse_nccl(res.stdout, job.test)
    except ParseError as e:  # no nccl-tests run printed it: the harness; one that started and broke off: no_value
        kind = "unreadable" if e.line_no == 0 or e.expected == NO_HEADER else "no_value"
        return job.failed(kind, f"{job.test} on {job.nodes[0]} (exit {res.rc}): {e}")
    job.n_ranks, job.rows = parsed.n_ranks, len(parsed.rows)
    if parsed.failure is not None:
        kind = parsed.failure.kind if parsed.failure.kind in ERROR_KINDS else "nccl_failure"
        return job.failed(kind, f"{parsed.failure.message} ({parsed.failure.likely_cause})")
    if len(job.nodes) > 1 and len(parsed.hosts) < len(job.nodes):
        return job.failed("single_rank", f"{job.test}: ranks on {', '.join(parsed.hosts)} only, not on every node "
                                         f"of the job ({', '.join(job.nodes)}): the launch did not reach them")
    if parsed.n_ranks < 2:  # nccl-tests prints busbw = algbw x 2(n-1)/n = 0: not a 0 GB/s fabric
        return job.failed("single_rank", f"1 rank: {job.test} measured nothing (busbw 0 by definition)")
    if parsed.avg_busbw is None or res.rc != 0:
        return job.failed("no_value", f"{job.test} on {job.nodes[0]}: exit {res.rc}, no Avg bus bandwidth")
    job.samples.append(float(parsed.avg_busbw.raw))
    job.busbw_gbs = round(sum(job.samples) / len(job.samples), 4)
    return job


def _node_ready(test: str, dev, host: Host, launcher: bool, timeout_s: float) -> tuple[list[str], tuple | str]:
    """One node's part of :func:`prepare`: (what it lacks, its ``(env, notes)`` or why it was not read)."""
    missing = missing_tools(test, dev.name, host, launcher, timeout_s)
    if missing:
        return missing, ""
    try:
        return [], node_env(dev, host, timeout_s)
    except TuningError as e:
        return [], f"{dev.name}: NCCL environment not read: {e}"


def prepare(test: str, devices: list, hosts: dict[str, Host], sizes: tuple[int, int], timeout_s: float) -> NcclRun:
    """A job of ``test`` over ``devices`` (inventory nodes, rank order) ready to run: every node at
    once (a thread each, up to 16) checked for the tools (:func:`missing_tools`) and its environment
    read (:func:`node_env`), then the command built. A job that cannot start comes back failed
    (``tool_missing`` / ``unreachable``)."""
    from concurrent.futures import ThreadPoolExecutor

    nodes = [d.name for d in devices]
    job = NcclRun(test, nodes)
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(devices)))) as ex:
        ready = list(ex.map(lambda i: _node_ready(test, devices[i], hosts[nodes[i]], i == 0 and len(nodes) > 1,
                                                  timeout_s), range(len(devices))))
    missing = [m for lacks, _ in ready for m in lacks]
    if missing:
        kind = "unreachable" if all("unreachable" in m for m in missing) else "tool_missing"
        return job.failed(kind, "not on the nodes' PATH: " + "; ".join(missing))
    for d, (_, got) in zip(devices, ready):
        if isinstance(got, str):
            return job.failed("unreachable", got)
        job.env[d.name], notes = got
        job.notes += [f"{d.name}: {n}" for n in notes]
    tc = job.env[nodes[0]].get("NCCL_IB_TC")
    job.tos = int(tc) if tc and tc.isdigit() else None
    gpus = min(len(d.spec.nics) for d in devices) or 1
    job.command = command(test, nodes, job.env, tool_args(*sizes, gpus))
    return job


def run_job(test: str, devices: list, hosts: dict[str, Host], sizes: tuple[int, int], timeout_s: float,
            samples: int = 1, run_timeout_s: float | None = None) -> NcclRun:
    """:func:`prepare` then :func:`run_once` ``samples`` times (stopping at the first without a value).

    Args:
        timeout_s: seconds per round trip (the tool checks, the GID reads) and, unless
            ``run_timeout_s`` is given, per run of the job.

    Returns:
        The :class:`NcclRun`; never raises for a node's failure (it is the run's ``error``).
    """
    job = prepare(test, devices, hosts, sizes, timeout_s)
    for _ in range(samples if not job.error_kind else 0):
        if run_once(job, hosts, run_timeout_s or timeout_s).error_kind:
            break
    return job
