"""NodeMaintenance objects against the published CRD schema, and the maintenance client against the
API server stand-in (tuning/lab/k8s_api.py): create, wait for Ready, join another requestor's
object, report a failure, release, and the API server's refusals read as errors."""

from __future__ import annotations

import calendar
import time

import pytest
import yaml

from tests.conftest import REPO
from tuning.lab import k8s_api as apiserver
from tuning.errors import ConnectError, InputError
from tuning.k8s import maintenance as nm
from tuning.k8s.api import Api, ApiError
from tuning.k8s.client import MaintenanceClient, obj_path, path

RUN = "20261203T2146-ab12"
NS = "fabtune"


def schema_problems(obj: dict) -> list[str]:
    """Every way ``obj`` breaks the published CRD schema (unknown fields included), [] when it fits."""
    schema = apiserver.crd_schema()
    return apiserver.unknown_fields(obj, schema) + [
        f"{c['field']}: {c['message']}" for c in apiserver.schema_causes(apiserver.defaulted(obj, schema), schema)]


def test_new_object_fits_the_published_crd_schema():
    obj = nm.new(RUN, "node01", NS)
    assert schema_problems(obj) == []
    assert obj["metadata"]["name"] == "fabtune-20261203t2146-ab12-node01"
    assert obj["spec"]["requestorID"] == "fabtune.io" and obj["spec"]["nodeName"] == "node01"
    assert obj["spec"]["drainSpec"] == {"force": False, "deleteEmptyDir": False, "timeoutSeconds": 300}


def test_the_schema_check_can_fail():
    bad = nm.new(RUN, "node01", NS)
    bad["spec"]["requestorID"] = "fabtune_io"  # '_' is outside the CRD's pattern
    bad["spec"]["drainSpec"]["timeoutSeconds"] = -1
    bad["spec"]["drainspec"] = {}
    del bad["spec"]["nodeName"]
    problems = schema_problems(bad)
    assert "spec.drainspec" in problems
    assert "spec.nodeName: Required value" in problems
    assert any(p.startswith("spec.requestorID: Invalid value: \"fabtune_io\"") for p in problems)
    assert any(p.startswith("spec.drainSpec.timeoutSeconds: Invalid value: -1") for p in problems)


def test_failed_condition_and_joined_annotation_fit_the_schema():
    own = nm.new(RUN, "node01", NS)
    kind, body = nm.mark_failed(own, "verify failed: node01/mlx5_0 <-> node02/mlx5_0 12.5 Gb/s", "2026-12-03T21:46:37Z")
    assert kind == "status" and schema_problems(body) == [] and nm.failed(body)
    cond = body["status"]["conditions"][-1]
    assert (cond["type"], cond["status"], cond["reason"]) == ("RequestorFailed", "True", "FailedMaintenance")
    other = {**nm.new(RUN, "node02", NS), "spec": {"requestorID": "network.operator.nvidia.com", "nodeName": "node02"}}
    kind, body = nm.mark_failed(nm.with_requestor(other), "x", "2026-12-03T21:46:37Z")
    assert kind == "update" and "status" not in body and nm.failed(body)
    assert body["metadata"]["annotations"][nm.FAILED_ANNOTATION] == "x"


@pytest.mark.parametrize("node", ["Node01", "node_01", "-node"])
def test_a_node_name_kubernetes_cannot_have_is_bad_input(node):
    with pytest.raises(InputError, match="not a Kubernetes node name"):
        nm.new(RUN, node, NS)


def test_decisions():
    other = {"metadata": {"name": "net-op-node01", "namespace": "nvidia", "creationTimestamp": "2026-12-03T10:00:00Z"},
             "spec": {"requestorID": "network.operator.nvidia.com", "nodeName": "node01", "additionalRequestors": ["a.b"]}}
    d = nm.decide([other], RUN, "node01", NS)
    assert d.action == "join" and d.body["spec"]["additionalRequestors"] == ["a.b", "fabtune.io"]
    assert nm.decide([d.body], RUN, "node01", NS).action == "have"
    assert nm.leave(d.body) == ("update", other)
    stale = nm.new("20261202T0900-zz99", "node01", NS)
    refused = nm.decide([stale], RUN, "node01", NS)
    assert refused.action == "refuse" and "fabtune run 20261202T0900-zz99" in refused.why
    going = {**other, "metadata": {**other["metadata"], "deletionTimestamp": "2026-12-03T11:00:00Z"}}
    assert nm.decide([going], RUN, "node01", NS).action == "refuse"
    assert nm.decide([], RUN, "node01", NS).action == "create"


@pytest.fixture
def cluster():
    c = apiserver.Cluster(["node01", "node02", "node03"])
    server = apiserver.serve(c)
    yield c, Api(f"http://127.0.0.1:{server.server_address[1]}")
    server.shutdown()


def client(api: Api) -> MaintenanceClient:
    return MaintenanceClient(api, RUN, NS, sleep=lambda s: None)


def test_hold_wait_release_cordons_then_uncordons(cluster):
    c, api = cluster
    mc = client(api)
    holds = mc.wait_ready(mc.hold(["node01", "node02"]), timeout_s=60)
    assert holds.refused == {} and holds.not_ready == {}
    assert [nm.ready_reason(h.obj) for h in holds.held.values()] == ["Ready", "Ready"]
    assert c.nodes["node01"]["spec"]["unschedulable"] is True
    assert c.nodes["node03"]["spec"].get("unschedulable") is None
    for h in holds.held.values():
        mc.release(h)
    api.get("/api/v1/nodes/node01")  # one more operator step: the finalizer goes
    assert c.nms == {} and c.nodes["node01"]["spec"]["unschedulable"] is False


def test_join_another_requestors_maintenance_and_leave_it_to_its_owner(cluster):
    c, api = cluster
    theirs = {"apiVersion": nm.API_VERSION, "kind": nm.KIND, "metadata": {"name": "upgrade-node02"},
              "spec": {"requestorID": "network.operator.nvidia.com", "nodeName": "node02"}}
    api.create(path("nvidia"), theirs)
    mc = client(api)
    holds = mc.wait_ready(mc.hold(["node02"]), timeout_s=60)
    held = holds.held["node02"]
    assert not held.created and held.obj["metadata"]["name"] == "upgrade-node02"
    assert held.obj["spec"]["additionalRequestors"] == ["fabtune.io"] and len(c.nms) == 1
    api.delete(path("nvidia", "upgrade-node02"))  # the owner ends first: the operator waits for fabtune
    assert c.nodes["node02"]["spec"]["unschedulable"] is True and len(c.nms) == 1
    held.obj = api.get(path("nvidia", "upgrade-node02"))
    mc.release(held)
    api.get("/api/v1/nodes/node02")
    assert c.nms == {} and c.nodes["node02"]["spec"]["unschedulable"] is False


def test_a_failed_verify_marks_requestor_failed_and_keeps_the_node_held(cluster):
    c, api = cluster
    mc = client(api)
    held = mc.wait_ready(mc.hold(["node01"]), timeout_s=60).held["node01"]
    mc.fail(held, "verification failed: node01/mlx5_0 <-> node02/mlx5_0 12.5 Gb/s below 300")
    back = api.get(path(NS, held.obj["metadata"]["name"]))
    assert nm.ready_reason(back) == "RequestorFailed"
    assert "fabtune run 20261203T2146-ab12: verification failed" in back["status"]["conditions"][-1]["message"]
    assert c.nodes["node01"]["spec"]["unschedulable"] is True
    again = MaintenanceClient(api, "20261204T0800-cd34", NS).hold(["node01"])
    assert "node01" in again.refused and "RequestorFailed" in again.refused["node01"]


def test_not_ready_in_time_names_the_reason(cluster):
    c, api = cluster
    api.create(path("nvidia"), {"apiVersion": nm.API_VERSION, "kind": nm.KIND, "metadata": {"name": "first"},
                                "spec": {"requestorID": "other.example.com", "nodeName": "node03"}})
    api.get("/api/v1/nodes/node03")  # the operator schedules the other object first
    clock = iter(range(0, 1000, 10))
    mc = MaintenanceClient(api, RUN, NS, clock=lambda: next(clock), sleep=lambda s: None)
    d = nm.new(RUN, "node03", NS)
    api.create(path(NS), d)  # a second object on a node held already stays Pending
    from tuning.k8s.client import Held, Holds

    holds = mc.wait_ready(Holds(held={"node03": Held("node03", d, True)}), timeout_s=30)
    assert holds.not_ready == {"node03": "Pending"}


def test_api_refusals_are_status_errors(cluster):
    c, api = cluster
    bad = nm.new(RUN, "node01", NS)
    bad["spec"]["requestorID"] = "x"
    with pytest.raises(ApiError) as e:
        api.create(path(NS), bad)
    assert (e.value.code, e.value.reason) == (422, "Invalid")
    assert e.value.status["details"]["causes"][0]["field"] == "spec.requestorID"
    api.create(path(NS), nm.new(RUN, "node01", NS))
    with pytest.raises(ApiError, match="409 AlreadyExists"):
        api.create(path(NS), nm.new(RUN, "node01", NS))
    with pytest.raises(ApiError, match="403 Forbidden: admission webhook"):
        api.create(path(NS), {**nm.new(RUN, "node01", NS), "metadata": {"name": "x"},
                              "spec": {**nm.new(RUN, "node01", NS)["spec"], "nodeName": "node09"}})
    obj = client(api).wait_ready(client(api).hold(["node01"]), timeout_s=60).held["node01"].obj  # Ready: stable
    moved = {**obj, "spec": {**obj["spec"], "nodeName": "node02"}}
    with pytest.raises(ApiError, match="Value is immutable"):
        api.replace(path(NS, obj["metadata"]["name"]), moved)
    with pytest.raises(ApiError, match="409 Conflict"):
        api.replace(path(NS, obj["metadata"]["name"]), {**obj, "metadata": {**obj["metadata"], "resourceVersion": "1"}})
    with pytest.raises(ApiError, match="404 NotFound"):
        api.get(path(NS, "nothing"))


def test_no_api_server_is_a_connect_error_never_a_fabric_fault():
    with pytest.raises(ConnectError, match="no answer"):
        Api("http://127.0.0.1:9", timeout_s=2).get(path(NS))


def test_bearer_token_is_sent_and_a_wrong_one_is_an_api_error():
    c = apiserver.Cluster(["node01"], token="s3cret-token")
    server = apiserver.serve(c)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(ApiError) as e:
            Api(url, token="wrong").get(f"/apis/{nm.GROUP}/{nm.VERSION}/{nm.PLURAL}")
        assert (e.value.code, e.value.reason, e.value.exit_code) == (401, "Unauthorized", 4)
        assert "wrong" not in str(e.value)
        items = Api(url, token="s3cret-token").get(f"/apis/{nm.GROUP}/{nm.VERSION}/{nm.PLURAL}")["items"]
        assert items == []
    finally:
        server.shutdown()


def test_in_cluster_reads_the_service_account(tmp_path, monkeypatch):
    from tuning.k8s import api as api_mod

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(api_mod, "SA_DIR", tmp_path)
    with pytest.raises(ConnectError, match="not in a Kubernetes pod"):
        Api.in_cluster()
    (tmp_path / "token").write_text("tok\n")
    (tmp_path / "ca.crt").write_text("")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setattr(api_mod.ssl, "create_default_context", lambda cafile=None: ("ctx", cafile))
    a = Api.in_cluster()
    assert a.server == "https://[fd00::1]:443" and a._ctx == ("ctx", str(tmp_path / "ca.crt"))


def test_a_hold_deleted_before_ready_is_named_not_waited_for(cluster):
    c, api = cluster
    mc = client(api)
    holds = mc.hold(["node01"])
    api.delete(obj_path(holds.held["node01"].obj))  # no finalizer yet (Pending): gone at once
    assert mc.wait_ready(holds, timeout_s=60).not_ready == {"node01": "deleted by someone else before it was Ready"}


def test_the_documented_object_is_the_one_fabtune_writes():
    text = (REPO / "docs" / "kubernetes.md").read_text()
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(block) == nm.new(RUN, "node01", "fabtune")


def test_what_a_killed_run_left_is_ended_from_its_journal_alone(cluster, tmp_path, monkeypatch):
    """A controller killed in a batch (tuning/k8s/leftovers.py): its NodeMaintenance held node01
    (cordoned), its plan and one answer ConfigMap stay. From the journal alone, through
    $FABTUNE_K8S_SERVER, the hold is released (node01 uncordoned), this run's ConfigMaps deleted,
    another run's object left and said, and the journal forgets what ended."""
    from tuning.k8s import agent as ag
    from tuning.k8s import leftovers
    from tuning.rollout.journal import Journal

    c, api = cluster
    mc = client(api)
    held = mc.wait_ready(mc.hold(["node01"]), timeout_s=60).held
    assert c.nodes["node01"]["spec"]["unschedulable"] is True
    other = MaintenanceClient(api, "20261203T2000-ffff", NS, sleep=lambda s: None)
    theirs = other.wait_ready(other.hold(["node02"]), timeout_s=60).held
    answer = ag.result_name(RUN, "apply-b1", "node01")
    for name in (ag.PLAN_CM, answer):
        api.create(ag.cm_path(NS), {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                                    "data": {"run-id": RUN}})
    j = Journal.create(tmp_path, "inv", "rollout", run_id=RUN)
    leftovers.journal_holds(j, NS, {**held, **theirs})  # node02's: as if this run had journaled another run's
    leftovers.journal_configmaps(j, NS, [ag.PLAN_CM, answer])
    monkeypatch.setenv("FABTUNE_K8S_SERVER", api.server)
    said: list[str] = []
    left = leftovers.end_journaled(Journal.load(tmp_path, RUN), said.append)
    assert left == [f"node02: NodeMaintenance {NS}/{theirs['node02'].obj['metadata']['name']} is run "
                    "20261203T2000-ffff's, not this run's: left"]
    api.get("/api/v1/nodes/node01")  # one more operator step: the finalizer goes
    assert c.nodes["node01"]["spec"]["unschedulable"] is False and c.nodes["node02"]["spec"]["unschedulable"] is True
    for name in (ag.PLAN_CM, answer):
        with pytest.raises(ApiError, match="NotFound"):
            api.get(ag.cm_path(NS, name))
    assert Journal.load(tmp_path, RUN).data["k8s"] == {"namespace": NS, "configmaps": [],
                                                       "holds": {"node02": {"name": theirs["node02"].obj["metadata"]["name"],
                                                                            "created": True, "namespace": NS}}}
    assert said[0] == f"k8s: node01 released (NodeMaintenance {NS}/{held['node01'].obj['metadata']['name']}) for run {RUN}"
    # an edited journal's names never reach an API path
    j = Journal.load(tmp_path, RUN)
    j.data["k8s"]["holds"]["node02"]["name"] = "../../nodes/node02"
    with pytest.raises(InputError, match="not a Kubernetes name"):
        leftovers.end_journaled(j, said.append)


def test_a_joined_hold_in_its_owners_namespace_is_left_by_rollback_and_the_owners_stays(cluster, tmp_path, monkeypatch):
    """A controller killed while fabtune is an additional requestor of another requestor's object in
    that requestor's namespace (helper-46's tryout: the journal named the run's namespace, the GET
    found nothing there, the hold was counted ended and fabtune stayed in the list, so the owner's
    delete would never uncordon the node): rollback takes fabtune off that list, the object stays."""
    from tuning.k8s import leftovers
    from tuning.rollout.journal import Journal

    c, api = cluster
    theirs = {"apiVersion": nm.API_VERSION, "kind": nm.KIND, "metadata": {"name": "upgrade-node03", "namespace": "nvidia"},
              "spec": {"requestorID": "network.operator.nvidia.com", "nodeName": "node03"}}
    api.create(path("nvidia"), theirs)
    held = client(api).hold(["node03"]).held
    assert held["node03"].created is False and nm.joined(api.get(path("nvidia", "upgrade-node03")))
    j = Journal.create(tmp_path, "inv", "rollout", run_id=RUN)
    leftovers.journal_holds(j, NS, held)
    assert j.data["k8s"]["holds"] == {"node03": {"name": "upgrade-node03", "created": False, "namespace": "nvidia"}}
    monkeypatch.setenv("FABTUNE_K8S_SERVER", api.server)
    said: list[str] = []
    assert leftovers.end_journaled(Journal.load(tmp_path, RUN), said.append) == []
    after = api.get(path("nvidia", "upgrade-node03"))
    assert not nm.joined(after) and after["spec"]["requestorID"] == "network.operator.nvidia.com"
    assert said == [f"k8s: node03 left (NodeMaintenance nvidia/upgrade-node03) for run {RUN}"]
    assert "k8s" not in Journal.load(tmp_path, RUN).data


def test_rollback_without_the_api_servers_variables_says_what_is_left_and_why(tmp_path, monkeypatch):
    """helper-46's tryout: `fabtune rollback` in a shell without $FABTUNE_K8S_SERVER restored the nodes,
    then ended with exit 4 "not in a Kubernetes pod" (its report lost, no variable named). The holds are
    one line naming the variables, kept in the journal for the next rollback."""
    from tuning.k8s import leftovers
    from tuning.k8s.client import Held
    from tuning.rollout.journal import Journal

    for var in ("FABTUNE_K8S_SERVER", "FABTUNE_K8S_TOKEN_FILE", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(var, raising=False)
    j = Journal.create(tmp_path, "inv", "rollout", run_id=RUN)
    leftovers.journal_holds(j, NS, {"node01": Held("node01", {"metadata": {"name": nm.object_name(RUN, "node01")}}, True)})
    left = leftovers.end_journaled(Journal.load(tmp_path, RUN), lambda m: None)
    assert len(left) == 1 and left[0].startswith("$FABTUNE_K8S_SERVER is not set and not in a Kubernetes pod"), left
    assert "node01" in Journal.load(tmp_path, RUN).data["k8s"]["holds"]


def test_a_join_is_journaled_in_its_owners_namespace_before_it_is_written(cluster, tmp_path, monkeypatch):
    """A controller SIGKILLed while its batch's holds were being written (helper-46's tryout: after
    node03's join, before the holds were journaled as made) journaled node03 under the object fabtune
    would have created, so rollback found nothing and left fabtune in the owner's list. Journaled from
    the decisions before any write, the join is ended by rollback."""
    from tuning.k8s import leftovers
    from tuning.rollout.journal import Journal

    _, api = cluster
    api.create(path("nvidia"), {"apiVersion": nm.API_VERSION, "kind": nm.KIND,
                                "metadata": {"name": "upgrade-node03", "namespace": "nvidia"},
                                "spec": {"requestorID": "network.operator.nvidia.com", "nodeName": "node03"}})
    mc, j = client(api), Journal.create(tmp_path, "inv", "rollout", run_id=RUN)
    decisions = mc.preview(["node01", "node03"])
    leftovers.journal_decisions(j, NS, decisions)
    assert j.data["k8s"]["holds"] == {
        "node01": {"name": nm.object_name(RUN, "node01"), "created": True, "namespace": NS},
        "node03": {"name": "upgrade-node03", "created": False, "namespace": "nvidia"}}
    mc.hold(["node01", "node03"], decisions)  # then killed: the holds never journaled as made
    monkeypatch.setenv("FABTUNE_K8S_SERVER", api.server)
    assert leftovers.end_journaled(Journal.load(tmp_path, RUN), lambda m: None) == []
    assert not nm.joined(api.get(path("nvidia", "upgrade-node03")))
    with pytest.raises(ApiError, match="NotFound"):  # fabtune's own object: deleted (never Ready, no finalizer wait)
        api.get(path(NS, nm.object_name(RUN, "node01")))


def test_a_probe_a_killed_controller_left_is_ended_by_the_next_run_and_a_live_one_is_not(cluster, tmp_path):
    """A controller SIGKILLed while its agents answer the probe (helper-46's tryout) left fabtune-plan
    and the answers, journaled nowhere, and every later run was refused by that plan. Past twice the
    probe's wait it is abandoned (tuning/k8s/leftovers.py): its answers, the plan and the marker go;
    a younger probe, or a run's request, is not touched."""
    from tuning.k8s import agent as ag
    from tuning.k8s import leftovers

    _, api = cluster
    token = "20261204T150710-69159d"
    req = ag.Request(token, "probe", "probe", ("node01", "node02"))
    plan = api.create(ag.cm_path(NS), ag.plan_configmap(req, NS, {}))
    answer = ag.result_name(token, "probe", "node01")
    api.create(ag.cm_path(NS), ag.result_configmap(req, "node01", NS, 0, "{}", ""))
    (tmp_path / f"{ag.PROBE_PREFIX}{token}").write_text("probe\n")
    made = calendar.timegm(time.strptime(plan["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ"))
    assert leftovers.abandoned_probe(plan, 120, now=made + 100) is None  # still waited for
    run_plan = ag.plan_configmap(ag.Request(RUN, "apply-b1", "apply", ("node01",)), NS, {})
    assert leftovers.abandoned_probe({**run_plan, "metadata": plan["metadata"]}, 120, now=made + 1000) is None
    assert leftovers.abandoned_probe(plan, 120, now=made + 121) == req
    assert leftovers.end_probe(api, NS, req, tmp_path) == []
    for name in (ag.PLAN_CM, answer):
        with pytest.raises(ApiError, match="NotFound"):
            api.get(ag.cm_path(NS, name))
    assert list(tmp_path.iterdir()) == []
    api.create(ag.cm_path(NS), run_plan)  # another run's plan now: a probe's end leaves it
    assert leftovers.end_probe(api, NS, req, tmp_path) == []
    assert api.get(ag.cm_path(NS, ag.PLAN_CM))["data"]["run-id"] == RUN


def test_an_agents_answer_is_read_by_its_exit_code():
    """The agent's answer ConfigMap (tuning/k8s/agent.py ``result_configmap``) as the controller reads
    it: 0 with a result naming the node, 4 unreachable, 3 a failed restore, 2 the node refused its
    input (names the journal folder, the tryout's --journal-dir that was not the agents'), 1 a failed push."""
    from tuning.errors import RollbackError, SetupError, TuningError
    from tuning.k8s.engine import answer

    def cm(rc: int, stdout: str = "", stderr: str = "") -> dict:
        return {"data": {"exit-code": str(rc), "result.json": stdout, "stderr": stderr}}

    assert answer("node01", cm(0, '{"node": "node01", "pushed": true}')) == {"node": "node01", "pushed": True}
    assert isinstance(answer("node01", cm(0, '{"node": "node02"}')), ConnectError)
    got = answer("node01", cm(2, stderr=f"fabtune: error: RUN_ID: {RUN}: no journal /j/{RUN}.json\n"))
    assert type(got) is SetupError and got.exit_code == 2 and str(got) == (
        f"node01: agent on node01: fabtune node exited 2: fabtune: error: RUN_ID: {RUN}: no journal /j/{RUN}.json; "
        "the controller's --journal-dir must be the agents' journal folder (their shared volume)")
    assert [type(answer("node01", cm(rc, stderr="x\n"))) for rc in (1, 3, 4)] == [TuningError, RollbackError, ConnectError]


def test_the_probe_answers_whether_the_agent_sees_the_controllers_file_and_the_inventory(tmp_path):
    """The ``probe`` request (tuning/k8s/agent.py): 0 when the agent's journal folder holds the
    controller's file and the inventory folder is there, else 2 naming what is missing."""
    from tuning.k8s.agent import PROBE_PREFIX, probe

    jdir, inv = tmp_path / "journal", tmp_path / "inv"
    jdir.mkdir()
    inv.mkdir()
    assert probe("node01", str(jdir), str(inv), RUN) == (
        2, "", f"fabtune: error: node01: no {PROBE_PREFIX}{RUN} in this agent's journal folder {jdir}\n")
    (jdir / f"{PROBE_PREFIX}{RUN}").write_text("x")
    assert probe("node01", str(jdir), str(inv), RUN) == (0, '{"node": "node01", "probe": "' + RUN + '"}', "")
    assert probe("node01", str(jdir), str(tmp_path / "none"), RUN)[2] == (
        f"fabtune: error: node01: no inventory folder {tmp_path}/none on this node\n")
