"""Issue 24: a switch change in one round trip per device, per OS, counted on the lab switch's side
of the SSH channel (:class:`tuning.lab.switches.CommandLog`), driven by the engine's own switch code.

One lab per OS: leaf01 of a 9-node lab inventory runs NVUE, EOS or SONiC (only that switch started,
in this process; :func:`bench.switch_round_trips.leaf_lab`). The whole push's round trips are exact
counts read off the drivers (apply: stage, diff, commit with a confirm window, read back; confirm):

- NVUE 22: apply 13 (the ``nv set`` lines; ``nv config diff``; ``nv config show -o commands`` for
  the plan check; ``nv config revision -o json`` once, for the next id and for a pending confirm
  (nothing sent between them); ``--applied`` before; the apply typed without ``-y`` and its answer
  ``y`` at ``Are you sure? [y/N]``, which the lab always asks (no files edited by hand here); ``--applied`` and ``revision -o json`` after; the read back's
  ``nv show interface``, ``nv show qos roce``, ``--applied`` and ``nv config show -o commands``),
  confirm 9 (``revision -o json``, ``apply N --confirm-yes``, ``revision -o json``, ``--applied``,
  then the startup: ``diff startup applied``, ``show system config auto-save``, ``nv config save``,
  ``diff startup applied``, ``--applied``);
- EOS 16: apply 11 (the session typed at once; its diff; running for the plan check; sessions for
  a timer; running before; the checkpoint copy; the commit timer; running and sessions after; the
  read back's ``show interfaces | json`` and running), confirm 5 (sessions, commit, running,
  sessions, ``write memory``);
- SONiC 19: apply 14 (heredoc and sha256sum in one send; each command whose status decides sent
  as ``COMMAND; echo $?`` in one: dry run; CONFIG_DB for the plan check; the lock's mkdir; timers;
  CONFIG_DB before; checkpoint; the dead-man's systemd-run and timers; apply-patch; CONFIG_DB
  after; rmdir; the read back's ``show interfaces status`` and CONFIG_DB), confirm 5 (timers,
  ``systemctl stop``, CONFIG_DB, timers, ``config save -y``).
"""

from __future__ import annotations

import json

import pytest

from bench.switch_round_trips import counted, first_lines, leaf_lab, push
from tests.conftest import TEST_BASE_PORT
from tuning.errors import CandidateError, CommitError
from tuning.render import render_switch
from tuning.switch.sonic_keys import parse_ops
from tuning.targets import switch as switch_ops

pytestmark = pytest.mark.lab

#: each OS's leaf01 listens on base + 101: +266, +271, +276 of this process's range (clear of the
#: other tests' fixed ports: +231..+233, +251..+263, +280, and the pool's from +300)
BASE = {"nvue": TEST_BASE_PORT + 165, "eos": TEST_BASE_PORT + 170, "sonic": TEST_BASE_PORT + 175}
#: round trips of one whole push (apply and confirm), derived from the drivers in the docstring
PUSH = {"nvue": 22, "eos": 16, "sonic": 19}


@pytest.fixture(scope="module", params=sorted(BASE))
def leaf(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(OS, leaf01's Device, the SwitchLab, an open driver) of the OS's lab."""
    os_ = request.param
    with leaf_lab(tmp_path_factory.mktemp(os_) / "lab", os_, BASE[os_]) as (dev, lab):
        drv = switch_ops.open_driver(dev)
        try:
            yield os_, dev, lab, drv
        finally:
            drv.close()


def test_a_51_line_change_loads_in_one_round_trip(leaf) -> None:
    os_, dev, lab, drv = leaf
    change = first_lines(os_, render_switch(dev), 51)
    drv.get_state()  # every plan and push reads the switch first (EOS names its session after it)
    cost, _ = counted(lab, "leaf01", lambda: drv.load_candidate(change))
    trip = lab.round_trips("leaf01")[-1]
    try:
        assert cost.trips == 1, lab.round_trips("leaf01")[-cost.trips:]
        if os_ == "nvue":
            assert trip == change.splitlines()
        elif os_ == "eos":
            opening = trip[0]
            assert opening.startswith("configure session fabtune-cfg-")
            assert trip == [opening, "abort", opening, *(ln.strip() for ln in change.splitlines()), "end"]
        else:  # the patch (51 operations) on one line, its file read back by sha256sum in the same send
            assert trip[0].startswith("cat > /tmp/fabtune-") and trip[2:3] == ["FABTUNE_EOF"]
            assert json.loads(trip[1]) == parse_ops(change) and len(parse_ops(change)) == 51
            assert trip[3] == "sha256sum " + trip[0].split()[2]
        assert drv.compare()  # staged for real: the switch's own diff of it is not empty
    finally:
        drv.discard()


def test_the_whole_push_takes_the_round_trips_its_steps_need_and_is_kept(leaf) -> None:
    os_, dev, lab, drv = leaf
    state = switch_ops.collect(drv, dev)
    assert switch_ops.plan(dev, state)  # leaf01 is at power-on: the candidate changes it
    cost, rev = counted(lab, "leaf01", lambda: push(drv, dev, state))
    trips = lab.round_trips("leaf01")[-cost.trips:]
    assert cost.trips == PUSH[os_], [t[0] for t in trips]
    if os_ == "sonic":  # each deciding command's status read in its own send, never by a bare `echo $?`
        assert [t[0].split(" /")[0] for t in trips if t[0].endswith("; echo $?")] == [
            "sudo config apply-patch --dry-run", "sudo mkdir", f"sudo config checkpoint fabtune-{state.revision}; echo $?",
            "sudo config apply-patch", "sudo rmdir", "sudo config save -y; echo $?"]
        assert not [t for t in trips if "echo $?" in t]
    if os_ == "nvue":  # the next-revision read is the pending-confirm check's: never two reads in a row
        reads = [k for k, t in enumerate(trips) if t == ["nv config revision -o json"]]
        assert len(reads) == 4 and not [k for k in reads if k + 1 in reads], [t[0] for t in trips]
    assert rev is not None and not drv.has_pending_commit() and drv.current_revision() == rev  # kept
    assert switch_ops.plan(dev, switch_ops.collect(drv, dev)) == []  # the switch holds every line


@pytest.mark.parametrize("leaf", ["eos"], indirect=True)
def test_an_eos_commit_refuses_a_running_configuration_that_moved_since_staging(leaf) -> None:
    """The session is named after the revision it was staged on (the running configuration read
    last): when another session changed running since, the commit refuses, commits nothing and
    leaves no session behind, rather than commit under a name that gives the wrong parent."""
    _, dev, _, drv = leaf
    start = drv.get_state()
    drv.load_candidate("interface Ethernet1\n   mtu 9000\n")
    other = switch_ops.open_driver(dev)
    try:
        for line in ("configure terminal", "interface Ethernet2", "mtu 9100", "end"):
            other._send(line, phase="apply")  # a person's change on the switch meanwhile
    finally:
        other.close()
    with pytest.raises(CandidateError, match=f"moved since session fabtune-{start.revision} was staged on it"):
        drv.commit(confirm_within_s=60)
    now = drv.get_state()
    assert (now.ports["Ethernet1"], now.ports["Ethernet2"]) == (start.ports["Ethernet1"], 9100)  # nothing committed
    assert not drv.has_pending_commit() and not drv._pending_sessions()  # no timer, the session aborted


@pytest.mark.parametrize("leaf", ["sonic"], indirect=True)
def test_a_sonic_commit_refuses_a_config_db_that_moved_since_staging(leaf) -> None:
    """SONiC names its checkpoint after the revision at the commit: when CONFIG_DB moved since the
    patch was staged (the journal's revision_before), a restore would look for a checkpoint that
    is not there. The commit refuses, commits nothing and leaves no lock or timer behind."""
    _, dev, _, drv = leaf
    start = drv.get_state()
    first, second = sorted(start.ports)[:2]

    def mtu(port: str, value: int) -> str:
        return json.dumps([{"op": "add", "path": f"/PORT/{port}/mtu", "value": str(value)}], indent=4) + "\n"

    drv.load_candidate(mtu(first, 9100))
    other = switch_ops.open_driver(dev)
    try:  # a person's change meanwhile, through the same apply-patch
        other.load_candidate(mtu(second, 9000))
        moved = other.commit()
    finally:
        other.close()
    assert moved != start.revision
    with pytest.raises(CandidateError, match=f"CONFIG_DB moved since patch .* was staged on it "
                                             f"\\(revision {start.revision}, now {moved}\\): nothing committed"):
        drv.commit(confirm_within_s=60)
    now = drv.get_state()
    assert (now.revision, now.ports[first], now.ports[second]) == (moved, start.ports[first], 9000)
    assert not drv.has_pending_commit()
    drv.load_candidate(mtu(first, 9100))  # the switch's lock was given back: the next push goes on
    assert drv.commit() != moved and drv.get_state().ports[first] == 9100


@pytest.mark.parametrize("leaf", ["nvue"], indirect=True)
def test_an_nvue_commit_reads_the_revision_table_again_once_the_session_sent_anything_since(leaf) -> None:
    """The commit's pending-confirm check takes the next-revision read only while this session has
    sent the switch nothing since; after any command it reads the table again, and a confirm another
    session armed meanwhile is refused as before: nothing committed, the other commit untouched."""
    _, dev, _, drv = leaf
    start = drv.get_state()
    drv.load_candidate("nv set interface swp1 link mtu 9100\n")
    assert drv.compare() and drv.next_revision() == str(int(max(drv.revision_states(), key=_num)) + 1)
    other = switch_ops.open_driver(dev)
    try:
        pending = other.commit(confirm_within_s=120)  # NVUE's pending candidate is the switch's, not a session's
        drv.compare()  # this session sends again: the table it read last is no longer the latest
        with pytest.raises(CommitError, match="a commit-confirm is already pending"):
            drv.commit(confirm_within_s=60)
        assert drv.revision_states()[pending] == "confirm" and drv.current_revision() == pending
    finally:
        other.rollback()
        other.close()
    assert drv.get_state().revision == start.revision and not drv.has_pending_commit()


def _num(rev: str) -> int:
    return int(rev) if rev.isdigit() else -1
