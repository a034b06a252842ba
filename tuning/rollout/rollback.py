"""Restore from the journal alone: the engine's restore after a failure and ``fabtune rollback``.

Everything a restore needs is in the run's journal (:mod:`tuning.rollout.journal`): per device
its connection facts, its role and platform, the change dicts (each node change with its
``restore_cmd``) and, for a switch, ``revision_before`` and the committed ``revision``. Today's
inventory is never read, so a run stays restorable after the inventory changed.

A run restores only its own commits: a switch whose pending commit-confirm (the applied
revision while a confirm is pending) is not the journaled ``revision`` is left alone and named.
Rolling back an older run whose settings a later, unrestored run changed again is refused with
the list of those settings (``force`` overrides).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from tuning.errors import ConnectError, InputError, JournalWriteError, RollbackError, TuningError
from tuning.rollout.journal import ROLLBACK_NOTE, Journal, later_conflicts, touched
from tuning.rollout.run_report import RunReport
from tuning.rollout.lock import RunLock, lock_path
from tuning.targets import Target, target_from_record
from tuning.targets.base import journaled_changes, pause_for_test
from tuning.model.outcomes import RunOutcome

Progress = Callable[[str], None]


def touched_devices(j: Journal, irreversible: bool = False) -> list[str]:
    """Devices a run may have changed and has not restored yet; with ``irreversible`` also those
    restored except for irreversible (firmware) changes an automatic restore kept."""
    return sorted(n for n, rec in j.data["devices"].items()
                  if touched(rec) and (not rec.get("restored") or (irreversible and _undoable_kept(rec))))


def _undoable_kept(rec: dict) -> bool:
    """Whether a restored device still holds a kept change that has a restore command (an mlxconfig
    value; a firmware burn has none: the old image is not at hand)."""
    kept = set(rec.get("kept") or [])
    return any(c["key"] in kept and c.get("restore_cmd") for c in rec.get("applied") or rec.get("changes") or [])


def kept_changes(j: Journal) -> dict[str, list[dict]]:
    """Per device, the irreversible changes (firmware) restores left in place: ``{"domain", "key",
    "before", "after", "effect", "undo"}``; ``undo`` is ``fabtune rollback --firmware`` (an mlxconfig
    value) or ``by hand`` (a firmware burn: burn the ``before`` version's image again)."""
    out = {}
    for n, rec in j.data["devices"].items():
        if rec.get("kept"):
            out[n] = [{**{k: c[k] for k in ("domain", "key", "before", "after", "effect") if k in c},
                       "undo": "fabtune rollback --firmware" if c.get("restore_cmd") else "by hand"}
                      for c in rec.get("applied") or rec.get("changes") or [] if c["key"] in rec["kept"]]
    return out


def _undo(j: Journal, conns: dict, name: str, irreversible: bool = False) -> None:
    rec = j.device(name)
    try:
        kept = conns[name].restore(rec, irreversible)
    except ConnectError:  # the session was cut (mid-push): restore over a new one, once
        conns[name].reopen()
        kept = conns[name].restore(rec, irreversible)
    pause_for_test("restore-device", j.run_id)
    j.update(name, restored=True, kept=kept)


def restore_touched(j: Journal, conns: dict[str, Target], progress: Progress, workers: int = 20,
                    irreversible: bool = False, only: set[str] | None = None) -> list[str]:
    """Restore every device the journal says may have changed (of ``only``, when given: one
    batch's devices, a batch's failed ones), in parallel, with ``conns`` (name -> open
    :class:`~tuning.targets.base.Target`). Irreversible (firmware) changes are kept and listed in the journal (``kept``)
    unless ``irreversible``.

    Returns:
        The devices restored.

    Raises:
        RollbackError: a restore failed (names every failed device and ``fabtune rollback RUN_ID``).
        JournalWriteError: every restore that failed could not be journaled, the devices themselves
            were put back (its exit code says whether the run had pushed).
    """
    names = [n for n in touched_devices(j, irreversible) if only is None or n in only]
    if not names:
        return []
    progress(f"restoring {len(names)} device(s): {', '.join(names)}")

    def one(name: str) -> BaseException | None:
        try:
            _undo(j, conns, name, irreversible)
        except Exception as e:  # noqa: BLE001 - every device's failure is reported below
            return e
        return None

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(names)))) as ex:
        errors = dict(zip(names, ex.map(one, names)))
    failed = {n: e for n, e in errors.items() if e is not None}
    if failed and all(isinstance(e, JournalWriteError) for e in failed.values()):
        raise next(iter(failed.values()))  # the journal is the problem, not the devices: one line
    if failed:
        name, err = next(iter(failed.items()))
        raise RollbackError(f"restore failed on {', '.join(sorted(failed))}: {err}; run "
                            f"`fabtune rollback {j.run_id}` after fixing it", host=name, phase="restore") from err
    return names


def connect(name: str, rec: dict) -> Target:
    """Open ``name`` from its journal record alone (:func:`tuning.targets.target_from_record`).

    Raises:
        RollbackError: the journal lacks the connection facts or a switch's platform (written by
            an older fabtune).
        ConnectError: unreachable.
    """
    target = target_from_record(name, rec)
    target.open()
    return target


def _connect_all(j: Journal, names: list[str], workers: int = 20) -> dict:
    """Open every device in ``names`` from the journal, in parallel. Raises the first error
    (after closing what did open)."""
    def one(n: str):
        try:
            return connect(n, j.device(n))
        except TuningError as e:
            return e

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(names)))) as ex:
        got = dict(zip(names, ex.map(one, names)))
    errors = [e for e in got.values() if isinstance(e, TuningError)]
    if errors:
        for c in got.values():
            if not isinstance(c, TuningError):
                c.close()
        raise errors[0]
    return got


def _preflight(j: Journal, conns: dict, names: list[str], progress: Progress, workers: int = 20) -> None:
    """Before the first write of a rollback, every device's :meth:`Target.preflight` in parallel
    (a node runs a privileged no-op with the run's become settings; a switch not yet restored says
    what its restore takes). A rollback is all or nothing: one device that cannot be restored and
    none is touched.

    Raises:
        RollbackError: naming every device that cannot be restored and why; nothing was written.
    """
    progress(f"checking that all {len(names)} device(s) can be restored before touching any")

    def one(name: str) -> str | None:
        try:
            return conns[name].preflight(j.device(name))
        except TuningError as e:
            return e.message

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(names)))) as ex:
        problems = {n: p for n, p in zip(names, ex.map(one, names)) if p}
    if problems:
        listed = "; ".join(f"{n}: {p}" for n, p in sorted(problems.items()))
        raise RollbackError(f"nothing restored: {len(problems)} of {len(names)} device(s) cannot be restored "
                            f"({listed}); fix that, then run `fabtune rollback {j.run_id}` again",
                            host=sorted(problems)[0], phase="restore")


def _check_inventory(j: Journal, inventory: Path | None) -> None:
    if inventory is None:
        return
    mine = Path(j.data.get("inventory") or "").resolve()
    given = Path(inventory)
    given = (given.parent if given.is_file() else given).resolve()
    if given != mine:
        raise InputError("--inventory", str(inventory), f"run {j.run_id} was made with {mine}; rollback uses "
                         f"the journaled inventory only (drop -i, or give that one)")


def _now_and_restored(j: Journal, names: list[str], irreversible: bool = False) -> dict[str, list[dict]]:
    """Per device the settings being put back: ``now`` (the value the run wrote) and ``restored_to``
    (its snapshot value), also as ``before`` / ``after`` of the rollback for the changes table;
    irreversible changes only with ``irreversible``."""
    out = {}
    for n in names:
        out[n] = [{"domain": c.domain, "key": c.key, "now": c.after, "restored_to": c.before,
                   "before": c.after, "after": c.before, "effect": c.effect}
                  for c in journaled_changes(j.device(n)) if c.reversible or (irreversible and c.restore_cmd)]
    return out


def rollback_lock(j: Journal) -> RunLock | None:
    """The inventory's run lock as a rollback of journaled run ``j`` takes it (not acquired yet):
    refused while a live run holds it, taking over the stale lock of this very run; None when the
    journaled inventory folder is gone (no run can hold its lock)."""
    inv_dir = Path(j.data.get("inventory") or ".")
    if not inv_dir.is_dir():
        return None
    return RunLock(lock_path(inv_dir), f"rollback-{j.run_id}", "rollback", j.path, take_over_run=j.run_id)


def _restore_locked(j: Journal, names: list[str], report, progress: Progress, forced: bool,
                    irreversible: bool = False) -> None:
    """Take the inventory's lock (or the stale lock of this very run), open the devices from the
    journal, restore them, record the outcome. On any failure or refusal the lock is left held as
    this run's (:meth:`RunLock.hand_back_to`), not given back."""
    lock = rollback_lock(j)
    if lock is not None:
        lock.acquire()
    try:
        conns: dict = {}
        try:
            conns.update(_connect_all(j, names))
            _preflight(j, conns, names, progress)
            # journaled before the first write: a later run's rollback then knows that this one
            # overwrote its settings with older values even if this one fails half-way
            # (journal.later_conflicts reads it)
            j.stage("restore", ROLLBACK_NOTE + (" --force" if forced else ""))
            report.restored = restore_touched(j, conns, progress, irreversible=irreversible)
        finally:
            for c in conns.values():
                try:
                    c.close()
                except Exception:  # noqa: BLE001 - closing must not mask the restore's own error
                    pass
        report.outcome = RunOutcome.ROLLED_BACK
        j.data["outcome"] = "rolled-back (fabtune rollback" + (" --force)" if forced else ")")
        j.stage("done", ROLLBACK_NOTE)
    except BaseException:
        if lock is not None:
            lock.hand_back_to(j.run_id, j.path)  # refused or failed: the inventory stays locked for this run
        raise
    if lock is not None:
        lock.release()


def _baseline_back(journal_dir: Path, j: Journal, progress: Progress) -> None:
    """(Called for a run that was kept.) A kept rollout saved its final verification as the inventory's baseline
    (:mod:`tuning.rollout.baseline`); rolled back, the fabric is again what the run measured before
    it changed anything: those results (pairs and nccl-tests jobs) go back into the baseline, so a
    `fabtune verify` after the rollback judges against the fabric it now is, not the tuned one."""
    from tuning.rollout.baseline import save_baseline
    from tuning.verify.nccl_verdict import as_baseline as nccl_baseline
    from tuning.verify.runner import PairResult, as_baseline

    verify = j.data.get("verify") or {}
    if not verify.get("before"):
        return
    back = {**as_baseline([PairResult(**x) for x in verify["before"]]), **nccl_baseline(verify.get("nccl_before") or [])}
    save_baseline(journal_dir, j.data["inventory"], back)
    progress(f"baseline: {len(back)} result(s) of before run {j.run_id} put back (the fabric it restored)")


def rollback_run(journal_dir: Path, run_id: str, inventory: Path | None = None, force: bool = False,
                 progress: Progress = lambda m: None, firmware: bool = False):
    """Restore every device a journaled run touched and did not already restore, from the
    journal alone (no inventory read). Holds the inventory's lock meanwhile (taking over the
    stale lock of this very run, left by a killed controller).

    Args:
        inventory: if given, must be the journaled inventory (else InputError).
        force: roll back even where a later unrestored run changed the same settings.
        firmware: also put back irreversible changes (NIC firmware / mlxconfig "Next Boot" values:
            active again only after a reset), which every other restore keeps.

    Returns:
        A RunReport whose ``outcome`` is ``rolled-back``, or ``no-change`` when the run touched
        nothing or was already rolled back (``errors["run"]`` says which). Its ``changes`` list
        per setting ``now`` and ``restored_to`` (see :func:`_now_and_restored`).

    Raises:
        InputError: unknown or unreadable RUN_ID, another inventory, later runs changed the same
            settings (names them).  LockError: another run holds the inventory.
        RollbackError: a restore failed.
    """
    t0 = time.monotonic()
    j = Journal.load(journal_dir, run_id)
    _check_inventory(j, inventory)
    names = touched_devices(j, firmware)
    report = RunReport(run_id, "rollback", outcome=RunOutcome.NO_CHANGE)
    if not names:
        done = [n for n, rec in j.data["devices"].items() if rec.get("restored")]
        report.errors["run"] = (f"already rolled back ({', '.join(sorted(done))})" if done
                                else "the run changed nothing")
        report.kept = kept_changes(j)  # what stays (a firmware burn cannot be put back), said again
        return report
    clash = later_conflicts(journal_dir, j)
    if clash and not force:
        shown = "; ".join(clash[:8]) + (f" (+{len(clash) - 8} more)" if len(clash) > 8 else "")
        raise InputError("RUN_ID", run_id, f"later runs changed the same settings and were not rolled back: "
                         f"{shown}; roll those back first, or use --force")
    report.changes = _now_and_restored(j, names, firmware)
    kept = j.data.get("outcome") == RunOutcome.KEPT  # the run saved its results as the baseline
    _restore_locked(j, names, report, progress, bool(clash), firmware)
    if kept and not clash:
        _baseline_back(journal_dir, j, progress)
    report.kept = kept_changes(j)
    report.seconds = round(time.monotonic() - t0, 2)
    return report
