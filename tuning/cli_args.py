"""Parsers of ``fabtune``'s flag values and the one-line form of a usage error (:mod:`tuning.cli`).

Each parser sees the flag's raw text, so ``''`` is never taken for ``.``, ``1.0`` never for 1 and
``nan`` never for a pass mark; a refusal is an :class:`~tuning.errors.InputError` naming the flag
(a click usage error is printed by :func:`usage_line`), one line either way, exit 2. A command that
writes reports wraps its parsers in :func:`deferred` and calls :func:`raise_refused` inside its
Recorder, so a refused value is reported too.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

try:  # typer >= 0.24 carries its own copy of click; older ones raise click's own exceptions
    from typer._click import exceptions as click
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click  # type: ignore[no-redef]

from tuning.errors import InputError

#: the longest switch commit-confirm window ``--confirm-s`` accepts (one day)
MAX_CONFIRM_S = 86400


def journal_dir_arg(value: object) -> Path:
    """``--journal-dir``: a directory of this user (or root) others cannot write; never ''."""
    from tuning.rollout.journal import check_dir

    return check_dir(str(value))


def out_dir_arg(value: object) -> Path:
    """``render -o``: never empty (that would be the working folder), never an existing file."""
    if not str(value).strip():
        raise InputError("-o", "''", "empty; give the directory to write the rendered files into")
    if Path(str(value)).exists() and not Path(str(value)).is_dir():
        raise InputError("-o", str(value), "is not a directory")
    return Path(str(value))


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
