"""What every SSH CLI switch driver shares: the session (netmiko over paramiko, host keys checked,
:mod:`tuning.switch.nvue_session`), one command with the OS's failure texts, and a candidate
typed at once and read back by its prompts.

A driver sets :attr:`CliDriver.device_type` (netmiko's) and :attr:`CliDriver.os_name`, and
overrides :meth:`CliDriver._failure` (which printed text is an error) and, where its prompts
change with the mode, :meth:`CliDriver._prompt`.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from tuning.errors import CandidateError, CommandError, ConnectError
from tuning.switch.base import SwitchDriver
from tuning.transport.connection import check_key


class CliTimeout(ConnectError):
    """A command printed no prompt within its read timeout (the device may still be working)."""


@dataclass
class Staged:
    """A candidate this session staged on the switch (EOS, SONiC: the transaction's one private object).

    Attributes:
        name: where it is staged: the EOS configuration session (``fabtune-cfg-...``), the SONiC patch file.
        on: the revision it was staged on: the one this session read last before staging (None:
            none read).
        diff: the switch's diff of it (:meth:`~tuning.switch.base.SwitchDriver.compare`), once read.
            A commit reuses it only while the running configuration, read again then, is still
            ``on`` (the staged candidate is this session's alone: the run holds the inventory's lock).
    """

    name: str
    on: str | None
    diff: str | None = None


class CliDriver(SwitchDriver):
    """An SSH CLI session to one switch (abstract: the OS's driver completes it).

    Args:
        host: address (``127.0.0.1`` in the lab).  port: SSH port.  username: login user.
        key_file: private key for public-key login.  known_hosts: OpenSSH known_hosts to check the host key.
        name: inventory name used in errors (defaults to ``host``).
        apply_timeout_s: read timeout of the transaction's long commands (apply, commit, confirm,
            rollback), seconds.
    """

    #: netmiko's device type (``cumulus_linux``, ``arista_eos``) and the OS's name in messages
    device_type = ""
    os_name = ""

    def __init__(self, host: str, *, port: int = 22, username: str, key_file: Path | str | None = None,
                 known_hosts: Path | str | None = None, name: str | None = None,
                 apply_timeout_s: float = 120.0) -> None:
        self.host, self.port, self.username = host, port, username
        # None: the user's default keys and ~/.ssh/known_hosts, still checked strictly
        self.key_file = Path(key_file) if key_file else None
        self.known_hosts = Path(known_hosts) if known_hosts else Path.home() / ".ssh" / "known_hosts"
        self.name = name or host
        self.apply_timeout_s = apply_timeout_s
        self._conn = None
        self._ses = None  # tuning.switch.nvue_session once a session opened (netmiko imported then)
        self._tx: dict[str, str | None] = {"before": None, "committed": None}
        self._running: str | None = None  # the running configuration this session read last (EOS, SONiC)
        self._seen: str | None = None  # the revision this session read last: what a candidate is staged on
        self._stage: Staged | None = None  # what this session staged (EOS, SONiC)
        self._sent = 0  # sends (_send, _batch) and opens: a read is still the latest while this holds

    def open(self) -> None:
        """Connect (host key checked) and prepare the session (:meth:`_after_open`). Raises ConnectError."""
        from tuning.switch import nvue_session as ses  # the SSH libraries, only when a session opens

        self._ses = ses
        self._sent += 1
        check_key(self.key_file, self.name)
        try:
            self._conn = ses.connect(self.host, self.port, self.username, self.key_file, self.known_hosts,
                                     device_type=self.device_type)
            self._after_open()
        except ses.OPEN_ERRORS as exc:
            raise ConnectError(f"cannot open an {self.os_name} session on {self.host}:{self.port}: {exc}",
                               host=self.name, phase="connect") from exc

    def _after_open(self) -> None:
        """What the session needs once logged in (EOS: ``enable``). Default: nothing."""

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.disconnect()
            except self._ses.ERRORS:
                pass
            self._conn = None

    @property
    def committed_revision(self) -> str | None:
        """The revision this session committed (None before a commit)."""
        return self._tx["committed"]

    def _prompt(self) -> str:
        """A regex of the device's prompt (default: the base prompt and ``$`` or ``#``)."""
        return re.escape(self._conn.base_prompt) + r"[$#]"

    def _failure(self, out: str) -> str | None:
        """The failure text in a command's output, None when it reports none."""
        return None

    def _send(self, command: str, *, phase: str, read_timeout: float = 10.0, until: str | None = None) -> str:
        """Run one command; a failure text (:meth:`_failure`) becomes CommandError (text as stderr).
        ``until``: a regex that also ends the answer (an interactive question), beside the prompt.

        Raises:
            CliTimeout: no prompt within ``read_timeout`` seconds.  ConnectError: the session is lost.
        """
        if self._conn is None:
            raise ConnectError("session is not open", host=self.name, phase=phase)
        self._sent += 1
        try:
            out = self._conn.send_command(command, read_timeout=read_timeout, auto_find_prompt=False,
                                          expect_string=f"(?:{self._prompt()}{f'|{until}' if until else ''})" + r"\s*$")
        except self._ses.ReadTimeout as exc:
            raise CliTimeout(f"`{command}` printed no prompt within {read_timeout:g} s", host=self.name,
                             phase=phase) from exc
        except self._ses.ERRORS as exc:
            raise ConnectError(f"`{command}` lost the session: {exc}", host=self.name, phase=phase) from exc
        why = self._failure(out)
        if why:
            raise CommandError(command, 1, why, host=self.name, phase=phase)
        return out

    def _batch(self, lines: list[str]) -> str:
        """Write ``lines`` at once and read until one prompt per line came back (shared/NOTES.md:
        ~0.06 s instead of ~3.4 s for 51 lines sent one by one). Returns all that was read.

        Raises:
            CandidateError: fewer prompts than lines within 10 s + 0.2 s a line.
            ConnectError: the session is lost.
        """
        if self._conn is None:
            raise ConnectError("session is not open", host=self.name, phase="apply")
        prompt = re.compile(self._prompt())
        deadline, out = time.monotonic() + 10.0 + 0.2 * len(lines), ""
        self._sent += 1
        try:
            self._conn.write_channel("".join(line + "\n" for line in lines))
            while len(prompt.findall(out)) < len(lines):
                if time.monotonic() > deadline:
                    raise CandidateError(f"staging {len(lines)} lines: {len(prompt.findall(out))} prompts came back",
                                         host=self.name, phase="apply")
                chunk = self._conn.read_channel()
                out += chunk
                if not chunk:
                    time.sleep(0.005)
        except self._ses.ERRORS as exc:
            raise ConnectError(f"staging the candidate lost the session: {exc}", host=self.name, phase="apply") from exc
        return out
