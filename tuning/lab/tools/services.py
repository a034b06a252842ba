"""Stand-in of ``systemctl`` on a lab node (systemd 252): unit enablement and the services the
lab's agents stand for. Stdlib only.

- ``[--root=DIR] enable|disable UNIT``: the ``[Install] WantedBy=`` links of a unit file in
  ``etc/systemd/system`` (``DIR``, else the node's sysroot for ``/``). ``enable`` makes
  ``<target>.wants/UNIT -> /etc/systemd/system/UNIT`` and prints ``Created symlink ... → ....``
  on stderr; ``disable`` removes it (``Removed "..."``). A missing unit file: ``Failed to enable
  unit: Unit file UNIT does not exist.``, exit 1.
- ``is-active UNIT``: ``active`` (exit 0) or ``inactive`` (exit 3), also for an unknown unit.
- ``start|stop|restart|try-restart UNIT``: the lab's agents (irqbalance): stop ends the running
  agent (its pid file), start/restart run it again (it rereads its environment file);
  try-restart only if it is running.
Without root, changes are refused as polkit refuses a non-interactive caller:
``Failed to <verb> <unit>: Interactive authentication required.`` (exit 1; M confidence).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tuning.lab.sudo import is_privileged

UNIT_DIR = "etc/systemd/system"


def _wanted_by(unit_file: Path) -> list[str]:
    targets, section = [], ""
    for line in unit_file.read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Install]" and line.startswith("WantedBy="):
            targets += line.split("=", 1)[1].split()
    return targets


def _enable(root: Path, verb: str, unit: str) -> int:
    unit_file = root / UNIT_DIR / unit
    if not unit_file.is_file():
        print(f"Failed to {verb} unit: Unit file {unit} does not exist.", file=sys.stderr)
        return 1
    for target in _wanted_by(unit_file):
        link = root / UNIT_DIR / f"{target}.wants" / unit
        shown, dest = f"/{UNIT_DIR}/{target}.wants/{unit}", f"/{UNIT_DIR}/{unit}"
        if verb == "enable" and not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(dest, link)
            print(f"Created symlink {shown} \u2192 {dest}.", file=sys.stderr)
        elif verb == "disable" and link.is_symlink():
            link.unlink()
            print(f'Removed "{shown}".', file=sys.stderr)
    return 0


def _service(root: Path, verb: str, unit: str) -> int:
    from tuning.lab.agents import service_file, spawn, stop

    state = service_file(root, unit)
    if verb == "is-active":
        active = state.is_file() and state.read_text().strip() == "active"
        print("active" if active else "inactive")
        return 0 if active else 3
    if not state.is_file():
        if verb == "try-restart":
            return 0  # try-restart of a unit that is not there or not running does nothing
        print(f"Failed to {verb} {unit}: Unit {unit} not found.", file=sys.stderr)
        return 5
    running = state.read_text().strip() == "active"
    if verb == "try-restart" and not running:
        return 0
    stop(root, unit)
    state.write_text(("inactive" if verb == "stop" else "active") + "\n")
    lab, node = os.environ.get("FABTUNE_LAB_DIR"), os.environ.get("FABTUNE_LAB_NODE")
    if verb != "stop" and lab and node:
        spawn(Path(lab), node, unit.removesuffix(".service"))
    return 0


def systemctl(argv: list[str]) -> int:
    """``systemctl [--root=DIR] VERB UNIT`` (see the module docstring)."""
    root = Path(os.environ.get("FABTUNE_LAB_SYSROOT", "/"))
    args = []
    for arg in argv:
        if arg.startswith("--root="):
            root = Path(arg.split("=", 1)[1])
        elif not arg.startswith("-"):
            args.append(arg)
    if len(args) != 2 or args[0] not in ("enable", "disable", "is-active", "start", "stop", "restart", "try-restart"):
        print("fabtune lab: systemctl supports enable|disable|is-active|start|stop|restart|try-restart UNIT",
              file=sys.stderr)
        return 1
    verb, unit = args
    if verb != "is-active" and not is_privileged():
        print(f"Failed to {verb} {'unit' if verb in ('enable', 'disable') else unit}: "
              "Interactive authentication required.", file=sys.stderr)
        return 1
    if verb in ("enable", "disable"):
        return _enable(root, verb, unit)
    return _service(root, verb, unit)
