"""The perftest servers a verification starts on a node, and their end.

A perftest server waits for its client forever. When the client failed (no route, a refused
connection, a timeout), the server would stay on the node holding its TCP port: an orphan an
operator finds later, and a port that a later round's server on that node cannot listen on
(``port_in_use``). Closing the SSH channel does not end it (no pty: no SIGHUP). So each server is
started as ``echo @@fabtune-pid $$; exec <server>`` (the shell becomes the server: one process,
its pid known), and :func:`end_server` kills a server still running once its client is done,
checking first that the pid is still that server (``/proc/PID/cmdline`` holds the tool and its
``-p PORT``).
"""

from __future__ import annotations

import re

from tuning.errors import TuningError
from tuning.transport.base import CommandResult, Host, Running

#: the first line of a server started by :func:`start_server`: its pid
PID_MARK = "@@fabtune-pid "
#: seconds a server may take to end by itself once its client is done (it prints its result
#: right after the client's; one that waits longer has no client coming)
GRACE_S = 3.0


def start_server(host: Host, command: str) -> Running:
    """Start perftest server ``command`` (``ib_write_bw -d mlx5_0 ... -p 18515``) on ``host``,
    unprivileged, so that :func:`end_server` can end it (module docstring)."""
    return host.start(f"echo {PID_MARK}$$; exec {command}", privileged=False)


def server_pid(output: str) -> int | None:
    """The pid :func:`start_server`'s first line names, or None."""
    m = re.search(rf"^{re.escape(PID_MARK)}(\d+)$", output, re.M)
    return int(m.group(1)) if m else None


def end_server(host: Host, srv: Running, tool: str, port: int, grace_s: float = GRACE_S) -> CommandResult | None:
    """The server's result when it ends within ``grace_s``; else None, after killing it (SIGTERM)
    when ``/proc/PID/cmdline`` still shows ``tool`` with ``-p port`` (a pid reused meanwhile is
    left alone). Never raises: a server that could not be ended is no result of the test."""
    try:
        return srv.wait(timeout=grace_s)
    except TuningError:
        pass
    pid = server_pid(srv.output())
    if pid is None:
        return None
    check = (f"c=$(tr '\\0' ' ' < /proc/{pid}/cmdline 2>/dev/null) && case \"$c\" in "
             f"*{tool}*' -p {port} '*|*{tool}*' -p {port}') kill {pid} ;; esac; true")
    try:
        host.run(check, privileged=False, timeout=10)
    except TuningError:
        pass
    return None
