"""Where a test run's temporary files go: a fresh folder on tmpfs when ``/dev/shm`` has room.

The suite writes some 10^5 small files (lab sysroots of ~14,000 files a node, journals, sockets),
most deleted within seconds. On a journal-less ext4, as CI's disk is, each file creation scans the
inode table for recently deleted inodes: a lab start spent half its time (3.7 s of 7.5) creating
files, and the fast tier ran 235 s on disk against 149 s on tmpfs (2 cores, 2026-12-04). tmpfs also
caps its inodes (half the RAM's pages: 3.1 million on 24 GiB): the folder is taken only with 8 GiB
and 1.5 million inodes free (a passed test's tmp_path is removed at its teardown, pyproject.toml,
and the whole suite peaked at 1.33 million). Elsewhere it is made under ``$TMPDIR`` (else /tmp).

The folder (``ft.XXXXXX``: its short name keeps the lab's unix sockets, ``<state>/run/sudo/node01.sock``,
within AF_UNIX's 108 bytes) is mode 1777, so the lab's unprivileged node shells (``nobody``) reach
their files; it becomes ``$TMPDIR`` of every process of the run and pytest's ``--basetemp``
(``<folder>/t``), and is removed when the run passed (kept, and named, when it failed).
"""

from __future__ import annotations

import os
import shutil
import tempfile

TMPFS = "/dev/shm"
MIN_FREE_BYTES = 8 << 30
MIN_FREE_INODES = 1_500_000


def parent() -> str:
    """``/dev/shm`` when it has :data:`MIN_FREE_BYTES` and :data:`MIN_FREE_INODES` free, else
    ``$TMPDIR`` (else /tmp)."""
    try:
        st = os.statvfs(TMPFS)
        if st.f_bavail * st.f_frsize >= MIN_FREE_BYTES and st.f_favail >= MIN_FREE_INODES:
            return TMPFS
    except OSError:
        pass
    return os.environ.get("TMPDIR") or "/tmp"


def make() -> str:
    """A fresh run folder (module docstring), set as ``$TMPDIR``; returns its path."""
    folder = tempfile.mkdtemp(prefix="ft.", dir=parent())
    os.chmod(folder, 0o1777)
    os.environ["TMPDIR"] = folder
    tempfile.tempdir = None  # tempfile reads $TMPDIR again
    return folder


def done(folder: str, passed: bool) -> str | None:
    """Remove the run folder when the run ``passed``; else keep it and return a line naming it."""
    if passed:
        shutil.rmtree(folder, ignore_errors=True)
        return None
    return f"the run's temporary files are kept in {folder} (remove it when read)"
