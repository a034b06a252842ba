"""NVUE configuration text -> the flat setting keys of plans (``port/swp1/mtu = 9216``).

One reading for every source of NVUE configuration, so a plan can only name what the
device's own diff holds: ``nv set`` lines (the rendered candidate and ``nv config show -o
commands``) and ``nv config diff`` (a YAML list of ``- set:`` / ``- unset:`` trees,
shared/cases/cli/nvue_config_diff__*.txt) both become ``{NVUE path: value}`` leaves, and
:func:`flat_key` names a path.

Keys: ``port/<swp>/mtu``, ``port/<swp>/<rest of the path>`` (``type``, ``description``,
``link/state``), ``roce/enabled``, ``roce/mode``, ``roce/trust``, ``roce/dscp/<d>`` (DSCP ->
switch priority), ``roce/pfc_priority``, ``roce/pfc_tx``, ``roce/pfc_rx``, ``roce/sp/<p>/tc``
(egress queue mapping), ``roce/tc/<t>/scheduler`` and ``roce/tc/<t>/bw_percent``,
``roce/tc/<t>/ecn``, ``roce/tc/<t>/ecn_min_bytes``, ``ecn_max_bytes``, ``ecn_probability``
(congestion control);
any other path keeps its NVUE words (``system/hostname``).
"""

from __future__ import annotations

import re
import shlex

import yaml

from tuning.errors import ParseError
from tuning.model.tags import lossless_tags, mtu_tags

Path = tuple[str, ...]
_PROFILE = "default-global"
_ALIASES: list[tuple[re.Pattern[str], str]] = [(re.compile(p), k) for p, k in (
    (r"interface/([^/]+)/link/mtu", r"port/\1/mtu"),
    (r"interface/([^/]+)/(.+)", r"port/\1/\2"),
    (r"qos/roce/enable", "roce/enabled"),
    (r"qos/roce/mode", "roce/mode"),
    (rf"qos/mapping/{_PROFILE}/trust", "roce/trust"),
    (rf"qos/mapping/{_PROFILE}/dscp/(\d+)/switch-priority", r"roce/dscp/\1"),
    (rf"qos/pfc/{_PROFILE}/switch-priority", "roce/pfc_priority"),
    (rf"qos/pfc/{_PROFILE}/(tx|rx)", r"roce/pfc_\1"),
    (rf"qos/egress-queue-mapping/{_PROFILE}/switch-priority/(\d+)/traffic-class", r"roce/sp/\1/tc"),
    (rf"qos/egress-scheduler/{_PROFILE}/traffic-class/(\d+)/mode", r"roce/tc/\1/scheduler"),
    (rf"qos/egress-scheduler/{_PROFILE}/traffic-class/(\d+)/bw-percent", r"roce/tc/\1/bw_percent"),
    (rf"qos/congestion-control/{_PROFILE}/traffic-class/(\d+)/min-threshold", r"roce/tc/\1/ecn_min_bytes"),
    (rf"qos/congestion-control/{_PROFILE}/traffic-class/(\d+)/max-threshold", r"roce/tc/\1/ecn_max_bytes"),
    (rf"qos/congestion-control/{_PROFILE}/traffic-class/(\d+)/probability", r"roce/tc/\1/ecn_probability"),
    (rf"qos/congestion-control/{_PROFILE}/traffic-class/(\d+)/(.+)", r"roce/tc/\1/\2"),
)]


def flat_key(path: Path) -> str:
    """The plan key of an NVUE path, e.g. ``("interface", "swp1", "link", "mtu")`` -> ``port/swp1/mtu``."""
    joined = "/".join(path)
    for pattern, key in _ALIASES:
        if pattern.fullmatch(joined):
            return pattern.sub(key, joined)
    return joined


def expand_interfaces(token: str) -> list[str]:
    """NVUE's interface ranges: ``swp1-4,31`` -> ``swp1 swp2 swp3 swp4 swp31``; a name is kept."""
    names, prefix = [], ""
    for part in token.split(","):
        m = re.fullmatch(r"([A-Za-z][A-Za-z_]*?)?(\d+)(?:-(\d+))?", part)
        if not m or not (m.group(1) or prefix) or (m.group(3) and int(m.group(3)) < int(m.group(2))):
            names.append(part)
            continue
        prefix = m.group(1) or prefix
        names.extend(f"{prefix}{i}" for i in range(int(m.group(2)), int(m.group(3) or m.group(2)) + 1))
    return names


#: a line without quotes, escapes or odd white space: ``str.split`` gives exactly ``shlex.split``'s words
_PLAIN_LINE = re.compile(r"[A-Za-z0-9_.,:/=+@%\- ]*")


def command_leaves(text: str) -> dict[Path, str]:
    """``nv set`` lines (a rendered candidate, ``nv config show -o commands``) -> ``{path: value}``.

    The last word of a line is its value; comments, blank and ``nv unset`` lines are skipped.

    Raises:
        ParseError: a line that is not ``nv set PATH... VALUE``.
    """
    out: dict[Path, str] = {}
    for no, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#") or line.startswith("nv unset "):
            continue
        try:  # a line of plain words splits as shlex splits it; shlex (pure Python) only for quotes
            words = line.split() if _PLAIN_LINE.fullmatch(line) else shlex.split(line)
        except ValueError as exc:
            raise ParseError("nv set", no, "balanced quotes", line) from exc
        if words[:2] != ["nv", "set"] or len(words) < 4:
            raise ParseError("nv set", no, "`nv set PATH... VALUE`", line)
        path, value = words[2:-1], words[-1]
        heads = expand_interfaces(path[1]) if path[0] == "interface" and len(path) > 1 else [None]
        for head in heads:
            out[tuple(path if head is None else [path[0], head, *path[2:]])] = value
    return out


def diff_leaves(text: str) -> tuple[dict[Path, str], list[Path]]:
    """``nv config diff`` -> (``{path: value}`` of ``- set:``, the paths of ``- unset:``).

    Values are read as text (``on`` stays ``on``, ``9216`` stays ``9216``); an unset leaf is a
    path whose whole subtree goes.

    Raises:
        ParseError: not the YAML list NVUE prints.
    """
    if not text.strip():
        return {}, []
    try:
        items = yaml.load(text, Loader=getattr(yaml, "CBaseLoader", yaml.BaseLoader))
    except yaml.YAMLError as exc:
        raise ParseError("nv config diff", 0, "a YAML list of '- set:' / '- unset:'", str(exc)[:120]) from exc
    if not isinstance(items, list) or not all(isinstance(i, dict) and set(i) <= {"set", "unset"} for i in items):
        raise ParseError("nv config diff", 0, "a YAML list of '- set:' / '- unset:'", text[:120])
    sets: dict[Path, str] = {}
    unsets: list[Path] = []
    for item in items:
        for verb, tree in item.items():
            for path, value in _leaves(tree, ()):
                if verb == "set":
                    sets[path] = value
                else:
                    unsets.append(path)
    return sets, unsets


def _leaves(tree: object, prefix: Path) -> list[tuple[Path, str]]:
    if isinstance(tree, dict) and tree:
        return [leaf for k, v in tree.items() for leaf in _leaves(v, prefix + (str(k),))]
    return [(prefix, "" if tree in (None, {}) else str(tree))]


def changes_of_diff(diff: str, running: str) -> dict[str, tuple[str | None, str | None]]:
    """The device's diff as ``{key: (before, after)}``: before from the applied ``nv set`` lines
    (None: not configured), after from the diff (None: unset)."""
    applied = command_leaves(running)
    sets, unsets = diff_leaves(diff)
    out = {flat_key(p): (applied.get(p), v) for p, v in sets.items()}
    for gone in unsets:
        for p, v in applied.items():
            if p[:len(gone)] == gone and p not in sets:
                out[flat_key(p)] = (v, None)
    return out


#: NVUE keys whose value "lossless" / "enable" means the lossless path is on (``nv set qos roce mode
#: lossless``; PFC transmit and receive); plus every ``roce/tc/<N>/ecn``
LOSSLESS_KEYS = ("roce/mode", "roce/pfc_tx", "roce/pfc_rx")
_LOSSLESS_WORDS = ("lossless", "enable")


def change_tags(key: str, before: str | None, after: str | None) -> tuple[str, ...]:
    """The tags of an NVUE change (:meth:`tuning.switch.base.SwitchDriver.change_tags`): a port's
    configured or operational MTU (``port/<swp>/mtu``, ``port/<swp>/oper_mtu``) raised or lowered;
    lossless turned on or off by :data:`LOSSLESS_KEYS` or a traffic class's ECN."""
    parts = key.split("/")
    if len(parts) == 3 and parts[0] == "port" and parts[2] in ("mtu", "oper_mtu"):
        return mtu_tags(before, after)
    if key in LOSSLESS_KEYS or (key.startswith("roce/tc/") and key.endswith("/ecn")):
        return lossless_tags(str(before or "") in _LOSSLESS_WORDS, str(after or "") in _LOSSLESS_WORDS)
    return ()
