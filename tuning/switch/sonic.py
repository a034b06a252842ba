"""Community SONiC driver over netmiko ``linux`` (SSH to the switch's bash; click CLI under sudo).

Why ``linux``: community SONiC logs into bash (``admin@<host>:~$``, shared/cases/cli/
sonic__ssh_login_banner_prompt.txt) and netmiko has no community-SONiC type (shared/NOTES.md);
``dell_sonic`` enters Enterprise SONiC's klish ``sonic-cli`` and ``cumulus_linux`` adds Cumulus's
``sudo`` handling; ``linux`` (netmiko's LinuxSSH) finds a bash prompt ending in ``$`` and nothing else.

The transaction (generic config updater, GCU; sonic-net/sonic-utilities config/main.py and
generic_config_updater/generic_updater.py; shared/cases/cli/INDEX-switch.md):

- stage: the rendered JSON patch written to ``/tmp/fabtune-<digest of the patch>.json-patch`` on the
  switch with a heredoc and read back by ``sha256sum`` of the file (coreutils), both in one send;
- diff: ``sudo config apply-patch --dry-run FILE``: its ``Patch Applier:   * [...]`` change lines
  (``converted into 0 changes.``: nothing to change). A dry run ends ``Patch applied successfully.``
  too: it is never a commit;
- before a commit: ``sudo config checkpoint fabtune-<revision>`` (``Checkpoint created successfully.``);
- SONiC has no commit-confirm: with a window fabtune arms a dead-man timer on the switch,
  ``sudo systemd-run --on-active=<s> --unit=fabtune-confirm-<revision> config rollback fabtune-<revision>``,
  which rolls back to the checkpoint unless disarmed (``sudo systemctl stop <unit>.timer``);
- the switch's own lock (beside the inventory's): ``sudo mkdir /run/lock/fabtune`` around a commit;
- commit: ``sudo config apply-patch FILE``: success only with ``Patch applied successfully.`` and
  exit status 0 (a failure prints its reason twice and exits 2, the running config unchanged:
  sonic__apply_patch_failure_yang_invalid_value.txt);
- every command whose exit status decides (the dry run, checkpoint, apply-patch, rollback, the
  lock's mkdir and rmdir, ``config save -y``) is sent as ``COMMAND; echo $?``: bash runs both, and
  the status is the last line of the one answer (one round trip, not two);
- confirm: disarm, read back (the revision is the committed one), ``sudo config save -y``;
- restore: ``sudo config rollback fabtune-<revision>`` (GCU's Config Replacer: a replace, never a
  reverse patch: GCU refuses a patch that empties a table), read back, saved.

Revisions are digests of CONFIG_DB without generated entries (:func:`tuning.switch.sonic_keys.digest`).
Enterprise SONiC (klish, prompt ``sonic#``) is refused at open with one line.
"""

from __future__ import annotations

import hashlib
import json
import re

from tuning.errors import (CandidateError, CommandError, CommitConfirmError, CommitError, ConnectError, InputError,
                           NotSupportedError, ParseError, RollbackError, TuningError)
from tuning.switch import sonic_keys
from tuning.switch.base import Capabilities, RoceState, SwitchState, as_step_error
from tuning.switch.cli import CliDriver, CliTimeout, Staged
from tuning.switch.eos import EosDriver
from tuning.switch.sonic_keys import interfaces_status, roce_state  # noqa: F401 (the state's readers, re-exported)

APPLIED = "Patch applied successfully."
CHECKPOINTED = "Checkpoint created successfully."
ROLLED_BACK = "Config rolled back successfully."
#: what ``config save -y`` prints (utilities_common/cli.py run_command(display_cmd=True))
SAVED = "Running command: /usr/local/bin/sonic-cfggen -d --print-data > /etc/sonic/config_db.json"
_UNIT = "fabtune-confirm-"
#: the switch's fabtune lock, held while a commit runs (/run/lock: a tmpfs, gone at a reboot)
LOCK = "/run/lock/fabtune"
_REV = re.compile(r"cfg-[0-9a-f]{12}")
#: GCU's failure line (config/main.py: ``Failed to apply patch due to: ...``; click's ``Error: ...``)
_FAILURE = re.compile(r"^(Failed to .*|Error: .*)$", re.M)


class SonicDriver(CliDriver):
    """One community SONiC switch session (SSH to bash, the click CLI under ``sudo``).

    Args: those of :class:`tuning.switch.cli.CliDriver` (``apply_timeout_s``: the read timeout of
    apply-patch, checkpoint and rollback).
    """

    template = "sonic/switch.j2"  # an RFC 6902 patch of CONFIG_DB
    config_suffix = "json-patch"
    change_tags = staticmethod(sonic_keys.change_tags)
    device_type, os_name = "linux", "SONiC"

    #: the diff reader: a candidate patch or CONFIG_DB as flat settings, a dry run's change lines as
    #: flat changes (:func:`tuning.switch.sonic_keys.settings`, :func:`~tuning.switch.sonic_keys.changes_of_diff`)
    config_settings = staticmethod(sonic_keys.settings)
    diff_changes = staticmethod(sonic_keys.changes_of_diff)

    @classmethod
    def render_config(cls, switch: dict) -> str:
        """The template's patch, after checking what it can say on SONiC: DSCP trust (PORT_QOS_MAP
        ``dscp_to_tc_map``), lossless mode, the lossless traffic class equal to the PFC priority
        (SONiC's AZURE maps are the identity from TC to queue and priority group).

        Raises:
            InputError: naming the key and the allowed values; nothing is rendered.
        """
        r = switch.get("roce")
        if r:
            for key, want in (("trust", "dscp"), ("mode", "lossless")):
                if r[key] != want:
                    raise InputError(switch["name"], f"roce.{key}", f"{r[key]!r}: fabtune's SONiC template sets "
                                     f"the RoCE lossless class only; allowed: {want}")
            if r["lossless_tc"] != r["pfc_priority"]:
                raise InputError(switch["name"], "roce.lossless_tc", f"{r['lossless_tc']} differs from pfc_priority "
                                 f"{r['pfc_priority']}; on SONiC (AZURE maps) the no-drop priority's queue is the priority")
        text = super().render_config(switch)
        sonic_keys.check_limits(sonic_keys.parse_ops(text, "sonic/switch.j2"))
        return text

    def __init__(self, host: str, **kwargs) -> None:
        super().__init__(host, **kwargs)
        self._patch: list[dict] = []  # the staged patch's operations (self._stage: its file)

    def _after_open(self) -> None:
        """Refuse Enterprise SONiC (klish): its prompt is ``sonic#``, not bash's ``user@host:~$``."""
        prompt = self._conn.find_prompt()
        if not re.fullmatch(r"[\w.-]+@[\w.-]+:[^\s]*\$", prompt.strip()):
            self.close()
            raise ConnectError(f"{self.host}:{self.port} answers with prompt {prompt.strip()[:40]!r}: Enterprise SONiC's "
                               "klish CLI is not driven; fabtune drives community SONiC (bash, click CLI) only",
                               host=self.name, phase="connect")

    def capabilities(self) -> Capabilities:
        return Capabilities(commit_confirm=True, replace=False, onbox_diff=True, rollback=True)

    def _prompt(self) -> str:
        """bash's prompt of this switch: ``admin@rdma-leaf03:~$``."""
        return re.escape(self._conn.base_prompt) + r"\$"

    def _failure(self, out: str) -> str | None:
        """click's ``Error: ...`` block to the end (GCU's reason, which spans lines: the libyang
        message follows it; a last line of ``; echo $?``'s status left out), else the first
        ``Failed to ...`` line."""
        m = re.search(r"^Error: .*?(?=\n[0-9]{1,3}\s*\Z|\s*\Z)", out, re.M | re.S) or _FAILURE.search(out)
        return m.group(0).strip() if m else None

    def _with_status(self, command: str, *, phase: str, read_timeout: float = 10.0) -> tuple[str, int]:
        """``COMMAND; echo $?`` in one send: ``(COMMAND's output, its exit status)``. Raises what
        :meth:`_send` raises (a failure text: CommandError); ParseError: no status last (:func:`_status`)."""
        return _status(command, self._send(f"{command}; echo $?", phase=phase, read_timeout=read_timeout))

    def _step(self, command: str, ok: str, *, phase: str, error: type[TuningError]) -> str | None:
        """A transaction command with the long timeout whose success is ``ok`` and exit status 0, sent
        as ``COMMAND; echo $?`` (:meth:`_with_status`'s one send). Returns its output, or None when it printed no prompt in
        time (the session is reopened: the caller reads the switch before deciding). Raises ``error``:
        the switch's text, a non-zero status, or a lost session (``extent_unknown``): EOS's step
        (:meth:`tuning.switch.eos.EosDriver._step`, the same session handling); ParseError: no status."""
        out = EosDriver._step(self, f"{command}; echo $?", phase=phase, error=error)  # type: ignore[arg-type]
        if out is None:
            return None
        out, rc = _status(command, out)
        if ok not in out.splitlines() or rc != 0:
            raise error(f"`{command}` exited {rc} and printed {out.strip()[-160:]!r}, not {ok!r}",
                        host=self.name, phase=phase)
        return out

    # ----- reading ---------------------------------------------------------------------------
    def running_config(self) -> str:
        """CONFIG_DB as ``show runningconfiguration all`` prints it (JSON)."""
        out = self._send("show runningconfiguration all", phase="collect")
        self._seen = sonic_keys.digest(sonic_keys.load_config(out))
        self._running = out.strip("\n") + "\n"
        return self._running

    def _config(self) -> dict:
        return sonic_keys.load_config(self.running_config())

    def current_revision(self) -> str:
        """The digest of CONFIG_DB as read now (:func:`tuning.switch.sonic_keys.digest`)."""
        self.running_config()
        return self._seen

    def get_state(self) -> SwitchState:
        """Ports (``show interfaces status``), RoCE QoS and the revision from CONFIG_DB, read once
        (also the state's ``running``)."""
        rows = interfaces_status(self._send("show interfaces status", phase="collect"))
        self.down_ports = {r["Interface"]: "admin down" if r.get("Admin") == "down" else "oper down"
                           for r in rows if "down" in (r.get("Admin"), r.get("Oper"))}
        ports = {r["Interface"]: int(r["MTU"]) for r in rows if r.get("MTU", "").isdigit()}
        running = self.running_config()
        return SwitchState(revision=self._seen, ports=ports, roce=roce_state(sonic_keys.load_config(running)),
                           running=running)

    def _timers(self) -> list[str]:
        """The dead-man timers armed on the switch: rows ``UNIT LOAD ACTIVE SUB DESCRIPTION`` of
        ``fabtune-confirm-<revision>.timer`` still ``waiting`` (one that fired is ``elapsed`` while its
        rollback runs: it no longer guards a commit)."""
        out = self._send(f"systemctl list-units --type=timer --state=active --plain --no-legend --no-pager '{_UNIT}*'",
                         phase="collect")
        rows = [ln.split() for ln in out.splitlines()]
        return [r[0] for r in rows if len(r) >= 4 and r[0].startswith(_UNIT) and r[3] == "waiting"]

    def has_pending_commit(self) -> bool:
        return bool(self._timers())

    def applied_parent(self) -> str | None:
        """The revision the dead-man timer rolls back to (its unit names it); None without a timer."""
        m = re.fullmatch(_UNIT + r"(cfg-[0-9a-f]{12})\.timer", next(iter(self._timers()), ""))
        return m.group(1) if m else None

    def next_revision(self) -> str | None:
        """The digest of CONFIG_DB patched with the staged patch, CONFIG_DB as this session read it
        last (read now where it has not: a push has just read it to check its plan); None when
        nothing is staged."""
        if self._stage is None:
            return None
        config = sonic_keys.load_config(self._running) if self._running is not None else self._config()
        return sonic_keys.digest(sonic_keys.patched(config, self._patch))

    # ----- candidate -------------------------------------------------------------------------
    def load_candidate(self, config: str, *, replace: bool = False) -> None:
        """Check the patch (:func:`tuning.switch.sonic_keys.check_limits`), write it to a file on
        the switch with a heredoc and read it back by its SHA-256, in one send (:meth:`_heredoc`).
        The file is named after the patch's own digest: the same patch, the same file.

        Raises:
            CandidateError: a patch GCU would refuse or fabtune must not push, or the file read
                back differs.
        """
        if replace:
            raise NotSupportedError("SONiC driver merges only (replace=False)", host=self.name, phase="apply")
        ops = sonic_keys.parse_ops(config, "SONiC candidate patch")
        sonic_keys.check_limits(ops)
        line = json.dumps(ops)
        if "FABTUNE_EOF" in line or "'" in line:
            raise CandidateError("the patch holds a quote or the heredoc's end word", host=self.name, phase="apply")
        digest = hashlib.sha256((line + "\n").encode()).hexdigest()  # the file: the line and its end
        path = f"/tmp/fabtune-{digest[:12]}.json-patch"
        back = [ln.strip() for ln in self._heredoc(path, line).splitlines()]
        if f"{digest}  {path}" not in back:
            got = next((ln for ln in back if ln.endswith(f"  {path}") or ln.startswith("sha256sum:")), "nothing")
            raise CandidateError(f"{path} reads back as {got[:100]!r}, not the SHA-256 {digest} of the patch written",
                                 host=self.name, phase="apply")
        self._stage, self._patch = Staged(path, self._seen), ops

    def _heredoc(self, path: str, line: str) -> str:
        """``cat > PATH <<'FABTUNE_EOF'``, the line, the end word, then ``sha256sum PATH``: one write,
        read until bash's prompt came back after sha256sum's line (``<64 hex>  PATH``, or its
        ``sha256sum: PATH: ...`` error); returns what was read. Raises CliTimeout (no prompt within
        10 s) or ConnectError (the session is lost)."""
        if self._conn is None:
            raise ConnectError("session is not open", host=self.name, phase="apply")
        try:
            return self._conn.send_command(
                f"cat > {path} <<'FABTUNE_EOF'\n{line}\nFABTUNE_EOF\nsha256sum {path}", read_timeout=10.0,
                auto_find_prompt=False, cmd_verify=False,
                expect_string=r"(?:[0-9a-f]{64}  |sha256sum: )" + re.escape(path) + r"[^\n]*\s*" + self._prompt() + r"\s*$")
        except self._ses.ReadTimeout as exc:
            raise CliTimeout(f"writing {path}: no prompt within 10 s", host=self.name, phase="apply") from exc
        except self._ses.ERRORS as exc:
            raise ConnectError(f"writing {path} lost the session: {exc}", host=self.name, phase="apply") from exc

    def compare(self) -> str:
        """The dry run's change lines (``""``: GCU converted the patch into 0 changes), read now (and
        kept for the commit: :class:`~tuning.switch.cli.Staged`)."""
        if self._stage is None:
            return ""
        out = self._step(f"sudo config apply-patch --dry-run {self._stage.name}", APPLIED, phase="plan",
                         error=CandidateError)
        if out is None:
            raise CandidateError("the dry run printed no prompt in time", host=self.name, phase="plan")
        lines = [m.group(0) for m in sonic_keys.CHANGE_LINE.finditer(out)]
        self._stage.diff = "\n".join(lines) + "\n" if lines else ""
        return self._stage.diff

    def discard(self) -> None:
        """Forget the staged patch (the file stays in /tmp; nothing is staged on SONiC itself)."""
        self._stage, self._patch = None, []

    # ----- transaction -----------------------------------------------------------------------
    def commit(self, *, confirm_within_s: int | None = None, message: str = "") -> str:
        """Checkpoint, arm the dead-man timer (with ``confirm_within_s``), apply the patch, read back
        that CONFIG_DB moved. Raises CommitError naming the switch's text (the timer disarmed)."""
        with as_step_error(CommitError, self.name, "apply"):
            self._lock()
            try:
                rev = self._commit(confirm_within_s)
            except TuningError as exc:
                if not getattr(exc, "extent_unknown", False) and not isinstance(exc, ConnectError):
                    self._unlock("apply")  # a cut session leaves it: the run's restore removes it
                raise
            self._unlock("apply")
            return rev

    def _lock(self) -> None:
        """The switch's own lock (issue 21: beside the inventory's): ``mkdir`` of :data:`LOCK`, atomic
        on the switch; two controllers of different inventories never commit to it at once.
        Raises CommitError naming mkdir's text when it is held."""
        out, rc = self._with_status(f"sudo mkdir {LOCK}", phase="apply")
        if rc != 0:
            raise CommitError(f"the switch's fabtune lock is held ({out.strip()[:120]}): another fabtune run is "
                              "committing to it, or a run cut inside its commit left it (its restore removes it)",
                              host=self.name, phase="apply")

    def _unlock(self, phase: str, *, left: bool = False) -> None:
        """``rmdir`` of :data:`LOCK`; ``left``: a lock a cut commit may have left (absent is fine)."""
        out, rc = self._with_status(f"sudo rmdir {LOCK}", phase=phase)
        if rc != 0 and not left:
            raise CommandError(f"rmdir {LOCK}", rc, out.strip()[:120], host=self.name, phase=phase)

    def _commit(self, confirm_within_s: int | None) -> str:
        if self.has_pending_commit():
            raise CommitError("a dead-man timer is already armed", host=self.name, phase="apply")
        before, stage = self.current_revision(), self._stage
        if stage is not None and stage.on is not None and before != stage.on:
            # the checkpoint would be named after a revision the run never journaled (its
            # revision_before is stage.on): a restore would look for a checkpoint that is not there
            self.discard()
            raise CandidateError(f"CONFIG_DB moved since patch {stage.name} was staged on it (revision {stage.on}, "
                                 f"now {before}): nothing committed; plan again", host=self.name, phase="apply")
        # the dry run read since staging holds while CONFIG_DB is still the one it was staged on
        if stage is None or not (stage.diff if stage.diff is not None else self.compare()):
            return before
        self._step(f"sudo config checkpoint {_checkpoint(before)}", CHECKPOINTED, phase="apply", error=CommitError)
        if confirm_within_s is not None:
            self._arm(before, confirm_within_s)
        cmd = f"sudo config apply-patch {stage.name}"
        try:
            out = self._step(cmd, APPLIED, phase="apply", error=CommitError)
        except CommitError as exc:
            if not getattr(exc, "extent_unknown", False):
                self._disarm(before, "apply")
            raise
        now = self.current_revision()
        when = "" if out is not None else f" (no answer within {self.apply_timeout_s:g} s; read from the device)"
        if now == before:
            raise CommitError(f"`{cmd}`{when}: CONFIG_DB did not change: nothing committed", host=self.name, phase="apply")
        if confirm_within_s is None:
            self._save("apply")
        self._tx, self._stage = {"before": before, "committed": now}, None
        return now

    def _arm(self, revision: str, seconds: int) -> None:
        """The dead-man: a transient systemd timer that rolls back to the checkpoint; read back armed."""
        unit = f"{_UNIT}{revision}"
        self._send(f"sudo systemd-run --on-active={int(seconds)} --unit={unit} /usr/local/bin/config rollback "
                   f"{_checkpoint(revision)}", phase="apply")
        if f"{unit}.timer" not in self._timers():
            raise CommitError(f"the dead-man timer {unit}.timer is not armed after systemd-run", host=self.name, phase="apply")

    def _disarm(self, revision: str, phase: str) -> None:
        unit = f"{_UNIT}{revision}.timer"
        self._send(f"sudo systemctl stop {unit}", phase=phase)
        if unit in self._timers():
            raise CommandError(f"systemctl stop {unit}", 1, "the timer is still armed", host=self.name, phase=phase)

    def _save(self, phase: str) -> None:
        """``sudo config save -y``: CONFIG_DB to /etc/sonic/config_db.json for boot. Raises CommandError."""
        out, rc = self._with_status("sudo config save -y", phase=phase)
        if SAVED not in out.splitlines() or rc != 0:
            raise CommandError("config save -y", rc or 1, f"printed {out.strip()[:120]!r}, not {SAVED!r}",
                               host=self.name, phase=phase)

    def confirm(self, revision: str | None = None) -> None:
        """Disarm the dead-man timer, prove ``revision`` (default: this session's commit) is CONFIG_DB's
        revision, save it for boot. Raises CommitConfirmError (the timer ran out: the switch went back)."""
        with as_step_error(CommitConfirmError, self.name, "confirm"):
            rev = revision or self._tx["committed"]
            for unit in self._timers():
                self._send(f"sudo systemctl stop {unit}", phase="confirm")
            now, left = self.current_revision(), self._timers()
            if rev is None or now != rev or left:
                raise CommitConfirmError(f"revision {rev} is not kept: CONFIG_DB is {now}"
                                         f"{f' and {left[0]} is still armed' if left else ''} (the dead-man timer ran "
                                         "out and rolled back)", host=self.name, phase="confirm")
            self._save("confirm")

    def rollback(self) -> None:
        """Disarm the dead-man timer and roll back to the checkpoint it names, else to the revision
        from before this session's commit; read back either way."""
        with as_step_error(RollbackError, self.name, "restore"):
            parent = self.applied_parent() or self._tx["before"]
            if parent is None:
                raise RollbackError("nothing to roll back: no commit in this session", host=self.name, phase="restore")
            for unit in self._timers():
                self._send(f"sudo systemctl stop {unit}", phase="restore")
            self.rollback_to(parent)

    def rollback_to(self, revision: str) -> None:
        """``sudo config rollback fabtune-<revision>`` (GCU replaces CONFIG_DB with the checkpoint),
        read back (CONFIG_DB's digest is ``revision``), then saved for boot."""
        with as_step_error(RollbackError, self.name, "restore"):
            self._step(f"sudo config rollback {_checkpoint(revision)}", ROLLED_BACK, phase="restore", error=RollbackError)
            now = self.current_revision()
            if now != revision:
                raise RollbackError(f"rolling back to {_checkpoint(revision)}: CONFIG_DB is {now}, not {revision}",
                                    host=self.name, phase="restore")
            self._save("restore")
            self._unlock("restore", left=True)  # the run's commit, cut inside, may have left its lock


def _status(command: str, out: str) -> tuple[str, int]:
    """``COMMAND; echo $?``'s output as ``(COMMAND's output, the status on its last line)``. Raises
    ParseError when that line is not 1 to 3 digits (nothing came, or text joined it): never a success."""
    lines = out.rstrip("\n").split("\n")
    if not re.fullmatch(r"[0-9]{1,3}", lines[-1].strip()):
        raise ParseError(f"{command}; echo $?", 1, "its exit status on the last line", lines[-1][-40:])
    return "".join(ln + "\n" for ln in lines[:-1]), int(lines[-1])


def _checkpoint(revision: str) -> str:
    """The checkpoint of ``revision`` (checked: a journal's value reaches the shell)."""
    if not _REV.fullmatch(revision or ""):
        raise RollbackError(f"{revision!r} is not a SONiC revision of fabtune (cfg- and 12 hex digits)", phase="restore")
    return f"fabtune-{revision}"
