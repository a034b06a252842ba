"""NVUE driver (NVIDIA Cumulus Linux 5.x) over netmiko ``cumulus_linux``.

Commands (Cumulus Linux 5.x NVUE reference, ``Config-Commands.md``; transcripts in
shared/cases/cli/nvue_*.txt): ``nv set`` per candidate line, ``nv config diff``,
``nv config apply [--confirm Ns] -y``, ``nv config apply <rev> --confirm-yes``,
``nv config revision -o json`` (a pending confirm has ``state: confirm``),
``nv config revision --applied -o json``, ``nv config detach``, ``nv config apply <rev> -y``
(rollback), ``nv config show -o commands``, ``nv show interface``, ``nv show qos roce``.

netmiko rules (shared/NOTES.md): ``send_command`` per line; never ``send_config_set`` or
``save_config`` (no config mode on NVUE; ``save_config`` waits on ``[y/N]``). Host keys are
checked against the given known_hosts file; an unknown key is a ConnectError.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import paramiko
from netmiko import ConnectHandler
from netmiko.exceptions import NetmikoBaseException

from tuning.errors import (CandidateError, CommandError, CommitConfirmError, CommitError, ConnectError,
                           NotSupportedError, ParseError, RollbackError)
from tuning.parsers import parse
from tuning.switch.base import Capabilities, RoceState, SwitchDriver, SwitchState

_ERROR = re.compile(r"^(Invalid Command:|Ambiguous Command:|Error:)", re.M)
_APPLIED = re.compile(r"applied \[rev_id: (\S+)\]")


class NvueDriver(SwitchDriver):
    """One NVUE switch session.

    Args:
        host: address (``127.0.0.1`` in the lab).  port: SSH port.  username: login user.
        key_file: private key for public-key login.  known_hosts: OpenSSH known_hosts to check the host key.
        name: inventory name used in errors (defaults to ``host``).
        apply_timeout_s: read timeout for ``nv config apply`` (seconds).
    """

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
        self._tx: dict[str, str | None] = {"before": None, "committed": None}

    # ----- session -------------------------------------------------------------------------
    def open(self) -> None:
        try:
            self._conn = ConnectHandler(
                device_type="cumulus_linux", host=self.host, port=self.port, username=self.username,
                use_keys=True, key_file=str(self.key_file) if self.key_file else None, ssh_strict=True,
                system_host_keys=False,
                alt_host_keys=True, alt_key_file=str(self.known_hosts), allow_agent=False)
        except (NetmikoBaseException, paramiko.SSHException, paramiko.hostkeys.InvalidHostKey, OSError,
                ValueError) as exc:
            raise ConnectError(f"cannot open an NVUE session on {self.host}:{self.port}: {exc}",
                               host=self.name, phase="connect") from exc

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.disconnect()
            except (NetmikoBaseException, paramiko.SSHException, OSError):
                pass
            self._conn = None

    def capabilities(self) -> Capabilities:
        return Capabilities(commit_confirm=True, replace=False, onbox_diff=True, rollback=True)

    def _send(self, command: str, *, phase: str, read_timeout: float = 10.0) -> str:
        """Run one command; an NVUE error line becomes CommandError (with the text as stderr)."""
        if self._conn is None:
            raise ConnectError("session is not open", host=self.name, phase=phase)
        try:
            out = self._conn.send_command(command, read_timeout=read_timeout, auto_find_prompt=False,
                                          expect_string=re.escape(self._conn.base_prompt) + r"[$#]\s*$")
        except (NetmikoBaseException, paramiko.SSHException, OSError) as exc:
            raise ConnectError(f"`{command}` lost the session: {exc}", host=self.name, phase=phase) from exc
        if _ERROR.search(out):
            raise CommandError(command, 1, out, host=self.name, phase=phase)
        return out

    # ----- reading ---------------------------------------------------------------------------
    def get_state(self) -> SwitchState:
        ifs = parse("nv-show-interface", self._send("nv show interface", phase="collect"))
        qos = parse("nv-show-qos-roce", self._send("nv show qos roce", phase="collect"))
        ports = {i.name: i.mtu for i in ifs.interfaces if i.type == "swp" and i.mtu is not None}
        return SwitchState(revision=self.current_revision(), ports=ports, roce=_roce_state(qos))

    def current_revision(self) -> str:
        data = self._json("nv config revision --applied -o json", phase="collect")
        try:
            return str(data["applied"]["additional-data"]["rev-id"])
        except (KeyError, TypeError) as exc:
            raise ParseError("nv config revision --applied", 0, "applied.additional-data.rev-id") from exc

    def running_config(self) -> str:
        out = self._send("nv config show -o commands", phase="collect")
        return out.strip("\n") + "\n" if out.strip() else ""

    def _json(self, command: str, *, phase: str) -> dict:
        out = self._send(command, phase=phase)
        try:
            return json.loads(out)
        except json.JSONDecodeError as exc:
            raise ParseError(command, 0, "JSON", out[:120]) from exc

    # ----- candidate -------------------------------------------------------------------------
    def load_candidate(self, config: str, *, replace: bool = False) -> None:
        if replace:
            raise NotSupportedError("NVUE driver merges only (replace=False)", host=self.name, phase="apply")
        for line in config.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if not re.match(r"nv (set|unset) ", line):
                raise CandidateError(f"not an `nv set`/`nv unset` line: {line!r}", host=self.name, phase="apply")
            try:
                self._send(line, phase="apply")
            except CommandError as exc:
                raise CandidateError(f"rejected `{line}`: {exc.stderr.strip()}", host=self.name, phase="apply") from exc

    def compare(self) -> str:
        out = self._send("nv config diff", phase="plan")
        return out.strip("\n") + "\n" if out.strip() else ""

    def discard(self) -> None:
        self._send("nv config detach", phase="apply")

    # ----- transaction -----------------------------------------------------------------------
    def commit(self, *, confirm_within_s: int | None = None, message: str = "") -> str:
        if self.has_pending_commit():
            raise CommitError("a commit-confirm is already pending", host=self.name, phase="apply")
        before = self.current_revision()
        if not self.compare():
            return before
        cmd = "nv config apply -y" if confirm_within_s is None else f"nv config apply --confirm {int(confirm_within_s)}s -y"
        try:
            out = self._send(cmd, phase="apply", read_timeout=self.apply_timeout_s)
        except CommandError as exc:
            raise CommitError(f"`{cmd}` failed: {exc.stderr.strip()}", host=self.name, phase="apply") from exc
        m = _APPLIED.search(out)
        if not m:
            raise CommitError(f"`{cmd}` printed no 'applied [rev_id: N]': {out.strip()[:200]!r}",
                              host=self.name, phase="apply")
        self._tx = {"before": before, "committed": m.group(1)}
        return m.group(1)

    def _pending_confirms(self) -> list[str]:
        data = self._json("nv config revision -o json", phase="apply")
        return [rev for rev, v in data.items() if isinstance(v, dict) and v.get("state") == "confirm"]

    def has_pending_commit(self) -> bool:
        return bool(self._pending_confirms())

    def confirm(self) -> None:
        pending = self._pending_confirms()
        rev = self._tx["committed"] if self._tx["committed"] in pending else (pending[0] if pending else None)
        if rev is None:
            raise CommitConfirmError("no commit-confirm is pending (expired or rolled back?)",
                                     host=self.name, phase="confirm")
        try:
            self._send(f"nv config apply {rev} --confirm-yes", phase="confirm")
        except CommandError as exc:
            raise CommitConfirmError(f"confirming revision {rev} failed: {exc.stderr.strip()}",
                                     host=self.name, phase="confirm") from exc

    def rollback(self) -> None:
        try:
            pending = self._pending_confirms()
            if pending:
                self._send(f"nv config apply {pending[0]} --confirm-no", phase="restore")
                return
        except (CommandError, ConnectError, ParseError) as exc:
            raise RollbackError(f"rollback failed: {exc}", host=self.name, phase="restore") from exc
        before = self._tx["before"]
        if before is None:
            raise RollbackError("nothing to roll back: no commit in this session", host=self.name, phase="restore")
        self.rollback_to(before)

    def rollback_to(self, revision: str) -> None:
        try:
            self._send(f"nv config apply {revision} -y", phase="restore", read_timeout=self.apply_timeout_s)
        except (CommandError, ConnectError) as exc:
            raise RollbackError(f"re-applying revision {revision} failed: {exc}", host=self.name, phase="restore") from exc


def _roce_state(qos) -> RoceState:  # type: ignore[no-untyped-def]
    """RoceState from the ``nv-show-qos-roce`` parser's result (operational column, applied enable)."""
    op, ap = qos.operational, qos.applied
    enabled = (ap.enable or op.enable or "off") in ("on", "enabled")
    mode = op.mode or ap.mode
    byte = lambda q: None if q is None else int(round(q.value))  # noqa: E731
    return RoceState(
        enabled=enabled, mode=mode if enabled else None,
        pfc_priority=op.pfc_priorities[0] if op.pfc_priorities else None,
        trust=",".join(op.trust_mode) if op.trust_mode else None,
        ecn_tcs=tuple(op.ecn_enabled_tcs or ()), ecn_min_bytes=byte(op.min_threshold),
        ecn_max_bytes=byte(op.max_threshold), dscp_to_switch_priority=dict(qos.dscp2sp))
