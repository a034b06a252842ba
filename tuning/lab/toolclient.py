"""The wrapper side of :mod:`tuning.lab.toolserver`: ask the lab's preloaded server to run a stand-in.

``<state>/bin/<tool>`` is ``python -S`` with this module: it imports only the built-in modules
``posix``, ``sys`` and ``_socket`` (not even ``os``: with ``stat``, ``posixpath`` and
``_collections_abc`` it was 3 ms of a call's ~20 ms of CPU; no ``pathlib``, ``re`` or ``json``),
sends the call and waits for the exit status. Where no server answers for this
process's credentials (no lab daemon, another user, different capabilities) it runs the
stand-in in this interpreter, as before: the result is the same, only slower.
"""

# No `from __future__ import annotations` and no `os`: every import is paid once per tool call.
import posix
import sys

import _socket

#: capability bit of CAP_NET_ADMIN (linux/capability.h)
CAP_NET_ADMIN = 12


def is_privileged() -> bool:
    """Whether this process holds CAP_NET_ADMIN (root, or root of the lab's user namespace).

    The stand-ins use it where the real tool needs root (netlink DCB sets, configfs, ``ip link set``).
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_NET_ADMIN & 1)
    except OSError:
        pass
    return posix.geteuid() == 0


def _fsencode(text: str) -> bytes:
    """``os.fsencode`` (its very encoding and error handler), without importing ``os``."""
    return text.encode(sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())


def _request(tool: str, argv: list[str]) -> bytes:
    umask = posix.umask(0)
    posix.umask(umask)
    fields = [tool.encode(), posix.getcwdb(), b"%o" % umask, b"%d" % len(argv)]
    fields += [_fsencode(a) for a in argv]
    fields += [k + b"=" + v for k, v in posix.environ.items()]  # posix.environ: bytes -> bytes
    return b"\0".join(fields)


def ask(tool: str, argv: list[str], tools_dir: str, relay: bool = False) -> int | None:
    """The exit status of ``tool argv`` run by the server in ``tools_dir``; None when it did not
    run it (refused, absent, or the request could not be sent): the caller runs it then.

    ``tools_dir`` is ``<state>/run/tools``, written into the wrapper by the lab controller. With
    ``relay`` (the perftest stand-ins) this process also relays the tool's requests to its node's
    sudo socket (:func:`_relay`): that socket admits only descendants of the node's shells, which
    this wrapper is and the served child is not.
    """
    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    except OSError:
        return None
    mine = theirs = None
    try:
        try:
            sock.connect(f"{tools_dir}/{'root' if is_privileged() else 'user'}.sock")
            fds = [0, 1, 2]
            if relay:
                mine, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
                fds.append(theirs.fileno())
            packed = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
            sock.sendmsg([_request(tool, argv)], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, packed)])
        except OSError:
            return None  # nothing was sent, nothing ran
        finally:
            if theirs is not None:
                theirs.close()
        reply = _relay(sock, mine) if mine is not None else _recv(sock)
    finally:
        sock.close()
        if mine is not None:
            mine.close()
    if reply == b"R":
        return None
    if reply.startswith(b"X"):
        return int(reply[1:])
    print(f"{tool}: the lab's tool server went away while it ran (lab stopped or reset)", file=sys.stderr)
    return 1


def _recv(sock) -> bytes:
    try:
        return sock.recv(32)
    except OSError:
        return b""


def _relay(sock, mine) -> bytes:
    """Wait for the server's reply on ``sock`` while passing each ``SOCKET\0REQUEST\n`` line the
    tool writes on ``mine`` to that unix socket (a node's sudo socket), and its reply line back."""
    import select

    watch = [sock, mine]
    while True:
        ready, _, _ = select.select(watch, [], [])
        if sock in ready:
            return _recv(sock)
        line = _line(mine)
        if not line:
            watch.remove(mine)  # the tool closed its end: only the exit status is left
            continue
        path, _, request = line.partition(b"\0")
        answer = b""
        try:
            lab = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)  # (_socket's has no `with`)
            try:
                lab.connect(path.decode())
                lab.sendall(request)
                answer = _line(lab)
            finally:
                lab.close()
        except OSError:
            pass
        try:
            mine.sendall(answer or b"\n")
        except OSError:
            pass


def _line(sock) -> bytes:
    out = b""
    while not out.endswith(b"\n"):
        try:
            chunk = sock.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out


def run(tool: str, tools_dir: str, relay: bool = False) -> int:
    """The wrapper's body: the stand-in's exit status, served or run here."""
    rc = ask(tool, sys.argv[1:], tools_dir, relay)
    if rc is None:
        from tuning.lab.tools import main
        rc = main(tool, sys.argv[1:])
    return rc
