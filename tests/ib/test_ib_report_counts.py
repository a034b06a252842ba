"""The InfiniBand checks in the machine reports (issue 22 gap): the JSON report lists and counts them
apart from the RoCE pairs (``ib_checks``, ``summary.ib_checks*``), JUnit has one test case per check
in its ``infiniband`` suite, its counts the summary's; the Prometheus textfile carries the same counts per
outcome and one sample per check. The verdicts are the IB verification's own
(:mod:`tuning.verify.ib_sm`) over the fixture fabric of ``tests/ib/test_sm_model.py``; both documents
are validated against their schemas (report.schema.json, JUnit.xsd)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from tests.ib.test_ib_verify import ALL_FULL, NAMES, PORTS, plan, spec
from tests.ib.test_sm_model import DEFAULT, TENANT
from tests.reports._check import prom_samples, valid_json, valid_junit
from tuning.reports import junit, prometheus, verify_report
from tuning.reports.json_report import Context, build
from tuning.rollout.run_report import RunReport
from tuning.rollout.verify_run import Verification
from tuning.targets import sm_partitions as sp
from tuning.targets.sm_verify import intents
from tuning.verify import ib_sm
from tuning.verify.runner import PairResult


def checks() -> list[dict]:
    """Three IB verdicts as a batch holds them: tenant1's pkeys pass, Default's fail (every port turned
    limited), one that ran nothing (the harness's)."""
    s = spec(TENANT)
    tenant, default = intents(s, PORTS, plan(s), ALL_FULL)
    after = sp.expected_tables(s, PORTS)
    return [dict(ib_sm.judge_pkeys("sm01", tenant, NAMES, after).__dict__),
            dict(ib_sm.judge_pkeys("sm01", default, NAMES, after).__dict__),
            dict(ib_sm.harness("sm01", "tenant2 paths", "no_pairs", "partition tenant2: no full member").__dict__)]


def roce() -> dict:
    return dict(PairResult("node01:mlx5_0->node02:mlx5_0", "leaf", "node01:mlx5_0", "node02:mlx5_0", bw_gbps=92.1,
                           lat_us=1.9, verdict="pass", status="pass").__dict__)


def rollout_report(pair: dict, ib: list[dict]) -> RunReport:
    """A rollout whose one batch ran the RoCE ``pair`` and the IB checks ``ib``, then restored."""
    return RunReport("r1", "rollout", outcome="rolled-back", verify_after=[pair], verify_ok=False,
                     batches=[{"index": 1, "nodes": ["node01", "node02"], "switches": ["sm01"], "outcome": "restored",
                               "failed": [], "unreachable": [], "verify_ok": False,
                               "pairs": [x["pair"] for x in (pair, *ib)], "results": [pair, *ib]}],
                     changes={"sm01": []}, restored=["sm01"])


def test_a_rollouts_ib_checks_are_listed_and_counted_apart_from_its_pairs_in_json_and_junit():
    pair, ib = roce(), checks()
    rep = rollout_report(pair, ib)
    doc = valid_json(build(rep, Context("rollout", devices={"sm01": "sm"}, exit_code=1)))
    assert [p["pair"] for p in doc["pairs"]] == [pair["pair"]]
    assert [(r["pair"], r["outcome"], r["check"], r["batch"]) for r in doc["ib_checks"]] == [
        ("ib tenant1 0x0001 pkeys", "pass", "pkeys", 1), ("ib Default 0x7fff pkeys", "fail", "pkeys", 1),
        ("ib tenant2 paths", "error", "harness", 1)]
    s = doc["summary"]
    assert (s["pairs"], s["pairs_passed"]) == (1, 1)
    assert (s["ib_checks"], s["ib_checks_passed"], s["ib_checks_failed"], s["ib_checks_errored"]) == (3, 1, 1, 1)
    xml = junit.to_xml(doc)
    cases = valid_junit(xml)
    assert cases["fabtune.rollout.ib.pkeys/ib tenant1 0x0001 pkeys"] == (None, "", "")
    kind, message, _ = cases["fabtune.rollout.ib.pkeys/ib Default 0x7fff pkeys"]
    assert (kind, message.split("; ")[0]) == ("failure", "node01 mlx5_0/1: 0x7fff limited, want full (full before the "
                                                         "run: it cannot talk to other limited members)")
    assert cases["fabtune.rollout.ib.harness/ib tenant2 paths"][:2] == (
        "error", "did not run: no_pairs: sm01: partition tenant2: no full member")
    [suite] = [x for x in ET.fromstring(xml).iter("testsuite") if x.get("name") == "infiniband"]
    assert [suite.get(k) for k in ("tests", "failures", "errors")] == ["3", "1", "1"]
    assert suite.find("system-out").text.startswith("3 IB check(s): 1 passed, 1 failed, 1 did not run\n"
                                                    "ib tenant1 0x0001 pkeys: smpquery pkeys: 16 member port(s)")


def test_a_standalone_verifys_ib_checks_are_its_only_verdicts_and_are_counted():
    ib = checks()[:1]
    doc = valid_json(build(verify_report(Verification(True, [], ib=ib), 1.5), Context("verify", exit_code=0)))
    assert (doc["pairs"], [r["pair"] for r in doc["ib_checks"]], doc["ib_checks"][0]["batch"]) == (
        [], ["ib tenant1 0x0001 pkeys"], None)
    assert (doc["summary"]["pairs"], doc["summary"]["ib_checks"], doc["summary"]["ib_checks_passed"]) == (0, 1, 1)
    cases = valid_junit(junit.to_xml(doc))
    # the one case is the IB check: no 'run' case stands in for a report that tested nothing
    assert cases == {"fabtune.verify.ib.pkeys/ib tenant1 0x0001 pkeys": (None, "", "")}


def test_the_prometheus_textfile_counts_the_ib_checks_beside_the_pairs_from_the_summary(tmp_path):
    pair, ib = roce(), checks()
    rep = rollout_report(pair, ib)
    doc = valid_json(build(rep, Context("rollout", inventory="inv", devices={"sm01": "sm"}, exit_code=1)))
    prometheus.write(doc, tmp_path / "r.prom")
    samples = prom_samples((tmp_path / "r.prom").read_text())
    run = (("inventory", "inv"), ("mode", "rollout"))

    def per_outcome(name: str) -> dict[str, float]:
        return {o: samples[(name, tuple(sorted(run + (("outcome", o),))))] for o in ("pass", "fail", "error")}

    assert per_outcome("fabtune_run_pairs") == {"pass": 1, "fail": 0, "error": 0}
    assert per_outcome("fabtune_run_ib_checks") == {"pass": 1, "fail": 1, "error": 1}
    checks_passed = {dict(k)["pair"]: (dict(k)["check"], v) for (n, k), v in samples.items() if n == "fabtune_ib_check_passed"}
    assert checks_passed == {"ib tenant1 0x0001 pkeys": ("pkeys", 1), "ib Default 0x7fff pkeys": ("pkeys", 0),
                             "ib tenant2 paths": ("harness", 0)}
    assert not any(dict(k).get("pair", "").startswith("ib ") for (n, k) in samples if n == "fabtune_pair_passed")
