"""``fabtune node check``: Slurm's hooks on the node itself (issue 23), reads only (no RDMA traffic).

The prolog gate (:func:`gate`, ``--prolog``): what a job needs before it starts, per NIC of the
inventory node: the RDMA port ``ACTIVE`` (``/sys/class/infiniband/DEV/ports/1/state``), a RoCE v2
GID holding the NIC's IPv4 address (the GID table, :func:`tuning.verify.ends.node_ends`), and the
tuned MTU, PFC and trust (the ``mtu`` and ``nic_qos`` domains' own readers; a setting whose live
value is not the tuned one is a problem). One round trip for the ends, one for the domains.

An InfiniBand node (``ib_ports`` in the inventory, :mod:`tuning.model.ib_ports`): the gate also judges
EVERY port of every HCA the intent names, from sysfs in one round trip (:mod:`tuning.node.ib_ports`):
one line per finding, ``ib-port-not-active mlx5_3 port 1: state 1: DOWN, not ACTIVE``; a node with
``ib_ports`` and no ``nics`` gets only those (no RoCE GID, MTU or PFC to check). A port that cannot be
read is :class:`Unread` (exit 4), never a fault.

The passive check (:func:`passive`, ``--passive``, Slurm's ``HealthCheckProgram``): the gate's
problems plus the local health read (:func:`tuning.burnin.health.local_document`: counters,
PCIe width, XIDs, GPUs), judged by the same localisation. Slurm runs it every ``HealthCheckInterval``,
so its NIC counters (``ethtool -S``, ``hw_counters``, ``carrier_down_count``: totals since boot) are
judged on what they rose since the check's previous read, kept on the node in a state file
(:data:`STATE_PATH` under the sysroot, or ``--state``; :func:`load_state` / :func:`save_state`), as
``fabtune burnin`` compares a baseline read with a second one. A counter with no previous value (no
state file, or one refused: missing, unreadable, corrupt, a link, another node's) or below it (reset,
reboot) is not judged this time: this read is its baseline. The other checks do not depend on it. A failing node is drained through
``scontrol`` with the reason ``fabtune:health-...: ...`` (:func:`tuning.burnin.drain.reason`) unless
someone else's reason is on it; a passing node is resumed only when its reason is a health check's
(``fabtune:health-``: a rollout's batch hold, ``fabtune:RUN_ID: rollout batch``, is its run's to resume).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from tuning.burnin import drain as dr
from tuning.errors import TuningError

#: the gate's domains and, of nic_qos, the keys a job needs (PFC and trust on the tuned priority)
GATE_DOMAINS = {"mtu", "nic_qos"}
GATE_KEYS = ("mtu/", "pfc/", "trust/")
#: the drain reasons a health check writes start with this; only they are resumed by a passing check
HEALTH_PREFIX = f"{dr.REASON_PREFIX}health-"
#: exit codes: 0 healthy, 1 unhealthy (drained), 2 bad input (typer / InputError), 4 could not read
EXIT_HEALTHY, EXIT_UNHEALTHY, EXIT_UNREAD = 0, 1, 4
#: the passive check's state file under the node's sysroot (``--state`` overrides): its last counter read
STATE_PATH = "var/lib/fabtune/node-check.json"
#: the state file's ``format``; a file of another format is no previous read
STATE_FORMAT = "fabtune-node-check/1"
#: a state file larger than this is refused (8 NICs of ~200 counters are ~40 kB)
STATE_MAX_BYTES = 1 << 20


class Unread(TuningError):
    """The node could not be read (its shell, a reader failed, nothing to check): never a fabric fault (exit 4)."""

    exit_code = EXIT_UNREAD


class NotReady(TuningError):
    """The prolog gate found a problem (exit 1): one line naming each; Slurm drains the node and requeues the job."""

    exit_code = EXIT_UNHEALTHY


def gate(dev, sysroot: str | None) -> list[str]:
    """The prolog gate's problems on this node (module docstring), one line each, e.g.
    ``mlx5_0: port 1: DOWN, not ACTIVE`` or ``mtu/enp12s0np0: 1500, tuned 4096``; [] when ready.

    Args:
        dev: the inventory node (its NICs and policy).  sysroot: where its files are (None: the inventory's).

    Raises:
        Unread: the node has no NICs to check, or its shell or a reader failed (names which).
    """
    from tuning.targets.node import NodeTarget
    from tuning.verify.ends import node_ends

    if not dev.spec.nics and dev.spec.ib_ports is None:
        raise Unread("the inventory names no NIC on this node: nothing to check", host=dev.name)
    target = NodeTarget.local(dev, sysroot)
    try:
        target.open()
        ib = _ib_problems(dev, target.host)
        if not dev.spec.nics:
            return ib
        state = target.collect(GATE_DOMAINS)
        drift = [c for c in target.plan(state, GATE_DOMAINS) if c.key.startswith(GATE_KEYS)]
        ends = node_ends(target.host, dev.spec.nics)
    except TuningError as e:
        raise Unread(f"cannot read the node: {_line(e)}", host=dev.name) from e
    finally:
        target.close()
    out = []
    for nic in dev.spec.nics:
        end = ends[nic.rdma_device]
        if isinstance(end, TuningError) and "no RoCE v2 GID" not in str(end):
            raise Unread(f"cannot read {nic.rdma_device}: {_line(end)}", host=dev.name)
        if isinstance(end, TuningError):
            out.append(_line(end))
        elif "ACTIVE" not in (end.port_state or ""):
            out.append(f"{nic.rdma_device}: port {end.port_state or 'state unreadable'}, not ACTIVE")
    out += [f"{c.key}: {c.before if c.before is not None else 'absent'}, tuned {c.after}" for c in drift]
    return out + ib


def _ib_problems(dev, host) -> list[str]:
    """The node's InfiniBand port findings as gate lines (``CODE HCA port P: ...``); [] without ``ib_ports``.
    Raises TuningError (IbReadError, CommandError) when a port cannot be read."""
    if dev.spec.ib_ports is None:
        return []
    from tuning.node.ib_ports import judge, read_ports

    return [f"{f.code} {f.message}" for f in judge(dev.name, read_ports(host), dev.spec.ib_ports)]


@dataclass
class Verdict:
    """A passive check's outcome: ``problems`` (gate lines and health findings' messages, one line
    each), ``doc`` (the health document), ``drain`` / ``undrain`` (:func:`tuning.burnin.drain.drain`
    and ``undrain``'s results; None when not acted), ``counters`` (how the counters were judged:
    :func:`passive`)."""

    node: str
    problems: list[str] = field(default_factory=list)
    doc: dict = field(default_factory=dict)
    drain: dict | None = None
    undrain: dict | None = None
    counters: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0 healthy, 1 unhealthy (drained, or left to another's drain, or the drain failed), 4 healthy but
        Slurm's view of the node could not be read or resumed (``scontrol`` failed: never read as done), or
        the state file could not be written (the next check could judge no counter)."""
        if self.problems:
            return EXIT_UNHEALTHY
        failed = (self.undrain or {}).get("failed") or self.counters.get("save_error")
        return EXIT_UNREAD if failed else EXIT_HEALTHY


def passive(dev, sysroot: str | None, act: bool = True, state: Path | str | None = None) -> Verdict:
    """The passive check of this node (module docstring): read, judge, keep the counters, drain or resume (``act``).

    Args:
        dev: the inventory node.  sysroot: where its files are (None: the inventory's).
        act: drain / resume through ``scontrol`` (False: a dry run that still reads the node's reason).
        state: the state file (None: :data:`STATE_PATH` under the sysroot).

    Returns:
        A :class:`Verdict`; its ``counters``: ``{"state": path, "judged": bool, "since": epoch seconds of the
        previous read or None, "why": why not judged or None, "baseline": ["mlx5_0:name", ...] (counters
        read as a new baseline: reset or new), "saved": bool, "save_error": str or None}``.

    Raises:
        Unread: as :func:`gate`, or the health read found no RDMA device under ``sysroot``.
    """
    from tuning.burnin.health import local_document, local_read
    from tuning.burnin.run import BurninOptions

    problems = gate(dev, sysroot)
    root = Path(sysroot or dev.connection.sysroot or "/")
    path = Path(state) if state is not None else root / STATE_PATH
    snap, topo = local_read(root)
    prev, why = load_state(path, dev.name)
    judged, baseline = since(prev, snap)
    doc = local_document(root, BurninOptions(kind="health"), name=dev.name, read=(judged, topo), prev=prev)
    if dev.spec.nics and not doc["rounds"][0]["nics"].get(dev.name):
        raise Unread(f"the health read found no RDMA device under {sysroot or '/'}", host=dev.name)
    save_error = save_state(path, dev.name, snap)
    counters = {"state": str(path), "judged": prev is not None, "since": (prev or {}).get("read_at"), "why": why,
                "baseline": baseline, "saved": save_error is None, "save_error": save_error}
    findings = [f for f in doc["findings"] if dr.node_of(f) == dev.name and not _judged_ib(dev, f)]
    v = Verdict(dev.name, problems + [f"{f['code']} {f['message']}" for f in findings], doc, counters=counters)
    if v.problems:
        why_drain = {"code": "node-check", "kind": "node", "target": dev.name, "message": "; ".join(v.problems)}
        v.drain = dr.drain([why_drain], doc["run_id"], "slurm", act=act, max_drain=1, ours=HEALTH_PREFIX)
    else:
        v.undrain = _resume(dev.name, act, prev is not None)
    return v


def _resume(node: str, act: bool, judged: bool) -> dict:
    """Resume ``node`` from a health check's drain (:func:`tuning.burnin.drain.undrain`), only when its
    counters were judged: without a previous read, a drain for counters that still rise would be lifted
    on no evidence; the reason is read (a dry run) and the drain kept until the next check judges them."""
    if judged:
        return dr.undrain([node], "slurm", act=act, prefix=HEALTH_PREFIX)
    res = dr.undrain([node], "slurm", act=False, prefix=HEALTH_PREFIX)
    if res["resumed"]:
        res["resumed"], res["calls"] = [], []
        res["left"][node] = ("a health check's drain, kept: no previous counter read to judge the counters "
                             "by; the next check resumes it if they do not rise")
    res["dry_run"] = not act
    return res


def load_state(path: Path, node: str) -> tuple[dict | None, str | None]:
    """The passive check's previous read of ``node`` from ``path`` (written by :func:`save_state`):
    ``({"read_at": epoch s, "nics": {dev: {"counters": {name: int}, "link": {"carrier_down_count":
    int | None}}}}, None)``, or ``(None, why)`` when there is none to judge by: missing, not a regular
    file (a link is never followed), unreadable, over :data:`STATE_MAX_BYTES`, not JSON, another format
    or node, or a value that is not a non-negative integer. Never raises."""
    from tuning.outfile import refusal

    if not os.path.lexists(path):
        return None, f"no previous read: {path} does not exist (the first check on this node)"
    why = refusal(path)
    if why:
        return None, f"no previous read: the state file {path} {why}; not read"
    try:
        data = json.loads(_read_regular(path))
    except OSError as e:
        return None, f"no previous read: the state file {path} is unreadable ({e.strerror or e}); not used"
    except (ValueError, RecursionError) as e:  # not UTF-8, not JSON, nested past the parser's depth
        return None, f"no previous read: the state file {path} is corrupt ({str(e)[:120]}); not used"
    prev = _state_nics(data, node)
    if isinstance(prev, str):
        return None, f"no previous read: the state file {path} {prev}; not used"
    return {"read_at": data["read_at"], "nics": prev}, None


def _read_regular(path: Path) -> bytes:
    """``path``'s bytes, opened without following a link, only a regular file of at most
    :data:`STATE_MAX_BYTES`. Raises OSError (``strerror`` says why)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > STATE_MAX_BYTES:
            raise OSError(errno.EINVAL, f"not a regular file of at most {STATE_MAX_BYTES} bytes")
        return os.read(fd, STATE_MAX_BYTES + 1)
    finally:
        os.close(fd)


def _count(v) -> bool:
    return type(v) is int and v >= 0


def _state_nics(data, node: str) -> dict | str:
    """A state document's NICs in :func:`tuning.burnin.collect.deltas`' snapshot shape, or what is wrong with it."""
    if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
        return f"is not a {STATE_FORMAT} document"
    if data.get("node") != node:
        return f"holds node {str(data.get('node'))[:60]!r}, not {node}"
    nics = data.get("nics")
    if not isinstance(data.get("read_at"), (int, float)) or not isinstance(nics, dict):
        return "has no read_at time or no nics"
    out = {}
    for dev, nic in nics.items():
        cnt = nic.get("counters") if isinstance(nic, dict) else None
        down = nic.get("carrier_down_count") if isinstance(nic, dict) else None
        if not isinstance(cnt, dict) or not all(_count(v) for v in cnt.values()) or not (down is None or _count(down)):
            return f"has a NIC {str(dev)[:40]!r} whose counters are not non-negative integers"
        out[dev] = {"counters": cnt, "link": {"carrier_down_count": down}}
    return out


def since(prev: dict | None, snap: dict) -> tuple[dict, list[str]]:
    """``snap`` (:func:`tuning.burnin.health.local_read`) with only the counters judgeable against ``prev``
    (:func:`load_state`): one with no previous value, or below it (reset, reboot), is left out (this read
    is its baseline) and named ``dev:name`` in the returned list; ``prev`` None leaves out every counter
    (listed as none: nothing to judge by). Returns (the snapshot to judge, the counters read as a baseline)."""
    judged = {**snap, "nics": {}}
    baseline: list[str] = []
    for dev, nic in snap["nics"].items():
        old = ((prev or {}).get("nics") or {}).get(dev, {})
        keep = {}
        for name, v in nic["counters"].items():
            p = old.get("counters", {}).get(name)
            if p is not None and v >= p:
                keep[name] = v
            elif prev is not None:
                baseline.append(f"{dev}:{name}")
        link = dict(nic["link"])
        down, p = link.pop("carrier_down_count", None), old.get("link", {}).get("carrier_down_count")
        if down is not None and p is not None and down >= p:
            link["carrier_down_count"] = down
        elif down is not None and prev is not None:
            baseline.append(f"{dev}:carrier_down_count")
        judged["nics"][dev] = {**nic, "counters": keep, "link": link}
    return judged, baseline


def save_state(path: Path, node: str, snap: dict) -> str | None:
    """Keep ``snap``'s counters as ``node``'s previous read in ``path`` (folder created 0700), atomically,
    mode 0600, never through a link (:func:`tuning.outfile.write_atomic`). Returns None, or why it could
    not be written (never raises: the check's verdict stands, the next check judges no counter)."""
    from tuning.outfile import write_atomic

    nics = {dev: {"counters": nic["counters"], "carrier_down_count": nic["link"].get("carrier_down_count")}
            for dev, nic in snap["nics"].items()}
    doc = {"format": STATE_FORMAT, "node": node, "read_at": time.time(), "nics": nics}
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(path, (json.dumps(doc, sort_keys=True) + "\n").encode(), 0o600)
    except OSError as e:
        return f"the state file {path} was not written: {e.strerror or e}"
    return None


def _judged_ib(dev, finding: dict) -> bool:
    """Whether ``finding`` is the health read's ``node-nothing-read`` on a node whose InfiniBand ports the gate
    judged: that read knows RoCE NICs and GPUs only, and every HCA port was read (a port unread is Unread)."""
    return dev.spec.ib_ports is not None and finding.get("code") == "node-nothing-read"


def _line(e: TuningError) -> str:
    """An error's own first line, without the host it names (the check names its node once), at most 300 characters."""
    return str(getattr(e, "message", e)).splitlines()[0][:300] if str(e) else type(e).__name__
