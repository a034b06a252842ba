"""Parsers of ``fabtune``'s flag values and the one-line form of a usage error (:mod:`tuning.cli`).

Each parser sees the flag's raw text, so ``''`` is never taken for ``.``, ``1.0`` never for 1 and
``nan`` never for a pass mark; a refusal is a ``typer.BadParameter`` (printed by :func:`usage_line`)
or an :class:`~tuning.errors.InputError`, one line either way, exit 2.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import typer

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


def integer(lo: int | None, hi: int, what: str, shown: str | None = None):
    """A parser of an integer flag written as digits only (``1.0``, ``1e3``, ``0x1`` refused), at most ``hi``
    (and at least ``lo`` when given; the command itself names a minimum it checks, as ``--confirm-s``'s).
    ``shown``: the allowed span as the message says it (default ``lo..hi`` or ``at most hi``)."""
    def parse(value: object) -> int:
        v = str(value).strip()
        if not re.fullmatch(r"-?[0-9]{1,12}", v) or int(v) > hi or (lo is not None and int(v) < lo):
            span = shown or (f"{lo}..{hi}" if lo is not None else f"at most {hi}")
            raise typer.BadParameter(f"{str(value)[:40]!r} is not {what}; allowed: an integer {span}")
        return int(v)
    return parse


def finite(value: float) -> float:
    """A pass mark: a finite number >= 0 (never nan or inf)."""
    if not math.isfinite(value) or value < 0:
        raise typer.BadParameter(f"{value} is not a finite number >= 0")
    return value


def usage_line(e: click.UsageError) -> str:
    """A click/typer usage error as one line: ``fabtune: error: rollout: Invalid value for '--rail': ...``."""
    cmd = e.ctx.command_path.removeprefix("fabtune").strip() if e.ctx else ""
    msg = " ".join(e.format_message().split())
    where = f"{cmd}: " if cmd else ""
    return f"fabtune: error: {where}{msg} (see `fabtune {cmd + ' ' if cmd else ''}--help`)"
