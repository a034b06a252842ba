"""Node tuning: collect (one SSH round trip), plan (pure), apply and restore (one round trip each).

Domains, in apply order: mtu, sysctl, nic_qos, irq, files. Restore runs the applied changes'
``before`` values in reverse order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tuning.errors import CommandError, InputError
from tuning.inventory import Device
from tuning.node import facts as facts_mod
from tuning.node.base import ABSENT, READ_EPILOGUE, READ_PRELUDE, Change, Domain, NodeFacts, Unfit
from tuning.node.files import FilesDomain
from tuning.node.irq import IrqDomain
from tuning.node.mtu import MtuDomain
from tuning.node.nic_qos import NicQosDomain
from tuning.node.sysctl import SysctlDomain
from tuning.transport.base import Host


def domains() -> list[Domain]:
    """A fresh list of every node domain, in apply order (instance-level, STYLE.md section 7)."""
    from tuning.render import node_files_for_spec

    return [MtuDomain(), SysctlDomain(), NicQosDomain(), IrqDomain(), FilesDomain(node_files_for_spec)]


@dataclass
class NodeState:
    """A node as read: discovery facts and each domain's current settings (``domain -> key -> value``)."""

    facts: NodeFacts
    current: dict[str, dict[str, str]] = field(default_factory=dict)

    def flat(self) -> dict[str, str]:
        """Every setting of every domain in one dict (keys are unique across domains)."""
        return {k: v for d in self.current.values() for k, v in d.items()}


def _parse_lines(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("\t")
        if sep:
            out[key] = value
    return out


def collect(host: Host, dev: Device, only: set[str] | None = None) -> NodeState:
    """Read facts and every domain's settings (or the domains in ``only``) in ONE command
    (one SSH round trip).

    Raises:
        CommandError: the read script itself failed.
    """
    spec, sysroot = dev.spec, host.sysroot
    doms = [d for d in domains() if only is None or d.name in only]
    lines = [READ_PRELUDE] + facts_mod.read_script(spec, sysroot)
    for d in doms:
        lines += d.read_script(spec, sysroot)
    res = host.run("\n".join(lines + [READ_EPILOGUE])).check(dev.name, "collect")
    facts = facts_mod.from_raw(spec, _parse_lines(res.stdout))
    return NodeState(facts, {d.name: d.current(spec, facts) for d in doms})


def plan(dev: Device, state: NodeState) -> list[Change]:
    """Pure diff of desired vs current for every domain that was collected.

    Raises:
        InputError: the inventory asks for something this node cannot take (names the file and key).
    """
    out: list[Change] = []
    for d in domains():
        if d.name not in state.current:
            continue
        try:
            want = d.desired(dev.spec, state.facts)
        except Unfit as e:
            top = e.key.split(".")[0]
            raise InputError(dev.sources.get(top, "inventory"), e.key, f"{e.problem} (host {dev.name})") from None
        out += d.plan(dev.name, want, state.current.get(d.name, {}))
    return out


def _script(cmds: list[str]) -> str:
    """Run commands in order; on the first failure print ``@@failed <index>`` and exit with its status."""
    body = [f"{c} || {{ rc=$?; echo '@@failed {i}' >&2; exit $rc; }}" for i, c in enumerate(cmds)]
    return "\n".join(body) + "\n"


def _commands(dev: Device, state: NodeState, changes: list[Change], host: Host, use_before: bool) -> list[str]:
    by_name = {d.name: d for d in domains()}
    out = []
    for ch in changes:
        value = ch.before if use_before else ch.after
        if value is None and ch.domain != "files":
            continue  # a setting that did not exist before cannot be put back; only files can be removed
        out.append(by_name[ch.domain].command(ch.key, ABSENT if value is None else value,
                                              dev.spec, state.facts, host.sysroot))
    return out


def apply(host: Host, dev: Device, state: NodeState, changes: list[Change]) -> list[Change]:
    """Push ``changes`` in one round trip.

    Returns:
        The changes applied (all of them on success).

    Raises:
        CommandError: a command failed; ``err.applied`` lists the changes that did go through
            (the engine restores exactly those).
    """
    if not changes:
        return []
    res = host.run(_script(_commands(dev, state, changes, host, use_before=False)))
    if res.rc != 0:
        failed = next((int(l.split()[1]) for l in res.stderr.splitlines() if l.startswith("@@failed")), 0)
        err = CommandError(_commands(dev, state, [changes[failed]], host, False)[0], res.rc,
                           res.stderr.replace(f"@@failed {failed}", "").strip(), host=dev.name, phase="apply")
        err.applied = changes[:failed]  # type: ignore[attr-defined]
        raise err
    return list(changes)


def restore(host: Host, dev: Device, state: NodeState, applied: list[Change]) -> None:
    """Put back the ``before`` value of every applied change, in reverse order (one round trip).

    Raises:
        CommandError: a restore command failed (the engine raises RollbackError: page a human).
    """
    if not applied:
        return
    cmds = _commands(dev, state, list(reversed(applied)), host, use_before=True)
    host.run(_script(cmds)).check(dev.name, "restore")
