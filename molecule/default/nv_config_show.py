"""Print a lab switch's running configuration, as ``nv config show -o commands`` prints it.

Molecule's verify step (``verify.yml``) reads the switches through this script, over the lab's
real SSH with netmiko's ``cumulus_linux`` device type (as an operator's session would), not through
fabtune's own driver: the check must not share code with what it checks.

Usage::

    python nv_config_show.py HOST PORT USER KEY_FILE KNOWN_HOSTS

Output: the command's text on stdout (one ``nv set ...`` line per setting, the format of the
Cumulus Linux 5.x NVUE reference, "nv config show -o commands"); exit 1 with one line on stderr
when the switch cannot be reached or the host key does not match KNOWN_HOSTS.
"""

from __future__ import annotations

import sys

from netmiko import ConnectHandler
from netmiko.exceptions import NetmikoBaseException
from paramiko import SSHException


def show_commands(host: str, port: int, user: str, key_file: str, known_hosts: str) -> str:
    """``nv config show -o commands`` of one NVUE switch (host key checked against ``known_hosts``).

    Raises:
        NetmikoBaseException, SSHException, OSError: the session could not be opened or timed out.
    """
    conn = ConnectHandler(device_type="cumulus_linux", host=host, port=port, username=user, use_keys=True,
                          key_file=key_file, ssh_strict=True, system_host_keys=False, alt_host_keys=True,
                          alt_key_file=known_hosts, allow_agent=False)
    try:
        return str(conn.send_command("nv config show -o commands", read_timeout=60))
    finally:
        conn.disconnect()


def main(argv: list[str]) -> int:
    """Entry point; see the module docstring. Returns the exit status."""
    if len(argv) != 5:
        print("usage: nv_config_show.py HOST PORT USER KEY_FILE KNOWN_HOSTS", file=sys.stderr)
        return 2
    host, port, user, key_file, known_hosts = argv
    try:
        print(show_commands(host, int(port), user, key_file, known_hosts))
    except (NetmikoBaseException, SSHException, OSError) as exc:
        print(f"nv_config_show: {host}:{port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
