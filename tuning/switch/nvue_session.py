"""The switch drivers' SSH session: netmiko over paramiko (``cumulus_linux`` for NVUE,
``arista_eos`` for EOS), host keys checked.

Imported only when a session opens (:meth:`tuning.switch.nvue.NvueDriver.open`,
:meth:`tuning.switch.eos.EosDriver.open`), so the commands
that contact no device (``render``, ``plan --offline``) load no SSH library (about 0.3 s a run).
"""

from __future__ import annotations

import logging
from pathlib import Path

import paramiko
from netmiko import ConnectHandler
from netmiko.channel import SSHChannel
from netmiko.exceptions import NetmikoBaseException, ReadException, ReadTimeout

# the libraries log their own socket chatter; fabtune reports errors itself, in one line
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("netmiko").addHandler(logging.NullHandler())

#: what a lost session raises (netmiko, paramiko, the socket)
ERRORS = (NetmikoBaseException, paramiko.SSHException, OSError)
#: what a session that cannot open raises (also a host key that does not match, a bad key file)
OPEN_ERRORS = (*ERRORS, paramiko.hostkeys.InvalidHostKey, ValueError)
__all__ = ["ERRORS", "OPEN_ERRORS", "ReadTimeout", "connect"]


class _CutAwareChannel(SSHChannel):
    """netmiko's SSH channel, except that a session the switch or the network closed is an error at
    once. netmiko 4.8's ``read_buffer`` reads only when ``recv_ready()``, which stays False on a
    closed paramiko channel, so a cut used to look like a silent device until ``read_timeout``
    (twice the apply timeout for ``nv config apply``: minutes)."""

    def read_buffer(self) -> str:
        """One read of what is buffered. Raises ReadException when the channel is closed and empty."""
        if self.remote_conn is not None and not self.remote_conn.recv_ready() and \
                (self.remote_conn.closed or self.remote_conn.eof_received):
            raise ReadException("the SSH session was closed by the switch or the network")
        return super().read_buffer()


def connect(host: str, port: int, username: str, key_file: Path | None, known_hosts: Path,
            device_type: str = "cumulus_linux"):
    """A netmiko connection of ``device_type``, public-key login, the host key checked against
    ``known_hosts`` only. Raises one of :data:`OPEN_ERRORS`."""
    conn = ConnectHandler(
        device_type=device_type, host=host, port=port, username=username,
        use_keys=True, key_file=str(key_file) if key_file else None, ssh_strict=True,
        system_host_keys=False, alt_host_keys=True, alt_key_file=str(known_hosts), allow_agent=False)
    conn.channel = _CutAwareChannel(conn.remote_conn, conn.encoding)
    return conn
