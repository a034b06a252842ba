"""A mixed fabric in one inventory (issue 22, must-show 4): RoCE GPU nodes and their switches (the RoCE
lab, over SSH) beside an InfiniBand fabric whose subnet manager (the IB lab's real OpenSM 3.3.23) is
the inventory's ``subnet_managers`` host. ``fabtune plan`` shows both kinds of change in one run;
``fabtune rollout`` pushes both and its one verification runs both the RoCE pairs (perftest over the
lab) and the IB checks (pkey tables, path records): kept when both pass; when the IB part regresses
(the inventory drops the Default rule) the run fails, names the IB check, and restores the nodes, the
switches and the SM byte for byte.

Smallest fabrics that show it: a 2-node RoCE lab (leased from the pool, reset per test) and a 2-node IB
lab (16 HCA ports, OpenSM's ``qos`` on so a partition's SL reaches its path records) for the module.
The RoCE side is the lab profile's whole tuning, verified on rail 0 (one pair) without incasts, so
each rollout stays short (~30 s here at load ~9).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import lab_up, snapshot_fabric
from tests.ib.test_ib_mixed import mixed_inventory
from tests.ib.test_ib_verify_lab import lab as ib  # the module's IB lab: 2 nodes, OpenSM's qos on
from tests.ib.test_sm_target import DEFAULT, TENANT, lab_before, restored_from_journal
from tuning.lab.ib import IbLab
from tuning.lab.scale import write_inventory
from tuning.rollout.journal import Journal
from tuning.verify.ib_sm import PREFIX

pytestmark = pytest.mark.lab


def env_of(ib: IbLab) -> dict[str, str]:
    """This process's environment with the IB lab's tools first on PATH (the SM is this controller)."""
    return {**os.environ, "PATH": f"{ib.tools_dir}{os.pathsep}{os.environ['PATH']}"}


def fabtune(ib: IbLab, *args: str) -> subprocess.CompletedProcess:
    """``fabtune ARGS --json`` in a new process (:func:`env_of`)."""
    return subprocess.run([sys.executable, "-m", "tuning", *args, "--json"], capture_output=True, text=True,
                          env=env_of(ib), timeout=600)


def rollout(ib: IbLab, inv: Path, journal: Path) -> tuple[subprocess.CompletedProcess, dict]:
    done = fabtune(ib, "rollout", "-i", str(inv), "--journal-dir", str(journal), "--rail", "0", "--no-incast")
    return done, json.loads(done.stdout)


def changes_of(report: dict) -> dict[str, set]:
    """Each device's ``(key, before, after)`` changes."""
    return {dev: {(c["key"], c["before"], c["after"]) for c in items} for dev, items in report["changes"].items()}


def verdicts(report: dict) -> tuple[list[dict], dict[str, dict]]:
    """The one batch's RoCE pair results and IB verdicts (by name)."""
    [batch] = report["batches"]
    roce = [r for r in batch["results"] if not r["pair"].startswith(PREFIX)]
    return roce, {r["pair"]: r for r in batch["results"] if r["pair"].startswith(PREFIX)}


def test_a_mixed_inventory_plans_both_kinds_and_a_rollout_proves_both_and_keeps_them(ib, tmp_path):
    before = lab_before(ib)
    with lab_up(mixed_inventory(write_inventory(tmp_path / "inv", 2), ib.dir, [DEFAULT, TENANT])) as inv:
        untuned = snapshot_fabric(inv)
        plan = fabtune(ib, "plan", "-i", str(inv))
        assert plan.returncode == 0, plan.stdout[-2000:] + plan.stderr[-2000:]
        planned = changes_of(json.loads(plan.stdout))
        assert ("mtu/enp12s0np0", "1500", "9000") in planned["node02"]
        assert ("port/swp1/mtu", None, "9216") in planned["leaf01"] and planned["spine01"]
        assert ("pkey/node02 mlx5_7/1/0x0001", None, "limited") in planned["sm01"] and len(planned["sm01"]) == 1 + 16
        assert snapshot_fabric(inv) == untuned and lab_before(ib) == before  # a plan writes nothing
        done, report = rollout(ib, inv, tmp_path / "journal")
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert (report["outcome"], report["verify_ok"], report["restored"]) == ("kept", True, [])
        assert changes_of(report) == planned  # what was planned is what was pushed
        roce, ibv = verdicts(report)
        # the RoCE pair over the lab (rail 0): perftest's bandwidth at the tuned RoCE MTU
        [pair] = roce
        assert (pair["pair"], pair["status"], pair["mtu_bytes"]) == ("node01:mlx5_0->node02:mlx5_0", "pass", 4096)
        assert pair["bw_gbps"] > 300 and report["verify_after"] == [pair]
        # the IB checks over the real OpenSM: pkey tables and path records, each with what it read
        assert ibv["ib tenant1 0x0001 pkeys"]["judged"] == [
            "smpquery pkeys: 16 member port(s) hold 0x0001 as intended (inventory): 8 full (0x8001), 8 limited (0x0001)"]
        assert ibv["ib Default 0x7fff pkeys"]["status"] == "pass" and len(ibv) == 2 + 15
        assert ibv["ib tenant1 node01 mlx5_0/1 -> node02 mlx5_7/1"]["judged"][0].endswith(
            ": mtu 2048 (MtuCap 2048), sl 3")
        assert all(v["status"] == "pass" for v in ibv.values())
        assert (inv / ".state" / "nodes" / "node02" / "sysroot" / "sys/class/net/enp12s0np0/mtu").read_text() == "9000\n"
        shown = fabtune_text(ib, "report", report["run_id"], "--journal-dir", str(tmp_path / "journal"))
        assert "1/1 pairs passed" in shown and "InfiniBand verification, batch 1: 17/17 checks passed" in shown, shown
        # a stand-alone verify of the tuned mixed fabric runs both too: the RoCE pair and the IB checks
        ver = fabtune(ib, "verify", "-i", str(inv), "--journal-dir", str(tmp_path / "journal"), "--rail", "0",
                      "--no-incast")
        assert ver.returncode == 0, ver.stdout[-2000:] + ver.stderr[-2000:]
        s = json.loads(ver.stdout)["summary"]
        assert [s[k] for k in ("pairs", "pairs_passed", "ib_checks", "ib_checks_passed")] == [1, 1, 17, 17]
    j = Journal.load(tmp_path / "journal", report["run_id"])
    restored_from_journal(ib, j, before)  # the module's IB lab as it was


def test_a_mixed_rollout_whose_ib_part_regresses_fails_names_it_and_restores_both_byte_for_byte(ib, tmp_path):
    before = lab_before(ib)
    # the Default rule dropped: every HCA port turns limited in 0x7fff
    with lab_up(mixed_inventory(write_inventory(tmp_path / "inv", 2), ib.dir, [TENANT])) as inv:
        untuned = snapshot_fabric(inv)
        done, report = rollout(ib, inv, tmp_path / "journal")
        assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
        assert (report["outcome"], report["verify_ok"], report["restored_verified"]) == ("rolled-back", False, True)
        assert report["restored"] == ["leaf01", "leaf02", "node01", "node02", "sm01", "spine01"]
        roce, ibv = verdicts(report)
        # the RoCE part was pushed and proven (the tuned RoCE MTU), the IB part failed
        assert [(r["pair"], r["status"], r["mtu_bytes"]) for r in roce] == [("node01:mlx5_0->node02:mlx5_0", "pass", 4096)]
        bad = ibv["ib Default 0x7fff pkeys"]
        assert bad["status"] == "fail" and len(bad["reasons"]) == 16
        assert report["batches"][0]["halt"] == (
            "batch 1: verification failed or regressed; ib Default 0x7fff pkeys: node01 mlx5_0/1: 0x7fff limited, "
            "want full (full before the run: it cannot talk to other limited members) (+15 more)")
        assert snapshot_fabric(inv) == untuned  # nodes' files and switches' running configs as before
    assert lab_before(ib) == before  # partitions.conf, opensm.conf and every port's pkey table as before


def fabtune_text(ib: IbLab, *args: str) -> str:
    """``fabtune ARGS`` for people (no ``--json``, :func:`env_of`): its stdout, words single-spaced."""
    done = subprocess.run([sys.executable, "-m", "tuning", *args], capture_output=True, text=True, env=env_of(ib),
                          timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return " ".join(done.stdout.split())


def test_tune_yml_plans_the_subnet_manager_pushes_it_with_the_fabric_and_its_gate_restores_it(ib, tmp_path):
    """The operator playbook on a mixed inventory: ``--check --diff`` lists the SM's pkey moves with the
    nodes' and switches' changes and writes nothing; the real play pushes sm01 in its own play (before
    the switches), batch 1's gate runs the IB checks and, the Default rule being dropped, restores the
    SM with the nodes and switches byte for byte and fails the play."""
    from tests.ansible.playbook_run import play

    before = lab_before(ib)
    inv = mixed_inventory(write_inventory(tmp_path / "inv", 2), ib.dir, [TENANT])
    with (inv / "group_vars" / "all.yml").open("a") as f:  # the RoCE side short: no incast (as --no-incast)
        f.write("\nfabtune_rollout: {incast: {enabled: false}}\n")
    with lab_up(inv) as inv:
        untuned = snapshot_fabric(inv)
        check = play(inv, "tune.yml", "--check", "--diff", journal=tmp_path / "journal", env=env_of(ib))
        assert check.rc == 0, check.out[-3000:]
        assert "sm01 pkey/node01 mlx5_0/1/0x7fff" in check.out and "PLAY [Tune subnet managers]" in check.out
        assert check.changed()["sm01"] == 1 and check.changed()["node02"] > 0
        assert "Could not match supplied host pattern" not in check.out
        assert snapshot_fabric(inv) == untuned and lab_before(ib) == before  # a check writes nothing
        done = play(inv, "tune.yml", journal=tmp_path / "journal", env=env_of(ib))
        assert done.rc == 2, done.out[-3000:]
        assert done.recap["sm01"]["changed"] == 1  # pushed by its play, then restored by the gate
        assert "ib Default 0x7fff pkeys: node01 mlx5_0/1: 0x7fff limited, want full" in done.out, done.out[-3000:]
        [j] = [Journal.load(tmp_path / "journal", p.stem) for p in (tmp_path / "journal").glob("*.json")]
        assert j.data["outcome"] == "rolled-back" and j.device("sm01")["restored"]
        assert snapshot_fabric(inv) == untuned
    assert lab_before(ib) == before  # partitions.conf, opensm.conf and every port's pkey table as before
