"""Parsed inventory files kept between runs, by their content: a large inventory's YAML is parsed
once, not on every ``plan``, ``render`` or ``rollout``.

At 10,000 nodes (13,776 vars files of about 1 KB) parsing is 3.8 of a load's 8 CPU seconds; reading
the bytes is 0.2 s, hashing them 0.02 s and taking a file's data from the cache 0.02 ms. So each
file is still read (every check of :func:`tuning.model.yamlfile.read_bytes` holds: its kind, its
owner), its bytes hashed (BLAKE2b, 128 bits), and the parse skipped when the cache holds that
content. The key is the content itself: an edited file is a new key, a file moved or renamed keeps
its entry, and no clock or mtime is trusted. Everything after the parse (variable names, the model,
the lint) runs on every load as before.

The cache is one file per inventory folder, ``$XDG_CACHE_HOME/fabtune/parsed-<hash of the folder's
real path>.marshal`` (``~/.cache`` without ``XDG_CACHE_HOME``), written with :mod:`marshal` (plain
data only: dicts, lists, strings, numbers, booleans, null; no code is ever loaded from it) after a
load that parsed something new, holding only the entries that load used. Its header names the
fabtune parser (a hash of :mod:`tuning.model.yamlfile`'s source), PyYAML's version and loader and
Python's version: a cache written by another parser is ignored whole (and replaced). A cache file or
folder not owned by the user running fabtune, writable by others, a link or not a regular file is
ignored and never replaced. A cache that cannot be read or written costs only the parse.

Only an inventory of at least :data:`MIN_FILES` vars files uses it (below, the parse is under
0.1 s); ``FABTUNE_PARSE_CACHE=off`` turns it off.
"""

from __future__ import annotations

import hashlib
import logging
import marshal
import os
import stat
import sys
from pathlib import Path
from typing import Any

import yaml

from tuning.model import yamlfile
from tuning.outfile import write_atomic

log = logging.getLogger(__name__)

#: the fewest vars files (group_vars + host_vars entries) an inventory needs for the cache to be used
MIN_FILES = 256
#: the environment variable that turns the cache off (value ``off``)
ENV = "FABTUNE_PARSE_CACHE"
#: a cache file larger than this is ignored (an inventory's parsed data is about its YAML's size)
MAX_BYTES = 1 << 30


def cache_folder() -> Path:
    """``$XDG_CACHE_HOME/fabtune``, or ``~/.cache/fabtune`` (the XDG base directory default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fabtune"


def _parser_id() -> tuple:
    """What the cached data depends on besides the file's bytes: a change to any of them is a
    different parser, whose cache is ignored."""
    source = hashlib.blake2b(Path(yamlfile.__file__).read_bytes(), digest_size=16).hexdigest()
    return ("fabtune-parse-cache", 1, source, yaml.__version__, yamlfile._BASE.__name__, sys.version_info[:2])


class ParseCache:
    """The parsed data of an inventory's YAML files by content, for one load.

    ``enabled`` False: :meth:`read_yaml` is :func:`tuning.model.yamlfile.read_yaml` and nothing is
    read or written.
    """

    def __init__(self, inv: Path, enabled: bool):
        self.enabled = enabled and os.environ.get(ENV, "").lower() != "off"
        real = os.path.realpath(inv).encode(errors="surrogateescape")
        self.path = cache_folder() / f"parsed-{hashlib.blake2b(real, digest_size=8).hexdigest()}.marshal"
        self.untrusted = False  # a cache file there that fabtune does not trust: never read, never replaced
        self.old: dict[bytes, bytes] = self._read() if self.enabled else {}
        self.used: dict[bytes, bytes] = {}

    def read_yaml(self, path: Path, owner: int | None) -> Any:
        """The data of one YAML file, as :func:`tuning.model.yamlfile.read_yaml` gives it (same
        data, same errors), its parse taken from the cache when its content is there.

        Raises:
            InputError: as :func:`tuning.model.yamlfile.read_yaml`.
        """
        raw = yamlfile.read_bytes(path, owner)
        if not self.enabled:
            return yamlfile.parse_yaml(raw, path)
        key = hashlib.blake2b(raw, digest_size=16).digest()
        blob = self.used.get(key) or self.old.get(key)
        if blob is not None:
            self.used[key] = blob
            return marshal.loads(blob)  # a fresh copy per file: no two files share mutable data
        data = yamlfile.parse_yaml(raw, path)
        try:
            self.used[key] = marshal.dumps(data)
        except ValueError:  # not plain data (a YAML timestamp): parsed every time
            pass
        return data

    def save(self) -> None:
        """Write the entries this load used, when they differ from those read (nothing new:
        nothing written). A failure is logged (debug) and otherwise ignored."""
        if not self.enabled or self.untrusted or self.used.keys() == self.old.keys():
            return
        try:
            folder = self.path.parent
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            if _refusal(folder, stat.S_ISDIR) is None:
                write_atomic(self.path, marshal.dumps((_parser_id(), self.used)), 0o600)
        except (OSError, ValueError) as e:
            log.debug("parse cache %s not written: %s", self.path, e)

    def _read(self) -> dict[bytes, bytes]:
        """The cache file's entries; {} when it is missing, another parser's, unsafe or broken."""
        try:
            if not os.path.lexists(self.path):
                return {}
            self.untrusted = bool(_refusal(self.path.parent, stat.S_ISDIR) or _refusal(self.path, stat.S_ISREG))
            if self.untrusted:
                return {}
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                self.untrusted = bool(_refusal_of(os.fstat(fd), stat.S_ISREG))
                if self.untrusted:
                    return {}
                with os.fdopen(os.dup(fd), "rb") as f:
                    header, entries = marshal.load(f)
            finally:
                os.close(fd)
        except (OSError, ValueError, EOFError, TypeError) as e:
            log.debug("parse cache %s not read: %s", self.path, e)
            return {}
        if header != _parser_id() or not isinstance(entries, dict):
            return {}
        return {k: v for k, v in entries.items() if isinstance(k, bytes) and isinstance(v, bytes)}


def _refusal(path: Path, kind: Any) -> str | None:
    """Why the cache will not trust ``path`` (None: it may): missing, a link, another kind."""
    try:
        return _refusal_of(os.lstat(path), kind)
    except OSError as e:
        return e.strerror or "cannot be examined"


def _refusal_of(st: os.stat_result, kind: Any) -> str | None:
    if not kind(st.st_mode):
        return "not the expected kind (a link, a special file)"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not {os.geteuid()}"
    if st.st_mode & 0o022:
        return "writable by others"
    if st.st_size > MAX_BYTES and stat.S_ISREG(st.st_mode):
        return "too large"
    return None
