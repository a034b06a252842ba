"""File descriptors for a run's connections, named before the first connect (issue 24).

A run keeps one session per device open from collect to its last restore (the journal's restore
path reuses it), and each session holds one socket (measured on the lab: 1 file descriptor per
node or switch session, 0 once closed). Under a low ``ulimit -n`` the run would fail part way
with "Too many open files", some devices connected and some not. So before connecting:
the soft ``RLIMIT_NOFILE`` is raised toward the hard limit when the run needs more (what a
process may do unprivileged, ``setrlimit(2)``), and a hard limit too low for the run is refused
in one line naming the numbers, before anything is contacted.
"""

from __future__ import annotations

import os
import resource

from tuning.errors import SetupError

#: file descriptors a run needs besides its sessions: the interpreter and its libraries, the
#: journal, the lock, report files, a perftest server's pipes per verification worker
MARGIN = 64


def open_fds() -> int:
    """File descriptors this process holds now (``/proc/self/fd``; 0 where there is none)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def ensure_fds(sessions: int, what: str = "device") -> int:
    """Make room for ``sessions`` more open sessions (one file descriptor each) plus :data:`MARGIN`.

    Args:
        sessions: how many sessions the run may hold at once (its devices, and the nodes it opens
            for verification).  what: the word for one session in the message (``device``).

    Returns:
        The soft limit now in force (raised when it was too low and the hard limit allows it).

    Raises:
        SetupError: the hard limit is below what the run needs (exit 2, nothing contacted), naming
            the need, both limits and the fix (``ulimit -n N`` or a narrower ``--limit``).
    """
    need = open_fds() + sessions + MARGIN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or need <= soft:
        return soft
    if hard != resource.RLIM_INFINITY and need > hard:
        raise SetupError(f"this run holds one connection per {what} ({sessions}) and needs {need} open files, "
                         f"but the file-descriptor limit is {soft} (hard limit {hard}); raise it (`ulimit -n {need}` "
                         f"as a user the hard limit allows, or limits.conf nofile) or narrow the run with --limit; "
                         "nothing was contacted")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return need
