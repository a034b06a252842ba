"""Restoring one switch from its journal record: what the restore takes (read only) and doing it,
touching only the run's own commit (:class:`tuning.targets.switch.SwitchTarget` restore and preflight)."""

from __future__ import annotations

from tuning.errors import RollbackError
from tuning.model.outcomes import DeviceState


def restore_switch(drv, name: str, rec: dict) -> None:
    """Put one switch back to ``revision_before``, touching only this run's own commit.

    - our commit pending (applied revision == journaled ``revision``, a confirm pending): reject it;
    - a run killed inside its commit (journaled ``pushing`` with no ``revision``) left a commit
      applied directly on top of ``revision_before`` (the driver's ``applied_parent``): that one is
      this run's (the run held the inventory's lock): rejected when its confirm is pending, else
      undone by re-applying ``revision_before``;
    - our commit applied for good: re-apply ``revision_before`` (the whole config of that revision);
    - applied revision already ``revision_before`` (the confirm window ran out): nothing to do;
    - another commit pending, or applied on top of ours: refuse, naming both revisions.

    Raises:
        RollbackError: the switch holds a commit that is not this run's, or a command failed.
    """
    action = switch_restore_action(drv, name, rec)
    if action == "reject":
        drv.rollback()  # rejects the pending confirm: the switch goes back to revision_before
    elif action == "reapply":
        drv.rollback_to(str(rec.get("revision_before")))
    else:
        drv.discard()  # a push cut short may have left staged `nv set` lines behind


def switch_restore_action(drv, name: str, rec: dict) -> str:
    """What restoring one switch takes, read only (:func:`restore_switch` lists the cases):
    ``reject`` (our commit-confirm is pending), ``reapply`` (``revision_before`` again) or
    ``discard`` (already back at ``revision_before``).

    Raises:
        RollbackError: the switch holds a commit that is not this run's, or reading it failed.
    """
    ours, before = rec.get("revision"), rec.get("revision_before")
    pending, now = drv.has_pending_commit(), drv.current_revision()
    if not ours and rec.get("state") == DeviceState.PUSHING and before is not None and now != str(before):
        parent = drv.applied_parent()
        if parent == str(before) or (parent is None and now == rec.get("revision_next")):
            # committed (with or without a confirm window) before the kill or the cut, never
            # journaled: the run held the inventory's lock, and the applied revision sits directly
            # on its snapshot (the device says so), or, where the device does not say a parent, is
            # the very id the journal read as the next one before the commit
            ours = now
    if ours and now == str(ours):
        return "reject" if pending else "reapply"
    if now == str(before) and not pending:
        return "discard"
    what = "a commit-confirm" if pending else "a commit"
    raise RollbackError(f"{what} of another run or person is applied (revision {now}; this run's: "
                        f"{ours or 'none journaled'}, before it: {before}); not touching it",
                        host=name, phase="restore")
