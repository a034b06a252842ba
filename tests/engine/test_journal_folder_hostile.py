"""Issue 18 items 6-8, without a lab: hostile journal folders, run ids and journal folders checked
for every front end, and an unwritable journal folder.

Every hostile file (:data:`HOSTILE`, built by :func:`make_hostile`; add a kind there) lies next to
one valid journal: ``fabtune runs`` lists the valid run plus one ``unreadable`` row per bad file
and exits 0; ``report BAD`` and ``rollback BAD`` exit 2 with one stderr line naming the file; no
command hangs (a FIFO), blows up (``/dev/zero``) or prints a traceback. Hostile run locks are
refused naming the lock, or judged as a dead holder's garbage (a regular file), never read
unbounded. ``runs`` runs as the real CLI (a subprocess under a timeout); the other commands run
:func:`tuning.cli.main` in this process, in a thread under a timeout, so a hang fails the test.

The tests run as root (in a user namespace): ``chmod 0500`` does not stop root from writing, so
an unwritable journal folder is made by a path whose parent is a regular file (before a push)
and by the folder being replaced by a regular file mid-run (after one).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pytest

from tests.adversarial._cli import cli
from tests.conftest import REPO
from tuning.errors import InputError, JournalWriteError
from tuning.node.base import Change
from tuning.rollout.journal import Journal, list_runs
from tuning.rollout.statefile import JOURNAL_MAX_BYTES, LOCK_MAX_BYTES

GOOD = "20261130T101500-000ok0"
NODE01 = {"hostname": "127.0.0.1", "port": 1, "username": "fabtune", "key_file": None, "known_hosts": None,
          "sysroot": "/"}  # port 1: a connect is refused at once (exit 4), no lab needed


# ---- the generator of hostile files: name -> (how to make it at a path, what the refusal says) ----
def _sparse(size: int) -> Callable[[Path], None]:
    def make(p: Path) -> None:
        with open(p, "wb") as f:
            f.truncate(size)  # no disk used: refused on its size before a byte is read
    return make


def _text(text: str) -> Callable[[Path], None]:
    return lambda p: p.write_text(text)


def _journal_text(**extra: str) -> str:
    """A journal's JSON text with ``extra`` keys written verbatim (raw JSON values)."""
    head = json.dumps({"run_id": "20261130T101600-xxxxxx", "inventory": "/x", "mode": "apply", "devices": {}})
    return head[:-1] + "".join(f', "{k}": {v}' for k, v in extra.items()) + "}"


HOSTILE: dict[str, tuple[Callable[[Path], None], str]] = {
    "bad-utf8": (lambda p: p.write_bytes(b'{"run_id": "\xff\xfe", "devices": {}}'), "not UTF-8"),
    "fifo": (lambda p: os.mkfifo(p), "FIFO"),
    "dev-zero": (lambda p: os.symlink("/dev/zero", p), "symbolic link"),
    "directory": (lambda p: p.mkdir(), "directory"),
    "deep": (_text("[" * 100_000 + "]" * 100_000), "nested too deeply"),
    "deep-70": (_text(_journal_text(x="[" * 70 + "]" * 70)), "nested too deeply"),
    "digits-5000": (_text(_journal_text(started="9" * 5000)), "more than 4300 digits"),
    "digits-400": (_text(_journal_text(started="9" * 400)), "400 digits"),
    "time-inf": (_text(_journal_text(started="Infinity")), "started"),
    "top-list": (_text("[]"), "top level is an array"),
    "over-cap": (_sparse(JOURNAL_MAX_BYTES + 1), f"at most {JOURNAL_MAX_BYTES}"),
}


def hostile_id(kind: str) -> str:
    """The run id of the hostile journal of ``kind``."""
    return f"20261130T1016{list(HOSTILE).index(kind):02d}-{kind}"


def make_hostile(jdir: Path, kind: str) -> Path:
    """Make the hostile journal of ``kind`` (:data:`HOSTILE`) in ``jdir``; returns its path."""
    path = jdir / f"{hostile_id(kind)}.json"
    HOSTILE[kind][0](path)
    return path


def valid_journal(jdir: Path, inv: Path) -> Journal:
    """A finished apply on ``inv`` that changed node01 (rollback would restore it)."""
    j = Journal.create(jdir, str(inv), "apply", GOOD)
    ch = Change("node01", "sysctl", "sysctl/net.core.rmem_max", "212992", "268435456",
                apply_cmd="sysctl -w net.core.rmem_max=268435456", restore_cmd="sysctl -w net.core.rmem_max=212992",
                read_cmd="sysctl -n net.core.rmem_max").as_dict()
    j.update("node01", role="node", platform="linux", state="applied", changes=[ch], applied=[ch], connection=NODE01)
    j.data["outcome"] = "applied"
    j.stage("done")
    return j


@pytest.fixture
def folder(tmp_path: Path) -> SimpleNamespace:
    """``jdir`` (one valid journal, whose inventory is ``inv``) and ``inv`` (an empty inventory folder)."""
    inv, jdir = tmp_path / "inv", tmp_path / "j"
    inv.mkdir()
    valid_journal(jdir, inv)
    return SimpleNamespace(jdir=jdir, inv=inv)


def run_cli(*args: str, timeout: float = 30.0) -> tuple[int, str, str]:
    """``fabtune ARGS`` in this process (:func:`tests.adversarial._cli.cli`), failing on a hang."""
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(result=cli(*args)), daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"fabtune {' '.join(args)} still running after {timeout} s (a hang)"
    return box["result"]


def errors(err: str) -> list[str]:
    """stderr without the progress lines (``... connecting``)."""
    assert "Traceback" not in err, err[-1500:]
    return [line for line in err.splitlines() if not line.startswith("...")]


# ---- item 7: one bad file never breaks runs, report or rollback ----------------------------------
def test_runs_lists_the_valid_run_and_one_unreadable_row_per_hostile_file(folder: SimpleNamespace):
    for kind in HOSTILE:
        make_hostile(folder.jdir, kind)
    env = {**os.environ, "COLUMNS": "400"}
    res = subprocess.run([sys.executable, "-m", "tuning", "runs", "--journal-dir", str(folder.jdir), "--json"],
                         capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-1500:]
    rows = {r["run_id"]: r for r in json.loads(res.stdout)}
    assert len(rows) == 1 + len(HOSTILE) and rows[GOOD]["outcome"] == "applied" and rows[GOOD]["n_changes"] == 1
    for kind, (_, needle) in HOSTILE.items():
        row = rows[hostile_id(kind)]
        assert row["stage"] == "unreadable" and row["outcome"].startswith("unreadable: "), row
        assert needle in row["outcome"], (kind, row["outcome"])
    res = subprocess.run([sys.executable, "-m", "tuning", "runs", "--journal-dir", str(folder.jdir)],
                         capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert res.returncode == 0 and "Traceback" not in res.stderr + res.stdout, res.stderr[-1500:]
    assert GOOD in res.stdout and res.stdout.count("unreadable: ") == len(HOSTILE), res.stdout


@pytest.mark.parametrize("kind", list(HOSTILE))
@pytest.mark.parametrize("command", ["report", "rollback"])
def test_report_and_rollback_of_a_hostile_journal_refuse_in_one_line(folder: SimpleNamespace, kind: str,
                                                                     command: str):
    path = make_hostile(folder.jdir, kind)
    code, _, err = run_cli(command, hostile_id(kind), "--journal-dir", str(folder.jdir))
    lines = errors(err)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("fabtune: error: "), (code, err)
    assert str(path) in lines[0] and HOSTILE[kind][1] in lines[0], lines[0]


def test_rollback_of_the_valid_run_reads_its_hostile_neighbours_safely(folder: SimpleNamespace):
    """``rollback GOOD`` reads every other journal (later runs on the same settings): a FIFO there
    used to block it forever. It now gets as far as connecting to node01 (refused: exit 4), and leaves
    the lock as GOOD's."""
    for kind in HOSTILE:
        make_hostile(folder.jdir, kind)
    code, _, err = run_cli("rollback", GOOD, "--journal-dir", str(folder.jdir))
    lines = errors(err)
    assert code == 4 and len(lines) == 1 and "cannot reach 127.0.0.1:1" in lines[0], err
    # taken, and left behind as GOOD's: a rollback that could not restore keeps the inventory locked (issue 18)
    assert json.loads((folder.inv / ".fabtune.lock").read_text())["run_id"] == GOOD


# ---- hostile run locks -----------------------------------------------------------------------------
def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _old(make: Callable[[Path], None]) -> Callable[[Path], None]:
    """``make``, then the file dated a minute back (garbage of a holder killed long ago)."""
    def made(p: Path) -> None:
        make(p)
        os.utime(p, (time.time() - 60, time.time() - 60))
    return made


#: locks that are not a regular file: refused, named, never read
REFUSED_LOCKS = {"fifo": HOSTILE["fifo"], "dev-zero": HOSTILE["dev-zero"], "directory": HOSTILE["directory"]}
#: regular files that are no lock: a dead holder's garbage, taken over (bounded reads)
GARBAGE_LOCKS = {"deep": _old(HOSTILE["deep"][0]), "over-cap": _old(_sparse(LOCK_MAX_BYTES + 1)),
                 "bad-utf8": _old(HOSTILE["bad-utf8"][0]), "pid-overflow": _old(_text('{"pid": 1e300}'))}


@pytest.mark.parametrize("kind", list(REFUSED_LOCKS))
def test_a_lock_that_is_not_a_regular_file_is_refused_naming_it(folder: SimpleNamespace, kind: str):
    from tuning.rollout.lock import release

    lock = folder.inv / ".fabtune.lock"
    REFUSED_LOCKS[kind][0](lock)
    code, _, err = run_cli("rollback", GOOD, "--journal-dir", str(folder.jdir))
    lines = errors(err)
    assert code == 2 and len(lines) == 1 and str(lock) in lines[0] and REFUSED_LOCKS[kind][1] in lines[0], err
    release(folder.inv, GOOD)  # the Ansible end stage's release leaves what is not its lock alone
    assert os.path.lexists(lock)


@pytest.mark.parametrize("kind", list(GARBAGE_LOCKS))
def test_a_garbage_lock_is_a_dead_holders_and_taken_over(folder: SimpleNamespace, kind: str):
    GARBAGE_LOCKS[kind](folder.inv / ".fabtune.lock")
    code, _, err = run_cli("rollback", GOOD, "--journal-dir", str(folder.jdir))
    assert code == 4 and "cannot reach 127.0.0.1:1" in errors(err)[0], err  # the lock was taken: on to connect


def test_a_stale_lock_naming_a_fifo_journal_does_not_block(folder: SimpleNamespace):
    import socket

    os.mkfifo(folder.jdir / "fifo.json")
    lock = {"run_id": "20261130T101400-dead00", "pid": _dead_pid(), "host": socket.gethostname(), "mode": "apply",
            "started": 0, "journal": str(folder.jdir / "fifo.json")}
    (folder.inv / ".fabtune.lock").write_text(json.dumps(lock))
    code, _, err = run_cli("rollback", GOOD, "--journal-dir", str(folder.jdir))
    assert code == 4 and "cannot reach 127.0.0.1:1" in errors(err)[0], err


# ---- item 6: run ids and journal folders, checked alike for the CLI and the Ansible front end ----
def _common():
    pytest.importorskip("ansible")
    plugins = str(REPO / "playbooks" / "action_plugins")
    if plugins not in sys.path:
        sys.path.insert(0, plugins)
    import _fabtune_common

    return _fabtune_common


def test_a_run_id_that_leaves_the_journal_folder_is_refused_by_every_front_end(tmp_path: Path):
    from tuning import inventory
    from tuning.rollout.steps import StepOptions, begin

    jdir, inv = tmp_path / "j", tmp_path / "lab"
    shutil.copytree(REPO / "inventory" / "lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune*"))
    code, _, err = run_cli("report", "../../X", "--journal-dir", str(jdir))
    assert code == 2 and len(errors(err)) == 1 and "RUN_ID: ../../X: not a run id" in err, err
    with pytest.raises(InputError, match=r"^fabtune_run_id: \.\./\.\./X: not a run id"):
        _common().run_id({"fabtune_run_id": "../../X"})  # what every plugin stage reads
    assert _common().run_id({"__fabtune_begin": {"run_id": GOOD}}) == GOOD
    with pytest.raises(InputError, match=r"^fabtune_run_id: \.\./\.\./X: not a run id"):
        begin(inventory.load(inv), ["node01"], StepOptions(journal_dir=jdir), os.getpid(), "../../X")
    with pytest.raises(InputError, match=r"^RUN_ID: \.\./\.\./X: not a run id"):
        Journal.create(jdir, str(inv), "rollout", "../../X")
    assert not (inv / ".fabtune.lock").exists() and not jdir.exists() and not (tmp_path.parent / "X.json").exists()


def test_the_ansible_front_end_refuses_the_journal_folders_the_cli_refuses(tmp_path: Path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (tmp_path / "file").write_text("")
    for bad, needle in ((shared, "group/world-writable (0777)"), (tmp_path / "file", "is not a directory")):
        with pytest.raises(InputError, match=re.escape(needle)):
            _common().step_options({"fabtune_journal_dir": str(bad)}, False, None)
        code, _, err = run_cli("runs", "--journal-dir", str(bad))
        assert code == 2 and needle in errors(err)[0], err
    ok = tmp_path / "ok"
    assert _common().step_options({"fabtune_journal_dir": str(ok)}, False, None).journal_dir == ok


# ---- item 8: a journal folder that cannot be written -----------------------------------------------
class _Switch:
    """A switch already back at its revision_before: restoring it discards the candidate."""

    discarded = False

    def has_pending_commit(self) -> bool:
        return False

    def current_revision(self) -> str:
        return "3"

    def discard(self) -> None:
        self.discarded = True


def test_a_journal_folder_unwritable_before_a_push_is_one_line_exit_2(tmp_path: Path):
    (tmp_path / "file").write_text("")
    jdir = tmp_path / "file" / "j"  # its parent is a regular file: nothing can be made there
    with pytest.raises(JournalWriteError) as err:
        Journal.create(jdir, str(tmp_path), "apply", GOOD)
    msg = str(err.value)
    assert err.value.exit_code == 2 and "\n" not in msg and msg.startswith(f"cannot write {jdir / GOOD}.json: ")
    assert msg.endswith("; nothing was pushed"), msg


def test_a_journal_folder_unwritable_after_a_push_is_exit_3_and_the_restore_still_runs(tmp_path: Path):
    from tuning.model.policy import RolloutPolicy
    from tuning.rollout.batch_run import restore_batches
    from tuning.rollout.session import Session, journal_batches
    from tuning.rollout.batches import Batch
    from tuning.rollout.options import Run
    from tuning.rollout.run_report import RunReport

    jdir = tmp_path / "j"
    j = Journal.create(jdir, str(tmp_path), "apply", GOOD)
    r = Run(GOOD, None, None, RolloutPolicy(), [Batch(1, [], ["leaf01"], [["leaf01"]])])
    r.current = r.batches[0]
    journal_batches(j, r.batches)
    j.update("leaf01", role="switch", platform="nvue", state="pushing", revision_before="3", changes=[])
    jdir.rename(tmp_path / "moved")  # the folder goes away mid-run (a remount, a cleanup) ...
    jdir.write_text("")  # ... and a regular file takes its name
    with pytest.raises(JournalWriteError) as err:
        j.update("leaf01", state="applied")
    assert err.value.exit_code == 3 and f"run `fabtune rollback {GOOD}` once it is writable" in str(err.value)
    from tuning.targets.switch import SwitchTarget
    from tuning.transport.connection import Connection

    switch = _Switch()
    target = SwitchTarget("leaf01", Connection("127.0.0.1", 1, "fabtune", None, None), "nvue")
    target.driver = switch  # an open session to a switch already back at revision_before
    with pytest.raises(JournalWriteError) as err:  # not three chained tracebacks, not a RollbackError
        s = Session(None, [], 1, RolloutPolicy())  # the run's session: its one open target
        s.targets["leaf01"] = target
        restore_batches(s, RunReport(GOOD, "apply"), lambda m: None, j, r, "batch 1: failed")
    assert switch.discarded and err.value.exit_code == 3 and "\n" not in str(err.value)
    doc = json.loads((tmp_path / "moved" / f"{GOOD}.json").read_text())
    assert doc["devices"]["leaf01"]["state"] == "pushing"  # what rollback restores once it is writable
    assert [r["stage"] for r in list_runs(tmp_path / "moved")] == ["validate"]  # whole and valid


@pytest.mark.parametrize("mode", ["apply", "rollout"])
def test_a_journal_folder_that_cannot_be_made_is_refused_before_any_device_is_read(tmp_path: Path, mode: str):
    """The tryout of session 13 (uid 65534, cwd /): a rollout collected from every device and only
    then refused the journal folder. Now the folder is made and written to first: every device
    here answers on a port below 8 (refused: exit 4 had it been read), and the run is exit 2 naming the folder."""
    from tests.adversarial._cli import copy_lab_inventory

    names = ["node01", "node02", "node03", "node04", "leaf01", "leaf02", "spine01"]
    inv = copy_lab_inventory(tmp_path / "inv", {n: k for k, n in enumerate(names, 1)})  # ports 1..7: refused
    (tmp_path / "file").write_text("")
    jdir = tmp_path / "file" / "j"
    code, out, err = cli(mode, "-i", str(inv), "--journal-dir", str(jdir))
    assert code == 2 and err.strip() == f"fabtune: error: cannot write {jdir}: Not a directory; nothing was pushed", err
