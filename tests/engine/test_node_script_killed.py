"""A node's apply script killed part-way (no ``@@failed`` marker: its shell died) must not be read as
"nothing applied": every planned change counts as applied, the run restores them all and the node
is back byte for byte (issue 18, fault 1: node02 kept 17 changed settings while the run said restored)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from tests.conftest import snapshot_fabric
from tuning import inventory
from tuning.rollout import engine
from tuning.rollout.engine import Options


def _apply_script_of(node_dir: str) -> int | None:
    """The pid of a running node apply script (``@@failed`` in its command line) of ``node_dir``; not
    one of its subshells (bash forks one per pipeline, ``printf ... | tee``, with the same command line)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(f"{entry.path}/cwd") != node_dir:
                continue
            cmdline = Path(entry.path, "cmdline").read_bytes()
            if not (cmdline.startswith(b"/bin/bash\0-c\0") and b"@@failed" in cmdline):
                continue
            ppid = Path(entry.path, "stat").read_bytes().rsplit(b")", 1)[1].split()[1].decode()
            if Path("/proc", ppid, "cmdline").read_bytes() == cmdline:
                continue  # a subshell of the script
        except (OSError, IndexError):
            continue
        return int(entry.name)
    return None


def _next_apply_script(node_dir: str, stop: threading.Event) -> int | None:
    """The pid of ``node_dir``'s apply script once one runs (looked for every 5 ms); None once ``stop`` is set."""
    while not stop.is_set():
        pid = _apply_script_of(node_dir)
        if pid is not None:
            return pid
        time.sleep(0.005)
    return None


def _kill_first_apply(node_dir: str, after_s: float, killed: list[int], stop: threading.Event) -> None:
    while (pid := _next_apply_script(node_dir, stop)) is not None:
        time.sleep(after_s)
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            continue  # it finished first: wait for the next (there is none in a passing run)
        return


def test_a_node_apply_script_killed_midway_is_restored_byte_for_byte(lab_inventory: Path, tmp_path: Path):
    untuned = snapshot_fabric(lab_inventory)
    node_dir = str((lab_inventory / ".state" / "nodes" / "node02").resolve())
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_first_apply, args=(node_dir, 0.3, killed, stop), daemon=True)
    killer.start()
    try:
        rep = engine.run(inventory.load(lab_inventory),
                         Options(mode="apply", journal_dir=tmp_path / "j", limit=["node02"]))
    finally:
        stop.set()
        killer.join(timeout=10)
    assert killed, "node02's apply script was never seen running"
    assert rep.outcome != "applied", rep.outcome
    said = " ".join(rep.errors.values())
    assert "no failing command named: how far it got is unknown" in said, said
    assert rep.restored == ["node02"], (rep.restored, said)
    now = snapshot_fabric(lab_inventory)
    assert sorted(k for k in set(untuned) | set(now) if untuned.get(k) != now.get(k)) == []
