"""Run reports from real lab runs over SSH (one lab for the module): a plan with drift
(``--detailed-exitcode`` 2, then 0), a rollout that a link degraded with ``fabtune lab inject``
rolls back and one that keeps, a stand-alone verify, and a plan with an unreachable node. Every JUnit file validates
against the Jenkins/Ant JUnit.xsd and every JSON report against report.schema.json, both as the
run writes them (``--junit`` / ``--report-json`` / ``--prom-file``) and as ``fabtune report
RUN_ID`` rebuilds them from the journal.

Cost: one full apply (so the fabric passes the absolute thresholds), then runs limited to node01
and verification to rail 0."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.adversarial._cli import cli
from tests.conftest import running_lab
from tests.reports._check import prom_samples, valid_json, valid_junit
from tuning.errors import ConnectError

pytestmark = pytest.mark.lab

DEGRADED = "node01:mlx5_0"
DRIFT_FILE = "proc/sys/net/core/rmem_max"


def _run(out: Path, name: str, *args: str) -> dict:
    """``fabtune ARGS`` in-process with every report flag; its exit code, stdout and the reports."""
    files = {k: out / f"{name}.{k}" for k in ("xml", "prom", "json")}
    code, stdout, err = cli(*args, "--junit", str(files["xml"]), "--prom-file", str(files["prom"]),
                            "--report-json", str(files["json"]))
    assert "Traceback" not in err, err[-1500:]
    return {"code": code, "stdout": stdout, "err": err, "files": files,
            "doc": valid_json(json.loads(files["json"].read_text())),
            "cases": valid_junit(files["xml"].read_bytes()), "prom": prom_samples(files["prom"].read_text())}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The module's lab runs, in order; a dict of their results by name."""
    from tuning import inventory
    from tuning.rollout import engine

    tmp = tmp_path_factory.mktemp("reportslab")
    out, jdir = tmp / "out", tmp / "j"
    out.mkdir()
    with running_lab(tmp) as inv:
        assert engine.run(inventory.load(inv), engine.Options(mode="apply", journal_dir=jdir)).outcome == "applied"
        (inv / ".state/nodes/node01/sysroot" / DRIFT_FILE).write_text("212992\n")  # drift: one sysctl
        i, j = ("-i", str(inv)), ("--journal-dir", str(jdir))
        res = {"inv": inv, "jdir": jdir, "out": out}
        res["drift"] = _run(out, "drift", "plan", *i, "--limit", "node01", "--detailed-exitcode")
        assert cli("lab", "inject", DEGRADED, "degrade", *i)[0] == 0
        res["bad"] = _run(out, "bad", "rollout", *i, *j, "--limit", "node01", "--rail", "0")
        res["restored_value"] = (inv / ".state/nodes/node01/sysroot" / DRIFT_FILE).read_text()
        assert cli("lab", "inject", DEGRADED, "clear", *i)[0] == 0
        res["good"] = _run(out, "good", "rollout", *i, *j, "--limit", "node01", "--rail", "0")
        res["clean"] = cli("plan", *i, "--limit", "node01", "--detailed-exitcode")
        res["verify"] = _run(out, "verify", "verify", *i, *j, "--rail", "0")
        res["unreachable"] = _run(out, "unreachable", "plan", "-i", str(_node04_unreachable(inv)),
                                  "--limit", "node01", "--limit", "node04")
        res["history"] = {k: _run(out, f"history-{k}", "report", res[k]["doc"]["run_id"], *j, "--json")
                          for k in ("bad", "good")}
        res["runs"] = json.loads(cli("runs", *j, "--json")[1])
        yield res


def _node04_unreachable(inv: Path) -> Path:
    """A copy of the inventory whose node04 port nothing listens on; the lab state is shared."""
    dst = inv.parent / "lab-node04-down"
    shutil.copytree(inv, dst, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    (dst / ".state").symlink_to((inv / ".state").resolve())
    hosts = yaml.safe_load((dst / "hosts.yaml").read_text())
    hosts["all"]["children"]["gpu_nodes"]["hosts"]["node04"]["ansible_port"] = 1
    (dst / "hosts.yaml").write_text(yaml.safe_dump(hosts))
    return dst


def test_plan_detailed_exitcode_is_2_with_drift_and_0_without(runs):
    drift = runs["drift"]
    assert drift["code"] == 2, drift["err"][-600:]
    doc = drift["doc"]
    assert (doc["outcome"], doc["exit_code"], doc["n_changes"], doc["run_id"]) == ("planned", 2, 1, None)
    (change,) = doc["changes"]["node01"]
    assert (change["key"], change["before"], change["after"]) == ("sysctl/net.core.rmem_max", "212992", "268435456")
    assert doc["devices"] == [{"name": "node01", "role": "node", "outcome": "planned", "changes": 1,
                               "restored": False, "error": None, "kept": []}]
    assert drift["cases"] == {"fabtune.plan.node/node01": (None, "", "")}  # drift is no test failure
    clean_code, _, err = runs["clean"]
    assert clean_code == 0, err[-600:]


def test_rollout_rolled_back_by_a_degraded_link_names_the_failing_pairs(runs):
    bad = runs["bad"]
    assert bad["code"] == 1, bad["err"][-600:]
    doc = bad["doc"]
    assert doc["outcome"] == "rolled-back" and doc["exit_code"] == 1 and doc["restored"] == ["node01"]
    assert runs["restored_value"] == "212992\n"  # the drifted value the rollout found, put back
    failing = {p["pair"] for p in doc["pairs"] if p["outcome"] == "fail"}
    assert failing and all(DEGRADED in p for p in failing), failing
    assert all(p["outcome"] == "pass" for p in doc["pairs"] if DEGRADED not in p["pair"])
    for name in failing:
        kind, msg, text = next(v for k, v in bad["cases"].items() if k.endswith("/" + name))
        assert kind == "failure" and "Gb/s below 300" in msg, (name, msg)
        assert "measured: bandwidth" in text and "thresholds: bandwidth >= 300 Gb/s" in text
    assert bad["cases"]["fabtune.rollout.node/node01"][0] == "failure"
    run = (("inventory", str(runs["inv"].resolve())), ("mode", "rollout"))
    assert bad["prom"][("fabtune_run_outcome", tuple(sorted(run + (("outcome", "rolled-back"),))))] == 1
    some = next(iter(failing))
    bw = next(v for (n, lab), v in bad["prom"].items()
              if n == "fabtune_pair_bandwidth_bytes_per_second" and dict(lab)["pair"] == some)
    measured = next(p["bw_gbps"] for p in doc["pairs"] if p["pair"] == some)
    assert bw == pytest.approx(measured * 1e9 / 8)


def test_rollout_kept_passes_every_test_case(runs):
    good = runs["good"]
    assert good["code"] == 0, good["err"][-600:]
    doc = good["doc"]
    assert doc["outcome"] == "kept" and doc["verify_ok"] is True and doc["n_changes"] == 1
    assert doc["thresholds"] == {"min_bw_gbps": 300.0, "max_lat_us": 10.0, "bw_drop_pct": 5.0, "lat_rise_pct": 15.0,
                                 "min_bw_share": None, "noise_pct": 1.0, "confidence": 0.99, "max_samples": 8}
    judged = [p for p in doc["pairs"] if p.get("judged")]  # each comparison states its confidence
    assert judged and all(p["judged"][0].startswith("bandwidth drop ") and "(99 %, 1 vs 1 sample)" in p["judged"][0]
                          for p in judged), judged[:1]
    assert all(p["bw_samples"] == [p["bw_gbps"]] for p in doc["pairs"] if p["bw_gbps"])
    assert all(p["bw_gbps"] > 300 for p in doc["pairs"]), doc["pairs"]
    assert any(p["baseline_bw_gbps"] for p in doc["pairs"]), doc["verify_before"]  # the rollout's own baseline
    assert good["cases"] and all(kind is None for kind, _, _ in good["cases"].values())
    assert any(k.startswith("fabtune.rollout.pair.") for k in good["cases"])


def test_verify_reports_against_the_recorded_baseline(runs):
    ver = runs["verify"]
    assert ver["code"] == 0, ver["err"][-600:]
    doc = ver["doc"]
    assert (doc["command"], doc["mode"], doc["outcome"], doc["run_id"], doc["devices"]) == \
        ("verify", "verify", "passed", None, [])
    kept = {p["pair"]: p["bw_gbps"] for p in runs["good"]["doc"]["verify_after"]}  # the baseline it saved
    assert doc["pairs"] and all(p["baseline_bw_gbps"] == kept[p["pair"]] for p in doc["pairs"])
    assert all(k.startswith(("fabtune.verify.pair.", "fabtune.verify.incast/")) and v[0] is None
               for k, v in ver["cases"].items()), ver["cases"]
    assert any(k.startswith("fabtune.verify.pair.") for k in ver["cases"])


def test_unreachable_node_is_a_junit_error_and_counted_apart(runs):
    down = runs["unreachable"]
    assert down["code"] == 4 == ConnectError.exit_code and "node04" in down["err"]
    doc = down["doc"]
    assert doc["outcome"] == "unreachable" and doc["exit_code"] == down["code"]
    assert doc["error"]["type"] == "ConnectError" and doc["error"]["host"] == "node04"
    assert (doc["summary"]["unreachable"], doc["summary"]["failed"]) == (1, 0)
    assert down["cases"]["fabtune.plan.node/node04"][0] == "error"
    assert not any(kind == "failure" for kind, _, _ in down["cases"].values())


def test_report_run_id_prints_the_past_runs_again(runs):
    for name in ("bad", "good"):
        live, again = runs[name]["doc"], runs["history"][name]
        assert again["code"] == 0, again["err"][-600:]
        doc = json.loads(again["stdout"])
        assert doc == again["doc"]
        for key in ("run_id", "mode", "outcome", "exit_code", "changes", "restored", "verify_before",
                    "verify_after", "verify_ok", "inventory", "n_changes"):
            assert doc[key] == live[key], key
        assert [(p["pair"], p["outcome"]) for p in doc["pairs"]] == [(p["pair"], p["outcome"]) for p in live["pairs"]]
        assert {k.split("/", 1)[1]: v[0] for k, v in again["cases"].items()} == \
            {k.split("/", 1)[1]: v[0] for k, v in runs[name]["cases"].items()}
    rows = {r["run_id"]: r for r in runs["runs"]}
    for name, outcome in (("bad", "rolled-back"), ("good", "kept")):
        row = rows[runs[name]["doc"]["run_id"]]
        assert (row["outcome"], row["n_changes"], row["inventory"]) == (outcome, 1, str(runs["inv"].resolve()))
        assert row["started"].endswith("Z") and 0 < row["seconds"] <= runs[name]["doc"]["seconds"]
