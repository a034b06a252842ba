"""Run reports from hand-built RunReports (no lab): the JSON report validates against its schema and
the schema documents every field the code writes; the JUnit XML validates against the Jenkins/Ant
JUnit.xsd (tests/reports/README.md names its source) with unreachable hosts as errors, failing
pairs as failures carrying measured vs threshold; the Prometheus textfile uses fabtune_ names in
base units; exit codes; ``plan --detailed-exitcode`` on bad input; ``fabtune report`` and
``fabtune runs`` from journals written here."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest

from tests.adversarial._cli import assert_one_line, cli
from tests.reports._check import prom_samples, valid_json, valid_junit
from tuning.errors import ConnectError, InputError, RollbackError
from tuning.node.base import EFFECTS, Change, Finding
from tuning.reports import (EXIT_DRIFT, EXIT_FAILED, EXIT_OK, Outputs, Recorder, detailed_code, error_exit_code,
                            exit_code, report_file, verify_report)
from tuning.reports import junit, prometheus
from tuning.reports.json_report import (DEVICE_OUTCOMES, PAIR_OUTCOMES, RUN_OUTCOMES, Context, build, iso_utc,
                                        schema)
from tuning.rollout.run_report import RunReport
from tuning.rollout.verify_run import Verification
from tuning.verify.runner import PairResult, Thresholds

LAB = Path(__file__).resolve().parents[2] / "inventory" / "lab"
T0 = 1796029978.39  # 2026-11-30T09:12:58.390Z


def _pair(name: str, bw: float | None, lat: float | None, verdict: str = "pass", reasons=(), error=None,
          path: str = "leaf") -> dict:
    c, s = name.split("->")
    return dataclasses.asdict(PairResult(name, path, c, s, "leaf01:swp1", "leaf01:swp2", bw, lat,
                                         None if lat is None else lat * 1.7, 3, 4096 if bw else None, 4096,
                                         error, verdict, list(reasons)))


def _change(dev: str, key: str, before: str, after: str) -> dict:
    return Change(dev, key.split("/")[0], key, before, after, apply_cmd=f"write {after}",
                  restore_cmd=f"write {before}", read_cmd="cat x").as_dict()


GOOD = "node01:mlx5_0->node02:mlx5_0"
BAD = "node03:mlx5_0->node04:mlx5_0"
DOWN = "node01:mlx5_1->node03:mlx5_1"


def _rolled_back() -> RunReport:
    """A rollout that regressed on one pair, one pair's test did not run, node01 restored, node02's apply failed."""
    rep = RunReport("20261130T091258-8610ca", "rollout", outcome="rolled-back", seconds=12.5)
    rep.changes = {"node01": [_change("node01", "sysctl/net.core.rmem_max", "212992", "268435456")],
                   "node02": [_change("node02", "mtu/enp12s0np0", "1500", "9000")]}
    rep.errors = {"node02": "`ip link set dev enp12s0np0 mtu 9000` exited 2: RTNETLINK answers: Invalid argument\x1b"}
    rep.restored = ["node01", "node02"]
    rep.verify_before = [_pair(GOOD, 390.1, 2.05), _pair(BAD, 389.9, 2.1), _pair(DOWN, 390.0, 2.0, path="spine")]
    rep.verify_after = [_pair(GOOD, 391.2, 2.04),
                        _pair(BAD, 195.3, 7.15, "fail", ["bandwidth 195.3 Gb/s below 300",
                                                         "bandwidth regressed 389.9 -> 195.3 Gb/s"]),
                        _pair(DOWN, None, None, "fail", ["ib_write_bw: connection: the server is not reachable"],
                              error="ib_write_bw: connection: the server is not reachable", path="spine")]
    rep.verify_ok = False
    rep.findings = [Finding("node01", "nic_qos", "ecn-unsupported", "no per-priority ECN", "inbox").as_dict()]
    return rep


def _ctx(command: str = "rollout", **kw) -> Context:
    base = dict(inventory=str(LAB), devices={"node01": "node", "node02": "node", "leaf01": "switch"},
                started=T0, finished=T0 + 13, thresholds=dataclasses.asdict(Thresholds()))
    return Context(command, **{**base, **kw})


# ---- the schema documents what the code writes ----------------------------------------------------
def _props(defn: dict) -> set[str]:
    return set(defn["properties"])


def test_schema_documents_every_field_with_a_description():
    s = schema()
    jsonschema.Draft202012Validator.check_schema(s)
    assert {f.name for f in dataclasses.fields(RunReport)} <= _props(s)
    assert {f.name for f in dataclasses.fields(PairResult)} == _props(s["$defs"]["pair_result"])
    assert {f.name for f in dataclasses.fields(Change)} == _props(s["$defs"]["change"])
    assert {f.name for f in dataclasses.fields(Finding)} == _props(s["$defs"]["finding"])
    th = s["properties"]["thresholds"]["oneOf"][1]
    assert {f.name for f in dataclasses.fields(Thresholds)} == _props(th)
    assert s["$defs"]["change"]["properties"]["effect"]["enum"] == list(EFFECTS)
    assert s["properties"]["outcome"]["enum"] == list(RUN_OUTCOMES)
    assert s["$defs"]["device"]["properties"]["outcome"]["enum"] == list(DEVICE_OUTCOMES)
    assert s["$defs"]["pair"]["properties"]["outcome"]["enum"] == list(PAIR_OUTCOMES)

    def described(node, where="$"):
        if isinstance(node, dict):
            for name, sub in (node.get("properties") or {}).items():
                assert sub.get("description") or sub.get("$ref"), f"{where}.{name} has no description"
            for k, v in node.items():
                described(v, f"{where}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                described(v, f"{where}[{i}]")
    described(s)
    for unit in ("Gb/s", "microseconds", "seconds", "bytes", "percent", "UTC"):
        assert unit in json.dumps(s), unit


def test_an_undocumented_field_fails_validation():
    doc = valid_json(build(_rolled_back(), _ctx(exit_code=1)))
    for where in (doc, doc["devices"][0], doc["pairs"][0], doc["verify_after"][0], doc["changes"]["node01"][0]):
        where["undocumented"] = 1
        with pytest.raises(jsonschema.ValidationError):
            valid_json(doc)
        del where["undocumented"]


# ---- JSON + JUnit of a rolled-back rollout ------------------------------------------------------------
def test_rolled_back_rollout_report_and_junit():
    rep = _rolled_back()
    rec = Recorder(None, "rollout", LAB, Thresholds())
    with rec:
        rec.select([type("D", (), {"name": n, "role": r})() for n, r in
                    (("node01", "node"), ("node02", "node"), ("leaf01", "switch"))])
        assert rec.done(rep) == EXIT_FAILED
    doc = valid_json(rec.document())
    assert doc["run_id"] == rep.run_id and doc["outcome"] == "rolled-back" and doc["exit_code"] == 1
    assert doc["inventory"] == str(LAB.resolve()) and doc["n_changes"] == 2 and doc["schema_version"] == 1
    dev = {d["name"]: d for d in doc["devices"]}
    assert (dev["node01"]["outcome"], dev["node02"]["outcome"], dev["leaf01"]["outcome"]) == \
        ("restored", "failed", "unchanged")
    pairs = {p["pair"]: p for p in doc["pairs"]}
    assert (pairs[GOOD]["outcome"], pairs[BAD]["outcome"], pairs[DOWN]["outcome"]) == ("pass", "fail", "error")
    assert pairs[BAD]["baseline_bw_gbps"] == 389.9  # the rollout's own baseline (verify_before)
    want = {"devices": 3, "restored": 1, "failed": 1, "unchanged": 1, "pairs": 3, "pairs_passed": 1,
            "pairs_failed": 1, "pairs_errored": 1}
    assert {k: doc["summary"][k] for k in want} == want

    cases = valid_junit(junit.to_xml(doc))
    assert cases["fabtune.rollout.node/node01"][:2] == ("failure", "changed, then restored: the run was rolled back")
    kind, msg, _ = cases["fabtune.rollout.node/node02"]
    assert kind == "failure" and "RTNETLINK answers: Invalid argument\\x1b" in msg  # no raw control character
    assert cases["fabtune.rollout.switch/leaf01"][0] is None
    kind, msg, text = cases[f"fabtune.rollout.pair.leaf/{BAD}"]
    assert kind == "failure" and msg == "bandwidth 195.3 Gb/s below 300; bandwidth regressed 389.9 -> 195.3 Gb/s"
    for fact in ("bandwidth 195.3 Gb/s", "bandwidth >= 300 Gb/s", "baseline: bandwidth 389.9 Gb/s"):
        assert fact in text, (fact, text)
    assert cases[f"fabtune.rollout.pair.spine/{DOWN}"][0] == "error"  # a test that did not run is no regression
    assert cases[f"fabtune.rollout.pair.leaf/{GOOD}"][0] is None


def test_unreachable_host_is_an_error_not_a_failure(tmp_path: Path):
    out = Outputs(junit=tmp_path / "r.xml", prom=tmp_path / "r.prom", json=tmp_path / "r.json")
    rec = Recorder(out, "plan", LAB)
    with pytest.raises(ConnectError):
        with rec:
            rec.select([type("D", (), {"name": n, "role": "node"})() for n in ("node01", "node04")])
            raise ConnectError("cannot connect to 127.0.0.1:1: Connection refused", host="node04")
    doc = valid_json(json.loads((tmp_path / "r.json").read_text()))
    assert doc["outcome"] == "unreachable" and doc["exit_code"] == ConnectError.exit_code
    assert doc["error"] == {"type": "ConnectError", "host": "node04",
                            "message": "node04: cannot connect to 127.0.0.1:1: Connection refused"}
    assert doc["summary"]["unreachable"] == 1 and doc["summary"]["failed"] == 0
    cases = valid_junit((tmp_path / "r.xml").read_bytes())
    assert cases["fabtune.plan.node/node04"][0] == "error"
    assert cases["fabtune.plan.node/node01"][0] == "skipped"
    prom = prom_samples((tmp_path / "r.prom").read_text())
    run = (("inventory", str(LAB.resolve())), ("mode", "plan"))
    assert prom[("fabtune_run_devices", tuple(sorted(run + (("outcome", "unreachable"),))))] == 1
    assert prom[("fabtune_run_outcome", tuple(sorted(run + (("outcome", "unreachable"),))))] == 1


def test_a_run_error_without_a_device_and_an_empty_run_are_test_cases():
    doc = valid_json(build(None, _ctx("apply", devices={}, error=RollbackError("restore failed: leaf01"),
                                      exit_code=error_exit_code(RollbackError("x")))))
    assert doc["outcome"] == "rollback-failed" and doc["exit_code"] == 3
    cases = valid_junit(junit.to_xml(doc))
    assert cases == {"fabtune.apply.run/run": ("error", "RollbackError: restore failed: leaf01", "")}
    empty = valid_json(build(RunReport(None, "plan"), _ctx("plan", devices={}, exit_code=0)))
    assert valid_junit(junit.to_xml(empty)) == {"fabtune.plan.run/run": (None, "", "")}


# ---- Prometheus ------------------------------------------------------------------------------------
def test_prometheus_textfile_names_and_base_units(tmp_path: Path):
    doc = build(_rolled_back(), _ctx(exit_code=1))
    path = tmp_path / "fabtune.prom"
    prometheus.write(doc, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fabtune.prom"]  # no temporary file left
    samples = prom_samples(path.read_text())
    assert all(name.startswith("fabtune_") for name, _ in samples)
    def pair(p: str) -> tuple:
        c, s = p.split("->")
        labels = {"inventory": str(LAB), "pair": p, "path": "leaf", "client_nic": c, "server_nic": s}
        return tuple(sorted(labels.items()))
    assert samples[("fabtune_pair_bandwidth_bytes_per_second", pair(BAD))] == pytest.approx(195.3e9 / 8)
    assert samples[("fabtune_pair_latency_seconds", pair(BAD))] == pytest.approx(7.15e-6)
    assert samples[("fabtune_pair_passed", pair(BAD))] == 0 and samples[("fabtune_pair_passed", pair(GOOD))] == 1
    down = tuple((k, v.replace("leaf", "spine") if k == "path" else v) for k, v in pair(DOWN))
    assert ("fabtune_pair_bandwidth_bytes_per_second", down) not in samples  # a test that did not run: no value
    run = (("inventory", str(LAB)), ("mode", "rollout"))
    assert samples[("fabtune_run_changes", run)] == 2 and samples[("fabtune_run_duration_seconds", run)] == 12.5
    assert samples[("fabtune_run_end_timestamp_seconds", run)] == pytest.approx(T0 + 13, abs=0.01)
    assert samples[("fabtune_run_exit_code", run)] == 1
    outcomes = {dict(k)["outcome"]: v for (n, k), v in samples.items() if n == "fabtune_run_outcome"}
    assert outcomes == {o: (1 if o == "rolled-back" else 0) for o in RUN_OUTCOMES}


# ---- exit codes, flags ---------------------------------------------------------------------------------
def test_exit_codes():
    assert exit_code(RunReport("r", "rollout", outcome="kept", verify_ok=True)) == EXIT_OK
    assert exit_code(RunReport("r", "rollout", outcome="rolled-back")) == EXIT_FAILED
    assert exit_code(RunReport(None, "rollout", outcome="no-change", verify_ok=False)) == EXIT_FAILED
    assert exit_code(verify_report(Verification(True, []), 1.0)) == EXIT_OK
    assert exit_code(verify_report(Verification(False, []), 1.0)) == 1
    assert error_exit_code(InputError("f", "k", "bad")) == 2 and error_exit_code(RollbackError("x")) == 3
    assert error_exit_code(InputError("f", "k", "bad"), detailed=True) == 1  # 2 means drift there
    assert error_exit_code(KeyboardInterrupt()) == 130
    assert detailed_code(EXIT_OK, True) == 0 and detailed_code(3, True) == 1 and detailed_code(2, False) == 2
    assert EXIT_DRIFT == 2 and iso_utc(T0) == "2026-11-30T09:12:58.390Z"


def test_report_file_flags_are_checked_before_the_run(tmp_path: Path):
    for flag, value, needle in (("--junit", str(tmp_path), "is a directory"),
                                ("--prom-file", str(tmp_path / "m.txt"), "must end in .prom"),
                                ("--report-json", str(tmp_path / "no" / "r.json"), "does not exist"),
                                ("--junit", "", "empty")):
        code, _, err = cli("plan", "-i", str(tmp_path / "none"), flag, value)
        assert_one_line(code, err, flag, needle)
    with pytest.raises(InputError, match="the same file as --junit"):
        Outputs(junit=tmp_path / "a", json=tmp_path / "a").check()
    assert report_file("--junit")(str(tmp_path / "ok.xml")) == tmp_path / "ok.xml"


def test_detailed_exitcode_makes_every_error_1_and_bad_input_stays_2_without_it(tmp_path: Path):
    """2 means drift under --detailed-exitcode (as terraform), so bad input must not be 2 there."""
    code, _, err = cli("plan", "-i", str(tmp_path / "missing"), "--detailed-exitcode", "--report-json",
                       str(tmp_path / "r.json"))
    assert code == 1 and err.startswith("fabtune: error: ") and err.count("\n") == 1, err
    doc = valid_json(json.loads((tmp_path / "r.json").read_text()))
    assert doc["exit_code"] == 1 and doc["error"]["type"] == "InputError" and doc["outcome"] == "error"
    assert cli("plan", "-i", str(tmp_path / "missing"))[0] == 2
    assert cli("plan", "--detailed-exitcode", "--bogus")[0] == 1  # a usage error too
    assert cli("plan", "--bogus")[0] == 2
    code, _, err = cli("plan", "--offline", "--detailed-exitcode")
    assert code == 1 and "--detailed-exitcode" in err


# ---- history: fabtune runs / fabtune report from journals --------------------------------------------
def _journal(jdir: Path, run_id: str, outcome: str | None, state: str = "applied", restored: bool = False):
    from tuning.rollout.journal import Journal

    j = Journal.create(jdir, str(LAB), "rollout", run_id)
    j.data["started"] = T0
    j.update("node01", role="node", platform="linux", state=state, restored=restored,
             changes=[_change("node01", "sysctl/net.core.rmem_max", "212992", "268435456")],
             applied=[_change("node01", "sysctl/net.core.rmem_max", "212992", "268435456")],
             connection={"hostname": "127.0.0.1", "port": 22, "username": "fabtune", "key_file": None,
                         "known_hosts": None, "sysroot": "/"})
    j.data["verify"] = {"before": [_pair(BAD, 389.9, 2.1)],
                        "after": [_pair(BAD, 195.3, 7.15, "fail", ["bandwidth 195.3 Gb/s below 300"])]}
    j.data["outcome"] = outcome
    if outcome:
        j.data["events"] = [["snapshot", "", T0], ["done", "verification failed or regressed", T0 + 4.5]]
    j.save()
    return j


def test_report_and_runs_from_journals(tmp_path: Path):
    jdir = tmp_path / "j"
    _journal(jdir, "20261130T091258-aaaaaa", "rolled-back", restored=True)
    killed = _journal(jdir, "20261130T091300-bbbbbb", None, state="pushing")  # killed mid-push
    killed.data["slurm_holds"] = {str(job): {"nodes": [f"node{n:02d}" for n in range(1, 9)], "drained": {}}
                                  for job in range(41, 47)}  # what it still holds: a long outcome cell
    killed.save()
    code, out, err = cli("runs", "--journal-dir", str(jdir), "--json")
    assert code == 0, err
    rows = {r["run_id"]: r for r in json.loads(out)}
    done = rows["20261130T091258-aaaaaa"]
    assert (done["started"], done["seconds"], done["n_changes"], done["outcome"], done["inventory"]) == \
        ("2026-11-30T09:12:58.390Z", 4.5, 1, "rolled-back", str(LAB.resolve()))
    assert rows["20261130T091300-bbbbbb"]["seconds"] is None
    code, out, _ = cli("runs", "--journal-dir", str(jdir))
    text = " ".join(out.split())
    assert "2026-11-30 09:12:58" in text and "not finished (running or killed) at stage validate" in text
    # the ids `fabtune rollback` takes are never cut, however long a killed run's holds (a tryout saw "20261204T")
    assert "20261130T091258-aaaaaa" in text and "20261130T091300-bbbbbb" in text, out

    files = [str(tmp_path / f) for f in ("r.xml", "r.prom", "r.json")]
    code, out, err = cli("report", "20261130T091258-aaaaaa", "--journal-dir", str(jdir), "--json",
                         "--junit", files[0], "--prom-file", files[1], "--report-json", files[2])
    assert code == 0, err
    doc = valid_json(json.loads(out))
    assert doc == json.loads(Path(files[2]).read_text())
    assert (doc["command"], doc["mode"], doc["outcome"], doc["exit_code"], doc["thresholds"]) == \
        ("report", "rollout", "rolled-back", 1, None)
    assert doc["devices"] == [{"name": "node01", "role": "node", "outcome": "restored", "changes": 1,
                               "restored": True, "error": None, "kept": []}]
    cases = valid_junit(Path(files[0]).read_bytes())
    assert cases[f"fabtune.rollout.pair.leaf/{BAD}"][:2] == ("failure", "bandwidth 195.3 Gb/s below 300")
    assert prom_samples(Path(files[1]).read_text())[
        ("fabtune_run_exit_code", (("inventory", str(LAB.resolve())), ("mode", "rollout")))] == 1

    code, out, _ = cli("report", "20261130T091300-bbbbbb", "--journal-dir", str(jdir), "--json")
    doc = valid_json(json.loads(out))
    assert code == 0 and doc["outcome"] == "unfinished" and doc["exit_code"] is None and doc["finished"] is None
    code, _, err = cli("report", "20261130T999999-nonexi", "--journal-dir", str(jdir))
    assert_one_line(code, err, "RUN_ID", "recent runs")


def test_report_of_a_halted_batched_journal_equals_the_live_report(tmp_path: Path):
    """A rollout in 3 batches that halted in batch 2 (its verification failed): batch 1 kept with
    an incast, batch 3 never pushed. The journal the engine writes (journal_batches, per-device
    state, per-batch results, incasts, verdict) gives back the live report: batches with their
    why/order/phases, the incast rows and JUnit suite, node03 as not-run (JUnit <skipped>, not
    counted in n_changes), and the same summary."""
    from tuning.reports.history import load
    from tuning.rollout.session import journal_batches
    from tuning.rollout.batches import Batch
    from tuning.rollout.journal import Journal
    from tuning.verify.incast import judge_incast
    from tests.verify.test_incast_report import EXPECT, _ecn_ok

    run_id = "20261130T091258-bbbbbb"
    batches = [Batch(1, ["node01"], ["leaf01"], [["leaf01"], ["node01"]], "canary: 1 node(s) of leaf01 (serial 1)",
                     "MTU raised (node01 mtu/enp12s0np0 1500 -> 9000): switches first, then nodes"),
               Batch(2, ["node02"], [], [["node02"]], "batch 2: 1 node(s) of leaf01 (serial 1)",
                     "MTU raised (node02 mtu/enp12s0np0 1500 -> 9000): all at once"),
               Batch(3, ["node03"], [], [["node03"]], "batch 3: 1 node(s) of leaf02 (serial 1)",
                     "MTU raised (node03 mtu/enp12s0np0 1500 -> 9000): all at once")]
    changes = {n: [_change(n, "mtu/enp12s0np0", "1500", "9000")] for n in ("node01", "node02", "node03")}
    changes["leaf01"] = [_change("leaf01", "port/swp1/mtu", "1500", "9216")]
    inc = _ecn_ok()
    judge_incast(inc, EXPECT)
    incast = [{**dataclasses.asdict(inc), "batch": 1}]
    ok, bad = _pair(GOOD, 390.5, 2.0), _pair(BAD, 195.3, 7.15, "fail", ["bandwidth regressed 389.9 -> 195.3 Gb/s"])

    j = Journal.create(tmp_path / "j", str(LAB), "rollout", run_id)
    for n, ch in changes.items():
        j.device(n).update(role="switch" if n == "leaf01" else "node", platform="nvue" if n == "leaf01" else "linux",
                           changes=ch)
    journal_batches(j, batches)
    j.data["policy"] = {"serial": [1]}
    for n in ("node01", "leaf01"):
        j.update(n, state="applied", applied=changes[n])
    j.update("node02", state="applied", applied=changes["node02"], restored=True)
    j.data["batches"][0].update(outcome="kept", verify_ok=True, pairs=[GOOD], results=[ok])
    j.data["batches"][1].update(outcome="restored", verify_ok=False, pairs=[BAD], results=[bad],
                                halt="batch 2: verification failed or regressed")
    j.data["verify"] = {"before": [_pair(GOOD, 390.1, 2.05), _pair(BAD, 389.9, 2.1)], "after": [ok, bad]}
    j.data.update(incast=incast, verify_ok=False, restored_verified=True, outcome="halted", started=T0)
    j.data["events"] = [["snapshot", "", T0], ["restore", "batch 2: verification failed or regressed", T0 + 3],
                        ["done", "batch 2: verification failed or regressed", T0 + 4.5]]
    j.save()

    live = RunReport(run_id, "rollout", outcome="halted", changes=changes, restored=["node02"],
                     verify_before=j.data["verify"]["before"], verify_after=[ok, bad], verify_ok=False,
                     batches=[{k: v for k, v in rec.items()} for rec in j.data["batches"]], policy={"serial": [1]},
                     restored_verified=True, incast=incast, not_run=["node03"])
    assert live.n_changes == 3  # node03's planned change was never pushed
    rep, doc = load(tmp_path / "j", run_id)
    for key in ("batches", "incast", "policy", "verify_after", "verify_ok", "restored_verified", "not_run",
                "restored", "outcome"):
        assert getattr(rep, key) == getattr(live, key), key
    assert rep.n_changes == live.n_changes == 3
    assert rep.batches[1]["why"] == "batch 2: 1 node(s) of leaf01 (serial 1)"
    assert rep.batches[2]["phases"] == [["node03"]]
    valid_json(doc)
    want = build(live, _ctx(devices={d["name"]: d["role"] for d in doc["devices"]}, exit_code=1,
                            baseline={x["pair"]: x for x in live.verify_before}, thresholds=None))
    for key in ("devices", "summary", "n_changes", "pairs", "incast", "batches"):
        assert doc[key] == want[key], key
    dev = {d["name"]: d["outcome"] for d in doc["devices"]}
    assert dev == {"node01": "changed", "node02": "restored", "node03": "not-run", "leaf01": "changed"}
    assert doc["summary"]["not-run"] == 1 and doc["summary"]["changed"] == 2 and doc["n_changes"] == 3
    cases = valid_junit(junit.to_xml(doc))
    assert cases["fabtune.rollout.node/node03"][0] == "skipped"
    assert cases["fabtune.rollout.incast/" + inc.incast][0] is None
    assert cases == valid_junit(junit.to_xml(want))
