"""Read one inventory YAML file safely: UTF-8 only, no duplicate keys, bounded nesting, no
recursive aliases, a bounded expanded size. Every problem is one InputError naming the file and
the key (or line), never a traceback.

Ansible reads the same files with its own loader, which keeps the last of two duplicate keys and
only warns (``DUPLICATE_YAML_DICT_KEY``); fabtune refuses them, since the kept value is a guess.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path
from typing import Any

import yaml

from tuning.errors import InputError

#: nesting deeper than this is refused (an inventory needs about 6; Python's stack needs bounds)
MAX_DEPTH = 64
#: the most nodes a file may expand to once aliases are followed ("billion laughs")
MAX_NODES = 200_000

_BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _DuplicateKey(Exception):
    def __init__(self, key: str, line: int):
        super().__init__(key)
        self.key, self.line = key, line


class _Loader(_BASE):  # type: ignore[misc,valid-type]
    """PyYAML's safe loader (C parser when present) that refuses a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                dup = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: SafeConstructor names it below
                continue
            if dup:
                raise _DuplicateKey(str(key), key_node.start_mark.line + 1)
        return super().construct_mapping(node, deep=deep)


def _kids(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair if not isinstance(n, yaml.ScalarNode)]
    if isinstance(node, yaml.SequenceNode):
        return [n for n in node.value if not isinstance(n, yaml.ScalarNode)]
    return []


def _tagged(key: str):
    """Ansible's ``!vault`` / ``!unsafe`` scalars, kept as ``ansible-inventory --list`` prints them
    (``{"__ansible_vault": ciphertext}``): a site's secrets do not stop the load, and a fabtune key
    that holds one is refused by the model (not a plain value)."""
    def construct(loader: yaml.BaseLoader, node: yaml.Node) -> dict:
        return {key: loader.construct_scalar(node)}  # a non-scalar raises ConstructorError
    return construct


_Loader.add_constructor("!vault", _tagged("__ansible_vault"))
_Loader.add_constructor("!unsafe", _tagged("__ansible_unsafe"))

#: a plain scalar's resolved tag by its text (PyYAML's resolver, a regex scan per scalar, depends on
#: nothing else in a safe loader); bounded, so a huge inventory costs at most this many entries
_RESOLVED: dict[str, str] = {}
_RESOLVED_MAX = 1 << 16


#: the tag ``resolve`` gives a node of each kind that no implicit resolver reads (no path resolvers)
_DEFAULT_TAGS = {yaml.ScalarNode: _BASE.DEFAULT_SCALAR_TAG, yaml.SequenceNode: _BASE.DEFAULT_SEQUENCE_TAG,
                 yaml.MappingNode: _BASE.DEFAULT_MAPPING_TAG}


def _resolve(self: _Loader, kind: type, value: str, implicit: tuple[bool, bool]) -> str | None:
    """PyYAML's ``resolve`` (called by the C composer for every node), remembered by text for plain
    scalars: the same tag, one dict look-up instead of the implicit resolvers' regexes. Without
    path resolvers (fabtune adds none) a mapping, a sequence or a quoted scalar gets its kind's
    default tag, as ``resolve`` gives it, without the call."""
    if self.yaml_path_resolvers:
        return _BASE.resolve(self, kind, value, implicit)
    if kind is not yaml.ScalarNode or not implicit[0]:
        return _DEFAULT_TAGS.get(kind)
    resolvers = self.yaml_implicit_resolvers
    if value[:1] not in resolvers and None not in resolvers:  # no implicit resolver for its first character
        return _BASE.DEFAULT_SCALAR_TAG  # (``swp1``, ``mlx5_0``): resolve's answer; the cache keeps its room
    tag = _RESOLVED.get(value)
    if tag is None:
        tag = _BASE.resolve(self, kind, value, implicit)
        if len(_RESOLVED) < _RESOLVED_MAX:
            _RESOLVED[value] = tag
    return tag


_Loader.resolve = _resolve  # type: ignore[method-assign]

_TAG = "tag:yaml.org,2002:"
_STR, _MAP, _SEQ = _TAG + "str", _TAG + "map", _TAG + "seq"
#: scalar tags the plain constructor builds (with PyYAML's own functions); any other tag, a merge key
#: (``<<``), a ``=`` key or a non-scalar key goes through PyYAML's full constructor
_PLAIN_SCALARS = {_TAG + t: _Loader.yaml_constructors[_TAG + t] for t in ("int", "float", "bool", "null")}
_ODD_KEYS = {_TAG + "merge", _TAG + "value"}


class _NotPlain(Exception):
    """The document needs PyYAML's full constructor (or holds an error that path names)."""


class _Plain:
    """Builds a document of plain mappings, sequences and scalars (str, int, float, bool, null;
    an alias's data shared as PyYAML shares it) in one pass that also measures what
    :func:`_check_graph` bounds: the same height and expanded size, node by node. Anything else
    raises :class:`_NotPlain` (another tag, a merge, ``=`` or non-scalar key, a key given twice,
    a bound crossed, a scalar PyYAML's function refuses): :func:`read_yaml` then takes the full
    path, which refuses or builds the document exactly as before.
    """

    def __init__(self, loader: _Loader):
        self.loader = loader
        self.memo: dict[int, tuple[Any, int, int]] = {}  # id(collection node) -> (data, height, size)

    def data(self, root: yaml.Node) -> Any:
        try:
            return self.build(root, 1)[0]
        except Exception:  # noqa: BLE001 (every problem is named by the full path, which runs next)
            raise _NotPlain from None

    def build(self, node: yaml.Node, depth: int) -> tuple[Any, int, int]:
        """(data, height, expanded size) of ``node``, ``depth`` levels below the root."""
        if node.__class__ is yaml.ScalarNode:
            if node.tag == _STR:
                return node.value, 1, 1
            return _PLAIN_SCALARS[node.tag](self.loader, node), 1, 1  # KeyError: not plain
        if id(node) in self.memo:
            return self.memo[id(node)]
        if depth > MAX_DEPTH:  # also ends a recursive alias
            raise _NotPlain
        if node.tag == _MAP and node.__class__ is yaml.MappingNode:
            data, height, size = self.mapping(node, depth)
        elif node.tag == _SEQ and node.__class__ is yaml.SequenceNode:
            built = [self.build(item, depth + 1) for item in node.value]
            data = [d for d, _, _ in built]
            height, size = max((h for _, h, _ in built), default=1), 1 + sum(n for _, _, n in built)
        else:
            raise _NotPlain
        if height + 1 > MAX_DEPTH or size > MAX_NODES:
            raise _NotPlain
        self.memo[id(node)] = data, height + 1, size
        return self.memo[id(node)]

    def mapping(self, node: yaml.MappingNode, depth: int) -> tuple[dict, int, int]:
        """(data, height of the highest value, expanded size) of a mapping node."""
        data: dict = {}
        height, size = 1, 1
        for key_node, value_node in node.value:
            if key_node.__class__ is not yaml.ScalarNode or key_node.tag in _ODD_KEYS:
                raise _NotPlain
            key = key_node.value if key_node.tag == _STR else self.build(key_node, depth + 1)[0]
            if key in data:
                raise _NotPlain
            if value_node.tag == _STR and value_node.__class__ is yaml.ScalarNode:  # most values: no call
                data[key] = value_node.value
                size += 2
                continue
            data[key], h, n = self.build(value_node, depth + 1)
            height, size = max(height, h), size + 1 + n
        return data, height, size


def _check_graph(root: yaml.Node, path: Path) -> None:
    """Refuse recursive aliases, nesting deeper than MAX_DEPTH and more than MAX_NODES expanded nodes.

    One pass over the node graph (each node once, aliases shared), iterative so that depth
    cannot exhaust Python's stack; scalars count as leaves of depth 1 and size 1.
    """
    depth: dict[int, int] = {}
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        kids = _kids(node)
        if done:
            on_path.discard(id(node))
            depth[id(node)] = 1 + max((depth[id(k)] for k in kids), default=1)
            size[id(node)] = 1 + len(node.value) * (2 if isinstance(node, yaml.MappingNode) else 1) - len(kids) \
                + sum(size[id(k)] for k in kids)
            if depth[id(node)] > MAX_DEPTH:
                raise InputError(str(path), f"line {node.start_mark.line + 1}",
                                 f"nested deeper than {MAX_DEPTH} levels; allowed: a plain inventory")
            if size[id(node)] > MAX_NODES:
                raise InputError(str(path), f"line {node.start_mark.line + 1}",
                                 f"expands to more than {MAX_NODES} values through aliases")
            continue
        if id(node) in depth:
            continue
        on_path.add(id(node))
        stack.append((node, True))
        for kid in kids:
            if id(kid) in on_path:
                raise InputError(str(path), f"line {kid.start_mark.line + 1}",
                                 "a YAML alias includes itself (recursive anchor); allowed: plain values")
            if id(kid) not in depth:
                stack.append((kid, False))


def _kind(mode: int) -> str | None:
    """What a non-regular file is (None for a regular file)."""
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    return None if stat.S_ISREG(mode) else next((w for f, w in kinds if f(mode)), "not a regular file")


def _may_read(st: os.stat_result, uid: int) -> bool:
    """Whether user ``uid`` may read a file of ``st`` by its mode bits (root always; the owner by
    u+r; a member of its group, primary or supplementary, by g+r; anyone else by o+r)."""
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IRUSR)
    try:
        user = pwd.getpwuid(uid)
        member = user.pw_gid == st.st_gid or user.pw_name in grp.getgrgid(st.st_gid).gr_mem
    except KeyError:  # a uid or gid with no name: no membership known
        member = False
    return bool(st.st_mode & (stat.S_IRGRP if member else stat.S_IROTH))


def read_bytes(path: Path, owner: int | None = None) -> bytes:
    """The bytes of a regular file (symlinks followed), never blocking: a FIFO, socket or device
    is refused before it is opened (a FIFO would wait for a writer forever), and again on the
    opened descriptor (``O_NONBLOCK``) in case the path changed in between.

    ``owner``: the uid the file is read for (an inventory's owner). When fabtune runs as another
    user (root on someone's inventory), a file that user could not read is refused: a link planted
    in an inventory (``group_vars/all.yml -> /etc/shadow``) must not make fabtune read for them
    what they cannot (the mode bits of the file itself are judged, not its folders).

    Raises:
        InputError: not a regular file, unreadable, or not readable by ``owner``.
    """
    try:
        kind = _kind(os.stat(path).st_mode)
        if kind is None:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _O_NOCTTY)
            try:
                st = os.fstat(fd)
                kind = _kind(st.st_mode)
                if kind is None and owner is not None and owner != os.geteuid() and not _may_read(st, owner):
                    raise InputError(str(path), "-", f"uid {owner}, who owns the inventory, may not read it "
                                     f"(owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}); fabtune reads "
                                     "an inventory's files only as its owner could (a link to another user's file "
                                     "is refused)")
                if kind is None:
                    return _read_all(fd, st.st_size)
            finally:
                os.close(fd)
    except OSError as e:
        raise InputError(str(path), "-", f"cannot read: {e.strerror}") from None
    raise InputError(str(path), "-", f"is {kind}; allowed: a regular YAML file")


_O_NOCTTY = getattr(os, "O_NOCTTY", 0)


def _read_all(fd: int, size: int) -> bytes:
    """Every byte of an open regular file, to its end (it may have grown since ``fstat`` gave
    ``size``), by ``os.read`` on the descriptor: no file object per file (13,772 files a load)."""
    chunks = [os.read(fd, max(size, 0) + 1)]
    while chunks[-1]:
        chunks.append(os.read(fd, 1 << 16))
    return b"".join(chunks)


def read_yaml(path: Path, owner: int | None = None) -> Any:
    """The data of one YAML (or JSON) file; an empty file is ``{}``. ``owner``: as :func:`read_bytes`.

    Raises:
        InputError: unreadable, not a regular file, not UTF-8, not YAML, a duplicate key, too deep, recursive.
    """
    return parse_yaml(read_bytes(path, owner), path)


def parse_yaml(raw: bytes, path: Path) -> Any:
    """The data of a YAML (or JSON) document's bytes, read from ``path`` (named in errors): as
    :func:`read_yaml`, which reads the file first; an empty document is ``{}``.

    Raises:
        InputError: not UTF-8, not YAML, a duplicate key, too deep, recursive.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(str(path), f"byte {e.start}", "not UTF-8 text; allowed: a UTF-8 YAML file") from None
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return {}
        try:
            return _Plain(loader).data(node)
        except _NotPlain:
            pass
        _check_graph(node, path)
        return loader.construct_document(node)
    except _DuplicateKey as e:
        raise InputError(str(path), e.key, f"key given twice (line {e.line}); allowed: each key once") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "yaml"
        problem = " ".join(str(getattr(e, "problem", None) or e).split())
        raise InputError(str(path), where, f"not valid YAML: {problem}") from None
    except RecursionError:
        raise InputError(str(path), "yaml", f"nested too deeply; allowed: up to {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()
