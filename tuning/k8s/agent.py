"""The node agent of ``fabtune rollout --engine k8s`` and the ConfigMaps it and the controller
exchange (issue 23): the Kubernetes counterpart of ``srun fabtune node apply``.

- The controller publishes one request at a time in the ConfigMap :data:`PLAN_CM` of its namespace
  (:func:`plan_configmap`): the run id, a request name unique in the run (``apply-b1``,
  ``restore-b1``), the action (``apply`` or ``restore``), the nodes it is for, the domains and the
  firmware consent, and each node's planned keys (``plan.json``, for a person reading it).
- The agent (``fabtune k8s agent``, the DaemonSet's container: :mod:`tuning.k8s.manifests`) polls
  that ConfigMap (``get``); when its node is named in a request it has not answered, it runs
  ``fabtune node apply`` (or ``restore``) ON the node (:mod:`tuning.cli_node`: the same domains,
  read back and journal records as a Slurm task) and answers with a ConfigMap of its own
  (:func:`result_configmap`, ``create``): the node's JSON result, its exit code and the last of its
  stderr. A request already answered (the result ConfigMap exists) is never run again, so a
  restarted agent does not push twice.
- Before a run reads anything, the controller asks every agent to ``probe``: the agent answers (no
  node command) whether it sees the file the controller just wrote in its ``--journal-dir``
  (:func:`probe`), so a controller whose journal folder is not the agents' stops before any push.
- Everything read from the plan ConfigMap passes a grammar before it reaches an argv
  (:func:`read_request`: run id, request name, node names, domain names); no shell is used.

The agent's RBAC (:func:`tuning.k8s.manifests.rbac`): ``configmaps`` get and create in the
namespace, nothing else. The journal folder is the run's shared one (the PersistentVolumeClaim the
controller writes too), as Slurm's shared file system is.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tuning.errors import InputError
from tuning.k8s import maintenance as nm
from tuning.k8s.api import Api, ApiError

PLAN_CM = "fabtune-plan"
ACTIONS = ("apply", "restore", "probe")
#: the file a controller writes in its --journal-dir before a run, which every agent must see in its
#: own journal folder (the ``probe`` request): ``.fabtune-probe-<token>``
PROBE_PREFIX = ".fabtune-probe-"
_REQUEST = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
_DOMAIN = re.compile(r"[a-z][a-z0-9_]{0,39}")
STDERR_KEEP = 4000  # characters of a node command's stderr kept in its result
#: the node command: this fabtune, as the agent itself was started (the DaemonSet's image)
NODE_COMMAND = (sys.executable, "-m", "tuning")


def cm_path(namespace: str, name: str = "") -> str:
    """The path of a ConfigMap of ``namespace`` (its collection when ``name`` is '')."""
    return f"/api/v1/namespaces/{namespace}/configmaps" + (f"/{name}" if name else "")


@dataclass(frozen=True)
class Request:
    """One published request: ``run_id``, ``name`` (``apply-b1``), ``action`` (apply | restore),
    ``nodes``, ``domains`` (empty: all), ``allow_firmware``."""

    run_id: str
    name: str
    action: str
    nodes: tuple[str, ...]
    domains: tuple[str, ...] = ()
    allow_firmware: bool = False


def plan_configmap(req: Request, namespace: str, planned: dict[str, list[str]]) -> dict:
    """The ConfigMap :data:`PLAN_CM` carrying ``req`` (``planned``: node -> the keys the controller planned)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": PLAN_CM, "namespace": namespace, "labels": dict(nm.MANAGED_BY),
                         "annotations": {nm.RUN_ANNOTATION: req.run_id}},
            "data": {"run-id": req.run_id, "request": req.name, "action": req.action, "nodes": ",".join(req.nodes),
                     "domains": ",".join(req.domains), "allow-firmware": "true" if req.allow_firmware else "false",
                     "plan.json": json.dumps(planned, indent=1, sort_keys=True)}}


def read_request(cm: dict) -> Request:
    """The Request of a plan ConfigMap, every word checked by its grammar.

    Raises:
        InputError: a field missing or outside its grammar (names the ConfigMap's key).
    """
    from tuning.model.grammar import check_host_name
    from tuning.rollout.journal_check import check_run_id

    data = cm.get("data") or {}
    where = f"ConfigMap {PLAN_CM}"
    run_id = check_run_id(data.get("run-id"), f"{where} run-id")
    name, action = str(data.get("request", "")), str(data.get("action", ""))
    if not _REQUEST.fullmatch(name):
        raise InputError(where, "request", f"{name[:60]!r}: allowed 1..40 of [a-z0-9-]")
    if action not in ACTIONS:
        raise InputError(where, "action", f"{action[:20]!r}: allowed {', '.join(ACTIONS)}")
    try:
        nodes = tuple(check_host_name(n) for n in str(data.get("nodes", "")).split(",") if n)
    except ValueError as e:
        raise InputError(where, "nodes", str(e)) from None
    domains = tuple(d for d in str(data.get("domains", "")).split(",") if d)
    bad = [d for d in domains if not _DOMAIN.fullmatch(d)]
    if bad or data.get("allow-firmware") not in ("true", "false"):
        raise InputError(where, "domains" if bad else "allow-firmware", f"{(bad or [data.get('allow-firmware')])[0]!r}: "
                         "allowed domain names [a-z][a-z0-9_]*; allow-firmware true or false")
    return Request(run_id, name, action, nodes, domains, data["allow-firmware"] == "true")


def result_name(run_id: str, request: str, node: str) -> str:
    """The name of ``node``'s answer to ``request`` of ``run_id``: ``fabtune-result-<run>-<request>-<node>``,
    lowercased, other characters ``-`` (a ConfigMap name is a DNS subdomain)."""
    return re.sub(r"[^a-z0-9]", "-", f"fabtune-result-{run_id}-{request}-{node}".lower())[:253].rstrip("-")


def result_configmap(req: Request, node: str, namespace: str, rc: int, stdout: str, stderr: str) -> dict:
    """The agent's answer: ``node``, ``exit-code``, ``result.json`` (the node command's stdout), ``stderr`` (its tail)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": result_name(req.run_id, req.name, node), "namespace": namespace,
                         "labels": dict(nm.MANAGED_BY), "annotations": {nm.RUN_ANNOTATION: req.run_id}},
            "data": {"node": node, "request": req.name, "exit-code": str(rc), "result.json": stdout,
                     "stderr": stderr[-STDERR_KEEP:]}}


def node_argv(req: Request, node: str, inventory: str, journal_dir: str, sysroot: str | None) -> list[str]:
    """The ``fabtune node apply|restore`` command line for ``node`` (no shell); an apply pushes the
    plan file the controller wrote for the request (:func:`tuning.rollout.plan_file.path_for`)."""
    from tuning.rollout.plan_file import path_for

    argv = [*NODE_COMMAND, "node", req.action, "--node", node, "--run-id", req.run_id,
            "--journal-dir", journal_dir, "--json"]
    if req.action == "apply":
        argv += ["-i", inventory, "--plan", str(path_for(Path(journal_dir), req.run_id, req.name)),
                 *[a for d in req.domains for a in ("-d", d)]]
        argv += ["--allow-firmware"] if req.allow_firmware else []
    return argv + (["--sysroot", sysroot] if sysroot else [])


def probe(node: str, journal_dir: str, inventory: str, token: str) -> tuple[int, str, str]:
    """The ``probe`` request: whether this node sees the controller's probe file
    (:data:`PROBE_PREFIX` + ``token``) in its journal folder and has the inventory folder; ``(exit
    code, stdout, stderr)`` as a node command's: 0 with ``{"node", "probe"}``, 2 naming what is missing."""
    from pathlib import Path

    marker = Path(journal_dir) / f"{PROBE_PREFIX}{token}"
    if not marker.is_file():
        return 2, "", f"fabtune: error: {node}: no {marker.name} in this agent's journal folder {Path(journal_dir).resolve()}\n"
    if not Path(inventory).is_dir():
        return 2, "", f"fabtune: error: {node}: no inventory folder {Path(inventory).resolve()} on this node\n"
    return 0, json.dumps({"node": node, "probe": token}), ""


class Agent:
    """One node's agent (module docstring): ``api`` with the agent's token, ``namespace``, ``node``,
    ``inventory`` and ``journal_dir`` as the node sees them, ``sysroot`` (None: the process's own /
    or ``$FABTUNE_SYSROOT``), ``timeout_s`` for one node command."""

    def __init__(self, api: Api, namespace: str, node: str, inventory: str, journal_dir: str,
                 sysroot: str | None = None, timeout_s: float = 900.0):
        self.api, self.namespace, self.node = api, namespace, node
        self.inventory, self.journal_dir, self.sysroot, self.timeout_s = inventory, journal_dir, sysroot, timeout_s
        self.done: set[tuple[str, str]] = set()

    def step(self) -> str | None:
        """Answer the published request if it is for this node and unanswered; the result's name, else None.
        Raises ApiError (not NotFound), ConnectError, InputError (a plan outside its grammar)."""
        try:
            req = read_request(self.api.get(cm_path(self.namespace, PLAN_CM)))
        except ApiError as e:
            if e.reason == "NotFound":
                return None
            raise
        if self.node not in req.nodes or (req.run_id, req.name) in self.done:
            return None
        name = result_name(req.run_id, req.name, self.node)
        try:
            self.api.get(cm_path(self.namespace, name))
            self.done.add((req.run_id, req.name))  # answered before this agent (re)started: never run twice
            return None
        except ApiError as e:
            if e.reason != "NotFound":
                raise
        if req.action == "probe":
            rc, out, err = probe(self.node, self.journal_dir, self.inventory, req.run_id)
        else:
            argv = node_argv(req, self.node, self.inventory, self.journal_dir, self.sysroot)
            try:
                p = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s)
                rc, out, err = p.returncode, p.stdout, p.stderr
            except subprocess.TimeoutExpired:
                rc, out, err = 4, "", f"fabtune: error: fabtune node {req.action} did not end within {self.timeout_s:.0f} s"
        self.api.create(cm_path(self.namespace), result_configmap(req, self.node, self.namespace, rc, out, err))
        self.done.add((req.run_id, req.name))
        return name

    def serve(self, poll_s: float, say=print) -> None:
        """Poll every ``poll_s`` seconds, forever; an error is said (``say``) and the next poll goes on."""
        while True:
            try:
                name = self.step()
                if name:
                    say(f"fabtune-agent {self.node}: answered {name}")
            except Exception as e:  # noqa: BLE001 - an agent outlives one bad request or API hiccup; said, never hidden
                say(f"fabtune-agent {self.node}: error: {e}")
            time.sleep(poll_s)
