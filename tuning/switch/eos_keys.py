"""Arista EOS configuration text -> the flat setting keys of plans (``port/Ethernet1/mtu = 9214``).

One reading for every source of EOS configuration, so a plan can only name what the device's own
diff holds: the rendered candidate, ``show running-config`` and the running configuration patched
with ``show session-config named NAME diffs`` (a unified diff, shared/cases/cli/
eos__configure_session_roce_diff_commit.txt) all become ``{key: value}`` by :func:`settings`.

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

Section = tuple[str, ...]
INDENT = 3
#: EOS's MTU of a routed Ethernet port without an ``mtu`` line (EOS User Manual, "Ethernet Ports":
#: the default IP MTU is 1500 bytes)
DEFAULT_MTU = 1500
_ECN = re.compile(r"random-detect ecn minimum-threshold (\d+ \w+) maximum-threshold (\d+ \w+)"
                  r" max-mark-probability (\d+)")
_DSCP_MAP = re.compile(r"qos map dscp ((?:\d+ )+)to traffic-class (\d+)")
#: (section pattern, line pattern, key template(s)): the first match names the line's keys
_RULES: list[tuple[str, re.Pattern[str], tuple[str, ...]]] = [(s, re.compile(p), k) for s, p, k in (
    (r"interface (\S+)", r"mtu (\d+)", (r"port/{0}/mtu={1}",)),
    (r"interface (\S+)", r"description (.+)", (r"port/{0}/description={1}",)),
    (r"interface (\S+)", r"qos trust (\S+)", (r"port/{0}/qos_trust={1}",)),
    (r"interface (\S+)", r"priority-flow-control (on)", (r"port/{0}/pfc={1}",)),
    (r"interface (\S+)", r"priority-flow-control priority (\d) (no-drop|drop)", (r"port/{0}/pfc_priority/{1}={2}",)),
    (r"interface (\S+)\|tx-queue (\d+)", _ECN.pattern,
     (r"port/{0}/txq/{1}/ecn_min={2}", r"port/{0}/txq/{1}/ecn_max={3}", r"port/{0}/txq/{1}/ecn_probability={4}")),
)]


def sections(text: str) -> list[tuple[Section, str]]:
    """Each configuration line with the section headers above it, in text order:
    ``[((), "ip routing"), (("interface Ethernet1",), "mtu 9214"), ...]`` (header lines included
    as lines of their parent). Comments, ``!`` and ``end`` are left out.

    Raises:
        ParseError: a line indented deeper than one level below its parent, or not by 3s.
    """
    out: list[tuple[Section, str]] = []
    stack: list[str] = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        body = line.lstrip(" ")
        if not body or body.startswith("!") or (body == "end" and line == body):
            continue
        depth, rest = divmod(len(line) - len(body), INDENT)
        if rest or depth > len(stack):
            raise ParseError("EOS configuration", no, f"an indent of 0..{len(stack) * INDENT} in steps of {INDENT}", line)
        del stack[depth:]
        out.append((tuple(stack), body))
        stack.append(body)
    return out


def settings(text: str) -> dict[str, str]:
    """EOS configuration text as flat settings in text order (keys: the module docstring).

    Raises:
        ParseError: a badly indented line (:func:`sections`).
    """
    out: dict[str, str] = {}
    lines = sections(text)
    heads = {head for head, _ in lines if head}
    for head, line in lines:
        if head + (line,) in heads:
            continue  # a section header: its body carries the settings
        out.update(_line_settings(head, line))
    return out


def _line_settings(head: Section, line: str) -> dict[str, str]:
    joined = "|".join(head)
    m = _DSCP_MAP.fullmatch(line) if not head else None
    if m:
        return {f"qos/dscp/{d}/tc": m.group(2) for d in m.group(1).split()}
    for section, pattern, keys in _RULES:
        sm, lm = re.fullmatch(section, joined), pattern.fullmatch(line)
        if sm and lm:
            words = sm.groups() + lm.groups()
            return dict(k.format(*words).split("=", 1) for k in keys)
    if head and head[0].startswith("interface "):
        port = head[0].split(None, 1)[1]
        return {"/".join(["port", port, *(h.replace(" ", "/", 1) if h.startswith("tx-queue") else h
                                         for h in head[1:]), line]).replace("tx-queue/", "txq/"): ""}
    return {"/".join([*head, line]): ""}


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
