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
- ``nv config save`` prints ``saved [rev_id: applied]`` (nvue_config_apply__assume_yes_then_save.txt),
  plain ``saved`` on CL 5.0 (nvue_prompt__root_shell_in_mgmt_vrf.txt).
- ``nv show system config auto-save`` (CumulusNetworks/docs
  ``content/nvue-reference/Show-Commands/System-Config.md``, introduced in CL 5.4): ``enable: off``
  (CL 5.4-5.6, YAML), a table ``enable  off  off`` under ``operational  applied`` (CL 5.7+, the same
  page's ``nv show system config`` example), ``state: disabled`` / ``state  enabled  enabled`` (the
  page's latest version; auto save is on by default from CL 5.9, off up to 5.8).
- the interactive ``nv config apply`` (no ``-y``): its warnings, then ``Are you sure? [y/N]``
  (NVOS ``Configuration-Management-Commands`` example; nvue_config_apply__interactive_prompt_nvos_layout.txt).
  Files NVUE manages that were edited by hand since the last save are listed as
  ``Warning: The following files have been changed since the last save, and they WILL be
  overwritten.`` and one ``<TAB>- PATH`` line per file (CumulusNetworks/docs
  ``content/cumulus-linux-516/System-Configuration/Authentication-Authorization-and-Accounting/FIPS.md``,
  verbatim; spaces are read too, as a terminal may expand the tab).
  With the default ``nv set system config apply overwrite all`` the apply rewrites them when
  answered yes (``nv set system config apply overwrite``, CumulusNetworks/docs
  ``content/nvue-reference/Set-and-Unset-Commands/System-Configuration.md``, CL 5.4+); ``-y`` answers yes.
  Fixture: tests/switch/data/nvue_config_apply__files_changed_warning.txt.
"""

from __future__ import annotations

import re

from tuning.errors import ParseError

FAILURE = re.compile(r"^[a-z]*(Error: .*|Failed to prepare to apply.*|Invalid Command: .*|Ambiguous Command:.*)$",
                     re.M)
APPLIED = re.compile(r"^applied(?: \[rev_id: (\S+)\])?[ \t]*$", re.M)
SAVED = re.compile(r"^saved(?: \[rev_id: \S+\])?[ \t]*$", re.M)
_DIFF_HEAD = re.compile(r"- (set|unset):$")
#: the prompt of an interactive apply (its last line, the answer not yet typed)
ASK = re.compile(r"Are you sure\? \[y/N\][ \t]*$")
OVERWRITE = re.compile(r"^Warning: The following files have been changed since the last save, "
                       r"and they WILL be overwritten\.[ \t]*$", re.M)
_LISTED = re.compile(r"^(?:\t| +)- (/\S+)[ \t]*$")
_AUTO_SAVE = re.compile(r"^\s*(?:enable|state)(?::[ \t]*|[ \t]{2,})(on|off|enabled|disabled)\b", re.M)


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


def overwritten_files(out: str) -> list[str]:
    """The files an interactive ``nv config apply`` says it WILL overwrite (edited by hand since the
    last save): the ``- PATH`` lines under the files-changed warning, up to the first other line.

    >>> overwritten_files("Warning: The following files have been changed since the last save, and they "
    ...                   "WILL be overwritten.\\n\\t- /etc/ssl/openssl.cnf\\n\\t- /etc/default/grub\\nAre you sure? [y/N] ")
    ['/etc/ssl/openssl.cnf', '/etc/default/grub']

    Returns:
        The absolute paths in the order printed; [] when the output has no such warning.

    Raises:
        ParseError: the warning lists no file (a layout this reader does not know: never read as "none").
    """
    m = OVERWRITE.search(out)
    if not m:
        return []
    files = []
    for line in out[m.end():].lstrip("\r\n").splitlines():
        listed = _LISTED.match(line.rstrip("\r"))
        if not listed:
            break
        files.append(listed.group(1))
    if not files:
        raise ParseError("nv config apply", 0, "'<TAB>- PATH' lines under the files-changed warning", out.strip()[:200])
    return files


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


def auto_save(out: str) -> bool:
    """Whether ``nv show system config auto-save`` says the switch saves on apply: the first value
    of its ``enable`` / ``state`` row (the operational column of a table).

    >>> auto_save("        operational  applied\\n------  -----------  -------\\nenable  off          off\\n")
    False
    >>> auto_save("state: enabled\\n")
    True

    Raises:
        ParseError: no ``enable`` / ``state`` row with on, off, enabled or disabled.
    """
    m = _AUTO_SAVE.search(out)
    if not m:
        raise ParseError("nv show system config auto-save", 0, "an 'enable' or 'state' row", out.strip()[:120])
    return m.group(1) in ("on", "enabled")


def culprit(lines: list[str], why: str) -> str:
    """The staged line an error names (``Invalid Command: set ...`` quotes it without ``nv``)."""
    return next((line for line in lines if line[3:] and line[3:] in why), why)


def residue(out: str, lines: list[str], base_prompt: str) -> str:
    """What a batch printed besides the echo of its lines and the prompts (``nv set`` prints nothing).

    Lines written at once are not echoed one whole line per prompt: a terminal echoes type-ahead as
    the pty takes it in (in pieces, cut anywhere, between the prompts of earlier commands), and
    readline may echo a line again when it reads it (duplicate echo, as netmiko PRs #2944 and #3742
    handle for Arista and Check Point). So the output is cut at prompts and line ends, and a piece
    counts as echo when, without whitespace, it is part of the staged lines written back to back.

    Args:
        out: what the batch read (netmiko has stripped ANSI codes).  lines: the staged ``nv`` lines.
        base_prompt: netmiko's base prompt (``cumulus@leaf01:mgmt:~``).

    Returns:
        The other pieces, joined by ``" | "`` ("" when the device printed nothing of its own).
    """
    typed = "".join("".join(line.split()) for line in lines)
    pieces = re.split(re.escape(base_prompt) + r"[$#]|[\r\n]", out)
    return " | ".join(p.strip() for p in pieces if "".join(p.split()) and "".join(p.split()) not in typed)
