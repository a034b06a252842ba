"""``fabtune rollout --engine k8s`` on the Kubernetes lab (issue 23): the controller plans, verifies
and journals; each batch is held by one NodeMaintenance per node (or fabtune joins another
requestor's), each node's writes are ``fabtune node apply`` / ``restore`` run by that node's agent
from the plan ConfigMap on its own sysroot. The lab: ``tests/k8s/conftest.py``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, snapshot_fabric
from tests.k8s.conftest import admin
from tests.slurm.conftest import fab
from tuning.k8s import maintenance as nm
from tuning.lab.inject import inject

pytestmark = pytest.mark.lab

#: the change rolled out (as the Slurm lab's test): the nodes' sysctls and MTUs, verified on rail 0
CHANGE = ("--domain", "sysctl", "--domain", "mtu", "--min-bw", "200", "--rail", "0")
NMS = f"/apis/{nm.GROUP}/{nm.VERSION}/{nm.PLURAL}"
OTHER = "network.operator.nvidia.com"


def _holds(inv) -> dict[str, list[dict]]:
    """Every NodeMaintenance by node, as the API server holds it."""
    out: dict[str, list[dict]] = {}
    for o in admin(inv, "GET", NMS)["items"]:
        out.setdefault(o["spec"]["nodeName"], []).append(o)
    return out


def _cordoned(inv) -> dict[str, bool]:
    return {n: bool(admin(inv, "GET", f"/api/v1/nodes/{n}")["spec"].get("unschedulable")) for n in ("node01", "node02")}


def _answers(jdir, inv, run_id: str) -> list[str]:
    """The agents' log lines answering this run's requests (``fabtune-agent node01: answered ...``)."""
    logs = sorted((inv / ".state" / "k8s" / "log").glob("agent.*.log"))
    tag = run_id.lower()
    return sorted(line.split(": answered ")[0] + ": " + line.rsplit(f"{tag}-", 1)[1] for f in logs
                  for line in f.read_text().splitlines() if tag in line)


def test_good_change_is_pushed_by_the_agents_kept_released_and_writes_what_ssh_writes(k8s_lab, tmp_path):
    inv, env, jdir = k8s_lab
    assert fab("lab", "reset", "-i", str(inv)).returncode == 0
    untuned = snapshot_fabric(inv)
    r = fab("rollout", "-i", str(inv), "--engine", "k8s", "--journal-dir", str(jdir), *CHANGE, "--json",
            env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["outcome"] == "kept" and doc["verify_ok"] is True and not doc["errors"], doc["errors"]
    # each node's push was its own agent's answer to the batch's request
    assert _answers(jdir, inv, doc["run_id"]) == ["fabtune-agent node01: apply-b1-node01",
                                                  "fabtune-agent node02: apply-b1-node02"]
    # each agent pushed the batch's plan file (`node apply --plan`): its changes are what the run planned
    planned = json.loads((jdir / f"{doc['run_id']}.plans" / "apply-b1.json").read_text())
    assert {n: sorted(c["key"] for c in ch) for n, ch in planned["changes"].items()} == \
        {n: sorted(c["key"] for c in ch) for n, ch in doc["changes"].items() if n.startswith("node")}
    # the holds are over: no NodeMaintenance left, nodes uncordoned, the plan ConfigMap gone
    assert _holds(inv) == {} and _cordoned(inv) == {"node01": False, "node02": False}
    assert admin(inv, "GET", "/api/v1/namespaces/fabtune/configmaps/fabtune-plan")["reason"] == "NotFound"
    through_k8s = snapshot_fabric(inv)
    assert through_k8s != untuned
    # parity: the Nornir engine's SSH push of the same change on the reset lab, file for file
    assert fab("lab", "reset", "-i", str(inv)).returncode == 0
    ssh = fab("apply", "-i", str(inv), "--journal-dir", str(tmp_path / "ssh"), *CHANGE[:4])
    assert ssh.returncode == 0, ssh.stdout[-2000:] + ssh.stderr[-2000:]
    assert snapshot_fabric(inv) == through_k8s


def _paused_rollout(inv, env, jdir, stage: str, *extra: str):
    """A rollout paused 3 s at ``stage``: ``(process, run id)`` once it says so."""
    p = subprocess.Popen([sys.executable, "-m", "tuning", "rollout", "-i", str(inv), "--engine", "k8s",
                          "--journal-dir", str(jdir), *CHANGE, *extra, "--json"], cwd=REPO, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**env, "FABTUNE_TEST_PAUSE_AT": f"{stage}:3"})
    line = ""
    while f"test pause at {stage}" not in line and p.poll() is None:
        line = p.stderr.readline()
    return p, line.rsplit("(run ", 1)[-1].rstrip(")\n")


def test_regression_restores_that_batch_through_its_agent_and_marks_its_hold_failed(k8s_lab):
    """Two batches (--serial 1): node01's is kept and released; node02's fails its verification (its
    NIC degraded during the batch), is restored byte for byte by node02's agent alone, and its
    NodeMaintenance carries RequestorFailed (the node stays cordoned for a person)."""
    inv, env, jdir = k8s_lab
    assert fab("lab", "reset", "-i", str(inv)).returncode == 0
    untuned = snapshot_fabric(inv)
    try:
        p, run_id = _paused_rollout(inv, env, jdir, "verify-batch-2", "--serial", "1")
        during = _holds(inv)
        inject(inv / ".state", "node02:mlx5_0", "degrade")
        out, err = p.communicate(timeout=300)
    finally:
        inject(inv / ".state", "node02:mlx5_0", "clear")
    assert p.returncode == 1, out[-2000:] + err[-3000:]
    held_name = nm.object_name(run_id, "node02")
    assert (f"k8s: node02 stays held and cordoned for a person (NodeMaintenance fabtune/{held_name}: RequestorFailed); "
            f"`kubectl -n fabtune delete nodemaintenance {held_name}` ends it") in " ".join(err.split()), err[-2000:]
    doc = json.loads(out)
    # batch 1 stays kept (on_regression restore-batch), so the run halts rather than rolls back whole
    assert doc["outcome"] == "halted" and doc["restored"] == ["node02"], (doc["outcome"], doc["restored"])
    # during batch 2: node02 held by this run's object, node01's hold (batch 1, kept) already released
    assert sorted(during) == ["node02"] and nm.owned(during["node02"][0]) and nm.is_ready(during["node02"][0])
    assert _answers(jdir, inv, run_id) == ["fabtune-agent node01: apply-b1-node01",
                                           "fabtune-agent node02: apply-b2-node02",
                                           "fabtune-agent node02: restore-b2-1-node02"]
    after = snapshot_fabric(inv)
    assert {k: v for k, v in after.items() if k.startswith("node02:")} == \
        {k: v for k, v in untuned.items() if k.startswith("node02:")}
    assert any(after[k] != untuned[k] for k in untuned if k.startswith("node01:"))  # batch 1 kept
    held = _holds(inv)
    assert sorted(held) == ["node02"] and nm.ready_reason(held["node02"][0]) == "RequestorFailed"
    cond = next(c for c in held["node02"][0]["status"]["conditions"] if c["type"] == "RequestorFailed")
    assert (cond["status"], cond["reason"]) == ("True", "FailedMaintenance") and run_id in cond["message"]
    assert _cordoned(inv) == {"node01": False, "node02": True}
    # a person clears it: the operator's finalizer uncordons the node
    ref = held["node02"][0]["metadata"]
    admin(inv, "DELETE", f"/apis/{nm.GROUP}/{nm.VERSION}/namespaces/{ref['namespace']}/{nm.PLURAL}/{ref['name']}")
    assert _holds(inv) == {} and _cordoned(inv)["node02"] is False


def test_a_node_held_by_another_requestor_is_joined_not_duplicated_and_its_hold_stays(k8s_lab):
    inv, env, jdir = k8s_lab
    assert fab("lab", "reset", "-i", str(inv)).returncode == 0
    theirs = {"apiVersion": nm.API_VERSION, "kind": nm.KIND, "metadata": {"name": "upgrade-node02", "namespace": "nvidia"},
              "spec": {"requestorID": OTHER, "nodeName": "node02"}}
    made = admin(inv, "POST", f"/apis/{nm.GROUP}/{nm.VERSION}/namespaces/nvidia/{nm.PLURAL}", theirs)
    assert made["metadata"]["name"] == "upgrade-node02", made
    path = f"/apis/{nm.GROUP}/{nm.VERSION}/namespaces/nvidia/{nm.PLURAL}/upgrade-node02"
    try:
        p, run_id = _paused_rollout(inv, env, jdir, "verify-batch-1")
        during = _holds(inv)
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, out[-2000:] + err[-3000:]
        assert json.loads(out)["outcome"] == "kept"
        # during the batch: node02 has only its owner's object, with fabtune.io among its requestors
        assert [o["metadata"]["name"] for o in during["node02"]] == ["upgrade-node02"]
        assert during["node02"][0]["spec"]["additionalRequestors"] == [nm.REQUESTOR_ID]
        assert [o["spec"]["requestorID"] for o in during["node01"]] == [nm.REQUESTOR_ID]
        # after: fabtune left it; the owner's hold stays (node02 cordoned), node01's own object gone
        after = _holds(inv)
        assert sorted(after) == ["node02"] and after["node02"][0]["spec"]["requestorID"] == OTHER
        assert not after["node02"][0]["spec"].get("additionalRequestors")
        assert nm.is_ready(after["node02"][0]) and _cordoned(inv) == {"node01": False, "node02": True}
    finally:
        admin(inv, "DELETE", path)
    assert _holds(inv) == {} and _cordoned(inv)["node02"] is False


def test_a_node_held_by_another_fabtune_run_is_left_alone_and_counted_unreachable(k8s_lab):
    """Another fabtune run's object (left RequestorFailed for a person, say) on node02: this run
    neither joins nor touches it; node02 is unreachable with the reason. node01 alone is pushed, and
    its pair with the untuned node02 (MTU 1500 against 9000) fails verification, so node01 is put
    back by its agent and its own hold marked failed: the whole fabric as before."""
    inv, env, jdir = k8s_lab
    assert fab("lab", "reset", "-i", str(inv)).returncode == 0
    before = snapshot_fabric(inv)
    old = nm.new("20261201T0000-0ld1", "node02", "fabtune")
    assert admin(inv, "POST", f"/apis/{nm.GROUP}/{nm.VERSION}/namespaces/fabtune/{nm.PLURAL}", old)["kind"] == nm.KIND
    path = f"/apis/{nm.GROUP}/{nm.VERSION}/namespaces/fabtune/{nm.PLURAL}/{old['metadata']['name']}"
    try:
        r = fab("rollout", "-i", str(inv), "--engine", "k8s", "--journal-dir", str(jdir), *CHANGE,
                "--max-fail-percentage", "50", "--json", env=env, timeout=300)
        doc = json.loads(r.stdout)
        assert (r.returncode, doc["outcome"], doc["unreachable"], doc["restored"]) == (1, "rolled-back", ["node02"],
                                                                                       ["node01"]), r.stderr[-2000:]
        assert doc["errors"]["node02"].startswith(f"Kubernetes: node02 not held: NodeMaintenance fabtune/"
                                                  f"{old['metadata']['name']} of fabtune run 20261201T0000-0ld1")
        assert snapshot_fabric(inv) == before
        held = _holds(inv)
        assert [o["metadata"]["name"] for o in held["node02"]] == [old["metadata"]["name"]]
        assert not held["node02"][0]["spec"].get("additionalRequestors") and not nm.failed(held["node02"][0])
        assert nm.ready_reason(held["node01"][0]) == "RequestorFailed" and nm.owned(held["node01"][0])
    finally:
        for o in [o for objs in _holds(inv).values() for o in objs]:
            m = o["metadata"]
            admin(inv, "DELETE", f"/apis/{nm.GROUP}/{nm.VERSION}/namespaces/{m['namespace']}/{nm.PLURAL}/{m['name']}")
    assert _holds(inv) == {}


def test_ctrl_c_once_the_apply_request_is_out_restores_the_nodes_its_agents_push(k8s_lab):
    """Tryout finding (session 15): a Ctrl-C right after the batch's apply request was published
    said "3 device(s) restored" (the switches) while the agents went on to push both nodes and their
    holds were released. The nodes are journaled ``pushing`` before the request goes out (as the SSH
    engine journals a node before its script), so the interrupted run restores them through their
    agents too: every node file and switch config is back, and the run's restored list names them."""
    import signal

    inv, env, jdir = k8s_lab
    assert fab("lab", "reset", "-i", str(inv)).returncode == 0
    untuned = snapshot_fabric(inv)
    p = subprocess.Popen([sys.executable, "-m", "tuning", "rollout", "-i", str(inv), "--engine", "k8s",
                          "--journal-dir", str(jdir), *CHANGE, "--json"], cwd=REPO, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    said = []
    while p.poll() is None:
        said.append(p.stderr.readline())
        if "k8s: apply published as apply-b1" in said[-1]:
            p.send_signal(signal.SIGINT)
            break
    out, err = p.communicate(timeout=300)
    try:
        assert p.returncode == 130, "".join(said)[-2000:] + err[-3000:]
        assert snapshot_fabric(inv) == untuned
        assert "node01" in err and "node02" in err and "restored" in err, err[-2000:]
    finally:  # the restored nodes' holds are kept for a person (RequestorFailed): clear them here
        for objs in _holds(inv).values():
            for o in objs:
                ref = o["metadata"]
                admin(inv, "DELETE", f"/apis/{nm.GROUP}/{nm.VERSION}/namespaces/{ref['namespace']}/{nm.PLURAL}/"
                                     f"{ref['name']}")


def test_a_controller_killed_in_a_batch_leaves_its_holds_in_the_journal_and_rollback_ends_them(k8s_lab):
    """SIGKILL of the controller while its batch is held (both nodes pushed, cordoned, the plan
    ConfigMap there): the journal names the holds and ConfigMaps; `fabtune rollback RUN_ID` puts the
    nodes back, then releases the holds (uncordoned) and deletes the ConfigMaps, so the next run is
    not refused by a dead run's plan."""
    import signal

    inv, env, jdir = k8s_lab
    assert fab("lab", "reset", "-i", str(inv)).returncode == 0
    untuned = snapshot_fabric(inv)
    p, run_id = _paused_rollout(inv, env, jdir, "verify-batch-1")
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=30)
    left = json.loads((jdir / f"{run_id}.json").read_text())["k8s"]
    assert left["namespace"] == "fabtune" and sorted(left["holds"]) == ["node01", "node02"]
    assert "fabtune-plan" in left["configmaps"] and len(left["configmaps"]) == 3  # the plan, two answers
    assert _cordoned(inv) == {"node01": True, "node02": True} and snapshot_fabric(inv) != untuned
    r = fab("rollback", run_id, "--journal-dir", str(jdir), env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert snapshot_fabric(inv) == untuned
    assert "k8s: deleted the run's ConfigMaps in fabtune: fabtune-plan" in r.stderr, r.stderr[-2000:]
    said = r.stdout.split(f"ended what run {run_id} held outside its devices: ", 1)[-1].splitlines()[0]
    assert said.count("NodeMaintenance fabtune/") == 2 and "ConfigMap fabtune/fabtune-plan" in said, r.stdout
    assert _holds(inv) == {} and _cordoned(inv) == {"node01": False, "node02": False}
    assert admin(inv, "GET", "/api/v1/namespaces/fabtune/configmaps/fabtune-plan")["reason"] == "NotFound"
    assert "k8s" not in json.loads((jdir / f"{run_id}.json").read_text())


def test_a_journal_dir_that_is_not_the_agents_is_refused_before_anything(k8s_lab, tmp_path):
    """Tryout finding (session 15): with a --journal-dir other than the agents' folder the run pushed
    the switches, then every node failed with no reason and the run rolled back (exit 1). The agents
    are probed first: each answers that the controller's probe file is not in its folder, and the run
    stops there, exit 2, naming the folder; no switch or node written, no hold, no ConfigMap left."""
    inv, env, jdir = k8s_lab
    assert fab("lab", "reset", "-i", str(inv)).returncode == 0
    untuned = snapshot_fabric(inv)
    elsewhere = tmp_path / "elsewhere"
    # a folder that does not exist cannot be the agents': refused before the lock, and never created
    r = fab("rollout", "-i", str(inv), "--engine", "k8s", "--journal-dir", str(elsewhere), *CHANGE, env=env)
    assert (r.returncode, r.stderr.strip().splitlines()[-1]) == (2, (
        f"fabtune: error: --journal-dir {elsewhere}: no such folder; with --engine k8s it is the folder the agents "
        "mount (their shared volume), never created here")), r.stderr[-2000:]
    assert not elsewhere.exists() and snapshot_fabric(inv) == untuned
    elsewhere.mkdir()
    r = fab("rollout", "-i", str(inv), "--engine", "k8s", "--journal-dir", str(elsewhere), *CHANGE, env=env,
            timeout=300)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("fabtune: error: 2 agent(s) refused the probe: node01: agent on node01: fabtune node exited 2: "
                           "fabtune: error: node01: no .fabtune-probe-"), last
    assert last.endswith(f"in this agent's journal folder {jdir}; the controller's --journal-dir must be the agents' "
                         "journal folder (their shared volume)"), last
    assert snapshot_fabric(inv) == untuned and _holds(inv) == {} and _cordoned(inv) == {"node01": False, "node02": False}
    assert admin(inv, "GET", "/api/v1/namespaces/fabtune/configmaps/fabtune-plan")["reason"] == "NotFound"
    assert not list(elsewhere.glob(".fabtune-probe-*")) and not list(elsewhere.glob("*.json"))
