"""Issue 8 under faults (tester 3): a batched run (``serial: [1, 1, "100%"]``, the lab's profile changes
nodes and switches, so batch 1 = node01 + every switch, batch 2 = node02, batch 3 = node03 + node04)
killed at per-batch stages, then ``fabtune rollback RUN_ID`` from the journal alone: every node file
and every switch's running config equal the pre-run snapshot (tests/conftest.py ``snapshot_fabric``).

Compact on purpose (< 90 s on 2 cores): ``fabtune apply`` (same batch engine and stage hooks as
``rollout``, no RDMA verification) so that a kill in batch 3 is reached in seconds. The slower
rollout-only cases (kill at verify-batch-N, ``on_regression: restore-all`` after batch 3 regressed)
were run by hand (tester 3's report).

Ports: ``T3_8_LAB_BASE_PORT`` (env, default 24700): nodes base+1..4, switches base+11..13.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from tests.adversarial._cli import copy_lab_inventory, lab_up
from tests.conftest import REPO, snapshot_fabric

pytestmark = pytest.mark.lab

BASE = int(os.environ.get("T3_8_LAB_BASE_PORT", "24700"))
PORTS = {"node01": BASE + 1, "node02": BASE + 2, "node03": BASE + 3, "node04": BASE + 4,
         "leaf01": BASE + 11, "leaf02": BASE + 12, "spine01": BASE + 13}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    inv = copy_lab_inventory(tmp_path_factory.mktemp("t3k8") / "lab", PORTS)
    allv = inv / "group_vars" / "all.yml"
    data = yaml.safe_load(allv.read_text())
    data["fabtune_rollout"] = {"serial": [1, 1, "100%"]}
    allv.write_text(yaml.safe_dump(data, sort_keys=False))
    with lab_up(inv):
        yield inv


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuning", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def _killed_at(inv: Path, journal: Path, stage: str, sig: int, *cmd: str, again: str | None = None) -> tuple[int, str]:
    """``fabtune CMD`` paused at ``stage`` and hit with ``sig``; with ``again`` (a second pause stage),
    hit with ``sig`` once more when it pauses there; (exit code, output). SIGKILL after 60 s: the
    restore after the signal took more than 20 s under the suite's own load (~15 on 2 cores, CI of
    session 14); the run must still end by itself."""
    p = subprocess.Popen([sys.executable, "-m", "tuning", *cmd, "-i", str(inv), "--journal-dir", str(journal)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                         env={**os.environ, "FABTUNE_TEST_PAUSE_AT": stage + (f",{again}" if again else "")},
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    out: list[str] = []
    hit, hit_again = threading.Event(), threading.Event()

    def pump():
        for line in p.stdout:
            out.append(line)
            if again and f"test pause at {again.partition(':')[0]} " in line:
                hit_again.set()
            elif "test pause at" in line:
                hit.set()

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    # the wait for the run to reach the stage (batches 1-2 applied, verified and confirmed: about 30 s
    # alone, twice that beside the other worker), not a measure of the run
    if not hit.wait(180):
        p.kill()  # a run left holding the inventory's lock would fail the next test for this one's reason
        raise AssertionError("".join(out)[-800:])
    p.send_signal(sig)
    if again:
        if not hit_again.wait(60):
            p.kill()
            raise AssertionError("".join(out)[-800:])
        p.send_signal(sig)
    try:
        p.wait(60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        out.append("!!! still running 60 s after the signal\n")
    t.join(5)
    return p.returncode, "".join(out)


def _journal(journal: Path) -> dict:
    runs = sorted(journal.glob("2*.json"))
    assert len(runs) == 1, runs
    return json.loads(runs[0].read_text())


def _diff(a: dict, b: dict) -> list[str]:
    return [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _rollback_exact(inv: Path, journal: Path, rid: str, pre: dict, unfinished: bool = True) -> None:
    runs = _run("runs", "--journal-dir", str(journal))
    assert runs.returncode == 0 and rid in runs.stdout, runs.stdout[-400:] + runs.stderr[-400:]
    rep = _run("report", rid, "--journal-dir", str(journal))
    assert rep.returncode == 0 and ("unfinished" in rep.stdout) == unfinished, rep.stdout[-400:] + rep.stderr[-400:]
    rb = _run("rollback", rid, "-i", str(inv), "--journal-dir", str(journal))
    assert rb.returncode == 0, rb.stdout[-600:] + rb.stderr[-600:]
    assert _diff(pre, snapshot_fabric(inv)) == []


@pytest.mark.parametrize("stage,sig", [
    # tester 3 finding 1: a switch committed but killed before its revision was journaled (state
    # pushing, revision None) is recognised by its applied revision's parent (tuning.targets.switch.switch_restore_action)
    ("apply-switch-batch-1", signal.SIGKILL),
    ("apply-node-batch-3", signal.SIGKILL),     # batches 1-2 done, node03/node04 written
    ("apply-batch-3", signal.SIGINT),           # between batches: Ctrl-C on the main thread
    ("apply-node-batch-3:3", signal.SIGINT),    # Ctrl-C while batch 3 is written: batch 3 restored, 1-2 kept
    ("apply-node-batch-3:3", signal.SIGTERM),   # scancel / systemd / a CI timeout: as Ctrl-C, exit 143
])
def test_kill_at_batch_stage_then_rollback_exact(lab: Path, tmp_path: Path, stage: str, sig: int):
    pre = snapshot_fabric(lab)
    journal, doc_path = tmp_path / "j", tmp_path / "report.json"
    code, out = _killed_at(lab, journal, stage, sig, "apply", "--report-json", str(doc_path))
    assert "still running" not in out, out[-800:]
    j = _journal(journal)
    batches = {b["index"]: b["outcome"] for b in j["batches"]}
    n = int(re.search(r"batch-(\d)", stage).group(1))
    assert batches == {i: ("kept" if i < n else "not-run") for i in (1, 2, 3)} or sig != signal.SIGKILL, batches
    states = {name: d.get("state") for name, d in j["devices"].items()}
    if sig == signal.SIGKILL:
        assert code == -9
        for name, d in j["devices"].items():  # every device of a done batch, and every one pushed now
            if d.get("batch", 9) < n and d.get("changes"):  # a device with nothing to change is never pushed
                assert states[name] in ("applied", "unchanged"), states
    else:
        assert code == (143 if sig == signal.SIGTERM else 130), out[-600:]
        restored = _console_report_and_journal_agree(out, json.loads(doc_path.read_text()), j, sig)
        assert restored == (["node03", "node04"] if stage.startswith("apply-node") else []), restored
    _rollback_exact(lab, journal, j["run_id"], pre, unfinished=sig == signal.SIGKILL)


def test_a_second_ctrl_c_during_the_restore_still_prints_what_was_restored(lab: Path, tmp_path: Path):
    """Ctrl-C while batch 3 is written, then Ctrl-C again while its restore runs (an impatient
    operator): the restore's workers finish the devices they hold, and the summary counts what the
    journal records restored (it said "0 device(s) restored" with every device back, session 13's
    tryout); the run is left unfinished in the journal, and `fabtune rollback` finds it whole."""
    pre = snapshot_fabric(lab)
    journal, doc_path = tmp_path / "j", tmp_path / "report.json"
    code, out = _killed_at(lab, journal, "apply-node-batch-3:3", signal.SIGINT, "apply", "--report-json",
                           str(doc_path), again="restore-device:3")
    assert "still running" not in out and code == 130, out[-800:]
    j = _journal(journal)
    restored = sorted(n for n, d in j["devices"].items() if d.get("restored"))
    assert restored == ["node03", "node04"], restored
    assert json.loads(doc_path.read_text())["restored"] == restored
    assert "interrupted (Ctrl-C): 2 device(s) restored" in " ".join(out.split()), out[-1500:]
    _rollback_exact(lab, journal, j["run_id"], pre)


def _console_report_and_journal_agree(out: str, doc: dict, j: dict, sig: int = signal.SIGINT) -> list[str]:
    """A Ctrl-C'd (or SIGTERM'd) run prints and writes the same summary as any other ending, and as
    its journal (issue 19): the outcome, the restored devices and each batch's outcome; exit 130
    (SIGTERM: 143) in both."""
    restored = sorted(n for n, d in j["devices"].items() if d.get("restored"))
    assert doc["restored"] == restored, (doc["restored"], restored)
    assert doc["outcome"] == j["outcome"] and doc["outcome"] in ("halted", "rolled-back"), (doc["outcome"], j["outcome"])
    assert [b["outcome"] for b in doc["batches"]] == [b["outcome"] for b in j["batches"]]
    term = sig == signal.SIGTERM
    assert (doc["exit_code"], doc["error"]["type"]) == ((143, "Terminated") if term else (130, "KeyboardInterrupt"))
    text = " ".join(out.split())
    assert not restored or f"restored: {', '.join(restored)} (every touched device is back" in text, out[-1500:]
    kept = sum(1 for b in j["batches"] if b["outcome"] == "kept")
    said = f"HALTED at batch {len(j['batches'])}: that batch restored, {kept} earlier batch(es) kept" \
        if doc["outcome"] == "halted" else "ROLLED BACK"
    assert said in text and f"interrupted ({'SIGTERM' if term else 'Ctrl-C'})" in text, out[-1500:]
    return restored
