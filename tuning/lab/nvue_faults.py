"""Switch faults of the lab (``fabtune lab inject SWITCH KIND [VALUE]``) and how the NVUE
simulator (:mod:`tuning.lab.nvue`) plays them.

Kinds, persisted like the link faults in ``<state_dir>/fabric.json`` under ``injections``
(one entry per target, the latest wins; ``clear`` removes it):

- ``SWITCH apply-fails``: every ``nv config apply`` that would change the configuration
  (a new apply, ``<rev> --confirm-yes|--confirm-no``, ``<rev>`` rollback) prints the real
  failure of shared/cases/cli/nvue_config_apply__failed_to_prepare_internal_error.txt and
  changes nothing; the pending diff stays.
- ``SWITCH nvued-down``: every ``nv`` command prints the real text of
  nvue_config_apply__nvued_down_progress_word_concat.txt (``apply`` with its progress word
  ``reloading`` run into ``Error: Could not connect to nvued.``; other commands without it).
- ``SWITCH slow-apply SECONDS``: every ``nv config apply`` waits SECONDS (holding the switch,
  as nvued does) before it acts and answers.
- ``SWITCH reboot``: one-off; the switch reboots before it answers its next command: a pending
  commit-confirm and the pending candidate are lost and the startup configuration is applied
  again (:meth:`tuning.lab.nvue_startup.LabStartup.reboot`). Recorded with the time of the
  injection (``value``, ns) beside the switch's other fault; SSH sessions stay open (``ssh-cut``
  cuts them).
- ``SWITCH hand-edit FILE[,FILE...]``: files NVUE manages edited by hand (:mod:`tuning.lab.nvue_files`):
  the next interactive apply lists them in NVUE's warning before ``Are you sure? [y/N]``; answered N
  nothing is applied. Recorded with its time (``at``, ns) beside the switch's other fault, and
  overwritten by the next revision the switch applies.
- ``SWITCH:PORT down`` (a link fault of :mod:`tuning.lab.inject`, read here too): ``nv show interface``
  shows the port's State ``down``.
- ``SWITCH:PORT oper-mtu N``: the port's operational MTU is N whatever the applied one is
  (``nv show interface`` and ``switches/<name>.fabric.json`` show N), as in
  nvue_show_interface_link__op_applied_pending_mtu_mismatch.txt.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from tuning.errors import InputError
from tuning.lab.fabric import Fabric
from tuning.lab.nvue_files import checked

#: the switch fault kinds (``clear`` is shared with the link faults)
SWITCH_KINDS = ("apply-fails", "nvued-down", "slow-apply", "oper-mtu", "reboot", "hand-edit")
#: one-off kinds, kept beside the switch's other fault (the latest of each kind wins)
BESIDE = ("reboot", "hand-edit")
#: the kinds each lab switch OS plays (NVUE all; EOS has no commit-failure text of its own to print
#: and no nvued; SONiC prints GCU's YANG failure for apply-fails)
OS_KINDS: dict[str, tuple[str, ...]] = {"nvue": SWITCH_KINDS, "eos": ("slow-apply", "oper-mtu", "reboot"),
                                        "sonic": ("apply-fails", "slow-apply", "oper-mtu", "reboot")}

#: ``nv config apply`` failing in nvued (networkop/cx#6, CL 5.0): reason indented 2 spaces
FAILED_TO_PREPARE = "Failed to prepare to apply\n  Unrecoverable internal error\n"
#: apply's progress word, printed without a newline (networkop/cx#9)
PROGRESS_WORD = "reloading"
#: what every ``nv`` command prints while nvued is down (networkop/cx#9, CL 5.3)
NVUED_DOWN = ("Error: Could not connect to nvued.\nTo start nvued, use\n\n    sudo systemctl start nvued\n\n"
              "To check the status of nvued, use\n\n    sudo systemctl status nvued\n\n"
              "To configure nvued to start when the system boots, use\n\n    sudo systemctl enable nvued\n")
MAX_SLOW_APPLY_S = 3600


@dataclass(frozen=True)
class Faults:
    """The faults in force on one switch.

    Attributes:
        apply_fails / nvued_down: the kinds above.  slow_apply_s: seconds every apply waits.
        oper_mtu: port -> operational MTU (bytes) that differs from the applied one.
        reboot_at: time of the latest ``reboot`` injection (ns since the epoch; 0: none).
        hand_edited / hand_edit_at: the files of the latest ``hand-edit`` injection and its time (ns; 0: none).
        down_ports: ports with a link ``down`` injected (``fabtune lab inject SWITCH:PORT down``,
            :mod:`tuning.lab.inject`): ``nv show interface`` shows them down.
    """

    apply_fails: bool = False
    nvued_down: bool = False
    slow_apply_s: float = 0.0
    oper_mtu: dict[str, int] = field(default_factory=dict)
    reboot_at: int = 0
    down_ports: frozenset[str] = frozenset()
    hand_edited: tuple[str, ...] = ()
    hand_edit_at: int = 0


def faults_of(injections: list[dict], switch: str) -> Faults:
    """The :class:`Faults` of ``switch`` in a ``fabric.json`` ``injections`` list."""
    kinds = {i.get("kind"): i for i in injections if i.get("target") == switch}
    oper = {i["target"].split(":", 1)[1]: int(i["value"]) for i in injections
            if i.get("kind") == "oper-mtu" and str(i.get("target", "")).startswith(f"{switch}:")}
    slow = kinds.get("slow-apply", {}).get("value", 0)
    down = frozenset(str(i["target"]).split(":", 1)[1] for i in injections
                     if i.get("kind") == "down" and str(i.get("target", "")).startswith(f"{switch}:"))
    edit = kinds.get("hand-edit", {})
    return Faults("apply-fails" in kinds, "nvued-down" in kinds, float(slow or 0), oper,
                  int(kinds.get("reboot", {}).get("value", 0)), down, tuple(edit.get("value", ())),
                  int(edit.get("at", 0)))


class FaultReader:
    """Reads a switch's faults from ``<state_dir>/fabric.json`` when the file changed.

    ``fabtune lab inject`` rewrites that file from another process; a half-written file
    keeps the last faults read.
    """

    def __init__(self, state_dir: Path | None, switch: str) -> None:
        self.path = None if state_dir is None else Path(state_dir) / "fabric.json"
        self.switch = switch
        self._stamp: tuple[int, int] | None = None
        self._faults = Faults()

    def __call__(self) -> Faults:
        """The faults in force now."""
        if self.path is None:
            return self._faults
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp != self._stamp:
                self._faults = faults_of(json.loads(self.path.read_text()).get("injections", []), self.switch)
                self._stamp = stamp
        except (OSError, ValueError):
            pass
        return self._faults


def handles(fabric: Fabric, target: str, kind: str) -> bool:
    """True when ``(target, kind)`` is a switch fault (or clears one) for :func:`inject_switch`."""
    if kind in SWITCH_KINDS:
        return True
    oper = any(i.get("target") == target and i.get("kind") == "oper-mtu" for i in fabric.injections)
    return kind == "clear" and (oper or target in {s.name for s in fabric.switches})


def inject_switch(path: Path, fabric: Fabric, target: str, kind: str, value: str | None) -> list[dict]:
    """Record a switch fault in ``fabric.json`` (``path``) and return the injections in force.

    Args:
        path: ``<state_dir>/fabric.json``.  fabric: its content.
        target: ``SWITCH`` (apply-fails, nvued-down, slow-apply, clear) or ``SWITCH:PORT`` (oper-mtu).
        kind: one of :data:`SWITCH_KINDS` or ``clear``.  value: SECONDS (slow-apply), MTU (oper-mtu) or
            FILE[,FILE...] (hand-edit, :func:`tuning.lab.nvue_files.checked`).

    Raises:
        InputError: unknown switch or port, a missing, extra or out-of-range value.
    """
    entry: dict = {"target": target, "kind": kind}
    switches = {s.name: s for s in fabric.switches}
    os_ = getattr(switches.get(target.partition(":")[0]), "os", "nvue")
    if kind not in (*OS_KINDS.get(os_, SWITCH_KINDS), "clear"):
        raise InputError("KIND", kind, f"{target}'s OS ({os_}) has no {kind} fault in the lab (no real text of it "
                         f"to print); allowed on {target.partition(':')[0]}: {', '.join(OS_KINDS[os_])}, clear")
    if kind == "oper-mtu" or ":" in target:
        sw, _, port = target.partition(":")
        if sw not in switches or port not in switches[sw].ports:
            raise InputError("TARGET", "target", f"{target!r} is not a switch port of the lab; allowed: "
                             + "; ".join(f"{s.name}:{','.join(s.ports)}" for s in fabric.switches))
        if kind == "oper-mtu":
            entry["value"] = _number(value, kind, 68, 9216)
    else:
        if target not in switches:
            raise InputError("TARGET", "target", f"{target!r} is not a switch of the lab; allowed: "
                             f"{', '.join(switches)}")
        if kind == "slow-apply":
            entry["value"] = _number(value, kind, 1, MAX_SLOW_APPLY_S)
        elif kind == "hand-edit":
            entry.update(value=checked(value), at=time.time_ns())
        elif value is not None:
            raise InputError("VALUE", "value", f"{kind} takes no value (got {value!r})")
    old = next((i for i in fabric.injections if i.get("target") == target), {})
    if kind == "oper-mtu" or old.get("kind") == "oper-mtu":
        # the switch rewrites its file at its next command; until then the fabric model reads this
        was = _port_mtu(path.parent, target, entry["value"] if kind == "oper-mtu" else old.get("applied"))
        if kind == "oper-mtu":
            entry["applied"] = old.get("applied") if old.get("kind") == "oper-mtu" else was
    if kind in BESIDE and (kind != "reboot" or value is None):
        if kind == "reboot":
            entry["value"] = time.time_ns()  # one-off: beside the target's other fault, replacing an older one
        fabric.injections = [i for i in fabric.injections if (i.get("target"), i.get("kind")) != (target, kind)]
    else:
        fabric.injections = [i for i in fabric.injections if i.get("target") != target]
    if kind != "clear":
        fabric.injections.append(entry)
    fabric.save(path)
    return list(fabric.injections)


def _port_mtu(state_dir: Path, target: str, mtu: int | None) -> int | None:
    """Set ``ports[PORT].mtu`` of ``switches/SWITCH.fabric.json`` to ``mtu`` (None: leave it);
    returns the MTU it held (None: no file yet)."""
    sw, _, port = target.partition(":")
    path = state_dir / "switches" / f"{sw}.fabric.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    was = data.setdefault("ports", {}).setdefault(port, {}).get("mtu")
    if mtu is not None:
        data["ports"][port]["mtu"] = mtu
        tmp = path.with_suffix(".inject.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        tmp.replace(path)
    return was


def _number(value: str | None, kind: str, lo: int, hi: int) -> int:
    what = "SECONDS" if kind == "slow-apply" else "MTU"
    if value is None or not re.fullmatch(r"[0-9]{1,7}", str(value)) or not lo <= int(value) <= hi:
        raise InputError("VALUE", "value", f"{kind} needs {what} as an integer in {lo}..{hi} (got {value!r})")
    return int(value)
