"""The Arista EOS switch stand-in: a pure-Python EOS CLI (modes, configuration sessions, commit
timers, checkpoints), one :class:`EosSwitch` per switch and one :class:`EosTerminal` per SSH login.

It reproduces shared/cases/cli/eos__*.txt (described in cli/INDEX-switch.md) and refuses what EOS
refuses with EOS's texts. The grammar and the configuration model are in
:mod:`tuning.lab.eos_config`, the printed layouts in :mod:`tuning.lab.eos_show`; the SSH side is
:mod:`tuning.lab.eos_shell`. After every change of the running configuration (``configure
terminal`` lines, a commit, a timer commit, its expiry, an abort under a timer, ``configure
replace``, a reboot) ``<state_dir>/switches/<name>.fabric.json`` is rewritten atomically.
The EOS texts it prints, and their sources, are listed in :mod:`tuning.lab.eos_show`.
"""

from __future__ import annotations

import copy
import os
import threading
import time
from pathlib import Path
from typing import Callable

from tuning.lab import eos_show
from tuning.lab.eos_config import IF, TXQ, Cursor, Match, ParseError, load_text, parse, short_ifname
from tuning.lab.eos_show import (COPY_OK, EXEC_GRAMMAR, IN_TIMER, JSON_ACTIONS, MAX_OPEN_SESSIONS, MAX_SESSIONS,
                                 MODE_GRAMMAR, NO_FILE, NO_SESSION, PRIVILEGED, SESSION_GRAMMAR, TIMER_PENDING, Session,
                                 UNCONVERTED, initial_config, seconds)
from tuning.lab.model import write_switch_state
from tuning.lab.fabric import Fabric, Switch
from tuning.lab.nvue_faults import FaultReader


class EosSwitch:
    """An Arista EOS switch's configuration engine (no SSH).

    Args:
        switch: the lab switch (``ports``: ``Ethernet1``...).  fabric: for port descriptions (may be None).
        state_dir: where ``switches/<name>.fabric.json`` goes and faults are read (None: nowhere).
        clock: seconds since the epoch (syslog stamps, ``commitBy``).  version: EOS version; from
            ``4.32`` ``show configuration sessions detail | json`` has the 4.32 shape.
    """

    def __init__(self, switch: Switch, fabric: Fabric | None = None, state_dir: Path | None = None,
                 clock: Callable[[], float] = time.time, version: str = "4.31.2F") -> None:
        self.name = switch.name
        self.ports = list(switch.ports)
        self.state_dir, self.clock, self.version = state_dir, clock, version
        self.lock = threading.RLock()
        self.running = initial_config(switch, fabric)
        self.startup = copy.deepcopy(self.running)
        self.flash: dict[str, str] = {}
        self.sessions: dict[str, Session] = {}
        self.log: list[str] = []
        self.faults = FaultReader(state_dir, self.name)  # `fabtune lab inject SWITCH ...`
        self._ttys = 0
        self.unnamed = 0  # sessions named by the switch
        self._written: dict | None = None
        self._booted_at = self.faults().reboot_at  # a `reboot` injected before this power-on is past
        self._write_fabric_json()

    def terminal(self, user: str = "fabtune", address: str = "127.0.0.1") -> "EosTerminal":
        """A new login session (``NAME>``)."""
        with self.lock:
            self._ttys += 1
            return EosTerminal(self, user, f"vty{self._ttys} ({address})")

    @property
    def hostname(self) -> str:
        """The running ``hostname``."""
        return self.running["globals"].get("hostname", "hostname localhost").split(None, 1)[1]

    # ----- state ---------------------------------------------------------------------
    def fabric_state(self) -> dict:
        """The running state in the lab contract's ``switches/<name>.fabric.json`` shape (operational
        MTUs: an injected ``oper-mtu`` wins)."""
        with self.lock:
            return eos_show.fabric_state(self.running, self.ports, self.faults().oper_mtu)

    def _write_fabric_json(self) -> None:
        """The running state as ``switches/<name>.fabric.json`` (:func:`tuning.lab.model.write_switch_state`)."""
        if self.state_dir is None:
            return
        self._written = self.fabric_state()
        write_switch_state(self.state_dir, self.name, self._written)

    def sync_faults(self) -> None:
        """Reboot once for a ``reboot`` injected since the last boot (``fabtune lab inject SWITCH
        reboot``, as the NVUE switch does); rewrite the fabric file when an injected fault changed
        the operational state."""
        if self.faults().reboot_at > self._booted_at:
            self._booted_at = self.faults().reboot_at
            self.reboot_from_startup()
        if self.state_dir is not None and self.fabric_state() != self._written:
            self._write_fabric_json()

    def set_running(self, cfg: dict) -> None:
        """Replace the running configuration (and write the fabric file)."""
        self.running = cfg
        self._write_fabric_json()

    def syslog(self, message: str) -> None:
        """Append ``Mon dd HH:MM:SS HOST ConfigAgent: MESSAGE`` (day padded to 2, as syslog)."""
        t = time.localtime(self.clock())
        self.log.append(f"{time.strftime('%b', t)} {t.tm_mday:>2} {time.strftime('%H:%M:%S', t)} "
                        f"{self.hostname} ConfigAgent: {message}")

    # ----- sessions ------------------------------------------------------------------
    def open_session(self, name: str) -> str:
        """Enter (or create) session ``name``; returns an error text or ""."""
        s = self.sessions.get(name)
        if s is not None and s.state == "pending":
            return ""
        if s is not None and s.state == "pendingCommitTimer":
            return IN_TIMER.format(name=name)
        if sum(x.state == "pending" for x in self.sessions.values()) >= MAX_OPEN_SESSIONS:
            return MAX_SESSIONS
        self.sessions[name] = Session(name, copy.deepcopy(self.running))
        return ""

    def commit(self, name: str, user: str, where: str, seconds: int | None = None) -> str:
        """Commit session ``name`` (with a timer: apply now, roll back unless confirmed); committing a
        session under its timer confirms it. Returns an error text or "" (EOS is silent)."""
        s = self.sessions.get(name)
        if s is None:
            return NO_SESSION.format(name=name)
        if s.state == "pendingCommitTimer" and seconds is None:
            self._stop_timer(s)
            s.state, s.before, s.commit_by = "completed", None, None
            self._keep_saved(name)
            return ""
        other = next((x.name for x in self.sessions.values() if x.state == "pendingCommitTimer"), None)
        if other is not None:
            return TIMER_PENDING.format(name=name, other=other)
        if self.faults().slow_apply_s:
            time.sleep(self.faults().slow_apply_s)  # holding the switch, as a busy ConfigAgent does
        before = self.running
        self.set_running(copy.deepcopy(s.config))
        s.completed_time, s.commit_user = self.clock(), user
        if seconds is None:
            s.state = "completed"
            self._keep_saved(name)
        else:
            self._start_timer(s, before, seconds, where)
        self.syslog(f"%SYS-5-CONFIG_SESSION_COMMIT_SUCCESS: User {user} committed configuration session {name} "
                    f"successfully on {where}")
        return ""

    def _start_timer(self, s: Session, before: dict, seconds: int, where: str) -> None:
        s.state, s.before, s.commit_by = "pendingCommitTimer", before, s.completed_time + seconds
        s.timer = threading.Timer(seconds, self._expire, args=(s.name, s))
        s.timer.daemon = True
        s.timer.start()
        self.syslog(f"%SYS-5-CONFIG_SESSION_COMMIT_TIMER_STARTED: User {s.commit_user} committed session {s.name} on "
                    f"{where}, with timer {seconds // 3600}:{seconds // 60 % 60}:{seconds % 60}(hr:min:sec).")

    def _keep_saved(self, name: str) -> None:
        """maxSavedSessions 1: only the latest completed session is kept."""
        for old in [n for n, x in self.sessions.items() if x.state == "completed" and n != name]:
            del self.sessions[old]

    def abort(self, name: str, user: str, where: str) -> str:
        """Drop session ``name``; under a commit timer, roll running back first. Error text or ""."""
        s = self.sessions.pop(name, None)
        if s is None:
            return NO_SESSION.format(name=name)
        if s.state == "pendingCommitTimer" and s.before is not None:
            self._stop_timer(s)
            self.set_running(s.before)
            self.syslog(f"%SYS-5-CONFIG_REPLACE_SUCCESS: User {user} replaced running configuration with "
                        f"file:/tmp/commitTimerCheckPointConfig.txt successfully on {where}")
            self.syslog(f"%SYS-5-CONFIG_SESSION_COMMIT_TIMER_CANCELED: The commit timer on session {name} has been "
                        "canceled. The system configuration has been rolled back.")
        self.syslog(f"%SYS-5-CONFIG_SESSION_ABORTED: User {user} aborted configuration session {name} on {where}")
        return ""

    @staticmethod
    def _stop_timer(s: Session) -> None:
        if s.timer is not None:
            s.timer.cancel()
            s.timer = None

    def _expire(self, name: str, session: Session) -> None:
        """Timer callback: ``name`` was not confirmed in time; running goes back. The
        CONFIG_REPLACE_SUCCESS line it logs has the abort's shape (that it is logged is L)."""
        with self.lock:
            if self.sessions.get(name) is not session or session.state != "pendingCommitTimer":
                return
            del self.sessions[name]
            self.set_running(session.before)
            self.syslog(f"%SYS-5-CONFIG_REPLACE_SUCCESS: User {session.commit_user} replaced running configuration "
                        "with file:/tmp/commitTimerCheckPointConfig.txt successfully on ConfigAgent (localhost)")

    # ----- files -------------------------------------------------------------------------
    def checkpoint(self, file: str) -> str:
        """``copy running-config flash:NAME``."""
        self.flash[file] = self.running_text()
        return COPY_OK

    def replace(self, file: str, user: str, where: str) -> str:
        """``configure replace flash:NAME``: running := the file's configuration (silent)."""
        text = self.flash.get(file)
        if text is None:
            return NO_FILE.format(file=file.split(":", 1)[1])
        try:
            cfg = load_text(text, self.ports)
        except ParseError as exc:
            return str(exc)
        self.set_running(cfg)
        self.syslog(f"%SYS-5-CONFIG_REPLACE_SUCCESS: User {user} replaced running configuration with {file} "
                    f"successfully on {where}")
        return ""

    def write_memory(self, user: str, where: str) -> str:
        """``write memory`` / ``copy running-config startup-config``."""
        self.startup = copy.deepcopy(self.running)
        self.syslog(f"%SYS-5-CONFIG_STARTUP: Startup config saved from system:/running-config by {user} on {where}.")
        return COPY_OK

    def running_text(self, command: str = "show running-config") -> str:
        """The running configuration as ``show running-config`` prints it."""
        return eos_show.running_config(self.running, self.hostname, self.version, command)

    def reboot_from_startup(self) -> None:
        """A reload: pending sessions and commit timers are gone (an uncommitted session is
        discarded on reboot, arista.com um-eos "Configure Session"), running := startup-config."""
        with self.lock:
            self.close()
            self.sessions.clear()
            self.set_running(copy.deepcopy(self.startup))

    def close(self) -> None:
        """Cancel every commit timer (the switch shuts down; nothing is rolled back)."""
        with self.lock:
            for s in self.sessions.values():
                self._stop_timer(s)

class EosTerminal(eos_show.ShowCommands):
    """One login session's CLI: its mode, its configuration session, its prompt.

    Prompts (eos__prompts_modes_session_prep.txt): ``NAME>`` at login, ``NAME#`` after
    ``enable``, ``NAME(config)#``, ``NAME(config-if-Et1)#``, ``NAME(config-s-XXXXXX)#`` (the first 6
    characters of the session name), ``NAME(config-s-XXXXXX-if-Et1)#`` and ``...-if-Et1-txq-3)#``
    (the tx-queue prompt is L). ``closed`` turns True on ``exit`` at exec level (the SSH session ends).
    """

    def __init__(self, switch: EosSwitch, user: str, where: str) -> None:
        self.sw, self.user, self.where = switch, user, where
        self.privileged = False
        self.cursor: Cursor | None = None
        self.session: str | None = None
        self.closed = False

    @property
    def prompt(self) -> str:
        """The prompt to print now."""
        host = self.sw.hostname
        if self.cursor is None:
            return host + ("#" if self.privileged else ">")
        inner = "config" + (f"-s-{self.session[:6]}" if self.session else "")
        if self.cursor.mode in (IF, TXQ):
            inner += "-if-" + short_ifname(self.cursor.intf)
        if self.cursor.mode == TXQ:
            inner += f"-txq-{self.cursor.txq}"
        return f"{host}({inner})#"

    def run(self, line: str) -> str:
        """What the switch prints for one typed line ("\\n" line ends; "" when silent). ``!`` lines
        and blank lines are comments."""
        text = line.strip()
        if not text or text.startswith("!"):
            return ""
        with self.sw.lock:
            self.sw.sync_faults()  # a reboot injected since the last command happens first
            if self.session is not None and getattr(self.sw.sessions.get(self.session), "state", "") != "pending":
                self.cursor = self.session = None  # committed or aborted from another login
            out = self._run(text)
            self.sw.sync_faults()
        return out + "\n" if out and not out.endswith("\n") else out

    def _run(self, text: str) -> str:
        command, bar, pipe = text.partition("|")
        try:
            match, mode = self._parse(command.strip())
        except ParseError as exc:
            return str(exc)
        action = match.cmd.action
        if match.cmd in EXEC_GRAMMAR and match.cmd.privileged and not self.privileged:
            return PRIVILEGED
        handler = getattr(self, "_do_" + action, None) if action else None
        if handler is None:
            return self._configure(match, mode)
        pipe = pipe.split()
        if bar and pipe == ["json"]:
            return handler(match, True) if action in JSON_ACTIONS else UNCONVERTED
        out = handler(match, False) if action in JSON_ACTIONS else handler(match)
        if bar and len(pipe) >= 2 and "include".startswith(pipe[0]):
            return eos_show.filter_lines(out, text.split(pipe[0], 1)[1].split(None, 1)[0])
        if bar:
            return f"% Invalid input (at token {len(command.split()) + 1}: '{pipe[0] if pipe else ''}')"
        return out

    def _parse(self, command: str) -> tuple[Match, str]:
        if self.cursor is None:
            match, mode = parse(command, [c for c in EXEC_GRAMMAR if "exec" in c.modes]), "exec"
        else:
            extra = [c for c in EXEC_GRAMMAR if self.cursor.mode in c.modes] + MODE_GRAMMAR
            match, mode = self.cursor.parse(command, extra + (SESSION_GRAMMAR if self.session else []))
        if "<ifname>" in match.cmd.pattern and match.values[0] not in [*self.sw.ports, "Management1"]:
            i = len(match.cmd.pattern.split()) - 1  # a port the switch does not have
            raise ParseError(f"% Invalid input (at token {i}: '{command.split()[i]}')", i)
        return match, mode

    def _configure(self, match: Match, mode: str) -> str:
        """A configuration line: into the session, or (``configure terminal``) into running."""
        assert self.cursor is not None
        if self.session is not None:
            return self.cursor.apply(self.sw.sessions[self.session].config, match, mode)
        cfg = copy.deepcopy(self.sw.running)
        out = self.cursor.apply(cfg, match, mode)
        if cfg != self.sw.running:
            self.sw.set_running(cfg)
        return out

    # ----- exec -------------------------------------------------------------------------
    def _do_enable(self, m: Match) -> str:
        self.privileged = m.cmd.pattern == "enable"  # `disable` too
        return ""

    def _do_exit(self, m: Match) -> str:
        self.closed = True
        return ""

    def _do_width(self, m: Match) -> str:
        return f"Width set to {m.values[0]} columns."

    def _do_length(self, m: Match) -> str:
        # L: the text for a non-zero length (the transcript shows only `terminal length 0`)
        return "Pagination disabled." if m.values[0] == 0 else f"Pagination set to {m.values[0]} lines."

    def _do_configure(self, m: Match) -> str:
        self.cursor, self.session = Cursor(self.sw.ports), None
        return ""

    def _do_session(self, m: Match) -> str:
        self.sw.unnamed += 0 if m.values else 1
        name = m.values[0] if m.values else f"sess-{os.getpid()}-{threading.get_ident()}-{self.sw.unnamed}"
        error = self.sw.open_session(name)  # an unnamed session: ngworx.ag "Arista EOS Config Sessions"
        if not error:
            self.cursor, self.session = Cursor(self.sw.ports), name
        return error

    def _do_session_commit(self, m: Match) -> str:
        timer = seconds(m.values[1]) if len(m.values) > 1 else None
        return self.sw.commit(m.values[0], self.user, self.where, timer)

    def _do_session_abort(self, m: Match) -> str:
        return self.sw.abort(m.values[0], self.user, self.where)

    def _do_replace(self, m: Match) -> str:
        return self.sw.replace(m.values[0], self.user, self.where)

    def _do_write(self, m: Match) -> str:
        return self.sw.write_memory(self.user, self.where)

    def _do_checkpoint(self, m: Match) -> str:
        return self.sw.checkpoint(m.values[0])

    # ----- configuration modes ----------------------------------------------------------
    def _do_up(self, m: Match) -> str:
        assert self.cursor is not None
        if not self.cursor.up():
            self.cursor = self.session = None  # a session stays pending
        return ""

    def _do_end(self, m: Match) -> str:
        self.cursor = self.session = None
        return ""

    def _do_commit(self, m: Match) -> str:
        assert self.session is not None
        error = self.sw.commit(self.session, self.user, self.where, seconds(m.values[0]) if m.values else None)
        if not error:
            self.cursor = self.session = None
        return error

    def _do_abort(self, m: Match) -> str:
        assert self.session is not None
        error = self.sw.abort(self.session, self.user, self.where)
        self.cursor = self.session = None
        return error
