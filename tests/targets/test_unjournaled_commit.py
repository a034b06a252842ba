"""A commit a run made and never journaled (its controller killed, its session cut inside the
commit: the journal still says ``pushing``, no ``revision``) is recognised as the run's on a switch
OS that does not say a revision's parent, by the id the push journaled as ``revision_next`` before
its first write; anything else on top of the snapshot stays refused. On the toy OS of
:mod:`tests.targets.toyos` without its parent file (as a device that prints no parent), no lab."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.targets.toyos import ToyDevice, ToyDriver
from tuning.errors import RollbackError
from tuning.targets.switch import restore_switch, switch_restore_action


class NoParentToyDriver(ToyDriver):
    """The toy OS when it does not say a revision's parent, but numbers revisions in sequence."""

    def applied_parent(self) -> str | None:
        return None

    def next_revision(self) -> str | None:
        return str(max(int(p.stem) for p in (self.dev.root / "revs").glob("*.conf")) + 1)


@pytest.fixture()
def drv(tmp_path: Path):
    ToyDevice.power_on(tmp_path / "toy01", "toy01")
    NoParentToyDriver.DEVICES = tmp_path
    d = NoParentToyDriver("toy01")
    d.open()
    yield d
    NoParentToyDriver.DEVICES = None


def _commit(drv: ToyDriver, mtu: int, confirm_s: int | None = None) -> str:
    drv.load_candidate(re.sub(r"mtu swp1 \d+", f"mtu swp1 {mtu}", drv.running_config()))
    return drv.commit(confirm_within_s=confirm_s)


def test_the_commit_at_the_journaled_next_revision_is_the_runs_and_is_undone(drv: ToyDriver):
    rec = {"state": "pushing", "revision_before": "1", "revision_next": drv.next_revision()}
    assert rec["revision_next"] == "2"
    assert _commit(drv, 9216, confirm_s=600) == "2"  # the cut commit: pending, never journaled
    assert switch_restore_action(drv, "toy01", rec) == "reject"
    restore_switch(drv, "toy01", rec)
    assert (drv.current_revision(), drv.has_pending_commit()) == ("1", False)
    assert "mtu swp1 1500\n" in drv.running_config()


def test_a_plain_commit_at_the_next_revision_is_undone_by_reapplying_the_snapshot(drv: ToyDriver):
    rec = {"state": "pushing", "revision_before": "1", "revision_next": drv.next_revision()}
    _commit(drv, 9216)
    assert switch_restore_action(drv, "toy01", rec) == "reapply"
    restore_switch(drv, "toy01", rec)
    assert drv.running_config() == drv.dev.config("1")  # the snapshot's configuration, as a new revision


def test_a_commit_at_another_id_or_without_the_journaled_id_is_refused(drv: ToyDriver):
    rec = {"state": "pushing", "revision_before": "1", "revision_next": drv.next_revision()}
    _commit(drv, 4200)  # someone else's commit took revision 2 first ...
    _commit(drv, 9216)  # ... so the run's (or anyone's) is 3: nothing proves it is the run's
    with pytest.raises(RollbackError, match=r"a commit of another run or person is applied \(revision 3; "
                                            r"this run's: none journaled, before it: 1\)"):
        switch_restore_action(drv, "toy01", rec)
    older = {"state": "pushing", "revision_before": "1"}  # a journal written before revision_next
    with pytest.raises(RollbackError, match="revision 3"):
        switch_restore_action(drv, "toy01", older)
    done = {"state": "failed", "revision_before": "1", "revision_next": "3"}  # not in flight: no guess
    with pytest.raises(RollbackError, match="revision 3"):
        switch_restore_action(drv, "toy01", done)
    assert drv.current_revision() == "3"  # refused, untouched
