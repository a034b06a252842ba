"""The switch Target: a switch behind its OS driver (:mod:`tuning.switch`): open, collect, plan,
commit-confirm, confirm, restore.

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
from typing import ClassVar

from tuning.errors import CandidateError, CommitError, InputError, PendingCommitError, TuningError
from tuning.inventory import Device
from tuning.transport.connection import Connection
from tuning.node.base import Change, Finding
from tuning.render import render_switch
from tuning.switch import driver_class
from tuning.switch.base import SwitchDriver, SwitchState
from tuning.targets.base import DeviceJournal, connection_facts, pause_for_test
from tuning.targets.switch_restore import restore_switch, switch_restore_action  # noqa: F401 (re-exported)
from tuning.targets.switch_findings import drift_findings, lint_findings, port_findings
from tuning.model.outcomes import DeviceState

OPER_MTU = "oper_mtu"


def open_driver(dev: Device) -> SwitchDriver:
    """Open the driver of ``dev.spec.platform`` (host keys checked). Raises ConnectError."""
    return open_platform(dev.spec.platform, dev.connection, dev.name)


def open_platform(platform: str, c: Connection, name: str) -> SwitchDriver:
    """Open a session to switch ``name`` with the driver of ``platform`` over the connection facts
    ``c`` (an inventory's or a journal's; the platform is one the model or the target registry
    accepted). Raises ConnectError."""
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
    running = state.running if state.running is not None else drv.running_config()  # read once
    return replace(state, diff=diff, running=running, candidate=candidate)


def collect_read_only(drv: SwitchDriver) -> SwitchState:
    """Read a ``manage: false`` switch: its state and applied configuration, nothing staged,
    discarded or refused (a pending commit-confirm or candidate is its owners')."""
    state = drv.get_state()
    return replace(state, diff="", running=drv.running_config(), candidate=None)


def plan(dev: Device, state: SwitchState) -> list[Change]:
    """Pure: the switch's diff as Changes, plus operational MTU drift the diff cannot show."""
    if state.diff is None or state.running is None:
        raise CandidateError("no diff collected for this switch (collect() stages the candidate)",
                             host=dev.name, phase="plan")
    drv = driver_class(dev.spec.platform)
    found = drv.diff_changes(state.diff, state.running)
    changes = [Change(dev.name, "switch", k, before, after, tags=drv.change_tags(k, before, after))
               for k, (before, after) in found.items()]
    for key, want in desired(dev).items():
        port, oper = _port_of(key), None
        if port is not None:
            oper = state.ports.get(port)
        if port is not None and key not in found and oper is not None and str(oper) != want:
            key = f"port/{port}/{OPER_MTU}"
            changes.append(Change(dev.name, "switch", key, str(oper), want, tags=drv.change_tags(key, str(oper), want)))
    return changes


def _port_of(key: str) -> str | None:
    parts = key.split("/")
    return parts[1] if len(parts) == 3 and parts[0] == "port" and parts[2] == "mtu" else None


def revision(state: SwitchState) -> str:
    """The applied revision id, recorded as the snapshot before any commit."""
    return state.revision


def apply(drv: SwitchDriver, dev: Device, changes: list[Change], confirm_s: int | None,
          revision_before: str, run_id: str | None = None, on_next=None) -> str | None:
    """Stage the rendered candidate, check it is still the planned diff, commit (with a confirm
    window when ``confirm_s`` and the driver's :class:`~tuning.switch.base.Capabilities` has
    ``commit_confirm``) and read back.

    ``on_next(revision)`` is called with :meth:`~tuning.switch.base.SwitchDriver.next_revision`
    once the candidate is staged and checked, before the commit (the push journals it), where the
    driver knows it.

    Returns:
        The committed revision id, or None when the switch found nothing to commit.

    Raises:
        CandidateError: the switch's diff is not the planned one (nothing committed).
        CommitError: the commit failed, or the read back found a value the switch does not hold;
            the commit is undone at once (a pending confirm rejected, else ``revision_before``
            applied again: :func:`_undo_commit`).
    """
    if not changes:
        return None
    candidate = _stage_as_planned(drv, dev, changes)
    # an OS without commit-confirm (Capabilities.commit_confirm False) commits plainly: the journal's
    # revision_before is then the only way back, and a rollback or the run's restore takes it
    window = confirm_s if drv.capabilities().commit_confirm else None
    nxt = drv.next_revision()
    if nxt is not None and on_next is not None:
        on_next(nxt)
    rev = drv.commit(confirm_within_s=window, message="fabtune")
    pause_for_test("apply-switch-committed", run_id)  # committed, not yet read back nor journaled
    if rev == revision_before:
        drv.discard()
        rev = None
    try:
        read_back(drv, dev, candidate)
    except CommitError as err:
        _undo_commit(drv, err, rev, revision_before)
        raise
    return rev


def _stage_as_planned(drv: SwitchDriver, dev: Device, changes: list[Change]) -> str:
    """Stage the rendered candidate and return it. Raises CandidateError (the candidate discarded)
    when the switch's diff of it is no longer the planned ``changes``."""
    candidate = render_switch(dev)
    drv.load_candidate(candidate)
    now = drv.diff_changes(drv.compare(), drv.running_config())
    planned = {c.key: (c.before, c.after) for c in changes if not c.key.endswith(f"/{OPER_MTU}")}
    if now != planned:
        drv.discard()
        moved = sorted(k for k in set(now) | set(planned) if now.get(k) != planned.get(k))
        raise CandidateError(f"the switch's diff is no longer the planned one ({', '.join(moved[:8])}); "
                             "plan again", host=dev.name, phase="apply")
    return candidate


def _undo_commit(drv: SwitchDriver, err: CommitError, rev: str | None, revision_before: str) -> None:
    """A read back failed after commit ``rev``: undo it at once (a commit-confirm is rejected; a
    commit without a window is undone by applying ``revision_before`` again) and say so in
    ``err`` (``revision`` None, ``undone`` True); when undoing fails, ``err.revision`` keeps ``rev``
    for the journal, so the restore can undo it."""
    err.revision = rev  # type: ignore[attr-defined]
    if rev is None:
        return
    try:
        drv.rollback() if drv.has_pending_commit() else drv.rollback_to(revision_before)
        err.message += f"; revision {rev} rolled back to {revision_before}"
        err.revision = None  # type: ignore[attr-defined]  # nothing of this run is applied
        err.undone = True  # type: ignore[attr-defined]
    except TuningError as undo:
        err.message += f"; rolling revision {rev} back failed: {undo}"


def read_back(drv: SwitchDriver, dev: Device, candidate: str) -> None:
    """Every candidate line is in the applied configuration and every port runs the wanted MTU.

    Raises:
        CommitError: naming each key, the wanted and the read value.
    """
    state = drv.get_state()  # its running configuration where the OS's state read includes it: read once
    held = drv.config_settings(state.running if state.running is not None else drv.running_config())
    bad = [f"{k} wanted {v!r}, holds {held.get(k)!r}" for k, v in drv.config_settings(candidate).items() if held.get(k) != v]
    ports = state.ports
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


class SwitchTarget:
    """A switch (``role: switch``) of any platform its OS driver serves (:data:`tuning.model.platforms.SWITCH_DRIVERS`):
    :class:`tuning.targets.base.Target`. The diff reader, rendering and commit model are the
    driver's and its template's; this class holds no OS word.

    Args:
        name: inventory name.  connection: how to reach it (an inventory's or a journal's).
        platform: the driver's key (``nvue``, ``cumulus_linux``).
        device: the inventory Device (None when opened from a journal record: then only
            :meth:`restore`, :meth:`preflight` and :meth:`confirm` serve).
    """

    role: ClassVar[str] = "switch"
    #: a commit may overwrite files edited by hand on the switch (the run's ``--allow-overwrite-files``,
    #: set by :class:`tuning.rollout.session.Session`); given to the driver at :meth:`push`
    allow_overwrite_files = False
    reports_findings: ClassVar[bool] = True  # a port down, drift, the live lint (read again after a push)
    verifiable: ClassVar[bool] = True  # every pair and incast crosses the switches
    rdma_host = None  # a switch runs no RDMA test

    def __init__(self, name: str, connection: Connection, platform: str, device: Device | None = None):
        self.name, self.connection, self.platform, self.device = name, connection, platform, device
        self.driver: SwitchDriver | None = None
        self._findings: list[Finding] = []  # of the last collect

    def open(self) -> None:
        """Open the driver's session (host keys checked). Raises ConnectError."""
        self.driver = open_platform(self.platform, self.connection, self.name)

    def close(self) -> None:
        """Close the session (idempotent)."""
        if self.driver is not None:
            self.driver.close()

    def reopen(self) -> None:
        """A new session: a command interrupted mid-read leaves its output unread in the old one,
        and the next command would read it as its own."""
        try:
            self.close()
        except Exception:  # noqa: BLE001 - the old session is dropped either way
            pass
        self.open()

    @property
    def managed(self) -> bool:
        """False for an inventory's ``manage: false`` switch (read, never written); a target opened from
        a journal record reads the record's ``manage`` in :meth:`restore` and :meth:`preflight`."""
        return self.device is None or self.device.spec.manage

    def collect(self, domains: set[str] | None = None) -> SwitchState:
        """:func:`collect` (the switch's own diff of the rendered candidate); the configured ports the
        switch reads down kept for :meth:`findings` (:mod:`tuning.targets.switch_findings`).

        A ``manage: false`` switch is only read (:func:`collect_read_only`): no candidate is staged or
        discarded (a person's pending edits stay) and what it holds against the inventory's settings
        becomes ``switch-drift`` findings."""
        desired_now = desired(self.device)
        wanted = {p for p in map(_port_of, desired_now) if p}
        if self.managed:
            state, drift = collect(self.driver, self.device), []
        else:
            state = collect_read_only(self.driver)
            drift = drift_findings(self.name, desired_now, self.driver.config_settings(state.running), state.ports,
                                   _port_of)
        self._findings = port_findings(self.name, wanted, getattr(self.driver, "down_ports", {})) + drift
        return state

    def plan(self, state: SwitchState, domains: set[str] | None = None) -> list[Change]:
        """:func:`plan`, only ``domains`` when given; nothing for a ``manage: false`` switch."""
        if not self.managed:
            return []
        return [c for c in plan(self.device, state) if domains is None or c.domain in domains]

    def findings(self, state: SwitchState, domains: set[str] | None = None) -> list[Finding]:
        """The findings of the last :meth:`collect` (a configured port down on the switch side), only
        ``domains`` when given."""
        return [f for f in self._findings if domains is None or f.domain in domains]

    @classmethod
    def fleet_findings(cls, states: dict[str, SwitchState], domains: set[str] | None = None,
                       devices: dict | None = None) -> list:
        """The fabric lint's live rules (:func:`tuning.lint.live_findings`) over the switches as they
        were read (:func:`lint_findings`): with ``devices`` (the inventory) and the ``switch`` domain.
        A switch whose own diff of the candidate changes a setting is left out: the plan changes it
        and its diff says how (the inventory rules passed at load); once applied it is read again and
        judged, so a setting the switch took but does not act on is a finding of the run."""
        if devices is None or (domains is not None and "switch" not in domains):
            return []
        planned = {n for n, st in states.items() if st.diff and n in devices
                   and driver_class(devices[n].spec.platform).diff_changes(st.diff, st.running or "")}
        return [f for f in lint_findings(devices, states) if f.device not in planned]

    @classmethod
    def rendered(cls, dev: Device) -> tuple[str, str]:
        """``(suffix, text)``: the switch's configuration in its OS's language (the driver's
        template and ``config_suffix``: NVUE ``("nvue", nv set lines)``), no device contacted."""
        return driver_class(dev.spec.platform).config_suffix, render_switch(dev)

    @classmethod
    def offline_plan(cls, dev: Device, domains: set[str] | None = None) -> tuple[list[Change], list]:
        """The rendered candidate's lines, in the keys the online plan reads from the switch's
        diff, ``before`` unknown (None); no device contacted; nothing for a ``manage: false`` switch."""
        if (domains is not None and "switch" not in domains) or not dev.spec.manage:
            return [], []
        return [Change(dev.name, "switch", k, None, v) for k, v in desired(dev).items()], []

    def record(self, state: SwitchState) -> dict:
        """``role``, ``platform``, the connection facts and ``revision_before`` (the applied
        revision a restore returns to)."""
        return {"role": self.role, "platform": self.platform, "connection": connection_facts(self.connection),
                "revision_before": revision(state), **({} if self.managed else {"manage": False})}

    def push(self, changes: list[Change], journal: DeviceJournal, confirm_s: int | None = None) -> list[Change]:
        """:func:`apply` (commit with a confirm window of ``confirm_s``, read back); see the contract.
        The revision is journaled with ``applied``; a commit that changed nothing is ``unchanged``."""
        if not changes:  # nothing to write: the journal keeps what an earlier push recorded
            return []
        if not self.managed:  # plan() gives none: a caller that pushes anyway is refused, nothing written
            raise InputError(f"host_vars/{self.name}.yml", "manage",
                             f"{self.name} is manage: false: fabtune never writes it ({len(changes)} change(s) refused)")
        rec = journal.get()
        before = list(rec.get("applied") or [])
        self.driver.allow_overwrite_files = self.allow_overwrite_files
        journal.update(state=DeviceState.PUSHING)
        try:
            # the id the commit will get, where the driver knows it, journaled before the commit
            rev = apply(self.driver, self.device, changes, confirm_s, str(rec.get("revision_before")), journal.run_id,
                        on_next=lambda nxt: journal.update(revision_next=nxt))
        except TuningError as e:
            if getattr(e, "extent_unknown", False):
                raise  # the session was cut inside the commit: the journal keeps `pushing` (extent unknown)
            # a commit the read back failed and could not undo is journaled as this run's: the
            # restore then puts revision_before back instead of refusing "another run's commit"
            journal.update(state=DeviceState.FAILED, revision=getattr(e, "revision", None) or rec.get("revision"),
                           **({"restored": True} if getattr(e, "undone", False) else {}))
            raise
        done = list(changes) if rev else []
        journal.update(state=DeviceState.APPLIED if rev or before else DeviceState.UNCHANGED, revision=rev or rec.get("revision"),
                       applied=before + [c.as_dict() for c in done])
        pause_for_test("apply-switch", journal.run_id)
        pause_for_test(f"apply-switch-batch-{journal.get().get('batch')}", journal.run_id)
        return done

    def confirm(self, record: dict) -> bool:
        """Confirm the journaled ``revision`` (:func:`confirm`: proves it is still the applied one);
        False when there is none, or the OS has no commit-confirm (its commit was read back and
        holds: there is nothing to keep)."""
        rev = record.get("revision")
        if not rev or not self.driver.capabilities().commit_confirm:
            return False
        confirm(self.driver, rev)
        return True

    def preflight(self, record: dict) -> str | None:
        """What the restore takes (:func:`switch_restore_action`, read only); a commit that is not
        this run's raises RollbackError."""
        if not record.get("restored") and record.get("manage", True):
            switch_restore_action(self.driver, self.name, record)
        return None

    def restore(self, record: dict, irreversible: bool = False) -> list[str]:
        """:func:`restore_switch` unless already restored or the record says ``manage: false`` (never
        written, so nothing to restore: not even a staged candidate is discarded); nothing is ever kept."""
        if not record.get("restored") and record.get("manage", True):
            restore_switch(self.driver, self.name, record)
        return []
