"""Read-only sysfs attributes written once per lab and hard-linked into every node's sysroot.

A DGX-class lab node's sysroot holds about 14,300 entries, and about 9,600 of them are kernel
attributes that are read-only on a real node (``gids/<N>`` and the ``gid_attrs`` of the empty GID
entries, the cpuidle state descriptions and counters, the cpufreq policy's read-only files, the CPU
topology) and byte-identical on every node of the same shape. A 256-node lab built them 256 times:
3.7 million inodes and a 4 KiB page or block each, twice with the power-on copy (issue 24: tmpfs
caps a machine of 24 GiB at about 3 million inodes). Within :func:`sharing` (``lab up``'s build of
all node trees), :func:`put` and :func:`put_symlink` write an attribute the first time its path and
text are seen and hard-link the later nodes' to that first inode; outside it (a node's reboot, a
test's single sysroot) they write as before.

What keeps a shared inode from carrying one node's write to every node:

- only attributes the kernel refuses to write go through here; the lab's ``tee`` refuses them with
  the kernel's ``Permission denied`` (root too: kernfs answers EACCES for an attribute without a
  store method), ``tuning/lab/tools/tee.sh``;
- the lab's own code replaces a shared entry (unlink, then write) and never writes one in place
  (:func:`tuning.lab.sysroot.set_gid_attrs`);
- ``cp -a`` keeps the links in the power-on copy, and a reset copies a changed path back as a file
  of its own (:mod:`tuning.lab.power_on`).

A root shell that writes such a file by redirection (``sudo bash -c 'echo x > gids/3'``) is not
refused (the lab cannot refuse a redirect; ``docs/lab.md``) and would reach every node.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

#: (path below the sysroot, text or link target) -> the first node's entry, while :func:`sharing`
_FIRST: dict[tuple[str, str], str] | None = None


@contextmanager
def sharing() -> Iterator[None]:
    """Within it, :func:`put` / :func:`put_symlink` of the same path and text in two sysroots make
    one inode (the lab's ``prepare`` builds every node inside one)."""
    global _FIRST
    before, _FIRST = _FIRST, {}
    try:
        yield
    finally:
        _FIRST = before


def _linked(root: Path, rel: str, text: str) -> bool:
    """Hard-link ``root/rel`` to the first entry of (``rel``, ``text``); False when there is none
    yet (it is recorded: the caller writes it)."""
    if _FIRST is None:
        return False
    key = (rel, text)
    first = _FIRST.get(key)
    path = root / rel
    if first is None:
        _FIRST[key] = str(path)
        return False
    os.link(first, path, follow_symlinks=False)
    return True


def put(root: Path, rel: str, text: str) -> None:
    """Write the read-only attribute ``root/rel`` as ``text`` + newline (its folder exists), or link
    it to the same attribute of an earlier node (:func:`sharing`)."""
    if not _linked(root, rel, text):
        (root / rel).write_text(text + "\n")


def put_symlink(root: Path, rel: str, target: str) -> None:
    """Make ``root/rel`` a symlink to ``target`` (its folder exists), or a hard link of an earlier
    node's same symlink (:func:`sharing`)."""
    if not _linked(root, rel, "->" + target):
        os.symlink(target, root / rel)
