"""Parsers of ``fabtune``'s flag values and the one-line form of a usage error (:mod:`tuning.cli`).

Each parser sees the flag's raw text, so ``''`` is never taken for ``.``, ``1.0`` never for 1 and
``nan`` never for a pass mark; a refusal is an :class:`~tuning.errors.InputError` naming the flag
(a click usage error is printed by :func:`usage_line`), one line either way, exit 2. A command that
writes reports wraps its parsers in :func:`deferred` and calls :func:`raise_refused` inside its
Recorder, so a refused value is reported too.
"""

from __future__ import annotations

import errno
import math
import os
import re
from pathlib import Path

try:  # typer >= 0.24 carries its own copy of click; older ones raise click's own exceptions
    from typer._click import exceptions as click
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click  # type: ignore[no-redef]

from tuning.errors import InputError
from tuning.outfile import refusal

#: the longest switch commit-confirm window ``--confirm-s`` accepts (one day)
MAX_CONFIRM_S = 86400
#: the longest file name a report flag takes (bytes): NAME_MAX (255) less room for the writers'
#: temporary suffixes (``.tmp``, prometheus_client's ``.<pid>.<thread>``)
MAX_FILE_NAME = 200


def quoted(value: object) -> str:
    """``value`` as an error message quotes it: at most 40 characters, control characters escaped."""
    v = str(value)
    return repr(v[:40] + ("..." if len(v) > 40 else ""))


def path_problem(value: object) -> str | None:
    """What makes ``value`` unusable as a path here, or None (a path that does not exist is usable).

    Refused: empty (``''`` would be the working folder), ``-`` (no flag here reads stdin or writes
    stdout), a control character (``\\x1b[31m``, a newline), or a lookup the OS refuses (a name over
    255 bytes, a symlink loop, no permission), so no later ``exists()`` / ``open()`` ends in a traceback.
    """
    v = str(value)
    if not v.strip():
        return "empty"
    if v.strip() == "-":
        return "'-' (stdin/stdout) is not taken here (./- names a file called -)"
    if not v.isprintable():
        return "has a control character"
    try:
        os.stat(v)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        return (e.strerror or errno.errorcode.get(e.errno or 0, "unusable")).lower()
    except ValueError:
        return "has a NUL character"
    return None


def checked_path(flag: str, what: str, *, is_dir: bool | None = None):
    """A parser of a path flag: :func:`path_problem` refused, then (``is_dir`` True) an existing
    non-directory or (False) an existing directory; ``what`` names what to give instead.

    Raises:
        InputError: ``--flag: 'VALUE': PROBLEM; give WHAT``.
    """
    def parse(value: object) -> Path:
        problem = path_problem(value)
        p = Path(str(value))
        if problem is None and is_dir is True and p.exists() and not p.is_dir():
            problem = "is not a directory"
        if problem is None and is_dir is False and p.is_dir():
            problem = "is a directory"
        if problem:
            raise InputError(flag, quoted(value), f"{problem}; give {what}")
        return p
    return parse


def file_arg(flag: str, inner=None):
    """A parser of an output file flag (a report, a log): :func:`checked_path` (not a directory), a
    name of at most :data:`MAX_FILE_NAME` bytes, not a link or a special file
    (:func:`tuning.outfile.refusal`), then ``inner``
    (e.g. :func:`tuning.reports.report_file`'s folder checks) when given.

    Raises:
        InputError: naming ``flag`` and what is allowed.
    """
    base = checked_path(flag, "a file name", is_dir=False)

    def parse(value: object) -> Path:
        p = base(value)
        if len(os.fsencode(p.name)) > MAX_FILE_NAME:
            raise InputError(flag, quoted(value), f"file name over {MAX_FILE_NAME} bytes; give a shorter one")
        why = refusal(p)  # a link, a device, a FIFO: refused before the run, and again when written
        if why:
            raise InputError(flag, quoted(value), why)
        return inner(value) if inner else p
    return parse


#: ``-i/--inventory``: a usable path (that it holds an inventory is the loader's to say, inside a
#: command's report Recorder, so a missing inventory is reported too)
inventory_arg = checked_path("--inventory", "the inventory directory (with hosts.yaml) or file")


def existing_inventory(path: Path) -> Path:
    """``path`` when something is there (whether it holds an inventory is the loader's to say).

    Raises:
        InputError: nothing at ``path``, naming ``--inventory``.
    """
    if not path.exists():
        raise InputError("--inventory", quoted(path), "no such file or directory; give the inventory directory "
                         "(with hosts.yaml) or file")
    return path


def load_inventory(path: Path, *, lint: bool = True):
    """The inventory ``-i`` names (:func:`tuning.inventory.load` of :func:`existing_inventory`;
    ``lint``: refuse the first fabric lint error); called inside a command's report Recorder, so a
    refusal is reported too.

    Raises:
        InputError: nothing at ``path`` (names ``--inventory``), or what the loader refuses.
    """
    from tuning import inventory

    return inventory.load(existing_inventory(path), lint=lint)


#: ``--state-dir``: a usable path, not an existing file
state_dir_arg = checked_path("--state-dir", "the lab's state directory", is_dir=True)


def journal_dir_arg(value: object) -> Path:
    """``--journal-dir``: a usable path (:func:`path_problem`) to a directory of this user (or root)
    others cannot write; never ''."""
    from tuning.rollout.journal import check_dir

    checked_path("--journal-dir", "the journal directory", is_dir=True)(value)
    return check_dir(str(value))


def out_dir_arg(value: object) -> Path:
    """``render -o``: never empty (that would be the working folder), never an existing file, a
    usable path (:func:`path_problem`)."""
    if not str(value).strip():
        raise InputError("-o", "''", "empty; give the directory to write the rendered files into")
    return checked_path("-o", "the directory to write the rendered files into", is_dir=True)(value)


def integer(flag: str, lo: int | None, hi: int, what: str, shown: str | None = None):
    """A parser of an integer flag written as digits only (``1.0``, ``1e3``, ``0x1`` refused), at most ``hi``
    (and at least ``lo`` when given; the command itself names a minimum it checks, as ``--confirm-s``'s).
    ``shown``: the allowed span as the message says it (default ``lo..hi`` or ``at most hi``).

    Raises:
        InputError: ``--flag: 'VALUE': not WHAT; allowed: an integer SPAN``.
    """
    def parse(value: object) -> int:
        v = str(value).strip()
        if not re.fullmatch(r"-?[0-9]{1,12}", v) or int(v) > hi or (lo is not None and int(v) < lo):
            span = shown or (f"{lo}..{hi}" if lo is not None else f"at most {hi}")
            raise InputError(flag, f"{str(value)[:40]!r}", f"not {what}; allowed: an integer {span}")
        return int(v)
    return parse


def number(flag: str, hi: float | None = None, what: str = "a pass mark"):
    """A parser of a pass-mark flag: a finite number >= 0 (and at most ``hi`` when given), never
    ``nan``, ``inf`` or ``''``.

    Raises:
        InputError: ``--flag: 'VALUE': not WHAT; allowed: ...``.
    """
    span = f"0..{hi:g}" if hi is not None else "a finite number >= 0"

    def parse(value: object) -> float:
        try:
            v = float(str(value).strip())
        except ValueError:
            v = math.nan
        if not math.isfinite(v) or v < 0 or (hi is not None and v > hi):
            raise InputError(flag, f"{str(value)[:40]!r}", f"not {what}; allowed: {span}")
        return v
    return parse


class Refused:
    """A flag value its parser refused (``error``), held until the command body raises it with
    :func:`raise_refused` inside its :class:`~tuning.reports.Recorder`, so the reports asked for
    are written: click reads flags in command-line order, and a bad flag before ``--report-json``
    would otherwise be refused before the report's path is known."""

    def __init__(self, error: InputError):
        self.error = error


def deferred(parse):
    """``parse`` whose InputError is returned as a :class:`Refused` instead of raised (see there)."""
    def wrapped(value: object):
        try:
            return parse(value)
        except InputError as e:
            return Refused(e)
    return wrapped


def raise_refused(*values: object) -> None:
    """Raise the InputError of the first :class:`Refused` among ``values`` (lists looked into).

    Raises:
        InputError: a flag value its parser refused.
    """
    for v in values:
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(x, Refused):
                raise x.error


def usage_line(e: click.UsageError) -> str:
    """A click/typer usage error as one line: ``fabtune: error: rollout: Invalid value for '--rail': ...``."""
    cmd = e.ctx.command_path.removeprefix("fabtune").strip() if e.ctx else ""
    msg = " ".join(e.format_message().split())
    where = f"{cmd}: " if cmd else ""
    return f"fabtune: error: {where}{msg} (see `fabtune {cmd + ' ' if cmd else ''}--help`)"
