"""Issue 18, must-show: a node's apply script killed at 1 s, 3 s and 6 s after it starts. The lab's
``slow-tools`` fault (every stand-in of node02 waits a fixed delay before it acts) stretches the script
well past 6 s, so each kill lands mid-script at a different point of its progress, read from node02's
sysroot at the kill. The run must not read the kill as "nothing applied": it names no failing command,
restores node02 from its own journal, and every device ends byte-equal to its snapshot.

One lab for the module (node02, the mtu, sysctl and nic_qos domains only: every command a Python stand-in).
How far the script got is read while the test holds the node lock (``/run/fabtune/node.lock`` in the
sysroot, :mod:`tuning.node.nodelock`): the killed script's last tool keeps the lock until it exits, the
run's restore script waits for it, so nothing moves while the changed files are counted.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import COUNTER_FILES, REPO, running_lab, snapshot_fabric
from tests.engine.test_node_script_killed import _next_apply_script
from tuning import inventory
from tuning.errors import InputError
from tuning.lab.inject import inject, list_injections
from tuning.rollout import engine
from tuning.rollout.engine import Options

pytestmark = pytest.mark.lab

NODE = "node02"
DOMAINS = {"mtu", "sysctl", "nic_qos"}
#: what the slow-tools delays add up to over the whole script (s): clearly past the last kill
SCRIPT_S = 10.0
KILLS_S = (1, 3, 6)
LOCK = "run/fabtune/node.lock"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with running_lab(tmp_path_factory.mktemp("killed-at")) as inv:
        yield inv


@pytest.fixture(scope="module")
def untuned(lab: Path) -> tuple[dict, int]:
    """The power-on fabric's snapshot and how many apply commands the run will send to node02."""
    plan = engine.run(inventory.load(lab), Options(mode="plan", limit=[NODE], domains=set(DOMAINS)))
    n = len(plan.changes[NODE])
    assert n >= 30, plan.changes  # enough commands for the three kills to land far apart
    return snapshot_fabric(lab), n


def test_slow_tools_fault_is_declared_persisted_listed_and_cleared(lab: Path, tmp_path: Path):
    """``NODE slow-tools SECONDS``: one entry beside the node's other faults, the seconds in the node's
    ``hw/lab-faults/slow-tools``; a Python stand-in and ``tee`` wait that long, then act; ``clear`` ends it."""
    state = lab / ".state"
    fault = state / "nodes" / NODE / "sysroot" / "hw/lab-faults/slow-tools"
    for target, value in (("node02:mlx5_0", "1"), (NODE, None), (NODE, "0"), (NODE, "601"), (NODE, "0.0001"),
                          (NODE, "nan")):
        with pytest.raises(InputError, match="slow-tools"):
            inject(state, target, "slow-tools", value)
    assert inject(state, NODE, "slow-tools", "0.300") == [{"target": NODE, "kind": "slow-tools", "value": "0.3"}]
    assert fault.read_text() == "0.3\n" and list_injections(state)[0]["value"] == "0.3"
    env = {**os.environ, "FABTUNE_LAB_SYSROOT": str(fault.parents[2])}
    for argv, stdin in (([str(state / "bin" / "lscpu")], ""), ([str(state / "bin" / "tee"), str(tmp_path / "f")], "x\n")):
        t0 = time.monotonic()
        res = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env, timeout=30)
        assert res.returncode == 0 and time.monotonic() - t0 >= 0.3, (argv, res.stderr)
    assert (tmp_path / "f").read_text() == "x\n"  # then it acted as always
    assert inject(state, NODE, "clear") == [] and not fault.exists()


def _changed(sysroot: Path, before: dict) -> int:
    """node02's sysroot files that differ from ``before`` (its node lock aside)."""
    n = 0
    for folder, _dirs, files in os.walk(sysroot):
        for name in files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, sysroot)
            key = f"{NODE}:{rel}"
            if rel == LOCK or os.path.islink(path) or COUNTER_FILES.match(rel):
                continue
            with open(path, "rb") as f:
                n += f.read() != before.get(key)
    return n


def _kill_and_count(state: Path, after_s: float, before: dict, out: dict, stop: threading.Event) -> None:
    """Kill node02's apply script ``after_s`` s after it starts, wait for its last tool under the node
    lock, count what changed, clear the fault, let the run's restore go on."""
    node_dir = str((state / "nodes" / NODE).resolve())
    sysroot = state / "nodes" / NODE / "sysroot"
    pid = _next_apply_script(node_dir, stop)
    if pid is None:
        return
    out["commands"] = Path(f"/proc/{pid}/cmdline").read_bytes().count(b"@@failed")
    time.sleep(after_s)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        out["finished"] = True  # the script ended before the kill: the case proves nothing
        return
    with open(sysroot / LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # once the killed script's last tool has exited
        out["changed"] = _changed(sysroot, before)
        inject(state, NODE, "clear")  # the restore runs at full speed


def test_apply_script_killed_at_1_3_6_s_is_restored_byte_for_byte_at_three_points(lab: Path, untuned, tmp_path: Path):
    """Each kill is restored byte for byte, and the three found a different number of node02's settings
    files changed, growing with the time (one test, so the three always run together)."""
    counts = [_kill_case(lab, untuned, after_s, tmp_path / f"j{after_s}") for after_s in KILLS_S]
    assert counts == sorted(set(counts)), dict(zip(KILLS_S, counts))  # strictly growing: three different points


def _kill_case(lab: Path, untuned, after_s: int, journal: Path) -> int:
    """One kill ``after_s`` s into node02's apply script: the run restores it byte for byte; returns how
    many settings files had changed at the kill."""
    before, n_commands = untuned
    state = lab / ".state"
    delay = round(SCRIPT_S / n_commands, 3)
    inject(state, NODE, "slow-tools", f"{delay:.3f}")
    out: dict = {}
    stop = threading.Event()
    killer = threading.Thread(target=_kill_and_count, args=(state, after_s, before, out, stop), daemon=True)
    killer.start()
    try:
        rep = engine.run(inventory.load(lab),
                         Options(mode="apply", journal_dir=journal, limit=[NODE], domains=set(DOMAINS)))
    finally:
        stop.set()
        killer.join(timeout=30)
        inject(state, NODE, "clear")
    assert out.get("commands") == n_commands, out  # the script the plan counted
    assert "changed" in out, f"node02's apply script was not killed mid-way: {out}"
    assert out["changed"] > 0, out
    assert list_injections(state) == []
    assert rep.outcome != "applied", rep.outcome
    said = " ".join(rep.errors.values())
    assert f"no failing command named: how far it got is unknown, so every one of its {n_commands} change(s) " \
           "counts as applied" in said, said
    assert rep.restored == [NODE], (rep.restored, said)
    now = snapshot_fabric(lab)
    assert sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k)) == [], after_s
    return out["changed"]


def _cut_mid_script(state: Path, after_s: float, out: dict, stop: threading.Event) -> None:
    """Cut node02's SSH connections from the lab side ``after_s`` s into its apply script."""
    pid = _next_apply_script(str((state / "nodes" / NODE).resolve()), stop)
    if pid is None:
        return
    time.sleep(after_s)
    out["running"] = os.path.exists(f"/proc/{pid}")
    inject(state, NODE, "ssh-cut")


def test_ssh_cut_mid_push_on_a_node_is_restored_by_the_run_byte_for_byte(lab: Path, untuned, tmp_path: Path):
    """node02's SSH connection cut by the lab 1 s into its (3 s) apply script: the run restores node02
    over a new session (waiting on the node lock for the script sshd left running), says why it
    failed, and every device is back byte for byte; `fabtune rollback RUN` then has nothing left."""
    before, n_commands = untuned
    state = lab / ".state"
    inject(state, NODE, "slow-tools", f"{round(3.0 / n_commands, 3):.3f}")
    out: dict = {}
    stop = threading.Event()
    cutter = threading.Thread(target=_cut_mid_script, args=(state, 1.0, out, stop), daemon=True)
    cutter.start()
    journal = tmp_path / "j"
    try:
        rep = engine.run(inventory.load(lab), Options(mode="apply", journal_dir=journal, limit=[NODE],
                                                      domains=set(DOMAINS)))
    finally:
        stop.set()
        cutter.join(timeout=30)
        inject(state, NODE, "clear")
    assert out.get("running"), f"the cut did not land while node02's apply script ran: {out}"
    assert (rep.outcome, rep.restored) == ("rolled-back", [NODE]), (rep.outcome, rep.errors)
    assert f"every one of its {n_commands} change(s) counts as applied" in rep.errors[NODE], rep.errors
    now = snapshot_fabric(lab)
    assert sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k)) == []
    res = subprocess.run([sys.executable, "-m", "tuning", "rollback", rep.run_id, "--journal-dir", str(journal)],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert res.returncode == 0 and "nothing to roll back" in res.stdout, res.stdout + res.stderr


SWITCH = "leaf01"
#: how long the lab holds every ``nv config apply`` of leaf01 (s), and when the cut lands after the
#: journal says ``pushing`` (s): the few commands before the apply take well under a second
SLOW_APPLY_S, CUT_AFTER_S = 4, 1.5


def cut_mid_apply(state: Path, journal: Path, out: dict, stop: threading.Event, switch: str = SWITCH) -> None:
    """Cut ``switch``'s SSH sessions from the lab side ``CUT_AFTER_S`` s after the journal says it is pushing."""
    while not stop.is_set():
        for f in journal.glob("*.json"):
            try:
                rec = json.loads(f.read_text())["devices"].get(switch, {})
            except (OSError, ValueError, KeyError):
                continue
            if rec.get("state") == "pushing":
                time.sleep(CUT_AFTER_S)
                out["cut"] = inject(state, switch, "ssh-cut")
                return
        time.sleep(0.02)

def cut_during_apply(inv: Path, journal: Path, switch: str):
    """``fabtune apply`` of ``switch`` alone (no verification) while the lab holds its commit
    ``SLOW_APPLY_S`` s and cuts its SSH sessions ``CUT_AFTER_S`` s after the journal says pushing.
    Returns ``(report, injections in force at the cut)``; the slow-apply is cleared after."""
    state = inv / ".state"
    inject(state, switch, "slow-apply", str(SLOW_APPLY_S))
    journal.mkdir(mode=0o700)
    out: dict = {}
    stop = threading.Event()
    cutter = threading.Thread(target=cut_mid_apply, args=(state, journal, out, stop, switch), daemon=True)
    cutter.start()
    try:
        rep = engine.run(inventory.load(inv), Options(mode="apply", journal_dir=journal, limit=[switch], verify=False))
    finally:
        stop.set()
        cutter.join(timeout=30)
        inject(state, switch, "clear")
    return rep, out.get("cut", [])



def test_ssh_cut_mid_apply_on_a_switch_is_restored_by_the_run(lab: Path, tmp_path: Path):
    """leaf01's session cut by the lab while its ``nv config apply`` runs, answered ``y`` (the lab holds
    the apply 4 s after the answer; the switch finishes it, as nvued does): the driver says at once that the session was lost
    (netmiko alone would wait out the read timeout twice), the journal keeps ``pushing`` (how far the
    push got is unknown), and the run restores leaf01 over a new session: the commit the cut apply
    made sits directly on leaf01's snapshot revision, so it is this run's, and the snapshot revision
    is applied again. Every device is back as before; `fabtune rollback RUN` then has nothing left."""
    state = lab / ".state"
    with pytest.raises(InputError, match="ssh-cut takes a whole node or switch; allowed: node01, "):
        inject(state, f"{SWITCH}:swp1", "ssh-cut")
    before = snapshot_fabric(lab)
    inject(state, SWITCH, "slow-apply", str(SLOW_APPLY_S))
    journal = tmp_path / "j"
    journal.mkdir(mode=0o700)
    out: dict = {}
    stop = threading.Event()
    cutter = threading.Thread(target=cut_mid_apply, args=(state, journal, out, stop), daemon=True)
    cutter.start()
    t0 = time.monotonic()
    try:
        rep = engine.run(inventory.load(lab), Options(mode="apply", journal_dir=journal, limit=[SWITCH],
                                                      verify=False))
    finally:
        stop.set()
        cutter.join(timeout=30)
        inject(state, SWITCH, "clear")
    took = time.monotonic() - t0
    assert any(i["kind"] == "ssh-cut" and i["target"] == SWITCH for i in out.get("cut", [])), out
    assert {"target": SWITCH, "kind": "slow-apply", "value": SLOW_APPLY_S} in out["cut"]  # side by side
    assert (rep.outcome, rep.restored) == ("rolled-back", [SWITCH]), (rep.outcome, rep.errors)
    said = rep.errors[SWITCH]
    assert said.startswith("`nv config apply` answered `y` lost the session: the SSH session was closed by the "
                           "switch or the network; whether the switch acted on it is unknown"), said
    assert took < 60, took  # the cut is seen when it happens, not after the apply's read timeouts
    now = snapshot_fabric(lab)
    assert [k for k in sorted(set(before) | set(now)) if before.get(k) != now.get(k)
            and not k.endswith(":revision")] == []
    res = subprocess.run([sys.executable, "-m", "tuning", "rollback", rep.run_id, "--journal-dir", str(journal)],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert res.returncode == 0 and "nothing to roll back" in res.stdout, res.stdout + res.stderr
