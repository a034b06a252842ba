"""Arista EOS configuration text (``show running-config``, a rendered candidate) as flat settings:
the one reader of EOS configuration (:mod:`tuning.switch.eos_keys` re-exports it; ``fabtune parse
eos-running-config``).

The text is EOS's indented configuration (shared/cases/cli/eos__running_config_roce_lines.txt):
a section header at column 0 (``interface Ethernet1``), its body indented 3 spaces, a sub-section's
(``tx-queue 3``) 6; ``!`` lines separate sections, ``! text`` lines are comments, ``end`` ends it.

Keys: ``port/<if>/mtu`` (bytes), ``port/<if>/description``, ``port/<if>/qos_trust`` (``dscp``/``cos``),
``port/<if>/pfc`` (``on``), ``port/<if>/pfc_priority/<p>`` (``no-drop``), ``port/<if>/txq/<n>/ecn_min``
and ``ecn_max`` (``150 kbytes``) and ``ecn_probability`` (percent), ``qos/dscp/<d>/tc`` (the global
``qos map dscp D to traffic-class T``). Any other line keeps its words as the key under its section
(``port/Ethernet1/no switchport``, ``ip routing``) with the value ``""``.
"""

from __future__ import annotations

import re

from tuning.errors import ParseError
from tuning.parsers.base import Parsed, clean_lines, parser

Section = tuple[str, ...]
INDENT = 3
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


class EosRunningConfig(Parsed):
    """``show running-config`` as flat settings (keys: the module docstring), in text order."""

    settings: dict[str, str]


@parser("eos-running-config")
def parse_running_config(text: str) -> EosRunningConfig:
    """``show running-config`` (prompt lines around it allowed). Raises ParseError on a bad indent."""
    body = [ln for ln in clean_lines(text) if not re.fullmatch(r"[A-Za-z0-9][\w.-]*(?:\([^)]*\))?[>#].*", ln.strip())
            or ln.startswith(" ")]
    return EosRunningConfig(tool="eos-running-config", settings=settings("\n".join(body)))
