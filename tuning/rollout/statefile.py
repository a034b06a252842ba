"""The one reader of fabtune's own state files: run journals, baselines and the run lock.

Every file fabtune reads back from its state folders (``<journal_dir>/*.json``,
``<journal_dir>/baselines/*.json``, ``<INV>/.fabtune.lock`` and the journal a lock names) goes
through :func:`read_state_file`, so one bad file there is one line naming it, never a hang, a
memory blow-up or a traceback:

- opened with ``O_NOFOLLOW | O_NONBLOCK``: a symbolic link is refused (fabtune writes none), a
  FIFO never blocks the open, and the opened descriptor must be a regular file (never a FIFO,
  device, socket or directory: nothing is read from one);
- at most ``limit_bytes``: the descriptor's size is checked before reading and the read itself
  stops one byte past the cap (a file that grows meanwhile);
- strict UTF-8, JSON nested at most :data:`MAX_DEPTH` deep (the parser's own recursion limit,
  about 1000, catches deeper ones before this check does), integers within 64 bits (the parser
  refuses more than 4300 digits; a 400-digit one would overflow the first float conversion),
  and a JSON object at the top.

Caps: :data:`JOURNAL_MAX_BYTES` is 1 GiB because a journal grows with the fabric (about 0.35 MB
per node in the lab, whose read commands are kilobytes long; so about 3000 such nodes): a
rollback must never refuse a journal fabtune itself wrote. :data:`LOCK_MAX_BYTES` is 64 KiB
(a lock is one line of about 250 bytes).
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

from tuning.errors import InputError
from tuning.model.yamlfile import _kind as file_kind  # one description of a non-regular file

#: the largest journal or baseline read back (see the module docstring for why so large)
JOURNAL_MAX_BYTES = 1 << 30
#: the largest run lock read back
LOCK_MAX_BYTES = 64 << 10
#: deepest nesting accepted (a journal needs about 7)
MAX_DEPTH = 64
#: integers beyond this magnitude are refused (fabtune writes times, counts, ports, pids)
MAX_INT = 1 << 63

_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number",
               bool: "a boolean", type(None): "null"}


def read_state_file(path: Path, limit_bytes: int, what: str = "run journal") -> dict | None:
    """The JSON object of one state file, read safely (see the module docstring).

    Args:
        path: the file.  limit_bytes: the size cap.  what: what the file is, for the message
            (``run journal``, ``baseline``, ``run lock``).

    Returns:
        The document (a dict), or None when there is no such file.

    Raises:
        InputError: ``<path>: <what>: <what is wrong>``: a link, not a regular file, over the cap,
            unreadable, empty, not UTF-8, not JSON, nested too deep, a number too large, not an object.
    """
    data = _read_bounded(Path(path), limit_bytes, what)
    return None if data is None else _parse(Path(path), data, what)


def _open_error(path: Path, e: OSError, what: str) -> InputError:
    """The InputError of a failed open: a link and a socket named as such, else the OS's words."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and stat.S_ISLNK(mode) or e.errno == errno.ELOOP:
        return InputError(str(path), what, "is a symbolic link; allowed: a regular file (fabtune writes no links)")
    kind = file_kind(mode) if mode is not None else None
    if kind:
        return InputError(str(path), what, f"is {kind}; allowed: a regular file")
    return InputError(str(path), what, f"cannot read it: {e.strerror or e}")


def _read_bounded(path: Path, limit: int, what: str) -> bytes | None:
    """The bytes of a regular file of at most ``limit`` bytes, None when it does not exist."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _open_error(path, e, what) from None
    try:
        st = os.fstat(fd)
        kind = file_kind(st.st_mode)
        if kind:
            raise InputError(str(path), what, f"is {kind}; allowed: a regular file")
        if st.st_size > limit:
            raise InputError(str(path), what, f"is {st.st_size} bytes; allowed: at most {limit}")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise InputError(str(path), what, f"cannot read it: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise InputError(str(path), what, f"grew past {limit} bytes while read; allowed: at most {limit}")
    return b"".join(chunks)


def _parse(path: Path, data: bytes, what: str) -> dict:
    """``data`` as a JSON object, checked (module docstring)."""
    def bad(problem: str) -> InputError:
        return InputError(str(path), what, problem)

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise bad(f"is not UTF-8 text (byte {e.start}); fabtune writes UTF-8 JSON") from None
    if not text.strip():
        raise bad("is empty")
    try:
        doc = json.loads(text)
    except RecursionError:
        raise bad(f"is nested too deeply; allowed: up to {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as e:
        raise bad(f"is not complete JSON (truncated?): {e.msg} at line {e.lineno}") from None
    except ValueError:  # an integer of more than 4300 digits (sys.get_int_max_str_digits())
        raise bad("holds a number of more than 4300 digits; allowed: integers within 64 bits") from None
    problem = _tree_problem(doc)
    if problem:
        raise bad(problem)
    if not isinstance(doc, dict):
        raise bad(f"is not a {what} document: its top level is {_JSON_TYPES.get(type(doc), 'a value')}; "
                  "allowed: a JSON object")
    return doc


def _tree_problem(doc: object) -> str | None:
    """What makes a parsed document unusable (too deep, an integer too large), else None: one
    level at a time, no recursion (about a quarter of the parse's own time)."""
    level, depth = ([doc] if type(doc) in (dict, list) else []), 1
    while level:
        if depth > MAX_DEPTH:
            return f"is nested too deeply; allowed: up to {MAX_DEPTH} levels"
        below = []
        for value in level:
            for x in (value.values() if type(value) is dict else value):
                t = type(x)
                if t is dict or t is list:
                    below.append(x)
                elif t is int and not -MAX_INT < x < MAX_INT:
                    return f"holds a number of {len(str(abs(x)))} digits; allowed: integers within 64 bits"
        level, depth = below, depth + 1
    return None
