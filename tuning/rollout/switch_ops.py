"""The engine's use of switch drivers: open, collect, plan, commit-confirm, confirm, restore.

One source per setting (DESIGN.md): the plan is the device's own diff of the very candidate
that apply pushes. :func:`collect` renders the candidate, stages it, takes the switch's diff
(``nv config diff``) and discards it (nornir_napalm's ``dry_run``); :func:`plan` turns that
diff into per-key Changes (the driver's diff reader, e.g. NVUE's :mod:`tuning.switch.nvue_keys`: ``port/swp1/mtu``,
``roce/tc/3/probability``, ``roce/pfc_tx``, ``roce/tc/6/scheduler`` ...; every line the
template pushes), with ``before`` from the applied ``nv set`` lines (None: not configured).
A port whose operational MTU differs from the wanted one while its configuration already
holds it adds ``port/<swp>/oper_mtu`` (before: the operational MTU): a commit cannot fix it,
so apply's read back fails the device.

:func:`apply` stages the candidate again, refuses when the switch's diff is no longer the
planned one, commits, and reads back: every candidate line must be in ``nv config show -o
commands`` and every port's operational MTU must be the wanted one.
"""

from __future__ import annotations

from dataclasses import replace

from tuning.errors import CandidateError, CommitError, PendingCommitError, TuningError
from tuning.inventory import Device
from tuning.transport.connection import Connection
from tuning.node.base import Change
from tuning.render import render_switch
from tuning.switch import DRIVERS
from tuning.switch.base import SwitchDriver, SwitchState

OPER_MTU = "oper_mtu"


def driver_class(platform: str) -> type[SwitchDriver]:
    """The driver class of an inventory or journal ``platform`` (its diff reader works without a
    session). Raises TuningError for a platform no driver serves (names the allowed ones)."""
    try:
        return DRIVERS[platform]
    except (KeyError, TypeError):
        raise TuningError(f"no switch driver for platform {platform!r:.40}; allowed: {', '.join(DRIVERS)}") from None


def open_driver(dev: Device) -> SwitchDriver:
    """Open the driver of ``dev.spec.platform`` (host keys checked). Raises ConnectError."""
    return open_platform(dev.spec.platform, dev.connection, dev.name)


def open_platform(platform: str, c: Connection, name: str) -> SwitchDriver:
    """Open a session to switch ``name`` with the driver of ``platform`` over the connection facts
    ``c`` (an inventory's or a journal's). Raises ConnectError; TuningError for an unknown platform."""
    drv = driver_class(platform)(c.hostname, port=c.port, username=c.username, key_file=c.key_file,
                                 known_hosts=c.known_hosts, name=name)
    drv.open()
    return drv


def desired(dev: Device) -> dict[str, str]:
    """The flat settings of the rendered candidate (the lines apply pushes), in template order."""
    return driver_class(dev.spec.platform).config_settings(render_switch(dev))


def collect(drv: SwitchDriver, dev: Device) -> SwitchState:
    """Read the switch (ports, RoCE, revision) and its own diff of the rendered candidate.

    A staged candidate left behind (a push cut short) is discarded first, so the diff is of
    this candidate alone; the candidate is discarded again afterwards (nothing is committed).

    Raises:
        PendingCommitError: the switch holds a commit-confirm. A run that collects holds the
            inventory's lock, so no live run of it owns that commit: planning against it would
            call a configuration "kept" that goes back by itself when its window runs out.
    """
    pending = drv.pending_commit()
    if pending is not None:
        rev, parent = pending
        raise PendingCommitError(
            f"revision {rev}{f' (on top of {parent})' if parent else ''} waits for a commit-confirm that no "
            "live run owns (a run killed mid-push, or a person's); nothing was pushed: roll back the run "
            "that made it (`fabtune runs` lists it as touched), or let its window run out, then run again",
            host=dev.name, phase="collect")
    state = drv.get_state()
    candidate = render_switch(dev)
    drv.discard()
    drv.load_candidate(candidate)
    try:
        diff = drv.compare()
    finally:
        drv.discard()
    return replace(state, diff=diff, running=drv.running_config(), candidate=candidate)


def plan(dev: Device, state: SwitchState) -> list[Change]:
    """Pure: the switch's diff as Changes, plus operational MTU drift the diff cannot show."""
    if state.diff is None or state.running is None:
        raise CandidateError("no diff collected for this switch (collect() stages the candidate)",
                             host=dev.name, phase="plan")
    found = driver_class(dev.spec.platform).diff_changes(state.diff, state.running)
    changes = [Change(dev.name, "switch", k, before, after) for k, (before, after) in found.items()]
    for key, want in desired(dev).items():
        port, oper = _port_of(key), None
        if port is not None:
            oper = state.ports.get(port)
        if port is not None and key not in found and oper is not None and str(oper) != want:
            changes.append(Change(dev.name, "switch", f"port/{port}/{OPER_MTU}", str(oper), want))
    return changes


def _port_of(key: str) -> str | None:
    parts = key.split("/")
    return parts[1] if len(parts) == 3 and parts[0] == "port" and parts[2] == "mtu" else None


def revision(state: SwitchState) -> str:
    """The applied revision id, recorded as the snapshot before any commit."""
    return state.revision


def apply(drv: SwitchDriver, dev: Device, changes: list[Change], confirm_s: int | None,
          revision_before: str) -> str | None:
    """Stage the rendered candidate, check it is still the planned diff, commit (with a confirm
    window when ``confirm_s``) and read back.

    Returns:
        The committed revision id, or None when the switch found nothing to commit.

    Raises:
        CandidateError: the switch's diff is not the planned one (nothing committed).
        CommitError: the commit failed, or the read back found a value the switch does not hold;
            after a commit the error carries ``revision`` (the committed id) and the commit has
            been rolled back already when that was possible.
    """
    if not changes:
        return None
    candidate = render_switch(dev)
    drv.load_candidate(candidate)
    now = drv.diff_changes(drv.compare(), drv.running_config())
    planned = {c.key: (c.before, c.after) for c in changes if not c.key.endswith(f"/{OPER_MTU}")}
    if now != planned:
        drv.discard()
        moved = sorted(k for k in set(now) | set(planned) if now.get(k) != planned.get(k))
        raise CandidateError(f"the switch's diff is no longer the planned one ({', '.join(moved[:8])}); "
                             "plan again", host=dev.name, phase="apply")
    rev = drv.commit(confirm_within_s=confirm_s, message="fabtune")
    if rev == revision_before:
        drv.discard()
        rev = None
    try:
        read_back(drv, dev, candidate)
    except CommitError as err:
        err.revision = rev  # type: ignore[attr-defined]
        if rev is not None:
            try:
                drv.rollback()
                err.message += f"; revision {rev} rolled back to {revision_before}"
            except TuningError as undo:
                err.message += f"; rolling revision {rev} back failed: {undo}"
        raise
    return rev


def read_back(drv: SwitchDriver, dev: Device, candidate: str) -> None:
    """Every candidate line is in the applied configuration and every port runs the wanted MTU.

    Raises:
        CommitError: naming each key, the wanted and the read value.
    """
    held = drv.config_settings(drv.running_config())
    bad = [f"{k} wanted {v!r}, holds {held.get(k)!r}" for k, v in drv.config_settings(candidate).items() if held.get(k) != v]
    ports = drv.get_state().ports
    for key, want in desired(dev).items():
        port = _port_of(key)
        if port is not None and str(ports.get(port)) != want:
            bad.append(f"port/{port}/{OPER_MTU} wanted {want!r}, runs {ports.get(port)!r}")
    if bad:
        more = f" (+{len(bad) - 6} more)" if len(bad) > 6 else ""
        raise CommitError("read back after commit: " + "; ".join(bad[:6]) + more, host=dev.name, phase="apply")


def confirm(drv: SwitchDriver, committed_revision: str | None = None) -> None:
    """Keep this run's commit after verification passed, and prove it is still applied.

    Args:
        committed_revision: the journaled revision of this run; None: the driver's own commit of
            this session, or nothing to confirm when the session committed nothing.

    Raises:
        CommitConfirmError: the revision is not the applied one after confirming (the confirm
            window ran out, or the switch went back), naming both revisions.
    """
    rev = committed_revision or getattr(drv, "committed_revision", None)
    if rev is None and not drv.has_pending_commit():
        return
    drv.confirm(rev)


def restore(drv: SwitchDriver, dev: Device, rec: dict) -> None:
    """Back to the revision applied before the run: reject a pending confirm (the switch reverts
    itself), else re-apply ``revision_before`` if the applied revision moved since. Re-applying a
    revision restores the whole switch config as it was then."""
    if drv.has_pending_commit():
        drv.rollback()
        return
    drv.discard()  # a push cut short may have left staged `nv set` lines behind
    before = rec.get("revision_before")
    if before and drv.current_revision() != str(before):
        drv.rollback_to(str(before))
