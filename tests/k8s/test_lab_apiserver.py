"""The lab's API server stand-in (tuning/lab/k8s_api.py, k8s_cm.py, k8s_rbac.py) for what the k8s engine
and its agents send beyond NodeMaintenances: ConfigMaps refused as the API server refuses them, and
RBAC held to the roles `fabtune k8s manifests` writes; and the agent's reading of a plan ConfigMap."""

from __future__ import annotations

import pytest

from tuning.errors import InputError
from tuning.k8s import agent as ag
from tuning.k8s import maintenance as nm
from tuning.k8s.api import Api, ApiError
from tuning.k8s.manifests import rbac
from tuning.lab import k8s_api

RUN = "20261204T0900-ab12"
SA = "system:serviceaccount:fabtune:"


@pytest.fixture
def lab():
    """``{"admin" | "controller" | "agent": Api}`` on a fresh stand-in with fabtune's RBAC."""
    c = k8s_api.Cluster(["node01", "node02"], token="adm",
                        users={"ctl": SA + "fabtune-controller", "agt": SA + "fabtune-agent"}, rbac=rbac("fabtune"))
    server = k8s_api.serve(c)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield {who: Api(url, token=tok) for who, tok in (("admin", "adm"), ("controller", "ctl"), ("agent", "agt"))}
    finally:
        server.shutdown()


def refusal(call) -> ApiError:
    with pytest.raises(ApiError) as e:
        call()
    return e.value


def test_configmaps_are_refused_with_the_api_servers_texts(lab):
    api, cms = lab["controller"], ag.cm_path("fabtune")
    req = ag.Request(RUN, "apply-b1", "apply", ("node01",), ("mtu",))
    made = api.create(cms, ag.plan_configmap(req, "fabtune", {"node01": ["mtu/enp12s0np0"]}))
    assert made["data"]["nodes"] == "node01" and made["metadata"]["resourceVersion"]
    e = refusal(lambda: api.create(cms, ag.plan_configmap(req, "fabtune", {})))
    assert (e.code, e.reason, e.status["message"]) == (409, "AlreadyExists", 'configmaps "fabtune-plan" already exists')
    assert e.status["details"] == {"name": "fabtune-plan", "kind": "configmaps"}
    e = refusal(lambda: api.get(ag.cm_path("fabtune", "nope")))
    assert (e.code, e.reason, e.status["message"]) == (404, "NotFound", 'configmaps "nope" not found')
    e = refusal(lambda: api.create(cms, {"metadata": {"name": "x"}, "data": {"a/b": "1"}}))
    assert (e.code, e.reason) == (422, "Invalid") and e.status["message"].startswith(
        'ConfigMap "x" is invalid: data[a/b]: Invalid value: "a/b": a valid config key must consist of alphanumeric')
    e = refusal(lambda: api.create(cms, {"metadata": {"name": "Bad_Name"}, "data": {}}))
    assert "metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain" in e.status["message"]
    e = refusal(lambda: api.create(cms, {"metadata": {"name": "y"}, "datas": {}}))
    assert (e.code, e.status["message"]) == (400, 'strict decoding error: unknown field "datas"')
    e = refusal(lambda: api.create(ag.cm_path("fabtune"), ag.plan_configmap(req, "other", {})))
    assert (e.code, e.reason, e.status["message"]) == (
        400, "BadRequest", "the namespace of the provided object does not match the namespace sent on the request")
    stale = {**made, "metadata": {**made["metadata"], "resourceVersion": "1"}}
    e = refusal(lambda: api.replace(ag.cm_path("fabtune", ag.PLAN_CM), stale))
    assert (e.code, e.reason) == (409, "Conflict")


def test_rbac_is_the_manifests_roles(lab):
    agent, ctl = lab["agent"], lab["controller"]
    # the agent reads the plan and writes its answer, nothing else
    assert refusal(lambda: agent.get(ag.cm_path("fabtune", ag.PLAN_CM))).reason == "NotFound"  # allowed, absent
    req = ag.Request(RUN, "apply-b1", "apply", ("node01",))
    assert agent.create(ag.cm_path("fabtune"), ag.result_configmap(req, "node01", "fabtune", 0, "{}", ""))
    e = refusal(lambda: agent.delete(ag.cm_path("fabtune", ag.result_name(RUN, "apply-b1", "node01"))))
    assert (e.code, e.reason, e.status["message"]) == (403, "Forbidden", (
        'configmaps "fabtune-result-20261204t0900-ab12-apply-b1-node01" is forbidden: User '
        '"system:serviceaccount:fabtune:fabtune-agent" cannot delete resource "configmaps" in API group "" in the '
        'namespace "fabtune"'))
    e = refusal(lambda: agent.create(f"/apis/{nm.GROUP}/{nm.VERSION}/namespaces/fabtune/{nm.PLURAL}",
                                     nm.new(RUN, "node01", "fabtune")))
    assert e.code == 403 and 'cannot create resource "nodemaintenances" in API group "maintenance.nvidia.com"' in str(e)
    # the controller: NodeMaintenances cluster-wide, ConfigMaps in its namespace only, no verb on nodes
    assert ctl.get(f"/apis/{nm.GROUP}/{nm.VERSION}/{nm.PLURAL}")["items"] == []
    e = refusal(lambda: ctl.get("/api/v1/nodes/node01"))
    assert e.status["message"].endswith('cannot get resource "nodes" in API group "" at the cluster scope')
    assert refusal(lambda: ctl.get(ag.cm_path("other", "x"))).code == 403
    assert lab["admin"].get("/api/v1/nodes/node01")["metadata"]["name"] == "node01"


def test_a_person_lists_the_configmaps_left_and_no_service_account_may(lab):
    """What a rollout left in the namespace is one admin GET (docs/kubernetes.md, "Checking the lab")."""
    req = ag.Request(RUN, "apply-b1", "apply", ("node01",))
    lab["controller"].create(ag.cm_path("fabtune"), ag.plan_configmap(req, "fabtune", {}))
    listed = lab["admin"].get(ag.cm_path("fabtune"))
    assert listed["kind"] == "ConfigMapList" and [o["metadata"]["name"] for o in listed["items"]] == ["fabtune-plan"]
    assert lab["admin"].get(ag.cm_path("other"))["items"] == []
    e = refusal(lambda: lab["controller"].get(ag.cm_path("fabtune")))
    assert e.code == 403 and 'cannot list resource "configmaps"' in e.status["message"]


def test_the_agent_reads_only_a_plan_within_its_grammar():
    req = ag.Request(RUN, "restore-b2-1", "restore", ("node01", "node02"))
    cm = ag.plan_configmap(req, "fabtune", {})
    assert ag.read_request(cm) == req
    assert ag.node_argv(req, "node02", "/inv", "journal", "/host")[-11:] == [
        "node", "restore", "--node", "node02", "--run-id", RUN, "--journal-dir", "journal", "--json", "--sysroot", "/host"]
    push = ag.Request(RUN, "apply-b2", "apply", ("node02",), ("mtu",))
    assert ag.node_argv(push, "node02", "/inv", "/j", None)[-15:] == [  # the controller's plan file of the request
        "node", "apply", "--node", "node02", "--run-id", RUN, "--journal-dir", "/j", "--json", "-i", "/inv", "--plan",
        f"/j/{RUN}.plans/apply-b2.json", "-d", "mtu"]
    for key, bad in (("domains", "mtu;reboot"), ("run-id", "../x"), ("action", "rm"), ("nodes", "node01,$(id)"),
                     ("request", "a b"), ("allow-firmware", "yes")):
        with pytest.raises(InputError):
            ag.read_request({"data": {**cm["data"], key: bad}})


def test_agent_command_refuses_bad_input_and_answers_nothing_without_a_request(tmp_path):
    from tests.k8s.clirun import fabtune

    r = fabtune("k8s", "agent", "--node", "node99", "-i", "inventory/lab", "--server", "http://127.0.0.1:9", "--once")
    assert r.returncode == 2 and "--node" in r.stderr and "node99" in r.stderr
    r = fabtune("k8s", "agent", "--node", "node01", "-i", "inventory/lab", "--journal-dir", "a b", "--once")
    assert r.returncode == 2 and "--journal-dir" in r.stderr
    c = k8s_api.Cluster(["node01"], users={"agt": SA + "fabtune-agent"}, rbac=rbac("fabtune"))
    server = k8s_api.serve(c)
    (tmp_path / "t").write_text("agt\n")
    try:
        r = fabtune("k8s", "agent", "--node", "node01", "-i", "inventory/lab", "--once", "--token-file",
                    str(tmp_path / "t"), "--server", f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
    assert r.returncode == 0 and "node01: no request for this node" in r.stdout, r.stderr
    assert c.requests == [("GET", "/api/v1/namespaces/fabtune/configmaps/fabtune-plan")]


def test_a_controller_without_its_api_server_or_token_stops_before_anything_with_exit_2(lab, tmp_path, monkeypatch):
    """helper-46's tryout: no $FABTUNE_K8S_SERVER outside a pod, a server with nothing listening, a
    wrong token and the agent's token were exit 4 or 1 (the last after the switches were pushed and
    restored). Each is the controller's setup, checked before the probe (tuning/k8s/engine.py
    ``reach``): exit 2 naming the variable to fix."""
    from types import SimpleNamespace

    from tests.k8s.clirun import fabtune
    from tuning.errors import SetupError
    from tuning.k8s.engine import KubeSession

    for var in ("FABTUNE_K8S_SERVER", "FABTUNE_K8S_TOKEN_FILE", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(var, raising=False)
    r = fabtune("rollout", "-i", "inventory/lab", "--engine", "k8s", "--journal-dir", str(tmp_path))
    assert r.returncode == 2 and "$FABTUNE_K8S_SERVER is not set" in r.stderr, r.stderr[-800:]
    KubeSession.reach(SimpleNamespace(api=lab["controller"]))  # the controller's token: no refusal
    url = lab["controller"].server
    for api, var, said in ((Api("http://127.0.0.1:9", token="ctl"), "$FABTUNE_K8S_SERVER", "did not answer"),
                           (Api(url, token="nope"), "$FABTUNE_K8S_TOKEN_FILE", "401 Unauthorized"),
                           (lab["agent"], "$FABTUNE_K8S_TOKEN_FILE", 'User "system:serviceaccount:fabtune:fabtune-agent" '
                                                                  'cannot list resource "nodemaintenances"')):
        with pytest.raises(SetupError) as e:
            KubeSession.reach(SimpleNamespace(api=api))
        assert e.value.exit_code == 2 and str(e.value).startswith(var) and said in str(e.value), str(e.value)


def test_a_node_whose_agent_does_not_answer_the_probe_stops_the_run_before_anything(lab, tmp_path, monkeypatch):
    """helper-46's tryout: with node02's agent stopped the run probed for 90 s, pushed the switches and
    the other nodes, waited apply_s + 60 s for node02, then restored and left the other nodes cordoned
    for a person (exit 4 after 12 minutes with the default timeouts). An agent silent to the probe is
    the setup (its pod is not running): exit 2 naming the node, the probe's ConfigMaps and file gone."""
    from types import SimpleNamespace

    from tuning.errors import SetupError
    from tuning.k8s import engine

    monkeypatch.setattr(engine, "STEP_S", 0.0)  # the probe's wait: connect_s alone (no agent runs here)
    s = object.__new__(engine.KubeSession)  # a session's probe state, without opening SSH to a lab
    s.__dict__.update(nodes={"node01", "node02"}, targets={"node01": None, "node02": None}, journal_dir=tmp_path,
                      api=lab["controller"], namespace="fabtune", timeouts=SimpleNamespace(connect_s=1, apply_s=1),
                      journal=None, asked=[], progress=lambda m: None)
    with pytest.raises(SetupError) as e:
        s.probe()
    assert e.value.exit_code == 2 and str(e.value).startswith(
        "2 agent(s) did not answer the probe within 1 s (node01, node02): each selected node's fabtune-agent pod") and \
        "--limit" in str(e.value), str(e.value)
    assert lab["admin"].get(ag.cm_path("fabtune"))["items"] == [] and list(tmp_path.iterdir()) == []


def test_a_restore_the_api_server_never_got_leaves_each_hold_journaled_for_rollback(tmp_path):
    """helper-46's tryout: the API server stopped while the agents pushed; the batch's restore request
    could not be sent, the ConnectError escaped the run (no report, no `fabtune rollback` named) and
    "released" was said of holds that were not. Now each node's restore is a RollbackError (the run
    names `fabtune rollback RUN`), its hold stays journaled and is not released by the run."""
    from types import SimpleNamespace

    from tuning.errors import RollbackError
    from tuning.k8s import engine, leftovers
    from tuning.k8s.client import Held
    from tuning.rollout.journal import Journal

    j = Journal.create(tmp_path, "inv", "rollout", run_id=RUN)
    hold = Held("node01", {"metadata": {"name": nm.object_name(RUN, "node01"), "namespace": "fabtune"}}, True)
    leftovers.journal_holds(j, "fabtune", {"node01": hold})
    s = object.__new__(engine.KubeSession)
    s.__dict__.update(held={"node01": hold}, failed={}, asked=[], batch=1, journal=None, mc=None, release_errors=[],
                      api=Api("http://127.0.0.1:9", token="ctl"), namespace="fabtune",
                      timeouts=SimpleNamespace(connect_s=1, apply_s=1), progress=lambda m: None)
    errors = s.restore_nodes(["node01"], j)
    assert type(errors["node01"]) is RollbackError and "restore request not sent" in str(errors["node01"])
    assert s.held == {} and s.failed == {}
    assert Journal.load(tmp_path, RUN).data["k8s"]["holds"]["node01"]["name"] == nm.object_name(RUN, "node01")
    # restored, but RequestorFailed could not be written: not a person's hold, so it stays journaled
    from tuning.k8s.client import MaintenanceClient

    s.__dict__.update(held={"node01": hold}, journal=j, mc=MaintenanceClient(s.api, RUN, "fabtune"))
    s._fail("node01", "verification failed")
    assert s.failed == {} and s.release_errors[0].startswith("node01: RequestorFailed not written: ")
    assert "node01" in Journal.load(tmp_path, RUN).data["k8s"]["holds"]
