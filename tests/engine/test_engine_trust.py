"""Issue 6 (Trust), engine side, without a lab: the run lock, unreadable journals, later-run
conflicts, merged per-inventory baselines, the RoCE MTU verdict, zero pairs and the confirm
window (each would fail on the code before issue 6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.adversarial._cli import cli
from tests.conftest import REPO
from tuning import inventory
from tuning.errors import InputError
from tuning.rollout.engine import Options, confirm_window, verify_pairs
from tuning.rollout.journal import Journal, later_conflicts, list_runs
from tuning.rollout.baseline import load_baseline, save_baseline
from tuning.rollout.lock import LockError, RunLock, lock_path
from tuning.verify.pairs import allowed_roce_mtu
from tuning.verify.runner import PairResult, Thresholds, judge

LAB = REPO / "inventory" / "lab"


def _fabtune(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``fabtune ARGS`` run in this process (:func:`tests.adversarial._cli.cli`), from ``cwd`` (the repository)."""
    code, out, err = cli(*args, cwd=cwd or REPO)
    return subprocess.CompletedProcess(["fabtune", *args], code, out, err)


# ---- item 6: one run per inventory ---------------------------------------------------------------
def test_second_run_is_refused_naming_the_holder(tmp_path: Path):
    inv = tmp_path / "inv"
    inv.mkdir()
    first = RunLock(lock_path(inv), "20261130T101500-aaaaaa", "rollout", tmp_path / "j" / "a.json").acquire()
    try:
        with pytest.raises(LockError) as err:
            RunLock(lock_path(inv), "20261130T101501-bbbbbb", "apply", tmp_path / "j" / "b.json").acquire()
        msg = str(err.value)
        assert "another run holds this inventory: run 20261130T101500-aaaaaa (rollout, pid" in msg
        assert f"pid {os.getpid()} on " in msg and err.value.exit_code == 2
    finally:
        first.release()
    assert not lock_path(inv).exists()


def test_plan_is_refused_while_another_run_holds_the_inventory(tmp_path: Path):
    import shutil

    inv = tmp_path / "lab"
    shutil.copytree(LAB, inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    with RunLock(lock_path(inv), "20261130T101500-aaaaaa", "rollout", tmp_path / "j" / "a.json"):
        res = _fabtune("plan", "-i", str(inv))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "another run holds this inventory: run 20261130T101500-aaaaaa (rollout" in res.stdout + res.stderr


def test_verify_is_refused_while_another_run_holds_the_inventory(tmp_path: Path):
    import shutil

    inv = tmp_path / "lab"
    shutil.copytree(LAB, inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    with RunLock(lock_path(inv), "20261130T101500-aaaaaa", "rollout", tmp_path / "j" / "a.json"):
        res = _fabtune("verify", "-i", str(inv), "--journal-dir", str(tmp_path / "j"))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "another run holds this inventory: run 20261130T101500-aaaaaa (rollout" in res.stdout + res.stderr


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _stale_lock(inv: Path, run_id: str, journal: Path) -> None:
    import socket

    lock_path(inv).write_text(json.dumps({"run_id": run_id, "pid": _dead_pid(), "host": socket.gethostname(),
                                          "mode": "rollout", "started": 0, "journal": str(journal)}))


def test_stale_lock_is_named_and_only_its_own_rollback_takes_it_over(tmp_path: Path):
    inv, jdir = tmp_path / "inv", tmp_path / "j"
    inv.mkdir()
    j = Journal.create(jdir, str(inv), "rollout", "20261130T101500-dead00")
    j.update("node01", role="node", state="pushing", changes=[])
    _stale_lock(inv, j.run_id, j.path)
    with pytest.raises(LockError, match=r"stale lock .*run 20261130T101500-dead00 .*died \(pid gone\) and left "
                                        r"node01 changed; run `fabtune rollback 20261130T101500-dead00` first"):
        RunLock(lock_path(inv), "20261130T101600-cccccc", "apply", jdir / "c.json").acquire()
    taker = RunLock(lock_path(inv), "rollback-x", "rollback", j.path, take_over_run=j.run_id).acquire()
    assert json.loads(lock_path(inv).read_text())["pid"] == os.getpid()
    taker.release()


def test_a_failed_rollback_leaves_the_lock_as_the_run_s_until_its_rollback_succeeds(tmp_path: Path):
    """A rollback that fails (or is refused) hands the lock back to the run it could not restore
    (issue 18): once the rollback's process is gone, other runs are refused with the remedy, and
    only ``rollback RUN_ID`` takes it over. A run that ended (outcome set) blocks again when a
    rollback of it began writing and did not finish, and no longer once one finished."""
    inv, jdir = tmp_path / "inv", tmp_path / "j"
    inv.mkdir()
    j = Journal.create(jdir, str(inv), "rollout", "20261130T101500-dead02")
    j.update("node01", role="node", state="pushing", changes=[])
    _stale_lock(inv, j.run_id, j.path)
    rb = RunLock(lock_path(inv), "rollback-x", "rollback", j.path, take_over_run=j.run_id, pid=_dead_pid()).acquire()
    rb.hand_back_to(j.run_id, j.path)  # as rollback._restore_locked on any failure
    assert not rb.held and json.loads(lock_path(inv).read_text())["run_id"] == j.run_id
    with pytest.raises(LockError, match=r"left node01 changed; run `fabtune rollback 20261130T101500-dead02` first"):
        RunLock(lock_path(inv), "20261130T101600-eeeeee", "apply", jdir / "e.json").acquire()
    RunLock(lock_path(inv), "rollback-x", "rollback", j.path, take_over_run=j.run_id).acquire().release()
    assert not lock_path(inv).exists()

    j.data["outcome"] = "kept"  # a run that ended...
    j.stage("restore", "fabtune rollback")  # ...whose rollback began writing and died
    _stale_lock(inv, "rollback-y", j.path)
    with pytest.raises(LockError, match=r"left node01 changed"):
        RunLock(lock_path(inv), "20261130T101700-ffffff", "apply", jdir / "f.json").acquire()
    j.update("node01", restored=True)
    j.stage("done", "fabtune rollback")  # a later rollback finished
    RunLock(lock_path(inv), "20261130T101700-ffffff", "apply", jdir / "f.json").acquire().release()


_KILLED_IN_HAND_BACK = """
import os, signal, sys
from pathlib import Path
from tuning.rollout.lock import RunLock, lock_path
inv, jpath = Path(sys.argv[1]), Path(sys.argv[2])
lock = RunLock(lock_path(inv), "rollback-" + sys.argv[3], "rollback", jpath, take_over_run=sys.argv[3]).acquire()
os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)  # killed between the write and the rename
lock.hand_back_to(sys.argv[3], jpath)
"""


def test_a_rollback_killed_while_handing_the_lock_back_leaves_it_to_the_run_s_rollback(tmp_path: Path):
    """kill -9 of ``fabtune rollback RUN`` inside :meth:`RunLock.hand_back_to` (after the new lock
    is written, before the rename) leaves the rollback's own lock (``rollback-RUN``) over RUN's
    journal: other runs are refused naming ``fabtune rollback RUN`` (not the rollback's name, which
    no command takes), and ``fabtune rollback RUN`` takes it over."""
    inv, jdir = tmp_path / "inv", tmp_path / "j"
    inv.mkdir()
    j = Journal.create(jdir, str(inv), "rollout", "20261130T101500-dead03")
    j.update("node01", role="node", state="applied", applied=[])
    j.data["outcome"] = "kept"
    j.stage("restore", "fabtune rollback")  # the rollback began writing devices back
    _stale_lock(inv, j.run_id, j.path)
    child = subprocess.run([sys.executable, "-c", _KILLED_IN_HAND_BACK, str(inv), str(j.path), j.run_id],
                           cwd=REPO, capture_output=True, text=True, timeout=60)
    assert child.returncode == -9, child.stderr
    assert json.loads(lock_path(inv).read_text())["run_id"] == f"rollback-{j.run_id}"
    with pytest.raises(LockError, match=r"left node01 changed; run `fabtune rollback 20261130T101500-dead03` first"):
        RunLock(lock_path(inv), "20261130T101600-eeeeee", "apply", jdir / "e.json").acquire()
    RunLock(lock_path(inv), "rollback-x", "rollback", j.path, take_over_run=j.run_id).acquire().release()
    assert not lock_path(inv).exists()


def test_stale_lock_of_a_run_that_changed_nothing_is_taken_over(tmp_path: Path):
    inv = tmp_path / "inv"
    inv.mkdir()
    _stale_lock(inv, "20261130T101500-dead01", tmp_path / "j" / "never-written.json")  # killed at collect
    with RunLock(lock_path(inv), "20261130T101700-dddddd", "apply", tmp_path / "j" / "d.json") as lk:
        assert lk.held and json.loads(lock_path(inv).read_text())["run_id"] == "20261130T101700-dddddd"


# ---- item 4: journals ------------------------------------------------------------------------------
def test_unreadable_journals_get_one_line_and_never_hide_the_other_runs(tmp_path: Path):
    jdir = tmp_path / "j"
    good = Journal.create(jdir, str(LAB), "apply", "20261130T101500-000ok0")
    (jdir / "20261130T101501-empty0.json").write_text("")
    (jdir / "20261130T101502-trunc0.json").write_text(good.path.read_text()[:40])
    (jdir / "20261130T101503-null00.json").write_text("null\n")
    rows = {r["run_id"]: r for r in list_runs(jdir, 20)}
    assert len(rows) == 4 and rows[good.run_id]["stage"] == "validate"
    assert rows["20261130T101501-empty0"]["stage"] == "unreadable" and "is empty" in rows["20261130T101501-empty0"]["outcome"]
    assert "truncated" in rows["20261130T101502-trunc0"]["outcome"]
    assert "not a run journal" in rows["20261130T101503-null00"]["outcome"]
    res = _fabtune("runs", "--journal-dir", str(jdir), "--json")
    assert res.returncode == 0 and len(json.loads(res.stdout)) == 4
    for rid in ("20261130T101501-empty0", "20261130T101502-trunc0", "20261130T101503-null00"):
        res = _fabtune("rollback", rid, "--journal-dir", str(jdir))
        errors = [line for line in res.stderr.splitlines() if not line.startswith("...")]
        assert res.returncode == 2 and len(errors) == 1 and "journal unreadable" in errors[0], res.stderr


def test_runs_last_below_one_is_refused(tmp_path: Path):
    for bad in ("-1", "0"):
        res = _fabtune("runs", "--last", bad, "--journal-dir", str(tmp_path))
        assert res.returncode == 2 and res.stderr.strip() == f"fabtune: error: --last: {bad}: must be 1 or more (see `fabtune runs --help`)"


def test_later_runs_on_the_same_keys_are_listed(tmp_path: Path):
    jdir = tmp_path / "j"
    old = Journal.create(jdir, str(LAB), "apply", "20261130T101500-old000")
    old.update("node01", role="node", state="applied", applied=[{"key": "mtu/enp12s0np0"}, {"key": "sysctl/a"}])
    new = Journal.create(jdir, str(LAB), "apply", "20261130T101600-new000")
    new.update("node01", role="node", state="applied", applied=[{"key": "mtu/enp12s0np0"}])
    other = Journal.create(jdir, str(tmp_path), "apply", "20261130T101700-other0")  # another inventory
    other.update("node01", role="node", state="applied", applied=[{"key": "sysctl/a"}])
    assert later_conflicts(jdir, old) == ["node01 mtu/enp12s0np0 (run 20261130T101600-new000)"]
    new.update("node01", restored=True)
    assert later_conflicts(jdir, old) == []


def test_a_forced_rollback_that_failed_half_way_still_marks_the_later_run_stale(tmp_path: Path):
    """``rollback OLD --force`` journals its ``restore`` event before the first write; when it fails
    half-way (node01 restored, a switch refused) OLD has no ``done`` event, and a rollback of the
    NEWER run must still see that node01's keys now hold OLD's older values (issue 18, fault 3)."""
    jdir = tmp_path / "j"
    old = Journal.create(jdir, str(LAB), "apply", "20261130T101500-old000")
    old.update("node01", role="node", state="applied", applied=[{"key": "mtu/enp12s0np0"}])
    old.update("leaf01", role="switch", state="applied", applied=[{"key": "interface swp1 link mtu"}])
    new = Journal.create(jdir, str(LAB), "apply", "20261130T101600-new000")
    new.update("node01", role="node", state="applied", applied=[{"key": "mtu/enp12s0np0"}])
    assert later_conflicts(jdir, new) == []  # nothing rolled back yet
    time.sleep(0.01)  # the rollback begins after NEW began (journal times have ms resolution)
    old.stage("restore", "fabtune rollback --force")  # as rollback._restore_locked, before its first write
    old.update("node01", restored=True)  # node01 was restored, then leaf01 failed: no "done" event
    assert [e[0] for e in old.data["events"]][-1] == "restore"
    assert later_conflicts(jdir, new) == [
        "node01 mtu/enp12s0np0 (run 20261130T101500-old000, rolled back after this run began)"]


# ---- item 5: baselines, MTU, zero pairs ----------------------------------------------------------
def test_baseline_merges_per_inventory(tmp_path: Path):
    jdir = tmp_path / "j"
    save_baseline(jdir, LAB, {"a": {"bw_gbps": 1.0}, "b": {"bw_gbps": 2.0}})
    save_baseline(jdir, LAB, {"b": {"bw_gbps": 3.0}}, pairs={"a", "b"})  # a run measuring one pair
    assert load_baseline(jdir, LAB) == {"a": {"bw_gbps": 1.0}, "b": {"bw_gbps": 3.0}}
    assert load_baseline(jdir, tmp_path) is None  # another inventory has its own
    save_baseline(jdir, LAB, {}, pairs={"b"})
    assert load_baseline(jdir, LAB) == {"b": {"bw_gbps": 3.0}}


def test_roce_mtu_below_what_every_hop_allows_fails_the_pair():
    assert allowed_roce_mtu([9000, 9000], [9216, 9216]) == 4096
    assert allowed_roce_mtu([9000, 1500], [9216, 9216]) == 1024
    assert allowed_roce_mtu([9000, 9000], [1500]) == 1024
    assert allowed_roce_mtu([4192, 9000], []) == 4096 and allowed_roce_mtu([4191, 9000], []) == 2048
    low = PairResult("a->b", "leaf", bw_gbps=390.0, lat_us=2.0, mtu_bytes=1024, mtu_allowed=4096)
    ok = PairResult("c->d", "leaf", bw_gbps=390.0, lat_us=2.0, mtu_bytes=4096, mtu_allowed=4096)
    assert judge([low, ok], Thresholds()) is False
    assert low.verdict == "fail" and ok.verdict == "pass"
    assert low.reasons == ["RoCE active MTU 1024 B where every hop allows 4096 B "
                           "(an end's netdev MTU is lower than the inventory's)"]
    pairs = verify_pairs(inventory.load(LAB), None)
    assert len(pairs) == 18 and {p.mtu_allowed for p in pairs} == {4096}


def test_zero_pairs_and_unknown_rails_are_refused():
    inv = inventory.load(LAB)
    with pytest.raises(InputError, match=r"--rail: 9: no node has a NIC on rail\(s\) 9; the inventory's rails: 0, 1"):
        verify_pairs(inv, (9,))
    one = inventory.Inventory(inv.path, {n: d for n, d in inv.devices.items() if n in ("node01", "leaf01")})
    with pytest.raises(InputError, match="a verification that runs nothing cannot prove a change"):
        verify_pairs(one, None)


def test_confirm_window_is_derived_and_impossible_values_refused():
    pairs = verify_pairs(inventory.load(LAB), None)
    assert confirm_window(Options(mode="rollout"), pairs, 7) == 600
    assert confirm_window(Options(mode="rollout", confirm_s=39), pairs, 7) == 39
    for bad, why in ((38, "at least 39 s for 18 pair(s) in 2 wave(s)"), (0, "above 0"), (-5, "above 0"),
                     (True, "above 0")):
        with pytest.raises(InputError) as err:
            confirm_window(Options(mode="rollout", confirm_s=bad), pairs, 7)
        assert why in str(err.value)
    big = confirm_window(Options(mode="rollout"), pairs * 40, 7)  # 720 pairs: a long verification
    assert big > 600
    # a fabric with 3 % noise starts each pair with 2 samples (tuning.verify.samples): 5 + 2 x 16 s
    noisy = Options(mode="rollout", thresholds=Thresholds(noise_pct=3.0), confirm_s=38)
    with pytest.raises(InputError, match="at least 55 s for 18 pair"):
        confirm_window(noisy, pairs, 7)


def test_a_waiting_run_takes_the_lock_when_the_holder_ends(tmp_path: Path):
    import threading

    inv = tmp_path / "inv"
    inv.mkdir()
    first = RunLock(lock_path(inv), "20261130T101500-aaaaaa", "apply", tmp_path / "a.json").acquire()
    threading.Timer(0.5, first.release).start()
    with RunLock(lock_path(inv), "20261130T101501-bbbbbb", "apply", tmp_path / "b.json", wait_s=10) as second:
        assert json.loads(lock_path(inv).read_text())["run_id"] == second.run_id


def test_rollback_needs_only_the_journal_even_when_the_inventory_is_gone(tmp_path: Path):
    """The journaled inventory folder no longer exists: rollback neither reads nor locks it and
    goes straight to the journaled devices (here an address where nothing listens)."""
    from tuning.errors import ConnectError
    from tuning.rollout.rollback import rollback_run

    j = Journal.create(tmp_path / "j", str(tmp_path / "gone"), "apply", "20261130T101500-gone00")
    j.update("node01", role="node", platform="linux", state="applied", applied=[],
             connection={"hostname": "127.0.0.1", "port": 1, "username": "fabtune", "key_file": None,
                         "known_hosts": None, "sysroot": "/"})
    with pytest.raises(ConnectError):
        rollback_run(tmp_path / "j", j.run_id)


def test_rollback_of_a_switch_whose_journal_names_no_platform_is_refused_not_guessed(tmp_path: Path):
    """A switch record without ``platform`` (an older fabtune's journal) is not opened with some
    default driver: rollback says to restore it by hand, before connecting."""
    from tuning.errors import RollbackError
    from tuning.rollout.rollback import rollback_run

    j = Journal.create(tmp_path / "j", str(tmp_path / "gone"), "apply", "20261130T101500-noplat")
    j.update("leaf01", role="switch", state="applied", revision_before="3", applied=[],
             connection={"hostname": "127.0.0.1", "port": 1, "username": "fabtune", "key_file": None,
                         "known_hosts": None})
    with pytest.raises(RollbackError, match=r"names no platform for this switch .*restore it by hand"):
        rollback_run(tmp_path / "j", j.run_id)


def test_runs_names_a_run_that_never_finished_instead_of_printing_none(tmp_path: Path):
    jdir = tmp_path / "j"
    Journal.create(jdir, str(LAB), "rollout", "20261130T101500-open00")  # killed before its outcome
    res = _fabtune("runs", "--journal-dir", str(jdir))
    assert res.returncode == 0, res.stderr
    assert "not finished (running or killed)" in " ".join(res.stdout.split()) and "None" not in res.stdout


def test_domain_help_lists_every_domain_the_flag_accepts():
    from tuning.node import domains

    res = _fabtune("plan", "--help")
    text = " ".join(res.stdout.replace("│", " ").split())
    for name in [d.name for d in domains()] + ["switch"]:
        assert name in text.split("Only these domains (repeatable):")[1][:120], name
