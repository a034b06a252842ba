"""Facts about processes on this host, stdlib only: the run lock (:mod:`tuning.rollout.lock`)
and the lab's perftest stand-ins (run with ``python -S``, no site-packages) share them."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` exists on this host (a zombie counts as dead)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed child not yet reaped by its parent still answers kill(0)
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def readable(fds: list, timeout_s: float) -> list:
    """Those of ``fds`` (file descriptors or objects with ``fileno()``) that are readable or at EOF
    within ``timeout_s`` seconds (0: do not wait), in the order given.

    ``poll``, not ``select``: a process holding more than 1,024 descriptors (a 256-node lab's
    daemon, a controller of a large fleet) gets any numbered past FD_SETSIZE refused by ``select``
    ("filedescriptor out of range in select()").
    """
    import select

    waiter = select.poll()
    by_fd = {}
    for f in fds:
        fd = f if isinstance(f, int) else f.fileno()
        by_fd[fd] = f
        waiter.register(fd, select.POLLIN)
    ready = {fd for fd, _ in waiter.poll(max(0, int(timeout_s * 1000)))}
    return [f for fd, f in by_fd.items() if fd in ready]
