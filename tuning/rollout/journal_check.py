"""Trust and shape of a journal before it drives anything (``fabtune rollback``).

A rollback replays the journal's ``restore_cmd`` / ``read_cmd`` as root on the nodes it names,
so a journal is as powerful as a root script. As sshd's ``StrictModes`` does for
``authorized_keys``, :func:`check_trust` refuses a journal file or journal directory that is
not owned by the invoking user (or root) or that group or others may write; the engine writes
journals ``0600`` in ``0700`` directories. :func:`validate` then checks the document's whole
structure (roles, platforms, states, change dicts with exactly the fields of
:class:`~tuning.node.base.Change`, typed connection facts) so a bad journal is one line naming
the file and the key path, before any device is contacted. A journal its owner edited by hand
is the owner's business, as a root script they wrote would be.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from pathlib import Path

from tuning.errors import InputError
from tuning.model import grammar
from tuning.model.outcomes import DeviceState
from tuning.model.yamlfile import _kind

#: run ids: ``20261130T101500-1a2b3c``; bounded so a path built from one stays short
RUN_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_.-]{0,63}")
#: epoch seconds a journal's times may hold (1970 .. 2286): beyond, a date conversion overflows
MAX_TIME = 1e10
STATES = tuple(DeviceState)
_DEVICE_KEYS = ("role", "platform", "connection", "changes", "applied", "state", "revision_before",
                "revision", "revision_next", "restored", "confirmed", "kept", "reset", "batch", "manage",
                "snapshot")  # snapshot: a subnet manager's files and pkey tables before (tuning.targets.sm)
_CONN_TYPES = {"hostname": str, "port": int, "username": str, "key_file": (str, type(None)),
               "known_hosts": (str, type(None)), "sysroot": str, "become": bool, "become_user": str,
               "become_method": str, "become_password_vault": (str, type(None)), "local": bool}
#: the first line of an Ansible-vault ciphertext (``$ANSIBLE_VAULT;1.1;AES256`` or ``;1.2;AES256;ID``)
_VAULT_HEADER = re.compile(r"\$ANSIBLE_VAULT;1\.[12];AES256(;[\w.-]{1,64})?\n[0-9a-f\n]{1,65536}\Z")
_TOP_TYPES = {"run_id": str, "inventory": str, "mode": str, "stage": str, "outcome": (str, type(None)),
              "started": (int, float), "devices": dict, "verify": dict, "events": list, "batches": list,
              "incast": list, "policy": (dict, type(None)), "verify_ok": (bool, type(None)),
              "restored_verified": (bool, type(None)), "seconds": (int, float)}


def _tname(t) -> str:
    ts = t if isinstance(t, tuple) else (t,)
    return " or ".join("null" if x is type(None) else x.__name__ for x in ts)


def _typed(value: object, t, where: str, fail) -> None:
    """``value`` is of type ``t`` (a bool is never an int)."""
    ts = t if isinstance(t, tuple) else (t,)
    if not isinstance(value, ts) or (isinstance(value, bool) and bool not in ts):
        fail(where, f"{type(value).__name__} {value!r:.60}; allowed: {_tname(t)}")


def check_run_id(run_id: object, flag: str = "RUN_ID") -> str:
    """``run_id`` when it is a run id (:data:`RUN_ID`), so ``<journal_dir>/<run_id>.json`` stays in the
    journal folder (``../../x`` never leaves it). Every front end checks its run ids here: the
    CLI's ``RUN_ID`` (:meth:`~tuning.rollout.journal.Journal.load`) and the Ansible front end's
    ``fabtune_run_id`` (:func:`tuning.rollout.steps.begin`, the plugins' ``run_id``).

    Raises:
        InputError: naming ``flag``: not a run id.
    """
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
        raise InputError(flag, str(run_id)[:80], "not a run id like 20261130T101500-1a2b3c (1..64 of "
                         "[0-9A-Za-z_.-], the first a letter or digit; see `fabtune runs`)")
    return run_id


def check_trust(path: Path, *, file: bool = True) -> None:
    """Refuse a journal (or its directory) that someone else could have written.

    Args:
        path: the journal file.  file: False to check its directory only.

    Raises:
        InputError: not a regular file / directory, owned by another user than the invoking one
            or root, or writable by group or others (says how to fix it).
    """
    _trusted(path.parent, "journal directory", True)
    if file:
        _trusted(path, "journal", False)


def _trusted(p: Path, what: str, is_dir: bool) -> None:
    uid = os.geteuid()
    try:
        st = os.stat(p) if is_dir else os.lstat(p)  # a journal folder may be reached through a link, a journal not
    except OSError as e:
        raise InputError(str(p), what, f"cannot read it: {e.strerror}") from None
    if is_dir and not stat.S_ISDIR(st.st_mode):
        raise InputError(str(p), what, "is not a directory")
    if not is_dir and not stat.S_ISREG(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else _kind(st.st_mode)
        raise InputError(str(p), what, f"is {kind}; allowed: a regular file")
    if st.st_uid not in (uid, 0):
        raise InputError(str(p), "owner", f"the {what} belongs to uid {st.st_uid}, not to you (uid {uid}) or "
                         "root; rollback runs its commands as root, so it is refused (StrictModes)")
    if st.st_mode & 0o022:
        raise InputError(str(p), "mode", f"the {what} is group/world-writable ({stat.S_IMODE(st.st_mode):04o}); "
                         f"rollback runs its commands as root, so it is refused: chmod go-w {p}")


def validate(doc: dict, path: Path) -> None:
    """Check a journal document's whole structure.

    Raises:
        InputError: ``<path>: <key path>: <what is wrong; allowed>`` for the first violation.
    """
    def fail(where: str, problem: str) -> None:
        raise InputError(str(path), where, problem)

    for key, t in _TOP_TYPES.items():
        if key in doc:
            _typed(doc[key], t, key, fail)
    if not RUN_ID.fullmatch(doc["run_id"]):
        fail("run_id", f"{doc['run_id']!r:.80} is not a run id like 20261130T101500-1a2b3c")
    _times(doc, fail)
    for name, rec in doc["devices"].items():
        where = f"devices.{name}"
        try:
            grammar.check_host_name(name)
        except ValueError as e:
            fail(where, str(e))
        _typed(rec, dict, where, fail)
        _device(name, rec, where, fail)


def _times(doc: dict, fail) -> None:
    """``started`` and each event's time are epoch seconds within 0..:data:`MAX_TIME` (reports turn
    them into dates; ``Infinity`` or 1e300 would overflow there)."""
    if "started" in doc and not 0 <= doc["started"] <= MAX_TIME:
        fail("started", f"{doc['started']!r:.40} is outside 0..{MAX_TIME:.0f} (epoch seconds)")
    if "seconds" in doc and not 0 <= doc["seconds"] <= MAX_TIME:
        fail("seconds", f"{doc['seconds']!r:.40} is outside 0..{MAX_TIME:.0f} (the run's duration, s)")
    for i, event in enumerate(doc.get("events") or []):
        t = event[2] if isinstance(event, list) and len(event) == 3 else None
        if isinstance(t, (int, float)) and not isinstance(t, bool) and not 0 <= t <= MAX_TIME:
            fail(f"events.{i}", f"time {t!r:.40} is outside 0..{MAX_TIME:.0f} (epoch seconds)")


def _device(name: str, rec: dict, where: str, fail) -> None:
    """One device record: keys, role, platform, state, flags, revisions, changes, connection."""
    from tuning.targets import platforms, roles

    for k in rec:
        if k not in _DEVICE_KEYS:
            fail(f"{where}.{k}", f"unknown key; allowed: {', '.join(_DEVICE_KEYS)}")
    if rec.get("role") not in roles():
        fail(f"{where}.role", f"{rec.get('role')!r:.60}; allowed: {', '.join(roles())}")
    allowed = platforms(rec["role"])
    if "platform" in rec and rec["platform"] not in allowed:
        fail(f"{where}.platform", f"{rec['platform']!r:.60}; allowed for a {rec['role']}: {', '.join(allowed)}")
    if "state" in rec and (not isinstance(rec["state"], str) or rec["state"] not in STATES):
        fail(f"{where}.state", f"{rec['state']!r:.60}; allowed: {', '.join(STATES)}")
    for k in ("restored", "confirmed", "reset", "manage"):
        if k in rec:
            _typed(rec[k], bool, f"{where}.{k}", fail)
    if "batch" in rec:
        _typed(rec["batch"], int, f"{where}.batch", fail)
    for k in ("revision_before", "revision", "revision_next"):
        if k in rec:
            _typed(rec[k], (str, type(None)), f"{where}.{k}", fail)
    if "snapshot" in rec:
        _typed(rec["snapshot"], dict, f"{where}.snapshot", fail)
    if "kept" in rec:
        _typed(rec["kept"], list, f"{where}.kept", fail)
        for i, key in enumerate(rec["kept"]):
            _typed(key, str, f"{where}.kept.{i}", fail)
    for k in ("changes", "applied"):
        if k in rec:
            _typed(rec[k], list, f"{where}.{k}", fail)
            for i, c in enumerate(rec[k]):
                _change(name, c, f"{where}.{k}.{i}", fail)
    if "connection" in rec:
        _connection(rec["connection"], f"{where}.connection", fail)


def _change(name: str, c: object, where: str, fail) -> None:
    """A change dict: exactly the fields of Change, each of its type."""
    from tuning.model.tags import TAGS
    from tuning.node.base import EFFECTS, Change

    _typed(c, dict, where, fail)
    fields = {f.name: f for f in dataclasses.fields(Change)}
    # journals written before issue 7 lack ``effect``, before the typed changes ``tags``
    c = {"effect": "live", "tags": [], **c} if isinstance(c, dict) else c
    if set(c) != set(fields):
        odd = sorted(set(c) ^ set(fields))
        fail(where, f"fields {', '.join(map(str, odd))} missing or unknown; a change has exactly: {', '.join(fields)}")
    for k in ("device", "domain", "key"):
        _typed(c[k], str, f"{where}.{k}", fail)
    for k in ("before", "after", "apply_cmd", "restore_cmd", "read_cmd"):
        _typed(c[k], (str, type(None)), f"{where}.{k}", fail)
    _typed(c["reversible"], bool, f"{where}.reversible", fail)
    _typed(c["effect"], str, f"{where}.effect", fail)
    if c["effect"] not in EFFECTS:
        fail(f"{where}.effect", f"{c['effect']!r:.40}; allowed: {', '.join(EFFECTS)}")
    _typed(c["tags"], list, f"{where}.tags", fail)
    for tag in c["tags"]:
        if tag not in TAGS:
            fail(f"{where}.tags", f"{tag!r:.40}; allowed: {', '.join(TAGS)}")
    if c["device"] != name:
        fail(f"{where}.device", f"{c['device']!r:.60} is not this device ({name})")


def _connection(conn: object, where: str, fail) -> None:
    """Connection facts: known fields, typed, port 1..65535, names and paths by the inventory grammar."""
    _typed(conn, dict, where, fail)
    for k, v in conn.items():
        if k not in _CONN_TYPES:
            fail(f"{where}.{k}", f"unknown key; allowed: {', '.join(_CONN_TYPES)}")
        _typed(v, _CONN_TYPES[k], f"{where}.{k}", fail)
    for k in ("hostname", "port", "username", "key_file", "known_hosts"):
        if k not in conn:
            fail(f"{where}.{k}", "missing")
    if not 1 <= conn["port"] <= 65535:
        fail(f"{where}.port", f"{conn['port']} is outside 1..65535")
    checks = {"hostname": grammar.check_address, "username": grammar.check_user, "become_user": grammar.check_user,
              "key_file": grammar.check_path, "known_hosts": grammar.check_path,
              "sysroot": lambda v: grammar.check_path(v, parent_ok=False)}
    for k, check in checks.items():
        if conn.get(k) is not None:
            try:
                check(conn[k])
            except ValueError as e:
                fail(f"{where}.{k}", str(e))
    for k in ("key_file", "known_hosts"):
        if conn.get(k) is not None and not conn[k].startswith("/"):
            fail(f"{where}.{k}", f"{conn[k]!r:.80} is not an absolute path")
    vault = conn.get("become_password_vault")
    if vault is not None and not _VAULT_HEADER.match(vault.strip() + "\n"):
        fail(f"{where}.become_password_vault", "not an Ansible-vault ciphertext ($ANSIBLE_VAULT;1.1;AES256 "
             "then hex lines); a password is never journaled in clear")
    if conn.get("become_method", "sudo") != "sudo":
        fail(f"{where}.become_method", f"{conn['become_method']!r:.40}; allowed: sudo")


#: the front ends whose nodes push themselves (``fabtune node apply`` under srun or an agent), batch by batch
NODE_FRONTS = ("slurm", "k8s")


def refuse_push(j, device: str) -> None:
    """Raise InputError when ``device`` takes no push into the run of ``j`` now (``fabtune node
    apply``): the run already restored it (a second push would be one no rollback undoes), or, in a
    run a scheduler front end drives (:data:`NODE_FRONTS`), the device is in no batch of it or not in
    the one being pushed (the first whose outcome is ``not-run``: a controller killed in batch 1 never
    held batch 2's nodes). Nothing has been written when it raises."""
    from tuning.model.outcomes import BatchOutcome

    rec = j.data.get("devices", {}).get(device)
    rec = rec if isinstance(rec, dict) else {}
    why = f"{device} was restored in this run" if rec.get("restored") else None
    if why is None and j.data.get("engine") in NODE_FRONTS:
        now = next((b.get("index") for b in j.data.get("batches") or []
                    if isinstance(b, dict) and b.get("outcome") == BatchOutcome.NOT_RUN), None)
        if rec.get("batch") is None:
            why = f"{device} is in no batch of this run"
        elif rec["batch"] != now:
            why = (f"{device} is in batch {rec['batch']} of this run, and "
                   + (f"batch {now} is the one being pushed" if now else "no batch is being pushed"))
    if why:
        raise InputError("fabtune_run_id", j.run_id, f"{why}: it takes no push now; nothing written")
