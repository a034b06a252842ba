"""Issue 18 item 10: a burn-in that can test nothing stops at once (exit 4, one line naming the
nodes) instead of spinning empty rounds (it ran 14,000 a second for 13 minutes), and no run starts
its rounds back to back (``tuning.burnin.run.MIN_ROUND_S``). No lab runs: the inventory, made by
``fabtune lab init``, names closed ports on 127.0.0.1, and the real burn-in (CLI or
:func:`tuning.burnin.run.run_burnin`) tries them over real SSH. The pacing between rounds is
:func:`tuning.burnin.run.next_round_wait`, a function of its times, tested with real values (no
clock or round is replaced)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import REPO, TEST_BASE_PORT
from tuning import cli, inventory
from tuning.burnin import run
from tuning.burnin.run import MIN_ROUND_S, BurninOptions, next_round_wait, run_burnin
from tuning.errors import ConnectError, InputError


@pytest.fixture
def closed_base_port():
    """A base port in this process's claimed range (tests/conftest.py) whose lab ports (nodes
    base+1, base+2; switches base+101..103) are bound here without listening: a connection to
    them is refused, and nothing else can listen there meanwhile."""
    base = TEST_BASE_PORT + 150  # below the pool's labs (+300), clear of the tests' lab bases
    held = []
    try:
        for k in (1, 2, 101, 102, 103):
            s = socket.socket()
            held.append(s)
            s.bind(("127.0.0.1", base + k))  # OSError: a port of this process's range in use: a leak
        yield base
    finally:
        for s in held:
            s.close()


def test_duration_burnin_with_no_reachable_node_stops_at_once(tmp_path: Path, closed_base_port: int):
    base = closed_base_port
    inv = tmp_path / "inv"
    r = subprocess.run([sys.executable, "-m", "tuning", "lab", "init", str(inv), "--nodes", "2", "--base-port",
                        str(base)], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr
    (inv / ".state" / "ssh").mkdir(parents=True)
    (inv / ".state" / "ssh" / "known_hosts").write_text("")  # so each node's closed port is tried
    (inv / ".state" / "ssh" / "id_ed25519").write_text("")  # a key to read (a missing one is named first)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "tuning", "burnin", "-i", str(inv), "--duration", "90s"],
                       capture_output=True, text=True, cwd=REPO, timeout=60, stdin=subprocess.DEVNULL)
    took = time.monotonic() - t0
    assert r.returncode == ConnectError.exit_code, (r.returncode, r.stderr[-1500:])
    assert took < 20, took
    assert len(r.stderr.encode()) < 2048 and len(r.stdout.encode()) < 2048, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("fabtune: error: ")]
    assert len(errors) == 1, r.stderr
    assert "tested nothing" in errors[0] and "node01, node02" in errors[0], errors[0]
    assert f"127.0.0.1:{base + 1}" in errors[0], errors[0]  # the first reason: node01's closed port
    assert "1 round(s)" in r.stdout, r.stdout
    assert not (inv / ".fabtune.lock").exists()


@pytest.fixture()
def closed_lab(tmp_path: Path, closed_base_port: int) -> tuple[Path, int]:
    """(inventory folder, base port): a 2-node lab inventory written by ``fabtune lab init`` (in
    process) on ports nothing listens on, with an empty known_hosts so each node's port is tried."""
    base = closed_base_port
    inv = tmp_path / "inv"
    r = CliRunner().invoke(cli.app, ["lab", "init", str(inv), "--nodes", "2", "--base-port", str(base)])
    assert r.exit_code == 0, r.output
    (inv / ".state" / "ssh").mkdir(parents=True)
    (inv / ".state" / "ssh" / "known_hosts").write_text("")
    (inv / ".state" / "ssh" / "id_ed25519").write_text("")  # a key to read (a missing one is named first)
    return inv, base


def test_a_round_that_tested_nothing_stops_the_run(closed_lab):
    """No node reachable (real SSH, closed ports): one round, ``stopped`` naming every node and the
    first reason, no wait (the run takes less than MIN_ROUND_S), no drain (a harness that reaches
    nothing is no fabric fault)."""
    inv, base = closed_lab
    doc = run_burnin(inventory.load(inv), BurninOptions(iterations=None, duration_s=90.0, nccl=False,
                                                        drain_adapter="slurm"))
    assert len(doc["rounds"]) == 1 and doc["drain"] is None, doc
    assert sorted(doc["unreachable"]) == ["node01", "node02"], doc["unreachable"]
    assert doc["stopped"].startswith("round 1 tested nothing, stopped: no node could be reached or read: "
                                     f"node01, node02 (node01: cannot reach 127.0.0.1:{base + 1}"), doc["stopped"]
    assert doc["stopped"] == ("round 1 tested nothing, stopped: no node could be reached or read: node01, node02 "
                              f"({doc['unreachable']['node01']})")
    assert doc["seconds"] < MIN_ROUND_S, doc["seconds"]
    assert not (inv / ".fabtune.lock").exists()


def test_a_rail_no_node_has_is_refused(closed_lab):
    """A ``--rail`` that the selected nodes lack is refused with the rails they have (the lab's
    2-node inventory: rails 0 and 1), and the run leaves no lock behind."""
    inv, _ = closed_lab
    with pytest.raises(InputError, match=r"--rail: 31: no selected node has a NIC on rail 31; rails: 0, 1"):
        run_burnin(inventory.load(inv), BurninOptions(rails=(31,)))
    assert not (inv / ".fabtune.lock").exists()


def test_tested_counts_values_not_errors():
    assert run.tested({"pairs": [{"status": "error"}], "nics": {}, "gpus": {}, "nccl": {"n1": {"error": "x"}}}) == 0
    assert run.tested({"pairs": [{"status": "fail"}], "nics": {}, "gpus": {}}) == 1
    assert run.tested({"pairs": [], "nics": {"node01": {}}, "gpus": {"node01": {}}}) == 1


def paced(opts: BurninOptions, round_s: float) -> tuple[list[float], list[float], float]:
    """(round starts, waits, the run's length) of a run whose rounds each last ``round_s``, as
    :func:`tuning.burnin.run._rounds` asks :func:`next_round_wait` (before and after each wait);
    times from 0 on (``round_s`` a binary fraction, so the sums are exact)."""
    t, starts, waits = 0.0, [], []
    while True:
        starts.append(t)
        t += round_s
        wait = next_round_wait(len(starts), starts[-1], t, 0.0, opts)
        if wait is None:
            return starts, waits, t
        waits.append(wait)
        t += wait
        if wait > 0 and next_round_wait(len(starts), starts[-1], t, 0.0, opts) is None:
            return starts, waits, t


def test_a_round_that_ends_early_waits_out_min_round_s():
    opts = BurninOptions(iterations=None, duration_s=60.0)
    assert next_round_wait(1, 100.0, 100.25, 100.0, opts) == MIN_ROUND_S - 0.25
    assert next_round_wait(1, 100.0, 100.25, 100.0, opts, min_round_s=2.0) == 1.75
    assert next_round_wait(3, 110.0, 117.5, 100.0, opts) == 0.0  # a round longer than MIN_ROUND_S: at once
    assert next_round_wait(12, 158.0, 158.5, 100.0, opts) == 1.5  # never past the duration's end
    assert next_round_wait(12, 158.0, 160.0, 100.0, opts) is None  # the duration spent: over


def test_rounds_that_end_early_start_min_round_s_apart():
    """One node reachable, no pairs: each round lasts 0.25 s, yet rounds start MIN_ROUND_S apart and a
    60 s run holds 12 of them (not 240, nor 6,000 of 10 ms)."""
    starts, waits, length = paced(BurninOptions(iterations=None, duration_s=60.0), 0.25)
    assert len(starts) == 60 / MIN_ROUND_S, starts
    assert all(b - a == MIN_ROUND_S for a, b in zip(starts, starts[1:])), starts
    assert length == 60.0  # the last wait ends with the duration, not past it


def test_iterations_run_back_to_back_and_stop_after_the_last():
    opts = BurninOptions(iterations=3)
    starts, waits, length = paced(opts, 0.25)
    assert starts == [0.0, 0.25, 0.5] and waits == [0.0, 0.0]  # a counted run cannot spin: no floor
    assert length == 0.75
    assert next_round_wait(3, 0.5, 0.75, 0.0, opts) is None