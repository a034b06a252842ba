"""Rollouts in batches over real SSH against ONE lab (4 nodes, 2 leaves, 1 spine; ``serial: [1]``
gives 4 batches: node01 with every switch, then node02, node03, node04). The tests run in file
order on the same lab, each starting from the untuned fabric (a reset to power-on, asserted byte for byte):

(a) a canary (node01 and node03, across leaves) whose change regresses (leaf01's spine uplink left
    at MTU 1500 while the nodes go to 9000) stops the rollout before batch 2, and every device
    equals its snapshot byte for byte;
(c) one switch failing per batch trips the run's cap (``max_failed_devices: 1``) in batch 2,
    though no batch exceeds its ``max_fail_percentage`` (100: 1 of 1 is not above it);
(d) a switch slower than the policy's ``apply_s`` is unreachable, counted apart, exit 4;
(b) a NIC degraded by ``fabtune lab inject`` while batch 3 verifies (the ``verify-batch-3`` pause
    hook) restores batch 3 only, keeps batches 1-2, exits 1 (halted, docs/reports.md) and the
    JUnit file names the failing pairs.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import running_lab, snapshot_fabric
from tests.engine.test_rollout_lab import _wrong_variant
from tuning import inventory
from tuning.lab.inject import inject
from tuning.lab.power_on import reset
from tuning.model.policy import RolloutPolicy
from tuning.rollout import engine
from tuning.rollout.engine import Options
from tuning.rollout.journal import Journal

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One fresh lab for the module, and its untuned snapshot."""
    with running_lab(tmp_path_factory.mktemp("batches")) as inv:
        yield inv, snapshot_fabric(inv)


def _from_power_on(lab) -> tuple[Path, dict]:
    """(inventory dir, untuned snapshot) with the lab back at power-on, asserted byte for byte: each
    test starts there whatever ran before it (test (b) keeps two batches tuned)."""
    inv_dir, untuned = lab
    reset(inv_dir / ".state")
    assert _diff(snapshot_fabric(inv_dir), untuned) == []
    return inv_dir, untuned


def _diff(a: dict, b: dict, keys: set[str] | None = None) -> list[str]:
    names = (set(a) | set(b)) if keys is None else keys
    return sorted(k for k in names if a.get(k) != b.get(k) and not k.endswith(":revision"))


def test_plan_prints_the_batches_and_the_order_with_its_reason(lab):
    """``plan --serial 1`` (nothing pushed): 4 batches, the canary first; MTU raised and lossless
    turned on, so switches are pushed before nodes, and the plan says why; ``--json`` carries it."""
    import json

    inv_dir, untuned = _from_power_on(lab)
    run = lambda *a: subprocess.run([sys.executable, "-m", "tuning", "plan", "-i", str(inv_dir), *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=300)
    res = run("--serial", "1", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [b["nodes"] for b in doc["batches"]] == [["node01"], ["node02"], ["node03"], ["node04"]]
    assert doc["batches"][0]["why"].startswith("canary: 1 node(s) of leaf01 (serial 1)")
    assert doc["batches"][0]["phases"] == [["leaf01", "leaf02", "spine01"], ["node01"]]
    assert "MTU raised (" in doc["batches"][0]["order"] and "switches first, then nodes" in doc["batches"][0]["order"]
    assert doc["policy"]["serial"] == [1] and doc["outcome"] == "planned"
    text = run("--serial", "1,50%")
    assert text.returncode == 0 and "batches (push order)" in text.stdout and "switches first" in text.stdout
    assert "canary" in text.stdout
    bad = run("--serial", "0")
    assert bad.returncode == 2 and "--serial" in bad.stderr, bad.stderr
    assert _diff(snapshot_fabric(inv_dir), untuned) == []


def test_a_canary_that_regresses_stops_before_batch_2_and_is_back_byte_for_byte(lab, tmp_path: Path):
    """The canary is node01 and node03 (``batch_by: none``, the order ``--limit`` gives) with every
    switch: its spine pairs join node01 (leaf01) and node03, whose 4096-byte RoCE frames now
    cross leaf01's uplink left at MTU 1500. Batch 2 (node02, node04) is never pushed."""
    inv_dir, untuned = _from_power_on(lab)
    wrong = inventory.load(_wrong_variant(inv_dir))
    order = ["node01", "node03", "node02", "node04", "leaf01", "leaf02", "spine01"]
    rep = engine.run(wrong, Options(mode="rollout", journal_dir=tmp_path / "j", limit=order,
                                    policy=RolloutPolicy(serial=[2], batch_by="none")))
    assert rep.outcome == "rolled-back", (rep.errors, rep.batches)
    assert [b["outcome"] for b in rep.batches] == ["restored", "not-run"]
    assert rep.batches[0]["nodes"] == ["node01", "node03"] and rep.batches[0]["verify_ok"] is False
    assert sorted(rep.batches[0]["switches"]) == ["leaf01", "leaf02", "spine01"]
    failed = [r for r in rep.verify_after if r["verdict"] == "fail"]
    assert failed and all(r["path"] == "spine" and "leaf01:swp" in (r["client_link"] + r["server_link"])
                          for r in failed), failed  # the uplink's pairs, nothing else
    assert set(rep.restored) == {"node01", "node03", "leaf01", "leaf02", "spine01"}
    assert rep.restored_verified is True  # the restored pairs measure as the baseline again
    doc = Journal.load(tmp_path / "j", rep.run_id).data
    assert all(doc["devices"][n].get("state") is None for n in ("node02", "node04")), "batch 2 was pushed"
    assert {n: doc["devices"][n]["batch"] for n in ("node01", "node04", "spine01")} == \
        {"node01": 1, "node04": 2, "spine01": 1}
    assert _diff(snapshot_fabric(inv_dir), untuned) == []  # every file and switch config, byte for byte


def test_one_failure_per_batch_trips_the_global_cap(lab, tmp_path: Path):
    inv_dir, untuned = _from_power_on(lab)
    state = inv_dir / ".state"
    for sw in ("leaf01", "leaf02"):
        inject(state, sw, "apply-fails")
    try:
        inv = inventory.load(inv_dir)
        policy = RolloutPolicy(serial=[1], max_fail_percentage=100, max_failed_devices=1)
        rep = engine.run(inv, Options(mode="apply", journal_dir=tmp_path / "j", limit=["switches"], policy=policy))
    finally:
        for sw in ("leaf01", "leaf02"):
            inject(state, sw, "clear")
    assert [b["switches"] for b in rep.batches] == [["leaf01"], ["leaf02"], ["spine01"]]
    # batch 1: 1 of 1 failed = 100 %, not above 100: go on; batch 2: the run's 2nd failure > 1: halt
    assert [b["failed"] for b in rep.batches] == [["leaf01"], ["leaf02"], []]
    assert [b["outcome"] for b in rep.batches] == ["kept", "restored", "not-run"]
    assert "max_failed_devices 1" in rep.batches[1]["halt"]
    assert rep.outcome == "halted" and set(rep.errors) == {"leaf01", "leaf02"}
    from tuning.reports import exit_code

    assert exit_code(rep) == 1
    assert _diff(snapshot_fabric(inv_dir), untuned) == []  # both failed commits were put back; spine01 not run


def test_a_link_degraded_during_batch_3_restores_batch_3_and_keeps_1_and_2(lab, tmp_path: Path):
    inv_dir, untuned = _from_power_on(lab)
    junit, rj = tmp_path / "run.xml", tmp_path / "run.json"
    cmd = [sys.executable, "-m", "tuning", "rollout", "-i", str(inv_dir), "--journal-dir", str(tmp_path / "j"),
           "--serial", "1", "--no-incast", "--junit", str(junit), "--report-json", str(rj)]
    env = {**__import__("os").environ, "FABTUNE_TEST_PAUSE_AT": "verify-batch-3:5"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    seen, outs = [], []
    # stdout is read from the start: a run that never pauses (a batch failing early) writes its
    # whole report while this thread still waits for the pause line on stderr
    stdout_reader = threading.Thread(target=lambda: outs.append(proc.stdout.read()), daemon=True)
    stdout_reader.start()
    try:
        for line in proc.stderr:
            seen.append(line)
            if "test pause at verify-batch-3" in line:
                inject(inv_dir / ".state", "node03:mlx5_0", "degrade")
                break
        seen.append(proc.stderr.read())
        proc.wait(timeout=600)
        stdout_reader.join(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    out, err = "".join(outs), "".join(seen)
    try:
        assert proc.returncode == 1, err[-3000:]
        assert "HALTED at batch 3" in out, out[-2000:]
        suites = {s.get("name"): s for s in ET.parse(junit).getroot()}
        failing = sorted(c.get("name") for c in suites["verification"] if c.find("failure") is not None)
        assert failing and all("node03:mlx5_0" in n for n in failing), failing
        now = snapshot_fabric(inv_dir)
        mtu = "sys/class/net/enp12s0np0/mtu"
        assert (now[f"node01:{mtu}"], now[f"node02:{mtu}"]) == (b"9000\n", b"9000\n")  # batches 1-2 kept
        node03 = {k for k in untuned if k.startswith("node03:")}
        node04 = {k for k in untuned if k.startswith("node04:")}
        assert _diff(now, untuned, node03 | node04) == []  # batch 3 restored, batch 4 never pushed
        import json

        live = json.loads(rj.read_text())
        # each pair once, as last measured, and never a value from before a later batch changed an end:
        # batch 1 measured node02's pairs with node02 untuned, batch 2 measured them again
        names = [p["pair"] for p in live["verify_after"]]
        assert len(names) == len(set(names)), names
        last = {x["pair"]: (b["index"], x) for b in live["batches"] for x in b.get("results") or []}
        assert all(last[p["pair"]][1] == p for p in live["verify_after"])
        assert all(last[n][0] >= 2 for n in names if "node02:" in n) and any("node02:" in n for n in names)
        dev = {d["name"]: d["outcome"] for d in live["devices"]}
        assert dev["node04"] == "not-run" and dev["node03"] == "restored" and dev["node01"] == "changed"
        assert live["not_run"] == ["node04"] and live["summary"]["not-run"] == 1
        assert live["n_changes"] == sum(len(v) for n, v in live["changes"].items() if n != "node04")
        assert "switch confirm window" not in "".join(line for line in err.splitlines(True) if "batch 2/4" in line)
        code = subprocess.run([sys.executable, "-m", "tuning", "report", live["run_id"], "--journal-dir",
                               str(tmp_path / "j"), "--json"], capture_output=True, text=True, timeout=120)
        again = json.loads(code.stdout)
        for key in ("batches", "summary", "n_changes", "verify_after", "verify_ok", "not_run", "outcome",
                    "exit_code", "policy", "incast", "restored_verified"):
            assert again[key] == live[key], key
        assert sorted(again["devices"], key=lambda d: d["name"]) == sorted(live["devices"], key=lambda d: d["name"])
    finally:
        inject(inv_dir / ".state", "node03:mlx5_0", "clear")


def test_a_switch_that_does_not_answer_in_time_is_unreachable_apart_exit_4(tmp_path: Path):
    """leaf02 holds every commit 20 s (``slow-apply``) and the policy gives a push 3 s: leaf02 is
    UNREACHABLE (``DeviceTimeout``), counted apart from failed devices and left in the journal for
    ``fabtune rollback``; the run exits 4 as nothing else failed. Its own lab: the late commit may
    land after the run."""
    from tuning.reports import exit_code
    from tuning.rollout.rollback import touched_devices

    with running_lab(tmp_path) as inv_dir:  # a second pooled lab beside the module's
        inject(inv_dir / ".state", "leaf02", "slow-apply", "20")
        policy = RolloutPolicy(serial=[1], max_fail_percentage=100, timeouts={"apply_s": 3})
        rep = engine.run(inventory.load(inv_dir), Options(mode="apply", journal_dir=tmp_path / "j",
                                                          limit=["switches"], policy=policy))
    assert [b["switches"] for b in rep.batches] == [["leaf01"], ["leaf02"], ["spine01"]]
    assert rep.unreachable == ["leaf02"] and rep.batches[1]["unreachable"] == ["leaf02"]
    assert rep.batches[1]["failed"] == [] and "no answer in apply after 3 s" in rep.errors["leaf02"]
    assert [b["outcome"] for b in rep.batches] == ["kept", "kept", "kept"]  # 1 of 1 = 100 %: not above 100
    assert rep.outcome == "applied" and exit_code(rep) == 4
    assert "leaf02" in touched_devices(Journal.load(tmp_path / "j", rep.run_id))  # `fabtune rollback` restores it
