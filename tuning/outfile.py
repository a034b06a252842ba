"""Files fabtune writes outside its own state folders (reports, rendered configurations, logs):
never through a symbolic link, never onto a device, FIFO, socket or directory.

A report path is checked twice: when the flag is parsed (before a run starts, so a long rollout
never ends unable to write its verdict: :func:`tuning.cli_args.file_arg`) and again just before the
rename that puts the file in place. As root, ``--report-json /dev/null`` written by rename would
turn the machine's ``/dev/null`` into a regular file; ``--junit`` onto a link would replace the link.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

#: what an existing entry is, for the refusal (lstat mode test -> words)
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def refusal(path: Path | str) -> str | None:
    """Why fabtune will not write ``path`` (None: it is missing or a regular file).

    The entry itself is examined (``lstat``), never what a link points to: a symbolic link is
    refused whatever its target, a special file or a directory by its kind.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot be examined ({e.strerror or e})"
    if stat.S_ISREG(st.st_mode):
        return None
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link (fabtune writes no file through a link); give the file's own path"
    kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
    return f"is {kind}, not a regular file; give a file name"


def append(path: Path | str, text: str, mode: int = 0o644) -> None:
    """Append ``text`` to ``path`` (created when missing), never through a link
    (``O_NOFOLLOW``) and only to a regular file (a log: the drain log of ``fabtune burnin``).

    Raises:
        OSError: the folder is not writable, or ``path`` is refused (``strerror`` says why).
    """
    why = refusal(path)
    if why:
        raise OSError(errno.EINVAL, why, str(path))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, mode)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for a FIFO or a device meanwhile
            raise OSError(errno.EINVAL, "is not a regular file; give a file name", str(path))
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def write_atomic(path: Path | str, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` through a new temporary file in the same folder (created with
    ``O_EXCL | O_NOFOLLOW``) and a rename, so a reader (a CI step, node_exporter) never sees half a
    file, and only over a regular file or nothing (:func:`refusal`, checked before and after the
    temporary file is written).

    Raises:
        OSError: the folder is not writable, or ``path`` is refused (``strerror`` says why,
            ``filename`` is ``path``); nothing at ``path`` was changed.
    """
    path = Path(path)
    why = refusal(path)
    if why:
        raise OSError(errno.EINVAL, why, str(path))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    placed = False
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        try:  # os.write on the descriptor: no file object (a render writes 13,772 files)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        why = refusal(path)  # swapped for a link or a device meanwhile: leave it alone
        if why:
            raise OSError(errno.EINVAL, why, str(path))
        os.replace(tmp, path)
        placed = True
    finally:
        if not placed:
            try:
                os.unlink(tmp)
            except FileNotFoundError:  # the open itself failed
                pass
