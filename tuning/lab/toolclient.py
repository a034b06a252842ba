"""The wrapper side of :mod:`tuning.lab.toolserver`: ask the lab's preloaded server to run a stand-in.

``<state>/bin/<tool>`` is ``python -S`` with this module: it imports only ``os``, ``sys`` and
the built-in ``_socket`` (no ``pathlib``, ``re`` or ``json``: their imports were most of a call's
cost), sends the call and waits for the exit status. Where no server answers for this
process's credentials (no lab daemon, another user, different capabilities) it runs the
stand-in in this interpreter, as before: the result is the same, only slower.
"""

from __future__ import annotations

import os
import sys

import _socket

from tuning.lab.sudo import is_privileged  # stdlib os/sys only: cheap for a wrapper


def _request(tool: str, argv: list[str]) -> bytes:
    umask = os.umask(0)
    os.umask(umask)
    fields = [tool.encode(), os.fsencode(os.getcwd()), b"%o" % umask, b"%d" % len(argv)]
    fields += [os.fsencode(a) for a in argv]
    fields += [k + b"=" + v for k, v in os.environb.items()]
    return b"\0".join(fields)


def ask(tool: str, argv: list[str], tools_dir: str) -> int | None:
    """The exit status of ``tool argv`` run by the server in ``tools_dir``; None when it did not
    run it (refused, absent, or the request could not be sent): the caller runs it then.

    ``tools_dir`` is ``<state>/run/tools``, written into the wrapper by the lab controller.
    """
    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    except OSError:
        return None
    try:
        try:
            sock.connect(f"{tools_dir}/{'root' if is_privileged() else 'user'}.sock")
            fds = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in (0, 1, 2))
            sock.sendmsg([_request(tool, argv)], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        except OSError:
            return None  # nothing was sent, nothing ran
        try:
            reply = sock.recv(32)
        except OSError:
            reply = b""
    finally:
        sock.close()
    if reply == b"R":
        return None
    if reply.startswith(b"X"):
        return int(reply[1:])
    print(f"{tool}: the lab's tool server went away while it ran (lab stopped or reset)", file=sys.stderr)
    return 1


def run(tool: str, tools_dir: str) -> int:
    """The wrapper's body: the stand-in's exit status, served or run here."""
    rc = ask(tool, sys.argv[1:], tools_dir)
    if rc is None:
        from tuning.lab.tools import main
        rc = main(tool, sys.argv[1:])
    return rc
