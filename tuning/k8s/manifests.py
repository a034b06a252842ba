"""The objects ``fabtune k8s manifests`` writes: the node agent's DaemonSet and the ConfigMap of its
inventory, RBAC, and a node-problem-detector custom plugin (``FabricConfigDrift``).

The agent (DaemonSet ``fabtune-agent``, only on the inventory's nodes: node affinity on
``metadata.name``) runs ``fabtune node apply`` once per pod start, ON the node (node-local mode,
:mod:`tuning.cli_node`), from the inventory mounted from the ConfigMap ``fabtune-inventory``, then
becomes the node agent of ``fabtune rollout --engine k8s`` (``fabtune k8s agent``, :mod:`tuning.k8s.agent`:
it reads the plan ConfigMap and runs ``fabtune node apply|restore`` for each request naming its node).
Without a run id the first command plans only (``--check``: the changes each node would get, in its
log, nothing written); with one it pushes that run's changes into the journal folder, a volume the
controller reads too (the PersistentVolumeClaim ``fabtune-journal``, ReadWriteMany, made by the site:
as Slurm's shared file system). The agent's pod runs:

- ``privileged: true``: the node domains write ``/proc/sys`` (sysctl), ``/sys`` (IRQ affinity, cpufreq,
  cpuidle, hugepages) and PCI config space (``setpci``); an unprivileged container sees ``/sys`` and
  ``/proc/sys`` read-only;
- ``hostNetwork: true``: MTU (``ip link``), ``ethtool``, ``mlnx_qos`` and ``/proc/sys/net`` act on the
  network namespace of the process, which must be the host's;
- ``hostPID: false``: no domain signals or lists a host process; ``systemctl`` (irqbalance) reaches
  the host's systemd through its socket (``/run/systemd`` mounted);
- the host's ``/`` at ``/host`` (``--sysroot /host``: every file path the domains read or write),
  ``/lib/modules`` read-only for ``modprobe``; the service account token of ``fabtune-agent`` (the agent
  reads the plan ConfigMap and writes its result ConfigMap: a Role with ``configmaps`` get, create).

RBAC (the controller's ServiceAccount ``fabtune-controller``, least verbs): ClusterRole on
``maintenance.nvidia.com`` ``nodemaintenances`` get, list (once a batch, every namespace: another
requestor's object may be anywhere), create, update (join and leave ``additionalRequestors``),
delete; ``nodemaintenances/status`` update (``RequestorFailed``); no verb on ``nodes`` (the operator
cordons and drains; fabtune reads the hold from the object's ``Ready`` condition); a Role in the
namespace for ``configmaps`` get, create, update, delete (the plan ConfigMap).

The node-problem-detector files (``kubernetes/node-problem-detector``
``pkg/custompluginmonitor/types/config.go`` and ``plugin/plugin.go``): a ``custom`` plugin config with
the permanent condition ``FabricConfigDrift`` (default reason ``FabricConfigInSync``), whose script runs
``fabtune node check --prolog`` (the tuned MTU, PFC, trust, the port ACTIVE and the RoCE v2 GID,
reads only, about 4 s on the lab) and maps its exit to NPD's protocol: 0 OK, 1 NonOK (drifted), any
other (2 bad input, 4 could not read) Unknown, never a fabric fault; its last line on stdout is the
condition's message (NPD keeps ``max_output_length``, 80, characters).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from tuning.errors import InputError
from tuning.k8s import maintenance as nm

APP = "fabtune-agent"
CONTROLLER = "fabtune-controller"
INVENTORY_CM, NPD_CM, JOURNAL_CLAIM = "fabtune-inventory", "fabtune-npd-plugin", "fabtune-journal"
INV_DIR, JOURNAL_DIR, SYSROOT = "/etc/fabtune/inventory", "/var/lib/fabtune/journal", "/host"
NPD_DIR = "/config/plugin"  # where NPD's pod mounts the plugin ConfigMap (its own config folder)
CONFIGMAP_MAX = 1024 * 1024  # "The data stored in a ConfigMap cannot exceed 1 MiB" (kubernetes.io, ConfigMaps)
_CM_KEY = re.compile(r"[-._a-zA-Z0-9]+")  # a ConfigMap data key
LABELS = {"app.kubernetes.io/name": APP, **nm.MANAGED_BY}
DRIFT, IN_SYNC, DRIFTED = "FabricConfigDrift", "FabricConfigInSync", "FabricConfigDrifted"


def inventory_files(root: Path) -> dict[str, str]:
    """The inventory's files (``hosts.yaml``, ``group_vars/...``, ``host_vars/...``: .yml, .yaml,
    .json or a file called ``hosts``; nothing under a dot folder such as fabtune's state) as
    ``{relative path: text}``.

    Raises:
        InputError: a file name a ConfigMap key cannot carry, or more than 1 MiB in all.
    """
    out, size = {}, 0
    for f in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = f.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or not (f.suffix in (".yml", ".yaml", ".json")
                                                                     or f.name == "hosts"):
            continue
        if not _CM_KEY.fullmatch("__".join(rel.parts)):
            raise InputError(str(f), "file name", "a ConfigMap key takes [-._a-zA-Z0-9] only: rename the file")
        out[str(rel)] = f.read_text(encoding="utf-8")
        size += len(out[str(rel)].encode())
    if size > CONFIGMAP_MAX:
        raise InputError(str(root), "inventory", f"{size} bytes: a ConfigMap holds at most {CONFIGMAP_MAX}")
    return out


def _meta(name: str, namespace: str | None) -> dict:
    return {"name": name, **({"namespace": namespace} if namespace else {}), "labels": dict(LABELS)}


def rbac(namespace: str) -> list[dict]:
    """ServiceAccounts (controller, agent), the controller's ClusterRole, Role and their bindings (module docstring)."""
    group = nm.GROUP
    subject = [{"kind": "ServiceAccount", "name": CONTROLLER, "namespace": namespace}]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(CONTROLLER, namespace)},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(APP, namespace),
         "automountServiceAccountToken": True},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": _meta(CONTROLLER, None),
         "rules": [{"apiGroups": [group], "resources": [nm.PLURAL], "verbs": ["get", "list", "create", "update", "delete"]},
                   {"apiGroups": [group], "resources": [f"{nm.PLURAL}/status"], "verbs": ["update"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": _meta(CONTROLLER, None),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CONTROLLER},
         "subjects": subject},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(CONTROLLER, namespace),
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "update", "delete"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(CONTROLLER, namespace),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CONTROLLER},
         "subjects": subject},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(APP, namespace),
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(APP, namespace),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": APP},
         "subjects": [{"kind": "ServiceAccount", "name": APP, "namespace": namespace}]},
    ]


def inventory_configmap(files: dict[str, str], namespace: str) -> dict:
    """The ConfigMap of the inventory: one key per file, ``/`` written ``__`` (keys take no ``/``)."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(INVENTORY_CM, namespace),
            "data": {"__".join(Path(rel).parts): text for rel, text in files.items()}}


def agent_script(run_id: str | None, namespace: str = "fabtune") -> str:
    """The agent container's shell script (module docstring); every word quoted."""
    args = ["fabtune", "node", "apply", "-i", INV_DIR, "--sysroot", SYSROOT, "--journal-dir", JOURNAL_DIR, "--json"]
    args += ["--run-id", run_id] if run_id else ["--check"]
    agent = ["fabtune", "k8s", "agent", "-i", INV_DIR, "--sysroot", SYSROOT, "--journal-dir", JOURNAL_DIR,
             "-n", namespace]
    return (f'{shlex.join(args)} --node "$NODE_NAME"\n'
            'echo "fabtune-agent: node apply exited $?"\n'
            f'exec {shlex.join(agent)} --node "$NODE_NAME"\n')


def daemonset(nodes: list[str], files: dict[str, str], namespace: str, image: str, run_id: str | None) -> dict:
    """The agent's DaemonSet (module docstring), its pods only on ``nodes``."""
    host = lambda name, path, **kw: {"name": name, "hostPath": {"path": path, **kw}}  # noqa: E731
    items = [{"key": "__".join(Path(rel).parts), "path": rel} for rel in files]
    pod = {"serviceAccountName": APP, "automountServiceAccountToken": True,
           "hostNetwork": True, "hostPID": False, "dnsPolicy": "ClusterFirstWithHostNet",
           "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
               {"matchFields": [{"key": "metadata.name", "operator": "In", "values": sorted(nodes)}]}]}}},
           "containers": [{"name": "agent", "image": image, "command": ["/bin/sh", "-c", agent_script(run_id, namespace)],
                           "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                           "securityContext": {"privileged": True},
                           "volumeMounts": [{"name": "host", "mountPath": SYSROOT},
                                            {"name": "modules", "mountPath": "/lib/modules", "readOnly": True},
                                            {"name": "systemd", "mountPath": "/run/systemd"},
                                            {"name": "inventory", "mountPath": INV_DIR, "readOnly": True},
                                            {"name": "journal", "mountPath": JOURNAL_DIR}]}],
           "volumes": [host("host", "/", type="Directory"), host("modules", "/lib/modules", type="Directory"),
                       host("systemd", "/run/systemd", type="Directory"),
                       {"name": "inventory", "configMap": {"name": INVENTORY_CM, "items": items}},
                       {"name": "journal", "persistentVolumeClaim": {"claimName": JOURNAL_CLAIM}}]}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": _meta(APP, namespace),
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": APP}},
                     "template": {"metadata": {"labels": dict(LABELS)}, "spec": pod}}}


def npd_config() -> dict:
    """The node-problem-detector custom plugin monitor config (module docstring)."""
    return {"plugin": "custom",
            "pluginConfig": {"invoke_interval": "60s", "timeout": "20s", "max_output_length": 80, "concurrency": 1,
                             "enable_message_change_based_condition_update": False},
            "source": "fabtune-custom-plugin-monitor", "metricsReporting": True,
            "conditions": [{"type": DRIFT, "reason": IN_SYNC, "message": "fabric settings hold their tuned values"}],
            "rules": [{"type": "permanent", "condition": DRIFT, "reason": DRIFTED,
                       "path": f"{NPD_DIR}/fabtune-drift.sh", "timeout": "15s"}]}


def npd_script() -> str:
    """The plugin script: ``fabtune node check --prolog`` mapped onto NPD's exit protocol (module docstring)."""
    check = shlex.join(["fabtune", "node", "check", "--prolog", "-i", INV_DIR, "--sysroot", SYSROOT])
    return ("#!/bin/sh\n"
            "# node-problem-detector custom plugin (FabricConfigDrift): exit 0 OK, 1 NonOK, 2 Unknown;\n"
            "# the last line on stdout is the condition's message\n"
            f'out=$({check} --node "$NODE_NAME" 2>&1)\n'
            "rc=$?\n"
            "printf '%s\\n' \"$out\" | tail -n 1 | sed 's/^fabtune: error: //'\n"
            'case $rc in 0) exit 0 ;; 1) exit 1 ;; *) exit 2 ;; esac\n')


def npd_configmap(namespace: str) -> dict:
    """The ConfigMap holding the plugin config and script, for node-problem-detector's pod to mount at /config/plugin."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(NPD_CM, namespace),
            "data": {"fabtune-plugin-monitor.json": json.dumps(npd_config(), indent=2) + "\n",
                     "fabtune-drift.sh": npd_script()}}
