"""The community SONiC switch stand-in: CONFIG_DB behind the generic config updater (apply-patch,
checkpoints, rollback, save), transient systemd timers that really fire, and a bash-like login
(:class:`SonicTerminal`: prompt ``<user>@<host>:~$ ``, heredocs, ``;`` lists as bash runs them,
``echo $?``, ``sudo``, coreutils' ``sha256sum FILE``: ``<64 hex>  FILE``).

It reproduces shared/cases/cli/sonic__*.txt (cli/INDEX-switch.md) and refuses what GCU refuses,
with GCU's texts (:mod:`tuning.lab.sonic_db`, :mod:`tuning.lab.sonic_show`); the SSH side is
:mod:`tuning.lab.sonic_shell`. After every change of CONFIG_DB ``<state_dir>/switches/<name>.fabric.json``
is rewritten atomically. Faults (``fabtune lab inject``, :mod:`tuning.lab.nvue_faults`):
``slow-apply`` holds every apply-patch and rollback (not a dry run) that long; ``apply-fails`` fails
each of them that would change CONFIG_DB (as NVUE's fault fails an apply and a rollback) with the YANG
failure layout of sonic__apply_patch_failure_yang_invalid_value.txt naming the first change's value
(the lab's choice of reason), CONFIG_DB unchanged; ``oper-mtu`` and a port ``down`` show in ``show interfaces status``;
``reboot`` reloads /etc/sonic/config_db.json (timers and the lock gone).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shlex
import threading
import time
from pathlib import Path
from typing import Callable

from tuning.lab import sonic_db as db
from tuning.lab import sonic_show as show
from tuning.lab.eos import EosSwitch
from tuning.lab.fabric import Fabric, Switch
from tuning.lab.nvue_faults import FaultReader


#: the startup configuration ``config save`` writes and a boot loads (config/main.py DEFAULT_CONFIG_DB_FILE)
STARTUP_FILE = "/etc/sonic/config_db.json"


class SonicSwitch:
    """A community SONiC switch's CONFIG_DB and GCU (no SSH).

    Args:
        switch: the lab switch (``ports``: ``Ethernet0``...).  fabric: its wiring (may be None).
        state_dir: where ``switches/<name>.fabric.json`` goes and faults are read (None: nowhere).
        clock: seconds since the epoch.  hwsku / branch: DEVICE_METADATA's SKU and the image's
            8-digit branch GCU's validators read (an unknown SKU or an older branch refuses more).
    """

    def __init__(self, switch: Switch, fabric: Fabric | None = None, state_dir: Path | None = None,
                 clock: Callable[[], float] = time.time, hwsku: str = db.HWSKU, branch: str = db.BRANCH) -> None:
        self.name, self.ports = switch.name, list(switch.ports)
        self.state_dir, self.clock, self.branch = state_dir, clock, branch
        self.lock = threading.RLock()
        self.config = db.initial_config(switch, fabric, hwsku)
        self.startup = copy.deepcopy(self.config)
        self.files: dict[str, str] = {STARTUP_FILE: db.dump(self.startup) + "\n"}
        self.checkpoints: dict[str, tuple[float, dict]] = {}
        self.dirs: set[str] = set()  # made with mkdir (the lock fabtune takes)
        self.timers: dict[str, tuple[threading.Timer, str]] = {}  # unit -> (timer, checkpoint)
        self.faults = FaultReader(state_dir, self.name)
        self._booted_at = self.faults().reboot_at  # a `reboot` injected before this power-on is past
        self.last_login: float | None = None
        self._written: dict | None = None
        self._write_fabric_json()

    def terminal(self, user: str = "fabtune", address: str = "127.0.0.1") -> "SonicTerminal":
        """A new login (its banner in ``.banner``)."""
        with self.lock:
            term = SonicTerminal(self, user, show.banner(self.hostname, self.last_login, address))
            self.last_login = self.clock()
            return term

    @property
    def hostname(self) -> str:
        return self.config["DEVICE_METADATA"]["localhost"]["hostname"]

    # ----- state ---------------------------------------------------------------------------
    def fabric_state(self) -> dict:
        with self.lock:
            return db.fabric_state(self.config, self.ports, self.faults().oper_mtu)

    #: ``switches/<name>.fabric.json`` written as the EOS stand-in writes it, and rewritten when an
    #: injected fault changed the operational state; an injected ``reboot`` reloads the startup
    #: configuration once before the next command (:meth:`reboot_from_startup`)
    _write_fabric_json = EosSwitch._write_fabric_json
    sync_faults = EosSwitch.sync_faults

    def set_config(self, cfg: dict) -> None:
        """CONFIG_DB := ``cfg`` after buffermgrd's pass (and the fabric file)."""
        self.config = db.buffermgr(cfg)
        self._write_fabric_json()

    # ----- GCU ---------------------------------------------------------------------------
    def _gcu(self, patch: list[dict], dry_run: bool) -> tuple[str, list[dict] | db.GcuError]:
        """Run GCU's Patch Applier: its progress lines and the changes it applied (CONFIG_DB set
        unless ``dry_run``), or the error it stopped at (nothing changed)."""
        try:
            target = db.simulate(self.config, patch)
            db.validate_fields(self.config, target, self.branch)
            db.empty_tables(target)
            db.yang(target)
        except db.GcuError as err:
            return show.apply_head(patch, err.stage), err
        changes = db.ordered(db.field_changes(db.backend_free(self.config), db.backend_free(target)))
        if not dry_run:
            faults = self.faults()
            if faults.slow_apply_s:
                time.sleep(faults.slow_apply_s)  # holding the switch, as a running GCU does
            if faults.apply_fails and changes:
                value = next((c["value"] for c in changes if isinstance(c.get("value"), str)), "")  # a field's
                return show.apply_head(patch, "sort"), db.GcuError("sort", db.yang_text(value))
            self.set_config(target)
        return show.apply_head(patch, "sort") + show.apply_tail(changes), changes

    def apply_patch(self, patch: list[dict], dry_run: bool) -> tuple[str, int]:
        """``config apply-patch [--dry-run]``: ``(output, exit status)``."""
        head = "** DRY RUN EXECUTION **\n" if dry_run else ""
        out, got = self._gcu(patch, dry_run)
        if isinstance(got, db.GcuError):
            return head + out + show.apply_failed(got, "apply-patch"), 2
        return head + out + show.APPLIED + "\n", 0

    def checkpoint(self, name: str) -> tuple[str, int]:
        self.checkpoints[name] = (self.clock(), copy.deepcopy(self.config))
        return show.checkpoint_text(name), 0

    def rollback(self, name: str, dry_run: bool = False) -> tuple[str, int]:
        """``config rollback NAME``: Config Replacer applies the patch from CONFIG_DB to the checkpoint."""
        if name not in self.checkpoints:
            return show.no_checkpoint(name), 2
        target = self.checkpoints[name][1]
        head = ("** DRY RUN EXECUTION **\n" if dry_run else "") + show.replacer_head(name, len(json.dumps(target)))
        out, got = self._gcu(db.replace_patch(self.config, target), dry_run)
        if isinstance(got, db.GcuError):
            return head + out + "Failed to rollback config\n" + show.usage("rollback") + f"Error: {got}\n", 2
        return head + out + show.replacer_tail(), 0

    def delete_checkpoint(self, name: str) -> tuple[str, int]:
        exists = self.checkpoints.pop(name, None) is not None
        return show.delete_text(name, exists), 0 if exists else 2

    def save(self) -> tuple[str, int]:
        """``config save -y``: CONFIG_DB to /etc/sonic/config_db.json (what a reboot loads)."""
        self.startup = copy.deepcopy(self.config)
        self.files[STARTUP_FILE] = db.dump(self.startup) + "\n"
        return show.SAVED + "\n", 0

    # ----- systemd ------------------------------------------------------------------------
    def arm(self, unit: str, seconds: int, checkpoint: str) -> tuple[str, int]:
        """``systemd-run --on-active=S --unit=U config rollback NAME``: a timer that really fires."""
        if f"{unit}.timer" in self.timers:
            return f"Failed to start transient timer unit: Unit {unit}.timer already exists.\n", 1
        timer = threading.Timer(seconds, self._fire, args=(f"{unit}.timer",))
        timer.daemon = True
        self.timers[f"{unit}.timer"] = (timer, checkpoint)
        timer.start()
        return f"Running timer as unit: {unit}.timer\nWill run service as unit: {unit}.service\n", 0

    def _fire(self, unit: str) -> None:
        with self.lock:
            entry = self.timers.pop(unit, None)
            if entry is not None:
                self.rollback(entry[1])

    def stop(self, unit: str) -> tuple[str, int]:
        entry = self.timers.pop(unit, None)
        if entry is None:
            return f"Failed to stop {unit}: Unit {unit} not loaded.\n", 5
        entry[0].cancel()
        return "", 0

    def list_timers(self, pattern: str) -> str:
        rx = re.compile(re.escape(pattern).replace(r"\*", ".*"))
        return "".join(f"{u} loaded active waiting /usr/local/bin/config rollback {c}\n"
                       for u, (_, c) in sorted(self.timers.items()) if rx.fullmatch(u))

    def reboot_from_startup(self) -> None:
        """A reboot: timers gone, CONFIG_DB := /etc/sonic/config_db.json (the last ``config save``)."""
        with self.lock:
            self.close()
            self.dirs.clear()  # /run is a tmpfs
            self.set_config(copy.deepcopy(self.startup))

    def close(self) -> None:
        """Cancel every timer (the switch shuts down; nothing is rolled back)."""
        with self.lock:
            for timer, _ in self.timers.values():
                timer.cancel()
            self.timers.clear()


class SonicTerminal:
    """One login's bash: ``run(line)`` returns what bash prints; ``prompt`` is ``user@host:~$ ``, or
    ``> `` inside a heredoc; ``closed`` turns True on ``exit``."""

    def __init__(self, switch: SonicSwitch, user: str, banner: str) -> None:
        self.sw, self.user, self.banner = switch, user, banner
        self.rc, self.closed = 0, False
        self._heredoc: tuple[str, str, list[str]] | None = None  # (path, end word, lines)

    @property
    def prompt(self) -> str:
        return "> " if self._heredoc else f"{self.user}@{self.sw.hostname}:~$ "

    def run(self, line: str) -> str:
        """What bash prints for one typed line ("\\n" line ends)."""
        if self._heredoc is not None:
            path, end, body = self._heredoc
            if line.rstrip("\n") == end:
                self.sw.files[path], self._heredoc, self.rc = "".join(b + "\n" for b in body), None, 0
            else:
                body.append(line.rstrip("\n"))
            return ""
        with self.sw.lock:
            out, self.rc = self._run(line.strip())
            self.sw.sync_faults()
        return out

    def _run(self, text: str) -> tuple[str, int]:
        """One typed line: a heredoc's start, or a list of simple commands separated by ``;`` as bash
        runs it: the whole line parsed first (a syntax error runs nothing, status 2), then each
        command in turn, ``$?`` the status of the one before, the line's status the last one's
        (``exit`` ends the list and the login)."""
        if not text:
            return "", self.rc
        m = re.fullmatch(r"cat > (\S+) <<'?(\w+)'?", text)
        if m:
            self._heredoc = (m.group(1), m.group(2), [])
            return "", 0
        try:
            commands = [shlex.split(part) for part in _list(text)]
        except ValueError:
            return "-bash: syntax error: unexpected end of file\n", 2
        except _Unexpected as exc:
            return f"-bash: syntax error near unexpected token `{exc.token}'\n", 2
        out = ""
        for words in commands:
            got, self.rc = self._simple(words)
            out += got
            if self.closed:
                break
        return out, self.rc

    def _simple(self, words: list[str]) -> tuple[str, int]:
        """One simple command (its words, ``sudo`` first where typed): ``(output, exit status)``."""
        if not words:
            return "", self.rc  # a list's trailing ``;``
        root = words[0] == "sudo"
        words = words[1:] if root else words
        handler = _COMMANDS.get(words[0]) if words else None
        if handler is None:
            return f"-bash: {words[0] if words else 'sudo'}: command not found\n", 127
        return handler(self, words[1:], root)

    def _echo(self, args: list[str], root: bool) -> tuple[str, int]:
        return " ".join(str(self.rc) if a == "$?" else a for a in args) + "\n", 0

    def _cat(self, args: list[str], root: bool) -> tuple[str, int]:
        if len(args) != 1 or args[0] not in self.sw.files:
            return f"cat: {args[0] if args else ''}: No such file or directory\n", 1
        return self.sw.files[args[0]], 0

    def _sha256sum(self, args: list[str], root: bool) -> tuple[str, int]:
        """coreutils sha256sum of one file: ``<64 hex>  PATH`` (two spaces: text mode), else its error."""
        if len(args) != 1 or args[0] not in self.sw.files:
            return f"sha256sum: {args[0] if args else '-'}: No such file or directory\n", 1
        return f"{hashlib.sha256(self.sw.files[args[0]].encode()).hexdigest()}  {args[0]}\n", 0

    def _mkdir(self, args: list[str], root: bool) -> tuple[str, int]:
        """coreutils mkdir of one folder (atomic: a second one fails)."""
        if len(args) != 1 or args[0] in self.sw.dirs:
            return f"mkdir: cannot create directory '{args[0] if args else ''}': File exists\n", 1
        self.sw.dirs.add(args[0])
        return "", 0

    def _rmdir(self, args: list[str], root: bool) -> tuple[str, int]:
        if len(args) != 1 or args[0] not in self.sw.dirs:
            return f"rmdir: failed to remove '{args[0] if args else ''}': No such file or directory\n", 1
        self.sw.dirs.discard(args[0])
        return "", 0

    def _exit(self, args: list[str], root: bool) -> tuple[str, int]:
        self.closed = True
        return "logout\n", 0

    def _show(self, args: list[str], root: bool) -> tuple[str, int]:
        if args == ["runningconfiguration", "all"]:
            return db.dump(self.sw.config) + "\n", 0
        if args[:2] == ["interfaces", "status"] and len(args) <= 3:
            ports = args[2:] or self.sw.ports
            if any(p not in self.sw.ports for p in ports):
                return f"Invalid interface name {ports[0]}\n", 1  # L: intfutil's text for an unknown port
            faults = self.sw.faults()
            return show.interfaces_status(self.sw.config, ports, faults.oper_mtu, faults.down_ports), 0
        return f"Error: No such command \"{args[0] if args else ''}\".\n", 2

    def _config(self, args: list[str], root: bool) -> tuple[str, int]:
        if not root:
            return show.ROOT + "\n", 1
        cmd, rest = (args[0], args[1:]) if args else ("", [])
        if cmd == "apply-patch" and len(rest) in (1, 2) and (len(rest) == 1 or rest[0] in ("-d", "--dry-run")):
            return self._apply(rest[-1], len(rest) == 2)
        if cmd in ("checkpoint", "rollback", "delete-checkpoint") and len(rest) == 1:
            return getattr(self.sw, cmd.replace("-", "_"))(rest[0])
        if cmd == "list-checkpoints" and rest in ([], ["-t"]):
            return show.list_checkpoints({n: t for n, (t, _) in self.sw.checkpoints.items()}, rest == ["-t"]), 0
        if cmd == "save" and rest == ["-y"]:
            return self.sw.save()
        return f"Usage: config [OPTIONS] COMMAND [ARGS]...\nTry \"config -h\" for help.\n\nError: No such command \"{cmd}\".\n", 2

    def _apply(self, path: str, dry_run: bool) -> tuple[str, int]:
        text = self.sw.files.get(path)
        if text is None:
            return f"Failed to apply patch due to: [Errno 2] No such file or directory: '{path}'\n" + \
                show.usage("apply-patch") + f"Error: [Errno 2] No such file or directory: '{path}'\n", 2
        try:
            patch = json.loads(text)
        except json.JSONDecodeError as exc:
            return f"Failed to apply patch due to: {exc}\n" + show.usage("apply-patch") + f"Error: {exc}\n", 2
        return self.sw.apply_patch(patch, dry_run)

    def _systemd_run(self, args: list[str], root: bool) -> tuple[str, int]:
        opts = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
        cmd = [a for a in args if not a.startswith("--")]
        ok = cmd[:2] in (["/usr/local/bin/config", "rollback"], ["config", "rollback"]) and len(cmd) == 3
        if not root:
            return "Failed to start transient timer unit: Interactive authentication required.\n", 1
        if not ok or not opts.get("on-active", "").isdigit() or "unit" not in opts:
            return "lab: systemd-run here takes --on-active=SECONDS --unit=NAME config rollback CHECKPOINT\n", 1
        return self.sw.arm(opts["unit"], int(opts["on-active"]), cmd[2])

    def _systemctl(self, args: list[str], root: bool) -> tuple[str, int]:
        if args[:1] == ["list-units"]:
            pattern = next((a for a in args[1:] if not a.startswith("-")), "*")
            return self.sw.list_timers(pattern), 0
        if args[:1] == ["stop"] and len(args) == 2:
            if not root:
                return f"Failed to stop {args[1]}: Interactive authentication required.\n", 1
            return self.sw.stop(args[1])
        return f"Unknown command verb {args[0] if args else ''}.\n", 1


class _Unexpected(Exception):
    """A ``;`` where bash's grammar wants a command; ``token``: the one bash names (``;`` or ``;;``)."""

    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.token = token


def _list(text: str) -> list[str]:
    """``text`` cut at its unquoted ``;`` (bash's list separator; quotes and backslashes read as bash
    reads them): ``"a; echo $?"`` -> ``["a", " echo $?"]``; a trailing ``;`` leaves a last empty part.

    Raises:
        ValueError: an unterminated quote.  _Unexpected: an empty command before a ``;``.
    """
    parts, seps, start, quote, i = [], [], 0, "", 0
    while i < len(text):
        c = text[i]
        if c == "\\" and quote != "'":
            i += 2
            continue
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == ";":
            parts.append(text[start:i])
            seps.append(i)
            start = i + 1
        i += 1
    if quote:
        raise ValueError("No closing quotation")
    parts.append(text[start:])
    for k, part in enumerate(parts[:-1]):
        if not part.strip():
            p = seps[k]
            raise _Unexpected(";;" if text[p + 1:p + 2] == ";" or (k and seps[k - 1] == p - 1) else ";")
    return parts


_COMMANDS = {"echo": SonicTerminal._echo, "cat": SonicTerminal._cat, "sha256sum": SonicTerminal._sha256sum,
             "exit": SonicTerminal._exit,
             "logout": SonicTerminal._exit, "mkdir": SonicTerminal._mkdir, "rmdir": SonicTerminal._rmdir,
             "show": SonicTerminal._show, "config": SonicTerminal._config,
             "systemd-run": SonicTerminal._systemd_run, "systemctl": SonicTerminal._systemctl}
