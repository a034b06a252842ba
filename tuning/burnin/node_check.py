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
PCIe width, XIDs, GPUs), judged by the same localisation. A failing node is drained through
``scontrol`` with the reason ``fabtune:health-...: ...`` (:func:`tuning.burnin.drain.reason`) unless
someone else's reason is on it; a passing node is resumed only when its reason is a health check's
(``fabtune:health-``: a rollout's batch hold, ``fabtune:RUN_ID: rollout batch``, is its run's to resume).
"""

from __future__ import annotations

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
    and ``undrain``'s results; None when not acted)."""

    node: str
    problems: list[str] = field(default_factory=list)
    doc: dict = field(default_factory=dict)
    drain: dict | None = None
    undrain: dict | None = None

    @property
    def exit_code(self) -> int:
        """0 healthy, 1 unhealthy (drained, or left to another's drain, or the drain failed), 4 healthy but
        Slurm's view of the node could not be read or resumed (``scontrol`` failed: never read as done)."""
        if self.problems:
            return EXIT_UNHEALTHY
        return EXIT_UNREAD if (self.undrain or {}).get("failed") else EXIT_HEALTHY


def passive(dev, sysroot: str | None, act: bool = True) -> Verdict:
    """The passive check of this node (module docstring): read, judge, drain or resume (``act``).

    Raises:
        Unread: as :func:`gate`, or the health read found no RDMA device under ``sysroot``.
    """
    from tuning.burnin.health import local_document
    from tuning.burnin.run import BurninOptions

    problems = gate(dev, sysroot)
    doc = local_document(Path(sysroot or dev.connection.sysroot or "/"), BurninOptions(kind="health"), name=dev.name)
    if dev.spec.nics and not doc["rounds"][0]["nics"].get(dev.name):
        raise Unread(f"the health read found no RDMA device under {sysroot or '/'}", host=dev.name)
    findings = [f for f in doc["findings"] if dr.node_of(f) == dev.name and not _judged_ib(dev, f)]
    v = Verdict(dev.name, problems + [f"{f['code']} {f['message']}" for f in findings], doc)
    if v.problems:
        why = {"code": "node-check", "kind": "node", "target": dev.name, "message": "; ".join(v.problems)}
        v.drain = dr.drain([why], doc["run_id"], "slurm", act=act, max_drain=1, ours=HEALTH_PREFIX)
    else:
        v.undrain = dr.undrain([dev.name], "slurm", act=act, prefix=HEALTH_PREFIX)
    return v


def _judged_ib(dev, finding: dict) -> bool:
    """Whether ``finding`` is the health read's ``node-nothing-read`` on a node whose InfiniBand ports the gate
    judged: that read knows RoCE NICs and GPUs only, and every HCA port was read (a port unread is Unread)."""
    return dev.spec.ib_ports is not None and finding.get("code") == "node-nothing-read"


def _line(e: TuningError) -> str:
    """An error's own first line, without the host it names (the check names its node once), at most 300 characters."""
    return str(getattr(e, "message", e)).splitlines()[0][:300] if str(e) else type(e).__name__
