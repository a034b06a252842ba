"""The on-disk journal of a run: what was snapshotted, what was applied, how it ended.

Written before the first write to any device and after every stage (atomic replace), so
``fabtune rollback RUN_ID`` can finish what a crashed controller left. One JSON file per run:
``<journal_dir>/<run_id>.json``. It holds everything a restore needs and nothing else: per device
its role, platform, connection facts (:func:`tuning.targets.base.connection_facts`: host, port, user, key file and
known_hosts as absolute paths, sysroot, become settings; never a password), the planned and
applied change dicts (each with its ``restore_cmd``) and, for switches, ``revision_before`` and
the committed ``revision``. Baselines live in ``<journal_dir>/baselines/``, one per inventory
(:mod:`tuning.rollout.baseline`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tuning.errors import InputError, JournalWriteError
from tuning.outfile import write_atomic
from tuning.rollout import journal_check
from tuning.rollout.statefile import JOURNAL_MAX_BYTES, read_state_file
from tuning.model.outcomes import TOUCHED, DeviceState

DEFAULT_DIR = Path(".fabtune") / "journal"
#: the note of the journal events ``fabtune rollback`` writes (``restore`` before its first write,
#: ``done`` at the end); `` --force`` is appended when it overrode later runs' settings
ROLLBACK_NOTE = "fabtune rollback"


@dataclass(frozen=True)
class DeviceRecord:
    """One device's record of a :class:`Journal` (the contract :class:`tuning.targets.base.DeviceJournal`)."""

    journal: "Journal"
    name: str

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.journal.run_id

    def get(self) -> dict:
        """The record as journaled so far."""
        return self.journal.device(self.name)

    def update(self, **fields: object) -> None:
        """Set fields and save at once (:meth:`Journal.update`). Raises JournalWriteError."""
        self.journal.update(self.name, **fields)


def new_run_id() -> str:
    """``20261130T101500-1a2b3c`` (UTC time + random suffix): sortable and unique."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


#: the journal keys of what a front end's run holds outside the devices while it lasts (a
#: scheduler's hold of its nodes), ended by ``fabtune rollback`` after a killed controller:
#: ``tuning/slurm_holds.py`` (Slurm allocations and drains), ``tuning/k8s/leftovers.py``
#: (NodeMaintenances and ConfigMaps); a Slurm allocation asked for and not answered yet: its nodes
SLURM_HOLDS_KEY, SLURM_REQUEST_KEY = "slurm_holds", "slurm_request"
K8S_HOLDS_KEY = "k8s"


@dataclass
class Journal:
    """One run's journal. ``data`` is the JSON document; :meth:`save` persists it.

    Document shape::

        {"run_id": "...", "inventory": "inventory/lab", "mode": "rollout", "stage": "verify",
         "outcome": null, "devices": {"node01": {"role": "node", "changes": [...], "applied": [...]},
                                      "leaf01": {"role": "switch", "revision_before": "3", "revision": "4"}},
         "verify": {"before": [...], "after": [...]}, "events": [["apply", "..."]]}
    """

    path: Path
    data: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    #: written by several processes at once (the Ansible front end's forked workers): every save
    #: takes an ``flock`` on ``<run_id>.json.lock``, re-reads the file and keeps its device records
    #: (each process updates its own devices), so no process's update is lost; False (the Nornir
    #: engine, one process): plain atomic writes, as fast as before
    shared: bool = False
    #: the file on disk records a device the run may have changed (a push may have happened since):
    #: a journal that cannot be written then is exit 3, before it exit 2 (:class:`JournalWriteError`)
    pushed: bool = field(default=False, repr=False, compare=False)

    @classmethod
    def create(cls, journal_dir: Path, inventory: str, mode: str, run_id: str | None = None,
               shared: bool = False, started: float | None = None) -> "Journal":
        """Start a new journal (written at once). ``inventory`` is stored as an absolute path;
        ``shared``: see the attribute; ``started``: when the run began (epoch s; default now), so
        ``fabtune runs`` counts the same seconds as the run's own summary.

        Raises:
            InputError: ``run_id`` is not a run id.  JournalWriteError: the folder cannot be written.
        """
        run_id = journal_check.check_run_id(run_id) if run_id else new_run_id()
        inventory = str(Path(inventory).resolve())
        j = cls(journal_dir / f"{run_id}.json", {
            "run_id": run_id, "inventory": inventory, "mode": mode, "stage": "validate",
            "outcome": None, "started": started if started is not None else time.time(), "devices": {}, "verify": {},
            "events": []}, shared=shared)
        j.save()
        return j

    @classmethod
    def load(cls, journal_dir: Path, run_id: str) -> "Journal":
        """Open a run's journal. Raises InputError naming the runs that exist."""
        journal_check.check_run_id(run_id)
        path = journal_dir / f"{run_id}.json"
        if not path.exists():
            runs = sorted(p.stem for p in journal_dir.glob("*.json") if p.stem != "baseline")[-5:]
            raise InputError("RUN_ID", run_id, f"no journal {path}; recent runs: {', '.join(runs) or 'none'} "
                             f"(a run that wrote its journal elsewhere: pass its --journal-dir)")
        journal_check.check_trust(path)
        doc, why = read_doc(path)
        if doc is None:
            raise InputError(str(path), run_id, f"journal unreadable: {why}; nothing can be restored from it")
        journal_check.validate(doc, path)
        return cls(path, doc, pushed=_touched(doc))

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.data["run_id"]

    def stage(self, name: str, note: str = "") -> None:
        """Record entering a stage, and save."""
        self.data["stage"] = name
        self.data["events"].append([name, note, round(time.time(), 3)])
        self.save()

    def device(self, name: str) -> dict:
        """The mutable per-device record."""
        return self.data["devices"].setdefault(name, {})

    def of(self, name: str) -> "DeviceRecord":
        """Device ``name``'s record as a target writes it (:class:`tuning.targets.base.DeviceJournal`)."""
        return DeviceRecord(self, name)

    def update(self, name: str, **fields: object) -> None:
        """Set fields of one device's record and save at once (safe from the fan-out threads and,
        when :attr:`shared`, from other processes)."""
        if self.shared:
            self._save_shared(name, fields)
            return
        with self._lock:
            self.data["devices"].setdefault(name, {}).update(fields)
        self.save()

    def save(self) -> None:
        """Atomic write (tmp file + rename), serialised across threads (and processes when :attr:`shared`)."""
        if self.shared:
            self._save_shared()
            return
        with self._lock:
            self._write()

    def _write(self) -> None:
        """Write the document (the caller holds the locks); an OSError becomes one JournalWriteError."""
        try:
            # compact: json's C encoder serves only indent=None; a 4-node journal (1.5 MB) is written
            # ~26 times a run, 29 ms each indented against 7 ms (`jq . FILE` indents it for people)
            write_private(self.path, json.dumps(self.data, sort_keys=True, default=str) + "\n")
        except OSError as e:
            raise JournalWriteError(str(self.path), e.strerror or str(e), pushed=self.pushed,
                                    run_id=self.data.get("run_id")) from None
        self.pushed = self.pushed or _touched(self.data)

    def _save_shared(self, name: str | None = None, fields: dict | None = None) -> None:
        """Under the flock of ``<run_id>.json.lock``: merge every device record of the file into
        this process's (the file's keys win: other processes' updates; records and keys only this
        process holds stay: a snapshot being written), set ``fields`` on ``name``'s, write
        atomically. The rest of the document is this process's own (one process at a time drives a
        run's stages)."""
        sidecar = self.path.with_name(self.path.name + ".lock")
        with self._lock, _flocked(sidecar, self):
            disk, _ = read_doc(self.path)
            if disk is not None:
                self.pushed = self.pushed or _touched(disk)  # another process's push
                mine = self.data["devices"]
                for dev, rec in disk["devices"].items():
                    mine[dev] = {**mine.get(dev, {}), **rec}
            if name is not None:
                self.data["devices"].setdefault(name, {}).update(fields or {})
            self._write()


def touched(rec: object) -> bool:
    """Whether one device record says the run may have changed the device (its ``state`` is in
    :data:`TOUCHED`). The one rule every reader of journals uses: rollback, the lock, ``runs``."""
    return isinstance(rec, dict) and rec.get("state") in TOUCHED


def unrestored(doc: dict) -> list[str]:
    """Devices a journal document says the run may have changed and has not restored, sorted."""
    return sorted(n for n, rec in (doc.get("devices") or {}).items() if touched(rec) and not rec.get("restored"))


def _touched(doc: dict) -> bool:
    """Whether a journal document records a device the run may have changed (:func:`touched`)."""
    return any(touched(rec) for rec in (doc.get("devices") or {}).values())


@contextlib.contextmanager
def _flocked(path: Path, j: Journal):
    """Hold an exclusive ``flock(2)`` on ``path`` (created ``0600``) for the block; a sidecar that
    cannot be made is ``j``'s JournalWriteError."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        raise JournalWriteError(str(path), e.strerror or str(e), pushed=j.pushed, run_id=j.data.get("run_id")) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` atomically as a ``0600`` file in a ``0700`` directory (created if missing):
    rollback refuses a journal that others could have written (:func:`journal_check.check_trust`).
    Through :func:`tuning.outfile.write_atomic`: never through a link or onto a special file."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomic(path, text.encode(), 0o600)


def probe_writable(journal_dir: Path) -> None:
    """Make ``journal_dir`` (0700) and write then remove one file in it, before a run reads any
    device: a folder the run could not journal into is found first, not after every device was
    collected.

    Raises:
        JournalWriteError: the OS's words (``Permission denied``, ``Read-only file system``); nothing
            was pushed (exit 2).
    """
    probe = journal_dir / f".probe-{os.getpid()}"
    try:
        journal_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        probe.touch(mode=0o600, exist_ok=False)
        probe.unlink()
    except OSError as e:
        raise JournalWriteError(str(journal_dir), e.strerror or str(e), pushed=False) from None


def check_dir(journal_dir: Path | str, flag: str = "--journal-dir") -> Path:
    """A usable journal directory: not empty, not an existing non-directory, and (when it exists)
    owned by the invoking user or root and not group/world-writable. Every front end checks its
    journal folder here: the CLI's ``--journal-dir`` (:func:`tuning.cli_args.journal_dir_arg`) and
    the Ansible front end's ``fabtune_journal_dir`` (the plugins' ``step_options``).

    Raises:
        InputError: naming ``flag`` and what is wrong.
    """
    if not str(journal_dir).strip():
        raise InputError(flag, "''", "empty; give a directory (default .fabtune/journal)")
    p = Path(journal_dir)
    if p.exists() and not p.is_dir():
        raise InputError(flag, str(p), "is not a directory; give a directory for run journals")
    if p.is_dir():
        journal_check.check_trust(p / "x.json", file=False)
    return p


def read_doc(path: Path) -> tuple[dict | None, str]:
    """A journal file's document, or ``(None, why)`` for a missing, empty, truncated, ``null``,
    foreign or hostile file (a FIFO, a link, a device, too large, not UTF-8, too deep, a number too
    large: :func:`tuning.rollout.statefile.read_state_file`); ``why`` does not repeat the path."""
    try:
        doc = read_state_file(path, JOURNAL_MAX_BYTES, "run journal")
    except InputError as e:
        return None, e.problem
    if doc is None:
        return None, "no such file"
    if not isinstance(doc.get("run_id"), str) or not isinstance(doc.get("devices"), dict):
        return None, "is not a run journal (no run_id/devices)"
    return doc, ""


def _valid_doc(path: Path) -> tuple[dict | None, str]:
    """:func:`read_doc`, and ``(None, why)`` too for a journal whose structure is invalid."""
    doc, why = read_doc(path)
    if doc is not None:
        try:
            journal_check.validate(doc, path)
        except InputError as e:
            return None, f"invalid: {e.key}: {e.problem}"
    return doc, why


def list_runs(journal_dir: Path, last: int = 20) -> list[dict]:
    """The newest ``last`` journals, oldest first: run_id, mode, stage, outcome, touched devices.

    An unreadable journal (empty, truncated, ``null``, hostile: :func:`read_doc`) is listed as a row
    whose ``stage`` is ``unreadable`` and whose ``outcome`` is ``unreadable: <why>``; it never hides
    the other runs.
    """
    if last < 1:
        raise InputError("--last", str(last), "must be 1 or more")
    out = []
    # listed, not globbed: a folder this user may not read raises PermissionError (one line at the
    # CLI) instead of looking empty
    names = os.listdir(journal_dir) if journal_dir.is_dir() else []
    for path in sorted(journal_dir / n for n in names if n.endswith(".json") and n != "baseline.json" and not n.startswith("."))[-last:]:
        d, why = _valid_doc(path)
        if d is None:
            out.append({"run_id": path.stem, "mode": None, "stage": "unreadable", "outcome": f"unreadable: {why}",
                        "touched": [], "inventory": None})
            continue
        out.append({"run_id": d["run_id"], "mode": d.get("mode"), "stage": d.get("stage"), "outcome": d.get("outcome"),
                    "touched": sorted(n for n, rec in d["devices"].items() if touched(rec)),
                    "inventory": d.get("inventory")})
    return out


def undone_keys(doc: dict) -> dict[str, set[str]]:
    """device -> keys a run changed and did not restore (applied, else planned when caught mid-push)."""
    return _keys(doc, restored=False)


def _keys(doc: dict, restored: bool) -> dict[str, set[str]]:
    """device -> keys a run changed, of the devices whose ``restored`` flag is ``restored``."""
    out: dict[str, set[str]] = {}
    for name, rec in doc.get("devices", {}).items():
        if not touched(rec) or bool(rec.get("restored")) != restored:
            continue
        changes = rec.get("changes") if rec.get("state") == DeviceState.PUSHING else rec.get("applied")
        out[name] = {c["key"] for c in changes if isinstance(c, dict) and isinstance(c.get("key"), str)} \
            if isinstance(changes, list) else set()
    return out


def _started(doc: dict) -> float:
    """A journal's start time, 0 when missing or not a number (other runs' journals are only read)."""
    t = doc.get("started")
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else 0.0


def later_conflicts(journal_dir: Path, j: "Journal") -> list[str]:
    """Settings of ``j``'s unrestored changes that a LATER run on the same inventory changed too
    and did not restore: ``["node01 mtu/enp12s0np0 (run 20261130T1020...)", ...]``."""
    mine = undone_keys(j.data)
    out = []
    for path in sorted(journal_dir.glob("*.json")):
        doc, _ = read_doc(path) if path.stem != j.run_id else (None, "")
        if doc is None or doc.get("inventory") != j.data.get("inventory"):
            continue
        if (_started(doc), doc["run_id"]) <= (_started(j.data), j.run_id):
            # an earlier run rolled back AFTER this one began (``--force``) wrote its own before
            # values over this run's: this run's before values are stale for those keys
            if _rolled_back_at(doc) > _started(j.data):
                for dev, keys in _keys(doc, restored=True).items():
                    out += [f"{dev} {k} (run {doc['run_id']}, rolled back after this run began)"
                            for k in sorted(keys & mine.get(dev, set()))]
            continue
        for dev, keys in undone_keys(doc).items():
            out += [f"{dev} {k} (run {doc['run_id']})" for k in sorted(keys & mine.get(dev, set()))]
    return out


def _rollback_events(doc: dict) -> list[tuple[str, float]]:
    """The ``(stage, at)`` events ``fabtune rollback`` journaled into a run's journal, in order
    (``restore`` before its first write, ``done`` at the end); malformed events are left out."""
    return [(e[0], float(e[2])) for e in doc.get("events") or []
            if isinstance(e, list) and len(e) == 3 and isinstance(e[1], str)
            and e[1].split(" --")[0] == ROLLBACK_NOTE
            and isinstance(e[2], (int, float)) and not isinstance(e[2], bool)]


def refuse_ended(j: "Journal") -> "Journal":
    """``j`` while its run takes node pushes (``fabtune node apply``; a late agent would change a node
    nobody verifies). Raises InputError when its controller recorded an outcome or a rollback began."""
    why = (f"its controller ended it ({j.data['outcome']})" if j.data.get("outcome")
           else _rolled_back_at(j.data) and "it was rolled back")
    if why:
        raise InputError("fabtune_run_id", j.run_id, f"{why}: it takes no more pushes; nothing written")
    return j


def rollback_interrupted(doc: dict) -> bool:
    """Whether the last ``fabtune rollback`` of a run began writing devices back (its ``restore``
    event) and never journaled ``done``: the fabric holds a mix no run produced."""
    ours = _rollback_events(doc)
    return bool(ours) and ours[-1][0] == "restore"


def _rolled_back_at(doc: dict) -> float:
    """When ``fabtune rollback`` began writing a run's devices back (its journal's ``restore``
    event, journaled before the first write; older journals have only the ``done`` one), 0 if
    never. A rollback that failed half-way counts: the devices it restored hold older values."""
    return next((at for stage, at in _rollback_events(doc) if stage in ("restore", "done")), 0.0)
