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
A lock held on another host cannot be judged from here and is always refused.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from tuning.errors import TuningError

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


def pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` exists on this host (a zombie counts as dead)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed child not yet reaped by its parent still answers kill(0)
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def _unfinished(journal: str | None) -> list[str]:
    """Devices the lock holder's journal says it changed and did not restore ([] if none or no journal)."""
    from tuning.rollout.journal import TOUCHED

    if not journal:
        return []
    try:
        doc = json.loads(Path(journal).read_text())
        devices = doc.get("devices") or {}
    except (OSError, ValueError, AttributeError):
        return []
    if doc.get("outcome") is not None:
        return []
    return sorted(n for n, rec in devices.items()
                  if isinstance(rec, dict) and rec.get("state") in TOUCHED and not rec.get("restored"))


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
        doc = {"run_id": self.run_id, "pid": self.pid or os.getpid(), "host": socket.gethostname(), "mode": self.mode,
               "started": time.time(), "journal": str(self.journal.resolve())}
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        except OSError as e:
            raise LockError(f"cannot create the run lock {self.path}: {e.strerror}") from None
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(doc) + "\n")
        self.held = True
        return True

    def _read(self) -> dict | None:
        try:
            info = json.loads(self.path.read_text() or "null")
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            info = None
        if not isinstance(info, dict):
            age = time.time() - self.path.stat().st_mtime if self.path.exists() else 0
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
        left = _unfinished(info.get("journal"))
        if left and info.get("run_id") != self.take_over_run:
            raise LockError(f"stale lock {self.path}: {who} died (pid gone) and left {', '.join(left)} changed; "
                            f"run `fabtune rollback {info.get('run_id')}` first")

    def release(self) -> None:
        """Give the lock back (only if this object holds it and the file is still ours)."""
        if not self.held:
            return
        self.held = False
        try:
            info = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        if isinstance(info, dict) and info.get("run_id") == self.run_id and info.get("pid") == (self.pid or os.getpid()):
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
