"""Drain the nodes a burn-in found bad, and resume them after a clean re-test: Slurm and Kubernetes.

Which nodes (:func:`plan`): the node of every ``node`` finding and the node at the NIC end of
every ``link`` finding (its jobs use that cable), most severe first (node findings in
:data:`tuning.burnin.localise.NODE_CODES` order, then links); switch findings drain nothing (a
congested switch is not a node's fault and would take many nodes). At most ``max_drain`` nodes
per run (default 1); the others are named as over the cap, and the run says so (``capped``).

Dry run by default: the exact commands (Slurm) or API calls (Kubernetes) are written to the log
and returned, nothing is changed. Every node name passes the inventory grammar
(:func:`tuning.model.grammar.check_host_name`) before it reaches a command line or an API path.

Slurm (``scontrol``, Slurm's ``scontrol(1)``; run from PATH as an argument vector, no shell)::

    scontrol update NodeName=node03 State=DRAIN "Reason=fabtune:RUN_ID: gpu-xid node03: GPU 3 ... XID 79"
    scontrol update NodeName=node03 State=RESUME
    scontrol show node node03          # the current Reason= line, see :func:`reason_of_scontrol`

Kubernetes (the ``kubernetes`` Python client, an optional dependency: ``pip install 'fabtune[kubernetes]'``;
only needed to act): cordon (``spec.unschedulable: true``), taint
``fabtune.io/unhealthy=<code>:NoSchedule`` and the reason in the annotation ``fabtune.io/reason``,
all in one ``PATCH /api/v1/nodes/<name>`` (``CoreV1Api.patch_node``, strategic merge); resume
removes the three.

Drain (acting) reads each node's current reason first and leaves alone a node that has one not
starting with :data:`REASON_PREFIX` (``fabtune:``): someone else drained it (or Slurm set it down), and ``scontrol update
State=DRAIN Reason=...`` on a drained node replaces its reason (checked against Slurm 22.05's
slurmctld), so the other owner's reason would be lost and a later undrain would resume their node.
Undrain (:func:`undrain`): only nodes whose current reason starts with ``fabtune:`` (fabtune
drained them) and that passed a re-test; any other reason is an operator's and is left alone.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tuning.errors import InputError, TuningError
from tuning.model.grammar import check_host_name
from tuning.outfile import append

#: every reason fabtune writes starts with this (burn-in, a rollout's batch hold in
#: :mod:`tuning.slurm_engine`): ``fabtune:RUN_ID: ...``, issue 23's form; undrain touches only such nodes
REASON_PREFIX = "fabtune:"
#: longest reason written (Slurm keeps any length; long reasons wrap badly in ``sinfo -R``)
REASON_MAX = 200
TAINT_KEY = "fabtune.io/unhealthy"
REASON_ANNOTATION = "fabtune.io/reason"
ADAPTERS = ("slurm", "k8s")


class DrainError(TuningError):
    """A drain or resume could not be done (the tool failed, or a client library is missing)."""


def reason(run_id: str, text: str) -> str:
    """``fabtune:RUN_ID: TEXT`` (:data:`REASON_PREFIX`), the one form of every drain reason fabtune
    writes, made safe for any text: one line of printable ASCII without quotes or backslashes (each
    replaced by a space), at most :data:`REASON_MAX` characters. Passed as one argument (no shell),
    so nothing in it is interpreted."""
    raw = f"{REASON_PREFIX}{run_id}: {text}"
    safe = "".join(c if " " <= c <= "~" and c not in "\"'\\`$" else " " for c in raw)
    return " ".join(safe.split())[:REASON_MAX]


def reason_text(run_id: str, finding: dict) -> str:
    """A burn-in finding's drain reason: ``fabtune:RUN_ID: CODE MESSAGE`` (:func:`reason`)."""
    return reason(run_id, f"{finding['code']} {finding.get('message', '')}")


def node_of(finding: dict) -> str | None:
    """The node a finding drains: its target (``node``), the node of its NIC end (``link``,
    ``node03:mlx5_2<->leaf01:swp10``), None for a switch."""
    if finding["kind"] == "node":
        return finding["target"]
    if finding["kind"] == "link":
        return finding["target"].split("<->")[0].split(":")[0]
    return None


@dataclass
class Plan:
    """Nodes to drain (within the cap) and over it, each ``(node, finding)``, in severity order."""

    drain: list[tuple[str, dict]] = field(default_factory=list)
    over_cap: list[tuple[str, dict]] = field(default_factory=list)


def plan(findings: list[dict], max_drain: int = 1) -> Plan:
    """Which nodes to drain (module docstring).

    Raises:
        InputError: ``max_drain`` below 0, or a node name outside the inventory grammar.
    """
    from tuning.burnin.localise import LINK_CODES, NODE_CODES

    if max_drain < 0:
        raise InputError("--max-drain", str(max_drain), "allowed: 0 or more nodes")
    order = {c: i for i, c in enumerate(NODE_CODES + LINK_CODES)}
    out, seen = Plan(), set()
    for f in sorted(findings, key=lambda f: (f["kind"] != "node", order.get(f["code"], 99), f["target"])):
        node = node_of(f)
        if node is None or node in seen:
            continue
        try:
            check_host_name(node)
        except ValueError as e:
            raise InputError("finding target", node, str(e)) from e
        seen.add(node)
        (out.drain if len(out.drain) < max_drain else out.over_cap).append((node, f))
    return out


class Slurm:
    """``scontrol`` from PATH (module docstring); ``runner(argv) -> (rc, stdout, stderr)``."""

    name = "slurm"

    def __init__(self, runner=None):
        self.runner = runner or _run

    def drain_calls(self, node: str, reason: str, code: str) -> list[list[str]]:
        """``[["scontrol", "update", "NodeName=node03", "State=DRAIN", "Reason=fabtune:RUN_ID: ..."]]``."""
        return [["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"]]

    def resume_calls(self, node: str) -> list[list[str]]:
        """``[["scontrol", "update", "NodeName=node03", "State=RESUME"]]``."""
        return [["scontrol", "update", f"NodeName={node}", "State=RESUME"]]

    def call(self, argv: list[str]) -> None:
        """Run one command. Raises DrainError on a nonzero exit (its stderr in the message)."""
        rc, out, err = self.runner(argv)
        if rc != 0:
            raise DrainError(f"{shlex.join(argv)}: exit {rc}: {_said(out, err)}", host=argv[2].split("=", 1)[1],
                             phase="drain")

    def reason(self, node: str) -> str | None:
        """The node's current Reason (``scontrol show node NODE``), None when it has none."""
        rc, out, err = self.runner(["scontrol", "show", "node", node])
        if rc != 0:
            raise DrainError(f"scontrol show node {node}: exit {rc}: {_said(out, err)}", host=node, phase="drain")
        return reason_of_scontrol(out)

    @staticmethod
    def show(argv: list[str]) -> str:
        """The log line of one call: the shell-quoted command."""
        return shlex.join(argv)


def reason_of_scontrol(text: str) -> str | None:
    """The Reason of ``scontrol show node`` output: its ``Reason=`` field runs to the end of its
    line, followed by `` [user@time]`` when Slurm knows who set it (Slurm ``src/api/node_info.c``
    ``slurm_sprint_node_table``: ``"Reason=%s [%s@%s]"``); None without a Reason field or with
    ``Reason=(null)``."""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Reason="):
            value = line[len("Reason="):]
            if value.endswith("]") and " [" in value:
                value = value[:value.rindex(" [")]
            return None if value in ("", "(null)") else value
    return None


def _said(out: str, err: str) -> str:
    """What a failed scontrol said, on one line: stderr, else stdout (``scontrol show node X``
    prints "Node X not found" on stdout)."""
    return " ".join((err.strip() or out.strip()).split())[-300:]


def _run(argv: list[str]) -> tuple[int, str, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except FileNotFoundError as e:
        raise DrainError(f"{argv[0]}: not found on PATH (the Slurm client tools are needed to act)",
                         phase="drain") from e
    return p.returncode, p.stdout, p.stderr


class Kubernetes:
    """Cordon and taint through the Kubernetes API (module docstring). ``api``: a
    ``kubernetes.client.CoreV1Api``; made from the kubeconfig (or in-cluster config) when acting."""

    name = "k8s"

    def __init__(self, api=None):
        self._api = api

    @property
    def api(self):
        """The CoreV1Api. Raises DrainError when the kubernetes client is not installed."""
        if self._api is None:
            try:
                from kubernetes import client, config
            except ImportError as e:
                raise DrainError("the k8s drain adapter needs the kubernetes Python client: pip install 'fabtune[kubernetes]'",
                                 phase="drain") from e
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            self._api = client.CoreV1Api()
        return self._api

    def drain_calls(self, node: str, reason: str, code: str) -> list[dict]:
        """One PATCH: cordon, add the taint (kept beside the node's other taints), annotate."""
        taint = {"key": TAINT_KEY, "value": code, "effect": "NoSchedule"}
        return [{"method": "PATCH", "path": f"/api/v1/nodes/{node}", "node": node,
                 "body": {"metadata": {"annotations": {REASON_ANNOTATION: reason}},
                          "spec": {"unschedulable": True, "taints": [taint]}}}]

    def resume_calls(self, node: str) -> list[dict]:
        """One PATCH: uncordon, drop the fabtune taint and annotation."""
        return [{"method": "PATCH", "path": f"/api/v1/nodes/{node}", "node": node,
                 "body": {"metadata": {"annotations": {REASON_ANNOTATION: None}},
                          "spec": {"unschedulable": False, "taints": []}}}]

    def call(self, req: dict) -> None:
        """Send one PATCH, merging the taint list with the node's current taints (a strategic
        merge would replace the list). Raises DrainError when the API refuses."""
        api = self.api
        try:
            current = api.read_node(req["node"]).spec.taints or []
            others = [_taint_dict(t) for t in current if _taint_dict(t)["key"] != TAINT_KEY]
            body = json.loads(json.dumps(req["body"]))
            body["spec"]["taints"] = others + body["spec"]["taints"]
            api.patch_node(req["node"], body)
        except Exception as e:  # kubernetes.client.ApiException and transport errors
            raise DrainError(f"PATCH {req['path']}: {e}".splitlines()[0][:300], host=req["node"], phase="drain") from e

    def reason(self, node: str) -> str | None:
        """The ``fabtune.io/reason`` annotation of the node, None without one."""
        try:
            meta = self.api.read_node(node).metadata
        except DrainError:
            raise
        except Exception as e:
            raise DrainError(f"GET /api/v1/nodes/{node}: {e}".splitlines()[0][:300], host=node, phase="drain") from e
        return (meta.annotations or {}).get(REASON_ANNOTATION)

    @staticmethod
    def show(req: dict) -> str:
        """The log line of one call: ``PATCH /api/v1/nodes/node03 {json body}``."""
        return f"{req['method']} {req['path']} {json.dumps(req['body'], sort_keys=True)}"


def _taint_dict(t) -> dict:
    if isinstance(t, dict):
        return t
    return {k: getattr(t, k) for k in ("key", "value", "effect") if getattr(t, k, None) is not None}


def adapter(name: str, **kw):
    """The adapter called ``name`` (:data:`ADAPTERS`). Raises InputError for another name."""
    if name == "slurm":
        return Slurm(**kw)
    if name == "k8s":
        return Kubernetes(**kw)
    raise InputError("--drain-adapter", name, f"allowed: {', '.join(ADAPTERS)}")


def _log(log: Path | None, lines: list[str]) -> None:
    if log is not None and lines:
        log.parent.mkdir(parents=True, exist_ok=True)
        append(log, "".join(line + "\n" for line in lines))  # never through a link or onto a FIFO


def _apply(ad, node: str, calls: list, act: bool, out: dict, lines: list[str]) -> bool:
    """Log ``calls`` (into ``lines`` and ``out["calls"]``) and, when ``act``, make them; a failure
    goes to ``out["failed"][node]``. Returns whether every call was made (or logged, in a dry run)."""
    for c in calls:
        lines.append(ad.show(c))
        out["calls"].append(ad.show(c))
        if act:
            try:
                ad.call(c)
            except DrainError as e:
                out["failed"][node] = str(e)
                return False
    return True


def drain(findings: list[dict], run_id: str, adapter_name: str = "slurm", act: bool = False, max_drain: int = 1,
          log: Path | None = None, backend=None, ours: str = REASON_PREFIX) -> dict:
    """Drain the planned nodes (:func:`plan`), or in a dry run only write what would be done.

    Args:
        act: False (default): dry run.  backend: an adapter object (tests, or a configured client).
        ours: a node already drained is drained again (its reason replaced) only when its reason
            starts with this (default :data:`REASON_PREFIX`; a health check passes ``fabtune:health-``
            so that a rollout's batch hold keeps its reason).
        log: file the commands / API calls are appended to, one per line, ``# ``-comments naming
            the dry run, each node's finding and the nodes over the cap.

    Returns:
        ``{"adapter": "slurm", "dry_run": True, "drained": ["node03"], "over_cap": ["node05"],
        "capped": True, "calls": ["scontrol update NodeName=node03 State=DRAIN 'Reason=...'"],
        "left": {"node04": "drained by someone else: reason 'bad DIMM' is not fabtune's"},
        "failed": {node: "one line"}}``; ``capped`` is True when nodes were left over the cap
        (the caller exits nonzero); ``left`` is filled only when acting (a dry run reads nothing).

    Raises:
        InputError: an unknown adapter, ``max_drain`` below 0, a node name outside the grammar.
    """
    ad = backend or adapter(adapter_name)
    p = plan(findings, max_drain)
    lines = [f"# fabtune {run_id}: {'dry run, nothing changed' if not act else 'draining'} ({ad.name}, "
             f"cap {max_drain})"]
    out = {"adapter": ad.name, "dry_run": not act, "drained": [], "over_cap": [n for n, _ in p.over_cap],
           "capped": bool(p.over_cap), "calls": [], "left": {}, "failed": {}}
    for node, f in p.drain:
        lines.append(f"# {node}: {f['code']} ({f['target']})")
        if act and not _ours_or_free(ad, node, out, lines, ours):
            continue
        if _apply(ad, node, ad.drain_calls(node, reason_text(run_id, f), f["code"]), act, out, lines):
            out["drained"].append(node)
    for node, f in p.over_cap:
        lines.append(f"# over the cap of {max_drain}, not drained: {node}: {f['code']} ({f['target']})")
    _log(log, lines)
    return out


def _ours_or_free(ad, node: str, out: dict, lines: list[str], ours: str = REASON_PREFIX) -> bool:
    """Whether ``node`` may be drained: no current reason, or one starting with ``ours`` (fabtune's).
    Otherwise the node goes to ``out["left"]`` (or ``out["failed"]`` when its reason cannot be read)."""
    try:
        why = ad.reason(node)
    except DrainError as e:
        out["failed"][node] = str(e)
        return False
    if why and not why.startswith(ours):
        out["left"][node] = (f"drained by someone else: reason {why!r} is not fabtune's"
                             if not why.startswith(REASON_PREFIX) else f"drained by another fabtune run: {why!r}")
        lines.append(f"# {node}: left alone: {out['left'][node]}")
        return False
    return True


#: the reasons of fabtune's checks (burn-in, health): what a later clean check may resume; a
#: rollout's batch hold (``fabtune:RUN_ID: rollout batch K/N``) is its own run's to end
CHECK_PREFIXES = (f"{REASON_PREFIX}burnin-", f"{REASON_PREFIX}health-")


def undrain(passed: list[str], adapter_name: str = "slurm", act: bool = False, log: Path | None = None,
            backend=None, prefix: str | tuple[str, ...] = REASON_PREFIX) -> dict:
    """Resume the nodes of ``passed`` (a clean re-test) that fabtune drained (reason starts with
    ``prefix``, one string or a tuple: :data:`REASON_PREFIX`, :data:`CHECK_PREFIXES` for burn-in's
    undrain, or a narrower ``fabtune:health-`` for the drains of health checks alone); the current
    reason is read in a dry run too.

    Returns:
        ``{"adapter": "slurm", "dry_run": True, "resumed": ["node03"], "left": {"node04":
        "reason 'bad DIMM' is not fabtune's"}, "calls": [...], "failed": {}}``.

    Raises:
        InputError: a node name outside the inventory grammar.
    """
    ad = backend or adapter(adapter_name)
    out = {"adapter": ad.name, "dry_run": not act, "resumed": [], "left": {}, "calls": [], "failed": {}}
    lines = [f"# fabtune undrain: {'dry run, nothing changed' if not act else 'resuming'} ({ad.name})"]
    for node in passed:
        try:
            check_host_name(node)
        except ValueError as e:
            raise InputError("node", node, str(e)) from e
        try:
            why = ad.reason(node)
        except DrainError as e:
            out["failed"][node] = str(e)
            continue
        if not why or not why.startswith(prefix):
            kinds = " or ".join(f"{p}..." for p in ((prefix,) if isinstance(prefix, str) else prefix))
            out["left"][node] = (f"reason {why!r} is not fabtune's" if not why.startswith(REASON_PREFIX) else
                                 f"reason {why!r} is not a {kinds} drain") if why else "not drained"
            lines.append(f"# {node}: left alone: {out['left'][node]}")
            continue
        if _apply(ad, node, ad.resume_calls(node), act, out, lines):
            out["resumed"].append(node)
    _log(log, lines)
    return out
