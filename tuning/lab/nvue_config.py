"""The NVUE configuration tree of the switch simulator: grammar, ``nv set`` / ``nv unset``,
``nv config diff`` (YAML) and ``nv config show -o commands``.

A configuration is a nested dict as NVUE stores it (``startup.yaml``): only what was
configured, e.g. ``{"interface": {"swp1": {"link": {"mtu": 9216}, "type": "swp"}},
"qos": {"roce": {"enable": "on", "mode": "lossless"}}}``. Keys are strings, leaves are
``int`` or ``str``.

Syntax follows the Cumulus Linux 5.x NVUE command reference (``Set-and-Unset-Commands/QoS.md``,
"RDMA over Converged Ethernet - RoCE", "Quality of Service"): MTU 552-9216, trust
``l2|l3|port|both``, ECN thresholds in bytes, ids as lists/ranges (``4,5,7``, ``0-5,7``).
Layouts: shared/cases/cli/nvue_config_diff__*.txt and nvue_config_show__*.txt.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Union

Tree = dict[str, Any]


class InvalidCommand(ValueError):
    """A ``nv set``/``nv unset`` line the grammar does not accept."""


@dataclass(frozen=True)
class Int:
    """An integer leaf in ``lo..hi``."""

    lo: int
    hi: int

    def parse(self, words: list[str]) -> int:
        if len(words) != 1 or not re.fullmatch(r"\d+", words[0]) or not self.lo <= int(words[0]) <= self.hi:
            raise InvalidCommand(f"expected an integer {self.lo}-{self.hi}")
        return int(words[0])


@dataclass(frozen=True)
class Enum:
    """A leaf holding one of ``choices``."""

    choices: tuple[str, ...]

    def parse(self, words: list[str]) -> str:
        if len(words) != 1 or words[0] not in self.choices:
            raise InvalidCommand(f"expected one of {', '.join(self.choices)}")
        return words[0]


@dataclass(frozen=True)
class Text:
    """A free text leaf: the rest of the line, outer quotes removed."""

    def parse(self, words: list[str]) -> str:
        text = " ".join(words)
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
            text = text[1:-1]
        if not text:
            raise InvalidCommand("expected a text")
        return text


@dataclass(frozen=True)
class IdList:
    """A leaf holding a list of ids in ``lo..hi`` (``3`` or ``3,4``), kept as printed, normalised."""

    lo: int
    hi: int

    def parse(self, words: list[str]) -> str:
        if len(words) != 1:
            raise InvalidCommand("expected one id list")
        return ",".join(str(i) for i in expand_ids(words[0], self.lo, self.hi))


@dataclass(frozen=True)
class Each:
    """A level of named instances: ``kind`` is ``interface``, ``profile`` or ``ids``.

    The instance token may name several (``swp1-4,31``, ``4,5,7``); the rest of the
    command applies to each of them.
    """

    kind: str
    child: "Node"
    lo: int = 0
    hi: int = 0


Leaf = Union[Int, Enum, Text, IdList]
Node = Union[dict, Each, Leaf]

_ENABLE = Enum(("enable", "disable", "enabled", "disabled"))
_TC = (0, 7)

#: The part of NVUE the simulator knows (interface link/description, QoS for RoCE, hostname, auto save:
#: ``nv set system config auto-save enable on|off``, CL 5.4-5.9 syntax, Set-and-Unset System-Configuration.md).
GRAMMAR: dict = {
    "interface": Each("interface", {
        "link": {"mtu": Int(552, 9216), "state": Enum(("up", "down"))},
        "description": Text(),
        "type": Enum(("swp", "eth", "loopback", "bond")),
    }),
    "qos": {
        "roce": {"enable": Enum(("on", "off")), "mode": Enum(("lossless", "lossy"))},
        "pfc": Each("profile", {
            "switch-priority": IdList(*_TC), "tx": _ENABLE, "rx": _ENABLE,
            "cable-length": Int(1, 100000), "port-buffer": Int(0, 4294967295),
        }),
        "mapping": Each("profile", {
            "trust": Enum(("l2", "l3", "port", "both")),
            "port-default-sp": Int(*_TC),
            "pcp": Each("ids", {"switch-priority": Int(*_TC)}, *_TC),
            "dscp": Each("ids", {"switch-priority": Int(*_TC)}, 0, 63),
        }),
        "egress-queue-mapping": Each("profile", {
            "switch-priority": Each("ids", {"traffic-class": Int(*_TC)}, *_TC),
        }),
        "congestion-control": Each("profile", {
            "traffic-class": Each("ids", {
                "ecn": _ENABLE, "red": _ENABLE, "probability": Int(0, 100),
                "min-threshold": Int(1, 4294967295), "max-threshold": Int(1, 4294967295),
            }, *_TC),
        }),
        "egress-scheduler": Each("profile", {
            "traffic-class": Each("ids", {"mode": Enum(("dwrr", "strict")), "bw-percent": Int(1, 100)}, *_TC),
        }),
    },
    "system": {"hostname": Text(), "config": {"auto-save": {"enable": Enum(("on", "off"))}}},
}


def natural_key(text: str) -> list:
    """Sort key that orders ``swp2`` before ``swp10`` and ``9`` before ``26``."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


def expand_ids(token: str, lo: int, hi: int) -> list[int]:
    """``"0-5,7"`` -> ``[0, 1, 2, 3, 4, 5, 7]``, every id in ``lo..hi``."""
    out: list[int] = []
    for part in token.split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise InvalidCommand(f"bad id list {token!r}")
        a, b = int(m.group(1)), int(m.group(2) or m.group(1))
        if a > b or a < lo or b > hi:
            raise InvalidCommand(f"ids must be in {lo}-{hi}")
        out.extend(range(a, b + 1))
    return sorted(set(out))


def expand_interfaces(token: str, known: set[str]) -> list[str]:
    """``"swp1-4,31"`` -> ``["swp1", "swp2", "swp3", "swp4", "swp31"]``; each must be in ``known``."""
    names: list[str] = []
    prefix = ""
    for part in token.split(","):
        m = re.fullmatch(r"([a-z][a-z_]*?)?(\d+)(?:-(\d+))?", part)
        if part in known:
            names.append(part)
            continue
        if not m or not (m.group(1) or prefix):
            raise InvalidCommand(f"unknown interface {part!r}")
        prefix = m.group(1) or prefix
        a, b = int(m.group(2)), int(m.group(3) or m.group(2))
        names.extend(f"{prefix}{i}" for i in range(a, b + 1))
    if not names or any(n not in known for n in names):
        raise InvalidCommand(f"unknown interface in {token!r}")
    return names


def compress_interfaces(names: list[str]) -> str:
    """``["swp1", "swp2", "swp32"]`` -> ``"swp1-2,32"`` (NVUE's range form)."""
    by_prefix: dict[str, list[int]] = {}
    out = []
    for name in sorted(names, key=natural_key):
        m = re.fullmatch(r"(swp)(\d+)", name)
        if m:
            by_prefix.setdefault(m.group(1), []).append(int(m.group(2)))
        else:
            out.append(name)
    for prefix, nums in by_prefix.items():
        runs, start = [], nums[0]
        for prev, cur in zip(nums, nums[1:] + [None]):
            if cur != prev + 1 if cur is not None else True:
                runs.append(f"{start}-{prev}" if prev != start else f"{start}")
                start = cur
        out.insert(0, prefix + ",".join(runs))
    return ",".join(out)


def parse_path(words: list[str], interfaces: set[str], *, unset: bool) -> list[tuple[tuple[str, ...], Any]]:
    """Walk ``words`` (after ``set``/``unset``) through :data:`GRAMMAR`.

    Returns:
        ``[(path, value)]``, one per expanded instance; ``value`` is None for a
        container (``nv set qos roce``) or for any ``unset``.

    Raises:
        InvalidCommand: unknown keyword, bad instance or value out of range.
    """
    results: list[tuple[tuple[str, ...], Any]] = []

    def walk(node: Node, i: int, path: tuple[str, ...]) -> None:
        if isinstance(node, dict):
            if i == len(words):
                results.append((path, None))
                return
            if words[i] not in node:
                raise InvalidCommand(f"unknown keyword {words[i]!r}")
            walk(node[words[i]], i + 1, path + (words[i],))
        elif isinstance(node, Each):
            if i == len(words):
                raise InvalidCommand("missing instance")
            for name in _instances(node, words[i], interfaces):
                walk(node.child, i + 1, path + (name,))
        elif unset and i == len(words):
            results.append((path, None))
        else:
            results.append((path, node.parse(words[i:])))

    walk(GRAMMAR, 0, ())
    return results


def _instances(node: Each, token: str, interfaces: set[str]) -> list[str]:
    if node.kind == "interface":
        return expand_interfaces(token, interfaces)
    if node.kind == "ids":
        return [str(i) for i in expand_ids(token, node.lo, node.hi)]
    if not re.fullmatch(r"[A-Za-z0-9_-]+", token):
        raise InvalidCommand(f"bad profile name {token!r}")
    return [token]


def set_path(tree: Tree, path: tuple[str, ...], value: Any) -> None:
    """Set ``value`` at ``path`` (``None`` creates the container), with NVUE's implied keys.

    Implied keys: a configured ``interface swpN`` gets ``type: swp``; ``qos roce`` (alone or
    with a mode) gets ``enable: on``, and ``mode: lossless`` when no mode was set (RoCE doc:
    "nv set qos roce and nv set qos roce mode lossless are equivalent").
    """
    node = tree
    for key in path[:-1]:
        node = node.setdefault(key, {})
    if value is None:
        node.setdefault(path[-1], {})
    else:
        node[path[-1]] = value
    if path[:1] == ("interface",) and path[1].startswith("swp"):
        tree["interface"][path[1]]["type"] = "swp"
    if path[:2] == ("qos", "roce"):
        roce = tree["qos"]["roce"]
        if path[2:3] != ("enable",):
            roce["enable"] = "on"
        roce.setdefault("mode", "lossless")


def unset_path(tree: Tree, path: tuple[str, ...]) -> None:
    """Remove ``path`` and any container left empty above it; a missing path is a no-op."""
    chain = [tree]
    for key in path[:-1]:
        if not isinstance(chain[-1].get(key), dict):
            return
        chain.append(chain[-1][key])
    chain[-1].pop(path[-1], None)
    for parent, key in zip(reversed(chain[:-1]), reversed(path[:-1])):
        if parent[key] == {}:
            del parent[key]


def subtract(a: Tree, b: Tree) -> Tree:
    """What ``a`` holds that ``b`` does not (leaves that differ or are missing in ``b``)."""
    out: Tree = {}
    for key, val in a.items():
        if isinstance(val, dict) and isinstance(b.get(key), dict):
            sub = subtract(val, b[key])
            if sub:
                out[key] = sub
        elif key not in b or b[key] != val:
            out[key] = copy.deepcopy(val)
    return out


def _yaml_scalar(value: Any) -> str:
    text = str(value)
    if re.search(r":\s|^[\s'\"\-{\[#&*!|>%@`]|\s$|#", text) or text == "":
        return "'" + text.replace("'", "''") + "'"
    return text


def yaml_lines(tree: Tree, indent: int) -> list[str]:
    """Block YAML of ``tree`` with keys in natural order, 2 spaces per level."""
    lines = []
    for key in sorted(tree, key=natural_key):
        val = tree[key]
        if isinstance(val, dict) and val:
            lines.append(" " * indent + f"{key}:")
            lines.extend(yaml_lines(val, indent + 2))
        else:
            lines.append(" " * indent + f"{key}: {{}}" if isinstance(val, dict) else " " * indent + f"{key}: {_yaml_scalar(val)}")
    return lines


def config_diff(applied: Tree, pending: Tree) -> str:
    """``nv config diff``: ``- set:`` / ``- unset:`` items, or ``""`` when nothing is pending."""
    out = []
    for verb, tree in (("set", subtract(pending, applied)), ("unset", _removed(applied, pending))):
        if tree:
            out.append(f"- {verb}:")
            out.extend(yaml_lines(tree, 4))
    return "\n".join(out) + "\n" if out else ""


def _removed(applied: Tree, pending: Tree) -> Tree:
    out: Tree = {}
    for key, val in applied.items():
        if key not in pending:
            out[key] = {}
        elif isinstance(val, dict) and isinstance(pending[key], dict):
            sub = _removed(val, pending[key])
            if sub:
                out[key] = sub
    return out


def _flatten(tree: Tree, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    out = []
    for key, val in tree.items():
        if isinstance(val, dict) and val:
            out.extend(_flatten(val, prefix + (key,)))
        else:
            out.append((prefix + (key,), None if isinstance(val, dict) else val))
    return out


def config_commands(tree: Tree) -> str:
    """``nv config show -o commands``: sorted ``nv set`` lines, interfaces compressed to ranges."""
    grouped: dict[str, list[str]] = {}
    lines = []
    for path, value in _flatten(tree):
        words = list(path) + ([] if value is None else [_command_word(value)])
        if path[0] == "interface":
            grouped.setdefault(" ".join(words[2:]), []).append(path[1])
        else:
            lines.append("nv set " + " ".join(words))
    for rest, names in grouped.items():
        lines.append(f"nv set interface {compress_interfaces(names)} {rest}".rstrip())
    return "".join(line + "\n" for line in sorted(lines))


def _command_word(value: Any) -> str:
    text = str(value)
    return f"'{text}'" if re.search(r"\s", text) else text
