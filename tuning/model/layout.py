"""The Ansible inventory layout, read the way ``ansible-inventory --list`` reads it.

- ``hosts.yaml`` (Ansible's ``yaml`` inventory plugin): every top-level key is a group (``all``
  is the root); a group holds ``hosts``, ``children`` and ``vars`` mappings (a plain string is one
  name, as Ansible allows). A host may sit in several groups; its inline variables merge in file
  order. Anything Ansible would only warn about (a list where a mapping belongs, an unknown
  section, a child cycle) is refused here.
- vars files (``host_group_vars`` plugin, ``DataLoader.find_vars_files``): for a group or host
  NAME, the first of ``NAME`` (a file or a folder), ``NAME.yml``, ``NAME.yaml``, ``NAME.json`` that
  exists; a folder gives every file in it (recursively, sorted, skipping hidden and ``~`` files)
  with one of those extensions or none. Ansible silently ignores the later candidates, so two of
  them for one name is refused here.
- precedence (Ansible "Variable precedence", items 3-10): every group's inline vars (``all``
  first) < ``group_vars/all`` < the other groups' ``group_vars`` files < inline host vars <
  ``host_vars`` files; groups in order of (depth, ``ansible_group_priority``, name), later ones
  winning; top-level keys replace (``hash_behaviour = replace``). Checked against
  ``ansible-inventory --list`` by ``tests/input/test_ansible_parity.py``.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tuning.errors import InputError
from tuning.model import grammar
from tuning.model.parsecache import MIN_FILES, ParseCache
from tuning.model.yamlfile import read_yaml

SECTIONS = ("hosts", "children", "vars")
VARS_EXTENSIONS = (".yml", ".yaml", ".json")


@dataclass
class Group:
    """One group: inline vars, children, direct hosts and depth below ``all``."""

    name: str
    vars: dict = field(default_factory=dict)
    children: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    depth: int = 0
    priority: int = 1  # ansible_group_priority: Ansible keeps it out of the group's vars
    _held: set[str] = field(default_factory=set, repr=False, compare=False)  # ``hosts`` as a set: each host added once

    def add_host(self, host: str) -> None:
        """Append ``host`` to :attr:`hosts` unless it is there (a host listed twice stays once)."""
        if len(self._held) != len(self.hosts):  # hosts given to the constructor
            self._held = set(self.hosts)
        if host not in self._held:
            self._held.add(host)
            self.hosts.append(host)


@dataclass
class Tree:
    """Groups and hosts of one ``hosts.yaml``; ``inline`` holds each host's inline vars."""

    path: Path
    groups: dict[str, Group] = field(default_factory=dict)
    inline: dict[str, dict] = field(default_factory=dict)
    _direct: dict[str, list[str]] = field(default_factory=dict, repr=False)
    _parents: dict[str, list[str]] = field(default_factory=dict, repr=False)
    _closure: dict[tuple[str, ...], list[str]] = field(default_factory=dict, repr=False, compare=False)

    def groups_of(self, host: str) -> list[str]:
        """Every group holding ``host`` (directly or through children), Ansible's order (a new list;
        worked out once per distinct set of direct groups: a fleet's hosts share a few)."""
        if not self._direct and not self._parents:
            self._index()
        direct = tuple(self._direct.get(host) or ["ungrouped"])
        if direct not in self._closure:
            self._closure[direct] = self._groups_above(direct)
        return list(self._closure[direct])

    def _groups_above(self, direct: tuple[str, ...]) -> list[str]:
        """``direct`` with every group above them and ``all``, in Ansible's order."""
        out = {"all"}
        stack = list(direct)
        while stack:
            name = stack.pop()
            if name not in out:
                out.add(name)
                stack += self._parents.get(name, [])
        return sorted(out, key=self._order)

    def _index(self) -> None:
        """host -> its direct groups, group -> its parents (built once: loads stay linear in hosts)."""
        for g in self.groups.values():
            for host in g.hosts if g.name != "all" else []:
                self._direct.setdefault(host, []).append(g.name)
            for child in g.children:
                self._parents.setdefault(child, []).append(g.name)

    def _order(self, name: str) -> tuple[int, int, str]:
        group = self.groups.get(name, Group(name, depth=1))
        return (group.depth, group.priority, name)


def _mapping(tree: Tree, where: str, value: Any, what: str) -> dict:
    if value is None:
        return {}
    if isinstance(value, str):
        return {value: None}
    if not isinstance(value, dict):
        raise InputError(str(tree.path), where, f"{what} is a {type(value).__name__}; allowed: a mapping "
                                                "(name: ...), as Ansible's YAML inventory requires")
    return value


def _name(tree: Tree, where: str, value: Any, kind: str) -> str:
    if isinstance(value, str) and ("[" in value or ":" in value):
        raise InputError(str(tree.path), where, f"{value!r}: host patterns and host:port are not supported; "
                                                f"allowed: one {kind} name per key (and ansible_port)")
    try:
        return grammar.check_host_name(value)
    except ValueError as e:
        raise InputError(str(tree.path), where, f"bad {kind} name: {e}") from None


def _var_names(path: str, where: str, data: dict) -> dict:
    for key in data:
        if not isinstance(key, str):
            raise InputError(path, f"{where}{key!r}", "a variable name must be a string; quote it")
    return data


def _parse_group(tree: Tree, name: str, body: Any, where: str) -> None:
    if not isinstance(body, (dict, type(None))):
        raise InputError(str(tree.path), where, f"group {name} is a {type(body).__name__}; "
                                                "allowed: a mapping with hosts, children, vars")
    group = tree.groups.setdefault(name, Group(name))
    body = body or {}
    for key in body:
        if key not in SECTIONS:
            raise InputError(str(tree.path), f"{where}.{key}", f"unknown key; allowed: {', '.join(SECTIONS)}")
    group.vars.update(_var_names(str(tree.path), f"{where}.vars.",
                                 _mapping(tree, f"{where}.vars", body.get("vars"), "vars")))
    if "ansible_group_priority" in group.vars:
        prio = group.vars.pop("ansible_group_priority")
        if isinstance(prio, bool) or not isinstance(prio, int):
            raise InputError(str(tree.path), f"{where}.vars.ansible_group_priority", f"{prio!r} is not an integer")
        group.priority = prio
    for raw, hvars in _mapping(tree, f"{where}.hosts", body.get("hosts"), "hosts").items():
        host = _name(tree, f"{where}.hosts.{raw}", raw, "host")
        if not isinstance(hvars, (dict, type(None))):
            raise InputError(str(tree.path), f"{where}.hosts.{host}", f"host variables are a "
                                                                      f"{type(hvars).__name__}; allowed: a mapping")
        tree.inline.setdefault(host, {}).update(_var_names(str(tree.path), f"{where}.hosts.{host}.", hvars or {}))
        group.add_host(host)
    for raw, sub in _mapping(tree, f"{where}.children", body.get("children"), "children").items():
        child = _name(tree, f"{where}.children.{raw}", raw, "group")
        if child == "all":
            raise InputError(str(tree.path), f"{where}.children.all", "all cannot be a child group")
        if child not in group.children:
            group.children.append(child)
        _parse_group(tree, child, sub, f"{where}.children.{child}")


def _set_depths(tree: Tree) -> None:
    """Depth below ``all`` (the longest parent chain), refusing a child cycle as Ansible does."""
    tops = [g for g in tree.groups if g != "all" and not any(g in p.children for p in tree.groups.values())]
    tree.groups["all"].children += [g for g in tops if g not in tree.groups["all"].children]
    _visit(tree, "all", 0, ["all"])


def _visit(tree: Tree, name: str, depth: int, chain: list[str]) -> None:
    """:func:`_set_depths` below ``name`` (a module function, not a closure calling itself: that
    closure held the tree in a reference cycle, freed only by the cyclic collector)."""
    group = tree.groups[name]
    group.depth = max(group.depth, depth)
    for child in group.children:
        if child in chain:
            raise InputError(str(tree.path), f"{name}.children.{child}", f"group {child} contains itself "
                             f"({' > '.join(chain + [child])}); allowed: a tree of groups")
        _visit(tree, child, depth + 1, chain + [child])


def _owner(folder: Path) -> int | None:
    """The uid that owns an inventory folder: its files are read only as that user could
    (:func:`tuning.model.yamlfile.read_bytes`); None when the folder cannot be stat'ed."""
    try:
        return folder.stat().st_uid
    except OSError:
        return None


def parse_tree(path: Path, read: Callable[[Path, int | None], Any] = read_yaml) -> Tree:
    """Read ``hosts.yaml`` into groups and hosts (``read``: how its YAML is read, as
    :func:`tuning.model.yamlfile.read_yaml`; a load passes its :class:`ParseCache`'s).

    Raises:
        InputError: not a mapping of groups, a list where a mapping belongs, a bad name, a cycle.
    """
    data = read(path, _owner(path.parent))
    tree = Tree(path)
    if not isinstance(data, dict) or not data:
        raise InputError(str(path), "-", "top level must be a mapping of groups (all: {children: ...})")
    tree.groups["all"] = Group("all")
    for raw, body in data.items():
        name = "all" if raw == "all" else _name(tree, str(raw), raw, "group")
        _parse_group(tree, name, body, name)
    _set_depths(tree)
    return tree


def vars_files(inv: Path, folder: str, name: str, listed: set[str] | None = None) -> list[Path]:
    """The vars files Ansible reads for one group or host (see the module docstring).

    Args:
        listed: the names in ``inv/folder`` (``os.listdir``), when known: a candidate not listed is
            not looked up (one ``stat`` per host instead of four); None: every candidate is.

    Raises:
        InputError: two candidates exist for one name (Ansible would ignore all but the first).
    """
    base = inv / folder
    found: list[tuple[Path, os.stat_result]] = []
    for ext in ("",) + VARS_EXTENSIONS:
        if listed is None or name + ext in listed:
            path = base / (name + ext)
            try:
                found.append((path, os.stat(path)))  # one stat: exists, and its kind
            except OSError:  # missing, or a dangling link: as Path.exists, not there
                pass
    if len(found) > 1:
        raise InputError(str(found[1][0]), "-", f"{folder}/ has {', '.join(p.name for p, _ in found)} for {name}; "
                         f"Ansible reads only {found[0][0].name} and ignores the rest: merge them into one")
    if found and stat.S_ISDIR(found[0][1].st_mode):
        return _dir_files(found[0][0])
    return [p for p, _ in found]


def _dir_files(folder: Path) -> list[Path]:
    out: list[Path] = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.startswith(".") or entry.name.endswith("~"):
            continue
        if entry.is_dir() and not entry.suffix:
            out += _dir_files(entry)
        elif not entry.is_dir() and (not entry.suffix or entry.suffix in VARS_EXTENSIONS):  # a FIFO: refused on read
            out.append(entry)
    return out


class VarsCache:
    """Each vars file read once per load: path -> its mapping."""

    def __init__(self, inv: Path):
        self.inv = inv
        self.owner = _owner(inv)
        self._data: dict[Path, dict] = {}
        self._layers: dict[tuple[str, str], list[tuple[dict, str]]] = {}  # a group's files, read once per load
        self._listed: dict[str, set[str] | None] = {}  # group_vars / host_vars -> the names in it
        count = sum(len(self.listed(f) or ()) for f in ("group_vars", "host_vars"))
        self.parsed = ParseCache(inv, enabled=count >= MIN_FILES)  # a large inventory's parses, kept by content

    def listed(self, folder: str) -> set[str] | None:
        """The names in ``inv/folder``, read once per load; None when it cannot be listed (missing,
        or a folder its owner may enter but not list): every candidate is then looked up."""
        if folder not in self._listed:
            try:
                self._listed[folder] = set(os.listdir(self.inv / folder))
            except OSError:
                self._listed[folder] = None
        return self._listed[folder]

    def layers(self, folder: str, name: str) -> list[tuple[dict, str]]:
        """(mapping, file) for each vars file of one group or host, in Ansible's order; a group's
        list is built once per load (every host of the group shares it)."""
        layers = self._layers.get((folder, name))
        if layers is None:
            layers = []
            for path in vars_files(self.inv, folder, name, self.listed(folder)):
                if path not in self._data:
                    data = self.parsed.read_yaml(path, self.owner)
                    if not isinstance(data, dict):
                        raise InputError(str(path), "-", f"is a {type(data).__name__}; allowed: a mapping of variables")
                    self._data[path] = _var_names(str(path), "", data)
                layers.append((self._data[path], str(path)))
            self._layers[folder, name] = layers  # stored once whole: a read that failed is not half-kept
        return layers


def host_vars(tree: Tree, cache: VarsCache, host: str) -> tuple[dict, dict[str, str], dict[str, str | None]]:
    """A host's variables in Ansible precedence.

    Returns:
        (vars, key -> file that set it, key -> group that set it or None for the host itself).
    """
    groups = tree.groups_of(host)
    layers: list[tuple[dict, str, str | None]] = []
    layers += [(tree.groups[g].vars, str(tree.path), g) for g in groups if g in tree.groups]
    layers += [(d, f, g) for g in groups for d, f in cache.layers("group_vars", g)]
    layers.append((tree.inline.get(host, {}), str(tree.path), None))
    layers += [(d, f, None) for d, f in cache.layers("host_vars", host)]
    merged: dict = {}
    sources: dict[str, str] = {}
    scopes: dict[str, str | None] = {}
    for data, src, scope in layers:
        for key, value in data.items():
            merged[key], sources[key], scopes[key] = value, src, scope
    return merged, sources, scopes
