"""``fabtune k8s manifests``: every Kubernetes object against the API's own schemas
(kubernetes-validate, strict: unknown fields refused), the node agent's privileges and its
inventory, RBAC's verbs, and the node-problem-detector plugin against NPD's published config and
its exit protocol (the script run with a stand-in ``fabtune`` on PATH)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import kubernetes_validate as kv
import pytest
import yaml

from tests.conftest import REPO
from tests.k8s.clirun import fabtune

RUN = "20261203T2146-ab12"
SCHEMAS = Path(__file__).parent / "schemas"
K8S_VERSIONS = ("1.30.0", "1.37.0")  # the oldest and newest minor this suite checks against


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("k8s")
    r = fabtune("k8s", "manifests", "-i", "inventory/lab", "-o", str(out), "--run-id", RUN, "-n", "gpu-ops")
    assert r.returncode == 0, r.stderr
    assert "wrote 5 file(s)" in r.stdout and "for 4 node(s) in namespace gpu-ops" in r.stdout
    return out


def objects(out: Path) -> list[dict]:
    return [d for f in sorted(out.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())]


def test_every_object_fits_the_kubernetes_schemas(written):
    docs = objects(written)
    assert sorted(d["kind"] for d in docs) == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "ConfigMap", "DaemonSet",
                                               "Role", "Role", "RoleBinding", "RoleBinding", "ServiceAccount",
                                               "ServiceAccount"]
    for version in K8S_VERSIONS:
        for d in docs:
            kv.validate(d, version, strict=True)  # raises ValidationError naming the field


def test_the_validator_can_fail(written):
    ds = next(d for d in objects(written) if d["kind"] == "DaemonSet")
    ds["spec"]["template"]["spec"]["hostPid"] = False  # a misspelt field
    with pytest.raises(kv.ValidationError):
        kv.validate(ds, K8S_VERSIONS[-1], strict=True)
    del ds["spec"]["selector"]
    with pytest.raises(kv.ValidationError, match="'selector' is a required property"):
        kv.validate(ds, K8S_VERSIONS[-1], strict=False)


def test_agent_privileges_nodes_and_command(written):
    ds = next(d for d in objects(written) if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert (pod["hostNetwork"], pod["hostPID"], pod["automountServiceAccountToken"]) == (True, False, True)
    c = pod["containers"][0]
    assert c["securityContext"] == {"privileged": True}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchFields"][0]["values"] == ["node01", "node02", "node03", "node04"]
    script = c["command"][2]
    assert script.splitlines()[0] == ("fabtune node apply -i /etc/fabtune/inventory --sysroot /host --journal-dir "
                                      f"/var/lib/fabtune/journal --json --run-id {RUN} --node \"$NODE_NAME\"")
    assert script.splitlines()[2] == ("exec fabtune k8s agent -i /etc/fabtune/inventory --sysroot /host --journal-dir "
                                      "/var/lib/fabtune/journal -n gpu-ops --node \"$NODE_NAME\"")
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts["host"] == "/host" and mounts["inventory"] == "/etc/fabtune/inventory"
    assert ds["metadata"]["namespace"] == "gpu-ops"


def test_inventory_configmap_holds_the_inventory_files_byte_for_byte(written):
    cm, ds = [d for d in objects(written) if d["metadata"]["name"] in ("fabtune-inventory", "fabtune-agent")
              and d["kind"] in ("ConfigMap", "DaemonSet")]
    items = next(v for v in ds["spec"]["template"]["spec"]["volumes"] if v["name"] == "inventory")["configMap"]["items"]
    lab = REPO / "inventory" / "lab"
    assert sorted(i["path"] for i in items) == sorted(str(p.relative_to(lab)) for p in lab.rglob("*.y*ml"))
    for i in items:
        assert cm["data"][i["key"]] == (lab / i["path"]).read_text()


def test_rbac_least_verbs(written):
    docs = {(d["kind"], d["metadata"]["name"]): d for d in objects(written)}
    cluster = docs[("ClusterRole", "fabtune-controller")]["rules"]
    assert cluster == [{"apiGroups": ["maintenance.nvidia.com"], "resources": ["nodemaintenances"],
                        "verbs": ["get", "list", "create", "update", "delete"]},
                       {"apiGroups": ["maintenance.nvidia.com"], "resources": ["nodemaintenances/status"],
                        "verbs": ["update"]}]
    assert docs[("Role", "fabtune-controller")]["rules"][0]["resources"] == ["configmaps"]
    # the agent: the plan ConfigMap read, its result ConfigMap written, nothing else (tuning/k8s/agent.py)
    assert docs[("Role", "fabtune-agent")]["rules"] == [{"apiGroups": [""], "resources": ["configmaps"],
                                                         "verbs": ["get", "create"]}]
    assert docs[("ServiceAccount", "fabtune-agent")]["automountServiceAccountToken"] is True
    assert not any("nodes" in r["resources"] for r in cluster)


def go_duration_s(text: str) -> float:
    """A Go ``time.ParseDuration`` string of s/m/h units (``30s``, ``1m30s``) in seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|m|s)", text)
    assert "".join(n + u for n, u in parts) == text, f"{text!r} is not a Go duration of h/m/s"
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def test_npd_config_fits_the_published_format_and_npds_start_checks(written):
    ours = json.loads((written / "npd" / "fabtune-plugin-monitor.json").read_text())
    example = json.loads((SCHEMAS / "npd-custom-plugin-monitor.example.json").read_text())
    assert set(ours) == set(example) and set(ours["pluginConfig"]) == set(example["pluginConfig"])
    for key, value in example["pluginConfig"].items():
        assert type(ours["pluginConfig"][key]) is type(value), key
    assert set(ours["conditions"][0]) == set(example["conditions"][0])
    assert all(set(r) <= set(example["rules"][1]) for r in ours["rules"])
    # config.go Validate(): plugin custom, interval > 0, a rule's timeout within the global, a
    # permanent rule's condition among the default conditions
    assert ours["plugin"] == "custom" and go_duration_s(ours["pluginConfig"]["invoke_interval"]) > 0
    for rule in ours["rules"]:
        assert go_duration_s(rule["timeout"]) <= go_duration_s(ours["pluginConfig"]["timeout"])
        assert rule["type"] in ("temporary", "permanent")
        if rule["type"] == "permanent":
            assert rule["condition"] in {c["type"] for c in ours["conditions"]}
    assert ours["conditions"][0]["type"] == "FabricConfigDrift"
    cm = next(d for d in objects(written) if d["metadata"]["name"] == "fabtune-npd-plugin")
    assert json.loads(cm["data"]["fabtune-plugin-monitor.json"]) == ours
    assert cm["data"]["fabtune-drift.sh"] == (written / "npd" / "fabtune-drift.sh").read_text()


@pytest.mark.parametrize("rc,text,npd", [
    (0, "node01: ready", 0),
    (1, "fabtune: error: node01: not ready for a job: mtu/enp12s0np0: 1500, tuned 9000", 1),
    (4, "fabtune: error: node01: cannot read the node: no shell", 2),
    (2, "fabtune: error: --node: node09: the host name names no node", 2),
])
def test_npd_script_maps_fabtunes_exit_onto_npds_protocol(written, tmp_path, rc, text, npd):
    stub = tmp_path / "fabtune"
    stub.write_text(f"#!/bin/sh\necho 'a first line' >&2\necho '{text}' >&2\nexit {rc}\n")
    stub.chmod(0o755)
    r = subprocess.run([str(written / "npd" / "fabtune-drift.sh")], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "NODE_NAME": "node01"})
    assert r.returncode == npd
    assert r.stdout == text.removeprefix("fabtune: error: ") + "\n"


@pytest.mark.parametrize("flag,value,says", [
    ("--namespace", "GPU_ops", "--namespace: GPU_ops: allowed: a DNS label"),
    ("--image", "img; rm -rf /", "--image: img; rm -rf /: allowed: an image reference"),
    ("--run-id", "../etc", "--run-id: ../etc: not a run id"),
])
def test_bad_flags_are_one_line_exit_2_and_write_nothing(tmp_path, flag, value, says):
    r = fabtune("k8s", "manifests", "-i", "inventory/lab", "-o", str(tmp_path / "out"), flag, value)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and says in r.stderr
    assert not (tmp_path / "out").exists()


def test_help_has_an_example():
    r = fabtune("k8s", "manifests", "--help")
    assert r.returncode == 0 and "Example: fabtune k8s manifests -i" in r.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="the lab stand-ins refuse privileged writes to a non-root user, as the "
                    "kernel does")
def test_the_agents_command_plans_a_lab_node_from_the_configmaps_inventory(tmp_path):
    """The DaemonSet's script as written (only its paths moved: the ConfigMap's items laid out under
    tmp_path, the host's / as node01's lab sysroot) runs `fabtune node apply --check` on node01's
    sysroot through the lab stand-ins, and plans the profile's changes from the ConfigMap's inventory
    (the mtu domain only: each domain's own plan is proved in tests/node)."""
    from tuning.lab.controller import write_wrappers
    from tuning.lab.fabric import default_fabric
    from tuning.lab.nodeserver import node_env
    from tuning.lab.sysroot import build_sysroot

    out = tmp_path / "k8s"
    assert fabtune("k8s", "manifests", "-i", "inventory/lab", "-o", str(out)).returncode == 0
    docs = objects(out)
    cm = next(d for d in docs if d["metadata"]["name"] == "fabtune-inventory")
    pod = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    inv = tmp_path / "inventory"
    for item in next(v for v in pod["volumes"] if v["name"] == "inventory")["configMap"]["items"]:
        (inv / item["path"]).parent.mkdir(parents=True, exist_ok=True)
        (inv / item["path"]).write_text(cm["data"][item["key"]])
    state = tmp_path / "state"
    build_sysroot(state / "nodes" / "node01" / "sysroot", next(n for n in default_fabric().nodes if n.name == "node01"))
    write_wrappers(state / "bin")
    default_fabric().save(state / "fabric.json")
    script = pod["containers"][0]["command"][2].splitlines()[0]
    assert "--check" in script and "--run-id" not in script
    script = (script.replace("/etc/fabtune/inventory", str(inv)).replace("--sysroot /host", f"--sysroot {state}/nodes/node01/sysroot")
              .replace("/var/lib/fabtune/journal", str(tmp_path / "journal"))) + " -d mtu"  # one domain: the fast tier's cost
    env = {**node_env(state, "node01"), "NODE_NAME": "node01"}
    env["PATH"] += f":{Path(sys.executable).parent}"
    r = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, env=env, cwd=state / "nodes" / "node01",
                       timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["node"] == "node01" and doc["check"] is True
    assert {"key": "mtu/enp12s0np0", "before": "1500", "after": "9000"}.items() <= next(
        c for c in doc["changes"] if c["key"] == "mtu/enp12s0np0").items()
