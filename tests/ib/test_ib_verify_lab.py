"""``fabtune rollout`` of a subnet manager over the IB lab's real OpenSM 3.3.23 (issue 22, must-show 1),
proven by the IB verification (:mod:`tuning.verify.ib_sm`): the ports' pkey tables (smpquery) and the
path records between member pairs (saquery PR), read after OpenSM re-read partitions.conf.

One 2-node lab (16 HCA ports) with OpenSM's ``qos`` on (a partition's SL reaches its path records
only then) for the module; every test leaves the lab's files and pkey tables as it found them. The
inventory is a real one (``fabtune_local``: the SM is this controller, the lab's IB tools on PATH).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from tuning.lab.fabric import default_fabric
from tuning.lab.ib import IbLab
from tuning.model.outcomes import DeviceState
from tuning.rollout.journal import Journal

from tests.ib.test_sm_target import (DEFAULT, TENANT, lab_before, pkeys, restored_from_journal, rolled_back_mid_push,
                                     sm_target)

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = IbLab(tmp_path_factory.mktemp("ibverify"), default_fabric(n_nodes=2), qos=True)
    lab.up()
    yield lab
    assert lab.down()


def rollout(lab: IbLab, tmp_path, sm_vars: dict, **env_extra: str) -> subprocess.CompletedProcess:
    """``fabtune rollout --json`` of an inventory whose SM is the lab's OpenSM, in a new process."""
    sm_target(lab, tmp_path, sm_vars, local=True)
    env = {**os.environ, "PATH": f"{lab.tools_dir}{os.pathsep}{os.environ['PATH']}", **env_extra}
    return subprocess.run([sys.executable, "-m", "tuning", "rollout", "-i", str(tmp_path / "inv"), "--journal-dir",
                           str(tmp_path / "journal"), "--json"], capture_output=True, text=True, env=env, timeout=300)


def ib_results(report: dict) -> dict[str, dict]:
    """The batch's IB verdicts by name."""
    [batch] = report["batches"]
    return {r["pair"]: r for r in batch["results"] if r["pair"].startswith("ib ")}


def test_a_tenant_partition_with_mtu_and_sl_is_rolled_out_proven_and_kept(lab, tmp_path):
    before = lab_before(lab)
    done = rollout(lab, tmp_path, {"partitions": [DEFAULT, TENANT]})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert (report["outcome"], report["verify_ok"]) == ("kept", True)
    keys = {(c["key"], c["before"], c["after"]) for c in report["changes"]["sm01"]}
    assert ("pkey/node02 mlx5_7/1/0x0001", None, "limited") in keys and len(keys) == 1 + 16  # the diff: file + pkeys
    ib = ib_results(report)
    assert ib["ib tenant1 0x0001 pkeys"]["judged"] == [
        "smpquery pkeys: 16 member port(s) hold 0x0001 as intended (inventory): 8 full (0x8001), 8 limited (0x0001)"]
    assert ib["ib Default 0x7fff pkeys"]["status"] == "pass"
    paths = {k: v for k, v in ib.items() if k.startswith("ib tenant1 node01 mlx5_0/1 -> ")}
    assert len(paths) == 15 and all(v["status"] == "pass" for v in paths.values())
    # ibsim's ports cap every path at 2048 (MtuCap): mtu=5 (4096) capped there; sl 3 with qos on
    one = paths["ib tenant1 node01 mlx5_0/1 -> node02 mlx5_7/1"]
    assert one["judged"][0].endswith(": mtu 2048 (MtuCap 2048), sl 3") and (one["mtu_bytes"], one["mtu_allowed"]) == (
        2048, 2048)
    j = Journal.load(tmp_path / "journal", report["run_id"])
    assert j.data["outcome"] == "kept" and j.device("sm01")["state"] == DeviceState.APPLIED
    assert {r["pair"] for r in j.data["batches"][0]["results"]} == set(ib)
    assert pkeys(lab, "node02-mlx5_7") == ["0xffff", "0x0001"]
    restored_from_journal(lab, j, before)


def test_dropping_the_default_rule_is_caught_by_the_verification_and_restored_byte_for_byte(lab, tmp_path):
    before = lab_before(lab)
    done = rollout(lab, tmp_path, {"partitions": [TENANT]})
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert (report["outcome"], report["verify_ok"], report["restored"]) == ("rolled-back", False, ["sm01"])
    bad = ib_results(report)["ib Default 0x7fff pkeys"]
    assert bad["status"] == "fail" and len(bad["reasons"]) == 16
    assert bad["reasons"][0] == ("node01 mlx5_0/1: 0x7fff limited, want full (full before the run: it cannot talk "
                                 "to other limited members)")
    assert report["batches"][0]["halt"] == (
        "batch 1: verification failed or regressed; ib Default 0x7fff pkeys: node01 mlx5_0/1: 0x7fff limited, want "
        "full (full before the run: it cannot talk to other limited members) (+15 more)")
    assert lab_before(lab) == before  # partitions.conf, opensm.conf and every port's pkey table as before


def test_a_controller_killed_mid_apply_of_a_rollout_is_restored_by_fabtune_rollback(lab, tmp_path):
    before = lab_before(lab)
    sm_target(lab, tmp_path, {"partitions": [DEFAULT, TENANT]}, local=True)
    env = {**os.environ, "PATH": f"{lab.tools_dir}{os.pathsep}{os.environ['PATH']}"}
    child = subprocess.Popen([sys.executable, "-m", "tuning", "rollout", "-i", str(tmp_path / "inv"), "--journal-dir",
                              str(tmp_path / "journal")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**env, "FABTUNE_TEST_PAUSE_AT": "apply-sm"})
    try:
        line = next(x for x in child.stderr if "fabtune: test pause at" in x)
    finally:
        child.kill()
        child.wait()
    rolled_back_mid_push(lab, tmp_path, env, line.split("(run ")[1].rstrip(")\n"), before)


def test_a_partition_sl_that_does_not_reach_its_path_records_fails_the_gate_and_is_restored(tmp_path):
    """OpenSM with ``qos`` off (its default) serves the tenant's pkeys but SL 0 in its path records:
    each member pair's record is the evidence, the batch is restored byte for byte."""
    lab = IbLab(tmp_path / "lab", default_fabric(n_nodes=2))
    lab.up()
    try:
        before = lab_before(lab)
        done = rollout(lab, tmp_path, {"partitions": [DEFAULT, TENANT]})
        assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
        report = json.loads(done.stdout)
        assert (report["outcome"], report["verify_ok"]) == ("rolled-back", False)
        ib = ib_results(report)
        assert (ib["ib tenant1 0x0001 pkeys"]["status"], ib["ib Default 0x7fff pkeys"]["status"]) == ("pass", "pass")
        paths = [v for k, v in ib.items() if " -> " in k]
        assert len(paths) == 15 and {v["status"] for v in paths} == {"fail"}
        assert paths[0]["reasons"][0].endswith(": mtu 2048 (MtuCap 2048), sl 0: sl 0, want 3")
        assert lab_before(lab) == before
    finally:
        assert lab.down()


def verify(lab: IbLab, tmp_path, sm_vars: dict, *extra: str) -> subprocess.CompletedProcess:
    """``fabtune verify`` (text output) of an inventory whose SM is the lab's OpenSM, in a new process."""
    sm_target(lab, tmp_path, sm_vars, local=True)
    env = {**os.environ, "PATH": f"{lab.tools_dir}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "400"}
    return subprocess.run([sys.executable, "-m", "tuning", "verify", "-i", str(tmp_path / "inv"), "--journal-dir",
                           str(tmp_path / "journal"), *extra], capture_output=True, text=True, env=env, timeout=300)


def test_a_standalone_verify_runs_the_ib_checks_a_rollout_runs_and_fails_when_there_is_nothing_to_check(lab, tmp_path):
    """``fabtune verify`` proves the partitions the inventory defines as the rollout gate does (the same
    :func:`tuning.targets.sm_verify.prove`), naming what it read; nothing to prove is a failure."""
    before = lab_before(lab)
    served = verify(lab, tmp_path, {"partitions": [DEFAULT]})  # the lab's OpenSM serves Default=ALL full
    assert served.returncode == 0, served.stdout[-2000:] + served.stderr[-2000:]
    assert ("ib Default 0x7fff pkeys: pass: smpquery pkeys: 16 member port(s) hold 0x7fff as intended (inventory): "
            "16 full (0xffff), 0 limited (0x7fff)") in served.stdout
    assert "InfiniBand verification: 1/1 checks passed" in served.stdout and served.stdout.rstrip().endswith("PASS")
    # a tenant the SM does not serve: its pkeys and each member pair's path record are the evidence
    missing = verify(lab, tmp_path, {"partitions": [DEFAULT, TENANT]}, "--report-json", str(tmp_path / "r.json"),
                     "--junit", str(tmp_path / "r.xml"))
    assert missing.returncode == 1, missing.stdout[-2000:] + missing.stderr[-2000:]
    summary = json.loads((tmp_path / "r.json").read_text())["summary"]  # the machine reports count the IB checks
    assert [summary[k] for k in ("pairs", "ib_checks", "ib_checks_passed", "ib_checks_failed")] == [0, 17, 1, 16]
    [suite] = [x for x in ET.parse(tmp_path / "r.xml").iter("testsuite") if x.get("name") == "infiniband"]
    assert [suite.get(k) for k in ("tests", "failures", "errors")] == ["17", "16", "0"]
    assert "ib tenant1 0x0001 pkeys: fail: node01 mlx5_0/1: 0x0001 absent, want full; " in missing.stdout
    assert ("ib tenant1 node01 mlx5_0/1 -> node02 mlx5_7/1: fail: saquery PR --src-to-dst " in missing.stdout
            and "--pkey 0x8001: no path record (the pair cannot talk in the partition)" in missing.stdout)
    assert "InfiniBand verification: 16/17 checks failed" in missing.stdout and missing.stdout.rstrip().endswith("FAIL")
    nothing = verify(lab, tmp_path, {})  # the inventory defines no partition: nothing verified is no pass
    assert nothing.returncode == 1, nothing.stdout[-2000:] + nothing.stderr[-2000:]
    assert ("ib verification: error: sm01: the inventory defines no partition for it: nothing to verify (a check "
            "that ran nothing fails)") in nothing.stdout and nothing.stdout.rstrip().endswith("FAIL")
    assert lab_before(lab) == before  # a verification writes nothing


QOS = {"opensm_qos_policy_file": "/qos-policy.conf", "qos_policy": {"default_sl": 0, "ulps": [{"pkey": 1, "sl": 3}]}}


def test_a_qos_policy_is_planned_as_a_diff_pushed_with_the_partitions_proven_on_path_records_and_restored(lab, tmp_path):
    """The inventory's QoS policy (OpenSM's qos-policy.conf, qos-ulps) rides the partitions' push: its
    whole text is the diff, OpenSM re-reads it in the same SIGHUP, the tenant's paths carry the policy's
    SL 3 (the partition asks none), and the rollback removes the file it did not find."""
    before, qos = lab_before(lab), lab.dir / "qos-policy.conf"
    assert not qos.exists()
    tenant = {k: v for k, v in TENANT.items() if k != "sl"}
    done = rollout(lab, tmp_path, {**QOS, "partitions": [DEFAULT, tenant]})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert (report["outcome"], report["verify_ok"]) == ("kept", True)
    text = ("# fabtune: OpenSM QoS policy, rendered from the inventory (do not edit: fabtune plan shows the diff)\n"
            "qos-ulps\n    default : 0\n    any, pkey 0x0001 : 3\nend-qos-ulps\n")
    assert [(c["before"], c["after"]) for c in report["changes"]["sm01"] if c["key"] == "file/qos-policy.conf"] == [
        (None, text)]
    assert qos.read_text() == text
    ib = ib_results(report)
    one = ib["ib tenant1 node01 mlx5_0/1 -> node02 mlx5_7/1"]
    assert one["status"] == "pass" and one["judged"][0].endswith(": mtu 2048 (MtuCap 2048), sl 3")
    default = [v for k, v in ib.items() if k.startswith("ib Default node01 mlx5_0/1 -> ")]
    assert len(default) == 15 and all(v["judged"][0].endswith(", sl 0") for v in default)  # the default line
    restored_from_journal(lab, Journal.load(tmp_path / "journal", report["run_id"]), before)
    assert not qos.exists()


def test_a_qos_policy_opensm_does_not_read_fails_its_read_back_and_is_restored(lab, tmp_path):
    """A policy file OpenSM does not read (opensm.conf's qos_policy_file names another): the path records
    keep SL 0, the push's read back says so with the record, and the file is removed again."""
    before, other = lab_before(lab), lab.dir / "other-qos.conf"
    tenant = {k: v for k, v in TENANT.items() if k != "sl"}
    done = rollout(lab, tmp_path, {**QOS, "opensm_qos_policy_file": "/other-qos.conf", "partitions": [DEFAULT, tenant]})
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["restored"] == ["sm01"] and not other.exists() and lab_before(lab) == before
    assert report["errors"]["sm01"].startswith("OpenSM does not serve the QoS policy's SLs (is opensm.conf's qos TRUE "
                                               "and its qos_policy_file this file?): 0x0001: saquery PR --src-to-dst ")
    assert report["errors"]["sm01"].endswith("--pkey 0x8001: sl 0, want 3")
