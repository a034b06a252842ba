"""A fork server for the lab's vendor-tool stand-ins: a preloaded interpreter per credential class.

Every call of a stand-in (``mlnx_qos``, ``cma_roce_tos``, ``ethtool``, ...) used to start an
interpreter and import the stand-in's modules: about 35 ms of CPU, of which the tool's own work
is 2. A rollout on the 4-node lab makes about 600 such calls, and the stand-ins were the largest
share of the test suite's CPU. The daemon now starts two servers per lab (``python -S``, every
stand-in module imported once):

- ``run/tools/root.sock``: runs as the daemon (root, or root of the lab's user namespace), for
  the commands that ``sudo`` runs;
- ``run/tools/user.sock``: runs exactly as a node shell (:func:`tuning.lab.privileges.unprivileged`:
  the lab user, or no capability at all in a user namespace).

A stand-in's wrapper (:mod:`tuning.lab.toolclient`) connects to the one for its privilege and
passes its argv, environment, working folder, umask and stdin/stdout/stderr (SCM_RIGHTS). The
server forks a child that takes all of them and runs the stand-in exactly as the wrapper would
have, in its own process group, and sends back the exit status. Nothing about privilege
changes: a server serves only a caller whose uid, gid, groups, capability sets and
``no_new_privs`` (``/proc/PID/status``) equal its own, and answers ``R`` to any other, which then
runs the stand-in itself. When the wrapper goes away (killed, its SSH channel closed) the server
kills the child's process group. The perftest stand-ins ask their node's sudo socket to count
their traffic, and that socket admits only descendants of the node's shells: their wrapper
(:data:`tuning.lab.tools.RELAYED`) passes a fourth descriptor, fd 3 in the child
(``$FABTUNE_LAB_RELAY_FD``), and carries those requests itself.

One thread, one ``selectors`` loop, so ``fork`` never copies a lock that another thread holds.
The server exits when the daemon that started it is gone.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import traceback
from pathlib import Path

from tuning.lab import privileges

#: the lines of ``/proc/PID/status`` that make a caller's privileges: served only when all equal the server's
CREDENTIALS = ("Uid:", "Gid:", "Groups:", "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:", "NoNewPrivs:")
MAX_REQUEST = 1 << 20  # bytes: argv and environment of one call
SOCKETS = {"root": "root.sock", "user": "user.sock"}
#: set in a served child whose wrapper relays its lab requests (:func:`tuning.lab.sudo.lab_request`)
RELAY_ENV = "FABTUNE_LAB_RELAY_FD"


def socket_path(state_dir: Path, kind: str) -> Path:
    """``<state>/run/tools/<kind>.sock`` (``kind``: ``root`` or ``user``)."""
    return Path(state_dir) / "run" / "tools" / SOCKETS[kind]


def credentials(pid: int | str) -> list[str]:
    """The privilege lines of ``/proc/PID/status`` (:data:`CREDENTIALS`); ``[]`` when unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return [line for line in f if line.startswith(CREDENTIALS)]
    except OSError:
        return []


# ---- the daemon's side ----------------------------------------------------------------------

def start(state_dir: Path) -> list[subprocess.Popen]:
    """Start both servers of the lab in ``state_dir``; returns their processes (stop with :func:`stop`).

    The daemon binds the sockets (``run/tools/`` is the daemon's, 0755; the sockets 0666: any
    process may connect, the server admits only its own credentials) and passes each listening
    socket to its server, so the unprivileged server needs no write access anywhere.
    """
    folder = socket_path(state_dir, "root").parent
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r}); "
            "from tuning.lab.toolserver import main; sys.exit(main(sys.argv[1:]))")
    procs = []
    for kind in SOCKETS:
        path = socket_path(state_dir, kind)
        path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(str(path))
        path.chmod(0o666)
        listener.listen(128)
        argv = [sys.executable, "-S", "-c", code, str(listener.fileno()), str(os.getpid())]
        creds: dict = {}
        if kind == "user":
            argv, creds = privileges.unprivileged(argv)
        try:
            procs.append(subprocess.Popen(argv, pass_fds=[listener.fileno()], cwd=state_dir, stdin=subprocess.DEVNULL,
                                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
                                          start_new_session=True, **creds))
        finally:
            listener.close()
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    """Stop the servers (SIGTERM, then SIGKILL after 2 s)."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- the server ----------------------------------------------------------------------------

def _preload() -> None:
    """Import every stand-in module (and what they import lazily) once, before the first fork."""
    import importlib

    from tuning.lab.tools import TOOLS
    # random: reseeded in each child; counters: ethtool's statistics, imported on call
    for module in ("random", "tuning.lab.counters", *(target.partition(":")[0] for target in TOOLS.values())):
        importlib.import_module(module)


def main(argv: list[str]) -> int:
    """Serve the listening socket whose fd is ``argv[0]`` until the daemon, pid ``argv[1]`` and this
    process's parent, is gone (a pid, not the parent at start: the daemon may die before that)."""
    listener = socket.socket(fileno=int(argv[0]))
    listener.setblocking(False)
    parent = int(argv[1])
    _preload()
    me = credentials("self")
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, ("accept",))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while os.getppid() == parent:
        for key, _ in sel.select(timeout=1.0):
            kind, *rest = key.data
            if kind == "accept":
                _accept(sel, listener, me)
            elif kind == "request":
                _start(sel, key.fileobj, *rest)
            elif kind == "running":
                _watch(sel, key.fileobj, *rest)
            else:
                _finish(sel, *rest)
    return 0


def _accept(sel: selectors.BaseSelector, listener: socket.socket, me: list[str]) -> None:
    try:
        conn, _ = listener.accept()
    except (BlockingIOError, InterruptedError):
        return
    pid = int.from_bytes(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)[:4], "little")
    allowed = bool(me) and credentials(pid) == me  # else the caller runs the stand-in itself
    sel.register(conn, selectors.EVENT_READ, ("request", allowed))


def _start(sel: selectors.BaseSelector, conn: socket.socket, allowed: bool) -> None:
    """Read the request (so that a refusal is read by a peer whose request was never read, not
    lost to a reset connection), then refuse it or fork its child."""
    sel.unregister(conn)
    try:
        request, fds, _flags, _addr = socket.recv_fds(conn, MAX_REQUEST, 4)
    except OSError:
        conn.close()
        return
    if not allowed or len(fds) not in (3, 4) or not request:
        for fd in fds:
            os.close(fd)
        _send(conn, b"R")  # nothing ran: the caller runs the stand-in itself
        conn.close()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(request, fds)  # never returns
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    sel.register(conn, selectors.EVENT_READ, ("running", pid))
    sel.register(pidfd, selectors.EVENT_READ, ("exited", conn, pid, pidfd))


def _watch(sel: selectors.BaseSelector, conn: socket.socket, pid: int) -> None:
    """The wrapper's end is readable while its tool runs: it went away. Kill the tool."""
    sel.unregister(conn)
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _finish(sel: selectors.BaseSelector, conn: socket.socket, pid: int, pidfd: int) -> None:
    sel.unregister(pidfd)
    os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    _send(conn, b"X%d" % privileges.exit_status(os.waitstatus_to_exitcode(status)))
    try:
        sel.unregister(conn)
    except KeyError:  # _watch did: the wrapper had gone
        pass
    conn.close()


def _send(conn: socket.socket, data: bytes) -> None:
    try:
        conn.send(data)
    except OSError:
        pass


def _child(request: bytes, fds: list[int]) -> None:
    """In the forked child: become the caller's process (stdio, environment, folder, umask) and run the tool."""
    rc = 1
    try:
        os.setpgid(0, 0)
        for target, fd in enumerate(fds):  # stdin, stdout, stderr and the wrapper's relay (fd 3)
            os.dup2(fd, target)
        os.closerange(len(fds), os.sysconf("SC_OPEN_MAX"))
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        fields = request.split(b"\0")
        tool, cwd, umask, argc = fields[0].decode(), fields[1], int(fields[2], 8), int(fields[3])
        args = [os.fsdecode(a) for a in fields[4:4 + argc]]
        os.environ.clear()
        for item in fields[4 + argc:]:
            name, sep, value = item.partition(b"=")
            if sep and name:
                os.environb[name] = value
        os.environ.pop(RELAY_ENV, None)  # never the caller's word: set only when the wrapper relays
        if len(fds) == 4:
            os.environ[RELAY_ENV] = "3"
        os.chdir(cwd)
        os.umask(umask)
        sys.argv = [tool, *args]
        import random
        random.seed()  # a fork shares the server's random state: each call its own, as a new process has
        from tuning.lab.tools import main as run_tool
        rc = run_tool(tool, args)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 (a tool's traceback, as the interpreter would print it)
        traceback.print_exc()
        rc = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        rc = rc or 141
    except OSError:
        pass
    os._exit(rc & 0xFF)
