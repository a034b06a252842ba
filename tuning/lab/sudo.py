"""The lab's ``sudo`` stand-in (node side) and the stand-ins' privilege test. Stdlib only.

``sudo [-n] [-S] [-p PROMPT] [-u USER] [--] COMMAND [ARG...]``: asks the lab daemon over the
node's unix socket (:mod:`tuning.lab.privileges`) to run COMMAND as root with this process's
stdin/stdout/stderr, and exits with its status. The policy is the daemon's
(``<state>/sudoers.json``): passwordless unless a password is set. Texts are sudo 1.9's:

- ``-n`` and a password needed: ``sudo: a password is required`` (exit 1)
- no ``-S`` and no terminal: ``sudo: a terminal is required to read the password; either use
  the -S option to read from standard input or configure an askpass helper``, then the above
- ``-S``: one password line per try from stdin; a wrong one prints ``Sorry, try again.``;
  stdin ending first: ``sudo: no password was provided``; then ``sudo: N incorrect password
  attempt(s)`` (exit 1). Three tries at most.
- a target user other than root: ``sudo: unknown user NAME`` (exit 1)
"""

from __future__ import annotations

import os
import sys

from tuning.lab.toolclient import CAP_NET_ADMIN, is_privileged  # noqa: F401  (the stand-ins import both from here)
USAGE = "usage: sudo [-nS] [-p prompt] [-u user] [--] command [arg ...]"
TRIES = 3
TERMINAL = ("sudo: a terminal is required to read the password; either use the -S option to read "
            "from standard input or configure an askpass helper")


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _parse(argv: list[str]) -> tuple[dict, list[str]] | None:
    opts: dict = {"n": False, "S": False, "u": "root"}
    args = list(argv)
    while args and args[0].startswith("-") and args[0] != "-":
        arg = args.pop(0)
        if arg == "--":
            break
        if arg[:2] in ("-p", "-u"):
            value = arg[2:] or (args.pop(0) if args else None)
            if value is None:
                return None
            opts[arg[1]] = value
            continue
        for flag in arg[1:]:
            if flag not in "nS":
                _err(f"sudo: invalid option -- '{flag}'")
                return None
            opts[flag] = True
    return (opts, args) if args else None


def _ask(sock_path: str, request: dict, pass_fds: bool) -> dict:
    import json  # here, not at the top: every stand-in imports is_privileged and pays for no socket
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(sock_path)
        data = json.dumps(request).encode() + b"\n"
        try:
            if pass_fds:
                socket.send_fds(s, [data], [0, 1, 2])
            else:
                s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon refused this caller before reading: its reply is already queued
        return _reply_of(s, "sudo: the lab daemon went away")


def _reply_of(s, gone: str) -> dict:
    """The one JSON line the other end of ``s`` answers; ``{"rc": 1, "error": gone}`` if none."""
    import json

    reply = b""
    while not reply.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        reply += chunk
    return json.loads(reply) if reply.strip() else {"rc": 1, "error": gone}


def lab_request(sock_path: str, request: dict) -> dict:
    """Send one lab-internal request (no stdio, no password: ``{"op": "counters", ...}`` of
    :func:`tuning.lab.counters.bump`) to a node's socket; returns the daemon's reply
    (``{"rc": 0}`` or ``{"rc": 1, "error": TEXT}``).

    In a stand-in that the lab's tool server forked, ``$FABTUNE_LAB_RELAY_FD`` names the socket to
    its wrapper, which sends the request from the node's own process tree
    (:func:`tuning.lab.toolclient._relay`).

    Raises:
        OSError: the socket cannot be reached.  ValueError: the reply is not JSON.
    """
    relay = os.environ.get("FABTUNE_LAB_RELAY_FD")
    if relay is None:
        return _ask(sock_path, request, False)
    import json
    import socket

    with socket.socket(fileno=os.dup(int(relay))) as s:
        s.sendall(sock_path.encode() + b"\0" + json.dumps(request).encode() + b"\n")
        return _reply_of(s, "sudo: the stand-in's wrapper went away")


def _read_line() -> str | None:
    """One line from fd 0, byte by byte (the rest of stdin stays for the command)."""
    out = bytearray()
    while True:
        b = os.read(0, 1)
        if not b:
            return out.decode(errors="replace") if out else None
        if b == b"\n":
            return out.decode(errors="replace")
        out += b


def _run_with_password(sock: str, request: dict, opts: dict) -> int:
    if opts["n"]:
        _err("sudo: a password is required")
        return 1
    if not opts["S"] and not os.isatty(0):
        _err(TERMINAL)
        _err("sudo: a password is required")
        return 1
    wrong = 0
    for _ in range(TRIES):
        if opts.get("p"):
            sys.stderr.write(opts["p"])
            sys.stderr.flush()
        line = _read_line()
        if line is None:
            _err("sudo: no password was provided")
            break
        reply = _ask(sock, {**request, "password": line}, True)
        if not reply.get("denied"):
            return _finish(reply)
        wrong += 1
        _err("Sorry, try again.")
    if wrong:
        _err(f"sudo: {wrong} incorrect password attempt{'s' if wrong > 1 else ''}")
    return 1


def _finish(reply: dict) -> int:
    if reply.get("error"):
        _err(reply["error"])
    return int(reply.get("rc", 1))


def sudo(argv: list[str]) -> int:
    """The ``sudo`` stand-in; returns the command's exit status (1 for sudo's own refusals)."""
    parsed = _parse(argv)
    if parsed is None:
        _err(USAGE)
        return 1
    opts, command = parsed
    if opts["u"] != "root":
        _err(f"sudo: unknown user {opts['u']}")
        return 1
    lab, node = os.environ.get("FABTUNE_LAB_DIR"), os.environ.get("FABTUNE_LAB_NODE")
    if not lab or not node:
        _err("sudo (lab): FABTUNE_LAB_DIR and FABTUNE_LAB_NODE must be set")
        return 1
    sock = os.path.join(lab, "run", "sudo", f"{node}.sock")
    request = {"argv": command, "cwd": os.getcwd()}
    try:
        if _ask(sock, {"op": "policy"}, False).get("password"):
            return _run_with_password(sock, request, opts)
        return _finish(_ask(sock, request, True))
    except (OSError, ValueError) as exc:
        _err(f"sudo (lab): cannot reach the lab daemon: {exc}")
        return 1


def main() -> None:
    """Entry point of the ``bin/sudo`` wrapper."""
    try:
        sys.exit(sudo(sys.argv[1:]))
    except BrokenPipeError:
        sys.exit(141)
