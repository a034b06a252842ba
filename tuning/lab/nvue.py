"""The NVUE switch simulator's state machine: pending / applied / revisions, pure Python.

One :class:`NvueSwitch` per switch holds its configuration trees (see
:mod:`tuning.lab.nvue_config`) and answers one command line at a time with
:meth:`NvueSwitch.run` -> :class:`Reply` ``(stdout, stderr, rc)``. The SSH side
(:mod:`tuning.lab.switches`) only moves text. Transcripts it reproduces:
shared/cases/cli/nvue_*.txt (Cumulus Linux 5.x NVUE CLI, see cli/INDEX.md section A).

Revisions: revision 1 (empty config: every swp at the default MTU 9216, RoCE not
configured) is applied and saved at start. ``nv config apply`` turns the pending
tree into revision N+1; ``--confirm TIME`` keeps the previous revision and rolls
back to it when not confirmed in time (a timer); ``nv config apply <rev>`` re-applies
an older revision. Saving, auto save and reboot (CL 5.8: apply does not save):
:mod:`tuning.lab.nvue_startup`. After every apply, rollback and confirm expiry the applied state
is written to ``<state_dir>/switches/<name>.fabric.json`` (atomically).
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tuning.lab.model import write_switch_state
from tuning.lab.fabric import Fabric, Switch
from tuning.lab.nvue_files import HandEdits, warning as files_warning
from tuning.lab.nvue_faults import FAILED_TO_PREPARE, NVUED_DOWN, PROGRESS_WORD, FaultReader
from tuning.lab.nvue_config import InvalidCommand, Tree, config_commands, config_diff, parse_path, set_path, unset_path
from tuning.lab.nvue_startup import LabStartup, Reply, invalid as _invalid
from tuning.lab.nvue_show import effective_roce, port_table, revision_table, show_interface, show_qos_roce

#: Asks the operator a question (prompt text without newline) and returns the typed answer.
Ask = Callable[[str], str]

DEFAULT_CONFIRM_S = 600  # NVUE reference: --confirm defaults to 10 minutes
_MGMT_WARNING = ("Warning: management interface config is changed. If you are connected with it, "
                 "your conection may be temporary interrupted.\n\n")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass
class Revision:
    """One NVUE revision: its config tree and the columns of ``nv config revision``."""

    rev_id: int
    config: Tree
    state: str = "applied"
    applies: int = 0
    date: str = ""
    user: str = "cumulus"
    message: str = ""
    parent: int | None = None


@dataclass
class _Confirm:
    """A commit-confirm in flight: the revision to confirm, the one to go back to, the timer."""

    rev_id: int
    previous: int
    deadline: float
    timer: threading.Timer | None = field(default=None, repr=False)


def _then_wait(ask: Ask, seconds: float) -> Ask:
    """``ask``, then ``seconds`` of work before the apply answers (holding the switch)."""
    def asked(prompt: str) -> str:
        answer = ask(prompt)
        time.sleep(seconds)
        return answer
    return asked


def parse_duration(text: str) -> int:
    """``"300s"``, ``"10m"``, ``"1h"`` or ``"300"`` -> seconds. Raises ValueError."""
    m = re.fullmatch(r"(\d+)([smhd]?)", text)
    if not m:
        raise ValueError(f"bad time {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2) or "s"]


class NvueSwitch(HandEdits, LabStartup):
    """A Cumulus Linux 5.x switch's NVUE configuration engine (no SSH).

    Args:
        switch: the lab switch (name, ports).  fabric: for LLDP neighbours in ``nv show interface``.
        state_dir: where ``switches/<name>.fabric.json`` is written (None: nowhere).
        clock: seconds since the epoch (tests may inject one).
        auto_save: the release saves on apply (CL 5.9+); default False, CL 5.8 (:mod:`tuning.lab.nvue_startup`).
    """

    def __init__(self, switch: Switch, fabric: Fabric | None = None, state_dir: Path | None = None,
                 clock: Callable[[], float] = time.time, *, auto_save: bool = False) -> None:
        self.name = switch.name
        self.auto_save_default = auto_save
        self.ports = port_table(switch, fabric)
        self.state_dir = state_dir
        self.clock = clock
        self._lock = threading.RLock()
        first = Revision(1, {}, "applied_and_saved", 1, self._now(), "root", "Password sync for user: cumulus")
        self.revisions: dict[int, Revision] = {1: first}
        self.applied_id = 1
        self.saved_id = 1
        self.pending: Tree | None = None
        self.confirm: _Confirm | None = None
        self.faults = FaultReader(state_dir, self.name)  # `fabtune lab inject SWITCH ...`
        self._booted_at = self.faults().reboot_at  # a `reboot` injected before this power-on is past
        self._written: dict | None = None
        self._write_fabric_json()

    # ----- state -------------------------------------------------------------------------
    @property
    def applied(self) -> Tree:
        """The applied configuration tree."""
        return self.revisions[self.applied_id].config

    def _now(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.clock()))

    def fabric_state(self) -> dict:
        """The applied state in the lab contract's ``switches/<name>.fabric.json`` shape."""
        oper = self.faults().oper_mtu
        mtus = {p: oper.get(p, self.applied.get("interface", {}).get(p, {}).get("link", {}).get("mtu", 9216))
                for p, info in self.ports.items() if info["type"] == "swp"}
        ports = {p: {"mtu": m, **({"state": "down"} if self._admin_down(p) else {})} for p, m in mtus.items()}
        return {"ports": ports, "roce": effective_roce(self.applied).as_json()}

    def _admin_down(self, port: str) -> bool:
        """``nv set interface PORT link state down`` is applied."""
        return self.applied.get("interface", {}).get(port, {}).get("link", {}).get("state") == "down"

    def _write_fabric_json(self) -> None:
        if self.state_dir is None:
            return
        self._written = self.fabric_state()
        write_switch_state(self.state_dir, self.name, self._written)

    # ----- dispatch ----------------------------------------------------------------------
    def run(self, line: str, ask: Ask | None = None) -> Reply:
        """Run one command line (``nv ...``) as the switch's shell would.

        Args:
            line: the command as typed.  ask: answers interactive ``[y/N]`` prompts (None: "N").

        Returns:
            The Reply; errors go to stderr with rc 1 (``Invalid Command: ...``).
        """
        words = line.split()
        if not words or words[0] != "nv":
            return Reply(stderr=f"-bash: {words[0] if words else ''}: command not found\n", rc=127)
        with self._lock:
            faults = self.faults()
            if faults.reboot_at > self._booted_at:  # `fabtune lab inject SWITCH reboot`
                self._booted_at = faults.reboot_at
                self.reboot()
            if faults.nvued_down:
                progress = PROGRESS_WORD if words[1:3] == ["config", "apply"] else ""
                return Reply(progress + NVUED_DOWN, rc=1)
            reply = self._dispatch(words[1:], ask or (lambda _prompt: ""))
            if self.fabric_state() != self._written:  # an injected fault changed the operational state
                self._write_fabric_json()
            return reply

    def _dispatch(self, words: list[str], ask: Ask) -> Reply:
        head = words[:2]
        if head[:1] in (["set"], ["unset"]):
            return self._set(words)
        table: dict[str, Callable[[list[str], Ask], Reply]] = {
            "config apply": self._faulty_apply,
            "config diff": lambda w, a: self._diff_revisions(w) if w[2:] else Reply(self._diff()),
            "config detach": self._detach, "config save": self._save,
            "config show": self._show_config, "config revision": self._revision,
            "show interface": self._show_interface, "show qos": self._show_qos, "show system": self._show_system,
        }
        handler = table.get(" ".join(head))
        if handler is None:
            return _invalid(words)
        return handler(words, ask)

    def _faulty_apply(self, words: list[str], ask: Ask) -> Reply:
        """``nv config apply`` under the injected faults: slow-apply waits (after the answer when it
        asks: the apply itself is what takes time), apply-fails refuses."""
        if "--confirm-status" in words:
            return self._apply(words, ask)
        faults = self.faults()
        if faults.slow_apply_s and not ({"-y", "--y", "--assume-yes", "--assume-no", "--confirm-yes",
                                         "--confirm-no"} & set(words)):
            ask = _then_wait(ask, faults.slow_apply_s)
        elif faults.slow_apply_s:
            time.sleep(faults.slow_apply_s)  # holding the switch, as a busy nvued does
        changes = any(not w.startswith("-") and not re.fullmatch(r"\d+[smhd]", w) for w in words[2:]) or \
            bool(self._diff())
        if faults.apply_fails and changes:
            return Reply(FAILED_TO_PREPARE, rc=1)
        return self._apply(words, ask)

    def _set(self, words: list[str]) -> Reply:
        try:
            paths = parse_path(words[1:], set(self.ports), unset=words[0] == "unset")
        except InvalidCommand:
            return _invalid(words)
        pending = copy.deepcopy(self.applied) if self.pending is None else self.pending
        for path, value in paths:
            if words[0] == "set":
                set_path(pending, path, value)
            else:
                unset_path(pending, path)
        self.pending = pending
        return Reply()

    def _diff(self) -> str:
        return "" if self.pending is None else config_diff(self.applied, self.pending)

    def _detach(self, words: list[str], ask: Ask) -> Reply:
        self.pending = None
        return Reply()

    def _show_config(self, words: list[str], ask: Ask) -> Reply:
        if words[2:] != ["-o", "commands"]:
            return _invalid(words)
        return Reply(config_commands(self.applied))

    def _show_interface(self, words: list[str], ask: Ask) -> Reply:
        if len(words) != 2:
            return _invalid(words)
        ports = {}
        for name, info in self.ports.items():
            mtu = self.applied.get("interface", {}).get(name, {}).get("link", {}).get("mtu", info["mtu"])
            mtu = self.faults().oper_mtu.get(name, mtu)  # operational, as the summary shows it
            down = self._admin_down(name) or name in self.faults().down_ports  # State: the oper state
            ports[name] = {**info, "mtu": mtu, **({"state": "down"} if down else {})}
        return Reply(show_interface(ports))

    def _show_qos(self, words: list[str], ask: Ask) -> Reply:
        if words[2:] != ["roce"]:
            return _invalid(words)
        return Reply(show_qos_roce(self.applied))

    # ----- revisions -------------------------------------------------------------------
    def _revision(self, words: list[str], ask: Ask) -> Reply:
        opts = words[2:]
        if opts == ["-o", "json"]:
            data = {str(i): {"state": r.state, "apply-date": r.date, "user": r.user, "message": r.message}
                    for i, r in sorted(self.revisions.items())}
            return Reply(json.dumps(data, indent=2) + "\n")
        if opts == ["--applied", "-o", "json"]:
            rev = self.revisions[self.applied_id]
            parent = self.confirm.previous if self.confirm else self._parent(rev.rev_id)
            data = {"applied": {"state": rev.state, "additional-data": {
                "rev-id": str(rev.rev_id), "parent-revision-id": str(parent)}}}
            return Reply(json.dumps(data, indent=2) + "\n")
        if opts:
            return _invalid(words)
        rows = [[str(i), r.state, f"rev_{i}_apply_{r.applies}", r.date, "CLI", r.user, "Config update", r.message]
                for i, r in sorted(self.revisions.items())]
        return Reply(revision_table(rows))

    def _parent(self, rev_id: int) -> int:
        parent = self.revisions[rev_id].parent
        return rev_id if parent is None else parent

    def _apply(self, words: list[str], ask: Ask) -> Reply:
        opts = words[2:]
        yes = any(o in ("-y", "--y", "--assume-yes") for o in opts)
        no = "--assume-no" in opts
        target = next((o for o in opts if not o.startswith("-") and not re.fullmatch(r"\d+[smhd]", o)), None)
        if "--confirm-status" in opts:
            return self._confirm_status()
        if target is not None and ("--confirm-yes" in opts or "--confirm-no" in opts):
            return self._confirm_answer(target, "--confirm-yes" in opts)
        if self.confirm is not None:
            return Reply(stderr=f"Error: revision {self.confirm.rev_id} is pending confirmation\n", rc=1)
        try:
            confirm_s = self._confirm_seconds(opts)
        except ValueError:
            return _invalid(words)
        if target is not None:
            return self._rollback_to(target, words, ask, yes, no)
        if self.pending is None or not self._diff():
            self.pending = None
            return Reply("Warning: There are no configuration changes to apply.\n")
        warning = files_warning(self.hand_edited()) + (_MGMT_WARNING if "eth0" in self._diff() else "")
        if not self._agreed(ask, warning, yes, no):
            return Reply(warning)
        rev_id = self._new_revision(self.pending)
        self.pending = None
        self._activate(rev_id, confirm_s)
        return Reply(f"applied [rev_id: {rev_id}]\n")

    @staticmethod
    def _agreed(ask: Ask, warning: str, yes: bool, no: bool) -> bool:
        if yes or no:
            return yes and not no
        return ask(warning + "Are you sure? [y/N] ").strip().lower() in ("y", "yes")

    @staticmethod
    def _confirm_seconds(opts: list[str]) -> int | None:
        if "--confirm" not in opts:
            return None
        i = opts.index("--confirm")
        nxt = opts[i + 1] if i + 1 < len(opts) else ""
        return parse_duration(nxt) if re.fullmatch(r"\d+[smhd]?", nxt) else DEFAULT_CONFIRM_S

    def _new_revision(self, config: Tree) -> int:
        rev_id = max(self.revisions) + 1
        self.revisions[rev_id] = Revision(rev_id, copy.deepcopy(config), message="Config update by cumulus",
                                          parent=self.applied_id)
        return rev_id

    def _activate(self, rev_id: int, confirm_s: int | None) -> None:
        previous, rev = self.applied_id, self.revisions[rev_id]
        self.overwrite_files()
        rev.applies += 1
        rev.date = self._now()
        self.applied_id = rev_id
        if confirm_s is None:
            self.mark_applied(rev)  # saved only when auto save is on (tuning.lab.nvue_startup)
        else:
            rev.state = "confirm"
            self.confirm = _Confirm(rev_id, previous, self.clock() + confirm_s)
            self.confirm.timer = threading.Timer(confirm_s, self._expire, args=(rev_id,))
            self.confirm.timer.daemon = True
            self.confirm.timer.start()
        self._write_fabric_json()

    def _rollback_to(self, target: str, words: list[str], ask: Ask, yes: bool, no: bool) -> Reply:
        aliases = {"applied": self.applied_id, "startup": self.saved_id}
        if target == "empty":
            rev_id = self._new_revision({})
        elif target in aliases or (target.isdigit() and int(target) in self.revisions):
            rev_id = aliases.get(target) or int(target)
        else:
            return _invalid(words)
        warning = files_warning(self.hand_edited())
        if not self._agreed(ask, warning, yes, no):
            return Reply(warning)
        self.pending = None
        self._activate(rev_id, None)
        return Reply(f"applied [rev_id: {rev_id}]\n")

    def _confirm_answer(self, target: str, keep: bool) -> Reply:
        if self.confirm is None or target != str(self.confirm.rev_id):
            return Reply(stderr=f"Error: revision {target} is not pending confirmation\n", rc=1)
        if keep:
            self._finish_confirm()
            rev = self.revisions[self.applied_id]
            self.mark_applied(rev)
            self._write_fabric_json()
            return Reply(f"applied [rev_id: {rev.rev_id}]\n")
        previous = self._revert_confirm()
        return Reply(f"applied [rev_id: {previous}]\n")

    def _confirm_status(self) -> Reply:
        if self.confirm is None:
            return Reply("No pending confirmation.\n")
        left = max(0, int(round(self.confirm.deadline - self.clock())))
        return Reply(f"Revision {self.confirm.rev_id} is pending confirmation: {left} seconds left.\n")

    def _finish_confirm(self) -> _Confirm:
        confirm, self.confirm = self.confirm, None
        assert confirm is not None
        if confirm.timer is not None:
            confirm.timer.cancel()
        return confirm

    def _revert_confirm(self) -> int:
        confirm = self._finish_confirm()
        self.revisions[confirm.rev_id].state = "confirm_failed"
        self.applied_id = confirm.previous
        self.pending = None
        self.overwrite_files()
        self._write_fabric_json()
        return confirm.previous

    def _expire(self, rev_id: int) -> None:
        """Timer callback: the confirm window of ``rev_id`` ran out; go back."""
        with self._lock:
            if self.confirm is not None and self.confirm.rev_id == rev_id:
                self._revert_confirm()

    def close(self) -> None:
        """Stop a pending confirm timer (the switch is shutting down; nothing is rolled back)."""
        with self._lock:
            if self.confirm is not None and self.confirm.timer is not None:
                self.confirm.timer.cancel()

