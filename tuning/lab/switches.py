"""The lab's switches: one FakeNOS host per switch, speaking its OS's CLI over SSH (NVUE, or
Arista EOS for a switch whose ``os`` is ``eos``: :class:`tuning.lab.eos.EosSwitch` behind
:class:`tuning.lab.eos_shell.EosShell`, prompt ``<name>>``).

FakeNOS matches commands exactly and its paramiko server only knows passwords
(shared/NOTES.md), so this module registers on the FakeNOS instance:

- :class:`NvueShell` (as ``CMDShell``): ``default(line)`` hands ``nv ...`` to the
  switch's :class:`tuning.lab.nvue.NvueSwitch` (kept on the FakeNOS ``Nos.device``,
  one per switch) and answers ``[y/N]`` prompts by reading the next line;
- :class:`NvueSshServer` (as ``ParamikoSshServer``): public-key only (user ``fabtune``,
  key ``ssh/id_ed25519.pub``), the persistent ed25519 host key ``ssh/hostkeys/<name>``,
  and a direct channel reader (no per-byte sleeps).

Each switch listens on ``127.0.0.1:<Switch.port>``; its host key line goes to
``ssh/known_hosts``. Prompt: ``cumulus@<name>:mgmt:~$ ``.

With ``start_switches(..., command_log=True)`` every switch keeps a :class:`CommandLog` of the lines
it received, grouped in round trips (:meth:`SwitchLab.round_trips`): what a bench or a test counts
of a driver's SSH traffic, read on the switch's side of the channel.
"""

from __future__ import annotations

import base64
import logging
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko
from fakenos import FakeNOS
from fakenos.core.nos import Nos
from fakenos.plugins.servers.ssh_server_paramiko import ParamikoSshServer
from fakenos.plugins.shell.cmd_shell import CMDShell

from tuning.lab.fabric import Fabric, Switch
from tuning.lab.keys import client_public_line, ensure_host_key, host_key_path, write_known_hosts
from tuning.lab.nvue import NvueSwitch

log = logging.getLogger(__name__)

USER = "fabtune"
PROMPT = "cumulus@{base_prompt}:mgmt:~$ "


class CommandLog:
    """The lines one lab switch received over SSH, grouped in round trips.

    A round trip starts with a line whose first byte came while the switch had answered everything
    it had received and waited on an empty channel (:class:`ChannelIO`): the client waited for the
    answer before it sent. Lines already received, or arriving while the switch still worked on
    earlier ones, belong to the round trip they came with (a candidate written in one send is one
    round trip however many lines it holds). One client write of up to paramiko's packet size
    (32 KiB) arrives whole, so it is never counted twice.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._trips: list[list[str]] = []
        self._current: dict[int, list[str]] = {}  # SSH session -> its open round trip

    def add(self, session: int, line: str, new_trip: bool) -> None:
        """Record ``line`` (without its line end) of ``session``; ``new_trip``: it starts a round trip."""
        with self._lock:
            trip = self._current.get(session)
            if new_trip or trip is None:
                trip = self._current[session] = []
                self._trips.append(trip)
            trip.append(line)

    def trips(self) -> list[list[str]]:
        """Every round trip so far, oldest first, each the lines it carried: ``[["nv config diff"], ...]``."""
        with self._lock:
            return [list(t) for t in self._trips]


class ChannelIO:
    """Line I/O over a paramiko channel as a terminal gives it: echo, CR/LF handling.

    ``readline()`` returns ``"exit\\n"`` when the client has gone, which ends the shell. With a
    ``log`` every line read is recorded in it (:class:`CommandLog`).
    """

    def __init__(self, channel: paramiko.Channel, log: CommandLog | None = None) -> None:
        self.channel = channel
        self._buf = b""
        self._last_cr = False
        self._log = log
        self._idle = False  # the switch waited on an empty channel since the last line it read

    def readline(self) -> str:
        """Read up to CR or LF, echoing what was typed; CRLF counts as one line end."""
        while True:
            for i, byte in enumerate(self._buf):
                if byte == 10 and self._last_cr and i == 0:
                    self._buf, self._last_cr = self._buf[1:], False
                    break
                if byte in (10, 13):
                    line, self._buf = self._buf[:i], self._buf[i + 1:]
                    self._last_cr = byte == 13
                    self._send(b"\r\n")
                    text = line.decode("utf-8", "replace")
                    if self._log is not None:
                        self._log.add(id(self), text, self._idle)
                        self._idle = False
                    return text + "\n"
            else:
                if not self._buf and not self.channel.recv_ready():
                    self._idle = True  # all answered, nothing received: what comes next is a new send
                try:
                    data = self.channel.recv(4096)
                except (OSError, EOFError):
                    data = b""
                if not data:
                    return "exit\n"
                self._send(data.replace(b"\r", b"").replace(b"\n", b""))
                self._buf += data

    def write(self, text: str) -> None:
        """Send ``text`` with LF turned into CRLF."""
        self._send(text.replace("\r\n", "\n").replace("\n", "\r\n").encode())

    def flush(self) -> None:
        """Nothing is buffered."""

    def _send(self, data: bytes) -> None:
        if data:
            try:
                self.channel.sendall(data)
            except (OSError, EOFError):
                pass


class NvueShell(CMDShell):
    """FakeNOS shell whose unknown lines go to the switch's NVUE state machine."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.intro = ""

    def default(self, line: str) -> bool:
        """Run ``nv ...`` on the switch; anything else (``exit``) is FakeNOS's."""
        if not line.split() or line.split()[0] != "nv":
            return super().default(line)
        reply = self.nos.device.run(line, ask=self._ask)
        self.stdout.write(reply.stdout + reply.stderr)
        return not self.is_running.is_set()

    def _ask(self, prompt: str) -> str:
        self.stdout.write(prompt)
        return self.stdin.readline()


class _PublicKeyOnly(paramiko.ServerInterface):
    """Accepts user ``fabtune`` with the lab client key; nothing else (no passwords)."""

    def __init__(self, authorized: paramiko.PKey) -> None:
        self.authorized = authorized

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        ok = username == USER and key.get_name() == self.authorized.get_name() and \
            key.asbytes() == self.authorized.asbytes()
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_pty_request(self, *args: Any) -> bool:
        return True

    def check_channel_shell_request(self, channel: paramiko.Channel) -> bool:
        return True


class NvueSshServer(ParamikoSshServer):
    """FakeNOS paramiko server with the lab's host key and public-key-only login.

    Extra configuration keys: ``host_key_file`` (OpenSSH ed25519 private key) and
    ``authorized_key`` (``"ssh-ed25519 AAAA..."``).
    """

    def __init__(self, *args: Any, host_key_file: str, authorized_key: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ssh_server_key = paramiko.Ed25519Key.from_private_key_file(host_key_file)
        kind, b64 = authorized_key.split()[:2]
        self._authorized = paramiko.PKey.from_type_string(kind, base64.b64decode(b64))

    def connection_function(self, client: socket.socket, is_running: threading.Event) -> None:
        session = paramiko.Transport(client)
        with self._active_sessions_lock:
            self._active_sessions.add(session)
        try:
            session.add_server_key(self._ssh_server_key)
            session.start_server(server=_PublicKeyOnly(self._authorized))
            channel = session.accept(timeout=10)
            if channel is None:
                return
            io = ChannelIO(channel, getattr(self.nos, "command_log", None))
            # the shell of the switch's OS (start_switches sets it on the Nos; FakeNOS's inventory
            # names only its own CMDShell)
            shell_class = getattr(self.nos, "shell_class", self.shell)
            shell = shell_class(stdin=io, stdout=io, nos=self.nos, nos_inventory_config=self.nos_inventory_config,
                                is_running=is_running, **self.shell_configuration)
            shell.start()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            log.info("switch ssh session ended: %s", exc)
        finally:
            session.close()
            with self._active_sessions_lock:
                self._active_sessions.discard(session)


@dataclass
class SwitchLab:
    """Running lab switches. ``devices`` maps switch name -> its OS's state machine."""

    net: FakeNOS
    devices: dict[str, Any]
    fabric: Fabric
    state_dir: Path
    nos: dict[str, Nos]

    def round_trips(self, name: str) -> list[list[str]]:
        """The round trips switch ``name`` received so far (:meth:`CommandLog.trips`).

        Raises:
            KeyError: the lab was started without ``command_log``, or has no switch ``name``.
        """
        log = getattr(self.nos[name], "command_log", None)
        if log is None:
            raise KeyError(f"{name} keeps no command log: start_switches(..., command_log=True)")
        return log.trips()

    def reset(self) -> dict[str, int]:
        """Power-cycle every switch: a fresh NVUE state machine (revision 1, nothing pending, no
        confirm timer) behind the same SSH endpoint; open sessions see it at their next command.
        Returns ``{switch: applied revision}`` (1, power-on, for an OS that numbers no revisions)."""
        for sw in self.fabric.switches:
            self.devices[sw.name].close()
            self.devices[sw.name] = self.nos[sw.name].device = _device(sw, self.fabric, self.state_dir)
        # EOS numbers no revisions: a fresh EOS state machine is at power-on, as NVUE's revision 1
        return {name: getattr(device, "applied_id", 1) for name, device in self.devices.items()}

    def cut(self, name: str) -> int:
        """Cut every SSH session of switch ``name`` open now, as a network cut does: the TCP
        connection is shut down without an SSH goodbye. A command the switch is running goes on to
        its end (nvued does not stop an apply because its client left); its answer goes nowhere.
        Returns how many sessions were cut (0 for a name that is not a lab switch)."""
        host = self.net.hosts.get(name)
        server = getattr(host, "server", None)
        if server is None:
            return 0
        with server._active_sessions_lock:  # FakeNOS's own registry of open sessions
            sessions = list(server._active_sessions)
        for session in sessions:
            try:
                session.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return len(sessions)

    def stop(self) -> None:
        """Stop every switch's SSH server and confirm timer."""
        self.net.stop()
        for device in self.devices.values():
            device.close()


def _device(sw: Switch, fabric: Fabric, state_dir: Path):
    """A fresh state machine of switch ``sw``'s OS (NVUE, or EOS: imported only when a lab has one)."""
    if sw.os == "eos":
        from tuning.lab.eos import EosSwitch

        return EosSwitch(sw, fabric, state_dir)
    if sw.os == "sonic":
        from tuning.lab.sonic import SonicSwitch

        return SonicSwitch(sw, fabric, state_dir)
    return NvueSwitch(sw, fabric, state_dir)


def _shell(os_: str) -> tuple[type, str]:
    """The FakeNOS shell class and first prompt of lab switch OS ``os_`` (EOS imported only when used)."""
    if os_ == "eos":
        from tuning.lab.eos_shell import EosShell

        return EosShell, "{base_prompt}>"
    if os_ == "sonic":
        from tuning.lab.sonic_shell import PROMPT as SONIC_PROMPT, SonicShell

        return SonicShell, SONIC_PROMPT
    return NvueShell, PROMPT


def start_switches(state_dir: Path, fabric: Fabric, command_log: bool = False) -> SwitchLab:
    """Start one FakeNOS switch per ``fabric.switches`` on ``127.0.0.1:<port>``, each speaking its
    ``os``'s CLI; with ``command_log`` each records what it receives (:meth:`SwitchLab.round_trips`).

    Makes the client key and host keys if missing, writes their ``known_hosts`` lines
    and each switch's ``switches/<name>.fabric.json``.

    Returns:
        A :class:`SwitchLab`; call ``.stop()`` to shut the switches down.
    """
    state_dir = Path(state_dir)
    authorized = client_public_line(state_dir)
    hosts, plugins, devices, known, by_name = {}, [], {}, {}, {}
    for sw in fabric.switches:
        known[sw.port] = ensure_host_key(state_dir, sw.name)
        device = _device(sw, fabric, state_dir)
        shell, prompt = _shell(sw.os)
        nos = Nos(name=f"nvue_{sw.name}", initial_prompt=prompt)
        nos.device, nos.shell_class = device, shell
        nos.command_log = CommandLog() if command_log else None
        plugins.append(nos)
        by_name[sw.name] = nos
        devices[sw.name] = device
        hosts[sw.name] = {
            "username": USER, "password": "", "port": sw.port,
            "server": {"plugin": "ParamikoSshServer", "configuration": {
                "address": "127.0.0.1", "host_key_file": str(host_key_path(state_dir, sw.name)),
                "authorized_key": authorized}},
            "shell": {"plugin": "CMDShell", "configuration": {}},
            "nos": {"plugin": f"nvue_{sw.name}"},
        }
    write_known_hosts(state_dir, known)
    net = FakeNOS(inventory={"hosts": hosts}, plugins=plugins)
    net.shell_plugins["CMDShell"] = NvueShell
    net.servers_plugins["ParamikoSshServer"] = NvueSshServer
    net.start()
    return SwitchLab(net, devices, fabric, state_dir, by_name)
