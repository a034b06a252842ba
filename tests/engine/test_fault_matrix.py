"""Fault matrix (issue 6, "Must show"): the controller killed with SIGKILL at each stage of a
rollout, then ``fabtune rollback RUN_ID`` from the journal alone; two concurrent rollouts; the
confirm window running out during verification; rolling back an older run after a newer one.
After each, every device equals its snapshot byte for byte (switch revision ids aside: they only
grow) and the exit code says what happened.

The controller is stopped at a known point with the engine's test hook
``FABTUNE_TEST_PAUSE_AT=STAGE[:SECONDS]`` (:func:`tuning.targets.base.pause_for_test`), which
prints ``fabtune: test pause at STAGE (run RUN_ID)`` on stderr and blocks. Rollouts change node01
and leaf01 only and verify on rail 0 (2 pairs) to keep the matrix short.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, snapshot_fabric
from tuning.rollout.lock import lock_path, read_lock

pytestmark = pytest.mark.lab


#: rollouts of the matrix: one node and one leaf changed, verified on rail 0 (2 pairs), to stay short
SMALL = ("--rail", "0", "-l", "node01", "-l", "leaf01")


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "tuning", *args]


def _run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(_cmd(*args), capture_output=True, text=True, timeout=timeout, cwd=REPO)


class Paused:
    """``fabtune rollout`` started with ``FABTUNE_TEST_PAUSE_AT``; :meth:`wait` returns its run id
    once it says it paused."""

    def __init__(self, inv: Path, journal: Path, stage: str, *extra: str):
        env = dict(os.environ, FABTUNE_TEST_PAUSE_AT=stage)
        self.proc = subprocess.Popen(_cmd("rollout", "-i", str(inv), "--journal-dir", str(journal), *SMALL, *extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env, cwd=REPO)
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        self._out: list[str] = []
        self._out_reader = threading.Thread(target=lambda: self._out.extend(self.proc.stdout), daemon=True)
        self._out_reader.start()

    def _pump(self) -> None:
        for line in self.proc.stderr:
            self.lines.put(line)
        self.lines.put("")

    def _lines(self, timeout: float):
        """The run's stderr lines as they come, until it ends or ``timeout`` s pass."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                continue
            if line == "":
                return
            yield line

    def wait(self, timeout: float = 120) -> str:
        for line in self._lines(timeout):
            self.stderr.append(line)
            m = re.search(r"test pause at \S+ \(run (\S+)\)", line)
            if m:
                return m.group(1)
        self.kill()
        raise AssertionError("the run never paused: " + "".join(self.stderr)[-2000:])

    def drain(self, timeout: float = 30) -> str:
        """Everything the run printed on stderr after :meth:`wait`, up to its end."""
        return "".join(self._lines(timeout))

    def finish(self, timeout: float = 180) -> str:
        """Wait for the run to end; its stdout. stderr stays with the pump thread (``communicate``
        would read it too and take lines :meth:`drain` must see)."""
        self.proc.wait(timeout=timeout)
        self._out_reader.join(timeout=30)
        return "".join(self._out)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)


def _journal(journal: Path, run_id: str) -> dict:
    return json.loads((journal / f"{run_id}.json").read_text())


def _settle(journal: Path, run_id: str, roles: set[str], timeout: float = 60) -> None:
    """Wait until no device of ``roles`` is still being pushed (the other threads of the paused run)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        devs = _journal(journal, run_id)["devices"]
        if all(d.get("state") != "pushing" for d in devs.values() if d.get("role") in roles):
            return
        time.sleep(0.05)
    raise AssertionError(f"devices still pushing: {devs}")


def _diff(a: dict, b: dict) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and not k.endswith(":revision"))


def _rollback(journal: Path, run_id: str, *extra: str) -> subprocess.CompletedProcess:
    return _run("rollback", run_id, "--journal-dir", str(journal), *extra)


def _small_change(src: Path) -> Path:
    """``src`` copied beside itself (lab state shared by a symlink) with one consistent, harmless
    change per kind of device: node01's ``net.core.rmem_max`` halved, leaf01's uplink swp31 at MTU
    9100 (still above every RoCE frame). Verification of a tuned lab passes with it."""
    import shutil

    dst = src.parent / "lab-small"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    (dst / ".state").symlink_to((src / ".state").resolve())
    sysctl = dict(yaml.safe_load((src / "group_vars" / "gpu_nodes.yml").read_text())["sysctl"])
    sysctl["net.core.rmem_max"] = 134217728
    for host, extra in (("node01", {"sysctl": sysctl}), ("leaf01", {"port_mtu_overrides": {"swp31": 9100}})):
        hv = dst / "host_vars" / f"{host}.yml"
        hv.write_text(yaml.safe_dump({**(yaml.safe_load(hv.read_text()) or {}), **extra}, sort_keys=False))
    return dst


def test_rollout_faults_sigkill_concurrency_and_confirm_window(lab_inventory: Path, tmp_path: Path):
    """On a tuned lab, a rollout of a small change: killed at collect, node apply, switch apply,
    verify (while a second rollout is refused by the lock) and confirm, each rolled back from its
    journal; then its confirm window running out during verification."""
    from tuning import inventory
    from tuning.rollout import engine

    journal = tmp_path / "j"
    assert engine.run(inventory.load(lab_inventory), engine.Options(mode="apply", journal_dir=journal)).outcome == "applied"
    tuned = snapshot_fabric(lab_inventory)
    inv = _small_change(lab_inventory)
    rmem = lab_inventory / ".state/nodes/node01/sysroot/proc/sys/net/core/rmem_max"
    assert rmem.read_text() == "268435456\n"

    # collect: nothing pushed, no journal; the stale lock is taken over by the next run
    p = Paused(inv, journal, "collect")
    rid = p.wait()
    p.kill()
    assert not (journal / f"{rid}.json").exists() and (inv / ".fabtune.lock").exists()
    assert _diff(tuned, snapshot_fabric(lab_inventory)) == []

    # node apply, switch apply (the node done: an MTU lowered goes to the nodes first), verify, confirm
    # apply-switch-committed: leaf01 committed (confirm pending) but neither read back nor journaled
    # (issue 18, fault 2): the rollback recognises the commit as the run's by its parent revision
    for stage, settle, n_devices in (("apply-node", set(), 1), ("apply-switch-committed", {"node"}, 2),
                                     ("apply-switch", {"node"}, 2), ("verify", set(), 2), ("confirm", set(), 2)):
        p = Paused(inv, journal, stage)
        rid = p.wait()
        _settle(journal, rid, settle)
        if stage == "verify":
            _concurrent_refused(inv, journal, rid, p.proc.pid)
        p.kill()
        assert rmem.read_text() == "134217728\n", stage  # the kill left node01 changed
        if stage == "verify":
            _stale_lock_named(inv, journal, rid, tmp_path)
        res = _rollback(journal, rid)
        assert res.returncode == 0, (stage, res.stdout, res.stderr)
        assert f"rolled back on {n_devices} device(s)" in res.stdout, (stage, res.stdout)
        assert _diff(tuned, snapshot_fabric(lab_inventory)) == [], stage
        again = _rollback(journal, rid)
        assert again.returncode == 0 and "nothing to roll back: already rolled back" in again.stdout
    assert not (inv / ".fabtune.lock").exists()

    _window_runs_out(inv, journal, tuned, lab_inventory)


def _concurrent_refused(inv: Path, journal: Path, rid: str, pid: int) -> None:
    n = len(list(journal.glob("*.json")))
    second = _run("rollout", "-i", str(inv), "--journal-dir", str(journal), *SMALL)
    assert second.returncode == 2, second.stderr
    assert f"another run holds this inventory: run {rid} (rollout, pid {pid} on " in second.stderr
    assert len(list(journal.glob("*.json"))) == n  # the refused run journaled nothing


def _stale_lock_named(inv: Path, journal: Path, rid: str, elsewhere: Path) -> None:
    third = _run("apply", "-i", str(inv), "--journal-dir", str(journal))
    assert third.returncode == 2 and "stale lock" in third.stderr and f"`fabtune rollback {rid}` first" in third.stderr
    other = _run("rollback", rid, "-i", str(elsewhere), "--journal-dir", str(journal))
    assert other.returncode == 2 and "rollback uses the journaled inventory only" in other.stderr


def _window_runs_out(inv: Path, journal: Path, tuned: dict, lab: Path) -> None:
    """A window just long enough by the estimate, then verification held past it: the switch goes
    back by itself, confirm proves it, the run fails (exit 1) and restores the node too."""
    res = _run("rollout", "-i", str(inv), "--journal-dir", str(journal), *SMALL, "--confirm-s", "1")
    assert res.returncode == 2, res.stderr
    minimum = int(re.search(r"--confirm-s: 1: shorter than the verification it must outlast: at least (\d+) s "
                            r"for 2 pair\(s\) in 1 wave\(s\)", res.stderr)[1])
    p = Paused(inv, journal, f"verify:{minimum + 2}", "--confirm-s", str(minimum))
    rid = p.wait()
    out = p.finish(timeout=240)
    assert p.proc.returncode == 1, (out, "".join(p.stderr))
    assert f"ROLLED BACK (run {rid})" in out and "leaf01: revision" in out and "is not kept" in out, out
    doc = _journal(journal, rid)
    assert doc["outcome"] == "rolled-back" and not any(d.get("confirmed") for d in doc["devices"].values())
    assert _diff(tuned, snapshot_fabric(lab)) == []


def test_rollback_of_an_older_run_after_a_newer_one(lab_inventory: Path, tmp_path: Path):
    journal = tmp_path / "j"
    untuned = snapshot_fabric(lab_inventory)
    mtu = "node01:sys/class/net/enp12s0np0/mtu"
    assert untuned[mtu] == b"1500\n"
    older = _run("apply", "-i", str(lab_inventory), "--journal-dir", str(journal), "-l", "node01", "-d", "mtu")
    assert older.returncode == 0, older.stderr
    old_id = re.search(r"\(run (\S+)\)", older.stdout)[1]
    hv = lab_inventory / "host_vars" / "node01.yml"
    saved = hv.read_text()
    hv.write_text(yaml.safe_dump({**yaml.safe_load(saved), "mtu": 4200}, sort_keys=False))
    newer = _run("apply", "-i", str(lab_inventory), "--journal-dir", str(journal), "-l", "node01", "-d", "mtu")
    assert newer.returncode == 0, newer.stderr
    new_id = re.search(r"\(run (\S+)\)", newer.stdout)[1]
    assert snapshot_fabric(lab_inventory)[mtu] == b"4200\n"

    refused = _rollback(journal, old_id)
    assert refused.returncode == 2, refused.stderr
    assert f"node01 mtu/enp12s0np0 (run {new_id})" in refused.stderr and "--force" in refused.stderr
    assert snapshot_fabric(lab_inventory)[mtu] == b"4200\n"  # refused: nothing touched
    forced = _rollback(journal, old_id, "--force")
    assert forced.returncode == 0, forced.stderr
    hv.write_text(saved)
    assert _diff(untuned, snapshot_fabric(lab_inventory)) == []
    # the newer run's before values (the older run's 9000) are stale now: rolling it back would
    # put the older run's value back on the fabric, so it is refused naming the forced rollback
    stale = _rollback(journal, new_id)
    assert stale.returncode == 2, stale.stdout + stale.stderr
    assert f"node01 mtu/enp12s0np0 (run {old_id}, rolled back after this run began)" in stale.stderr
    assert _diff(untuned, snapshot_fabric(lab_inventory)) == []


def test_ctrl_c_during_switch_apply_and_confirm_restores_everything(lab_inventory: Path, tmp_path: Path):
    """Ctrl-C (SIGINT) while a switch push is in flight, and while confirming: the run lets the
    in-flight device work end, restores every touched device on fresh switch sessions and exits
    130 (interrupted), never 3: the fabric equals the tuned snapshot."""
    from tuning import inventory
    from tuning.rollout import engine

    journal = tmp_path / "j"
    assert engine.run(inventory.load(lab_inventory), engine.Options(mode="apply", journal_dir=journal)).outcome == "applied"
    tuned = snapshot_fabric(lab_inventory)
    inv = _small_change(lab_inventory)
    for stage in ("apply-switch:3", "confirm:30"):
        p = Paused(inv, journal, stage)
        rid = p.wait()
        p.proc.send_signal(signal.SIGINT)
        out = p.finish()
        err = "".join(p.stderr) + p.drain()
        assert p.proc.returncode == 130, (stage, out, err)
        assert "restoring" in err, (stage, err)
        assert _journal(journal, rid)["outcome"] == "rolled-back", stage
        assert _diff(tuned, snapshot_fabric(lab_inventory)) == [], stage
    assert not (inv / ".fabtune.lock").exists()
    _killed_inside_the_switch_commit(inv, journal, tuned, lab_inventory)


def _killed_inside_the_switch_commit(inv: Path, journal: Path, tuned: dict, lab: Path) -> None:
    """A run killed between leaf01's `nv config apply --confirm` and the journaled revision (its
    journal says ``pushing``, no revision): the next run refuses the pending commit at collect (exit
    2, nothing pushed, never "kept"), and rollback recognises the commit as the run's own (applied
    directly on top of its journaled ``revision_before``) and rejects it."""
    p = Paused(inv, journal, "apply-switch", "--confirm-s", "900")  # the window outlives the test
    rid = p.wait()
    _settle(journal, rid, {"node", "switch"})
    p.kill()
    path = journal / f"{rid}.json"
    doc = json.loads(path.read_text())
    leaf = doc["devices"]["leaf01"]
    assert leaf["state"] == "applied" and leaf["revision"] and leaf["revision"] != leaf["revision_before"], leaf
    del leaf["revision"]
    leaf.update(state="pushing", applied=[])  # as the journal stood while the commit was in flight
    path.write_text(json.dumps(doc))
    (inv / ".fabtune.lock").unlink()  # as a refused rollback left it before issue 18: free, stale
    n_runs = len(list(journal.glob("*.json")))
    again = _run("rollout", "-i", str(inv), "--journal-dir", str(journal), *SMALL)
    assert again.returncode == 2, (again.stdout, again.stderr)
    assert re.search(r"leaf01.*revision \d+ \(on top of \d+\) waits for a commit-confirm that no live run owns",
                     again.stderr), again.stderr
    assert "kept" not in again.stdout and len(list(journal.glob("*.json"))) == n_runs
    res = _rollback(journal, rid)
    assert res.returncode == 0 and "rolled back on 2 device(s)" in res.stdout, (res.stdout, res.stderr)
    assert _diff(tuned, snapshot_fabric(lab)) == []
    assert _run("plan", "-i", str(inv), *SMALL[2:]).returncode == 0  # no commit left pending


def test_a_rollback_that_cannot_restore_one_switch_restores_nothing(lab_inventory: Path, tmp_path: Path):
    """A rollback is all or nothing: a person's commit on top of the run's on leaf01 makes its
    restore impossible, so node01 (restorable) is not touched either: exit 3, "nothing restored",
    naming leaf01 and why. Once the person's commit is gone, the same rollback restores both."""
    from tuning import inventory
    from tuning.targets.switch import open_driver

    journal = tmp_path / "j"
    untuned = snapshot_fabric(lab_inventory)
    res = _run("apply", "-i", str(lab_inventory), "--journal-dir", str(journal), "-l", "node01", "-l", "leaf01")
    assert res.returncode == 0, res.stdout + res.stderr
    rid = re.search(r"\(run (\S+)\)", res.stdout)[1]
    tuned = snapshot_fabric(lab_inventory)
    assert {k.split(":")[0] for k in _diff(untuned, tuned)} == {"node01", "leaf01"}
    drv = open_driver(inventory.load(lab_inventory).devices["leaf01"])
    try:
        ours = drv.current_revision()
        drv.load_candidate("nv set interface swp31 link mtu 9100\n")
        assert drv.commit() != ours  # a person's commit, on top of the run's
        refused = _rollback(journal, rid)
        assert refused.returncode == 3, refused.stdout + refused.stderr
        assert "nothing restored: 1 of 2 device(s) cannot be restored (leaf01: a commit of another run or person " \
               "is applied" in refused.stderr, refused.stderr
        now = snapshot_fabric(lab_inventory)
        assert [k for k in _diff(tuned, now) if not k.startswith("leaf01:")] == []  # node01 untouched
        assert read_lock(lock_path(lab_inventory))["run_id"] == rid  # the lock stays, as the run's
        drv.rollback_to(ours)  # the person takes their commit back
    finally:
        drv.close()
    done = _rollback(journal, rid)
    assert done.returncode == 0 and "rolled back on 2 device(s)" in done.stdout, done.stdout + done.stderr
    assert _diff(untuned, snapshot_fabric(lab_inventory)) == []
