"""The shipped Grafana dashboard (tuning/dashboards/fabtune-grafana.json, issue 19) asks only for
metrics and labels fabtune writes: every ``fabtune_*`` name of every query is a metric of the
rollout textfile (tuning.reports.prometheus) or the burn-in one (tuning.burnin.prom), every label
a selector or a legend uses is a label of the metrics of that query, and the layout is one Grafana
can import (unique panel ids, 24 columns, the datasource an import input). The burn-in drain metric
carries what the drain did."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from tests.burnin.burnin_docs import fabric, make_doc
from tests.reports.test_reports_unit import _ctx, _rolled_back
from tests.verify.test_incast_report import EXPECT, _ecn_ok
from tuning.burnin import drain, prom
from tuning.burnin.localise import localise
from tuning.reports import prometheus
from tuning.reports.json_report import build
from tuning.verify.incast import judge_incast

DASHBOARD = Path(__file__).resolve().parents[2] / "tuning" / "dashboards" / "fabtune-grafana.json"
METRIC = re.compile(r"\bfabtune_[a-z0-9_]+")
SELECTOR = re.compile(r"(fabtune_[a-z0-9_]+)\{([^}]*)\}")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"')


def _written() -> dict[str, set[str]]:
    """Every metric fabtune writes -> its label names (both registries, from real documents)."""
    doc = make_doc(fabric(4, 2, 2, 1), slow={"node03:mlx5_1": 0.3})
    found = localise(doc)
    doc["drain"] = drain.drain(found, doc["run_id"], "slurm", act=False, max_drain=1)
    run = _rolled_back()
    incast = _ecn_ok()
    judge_incast(incast, EXPECT)
    run.incast = [dataclasses.asdict(incast)]
    out: dict[str, set[str]] = {}
    for reg in (prometheus.registry(build(run, _ctx(exit_code=1))), prom.registry(doc, found)):
        for name, collector in reg._names_to_collectors.items():  # prometheus-client: name -> its Gauge
            out[name] = set(collector._labelnames)
    return out


def _targets(dash: dict) -> list[tuple[str, dict]]:
    return [(p["title"], t) for p in dash["panels"] for t in p.get("targets", [])]


def test_every_query_asks_for_metrics_and_labels_fabtune_writes():
    dash, written = json.loads(DASHBOARD.read_text()), _written()
    seen = set()
    for title, t in _targets(dash):
        names = set(METRIC.findall(t["expr"]))
        assert names and names <= written.keys(), (title, names - written.keys())
        seen |= names
        for name, body in SELECTOR.findall(t["expr"]):
            assert set(MATCHER.findall(body)) <= written[name], (title, name, body)
        legend = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", t.get("legendFormat") or ""))
        assert all(legend <= written[n] for n in names), (title, legend)
    # what an operator is paged for is on the board: outcomes, pair bandwidth, counters, drains
    assert {"fabtune_run_outcome", "fabtune_pair_bandwidth_bytes_per_second", "fabtune_incast_counter_delta",
            "fabtune_burnin_drain", "fabtune_burnin_findings", "fabtune_burnin_node_healthy"} <= seen
    for var in dash["templating"]["list"]:
        name, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", var["query"]["query"]).groups()
        assert label in written[name], var


def test_the_layout_imports_into_grafana():
    dash = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) and dash["uid"] == "fabtune-overview"
    assert all(0 <= p["gridPos"]["x"] and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24 for p in dash["panels"])
    assert [i["name"] for i in dash["__inputs"]] == ["DS_PROMETHEUS"]
    assert all(p["datasource"]["uid"] == "${DS_PROMETHEUS}" for p in dash["panels"] if p["type"] != "row")


def test_the_drain_metric_says_what_the_drain_did():
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    doc = make_doc(fabric(8, 4, 2, 1), slow={"node03": 0.3, "node02": 0.3})
    found = localise(doc)
    assert [f["target"] for f in found if f["kind"] == "node"] == ["node02", "node03"]
    doc["drain"] = drain.drain(found, doc["run_id"], "slurm", act=False, max_drain=1)
    fams = {f.name: f for f in text_string_to_metric_families(generate_latest(prom.registry(doc, found)).decode())}
    rows = sorted((s.labels["node"], s.labels["adapter"], s.labels["result"], s.value)
                  for s in fams["fabtune_burnin_drain"].samples)
    assert rows == [("node02", "slurm", "dry-run", 1.0), ("node03", "slurm", "over-cap", 1.0)]
    doc["drain"] = None  # no --drain-adapter: no sample
    fams = {f.name: f for f in text_string_to_metric_families(generate_latest(prom.registry(doc, found)).decode())}
    assert fams["fabtune_burnin_drain"].samples == []
