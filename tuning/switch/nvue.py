"""NVUE driver (NVIDIA Cumulus Linux 5.x) over netmiko ``cumulus_linux``.

Commands (Cumulus Linux 5.x NVUE reference, ``Config-Commands.md``; transcripts in
shared/cases/cli/nvue_*.txt): ``nv set`` per candidate line, ``nv config diff``,
``nv config apply [--confirm Ns]`` answered at its ``[y/N]`` question (:meth:`NvueDriver._asked_apply`),
``nv config apply <rev> --confirm-yes``,
``nv config revision -o json`` (a pending confirm has ``state: confirm``),
``nv config revision --applied -o json``, ``nv config detach``, ``nv config apply <rev> -y``
(rollback), ``nv config show -o commands``, ``nv show interface``, ``nv show qos roce``; after a
confirm and a restore, ``nv config diff startup applied`` and ``nv config save`` where the startup
differs (:mod:`tuning.switch.nvue_startup`: CL up to 5.8 does not save on apply).

netmiko rules (shared/NOTES.md): ``send_command`` per command, the candidate written in one
``write_channel``; never ``send_config_set`` or ``save_config`` (no config mode on NVUE;
``save_config`` waits on ``[y/N]``). Host keys are checked against the given known_hosts file;
an unknown key is a ConnectError. Which texts count as success or failure:
:mod:`tuning.switch.nvue_text`.
"""

from __future__ import annotations

import json
import re

from tuning.errors import (CandidateError, CommandError, CommitConfirmError, CommitError, ConnectError,
                           NotSupportedError, ParseError, RollbackError, TuningError)
from tuning.parsers import parse
from tuning.switch import nvue_keys, nvue_text as text
from tuning.switch.base import Capabilities, RoceState, SwitchState, as_step_error
from tuning.switch.cli import CliDriver, CliTimeout, Staged
from tuning.switch.nvue_startup import NvueStartup

class NvueDriver(NvueStartup, CliDriver):
    """One NVUE switch session.

    Every command is checked for its own success text and for the failure texts of
    :mod:`tuning.switch.nvue_text`; every transaction step (commit, confirm, reject,
    rollback) is read back from the revision list before it counts.

    Args: those of :class:`tuning.switch.cli.CliDriver`;
        apply_timeout_s: read timeout of ``nv config apply`` in all its forms (apply, confirm,
            reject, rollback), seconds; after it runs out the driver waits as long again for the
            prompt, then reopens the session, and decides only on the state read from the device.
    """

    @staticmethod
    def config_settings(text: str) -> dict[str, str]:
        """``nv set`` lines as flat settings (:mod:`tuning.switch.nvue_keys`)."""
        return {nvue_keys.flat_key(p): v for p, v in nvue_keys.command_leaves(text).items()}

    @staticmethod
    def diff_changes(diff: str, running: str) -> dict[str, tuple[str | None, str | None]]:
        """``nv config diff`` output as flat changes (:func:`tuning.switch.nvue_keys.changes_of_diff`)."""
        return nvue_keys.changes_of_diff(diff, running)

    change_tags = staticmethod(nvue_keys.change_tags)
    template = "nvue/switch.j2"  # `nv set` lines (Cumulus Linux 5.x NVUE)
    config_suffix = "nvue"

    device_type, os_name = "cumulus_linux", "NVUE"
    #: (sends before it, the revision table) of the last ``nv config revision -o json`` read
    _states: tuple[int, dict[str, str]] | None = None

    def capabilities(self) -> Capabilities:
        return Capabilities(commit_confirm=True, replace=False, onbox_diff=True, rollback=True)

    def _failure(self, out: str) -> str | None:
        """A failure text of :mod:`tuning.switch.nvue_text` (``Invalid Command: ...``, ``Error: ...``)."""
        return text.failure(out)

    def _apply_cmd(self, command: str, *, phase: str, error: type[TuningError], until: str | None = None,
                   said: str | None = None) -> str | None:
        """Run an ``nv config apply`` form (or the answer to its question) with the long timeout;
        ``until``: a question that also ends its answer (:meth:`CliDriver._send`); ``said``: how
        errors name the command (default ``command``; an answer names the apply it answers).

        Returns:
            Its output; None when it timed out (the session is then reopened, so the caller
            reads the device's state before deciding).

        Raises:
            ``error`` naming the device's failure text; also when the session was cut while the
            command ran, then with ``extent_unknown = True`` (whether the switch acted on it is
            read from the switch by whoever restores it, over a new session).
        """
        try:
            out = self._send(command, phase=phase, read_timeout=self.apply_timeout_s, until=until)
        except CommandError as exc:
            raise error(f"`{said or command}` failed: {exc.stderr}", host=self.name, phase=phase) from exc
        except CliTimeout:
            out = self._late_output(until)
            if out is None:  # still silent: a new session reads what the device now holds
                self.close()
                self.open()
                return None
        except ConnectError as exc:
            lost = exc.message.replace(f"`{command}`", f"`{said}`", 1) if said else exc.message
            err = error(f"{lost}; whether the switch acted on it is unknown", host=self.name, phase=phase)
            err.extent_unknown = True  # type: ignore[attr-defined]
            raise err from exc
        why = text.failure(out)
        if why:
            raise error(f"`{said or command}` failed: {why}", host=self.name, phase=phase)
        return out

    def _late_output(self, until: str | None = None) -> str | None:
        """Wait once more (``apply_timeout_s``) on the same session for the prompt (or ``until``, a
        question); None if it stays silent."""
        try:
            return self._conn.read_until_pattern(pattern=self._prompt() + (f"|{until}" if until else ""),
                                                 read_timeout=self.apply_timeout_s)
        except self._ses.ERRORS:
            return None

    # ----- reading ---------------------------------------------------------------------------
    def get_state(self) -> SwitchState:
        ifs = parse("nv-show-interface", self._send("nv show interface", phase="collect"))
        qos = parse("nv-show-qos-roce", self._send("nv show qos roce", phase="collect"))
        ports = {i.name: i.mtu for i in ifs.interfaces if i.type == "swp" and i.mtu is not None}
        self.down_ports = {i.name: "admin down" if i.admin_status == "down" else "oper down"
                           for i in ifs.interfaces if i.type == "swp" and "down" in (i.state, i.admin_status)}
        return SwitchState(revision=self.current_revision(), ports=ports, roce=_roce_state(qos))

    def current_revision(self) -> str:
        """The applied revision: ``rev-id`` of ``nv config revision --applied -o json`` when the
        device prints that key (no source documents it), else the revision table."""
        data = self._json("nv config revision --applied -o json", phase="collect",
                          read_timeout=self.apply_timeout_s)
        rev = (data.get("applied") or {}).get("additional-data", {}).get("rev-id") if isinstance(data, dict) else None
        if rev is None:
            table = self._send("nv config revision", phase="collect", read_timeout=self.apply_timeout_s)
            rev = text.applied_from_table(text.revision_rows(table))
        self._seen = str(rev)
        return self._seen

    def revision_states(self) -> dict[str, str]:
        """Revision id -> state (``confirm`` while a commit-confirm waits) from ``nv config revision -o json``."""
        data = self._json("nv config revision -o json", phase="collect", read_timeout=self.apply_timeout_s)
        states = {str(rev): str(v.get("state")) for rev, v in data.items() if isinstance(v, dict)}
        self._states = (self._sent, states)
        return states

    def _latest_states(self) -> dict[str, str]:
        """The revision table as this session read it last when it has sent the switch nothing since
        (a push's :meth:`next_revision` read, just before its commit checks for a pending confirm),
        else :meth:`revision_states` read now."""
        if self._states is not None and self._states[0] == self._sent:
            return self._states[1]
        return self.revision_states()

    def running_config(self) -> str:
        out = self._send("nv config show -o commands", phase="collect")
        if not text.is_commands(out):
            raise ParseError("nv config show -o commands", 0, "only `nv set` lines", out.strip()[:120])
        return out.strip("\n") + "\n" if out.strip() else ""

    def _json(self, command: str, *, phase: str, read_timeout: float = 10.0) -> dict:
        out = self._send(command, phase=phase, read_timeout=read_timeout)
        try:
            data = json.loads(out)
        except json.JSONDecodeError as exc:
            raise ParseError(command, 0, "JSON", out[:120]) from exc
        if not isinstance(data, dict):
            raise ParseError(command, 0, "a JSON object", out[:120])
        return data

    # ----- candidate -------------------------------------------------------------------------
    def load_candidate(self, config: str, *, replace: bool = False) -> None:
        """Stage every ``nv set``/``nv unset`` line, all written at once and read back until one
        prompt per line (shared/NOTES.md: ~0.06 s instead of ~3.4 s for 51 lines). Their echo may
        come back cut and repeated (:func:`tuning.switch.nvue_text.residue`); only text of the
        switch's own is an error.

        Raises:
            CandidateError: a line that is not ``nv set``/``nv unset``, a failure text (naming the
                line), anything else printed, or fewer prompts than lines in time.
        """
        if replace:
            raise NotSupportedError("NVUE driver merges only (replace=False)", host=self.name, phase="apply")
        lines = [line.strip() for line in config.splitlines() if line.strip() and not line.strip().startswith("#")]
        bad = [line for line in lines if not re.fullmatch(r"nv (set|unset) [^\n;|&`$<>]+", line)]
        if bad:
            raise CandidateError(f"not an `nv set`/`nv unset` line: {bad[0]!r}", host=self.name, phase="apply")
        if lines:
            out = self._batch(lines)
            why = text.failure(out)
            if why:
                raise CandidateError(f"rejected `{text.culprit(lines, why)}`: {why}", host=self.name, phase="apply")
            extra = text.residue(out, lines, self._conn.base_prompt)
            if extra:
                raise CandidateError(f"`nv set` printed {extra[:120]!r} (it prints nothing on success)",
                                     host=self.name, phase="apply")
            # staged on the applied revision read last (a later load changes the diff)
            if self._stage is None:
                self._stage = Staged("pending", self._seen)
            self._stage.diff = None

    def compare(self) -> str:
        out = self._send("nv config diff", phase="plan")
        if not text.is_diff(out):
            raise ParseError("nv config diff", 0, "nothing or a '- set:' / '- unset:' YAML list", out.strip()[:120])
        diff = out.strip("\n") + "\n" if out.strip() else ""
        if self._stage is not None:
            self._stage.diff = diff  # kept for the commit (tuning.switch.cli.Staged)
        return diff

    def discard(self) -> None:
        """``nv config detach``, read back: the diff must be empty afterwards."""
        self._send("nv config detach", phase="apply")
        self._stage = None
        left = self.compare()
        if left:
            raise CommandError("nv config detach", 1, f"the diff is not empty afterwards: {left[:200]}",
                               host=self.name, phase="apply")

    # ----- transaction -----------------------------------------------------------------------
    def commit(self, *, confirm_within_s: int | None = None, message: str = "") -> str:
        """Apply the staged candidate; read back that the applied revision moved (and waits for a
        confirm when ``confirm_within_s``). Raises CommitError naming the device's text."""
        with as_step_error(CommitError, self.name, "apply"):
            return self._commit(confirm_within_s)

    def _commit(self, confirm_within_s: int | None) -> str:
        if "confirm" in self._latest_states().values():
            raise CommitError("a commit-confirm is already pending", host=self.name, phase="apply")
        before, stage = self.current_revision(), self._stage
        # the diff read since staging holds while the applied revision is still the one staged on
        if not (stage.diff if stage is not None and stage.diff is not None and stage.on == before else self.compare()):
            return before
        cmd = "nv config apply" if confirm_within_s is None else f"nv config apply --confirm {int(confirm_within_s)}s"
        out = self._asked_apply(cmd, before)
        printed, rev = text.applied_revision(out) if out is not None else (False, None)
        if out is not None and not printed:
            raise CommitError(f"`{cmd}` printed no 'applied [rev_id: N]': {out.strip()[:200]!r}",
                              host=self.name, phase="apply")
        now, states = self.current_revision(), self.revision_states()
        when = "" if out is not None else f" (no answer within {self.apply_timeout_s:g} s; read from the device)"
        if now == before or (rev is not None and rev != now):
            raise CommitError(f"`{cmd}`{when}: the applied revision is {now}, was {before}"
                              + (f", printed {rev}" if rev else "") + ": nothing committed", host=self.name, phase="apply")
        if confirm_within_s is not None and states.get(now) != "confirm":
            raise CommitError(f"`{cmd}`{when}: revision {now} is {states.get(now)!r}, not waiting for a confirm",
                              host=self.name, phase="apply")
        self._tx, self._stage = {"before": before, "committed": now}, None
        return now

    def _asked_apply(self, cmd: str, before: str) -> str | None:
        """Type ``cmd`` without ``-y`` and answer its ``Are you sure? [y/N]`` (:mod:`tuning.switch.nvue_text`):
        ``y``, unless its warning lists files NVUE manages that were edited by hand since the last save
        and :attr:`allow_overwrite_files` is False: then ``N``, the candidate is detached and the applied
        revision read back (still ``before``). An apply that asks nothing has applied already.

        Returns:
            The answer's output (the apply's own when it asked nothing); None after a timeout.

        Raises:
            CommitError: the refusal, naming the switch and the files (also as its ``overwrite_files``
                attribute), nothing applied; or as :meth:`_apply_cmd`.
        """
        out = self._apply_cmd(cmd, phase="apply", error=CommitError, until=text.ASK.pattern)
        if out is None or not text.ASK.search(out):
            return out
        answer = lambda yes: self._apply_cmd("y" if yes else "N", phase="apply", error=CommitError,  # noqa: E731
                                             said=f"{cmd}` answered `{'y' if yes else 'N'}")
        try:
            files = text.overwritten_files(out)
        except ParseError:
            answer(False)  # never leave the question open
            raise
        if not files or self.allow_overwrite_files:
            return answer(True)
        answer(False)
        self.discard()
        now = self.current_revision()
        err = CommitError(f"refused: `{cmd}` on {self.name} WILL overwrite {len(files)} file(s) edited by hand since "
                          f"the last save ({', '.join(files)}); answered N" + (
                              f", nothing applied (revision {before})" if now == before else
                              f", yet the applied revision moved from {before} to {now}")
                          + "; pass --allow-overwrite-files to let the switch overwrite them",
                          host=self.name, phase="apply")
        err.overwrite_files = files  # type: ignore[attr-defined]
        err.revision = None if now == before else now  # type: ignore[attr-defined]
        raise err

    def _pending_confirms(self) -> list[str]:
        return [rev for rev, state in self.revision_states().items() if state == "confirm"]

    def has_pending_commit(self) -> bool:
        return bool(self._pending_confirms())

    def pending_commit(self) -> tuple[str, str | None] | None:
        """``(revision, parent)`` of the pending commit-confirm: the ``confirm`` row of
        ``nv config revision -o json`` and :meth:`applied_parent`."""
        pending = self._pending_confirms()
        if not pending:
            return None
        return pending[0], self.applied_parent()

    def applied_parent(self) -> str | None:
        """The ``parent-revision-id`` that ``nv config revision --applied -o json`` gives the
        applied revision (None when the switch does not print one)."""
        data = self._json("nv config revision --applied -o json", phase="collect", read_timeout=self.apply_timeout_s)
        extra = (data.get("applied") or {}).get("additional-data") if isinstance(data.get("applied"), dict) else None
        parent = extra.get("parent-revision-id") if isinstance(extra, dict) else None
        return None if parent is None else str(parent)

    def next_revision(self) -> str | None:
        """One past the highest numeric id of ``nv config revision -o json``: NVUE numbers its
        revisions in sequence (``applied [rev_id: N]``; shared/cases/cli/nvue_config_revision__table.txt)."""
        ids = [int(r) for r in self.revision_states() if r.isdigit()]
        return str(max(ids) + 1) if ids else None

    def confirm(self, revision: str | None = None) -> None:
        """Keep ``revision`` (default: this session's commit, else the pending one) and prove it:
        afterwards it must be the applied revision, no longer wait for a confirm, and be the startup
        configuration (:meth:`save_startup`: saved where the switch did not save it on apply).

        Raises:
            CommitConfirmError: nothing to confirm, the device's failure text, or the revision is
                not the applied one (the confirm window ran out: the switch went back).
        """
        with as_step_error(CommitConfirmError, self.name, "confirm"):
            self._confirm(revision or self._tx["committed"])

    def _confirm(self, rev: str | None) -> None:
        states = self.revision_states()
        if rev is None:
            pending = [r for r, s in states.items() if s == "confirm"]
            if not pending:
                raise CommitConfirmError("no commit-confirm is pending (expired or rolled back?)",
                                         host=self.name, phase="confirm")
            rev = pending[0]
        if states.get(rev) == "confirm":
            self._apply_cmd(f"nv config apply {rev} --confirm-yes", phase="confirm", error=CommitConfirmError)
            states = self.revision_states()
        applied = self.current_revision()
        if applied != rev or states.get(rev) == "confirm":
            raise CommitConfirmError(
                f"revision {rev} is not kept: the applied revision is {applied} and {rev} is "
                f"{states.get(rev, 'unknown')!r} (the confirm window ran out or the switch went back)",
                host=self.name, phase="confirm")
        self.save_startup(rev, phase="confirm", error=CommitConfirmError)

    def rollback(self) -> None:
        """Reject a pending commit-confirm (``--confirm-no``), else re-apply the revision from before
        this session's commit; read back either way, and the restored revision made the startup
        configuration (:meth:`save_startup`). Raises RollbackError."""
        try:
            pending = self._pending_confirms()
        except (CommandError, ConnectError, ParseError) as exc:
            raise RollbackError(f"rollback failed: {exc}", host=self.name, phase="restore") from exc
        if pending:
            rev = pending[0]
            self._apply_cmd(f"nv config apply {rev} --confirm-no", phase="restore", error=RollbackError)
            try:
                left, applied = self._pending_confirms(), self.current_revision()
            except (CommandError, ConnectError, ParseError) as exc:
                raise RollbackError(f"reading back after rejecting {rev}: {exc}", host=self.name, phase="restore") from exc
            if rev in left or applied == rev:
                raise RollbackError(f"rejecting revision {rev} left it applied ({applied}, pending: {left})",
                                    host=self.name, phase="restore")
            self.save_startup(applied, phase="restore", error=RollbackError)
            return
        before = self._tx["before"]
        if before is None:
            raise RollbackError("nothing to roll back: no commit in this session", host=self.name, phase="restore")
        self.rollback_to(before)

    def rollback_to(self, revision: str) -> None:
        cmd = f"nv config apply {revision} -y"
        try:
            out = self._apply_cmd(cmd, phase="restore", error=RollbackError)
            if out is not None and not text.applied_revision(out)[0]:
                raise RollbackError(f"`{cmd}` printed no 'applied [rev_id: N]': {out.strip()[:200]!r}",
                                    host=self.name, phase="restore")
            now = self.current_revision()
        except (CommandError, ConnectError, ParseError) as exc:
            raise RollbackError(f"re-applying revision {revision} failed: {exc}", host=self.name, phase="restore") from exc
        if now != str(revision):
            raise RollbackError(f"re-applying revision {revision}: the applied revision is {now}",
                                host=self.name, phase="restore")
        self.save_startup(str(revision), phase="restore", error=RollbackError)


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
