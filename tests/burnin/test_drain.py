"""Drain adapters: dry-run log, the cap, reason quoting, Slurm through a stand-in ``scontrol``
on PATH (real argv, real output format), Kubernetes calls, undrain only fabtune's own drains."""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys
from pathlib import Path

import pytest

from tests.burnin.burnin_docs import fabric, make_doc
from tuning.burnin import drain as dr
from tuning.burnin.localise import localise
from tuning.errors import InputError

RUN = "burnin-20261130T160000-abcd"  # a burn-in run id (tuning.burnin.run.run_id)

#: a stand-in for Slurm's scontrol: records each argv (JSON line) and keeps node state in a JSON
#: file; ``show node`` answers in scontrol's multi-line layout (Slurm src/api/node_info.c,
#: ``Reason=%s [%s@%s]``), an unknown node as scontrol does ("Node X not found", exit 1)
SCONTROL = r'''#!PYTHON
import json, os, sys
log, state_file = os.environ["SCONTROL_LOG"], os.environ["SCONTROL_STATE"]
with open(log, "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\n")
state = json.load(open(state_file))
args = sys.argv[1:]
if args[:2] == ["show", "node"]:
    node = state.get(args[2])
    if node is None:
        print(f"Node {args[2]} not found"); sys.exit(1)
    reason = f"   Reason={node['reason']} [root@2026-11-30T16:00:00]\n" if node["reason"] else ""
    print(f"NodeName={args[2]} Arch=x86_64 CoresPerSocket=28\n   CPUAlloc=0 CPUEfctv=112 CPUTot=112 CPULoad=0.02\n"
          f"   Gres=gpu:8\n   NodeAddr={args[2]} NodeHostName={args[2]} Version=23.11.4\n"
          f"   State={node['state']} ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n"
          f"   Partitions=batch\n   CfgTRES=cpu=112,mem=2000000M,billing=112,gres/gpu=8\n{reason}", end="")
    sys.exit(0)
if args[:1] == ["update"]:
    kv = dict(a.split("=", 1) for a in args[1:])
    if kv.get("NodeName") not in state:
        print("slurm_update error: Invalid node name specified", file=sys.stderr); sys.exit(1)
    node = state[kv["NodeName"]]
    if kv.get("State") == "DRAIN":
        if not kv.get("Reason"):
            print("You must specify a reason when DOWNING or DRAINING a node. Request denied", file=sys.stderr)
            sys.exit(1)
        node.update(state="IDLE+DRAIN", reason=kv["Reason"])
    elif kv.get("State") == "RESUME":
        node.update(state="IDLE", reason=None)
    json.dump(state, open(state_file, "w"))
    sys.exit(0)
print(f"invalid keyword: {args[0]}", file=sys.stderr); sys.exit(1)
'''


@pytest.fixture
def scontrol(tmp_path, monkeypatch):
    """PATH with the stand-in scontrol; yields (argv log path, state path)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "scontrol"
    exe.write_text(SCONTROL.replace("PYTHON", sys.executable, 1))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    state = tmp_path / "slurm.json"
    state.write_text(json.dumps({f"node{k:02d}": {"state": "IDLE", "reason": None} for k in range(1, 9)}))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SCONTROL_LOG", str(tmp_path / "argv.jsonl"))
    monkeypatch.setenv("SCONTROL_STATE", str(state))
    return tmp_path / "argv.jsonl", state


def three_bad_nodes() -> list[dict]:
    def mutate(rnd, i):
        rnd["gpus"]["node02"][3]["xid"] = [79]
        rnd["gpus"]["node05"][0]["ecc_uncorrected"] = 2
    doc = make_doc(fabric(8, 4, 2, 1), rounds=1, slow={"node07:mlx5_1": 0.4}, mutate=mutate)
    found = localise(doc)
    assert [f["target"].split(":")[0] for f in found] == ["node02", "node05", "node07"]
    return found


def test_dry_run_log_has_run_id_and_cap_holds(tmp_path):
    log = tmp_path / "drain.log"
    out = dr.drain(three_bad_nodes(), RUN, "slurm", act=False, max_drain=1, log=log)
    assert out["dry_run"] and out["drained"] == ["node02"] and out["over_cap"] == ["node05", "node07"]
    assert out["capped"] is True
    text = log.read_text().splitlines()
    calls = [line for line in text if line.startswith("scontrol ")]
    assert calls == out["calls"] and len(calls) == 1
    argv = shlex.split(calls[0])
    assert argv[:4] == ["scontrol", "update", "NodeName=node02", "State=DRAIN"]
    assert argv[4].startswith(f"Reason=fabtune:{RUN}: gpu-xid node02: GPU 3")
    assert f"# over the cap of 1, not drained: node05: gpu-ecc (node05)" in text
    assert f"# over the cap of 1, not drained: node07: link-slow (node07:mlx5_1<->leaf02:swp7)" in text


def test_cap_of_three_drains_all_and_link_finding_drains_its_node(tmp_path):
    out = dr.drain(three_bad_nodes(), RUN, "slurm", max_drain=3, log=tmp_path / "d.log")
    assert out["drained"] == ["node02", "node05", "node07"] and not out["over_cap"] and not out["capped"]


def test_switch_findings_drain_nothing():
    f = {"code": "switch-congested", "kind": "switch", "target": "leaf01", "message": "m", "evidence": {}}
    assert dr.plan([f], 5).drain == []


@pytest.mark.parametrize("message", ['x"; rm -rf / #', "a'b\\c$(id)`id`\nnext line", "é\t\x00" * 100])
def test_reason_is_one_safe_argument(message):
    r = dr.reason_text(RUN, {"code": "node-slow", "message": message})
    assert r.startswith(f"fabtune:{RUN}: node-slow") and len(r) <= dr.REASON_MAX
    assert not set(r) & set("\"'\\`$\n\t\x00") and r.isprintable() and r.isascii()
    assert shlex.split(shlex.join(["scontrol", f"Reason={r}"]))[1] == f"Reason={r}"


def test_bad_node_name_and_adapter_and_cap_refused():
    bad = {"code": "gpu-xid", "kind": "node", "target": "node01;reboot", "message": "m"}
    with pytest.raises(InputError, match="not a host name"):
        dr.plan([bad])
    with pytest.raises(InputError, match="allowed: slurm, k8s"):
        dr.drain([], RUN, "pbs")
    with pytest.raises(InputError, match="0 or more"):
        dr.plan([], -1)


def test_slurm_real_path_runs_scontrol_from_path(scontrol, tmp_path):
    argv_log, state = scontrol
    out = dr.drain(three_bad_nodes(), RUN, "slurm", act=True, max_drain=2, log=tmp_path / "d.log")
    assert out["drained"] == ["node02", "node05"] and not out["failed"]
    argv = [json.loads(line) for line in argv_log.read_text().splitlines()]
    assert [a for a in argv if a[0] == "show"] == [["show", "node", "node02"], ["show", "node", "node05"]]
    calls = [a for a in argv if a[0] == "update"]  # each node's reason is read before it is drained
    assert [c[:4] for c in calls] == [["update", "NodeName=node02", "State=DRAIN", calls[0][3]],
                                      ["update", "NodeName=node05", "State=DRAIN", calls[1][3]]]
    assert calls[0][3].startswith(f"Reason=fabtune:{RUN}: gpu-xid")
    nodes = json.loads(state.read_text())
    assert nodes["node02"]["state"] == "IDLE+DRAIN" and nodes["node07"]["state"] == "IDLE"
    assert dr.Slurm().reason("node02").startswith(f"fabtune:{RUN}: gpu-xid")


def test_undrain_only_fabtune_drains_after_retest(scontrol, tmp_path):
    argv_log, state = scontrol
    nodes = json.loads(state.read_text())
    nodes["node04"] = {"state": "IDLE+DRAIN", "reason": "bad DIMM, ticket 4711"}
    state.write_text(json.dumps(nodes))
    dr.drain(three_bad_nodes(), RUN, "slurm", act=True, max_drain=1)
    dry = dr.undrain(["node02", "node04", "node06"], "slurm", act=False, log=tmp_path / "u.log")
    assert dry["resumed"] == ["node02"] and json.loads(state.read_text())["node02"]["state"] == "IDLE+DRAIN"
    assert dry["left"] == {"node04": "reason 'bad DIMM, ticket 4711' is not fabtune's", "node06": "not drained"}
    out = dr.undrain(["node02", "node04"], "slurm", act=True)
    assert out["resumed"] == ["node02"]
    now = json.loads(state.read_text())
    assert now["node02"] == {"state": "IDLE", "reason": None} and now["node04"]["state"] == "IDLE+DRAIN"
    argv = [json.loads(line) for line in argv_log.read_text().splitlines()]
    assert argv.count(["update", "NodeName=node02", "State=RESUME"]) == 1
    assert not [a for a in argv if a[:2] == ["update", "NodeName=node04"]]


def test_drain_leaves_a_node_someone_else_drained(scontrol, tmp_path):
    """Slurm replaces a drained node's reason on a second State=DRAIN (Slurm 22.05, tests/slurm/):
    a node with another reason is never drained over, so its owner's reason stays and no undrain
    of fabtune's resumes it; a node fabtune drained before is drained again (its reason refreshed)."""
    argv_log, state = scontrol
    nodes = json.loads(state.read_text())
    nodes["node02"] = {"state": "IDLE+DRAIN", "reason": "bad DIMM, ticket 4711"}
    nodes["node05"] = {"state": "IDLE+DRAIN", "reason": f"fabtune:{RUN}: gpu-ecc earlier"}
    state.write_text(json.dumps(nodes))
    out = dr.drain(three_bad_nodes(), RUN, "slurm", act=True, max_drain=2, log=tmp_path / "d.log")
    assert out["drained"] == ["node05"] and not out["failed"]
    assert out["left"] == {"node02": "drained by someone else: reason 'bad DIMM, ticket 4711' is not fabtune's"}
    assert json.loads(state.read_text())["node02"]["reason"] == "bad DIMM, ticket 4711"
    assert not [a for a in map(json.loads, argv_log.read_text().splitlines()) if a[:2] == ["update", "NodeName=node02"]]
    assert "# node02: left alone: drained by someone else" in (tmp_path / "d.log").read_text()
    assert dr.drain(three_bad_nodes(), RUN, "slurm", act=False, max_drain=2)["left"] == {}  # a dry run reads nothing


def test_slurm_failure_is_reported_per_node(scontrol):
    f = {"code": "gpu-xid", "kind": "node", "target": "node99", "message": "m"}
    out = dr.drain([f], RUN, "slurm", act=True)
    assert out["drained"] == [] and "Node node99 not found" in out["failed"]["node99"]  # its reason read first
    assert "not found" in dr.undrain(["node99"], "slurm", act=True)["failed"]["node99"]


def test_reason_of_scontrol_formats():
    text = "NodeName=n1\n   Reason=fabtune:r: x y [root@2026-11-30T16:00:00]\n"
    assert dr.reason_of_scontrol(text) == "fabtune:r: x y"
    assert dr.reason_of_scontrol("NodeName=n1 State=IDLE\n") is None
    assert dr.reason_of_scontrol("   Reason=(null)\n") is None


def test_k8s_dry_run_without_client_and_act_says_it_is_needed(tmp_path):
    log = tmp_path / "k.log"
    out = dr.drain(three_bad_nodes(), RUN, "k8s", max_drain=1, log=log)
    call = out["calls"][0]
    assert call.startswith("PATCH /api/v1/nodes/node02 ")
    body = json.loads(call.split(" ", 2)[2])
    assert body["spec"] == {"taints": [{"effect": "NoSchedule", "key": "fabtune.io/unhealthy", "value": "gpu-xid"}],
                            "unschedulable": True}
    assert body["metadata"]["annotations"]["fabtune.io/reason"].startswith(f"fabtune:{RUN}: gpu-xid")
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        act = dr.drain(three_bad_nodes(), RUN, "k8s", act=True)
        assert "needs the kubernetes Python client" in act["failed"]["node02"]


class _Api:
    """The two CoreV1Api methods the adapter uses, over an in-memory node (kubernetes' own shapes:
    ``read_node(name).spec.taints`` / ``.metadata.annotations``, ``patch_node(name, body)``)."""

    class _NS:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    def __init__(self):
        self.patches = []
        self.taints = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        self.annotations = {}

    def read_node(self, name):
        return self._NS(spec=self._NS(taints=[self._NS(**t) for t in self.taints]),
                        metadata=self._NS(annotations=dict(self.annotations)))

    def patch_node(self, name, body):
        self.patches.append((name, body))
        self.taints = body["spec"]["taints"]
        self.annotations = {k: v for k, v in {**self.annotations, **body["metadata"]["annotations"]}.items() if v}


def test_k8s_act_keeps_other_taints_and_undrains():
    api = _Api()
    out = dr.drain(three_bad_nodes(), RUN, "k8s", act=True, backend=dr.Kubernetes(api))
    assert out["drained"] == ["node02"]
    assert [t["key"] for t in api.taints] == ["nvidia.com/gpu", "fabtune.io/unhealthy"]
    assert dr.undrain(["node02"], "k8s", act=True, backend=dr.Kubernetes(api))["resumed"] == ["node02"]
    assert [t["key"] for t in api.taints] == ["nvidia.com/gpu"] and api.patches[-1][1]["spec"]["unschedulable"] is False


def test_finish_undrains_clean_fabtune_drains_only(scontrol, tmp_path):
    """Issue 10 finding 3: a run with ``undrain`` resumes the nodes it found clean whose reason is
    fabtune's; a node with a finding, one not read in a round, and an operator's drain stay."""
    from tuning.burnin.run import BurninOptions, clean_nodes, finish

    argv_log, state = scontrol
    nodes = json.loads(state.read_text())
    for n, why in (("node02", f"fabtune:{RUN}: gpu-xid old"), ("node03", f"fabtune:{RUN}: pcie-degraded x"),
                   ("node04", "bad DIMM, ticket 4711"), ("node05", f"fabtune:{RUN}: gpu-ecc y"),
                   ("node06", "fabtune:20261130T150000-1a2b3c: rollout batch 1/2")):  # a rollout's hold
        nodes[n] = {"state": "IDLE+DRAIN", "reason": why}
    state.write_text(json.dumps(nodes))

    def mutate(rnd, i):
        rnd["gpus"]["node02"][3]["xid"] = [79] if i == 0 else []
        if i == 1:
            rnd["errors"]["node05"] = "ssh: timed out"
            rnd["nics"].pop("node05")
            rnd["gpus"].pop("node05")
    doc = make_doc(fabric(6, 2, 2, 1), rounds=2, mutate=mutate)
    assert clean_nodes(doc, localise(doc)) == ["node01", "node03", "node04", "node06"]
    dry = finish(json.loads(json.dumps(doc)), BurninOptions(drain_adapter="slurm", undrain=True, max_drain=0,
                                                            drain_log=tmp_path / "d.log"), lambda _m: None)
    assert dry["undrain"]["dry_run"] and dry["undrain"]["resumed"] == ["node03"]
    assert json.loads(state.read_text())["node03"]["state"] == "IDLE+DRAIN"
    assert "scontrol update NodeName=node03 State=RESUME" in (tmp_path / "d.log").read_text()
    out = finish(doc, BurninOptions(drain_adapter="slurm", drain=True, undrain=True, max_drain=0), lambda _m: None)
    assert out["undrain"]["resumed"] == ["node03"] and out["undrain"]["left"]["node04"].startswith("reason 'bad DIMM")
    assert out["undrain"]["left"]["node06"] == ("reason 'fabtune:20261130T150000-1a2b3c: rollout batch 1/2' is not a "
                                                "fabtune:burnin-... or fabtune:health-... drain")
    now = json.loads(state.read_text())
    assert now["node03"] == {"state": "IDLE", "reason": None}
    assert [now[n]["state"] for n in ("node02", "node04", "node05")] == ["IDLE+DRAIN"] * 3
    with pytest.raises(InputError, match="--undrain"):
        BurninOptions(undrain=True).check()


def test_a_drain_that_did_not_happen_is_a_failure_on_the_console(scontrol, capsys):
    """issue 19: a failed drain printed only 'acted: none'; now each node's reason is an error line
    on stderr, the drain line names it, and the run exits 1 even when nothing else would."""
    from tuning.cli_burnin import EXIT_FINDINGS, _exit_code, _show

    f = {"code": "gpu-xid", "kind": "node", "target": "node99", "message": "node99: GPU 3: XID 79"}
    doc = {"run_id": RUN, "kind": "burnin", "rounds": [], "seconds": 3.0, "findings": [f],
           "drain": dr.drain([f], RUN, "slurm", act=True)}
    _show(doc, as_json=False)
    out, err = capsys.readouterr()
    assert "drain (slurm, acted): none; FAILED, not drained: node99\n" in out
    assert err.startswith("fabtune: error: drain failed: node99: scontrol show node node99: ")  # read before a drain
    assert "Node node99 not found" in err and len(err.splitlines()) == 1
    doc["findings"] = []  # the failure alone fails the run
    assert _exit_code(doc) == EXIT_FINDINGS
