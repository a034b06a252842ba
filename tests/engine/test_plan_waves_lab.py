"""A plan holds at most ``max_connections`` device sessions at once (issue 24, bounded resources):
it connects, collects and closes that many devices at a time, so a fleet larger than the
file-descriptor limit is planned; the plan is the same as with every session open at once. Measured
on the lab: the process's open sockets (``/proc/self/fd`` links ``socket:[...]``) sampled through
the run, above those it held before."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from tuning import inventory
from tuning.model.policy import RolloutPolicy
from tuning.rollout import engine
from tuning.rollout.engine import Options

pytestmark = pytest.mark.lab


def _sockets() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


def _plan(inv_dir: Path, journal: Path, max_connections: int) -> tuple[dict, int, list[str]]:
    """(changes, the most sockets above the start held during the plan, progress lines)."""
    start, peak, done, said = _sockets(), [0], threading.Event(), []

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _sockets() - start)
            time.sleep(0.005)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        rep = engine.run(inventory.load(inv_dir), Options(mode="plan", journal_dir=journal,
                                                          policy=RolloutPolicy(max_connections=max_connections)),
                         said.append)
    finally:
        done.set()
        t.join(timeout=5)
    return rep.changes, peak[0], said


def test_a_plan_holds_at_most_max_connections_sessions_and_plans_the_same(lab_inventory: Path, tmp_path: Path):
    every, peak_all, _ = _plan(lab_inventory, tmp_path / "j", 1024)
    two, peak_two, said = _plan(lab_inventory, tmp_path / "j", 2)
    assert two == every and sum(len(c) for c in two.values()) > 100  # the untuned lab: every domain changes
    assert peak_all >= 7, peak_all  # 4 nodes and 3 switches at once
    assert peak_two == 2, peak_two  # each wave of two held both sessions at once, never a third
    assert [x for x in said if x.startswith("devices ")] == [
        "devices 1-2 of 7 (at most 2 connected at once)", "devices 3-4 of 7 (at most 2 connected at once)",
        "devices 5-6 of 7 (at most 2 connected at once)", "devices 7-7 of 7 (at most 2 connected at once)"]
