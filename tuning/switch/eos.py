"""Arista EOS driver over netmiko ``arista_eos`` (SSH CLI), configuration sessions.

Why the SSH CLI and not eAPI: the lab serves the CLI faithfully from the published transcripts
(shared/cases/cli/eos__*.txt: prompts, session diffs, commit timers, error texts), while no eAPI
transcript of these commands exists to serve; the commands are the same ones NAPALM's EOS
driver sends through eAPI (``napalm/eos/eos.py``).

The transaction (NAPALM's EOS driver; shared/cases/cli/INDEX-switch.md):

- stage: ``configure session fabtune-<revision>``, ``abort``, ``configure session fabtune-<revision>``,
  the candidate's lines, ``end``, typed in one send (a session's configuration is a copy of running
  plus the lines: a merge; the name says which revision it was staged on, so a commit nobody
  journaled is recognised as the run's: :meth:`EosDriver.applied_parent`);
- diff: ``show session-config named NAME diffs`` (a unified diff against running);
- before a commit: ``copy running-config flash:fabtune-<revision>.cfg``, the configuration a
  rollback returns to (NAPALM: ``flash:rollback-0``);
- commit: ``configure session NAME commit timer HH:MM:SS`` (EOS rolls back by itself unless
  confirmed) or ``configure session NAME commit``; confirm: ``configure session NAME commit``;
  reject a pending commit: ``configure session NAME abort``; roll back a kept one:
  ``configure replace flash:fabtune-<revision>.cfg``. A kept configuration (confirmed, or
  restored) is saved for boot with ``write memory``.

EOS numbers no revisions: a revision id is the digest of the running configuration
(:func:`tuning.switch.eos_keys.digest`), so the journal's ``revision_before`` names the checkpoint
file that restores it, and the journal holds no configuration text. A commit timer is read where
each release reports it: before 4.32 a session in state ``pendingCommitTimer``, from 4.32 the
top-level ``commitTimerSessionName`` of ``show configuration sessions detail | json``.
"""

from __future__ import annotations

import json
import re

from tuning.errors import (CandidateError, CommandError, CommitConfirmError, CommitError, ConnectError,
                           InputError, NotSupportedError, ParseError, RollbackError, TuningError)
from tuning.switch import eos_keys
from tuning.switch.base import Capabilities, RoceState, SwitchState, as_step_error
from tuning.switch.cli import CliDriver, CliTimeout, Staged

#: a CLI error: one line starting with ``% `` in place of output (eos__errors_invalid_incomplete_ambiguous.txt)
_FAILURE = re.compile(r"^% .*$", re.M)
_COPIED = "Copy completed successfully."


class EosDriver(CliDriver):
    """One Arista EOS switch session (SSH CLI, privileged exec; configuration sessions).

    Args: those of :class:`tuning.switch.cli.CliDriver` (``apply_timeout_s``: the read timeout of a
    commit, confirm, abort or replace).
    """

    template = "eos/switch.j2"  # EOS configuration lines (interface / qos map sections)
    config_suffix = "eos"
    change_tags = staticmethod(eos_keys.change_tags)

    @staticmethod
    def config_settings(text: str) -> dict[str, str]:
        """EOS configuration text as flat settings (:func:`tuning.switch.eos_keys.settings`)."""
        return eos_keys.settings(text)

    @staticmethod
    def diff_changes(diff: str, running: str) -> dict[str, tuple[str | None, str | None]]:
        """A session diff as flat changes (:func:`tuning.switch.eos_keys.changes_of_diff`)."""
        return eos_keys.changes_of_diff(diff, running)

    @classmethod
    def render_config(cls, switch: dict) -> str:
        """The template's text, after checking what EOS's syntax can say: ECN thresholds in whole
        kbytes (1000 bytes) and the lossless traffic class equal to the PFC priority (the template
        maps traffic class T to priority T, EOS's default).

        Raises:
            InputError: naming the key and the allowed values; nothing is rendered.
        """
        r = switch.get("roce")
        if r:
            for key in ("ecn_min_bytes", "ecn_max_bytes"):
                if r[key] % 1000:
                    raise InputError(switch["name"], f"roce.{key}", f"{r[key]} bytes is not whole kbytes on EOS "
                                     "(random-detect ecn ... kbytes); allowed: a multiple of 1000")
            if r["mode"] == "lossless" and r["lossless_tc"] != r["pfc_priority"]:
                raise InputError(switch["name"], "roce.lossless_tc", f"{r['lossless_tc']} differs from pfc_priority "
                                 f"{r['pfc_priority']}; on EOS the no-drop priority's traffic class is the priority")
        return super().render_config(switch)

    device_type, os_name = "arista_eos", "EOS"

    def _after_open(self) -> None:
        self._conn.enable()  # privileged exec (eos__prompts_modes_session_prep.txt: `leaf1>` -> `leaf1#`)

    def capabilities(self) -> Capabilities:
        return Capabilities(commit_confirm=True, replace=False, onbox_diff=True, rollback=True)

    def _prompt(self) -> str:
        """Any EOS prompt of this switch: ``leaf1#``, ``leaf1(config-s-fabtun-if-Et1)#``, ``spine1(s1)#``."""
        return re.escape(self._conn.base_prompt) + r"(?:\(s\d\))?(?:\([^)\n]*\))?[>#]"

    def _failure(self, out: str) -> str | None:
        """A ``% `` line: EOS's error form (``% Invalid input (at token 2: '9')``)."""
        m = _FAILURE.search(out)
        return m.group(0) if m else None

    def _step(self, command: str, *, phase: str, error: type[TuningError]) -> str | None:
        """A transaction command with the long timeout. Returns its output, or None when it printed
        no prompt in time (the session is reopened: the caller reads the switch before deciding).
        Raises ``error``: the switch's text, or a lost session (``extent_unknown``)."""
        try:
            return self._send(command, phase=phase, read_timeout=self.apply_timeout_s)
        except CommandError as exc:
            raise error(f"`{command}` failed: {exc.stderr}", host=self.name, phase=phase) from exc
        except CliTimeout:
            self.close()
            self.open()
            return None
        except ConnectError as exc:
            err = error(f"{exc.message}; whether the switch acted on it is unknown", host=self.name, phase=phase)
            err.extent_unknown = True  # type: ignore[attr-defined]
            raise err from exc

    def _json(self, command: str, *, phase: str) -> dict:
        out = self._send(f"{command} | json", phase=phase)
        try:
            data = json.loads(out)
        except json.JSONDecodeError as exc:
            raise ParseError(f"{command} | json", 0, "a JSON object", out[:120]) from exc
        if not isinstance(data, dict):
            raise ParseError(f"{command} | json", 0, "a JSON object", out[:120])
        return data

    # ----- reading ---------------------------------------------------------------------------
    def running_config(self) -> str:
        out = self._send("show running-config", phase="collect")
        if "! Command: show running-config" not in out:
            raise ParseError("show running-config", 0, "EOS's `! Command: show running-config` header", out[:120])
        self._running = out.strip("\n") + "\n"
        self._seen = eos_keys.digest(self._running)
        return self._running

    def current_revision(self) -> str:
        """The digest of the running configuration (:func:`tuning.switch.eos_keys.digest`), read now."""
        self.running_config()
        return self._seen

    def get_state(self) -> SwitchState:
        data = self._json("show interfaces", phase="collect").get("interfaces", {})
        ports = {n: int(v["mtu"]) for n, v in data.items() if n.startswith("Ethernet") and isinstance(v, dict)
                 and isinstance(v.get("mtu"), int)}
        running = self.running_config()
        return SwitchState(revision=self._seen, ports=ports, roce=_roce_state(eos_keys.settings(running)), running=running)

    def _sessions(self) -> dict:
        return self._json("show configuration sessions detail", phase="collect")

    def _timer_session(self) -> str | None:
        """The session under a running commit timer: ``commitTimerSessionName`` (EOS 4.32+), else
        the session in state ``pendingCommitTimer`` (before 4.32; napalm#2166)."""
        data = self._sessions()
        if data.get("commitTimerSessionName"):
            return str(data["commitTimerSessionName"])
        return next((n for n, s in (data.get("sessions") or {}).items()
                     if isinstance(s, dict) and s.get("state") == "pendingCommitTimer"), None)

    def _pending_sessions(self) -> list[str]:
        """Sessions staged and not committed (state ``pending``)."""
        return [n for n, s in (self._sessions().get("sessions") or {}).items()
                if isinstance(s, dict) and s.get("state") == "pending"]

    def has_pending_commit(self) -> bool:
        return self._timer_session() is not None

    def next_revision(self) -> str | None:
        """The revision the staged session will make: the digest of running patched with the
        session's diff (:func:`tuning.switch.eos_keys.patched`), both as this session read them last
        (read now where it has not: a push has just read both to check its plan); None when nothing
        is staged. A commit refuses a running configuration that moved since staging."""
        if self._stage is None:
            return None
        diff = self._stage.diff if self._stage.diff is not None else self.compare()
        running = self._running if self._running is not None else self.running_config()
        return eos_keys.digest(eos_keys.patched(diff, running)) if diff else None

    def applied_parent(self) -> str | None:
        """The revision a commit under a running timer was made on: fabtune names its sessions
        ``fabtune-<revision staged on>`` (:meth:`load_candidate`); None for any other session, or
        when no timer runs (EOS keeps no history of revisions)."""
        m = re.fullmatch(r"fabtune-(cfg-[0-9a-f]{12})", self._timer_session() or "")
        return m.group(1) if m else None

    # ----- candidate -------------------------------------------------------------------------
    def load_candidate(self, config: str, *, replace: bool = False) -> None:
        """Type the session's opening, every line of ``config`` and ``end`` at once (one round trip),
        and read until one prompt per line came back. A first load opens the session ``fabtune-<the
        revision it is staged on>`` (the running configuration this session read last, read now
        where none was: every plan and push reads the switch's state first), aborts whatever a push
        cut short left in a session of that name (``abort`` inside it: EOS then leaves the session,
        eos__prompts_modes_session_prep.txt) and opens it again, empty; a later load adds to it.

        Raises:
            CandidateError: a line EOS refused (``% Invalid input ...``, naming the line; the
                session is aborted), or fewer prompts than lines in time.
        """
        if replace:
            raise NotSupportedError("EOS driver merges only (replace=False)", host=self.name, phase="apply")
        lines = [ln.strip() for ln in config.splitlines() if ln.strip() and not ln.strip().startswith("!")]
        bad = [ln for ln in lines if re.search(r"[;|`$<>\\]", ln)]
        if bad:
            raise CandidateError(f"not an EOS configuration line: {bad[0]!r}", host=self.name, phase="apply")
        if self._stage is None:
            # named after the revision it was staged on: a commit of it that a cut session or a
            # killed run never journaled still says which snapshot it sits on (applied_parent)
            on = self._seen or self.current_revision()
            self._stage = Staged(f"fabtune-{on}", on)
            opening = [f"configure session {self._stage.name}", "abort", f"configure session {self._stage.name}"]
        else:
            opening, self._stage.diff = [f"configure session {self._stage.name}"], None
        sent = [*opening, *lines, "end"]
        out = self._batch(sent)
        why = _FAILURE.search(out)
        if why:
            # line k answers between the prompts k-1 and k (the echo of typed-ahead lines comes anywhere)
            culprit = sent[min(len(re.findall(self._prompt(), out[:why.start()])), len(sent) - 1)]
            self.discard()
            raise CandidateError(f"rejected `{culprit}`: {why.group(0)}", host=self.name, phase="apply")

    def compare(self) -> str:
        """``show session-config named NAME diffs``, read now (and kept for the commit: :class:`Staged`)."""
        if self._stage is None:
            return ""
        out = self._send(f"show session-config named {self._stage.name} diffs", phase="plan")
        body = [ln for ln in out.splitlines() if ln.strip()]
        if body and not (body[0].startswith("--- ") and all(ln[:1] in " +-@\\" for ln in body)):
            raise ParseError("show session-config diffs", 0, "nothing or a unified diff", out.strip()[:120])
        self._stage.diff = out.strip("\n") + "\n" if any(ln.startswith("@@") for ln in body) else ""
        return self._stage.diff

    def discard(self) -> None:
        """Abort this driver's session and every other ``fabtune-`` session left pending by a push
        cut short (the run holds the inventory's lock); read back: none is left."""
        stale = [n for n in self._pending_sessions() if n.startswith("fabtune-")]
        for name in stale:
            self._send(f"configure session {name} abort", phase="apply")
        self._stage = None
        left = [n for n in self._pending_sessions() if n in stale] if stale else []  # each abort read back
        if left:
            raise CommandError("configure session abort", 1, f"sessions still pending: {', '.join(left)}",
                               host=self.name, phase="apply")

    # ----- transaction -----------------------------------------------------------------------
    def commit(self, *, confirm_within_s: int | None = None, message: str = "") -> str:
        """Save the running configuration as the rollback checkpoint, commit the session (with
        EOS's commit timer when ``confirm_within_s``), read back that the running configuration
        moved (and waits on the timer). Raises CommitError naming the switch's text."""
        with as_step_error(CommitError, self.name, "apply"):
            return self._commit(confirm_within_s)

    def _commit(self, confirm_within_s: int | None) -> str:
        if self.has_pending_commit():
            raise CommitError("a commit timer is already running", host=self.name, phase="apply")
        before, stage = self.current_revision(), self._stage
        if stage is None:
            return before
        if before != stage.on:  # the session's name would give a wrong parent, its diff may be stale
            self.discard()
            raise CandidateError(f"the running configuration moved since session {stage.name} was staged on "
                                 f"it (now {before}): nothing committed; plan again", host=self.name, phase="apply")
        if not (stage.diff if stage.diff is not None else self.compare()):
            return before
        self._checkpoint(before)
        timer = "" if confirm_within_s is None else " timer " + _hms(confirm_within_s)
        cmd = f"configure session {stage.name} commit{timer}"
        out = self._step(cmd, phase="apply", error=CommitError)
        now, pending = self.current_revision(), self.has_pending_commit()
        when = "" if out is not None else f" (no answer within {self.apply_timeout_s:g} s; read from the device)"
        if now == before:
            raise CommitError(f"`{cmd}`{when}: the running configuration did not change: nothing committed",
                              host=self.name, phase="apply")
        if timer and not pending:
            raise CommitError(f"`{cmd}`{when}: no commit timer runs after it", host=self.name, phase="apply")
        if not timer:
            self._save("apply")
        self._tx, self._stage = {"before": before, "committed": now}, None
        return now

    def _checkpoint(self, revision: str) -> None:
        out = self._send(f"copy running-config {_checkpoint(revision)}", phase="apply")
        if _COPIED not in out:
            raise CommitError(f"saving the rollback checkpoint printed {out.strip()[:120]!r}, not {_COPIED!r}",
                              host=self.name, phase="apply")

    def _save(self, phase: str) -> None:
        """``write memory``: the kept configuration survives a reboot. Raises CommandError."""
        out = self._send("write memory", phase=phase)
        if _COPIED not in out:
            raise CommandError("write memory", 1, f"printed {out.strip()[:120]!r}, not {_COPIED!r}",
                               host=self.name, phase=phase)

    def confirm(self, revision: str | None = None) -> None:
        """Stop the commit timer (``configure session NAME commit``), prove ``revision`` (default:
        this session's commit) is the running configuration, and save it for boot.

        Raises:
            CommitConfirmError: the switch's text, or the running configuration is another (the
                timer ran out: the switch went back), naming both.
        """
        with as_step_error(CommitConfirmError, self.name, "confirm"):
            rev, name = revision or self._tx["committed"], self._timer_session()
            if name is not None:
                self._step(f"configure session {name} commit", phase="confirm", error=CommitConfirmError)
            now, left = self.current_revision(), self._timer_session()
            if rev is None or now != rev or left is not None:
                raise CommitConfirmError(f"revision {rev} is not kept: the running configuration is {now}"
                                         f"{f' and session {left} still waits on its timer' if left else ''} (the "
                                         "timer ran out or the switch went back)", host=self.name, phase="confirm")
            self._save("confirm")

    def rollback(self) -> None:
        """Abort the session under a commit timer (EOS restores the configuration from before it),
        else re-apply the revision from before this session's commit; read back either way."""
        with as_step_error(RollbackError, self.name, "restore"):
            name = self._timer_session()
            if name is None:
                if self._tx["before"] is None:
                    raise RollbackError("nothing to roll back: no commit in this session", host=self.name, phase="restore")
                return self.rollback_to(self._tx["before"])
            self._step(f"configure session {name} abort", phase="restore", error=RollbackError)
            now, left = self.current_revision(), self._timer_session()
            if left is not None or (self._tx["committed"] and now == self._tx["committed"]):
                raise RollbackError(f"aborting session {name} left it applied ({now}, timer: {left})",
                                    host=self.name, phase="restore")

    def rollback_to(self, revision: str) -> None:
        """``configure replace`` with the checkpoint saved before the commit that left ``revision``,
        read back (the running configuration's digest is ``revision``), then saved for boot."""
        with as_step_error(RollbackError, self.name, "restore"):
            self._step(f"configure replace {_checkpoint(revision)}", phase="restore", error=RollbackError)
            now = self.current_revision()
            if now != revision:
                raise RollbackError(f"replacing the configuration with {_checkpoint(revision)}: the running "
                                    f"configuration is {now}, not {revision}", host=self.name, phase="restore")
            self._save("restore")


def _hms(seconds: int) -> str:
    """``commit timer`` form of a window: 300 -> ``00:05:00`` (napalm: ``time.strftime("%H:%M:%S")``)."""
    h, rest = divmod(int(seconds), 3600)
    return f"{h:02d}:{rest // 60:02d}:{rest % 60:02d}"


def _checkpoint(revision: str) -> str:
    """The switch file that holds revision ``revision`` (checked: a journal's value reaches the CLI)."""
    if not re.fullmatch(r"cfg-[0-9a-f]{12}", revision):
        raise RollbackError(f"{revision!r} is not an EOS revision of fabtune (cfg- and 12 hex digits)", phase="restore")
    return f"flash:fabtune-{revision}.cfg"


def _roce_state(flat: dict[str, str]) -> RoceState:
    """RoceState of the first Ethernet port's QoS lines and the global DSCP map (bytes from kbytes)."""
    port = next((k.split("/")[1] for k in flat if k.startswith("port/Ethernet")), None)
    mine = {k.split("/", 2)[2]: v for k, v in flat.items() if port and k.startswith(f"port/{port}/")}
    prio = next((int(k.rsplit("/", 1)[1]) for k, v in mine.items() if k.startswith("pfc_priority/") and v == "no-drop"), None)
    ecn = sorted(int(k.split("/")[1]) for k in mine if k.startswith("txq/") and k.endswith("/ecn_min"))
    size = lambda v: None if v is None else int(v.split()[0]) * {"kbytes": 1000, "mbytes": 10**6}.get(v.split()[1], 1)  # noqa: E731
    lossless = mine.get("pfc") == "on" and prio is not None
    return RoceState(
        enabled=lossless or bool(ecn), mode="lossless" if lossless else "lossy" if ecn else None,
        pfc_priority=prio if lossless else None, trust={"cos": "pcp"}.get(mine.get("qos_trust", ""), mine.get("qos_trust")),
        ecn_tcs=tuple(ecn), ecn_min_bytes=size(mine.get(f"txq/{ecn[0]}/ecn_min")) if ecn else None,
        ecn_max_bytes=size(mine.get(f"txq/{ecn[0]}/ecn_max")) if ecn else None,
        dscp_to_switch_priority={int(k.split("/")[2]): int(v) for k, v in flat.items() if k.startswith("qos/dscp/")})
