"""Arista EOS configuration text -> the flat setting keys of plans (``port/Ethernet1/mtu = 9214``).

One reading for every source of EOS configuration, so a plan can only name what the device's own
diff holds: the rendered candidate, ``show running-config`` and the running configuration patched
with ``show session-config named NAME diffs`` (a unified diff, shared/cases/cli/
eos__configure_session_roce_diff_commit.txt) all become ``{key: value}`` by :func:`settings`
(:mod:`tuning.parsers.eos_config`, also ``fabtune parse eos-running-config``).

The text is EOS's indented configuration (shared/cases/cli/eos__running_config_roce_lines.txt):
a section header at column 0 (``interface Ethernet1``), its body indented 3 spaces, a sub-section's
(``tx-queue 3``) 6; ``!`` lines separate sections, ``! text`` lines are comments, ``end`` ends it.

Keys: ``port/<if>/mtu``, ``port/<if>/description``, ``port/<if>/qos_trust`` (``dscp``/``cos``),
``port/<if>/pfc`` (``on``), ``port/<if>/pfc_priority/<p>`` (``no-drop``), ``port/<if>/txq/<n>/ecn_min``
and ``ecn_max`` (``150 kbytes``) and ``ecn_probability`` (percent), ``qos/dscp/<d>/tc`` (the global
``qos map dscp D to traffic-class T``). Any other line keeps its words as the key under its section
(``port/Ethernet1/no switchport``, ``ip routing``) with the value ``""``.
"""

from __future__ import annotations

import hashlib
import re

from tuning.errors import ParseError
from tuning.model.tags import lossless_tags, mtu_tags
from tuning.parsers.eos_config import sections, settings  # noqa: F401 (the one reader, re-exported)

#: EOS's MTU of a routed Ethernet port without an ``mtu`` line (EOS User Manual, "Ethernet Ports":
#: the default IP MTU is 1500 bytes)
DEFAULT_MTU = 1500

def patched(diff: str, running: str) -> str:
    """``running`` with the unified diff ``diff`` applied (the session's configuration as the switch
    computed it). Each hunk is placed where its context and removed lines match ``running``: at
    its stated line, else at the nearest line where they do (as ``patch`` places a hunk at an
    offset), since the line numbers count the switch's own file, which may lack the comment
    header that ``show running-config`` prints.

    Raises:
        ParseError: a hunk whose lines are nowhere in ``running`` after the previous hunk (the
            switch changed since the diff), or a line that is not part of a unified diff.
    """
    old, out, pos = running.splitlines(), [], 0
    for no, start, body in _hunks(diff):
        want = [ln[1:].rstrip() for ln in body if ln[:1] in (" ", "-")]
        at = _place(old, want, start, pos)
        if at is None:
            raise ParseError("show session-config diffs", no, "a hunk whose lines are in the running config",
                             "\n".join(body[:4]))
        out += old[pos:at]
        pos = at
        for ln in body:
            if ln[:1] == "+":
                out.append(ln[1:])
            elif ln[:1] in (" ", "-"):
                if ln[:1] == " ":
                    out.append(old[pos])
                pos += 1
    return "\n".join(out + old[pos:]) + "\n"


def _hunks(diff: str) -> list[tuple[int, int, list[str]]]:
    """The hunks of a unified diff: ``(line number of the @@ line, old start (0-based), body lines)``.
    Raises ParseError on a line that is not part of a unified diff."""
    hunks: list[tuple[int, int, list[str]]] = []
    for no, line in enumerate(diff.splitlines(), 1):
        head = re.fullmatch(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@.*", line)
        if head:
            hunks.append((no, int(head.group(1)) - (0 if head.group(2) == "0" else 1), []))
        elif line.startswith(("--- ", "+++ ")) and not hunks:
            continue
        elif hunks and (line[:1] in (" ", "-", "+") or line == ""):
            hunks[-1][2].append(line if line else " ")
        elif not line.startswith("\\"):
            raise ParseError("show session-config diffs", no, "a unified diff line", line)
    return hunks


def _place(old: list[str], want: list[str], start: int, floor: int) -> int | None:
    """The line of ``old`` at or after ``floor`` where the lines ``want`` begin, nearest ``start``."""
    fits = lambda at: [ln.rstrip() for ln in old[at:at + len(want)]] == want  # noqa: E731
    for offset in range(len(old) + 1):
        for at in (start - offset, start + offset):
            if floor <= at <= len(old) - len(want) and fits(at):
                return at
    return None


def changes_of_diff(diff: str, running: str) -> dict[str, tuple[str | None, str | None]]:
    """The switch's session diff as ``{key: (before, after)}``: before from ``running`` (None: not
    configured), after from ``running`` patched with ``diff`` (None: removed)."""
    if not diff.strip():
        return {}
    before, after = settings(running), settings(patched(diff, running))
    keys = list(dict.fromkeys([*after, *before]))
    return {k: (before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)}


def digest(running: str) -> str:
    """The revision id of a running configuration: ``cfg-`` and 12 hex digits of the SHA-256 of its
    lines without comments (``! Command: ...``, ``! device: ...``) and trailing blanks. EOS numbers
    no revisions; the same configuration always has the same id, on any switch."""
    lines = [ln.rstrip() for ln in running.splitlines() if not ln.lstrip().startswith("! ") and ln.strip()]
    return "cfg-" + hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]


def change_tags(key: str, before: str | None, after: str | None) -> tuple[str, ...]:
    """The tags of an EOS change: a port MTU raised or lowered (no ``mtu`` line: EOS's
    :data:`DEFAULT_MTU`); lossless turned on or off by ``priority-flow-control on``, a no-drop
    priority or a queue's ECN thresholds."""
    parts = key.split("/")
    if len(parts) == 3 and parts[0] == "port" and parts[2] in ("mtu", "oper_mtu"):
        return mtu_tags(before or str(DEFAULT_MTU), after or str(DEFAULT_MTU))
    if parts[0] == "port" and (parts[2:] == ["pfc"] or parts[2:3] == ["pfc_priority"] or parts[-1] == "ecn_min"):
        return lossless_tags(before in ("on", "no-drop") or (parts[-1] == "ecn_min" and before is not None),
                             after in ("on", "no-drop") or (parts[-1] == "ecn_min" and after is not None))
    return ()
