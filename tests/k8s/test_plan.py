"""``fabtune k8s plan``, the dry path of a rollout on Kubernetes: the rollout's batches with each
node's NodeMaintenance request, offline (every object fits the published CRD) and read from the API
server stand-in (join another requestor's object, refuse another fabtune run's), GET only."""

from __future__ import annotations

import json

import pytest

from tuning.lab import k8s_api as apiserver
from tests.k8s.clirun import fabtune
from tests.k8s.test_maintenance import schema_problems
from tuning.k8s import maintenance as nm
from tuning.k8s.api import Api
from tuning.k8s.client import path

RUN = "20261203T2146-ab12"


def test_offline_plan_names_every_node_once_with_an_object_the_crd_takes():
    r = fabtune("k8s", "plan", "-i", "inventory/lab", "--run-id", RUN, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    rows = [n for b in doc["batches"] for n in b["nodes"]]
    assert [n["node"] for n in rows] == ["node01", "node02", "node03", "node04"]
    assert {n["action"] for n in rows} == {"create"} and doc["read_cluster"] is False
    assert rows[0]["name"] == "fabtune-20261203t2146-ab12-node01" and rows[0]["requestor"] == "fabtune.io"
    for n in rows:
        assert schema_problems(n["object"]) == []


def test_plan_read_from_the_cluster_joins_and_refuses_and_writes_nothing():
    c = apiserver.Cluster(["node01", "node02", "node03", "node04"])
    server = apiserver.serve(c)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        api = Api(url)
        api.create(path("nvidia"), {"apiVersion": nm.API_VERSION, "kind": nm.KIND, "metadata": {"name": "upgrade-node02"},
                                    "spec": {"requestorID": "network.operator.nvidia.com", "nodeName": "node02"}})
        api.create(path("fabtune"), nm.new("20261202T0900-zz99", "node03", "fabtune"))
        before = len(c.requests)
        r = fabtune("k8s", "plan", "-i", "inventory/lab", "--run-id", RUN, "--server", url)
    finally:
        server.shutdown()
    assert r.returncode == 0, r.stderr
    assert {m for m, _ in c.requests[before:]} == {"GET"} and len(c.nms) == 2
    lines = r.stdout.splitlines()
    assert "(the cluster read)" in lines[0]
    assert "  node01: create fabtune/fabtune-20261203t2146-ab12-node01" in lines
    assert "  node02: join nvidia/upgrade-node02 of network.operator.nvidia.com" in lines
    assert any(x.startswith("  node03: refused: NodeMaintenance fabtune/fabtune-20261202t0900-zz99-node03 of fabtune "
                            "run 20261202T0900-zz99") for x in lines)


@pytest.mark.parametrize("args,says,code", [
    (["--server", "ftp://x"], "--server: ftp://x: allowed: http(s)://HOST[:PORT][/PATH]", 2),
    (["--ca-file", "x.pem"], "--ca-file: x.pem: given without --server: it is for that API server", 2),
    (["--token-file", "t"], "--token-file: t: given without --server: it is for that API server", 2),
    (["-n", "Ops"], "--namespace: Ops: allowed: a DNS label", 2),
    (["--server", "http://127.0.0.1:9"], "GET http://127.0.0.1:9/apis/maintenance.nvidia.com/v1alpha1/nodemaintenances: "
                                         "no answer", 4),
])
def test_bad_flags_and_an_unreachable_api_are_one_line(args, says, code):
    r = fabtune("k8s", "plan", "-i", "inventory/lab", *args)
    assert r.returncode == code and r.stderr.count("\n") == 1 and says in r.stderr


def test_help_has_an_example():
    r = fabtune("k8s", "plan", "--help")
    assert r.returncode == 0 and "Example: fabtune k8s plan -i" in r.stdout


def test_a_rollout_through_kubernetes_refuses_a_node_name_the_api_cannot_hold_before_anything_moves(tmp_path):
    # tryout (session 15): the rollout pushed the switches first, then failed on Node_02 and rolled back
    from tuning.lab.scale import write_inventory

    inv = write_inventory(tmp_path / "inv", 2)
    (inv / "hosts.yaml").write_text((inv / "hosts.yaml").read_text().replace("node02:", "Node_02:"))
    (inv / "host_vars" / "node02.yml").rename(inv / "host_vars" / "Node_02.yml")
    r = fabtune("rollout", "-i", str(inv), "--engine", "k8s", "--journal-dir", str(tmp_path / "j"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Node_02: not a Kubernetes node name: allowed a DNS subdomain (RFC 1123)" in r.stderr, r.stderr
    assert not (tmp_path / "j").exists() or not any((tmp_path / "j").iterdir())  # no run began
