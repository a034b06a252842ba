"""The lab's node SSH endpoints: one asyncssh server process, one 127.0.0.1 port per node.

Each node accepts user ``fabtune`` with the lab's client key only
(``<state>/ssh/id_ed25519.pub``) and presents its persistent host key
(``<state>/ssh/hostkeys/<node>``). An exec request runs ``bash -c '<command>'`` as a
real subprocess in ``<state>/nodes/<node>/`` with the lab environment (PATH with
``<state>/bin`` first, ``FABTUNE_LAB_*``), streams stdout/stderr and passes the exit
status, exactly what OpenSSH's sshd does for ``ssh host 'command'``. A shell request
runs ``bash`` reading commands from the channel; SFTP is served read-only, chrooted to
the node's login folder.

Shells run unprivileged (:mod:`tuning.lab.privileges`): as the lab user when the daemon
is root, without capabilities otherwise. ``sudo`` on their PATH reaches the node's sudo
socket, served here too; each shell's pid is recorded as its node's, so that socket serves
only that node's shells and their descendants.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

import asyncssh

from tuning.lab import privileges
from tuning.lab.fabric import Fabric, Node
from tuning.lab.inject import SSH_CUT
from tuning.lab.sysroot import sync_derived

log = logging.getLogger("fabtune.lab.nodes")
LAB_USER = "fabtune"
CHUNK = 65536


def node_env(state_dir: Path, node: str) -> dict[str, str]:
    """Environment of a node shell (the lab contract; ``state_dir`` must be absolute)."""
    home = state_dir / "nodes" / node
    return {
        "PATH": f"{state_dir / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "FABTUNE_LAB_DIR": str(state_dir),
        "FABTUNE_LAB_NODE": node,
        "FABTUNE_LAB_SYSROOT": str(home / "sysroot"),
        "HOME": str(home), "USER": LAB_USER, "LOGNAME": LAB_USER, "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
    }


#: node -> its SSH connections open now (what an ``ssh-cut`` fault cuts)
_OPEN: dict[str, set] = {}


class _NodeAuth(asyncssh.SSHServer):
    """Public-key authentication of ``fabtune`` with exactly one authorised key; keeps the node's
    open connections in :data:`_OPEN`."""

    def __init__(self, client_key: asyncssh.SSHKey, node: str = ""):
        self._client_key = client_key.public_data
        self._node = node
        self._conn = None

    def connection_made(self, conn) -> None:
        self._conn = conn
        _OPEN.setdefault(self._node, set()).add(conn)

    def connection_lost(self, exc) -> None:
        _OPEN.get(self._node, set()).discard(self._conn)

    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return username == LAB_USER and key.public_data == self._client_key


class _ReadOnlySftp(asyncssh.SFTPServer):
    """SFTP, chrooted to the login folder, for reading only.

    It runs inside the daemon (root in CI), not as the login user as a real ``sftp-server``
    does, so every write is refused (``Permission denied``): it can never write what the
    unprivileged user could not. fabtune itself never uses SFTP.
    """

    WRITE_FLAGS = asyncssh.FXF_WRITE | asyncssh.FXF_APPEND | asyncssh.FXF_CREAT | asyncssh.FXF_TRUNC

    def open(self, path, pflags, attrs):  # noqa: D102 (asyncssh's signature)
        if pflags & self.WRITE_FLAGS:
            raise asyncssh.SFTPPermissionDenied("Permission denied")
        return super().open(path, pflags, attrs)

    def _denied(self, *args, **kwargs):
        raise asyncssh.SFTPPermissionDenied("Permission denied")

    open56 = remove = rename = posix_rename = mkdir = rmdir = _denied
    setstat = lsetstat = fsetstat = symlink = link = _denied


async def _pump_out(reader: asyncio.StreamReader, writer) -> None:
    while chunk := await reader.read(CHUNK):
        writer.write(chunk)
        await writer.drain()


async def _pump_in(reader, proc: asyncio.subprocess.Process) -> None:
    try:
        while chunk := await reader.read(CHUNK):
            proc.stdin.write(chunk)
            await proc.stdin.drain()
    except (BrokenPipeError, ConnectionResetError, asyncssh.Error):
        pass
    finally:
        proc.stdin.close()


def _argv(process: asyncssh.SSHServerProcess) -> list[str]:
    if process.command is not None:
        return ["bash", "-c", process.command]
    if process.get_terminal_type():
        return ["bash", "--noprofile", "--norc", "-i"]
    return ["bash", "--noprofile", "--norc", "-s"]


async def _run(process: asyncssh.SSHServerProcess, state_dir: Path, node: str) -> None:
    """Serve one exec/shell request: a real ``bash`` subprocess, streams and exit status."""
    env = node_env(state_dir, node)
    env["PS1"] = f"{LAB_USER}@{node}:~$ "
    argv, creds = privileges.unprivileged(_argv(process))
    user = privileges.lab_user()
    if user is not None:  # pytest may have reset a 0700 ancestor since the last command
        privileges.grant_search(state_dir, *user)
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=state_dir / "nodes" / node, env=env, start_new_session=True,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, **creds)
    privileges.claim(proc.pid, node)  # its sudo calls reach root as this node's only
    feeder = asyncio.ensure_future(_pump_in(process.stdin, proc))
    outs = asyncio.gather(_pump_out(proc.stdout, process.stdout), _pump_out(proc.stderr, process.stderr))
    try:
        await outs
        rc = await proc.wait()
    except (asyncssh.Error, ConnectionError, BrokenPipeError) as exc:
        log.info("%s: client went away (%s); pid %s ends at its next write (EPIPE), as under sshd", node, exc,
                 proc.pid)
        outs.cancel()
        _hang_up(proc)
        try:
            await proc.wait()
        finally:
            _kill(proc)  # the lab going down while it still runs
        return
    finally:
        feeder.cancel()
        if proc.returncode is not None:  # reaped: its pid may be reused
            privileges.release(proc.pid)
    sync_derived(state_dir / "nodes" / node / "sysroot")
    process.exit(rc if rc >= 0 else 128 - rc)


def _hang_up(proc: asyncio.subprocess.Process) -> None:
    """What sshd does to a command whose client is gone (no pty): the read ends of its stdout and
    stderr are closed and nothing is signalled, so the command runs on until its next write gets
    EPIPE (bash, a builtin ``echo``: SIGPIPE) or it ends; a child that writes nothing (``flock``
    holder, a tool mid-write) finishes. Killing the whole process group at the first write instead
    would stop a tool between two of its own steps (``cma_roce_tos``: after its ``mkdir``, before its
    ``rmdir``), which no real node does."""
    transport = proc._transport  # asyncio exposes the pipe transports only through it
    for fd in (1, 2):
        pipe = transport.get_pipe_transport(fd)
        if pipe is not None:
            pipe.close()


def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


async def start_node(state_dir: Path, node: Node) -> asyncssh.SSHAcceptor:
    """Start the SSH endpoint of ``node`` on ``127.0.0.1:node.port`` and return its acceptor.

    Args:
        state_dir: the lab state folder (absolute); keys must already exist in ``ssh/``.
        node: the fabric node to serve.
    """
    client_key = asyncssh.read_public_key(state_dir / "ssh" / "id_ed25519.pub")
    home = state_dir / "nodes" / node.name

    async def handle(process: asyncssh.SSHServerProcess) -> None:
        await _run(process, state_dir, node.name)

    return await asyncssh.create_server(
        lambda: _NodeAuth(client_key, node.name), "127.0.0.1", node.port,
        server_host_keys=[str(state_dir / "ssh" / "hostkeys" / node.name)],
        process_factory=handle, encoding=None, allow_scp=False, reuse_address=True,
        sftp_factory=lambda chan: _ReadOnlySftp(chan, chroot=str(home).encode()),
    )


async def serve_nodes(state_dir: Path, fabric: Fabric, stop: asyncio.Event,
                      cut_switch: Callable[[str], int] | None = None) -> None:
    """Serve every node of ``fabric`` until ``stop`` is set, then close the listeners.

    ``cut_switch(name)`` cuts a lab switch's SSH sessions (``SWITCH ssh-cut``, the switches run in
    this process: :meth:`tuning.lab.switches.SwitchLab.cut`) and returns how many it cut."""
    sudo = privileges.start_sudo(state_dir, [n.name for n in fabric.nodes], lambda n: node_env(state_dir, n),
                                 lambda n: state_dir / "nodes" / n)
    acceptors = [await start_node(state_dir, node) for node in fabric.nodes]
    log.info("nodes up: %s (shells %s)", ", ".join(f"{n.name}:{n.port}" for n in fabric.nodes),
             privileges.describe())
    await _cut_when_asked(state_dir / "fabric.json", stop, cut_switch)
    for server in sudo:
        server.close()
    for acceptor in acceptors:
        acceptor.close()
        await acceptor.wait_closed()


def _cuts(path: Path) -> set[tuple[str, int]]:
    """The ``ssh-cut`` injections in ``fabric.json``: ``{(node or switch, at)}`` (empty when unreadable)."""
    try:
        return {(i["target"], int(i.get("at", 0))) for i in json.loads(path.read_text()).get("injections", [])
                if i.get("kind") == SSH_CUT}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


async def _cut_when_asked(path: Path, stop: asyncio.Event, cut_switch: Callable[[str], int] | None) -> None:
    """Until ``stop``: each new ``ssh-cut`` injection (``fabtune lab inject NODE|SWITCH ssh-cut``) cuts
    every SSH connection of its node or switch open at that moment (the TCP connection is closed without
    an SSH goodbye, no exit status, as a network cut does; a node's commands go on as sshd leaves them:
    until they write to the closed channel or end; a switch finishes the command it was running, as
    nvued does). New connections are served as always. ``fabric.json`` is looked at every 0.1 s, by its stat."""
    stamp, done = None, _cuts(path)  # cuts already listed at start are history
    while not stop.is_set():
        try:
            st = path.stat()
            now = (st.st_mtime_ns, st.st_size)
        except OSError:
            now = None
        if now != stamp:
            stamp = now
            for target, at in _cuts(path) - done:
                done.add((target, at))
                if target in _OPEN or cut_switch is None:
                    conns = list(_OPEN.get(target, ()))
                    for conn in conns:
                        conn.abort()
                    n = len(conns)
                else:  # a switch: its FakeNOS sessions run in threads of this process
                    n = await asyncio.to_thread(cut_switch, target)
                log.info("%s: ssh-cut: closed %d connection(s)", target, n)
        try:
            await asyncio.wait_for(stop.wait(), 0.1)
        except asyncio.TimeoutError:
            pass
