"""Node tuning: collect (one SSH round trip), plan (pure), apply and restore (one round trip each).

Domains, in apply order (:func:`domains`): services, firmware, modules, pcie, mrrs, power,
hugepages, cmdline, mtu, pause, sysctl, nic_qos, irq, files. A planned :class:`Change` carries
the exact commands that write its ``after`` value, write its ``before`` value back and read it
(contract 1): the plan IS what is pushed, every write is read back, and restore needs nothing
but the journaled change dicts and a :class:`~tuning.transport.base.Host`.
"""

from __future__ import annotations

import base64
import shlex

from tuning.errors import CommandError, InputError, ParseError, TuningError, VerifyError
from tuning.inventory import Device
from tuning.node import facts as facts_mod, nodelock
from tuning.node.base import ABSENT, READ_EPILOGUE, READ_PRELUDE, Change, Domain, Finding, NodeFacts, NodeState, Unfit
from tuning.node.cmdline import CmdlineDomain
from tuning.node.files import FilesDomain
from tuning.node.firmware import FirmwareDomain, reset_pending, resets_due
from tuning.node.hugepages import HugepagesDomain
from tuning.node.irq import IrqDomain
from tuning.node.modules import ModulesDomain
from tuning.node.mtu import MtuDomain
from tuning.node.nic_qos import NicQosDomain
from tuning.node.pause import PauseDomain
from tuning.node.pcie import MrrsDomain, PcieDomain
from tuning.node.power import PowerDomain
from tuning.node.services import ServicesDomain
from tuning.node.sysctl import SysctlDomain
from tuning.transport.base import Host, q, sysroot_path

#: seconds between the last write and the read-back: longer than the lab's rewriters (0.1 s), so an
#: agent that puts a value back (irqbalance, a DCBX agent) is caught before the device counts as
#: changed. A real irqbalance rebalances every 10 s; plan reports it running (domain ``services``).
READBACK_SETTLE_S = 0.3


def domains() -> list[Domain]:
    """A fresh list of every node domain, in apply order (instance-level, STYLE.md section 7)."""
    settings: list[Domain] = [
        # firmware (part A)
        FirmwareDomain(),
        # modules, pcie (part D)
        ModulesDomain(), PcieDomain(), MrrsDomain(),
        # power, hugepages, cmdline (part C)
        PowerDomain(), HugepagesDomain(), CmdlineDomain(),
        MtuDomain(),
        # pause (part D)
        PauseDomain(),
        SysctlDomain(), NicQosDomain(), IrqDomain()]
    return [ServicesDomain(), *settings, FilesDomain(settings)]


def _parse_lines(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("\t")
        if sep:
            out[key] = value
    return out


#: the read script's own limit (s): the policy's ``timeouts.collect_s`` (at most 3600 s) is what bounds
#: a collect, through the caller's DeviceTimeout; run()'s 60 s default cut 64-node reads under load
COLLECT_RUN_S = 3600.0


def collect(host: Host, dev: Device, only: set[str] | None = None) -> NodeState:
    """Read facts and every domain's settings (or the domains in ``only`` and what they need,
    :meth:`Domain.reads <tuning.node.base.Domain.reads>`) in ONE command (one SSH round trip).

    Raises:
        CommandError: the read script itself failed.
        ParseError: a tool printed something that cannot be read (never journaled as absent).
    """
    spec, sysroot = dev.spec, host.sysroot
    wanted = None if only is None else set().union(*(d.reads() for d in domains() if d.name in only))
    doms = [d for d in domains() if wanted is None or d.name in wanted]
    lines = [READ_PRELUDE] + facts_mod.read_script(spec, sysroot)
    for d in doms:
        lines += d.read_script(spec, sysroot)
    # bounded by the caller (the policy's ``timeouts.collect_s``, DeviceTimeout), not by run()'s default
    res = host.run("\n".join(lines + [READ_EPILOGUE]), timeout=COLLECT_RUN_S).check(dev.name, "collect")
    facts = facts_mod.from_raw(spec, _parse_lines(res.stdout))
    try:
        current = {d.name: d.current(spec, facts) for d in doms}
    except ParseError as e:
        raise CommandError("collect", 0, f"{e}: refusing to plan on a value that cannot be read",
                           host=dev.name, phase="collect") from e
    return NodeState(facts, current, sysroot)


def plan(dev: Device, state: NodeState) -> list[Change]:
    """Pure diff of desired vs current for every domain that was collected; each Change carries
    its apply, restore and read commands.

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
        out += d.plan(dev.name, want, state.current.get(d.name, {}), (dev.spec, state.facts, state.sysroot))
    return out


def offline_desired(spec, facts: NodeFacts) -> tuple[list[tuple[Domain, dict[str, str]]], list[str]]:
    """Every domain's desired settings WITHOUT reading the node (``plan --offline``, ``render``):
    ``([(domain, {key: value})...], [names of domains skipped])``. A domain whose values need the
    node's own facts (IRQ numbers, lspci's bridges, the CPU list, the NIC's mlxconfig table) raises
    Unfit on empty facts: it is skipped and named, never guessed; the files domain is built from the
    domains that did answer."""
    out, skipped = offline_settings(spec, facts, (ServicesDomain(),))
    persisted = [(d, want) for d, want in out if d.name != "services"]
    files = FilesDomain([d for d, _ in persisted])
    out.append((files, files.desired(spec, facts, [want for _, want in persisted])))  # their values, not again
    return out, skipped


def offline_settings(spec, facts: NodeFacts,
                     first: tuple[Domain, ...] = ()) -> tuple[list[tuple[Domain, dict]], list[str]]:
    """:func:`offline_desired` without the files domain (``render`` lays its own files from these
    domains: :func:`tuning.render.node_files`): ``first`` then every setting domain, with their
    desired values, and the names of those that need the node's facts (Unfit: skipped)."""
    out, skipped = [], []
    for d in [*first, *(d for d in domains() if d.name not in ("services", "files"))]:
        try:
            out.append((d, d.desired(spec, facts)))
        except Unfit:
            skipped.append(d.name)
    return out, skipped


def findings(dev: Device, state: NodeState) -> list[Finding]:
    """What the collected domains report without changing it (see :class:`~tuning.node.base.Finding`),
    in domain order. Pure: reads ``state`` only."""
    out: list[Finding] = []
    for d in domains():
        if d.name in state.current:
            out += d.findings(dev.name, dev.spec, state.facts, state.current[d.name])
    return out


def _script(cmds: list[str]) -> str:
    """Run commands in order; on the first failure print ``@@failed <index>`` and exit with its status."""
    body = [f"{c} || {{ rc=$?; echo '@@failed {i}' >&2; exit $rc; }}" for i, c in enumerate(cmds)]
    return "\n".join(body) + "\n"


def _cat_file(cmd: str) -> str | None:
    """The file of a read command that is exactly ``cat FILE`` as :func:`tuning.node.base.cat_cmd`
    writes it (one quoted word), else None."""
    rest = cmd[4:] if cmd.startswith("cat ") else ""
    try:
        words = shlex.split(rest)
    except ValueError:
        return None
    return words[0] if len(words) == 1 and q(words[0]) == rest else None


def _readback_script(cmds: list[str]) -> str:
    """Run each distinct read command once; print ``@@rb\\t<i>\\t<rc>\\t<base64 of stdout>``.

    A ``cat FILE`` read (:func:`_cat_file`) is read by the shell's ``read`` builtin, no fork per
    file (hundreds of IRQ files per node, as the collect script's ``r``): each line printed as
    ``@@rl\\t<i>\\t<line>``, then ``@@rb\\t<i>\\t<rc>\\t`` (rc 1: the file could not be opened, as
    cat's). Other reads (``test``, ``base64``) run in line; slower tools (mlnx_qos, cma_roce_tos:
    Python scripts) run in the background, all NICs at once, as the collect script does.
    """
    lines = ['T=$(mktemp -d)', "rb_() { o=$(eval \"$2\" 2>/dev/null); printf '@@rb\\t%s\\t%s\\t%s\\n' \"$1\" $? "
             "\"$(printf '%s' \"$o\" | base64 -w0)\"; }",
             "rf_() { if [ ! -d \"$2\" ] && { while IFS= read -r l || [ -n \"$l\" ]; do printf '@@rl\\t%s\\t%s\\n' \"$1\" \"$l\"; l=; done; } "
             "2>/dev/null < \"$2\"; then printf '@@rb\\t%s\\t0\\t\\n' \"$1\"; else printf '@@rb\\t%s\\t1\\t\\n' \"$1\"; fi; }"]
    for i, c in enumerate(cmds):
        quoted = "'" + c.replace("'", "'\\''") + "'"
        if _cat_file(c) is not None:
            lines.append(f"rf_ {i} {c[4:]}")
        else:
            lines.append(f"rb_ {i} {quoted}" if c.startswith(("test ", "base64 "))
                         else f"rb_ {i} {quoted} > \"$T/{i}\" &")
    lines.append('wait; cat "$T"/* 2>/dev/null; rm -rf "$T"')
    return "\n".join(lines) + "\n"


def _read_back(out: str, reads: list[str]) -> dict[str, str]:
    """``read command -> its stdout`` (ABSENT where it failed) from :func:`_readback_script` output:
    a ``cat`` read's ``@@rl`` lines joined, trailing newlines dropped as ``$(cat FILE)`` drops them."""
    got, raw = {}, {}
    for line in out.split("\n"):  # not splitlines(): a value may hold \r or \f, only \n ends a line
        parts = line.split("\t", 2)
        if len(parts) == 3 and parts[0] == "@@rl" and parts[1].isdigit():
            raw.setdefault(int(parts[1]), []).append(parts[2])
        parts = line.split("\t")
        if len(parts) == 4 and parts[0] == "@@rb":
            i = int(parts[1])
            text = "\n".join(raw.get(i, [])).rstrip("\n") if _cat_file(reads[i]) is not None \
                else base64.b64decode(parts[3]).decode(errors="replace")
            got[reads[i]] = text if parts[2] == "0" else ABSENT
    return got


def _mismatches(changes: list[Change], outputs: dict[str, str], use_before: bool) -> list[str]:
    """``key: wanted X, read Y`` for every change whose live value is not the written one."""
    by_name = {d.name: d for d in domains()}
    bad = []
    for ch in changes:
        want = ch.before if use_before else ch.after
        if ch.read_cmd is None or (want is None and ch.domain != "files" and not ch.key.startswith("unit/")):
            continue  # nothing definite was written (a setting that had no value before)
        raw = outputs.get(ch.read_cmd, ABSENT)
        dom = by_name[ch.domain]
        have = ABSENT if raw == ABSENT else dom.parse_read(ch.key, raw)
        if not dom.same(have, ABSENT if want is None else want):
            shown = "absent" if have == ABSENT else repr(have)
            bad.append(f"{ch.key}: wanted {'absent' if want is None else repr(want)}, read {shown}")
    return bad


def _push(host: Host, name: str, changes: list[Change], use_before: bool, phase: str) -> None:
    """Run the changes' apply (or restore) commands in order, wait, read every written key back.

    Raises:
        CommandError: a command failed (``err.applied``: the changes before it); the script ended
            without naming a failed command (killed, its shell died) or the node lock was busy
            (``err.applied``: every change, as the extent is unknown; none for the lock).
        ConnectError: the channel was lost or the wait timed out (``err.applied``: every change).
        VerifyError: a key read back differs from what was written (``err.applied``: all).
    """
    todo = [c for c in changes if (c.restore_cmd if use_before else c.apply_cmd)]
    cmds = [(c.restore_cmd if use_before else c.apply_cmd) or "" for c in todo]
    reads = list(dict.fromkeys(c.read_cmd for c in todo if c.read_cmd))
    script = (nodelock.prelude(host.sysroot) + _script(cmds) + f"sleep {READBACK_SETTLE_S}\n"
              + _readback_script(reads))
    try:
        res = host.run(script, timeout=nodelock.NODE_LOCK_WAIT_S + 60.0)
    except TuningError as e:  # the channel was lost or the wait timed out: how far it got is unknown
        e.applied = list(todo)  # type: ignore[attr-defined]  # restore is idempotent: replay every one
        raise
    if res.rc != 0:
        raise _script_failed(res, cmds, todo, name, phase)
    bad = _mismatches(todo, _read_back(res.stdout, reads), use_before)
    if bad:
        err2 = VerifyError(f"read back after {phase} differs on {len(bad)} key(s): " + "; ".join(bad[:8])
                           + ("; ..." if len(bad) > 8 else ""), host=name, phase=phase)
        err2.applied = list(todo)  # type: ignore[attr-defined]
        err2.mismatches = bad  # type: ignore[attr-defined]
        raise err2


def _script_failed(res, cmds: list[str], todo: list[Change], name: str, phase: str) -> CommandError:
    """The CommandError of a push script that exited ``res.rc`` != 0: the command it names failed
    (``err.applied``: the changes before it), the node lock was busy (none), or it ended without
    naming one (every change, as how far it got is unknown)."""
    marked = [int(l.split()[1]) for l in res.stderr.splitlines() if l.startswith("@@failed")]
    locked = nodelock.LOCK_MARK in res.stderr  # nothing ran: the script stopped at the node lock
    said = res.stderr.replace(nodelock.LOCK_MARK + " ", "")
    said = "\n".join(l for l in said.splitlines() if not l.startswith("@@failed")).strip()
    said = said or "\n".join(res.stdout.strip().splitlines()[-3:])  # tools such as mlxconfig print -E- on stdout
    if locked:
        what, applied = "(node lock)", []
    elif marked:
        what, applied = cmds[marked[0]], todo[:marked[0]]
    else:  # killed, or its shell died, before a command could say it failed: extent unknown
        what, applied = f"({phase} script ended with exit {res.rc} and no failing command named: how far it " \
                        f"got is unknown, so every one of its {len(todo)} change(s) counts as applied)", list(todo)
    err = CommandError(what, res.rc, said, host=name, phase=phase)
    err.applied = applied  # type: ignore[attr-defined]
    return err


def apply(host: Host, dev: Device, changes: list[Change]) -> list[Change]:
    """Push ``changes`` (their ``apply_cmd``, in order) in one round trip and read every written
    key back.

    Returns:
        The changes applied (all of them on success; after a NIC reset also the settings the reset
        wiped and this call wrote again, each restoring to the value it had before the run).

    Raises:
        CommandError: a command failed; ``err.applied`` lists the changes that did go through
            (the engine restores exactly those).
        VerifyError: a key read back is not the value written (an agent put it back); names the
            key, the wanted and the read value; ``err.applied`` lists every change. Also a NIC
            firmware value still not active after the one ``mlxfwreset`` that ``firmware.allow_reset``
            permits (:func:`tuning.node.firmware.reset_pending`).
    """
    if not changes:
        return []
    missing = [c.key for c in changes if c.apply_cmd is None]
    if missing:
        raise CommandError("apply", 1, f"changes without an apply command: {', '.join(missing[:5])}",
                           host=dev.name, phase="apply")
    firmware = [c for c in changes if c.domain == "firmware"]
    if not resets_due(dev, firmware):
        _push(host, dev.name, list(changes), use_before=False, phase="apply")
        return list(changes)
    return _apply_with_reset(host, dev, changes, firmware)


def _apply_with_reset(host: Host, dev: Device, changes: list[Change], firmware: list[Change]) -> list[Change]:
    """:func:`apply` under ``firmware.allow_reset``: push the ``firmware`` changes, reset each NIC they
    left pending (once), then the rest: mlxfwreset restarts the driver, which drops live settings (MTU,
    QoS, IRQ affinity), so the settings it wiped are written again too."""
    _push(host, dev.name, firmware, use_before=False, phase="apply")
    rest = [c for c in changes if c.domain != "firmware"]
    try:
        reset_pending(host, dev, firmware)
        rest += _wiped_by_reset(host, dev, {c.key for c in changes})
        if rest:
            _push(host, dev.name, rest, use_before=False, phase="apply")
    except (CommandError, VerifyError) as e:
        # after a reset the live settings are driver defaults: restoring EVERY planned change (its
        # snapshot value) and every wiped one is what puts the node back, not only those pushed
        e.applied = firmware + rest  # type: ignore[attr-defined]
        e.reset = True  # type: ignore[attr-defined]  # the firmware values are Current now: not staged only
        raise
    return firmware + rest


def _wiped_by_reset(host: Host, dev: Device, planned: set[str]) -> list[Change]:
    """Settings that were already right before a NIC reset (so not in the plan) and that the reset
    put back to driver defaults: read the node again and plan them. Their ``before`` is the value
    wanted (it held before the run: that is why it was not planned), so a restore writes the
    snapshot value, not the driver default."""
    state = collect(host, dev)
    return [Change(**{**c.as_dict(), "before": c.after, "restore_cmd": c.apply_cmd})
            for c in plan(dev, state) if c.domain != "firmware" and c.key not in planned]


def restore(host: Host, name: str, changes: list[Change | dict], irreversible: bool = False) -> list[Change]:
    """Write every change's ``before`` back with its journaled ``restore_cmd``, in reverse order
    (one round trip), and read each restored key back. Needs nothing but the journal and a Host.

    Changes marked ``reversible=False`` (NIC firmware, mlxconfig: active only after a reset) are
    never part of an automatic restore: they are skipped unless ``irreversible`` is True
    (``fabtune rollback --firmware``) and returned, so the caller can say what it kept.

    Returns:
        The changes NOT restored (irreversible ones, when ``irreversible`` is False).

    Raises:
        CommandError / VerifyError: a restore command failed or a key did not come back (the
            engine raises RollbackError: page a human).
    """
    items = [c if isinstance(c, Change) else Change(**c) for c in changes]
    # a firmware burn has no restore command (the old image is not at hand): always kept
    kept = [c for c in items if not c.reversible and (not irreversible or c.restore_cmd is None)]
    todo = [c for c in items if c not in kept]
    if todo:
        _push(host, name, list(reversed(todo)), use_before=True, phase="restore")
    return kept
