"""One run per inventory at a time: a lock file beside the inventory.

``apply``, ``rollout`` and ``rollback`` take ``<INV>/.fabtune.lock`` before they read a device and
give it back when they end. Two runs on one inventory at once would spoil each other's
measurements and restore each other's commits, so a second run is refused with one line naming
the holder (run id, pid, host, since when).

The file is created with ``O_CREAT | O_EXCL`` (atomic on a local file system) and holds JSON::

    {"run_id": "20261130T101500-1a2b3c", "pid": 4242, "host": "ctl01", "mode": "rollout",
     "started": 1796000000.0, "journal": "/abs/.fabtune/journal/20261130T101500-1a2b3c.json"}

A lock whose pid is dead on this host is *stale* (a controller killed with SIGKILL). It is taken
over silently when its run left nothing to undo (no journal, or every touched device restored,
or the run ended); otherwise it is refused, naming the run and its changed devices, until
``fabtune rollback RUN_ID`` of that very run (which may take the lock over) restores them.
A lock held on another host cannot be judged from here and is always refused. A rollback that
fails or is refused leaves the lock behind as the rolled-back run's (:meth:`RunLock.hand_back_to`):
no other run starts on a fabric that run left changed until its rollback succeeds.

The lock, and the journal it names, are read by :func:`tuning.rollout.statefile.read_state_file`
(never blocking, bounded): a lock that is not a regular file (a FIFO, a link, a device) is refused
with one line naming it; a regular one that is not a lock (half written, garbage) is judged as a
lock whose holder died once it is 5 s old.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from tuning.errors import InputError, TuningError
from tuning.procs import pid_alive
from tuning.rollout.statefile import LOCK_MAX_BYTES, read_state_file

LOCK_NAME = ".fabtune.lock"


class LockError(TuningError):
    """Another run holds the inventory's lock (nothing was read or pushed). Exit 2.

    ``live``: the holder is a running process (worth waiting for), not a stale lock.
    """

    exit_code = 2
    live = False


def lock_path(inventory: Path) -> Path:
    """``<inventory dir>/.fabtune.lock`` (the inventory may be given as its ``hosts.yaml``)."""
    inv = Path(inventory)
    return (inv.parent if inv.is_file() else inv) / LOCK_NAME


def _unfinished(journal: object) -> tuple[str | None, list[str]]:
    """The run the lock holder's journal belongs to and the devices it says that run changed and
    did not restore (``(None, [])`` if none, no journal, or an unreadable one: read safely,
    :func:`tuning.rollout.journal.read_doc`). The run is the journal's, not the lock's: a
    ``fabtune rollback RUN`` killed mid-restore holds the lock as ``rollback-RUN`` over RUN's
    journal, and only ``fabtune rollback RUN`` can finish that."""
    from tuning.rollout.journal import read_doc, rollback_interrupted, unrestored

    if not journal or not isinstance(journal, str):
        return None, []
    doc, _ = read_doc(Path(journal))
    if doc is None or (doc.get("outcome") is not None and not rollback_interrupted(doc)):
        return None, []
    return doc.get("run_id"), unrestored(doc)


#: a lock's fields and their types (a pid is a positive int, ``started`` epoch seconds)
_FIELDS = {"run_id": str, "pid": int, "host": str, "mode": str, "started": (int, float),
           "journal": (str, type(None))}


def _lock_info(doc: dict) -> dict | None:
    """``doc`` when it is a lock fabtune wrote (typed fields, a pid and a time in range), else None."""
    for k, t in _FIELDS.items():
        if k in doc and (not isinstance(doc[k], t) or isinstance(doc[k], bool)):
            return None
    pid, started = doc.get("pid"), doc.get("started", 0)
    if not isinstance(pid, int) or not 0 < pid < 1 << 31 or not 0 <= started <= 1e10:
        return None
    return doc


def read_lock(path: Path) -> dict | None:
    """The lock at ``path`` (safely read, typed: :func:`_lock_info`), None when it is missing or
    not a lock: a caller giving a lock back then leaves the file alone."""
    try:
        doc = read_state_file(path, LOCK_MAX_BYTES, "run lock")
    except InputError:
        return None
    return _lock_info(doc) if doc is not None else None


@dataclass
class RunLock:
    """The lock of one inventory, held by this process while a run changes devices.

    Use as a context manager, or :meth:`acquire` / :meth:`release`.
    """

    path: Path
    run_id: str
    mode: str
    journal: Path
    take_over_run: str | None = None  # rollback RUN_ID may take over the stale lock of RUN_ID
    wait_s: float = 0.0  # wait this long for a live holder to end (the Ansible front end's hosts)
    held: bool = False
    #: the process the lock names as its holder (None: this one). The Ansible front end names the
    #: ``ansible-playbook`` process, which outlives the worker that takes the lock: the stale-lock
    #: rules then judge the playbook run itself
    pid: int | None = None

    def describe(self, info: dict) -> str:
        """``run R (rollout, pid 4242 on ctl01, since 10:15:00 UTC)``."""
        since = time.strftime("%H:%M:%S UTC", time.gmtime(float(info.get("started") or 0)))
        return f"run {info.get('run_id')} ({info.get('mode')}, pid {info.get('pid')} on {info.get('host')}, since {since})"

    def acquire(self) -> "RunLock":
        """Take the lock, or take over a stale one that is safe to take.

        Raises:
            LockError: a live run holds it, or a dead run left devices changed (names it).
        """
        deadline, tries = time.monotonic() + self.wait_s, 0
        while True:
            if self._create():
                return self
            info = self._read()
            if info is None:
                continue  # removed or half written between our tries
            try:
                self._judge(info)
            except LockError as e:
                if not e.live or time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
                continue
            tries += 1
            if tries > 3:
                raise LockError(f"could not take the lock {self.path}: it keeps changing hands")
            self.path.unlink(missing_ok=True)  # stale and safe: take it over

    def _create(self) -> bool:
        """Create the lock (O_EXCL); False when one exists. Raises LockError when it cannot be written."""
        doc = self._doc(self.run_id, self.journal)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        except OSError as e:
            raise LockError(f"cannot create the run lock {self.path}: {e.strerror}") from None
        try:
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(doc) + "\n")
        except OSError as e:  # a full disk: no half-written lock is left behind
            self.path.unlink(missing_ok=True)
            raise LockError(f"cannot write the run lock {self.path}: {e.strerror}") from None
        self.held = True
        return True

    def _doc(self, run_id: str, journal: Path) -> dict:
        """The lock document naming ``run_id`` (its journal folder) as held by this process, now."""
        return {"run_id": run_id, "pid": self.pid or os.getpid(), "host": socket.gethostname(), "mode": self.mode,
                "started": time.time(), "journal": str(Path(journal).resolve())}

    def _read(self) -> dict | None:
        """The holder's lock; None when it went away or is being written (look again); a dead
        holder's placeholder for garbage at least 5 s old (a holder killed before it wrote it).

        Raises:
            LockError: the lock is not a regular file (a FIFO, a link, a device): never read, named.
        """
        try:
            doc = read_state_file(self.path, LOCK_MAX_BYTES, "run lock")
        except InputError as e:
            if not _regular(self.path):
                raise LockError(f"{e}; remove it once you know no run holds this inventory") from None
            doc = {}
        try:
            age = time.time() - os.lstat(self.path).st_mtime
        except FileNotFoundError:
            return None  # removed between our tries
        info = _lock_info(doc) if doc else None
        if info is None:
            if age < 5:
                time.sleep(0.2)  # being written right now
                return None
            return {"run_id": "?", "pid": -1, "host": socket.gethostname(), "mode": "?", "started": 0}
        return info

    def _judge(self, info: dict) -> None:
        """Return when ``info`` names a stale lock that may be taken over; else raise LockError."""
        who = self.describe(info)
        if info.get("host") != socket.gethostname():
            raise LockError(f"{self.path} is held by {who}, on another host: wait for it to end, or remove "
                            f"the file once you know that run is gone")
        if pid_alive(int(info.get("pid") or -1)):
            err = LockError(f"another run holds this inventory: {who}; wait for it to end ({self.path})")
            err.live = True
            raise err
        run, left = _unfinished(info.get("journal"))
        if left and (run or info.get("run_id")) != self.take_over_run:
            raise LockError(f"stale lock {self.path}: {who} died (pid gone) and left {', '.join(left)} changed; "
                            f"run `fabtune rollback {run or info.get('run_id')}` first")

    def release(self) -> None:
        """Give the lock back (only if this object holds it and the file is still ours)."""
        if not self.held:
            return
        self.held = False
        info = read_lock(self.path)
        if info is not None and info.get("run_id") == self.run_id and info.get("pid") == (self.pid or os.getpid()):
            self.path.unlink(missing_ok=True)

    def hand_back_to(self, run_id: str, journal: Path) -> None:
        """Leave the lock held, as ``run_id``'s (its journal), instead of giving it back: a rollback
        that failed or was refused keeps the inventory locked for the run it could not restore.
        Once this process ends the lock is stale, and every other run is refused with "run
        `fabtune rollback RUN_ID` first" while that journal names devices left changed (a run that
        never ended, or a rollback that began writing and did not finish); ``fabtune rollback
        RUN_ID`` takes it over. Written atomically (temporary file, rename)."""
        if not self.held:
            return
        self.held = False
        doc = self._doc(run_id, journal)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(doc) + "\n")
            os.replace(tmp, self.path)
        except OSError:  # the lock as it was (this rollback's) still blocks, only under another name
            tmp.unlink(missing_ok=True)

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _regular(path: Path) -> bool:
    """Whether ``path`` is a regular file itself (not a link to one); a file gone meanwhile counts
    as one (the caller looks again)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return True


def release(inv_path: Path, run_id: str) -> None:
    """Give back the inventory's lock if ``run_id`` holds it (whatever process took it)."""
    path = lock_path(inv_path)
    info = read_lock(path)
    if info is not None and info.get("run_id") == run_id:
        path.unlink(missing_ok=True)
