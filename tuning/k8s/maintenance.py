"""NodeMaintenance objects of the NVIDIA Maintenance Operator and the decisions fabtune takes on
them; pure (no I/O): :mod:`tuning.k8s.client` sends what these return.

Source of every field and word: Mellanox/maintenance-operator, ``api/v1alpha1/nodemaintenance_types.go``
and the CRD ``config/crd/bases/maintenance.nvidia.com_nodemaintenances.yaml`` (copied unedited, with its
commit, in ``tuning/lab/schemas/``, which the lab API server validates against), ``internal/controller/nodemaintenance_controller.go``
``handleTerminalState`` and the README's state diagram.

- One object per node per batch, in the namespace fabtune is given, named
  ``fabtune-<run id>-<node>`` (:func:`object_name`), ``spec.requestorID`` :data:`REQUESTOR_ID`
  (``fabtune.io``: domain-name notation, 2..63 characters, the CRD's pattern; the same domain as
  burn-in's taint ``fabtune.io/unhealthy``), ``spec.nodeName`` the inventory name (Kubernetes node
  names are DNS subdomains: :func:`check_node_name`), ``cordon: true`` and a ``drainSpec`` that evicts
  every pod but DaemonSets (the operator's default when no filter is given: Slurm's ``--exclusive``,
  no job beside the change), ``force: false`` (a pod without a controller stops the drain rather than
  being lost), the CRD's default timeout of 300 s. The run id is the annotation :data:`RUN_ANNOTATION`.
- A node that already has a NodeMaintenance of another requestor is joined: ``fabtune.io`` added to
  its ``spec.additionalRequestors`` by an update that replaces the list (the CRD's own words: "MUST be
  made with update operation (and retry on failure)"), never a second object (:func:`decide`). The
  operator uncordons a deleted object only once that list is empty, so neither requestor ends the
  other's hold.
- Release (:func:`leave`): fabtune's own object is deleted; on a joined one fabtune removes itself
  from ``additionalRequestors`` and leaves the object to its owner.
- A failed verification (:func:`mark_failed`): on fabtune's own object the status condition
  ``RequestorFailed`` (status ``True``, reason ``FailedMaintenance``: "maintenance operation failed in a
  non-recoverable way"), which the operator turns into the Ready reason ``RequestorFailed``; the object
  is kept (the node stays cordoned) until a person deletes it ("RequestorFailed condition cleared by
  requestor or external user, object marked for deletion"). On a joined object the condition would be
  the owner's too, so fabtune writes the annotation :data:`FAILED_ANNOTATION` instead and stays an
  additional requestor: the node stays cordoned after the owner leaves.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

from tuning.errors import InputError

GROUP, VERSION, PLURAL, KIND = "maintenance.nvidia.com", "v1alpha1", "nodemaintenances", "NodeMaintenance"
API_VERSION = f"{GROUP}/{VERSION}"
#: fabtune's requestor id (module docstring)
REQUESTOR_ID = "fabtune.io"
RUN_ANNOTATION = "fabtune.io/run-id"
FAILED_ANNOTATION = "fabtune.io/requestor-failed"
MANAGED_BY = {"app.kubernetes.io/managed-by": "fabtune"}
#: condition types and reasons (nodemaintenance_types.go)
READY, REQUESTOR_FAILED, FAILED_REASON = "Ready", "RequestorFailed", "FailedMaintenance"
#: the Ready reasons in the order the operator moves through them
READY_REASONS = ("Pending", "Scheduled", "Cordon", "WaitForPodCompletion", "Draining", "Ready", "RequestorFailed")
DRAIN_TIMEOUT_S = 300  # the CRD's default drainSpec.timeoutSeconds
MESSAGE_MAX = 32768  # a condition message's maxLength in the CRD
#: a DNS subdomain (RFC 1123), as Kubernetes checks object and node names: at most 253 characters
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def check_node_name(node: str) -> str:
    """``node`` as a Kubernetes node name (a lowercase DNS subdomain, 253 characters at most).

    Raises:
        InputError: not one (names the node; an inventory of upper-case names cannot be a cluster's).
    """
    if len(node) > 253 or not _SUBDOMAIN.fullmatch(node):
        raise InputError("inventory", node, "not a Kubernetes node name: allowed a DNS subdomain (RFC 1123): "
                         "lowercase letters, digits, '-' and '.', starting and ending with a letter or digit")
    return node


def object_name(run_id: str, node: str) -> str:
    """``fabtune-<run id>-<node>`` lowercased, every character outside ``[a-z0-9]`` a ``-`` (object
    names are DNS subdomains; run ids may hold ``_`` and upper case), e.g.
    ``fabtune-20261203t1500-ab12-node01``."""
    return re.sub(r"[^a-z0-9]", "-", f"fabtune-{run_id}-{node}".lower())[:253].rstrip("-")


def new(run_id: str, node: str, namespace: str) -> dict:
    """A NodeMaintenance for ``node`` of run ``run_id`` (module docstring), as the API takes it."""
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": object_name(run_id, node), "namespace": namespace, "labels": dict(MANAGED_BY),
                         "annotations": {RUN_ANNOTATION: run_id}},
            "spec": {"requestorID": REQUESTOR_ID, "nodeName": check_node_name(node), "cordon": True,
                     "drainSpec": {"force": False, "deleteEmptyDir": False, "timeoutSeconds": DRAIN_TIMEOUT_S}}}


def ready_reason(obj: dict) -> str:
    """The reason of the object's ``Ready`` condition ('' while the operator has not set one)."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == READY:
            return str(c.get("reason") or "")
    return ""


def is_ready(obj: dict) -> bool:
    """Whether the operator holds the node for maintenance: ``Ready`` condition ``True`` with reason
    ``Ready`` (a ``RequestorFailed`` reason is a failed maintenance, not one to work in)."""
    return any(c.get("type") == READY and c.get("status") == "True" and c.get("reason") == READY
               for c in (obj.get("status") or {}).get("conditions") or [])


def owned(obj: dict) -> bool:
    """Whether fabtune created the object (its ``spec.requestorID`` is :data:`REQUESTOR_ID`)."""
    return obj.get("spec", {}).get("requestorID") == REQUESTOR_ID


def joined(obj: dict) -> bool:
    """Whether fabtune is among the object's ``spec.additionalRequestors``."""
    return REQUESTOR_ID in (obj.get("spec", {}).get("additionalRequestors") or [])


@dataclass(frozen=True)
class Decision:
    """What to do for one node: ``action`` create | join | have (already ours) | refuse; ``body`` the
    object to POST (create) or PUT (join), or the one already held (have); ``why`` for refuse."""

    action: str
    body: dict | None = None
    why: str = ""


def decide(existing: list[dict], run_id: str, node: str, namespace: str) -> Decision:
    """What fabtune does for ``node`` given the NodeMaintenance objects naming it (``existing``, any
    namespace): create one when there is none; ``have`` when this run already holds it (created or
    joined); refuse another fabtune run's object (a failed one waits for a person) and an object being
    deleted; else join the oldest object of another requestor. Pure."""
    mine = [o for o in existing if owned(o)]
    for o in mine:
        run = (o["metadata"].get("annotations") or {}).get(RUN_ANNOTATION, "?")
        if run != run_id:
            return Decision("refuse", why=f"NodeMaintenance {_ref(o)} of fabtune run {run} (Ready reason "
                                          f"{ready_reason(o) or 'unset'}) holds {node}: left alone")
        return Decision("have", o)
    others = sorted(existing, key=lambda o: (o["metadata"].get("creationTimestamp", ""), o["metadata"]["name"]))
    if not others:
        return Decision("create", new(run_id, node, namespace))
    if any(joined(o) for o in others):
        return Decision("have", next(o for o in others if joined(o)))
    first = others[0]
    if first["metadata"].get("deletionTimestamp"):
        return Decision("refuse", why=f"NodeMaintenance {_ref(first)} of {first['spec'].get('requestorID')} "
                                      f"on {node} is being deleted: try again once it is gone")
    return Decision("join", with_requestor(first))


def with_requestor(obj: dict) -> dict:
    """A copy of ``obj`` with :data:`REQUESTOR_ID` appended to ``spec.additionalRequestors`` (unchanged
    when it is there): the body of the update that joins (its ``resourceVersion`` kept, so a list
    changed meanwhile is a 409 Conflict, never lost)."""
    body = copy.deepcopy(obj)
    if not joined(obj):
        body["spec"]["additionalRequestors"] = [*(obj["spec"].get("additionalRequestors") or []), REQUESTOR_ID]
    return body


def leave(obj: dict) -> tuple[str, dict | None]:
    """How fabtune ends its hold on ``obj``: ``("delete", None)`` for its own object, ``("update",
    body)`` with fabtune out of ``additionalRequestors`` for a joined one, ``("none", None)`` when
    fabtune is not on it."""
    if owned(obj):
        return "delete", None
    if not joined(obj):
        return "none", None
    body = copy.deepcopy(obj)
    body["spec"]["additionalRequestors"] = [r for r in obj["spec"]["additionalRequestors"] if r != REQUESTOR_ID]
    return "update", body


def mark_failed(obj: dict, message: str, now: str) -> tuple[str, dict]:
    """The write that reports a failed maintenance on ``obj`` (module docstring): ``("status", body)``
    with the ``RequestorFailed`` condition set (replacing an earlier one; ``now`` RFC 3339, e.g.
    ``2026-12-03T21:46:37Z``) for fabtune's own object, ``("update", body)`` with the annotation
    :data:`FAILED_ANNOTATION` for a joined one. ``message`` is cut to :data:`MESSAGE_MAX`."""
    body = copy.deepcopy(obj)
    text = message[:MESSAGE_MAX]
    if not owned(obj):
        body["metadata"].setdefault("annotations", {})[FAILED_ANNOTATION] = text
        return "update", body
    cond = {"type": REQUESTOR_FAILED, "status": "True", "reason": FAILED_REASON, "message": text,
            "lastTransitionTime": now}
    if "generation" in obj["metadata"]:
        cond["observedGeneration"] = obj["metadata"]["generation"]
    status = body.setdefault("status", {})
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != REQUESTOR_FAILED] + [cond]
    return "status", body


def failed(obj: dict) -> bool:
    """Whether fabtune's failure is recorded on ``obj`` (the condition on its own, the annotation on a joined one)."""
    if owned(obj):
        return any(c.get("type") == REQUESTOR_FAILED and c.get("status") == "True"
                   for c in (obj.get("status") or {}).get("conditions") or [])
    return FAILED_ANNOTATION in (obj["metadata"].get("annotations") or {})


def _ref(obj: dict) -> str:
    return f"{obj['metadata'].get('namespace', '?')}/{obj['metadata']['name']}"
