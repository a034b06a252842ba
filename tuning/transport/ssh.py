"""SSH transport for nodes (paramiko), with host keys checked by default.

One connection per host, reused for every command of a run. Host keys come from the
inventory's ``fabtune_known_hosts_file`` (or ``~/.ssh/known_hosts``); an unknown or
changed key is refused (``RejectPolicy``). Only key authentication is used.

With ``become`` (``ansible_become: true``) every privileged command is wrapped in sudo
(:mod:`tuning.transport.become`); :meth:`SshHost.run` is privileged unless told otherwise,
:meth:`SshHost.start` (background perftest servers, which need no root) is not.
"""

from __future__ import annotations

import logging
import select
import socket
import time

import paramiko

from tuning.errors import ConnectError
from tuning.transport.connection import Connection, check_key
from tuning.transport import become
from tuning.transport.base import CommandResult

# the library logs its own socket chatter; fabtune reports errors itself, in one line
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class SshRunning:
    """A command running on an open SSH channel (see :meth:`SshHost.start`)."""

    def __init__(self, host: str, command: str, channel: paramiko.Channel):
        self._host, self._command, self._chan = host, command, channel
        self._out, self._err = bytearray(), bytearray()

    def _drain(self) -> None:
        while self._chan.recv_ready():
            self._out += self._chan.recv(65536)
        while self._chan.recv_stderr_ready():
            self._err += self._chan.recv_stderr(65536)

    def _await(self, deadline: float) -> None:
        """Sleep until the channel has output, is closed, or 50 ms (or ``deadline``) pass.

        paramiko's channel pipe turns readable when stdout or stderr data arrives and at EOF; the
        exit status can come alone, hence the 50 ms cap. A run waits on the channel, not on a
        clock: no 5 ms polling in each fan-out thread while a perftest runs for seconds. ``poll``, not
        ``select``: a 64-node verification holds more than 1,024 descriptors, and ``select`` refuses
        any numbered past FD_SETSIZE ("filedescriptor out of range in select()").
        """
        waiter = select.poll()
        waiter.register(self._chan, select.POLLIN)
        waiter.poll(1000 * max(0.0, min(0.05, deadline - time.monotonic())))

    def read_until(self, marker: str, timeout: float = 10.0) -> bool:
        """Wait until ``marker`` appears in the output (a server's "waiting" banner).

        Returns:
            True when seen; False when the command exited or ``timeout`` (s) passed first.
        """
        deadline = time.monotonic() + timeout
        want = marker.encode()
        while time.monotonic() < deadline:
            self._drain()
            if want in self._out or want in self._err:
                return True
            if self._chan.exit_status_ready() and not self._chan.recv_ready():
                return False
            self._await(deadline)
        return False

    def output(self) -> str:
        """Stdout so far (the channel is read first while it is open)."""
        if not self._chan.closed:
            self._drain()
        return self._out.decode(errors="replace")

    def wait(self, timeout: float = 30.0) -> CommandResult:
        """Wait for exit and collect output. Raises ConnectError on timeout (the channel is closed;
        without a pty the remote command runs on: :func:`tuning.verify.servers.end_server` ends a
        perftest server)."""
        deadline = time.monotonic() + timeout
        chan = self._chan
        while True:
            self._drain()
            if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                break
            if time.monotonic() > deadline:
                chan.close()
                raise ConnectError(f"`{_short(self._command)}` did not finish within {timeout:.0f} s", host=self._host)
            self._await(deadline)
        rc = chan.recv_exit_status()
        chan.close()
        # The output is returned as the command wrote it: ``sudo -S -p ''`` never echoes the password
        # and fabtune's commands never read stdin. (Masking the password in it would corrupt every
        # value that happens to contain it: password "2" turned 212992 into "********1********99********".)
        return CommandResult(self._command, rc, self._out.decode(errors="replace"), self._err.decode(errors="replace"))


def _short(command: str, width: int = 100) -> str:
    """A command as one line of at most ``width`` characters (a read script is kilobytes long):
    its start, and its length when cut."""
    line = " ".join(command.split())
    return line if len(line) <= width else f"{line[:width]}... ({len(command)} chars)"


class SshHost:
    """A node reached over SSH; implements the :class:`tuning.transport.Host` contract.

    Args:
        name: inventory name.  conn: :class:`tuning.inventory.Connection`.

    Raises:
        ConnectError: unreachable, host key unknown or changed, authentication refused.
    """

    def __init__(self, name: str, conn: Connection, *, connect_timeout: float = 10.0):
        self.name = name
        self.sysroot = conn.sysroot
        self._become_user = conn.become_user if conn.become else None
        self._password = become.password(conn.become_password_vault, name) if conn.become else None
        client = paramiko.SSHClient()
        try:
            if conn.known_hosts:
                client.load_host_keys(conn.known_hosts)
            else:
                client.load_system_host_keys()
        except OSError as e:
            raise ConnectError(f"cannot read known_hosts {conn.known_hosts}: {e.strerror}", host=name) from e
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        check_key(conn.key_file, name)
        try:
            client.connect(conn.hostname, port=conn.port, username=conn.username, key_filename=conn.key_file,
                           look_for_keys=conn.key_file is None, allow_agent=False, timeout=connect_timeout,
                           banner_timeout=connect_timeout, auth_timeout=connect_timeout)
        except paramiko.BadHostKeyException as e:
            raise ConnectError(f"host key of {conn.hostname}:{conn.port} CHANGED; refusing to connect", host=name) from e
        except paramiko.SSHException as e:
            raise ConnectError(f"ssh {conn.username}@{conn.hostname}:{conn.port}: {e}", host=name) from e
        except (OSError, socket.timeout) as e:
            raise ConnectError(f"cannot reach {conn.hostname}:{conn.port}: {e}", host=name) from e
        transport = client.get_transport()
        if transport is not None:  # Nagle delays each small exec by ~40 ms (docs/lab.md)
            transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._client = client

    def is_active(self) -> bool:
        """Whether the SSH connection still stands (False once the peer or the network cut it)."""
        transport = self._client.get_transport()
        return transport is not None and transport.is_active()

    def start(self, command: str, *, privileged: bool = False) -> SshRunning:
        """Start ``command`` and return at once; ``.wait()`` collects its result.

        Args:
            command: the shell command.
            privileged: run it through sudo when the host has ``become`` (a perftest
                server needs no root, hence False by default).
        """
        transport = self._client.get_transport()
        if transport is None or not transport.is_active():
            raise ConnectError("SSH session closed", host=self.name)
        line, secret = command, None
        if privileged and self._become_user is not None:
            secret = self._password
            line = become.wrap(command, self._become_user, with_password=secret is not None)
        chan = transport.open_session()
        chan.exec_command(line)
        if secret is not None:  # sudo -S reads it from stdin: never on a command line
            chan.sendall(f"{secret}\n".encode())
            chan.shutdown_write()
        return SshRunning(self.name, line, chan)

    def run(self, command: str, *, timeout: float = 60.0, privileged: bool = True) -> CommandResult:
        """Run one command and wait for it (one round trip); through sudo when the host has ``become``."""
        return self.start(command, privileged=privileged).wait(timeout)

    def close(self) -> None:
        """Close the SSH session."""
        self._client.close()
