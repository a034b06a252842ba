"""Every state and outcome word fabtune writes into a journal or a report, as enums.

They are :class:`enum.StrEnum`: a member IS its word (``DeviceState.PUSHING == "pushing"``), so
journals and JSON reports keep their documented strings (docs/reports.md, docs/architecture.md
"Journal") and journals of older fabtune versions read the same; code writes and compares members,
never free strings.
"""

from __future__ import annotations

from enum import StrEnum


class DeviceState(StrEnum):
    """A device's ``state`` in the run's journal (written by its Target's push).

    ``pushing``: journaled before the first write; the extent of the push is unknown until the
    next state (restore replays every planned change). ``applied``: every change written and read
    back. ``failed``: the push stopped; ``applied`` lists what was written. ``unchanged``: nothing
    to write (a switch already at the desired configuration)."""

    PUSHING = "pushing"
    APPLIED = "applied"
    FAILED = "failed"
    UNCHANGED = "unchanged"


#: device states that mean the run may have changed the device
TOUCHED = (DeviceState.PUSHING, DeviceState.APPLIED, DeviceState.FAILED)


class RunOutcome(StrEnum):
    """A run's ``outcome`` (RunReport, journal, JSON report, history).

    A run's own: planned, no-change, applied, kept, halted (a batch regressed: it was restored,
    earlier batches kept), rolled-back, failed; ``passed`` (a verification); what stopped a run that
    raised: unreachable, rollback-failed, error; ``unfinished``: a journal without an outcome (still
    running, or its controller died)."""

    PLANNED = "planned"
    NO_CHANGE = "no-change"
    APPLIED = "applied"
    KEPT = "kept"
    HALTED = "halted"
    ROLLED_BACK = "rolled-back"
    FAILED = "failed"
    PASSED = "passed"
    UNREACHABLE = "unreachable"
    ROLLBACK_FAILED = "rollback-failed"
    ERROR = "error"
    UNFINISHED = "unfinished"


class BatchOutcome(StrEnum):
    """A batch's ``outcome`` in the journal and the report (``no-change``: nothing to push in it)."""

    NOT_RUN = "not-run"
    KEPT = "kept"
    RESTORED = "restored"
    FAILED = "failed"
    NO_CHANGE = "no-change"


class DeviceOutcome(StrEnum):
    """What a run did to one selected device, in the JSON report (docs/reports.md)."""

    UNCHANGED = "unchanged"
    PLANNED = "planned"
    CHANGED = "changed"
    RESTORED = "restored"
    FAILED = "failed"
    UNREACHABLE = "unreachable"
    ERROR = "error"
    UNKNOWN = "unknown"
    NOT_RUN = "not-run"


class PairOutcome(StrEnum):
    """A judged verification pair's outcome in the JSON report."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
