"""Tester T9 (issue 9, the Ansible front end), as a new user and as an adversary, over real SSH.

1. Fuzz: malformed host vars of node02 (bad types, near-miss keys, injection strings into netdev and
   sysctl names/values, huge values, vault garbage) through ``tune.yml --check``: each refused
   (exit 2) with one line naming host and key, no traceback, no byte changed on the lab.
   ``T9_FUZZ_ALL=1`` runs every generated case (~80, minutes under load); by default a sample.
2. Kill: SIGKILL / SIGINT of ``ansible-playbook tune.yml`` mid-push; the next playbook is refused
   naming the stale run, and ``rollback.yml -e run_id=...`` restores every byte.

A lab on this tester's own ports (base 30050).
"""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.ansible.playbook_run import PLAYBOOK_BIN, REPO, play
from tests.conftest import running_lab, snapshot_fabric

pytestmark = [pytest.mark.ansible, pytest.mark.lab]


_BAD = {"str": "9000", "float": 9000.5, "neg": -1, "huge": 10**30, "bool": True, "null": None, "list": [9000],
        "dict": {"a": 1}, "inject": "9000; touch /tmp/t9-pwned", "subst": "$(touch /tmp/t9-pwned)",
        "longstr": "x" * 100000, "nl": "1\n2", "nul": "a\x00b"}


def _cases() -> list[tuple[str, object, object, str]]:
    """(name, key, value, the key's name the error must show)."""
    out: list[tuple[str, object, object, str]] = []
    for key in ("mtu", "nic_qos.trust", "nic_qos.pfc_priority", "nic_qos.roce_dscp", "irq_affinity",
                "nics.0.netdev", "nics.0.rail", "nics.0.ipv4", "nics.0.switch_port", "sysctl.net.core.rmem_max"):
        for tag, val in _BAD.items():
            out.append((f"{key}={tag}", key, val, key.split(".")[-1] if key.startswith("nics") else key.split(".")[0]))
    for nm in ("mtuu", "nic_qoss", "sysctls", "irq_afinity", "fabtune_serail", "fabtune_foo", "MTU", "nic-qos"):
        out.append((f"nearmiss:{nm}", nm, 1, nm))
    for sk in ("net.core.rmem_max; touch /tmp/t9-pwned", "../../../../tmp/t9-pwned", "net/core/rmem_max",
               "net.core.rmem_max\n", "$(touch /tmp/t9-pwned)", "net..core", "", "a" * 5000):
        out.append((f"sysctlkey:{sk[:20]!r}", ("sysctl", sk), 1, "sysctl"))
    for nd in ("enp12s0np0; reboot", "../../etc", "$(id)", "a" * 300, "enp12s0np0\u202e", "-rf"):
        out.append((f"netdev:{nd[:20]!r}", "nics.0.netdev", nd, "netdev"))
    out.append(("nics-str", "nics", "enp12s0np0", "nics"))
    out.append(("nics-ints", "nics", [1, 2], "nics"))
    return out


SAMPLE = ("nic_qos.trust=dict", "nearmiss:nic_qoss", "sysctlkey:'net.core.rmem_max; t'",
          "netdev:'enp12s0np0; reboot'")


def _apply(data: dict, key: object, val: object) -> dict:
    if isinstance(key, tuple):
        data.setdefault("sysctl", {})[key[1]] = val
        return data
    parts = str(key).split(".")
    if parts[0] == "sysctl":
        data.setdefault("sysctl", {})[".".join(parts[1:])] = val
        return data
    cur = data
    for p in parts[:-1]:
        cur = cur[int(p)] if p.isdigit() else cur.setdefault(p, {})
    cur[parts[-1]] = val
    return data


@pytest.fixture(scope="module")
def t9_lab(tmp_path_factory) -> Path:
    with running_lab(tmp_path_factory.mktemp("t9lab")) as inv:
        yield inv


def test_fuzzed_host_vars_are_refused_with_one_line_nothing_pushed(t9_lab: Path, tmp_path: Path) -> None:
    inv = t9_lab
    hv = inv / "host_vars" / "node02.yml"
    orig = hv.read_text()
    base = yaml.safe_load(orig)
    cases = _cases() if os.environ.get("T9_FUZZ_ALL") else [c for c in _cases() if c[0] in SAMPLE]
    assert len(cases) == len(SAMPLE) or len(cases) > 60
    before = snapshot_fabric(inv)
    bad: list[str] = []
    try:
        for name, key, val, keyname in cases:
            if key == "VAULT":
                hv.write_text(orig + f"{val}: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162636465zzzz\n")
            else:
                hv.write_text(yaml.safe_dump(_apply(copy.deepcopy(base), key, val), allow_unicode=True))
            r = play(inv, "tune.yml", "--check", "--diff", journal=tmp_path / "j")
            errs = [ln for ln in r.out.splitlines() if ln.startswith("[ERROR]")]
            why = []
            if r.rc != 2:
                why.append(f"rc={r.rc}")
            if "Traceback" in r.out or "Unexpected failure" in r.out:
                why.append("traceback")
            if not errs or "node02" not in errs[0] or keyname[:20] not in errs[0]:
                why.append(f"no one line naming node02 and {keyname!r}: {errs[:1]!r:.300}")
            if Path("/tmp/t9-pwned").exists():
                why.append("injected command ran")
            if why:
                bad.append(f"{name}: {'; '.join(why)}")
    finally:
        hv.write_text(orig)
    assert snapshot_fabric(inv) == before
    assert not bad, "\n".join(bad)


def test_vault_garbage_is_refused_naming_host_and_key(t9_lab: Path, tmp_path: Path) -> None:
    hv = t9_lab / "host_vars" / "node02.yml"
    orig = hv.read_text()
    try:
        hv.write_text(orig + "mtu: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162636465zzzz\n")
        r = play(t9_lab, "tune.yml", "--check", "--diff", journal=tmp_path / "j")
    finally:
        hv.write_text(orig)
    errs = [ln for ln in r.out.splitlines() if ln.startswith("[ERROR]")]
    assert r.rc == 2 and "Traceback" not in r.out
    assert errs and "node02" in errs[0] and "mtu" in errs[0], errs


def _switch_push_began(journal: Path, timeout_s: float = 60.0) -> dict[str, str]:
    """Wait until the run's journal records a switch's push (its ``state``); the switches' states."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for path in journal.glob("*.json"):
            try:
                devs = json.loads(path.read_text())["devices"]
            except (OSError, ValueError, KeyError):
                continue  # being replaced
            states = {n: r["state"] for n, r in devs.items() if r.get("role") == "switch" and r.get("state")}
            if states:
                return states
        time.sleep(0.02)
    raise AssertionError("no switch push was journaled")


def _kill_at(inv: Path, journal: Path, pattern: str, sig: int, delay: float,
             in_switch_push: bool = False) -> tuple[int, str]:
    """Run tune.yml and send ``sig`` to its process group ``delay`` s after a line matching
    ``pattern`` (``in_switch_push``: after that, once the journal shows a switch being pushed)."""
    cmd = [str(PLAYBOOK_BIN), "-i", str(inv), "playbooks/tune.yml",
           "-e", json.dumps({"fabtune_journal_dir": str(journal), "fabtune_verify": False})]
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "PATH": f"{PLAYBOOK_BIN.parent}{os.pathsep}{os.environ['PATH']}"}
    p = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         start_new_session=True)
    out = []
    assert p.stdout is not None
    for line in p.stdout:
        out.append(line)
        if re.search(pattern, line):
            if in_switch_push:
                _switch_push_began(journal)
            time.sleep(delay)
            os.killpg(p.pid, sig)
            break
    out.append(p.stdout.read())
    p.wait(timeout=300)
    return p.returncode, "".join(out)


#: What CPython prints when a Ctrl-C lands inside an at-fork hook while ansible-playbook forks a worker
#: (the parent's logging lock, or the new worker's threading._after_fork before Ansible resets its
#: signal handler there): Ansible's own SIGINT handler runs inside the hook and raises
#: (KeyboardInterrupt in the parent; in the worker, multiprocessing's "can only test a child process"),
#: CPython prints "Exception ignored in" and drops it, and the play runs on (seen twice in about 3,500
#: CI runs, once each). Ansible's race, not a fabtune crash: a block is removed only when its own
#: frames (no other traceback inside it) pass through task_queue_manager's _signal_handler and it ends
#: in one of those two errors; Ansible's "[ERROR]: User interrupted execution" may interleave with
#: it. Any other traceback still fails the test.
_NOT_ANOTHER = r"(?:(?!Traceback \(most recent call last\)).*\n)*?"
_LOST_INTERRUPT = re.compile(
    r"Exception ignored in: <function \w+ at 0x[0-9a-f]+>\n"
    r"Traceback \(most recent call last\):\n" + _NOT_ANOTHER +
    r"  File \"[^\"]*/ansible/executor/task_queue_manager\.py\", line \d+, in _signal_handler\n" + _NOT_ANOTHER +
    r"(?:KeyboardInterrupt: ?|AssertionError: can only test a child process)\n")


def _without_lost_interrupt(out: str) -> str:
    """``out`` less the traceback CPython prints for a Ctrl-C that Ansible lost at a fork."""
    return _LOST_INTERRUPT.sub("", out)


#: Ctrl-C (SIGINT to the play's process group, as a terminal sends it) at 10 points of the switch push,
#: counted from the journal's first switch ``pushing`` (before each commit, between a commit and its
#: journaled revision, after it): a push cut between its commit and the journaled revision is
#: recognised by its parent revision (tuning.targets.switch.switch_restore_action); issue 18
#: must-show, 10 of 10 restored. On this 2-core machine a switch's push takes about 0.7 s.
SWITCH_PUSH_POINTS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)


@pytest.mark.parametrize("pattern,sig,delay", [
    (r"TASK \[Tune mtu", signal.SIGKILL, 0.5),
    *[(r"TASK \[Tune the switch", signal.SIGINT, d) for d in SWITCH_PUSH_POINTS],
])
def test_killed_playbook_then_refused_then_rollback_yml_restores_every_byte(
        t9_lab: Path, tmp_path: Path, pattern: str, sig: int, delay: float) -> None:
    inv, journal = t9_lab, tmp_path / "j"
    untuned = snapshot_fabric(inv)
    rc, out = _kill_at(inv, journal, pattern, sig, delay, in_switch_push="switch" in pattern)
    assert "Traceback" not in _without_lost_interrupt(out), out[-2000:]
    runs = sorted(journal.glob("*.json"))
    if not runs:  # killed before begin journaled: nothing may have moved
        assert snapshot_fabric(inv) == untuned
        return
    run_id = runs[-1].stem
    again = play(inv, "tune.yml", "--check", journal=journal)
    if (inv / ".fabtune.lock").exists():  # a stale lock: the next run is refused and names the run
        assert again.rc == 2 and run_id in again.out and "rollback" in again.out, again.out[-2000:]
    back = play(inv, "rollback.yml", "-e", f"run_id={run_id}", journal=journal)
    assert back.rc == 0, back.out[-3000:]
    assert snapshot_fabric(inv) == untuned
    assert not (inv / ".fabtune.lock").exists()
