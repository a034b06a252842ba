"""What NVUE prints: the failure and success texts the NVUE driver checks, and the
revision table it reads the applied revision from.

Sources (shared/cases/cli/, INDEX.md sections A and C):

- failures: ``Invalid Command: ...`` / ``Ambiguous Command: ...`` (nvue_errors__*),
  ``Failed to prepare to apply`` plus an indented reason
  (nvue_config_apply__failed_to_prepare_internal_error.txt), and ``Error: ...`` possibly run
  into a progress word printed without a newline (``reloadingError: Could not connect to
  nvued.``, nvue_config_apply__nvued_down_progress_word_concat.txt): searched at a line
  start after any run of lowercase progress letters, never only as a whole line.
- success: ``nv set`` prints nothing (nvue_prompt__set_commands_silent.txt); ``nv config
  apply`` prints ``applied [rev_id: N]`` (nvue_config_apply__assume_yes_then_save.txt; NVOS
  prints a bare ``applied``); ``nv config diff`` prints nothing or a ``- set:`` / ``- unset:``
  YAML list; ``nv config show -o commands`` prints ``nv set`` lines.
- ``nv config revision`` (nvue_config_revision__table.txt, H): fixed-width columns
  ``Rev ID, State, Apply ID, Apply Date, ...``. The ``rev-id`` key of ``nv config revision
  --applied -o json`` is in no source (only ``parent-revision-id`` under
  ``applied.additional-data`` is), so the applied revision is read from that JSON when it has
  the key and from the table otherwise.
"""

from __future__ import annotations

import re

from tuning.errors import ParseError

FAILURE = re.compile(r"^[a-z]*(Error: .*|Failed to prepare to apply.*|Invalid Command: .*|Ambiguous Command:.*)$",
                     re.M)
APPLIED = re.compile(r"^applied(?: \[rev_id: (\S+)\])?[ \t]*$", re.M)
_DIFF_HEAD = re.compile(r"- (set|unset):$")


def failure(out: str) -> str | None:
    """The failure text in ``out`` (the failing line and its indented reason lines), or None.

    >>> failure("reloadingError: Could not connect to nvued.\\nTo start nvued, use\\n")
    'Error: Could not connect to nvued.'
    >>> failure("Failed to prepare to apply\\n  Unrecoverable internal error\\n")
    'Failed to prepare to apply: Unrecoverable internal error'
    """
    m = FAILURE.search(out)
    if not m:
        return None
    reasons = []
    for line in out[m.end():].lstrip("\n").splitlines():
        if not line.startswith("  ") or not line.strip():
            break
        reasons.append(line.strip())
    return ": ".join([m.group(1).strip()] + reasons)


def applied_revision(out: str) -> tuple[bool, str | None]:
    """``(printed the success line, its rev_id or None)`` for an ``nv config apply`` output."""
    m = APPLIED.search(out)
    return (m is not None, m.group(1) if m else None)


def is_diff(out: str) -> bool:
    """True for an ``nv config diff`` output: empty, or a YAML list of ``- set:`` / ``- unset:``."""
    lines = [line for line in out.splitlines() if line.strip()]
    return not lines or all(_DIFF_HEAD.match(line) or line.startswith("    ") for line in lines) \
        and bool(_DIFF_HEAD.match(lines[0]))


def is_commands(out: str) -> bool:
    """True for an ``nv config show -o commands`` output: only ``nv set``/``nv unset`` lines."""
    return all(re.match(r"nv (set|unset) \S", line) for line in out.splitlines() if line.strip())


def revision_rows(text: str) -> list[dict[str, str]]:
    """The rows of ``nv config revision`` as ``{"Rev ID": "4", "State": "applied_and_saved", ...}``.

    Raises:
        ParseError: no header over a dashed ruler.
    """
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith("Rev ID")), None)
    if at is None or at + 1 >= len(lines) or not re.fullmatch(r"[- ]+", lines[at + 1].rstrip()):
        raise ParseError("nv config revision", 0, "a 'Rev ID  State ...' header over a dashed ruler")
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[at + 1])]
    names = [lines[at][a:b + 2].strip() for a, b in spans]
    rows = []
    for line in lines[at + 2:]:
        if line.strip():
            cells = [line[a:(spans[i + 1][0] if i + 1 < len(spans) else len(line))].strip()
                     for i, (a, _) in enumerate(spans)]
            rows.append(dict(zip(names, cells)))
    return rows


def applied_from_table(rows: list[dict[str, str]]) -> str:
    """The applied revision of a revision table: a ``confirm`` row (pending, applied), else the row
    applied last (newest Apply Date, then the highest Rev ID among rows of that second).

    Raises:
        ParseError: no row.
    """
    if not rows:
        raise ParseError("nv config revision", 0, "at least one revision row")
    pending = [r for r in rows if r.get("State") == "confirm"]
    if pending:
        return pending[0]["Rev ID"]
    key = lambda r: (r.get("Apply Date", ""), int(r["Rev ID"]) if r["Rev ID"].isdigit() else -1)  # noqa: E731
    return max(rows, key=key)["Rev ID"]
