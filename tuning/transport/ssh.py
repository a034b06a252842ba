"""SSH transport for nodes (paramiko), with host keys checked by default.

One connection per host, reused for every command of a run. Host keys come from the
inventory's ``fabtune_known_hosts_file`` (or ``~/.ssh/known_hosts``); an unknown or
changed key is refused (``RejectPolicy``). Only key authentication is used.
"""

from __future__ import annotations

import socket
import time

import paramiko

from tuning.errors import ConnectError
from tuning.inventory import Connection
from tuning.transport.base import CommandResult


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
            time.sleep(0.005)
        return False

    def wait(self, timeout: float = 30.0) -> CommandResult:
        """Wait for exit and collect output. Raises ConnectError on timeout."""
        deadline = time.monotonic() + timeout
        chan = self._chan
        while True:
            self._drain()
            if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                break
            if time.monotonic() > deadline:
                chan.close()
                raise ConnectError(f"`{self._command}` did not finish within {timeout:.0f} s", host=self._host)
            time.sleep(0.005)
        rc = chan.recv_exit_status()
        chan.close()
        return CommandResult(self._command, rc, self._out.decode(errors="replace"), self._err.decode(errors="replace"))


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
        client = paramiko.SSHClient()
        try:
            if conn.known_hosts:
                client.load_host_keys(conn.known_hosts)
            else:
                client.load_system_host_keys()
        except OSError as e:
            raise ConnectError(f"cannot read known_hosts {conn.known_hosts}: {e.strerror}", host=name) from e
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
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

    def start(self, command: str) -> SshRunning:
        """Start ``command`` and return at once; ``.wait()`` collects its result."""
        transport = self._client.get_transport()
        if transport is None or not transport.is_active():
            raise ConnectError("SSH session closed", host=self.name)
        chan = transport.open_session()
        chan.exec_command(command)
        return SshRunning(self.name, command, chan)

    def run(self, command: str, *, timeout: float = 60.0) -> CommandResult:
        """Run one command and wait for it (one round trip)."""
        return self.start(command).wait(timeout)

    def close(self) -> None:
        """Close the SSH session."""
        self._client.close()
