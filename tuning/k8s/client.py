"""A batch's node holds through the NVIDIA Maintenance Operator, over :class:`tuning.k8s.api.Api`:
the decisions of :mod:`tuning.k8s.maintenance` sent, and every write read back (a GET after it:
the object must hold what was written, else :class:`HoldError`).

Paths (the CRD: group ``maintenance.nvidia.com``, version ``v1alpha1``, plural ``nodemaintenances``,
namespaced, ``status`` subresource)::

    GET    /apis/maintenance.nvidia.com/v1alpha1/nodemaintenances              (every namespace, once a batch)
    POST   /apis/maintenance.nvidia.com/v1alpha1/namespaces/NS/nodemaintenances
    GET|PUT|DELETE .../namespaces/NS/nodemaintenances/NAME
    PUT    .../namespaces/NS/nodemaintenances/NAME/status                     (RequestorFailed)

The list is filtered here, not with ``fieldSelector=spec.nodeName=...`` (the CRD declares it
selectable, but CRD field selectors need Kubernetes 1.31 or later). A join or leave that meets a
409 Conflict (another requestor updated the list meanwhile) reads the object again and retries, at
most :data:`RETRIES` times, as the CRD asks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from tuning.errors import TuningError
from tuning.k8s import maintenance as nm
from tuning.k8s.api import Api, ApiError

RETRIES = 3
BASE = f"/apis/{nm.GROUP}/{nm.VERSION}"


class HoldError(TuningError):
    """A hold could not be taken, reported or ended (names the object and what the API said)."""


@dataclass
class Held:
    """One node's hold: the object as last read, and whether fabtune created it (else joined it)."""

    node: str
    obj: dict
    created: bool


@dataclass
class Holds:
    """A batch's holds: ``held`` (node -> Held), ``refused`` (node -> why: another fabtune run's
    object, one being deleted, an API refusal), ``not_ready`` (node -> the last Ready reason)."""

    held: dict[str, Held] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    not_ready: dict[str, str] = field(default_factory=dict)


def path(namespace: str, name: str = "", sub: str = "") -> str:
    """The path of a NodeMaintenance (or the namespace's collection when ``name`` is '')."""
    return "/".join(p for p in (f"{BASE}/namespaces/{namespace}/{nm.PLURAL}", name, sub) if p)


def obj_path(obj: dict, sub: str = "") -> str:
    """The path of the object ``obj`` (its namespace and name)."""
    return path(obj["metadata"]["namespace"], obj["metadata"]["name"], sub)


class MaintenanceClient:
    """Holds of run ``run_id`` in ``namespace`` through ``api`` (module docstring)."""

    def __init__(self, api: Api, run_id: str, namespace: str, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.api, self.run_id, self.namespace = api, run_id, namespace
        self.clock, self.sleep = clock, sleep

    def preview(self, nodes: list[str]) -> dict[str, nm.Decision]:
        """What :meth:`hold` would do for each node (:func:`tuning.k8s.maintenance.decide`), from one
        list of every namespace's objects; reads only (the dry path)."""
        by_node: dict[str, list[dict]] = {}
        for o in self.api.get(f"{BASE}/{nm.PLURAL}").get("items") or []:
            by_node.setdefault(o.get("spec", {}).get("nodeName"), []).append(o)
        return {node: nm.decide(by_node.get(node, []), self.run_id, node, self.namespace) for node in nodes}

    def hold(self, nodes: list[str], decisions: dict[str, nm.Decision] | None = None) -> Holds:
        """Create or join one NodeMaintenance per node as :meth:`preview` decides (or as ``decisions``,
        its answer read before, say to journal each object before it is written). A refusal of one
        node is kept in ``refused``; the others go on."""
        out = Holds()
        for node, d in (self.preview(nodes) if decisions is None else decisions).items():
            try:
                if d.action == "refuse":
                    out.refused[node] = d.why
                elif d.action == "have":
                    out.held[node] = Held(node, self._read(d.body), nm.owned(d.body))
                elif d.action == "create":
                    out.held[node] = Held(node, self._create(d.body), True)
                else:
                    out.held[node] = Held(node, self._join(d.body), False)
            except (ApiError, HoldError) as e:
                out.refused[node] = str(e)
        return out

    def wait_ready(self, holds: Holds, timeout_s: float, poll_s: float = 2.0) -> Holds:
        """Poll each held object until the operator marks it Ready (:func:`tuning.k8s.maintenance.is_ready`);
        a node not Ready by ``timeout_s`` moves to ``not_ready`` with its last reason. Returns ``holds``."""
        deadline = self.clock() + timeout_s
        waiting = set(holds.held)
        while waiting:
            for node in sorted(waiting):
                h = holds.held[node]
                try:
                    h.obj = self.api.get(obj_path(h.obj))
                except ApiError as e:
                    if e.reason != "NotFound":
                        raise
                    holds.not_ready[node] = "deleted by someone else before it was Ready"
                    waiting.discard(node)
                    continue
                if nm.is_ready(h.obj):
                    waiting.discard(node)
            if waiting and self.clock() >= deadline:
                for node in waiting:
                    holds.not_ready[node] = nm.ready_reason(holds.held[node].obj) or "no Ready condition yet"
                return holds
            if waiting:
                self.sleep(poll_s)
        return holds

    def fail(self, held: Held, message: str) -> dict:
        """Report a failed maintenance on ``held`` (:func:`tuning.k8s.maintenance.mark_failed`), read back."""
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

        def write(obj: dict) -> dict:
            kind, body = nm.mark_failed(obj, f"fabtune run {self.run_id}: {message}", now)
            return self.api.replace(obj_path(body, "status" if kind == "status" else ""), body)

        held.obj = self._retry(held.obj, write, nm.failed, "report the failure on")
        return held.obj

    def release(self, held: Held) -> None:
        """End the hold (:func:`tuning.k8s.maintenance.leave`): delete fabtune's own object (read back:
        gone, or marked for deletion while the operator's finalizer uncordons), or leave a joined one."""
        kind, _ = nm.leave(held.obj)
        if kind == "delete":
            try:
                self.api.delete(obj_path(held.obj))
                back = self.api.get(obj_path(held.obj))
            except ApiError as e:
                if e.reason == "NotFound":
                    return
                raise HoldError(f"release {_name(held.obj)}: {e}", host=held.node, phase="k8s") from e
            if not back["metadata"].get("deletionTimestamp"):
                raise HoldError(f"release {_name(held.obj)}: still there and not being deleted", host=held.node)
            return
        if kind == "update":  # the owner may have deleted it meanwhile: gone once fabtune left is done
            try:
                held.obj = self._retry(held.obj, lambda o: self.api.replace(obj_path(o), nm.leave(o)[1]),
                                       lambda o: not nm.joined(o), "leave")
            except ApiError as e:
                if e.reason != "NotFound":
                    raise HoldError(f"leave {_name(held.obj)}: {e}", host=held.node, phase="k8s") from e

    def _create(self, body: dict) -> dict:
        self.api.create(path(self.namespace), body)
        back = self._read(body)
        if not nm.owned(back) or back["spec"].get("nodeName") != body["spec"]["nodeName"]:
            raise HoldError(f"created {_name(body)} but it reads back as {back['spec']}", phase="k8s")
        return back

    def _join(self, body: dict) -> dict:
        return self._retry(body, lambda o: self.api.replace(obj_path(o), nm.with_requestor(o)), nm.joined, "join")

    def _retry(self, obj: dict, write: Callable[[dict], dict], done: Callable[[dict], bool], what: str) -> dict:
        """``write(obj)`` then read back until ``done``; a 409 Conflict reads the object again and retries.
        Raises ApiError (any other refusal), HoldError (still not done after :data:`RETRIES` tries)."""
        current = obj
        for _ in range(RETRIES):
            try:
                write(current)
            except ApiError as e:
                if e.reason != "Conflict":
                    raise
            current = self._read(current)
            if done(current):
                return current
        raise HoldError(f"{what} {_name(obj)}: not done after {RETRIES} tries (conflicting updates)", phase="k8s")

    def _read(self, obj: dict) -> dict:
        return self.api.get(obj_path(obj))


def _name(obj: dict) -> str:
    return f"NodeMaintenance {obj['metadata'].get('namespace')}/{obj['metadata']['name']}"
