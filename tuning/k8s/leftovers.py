"""What a Kubernetes rollout (``--engine k8s``, :mod:`tuning.k8s.engine`) holds on the cluster,
journaled while it lasts, and ended by ``fabtune rollback`` after a controller that was killed.

The run's journal keeps ``k8s: {"namespace": NS, "holds": {NODE: {"name": OBJECT, "created":
BOOL, "namespace": NS}}, "configmaps": [NAME, ...]}`` (a hold's namespace is its object's: another
requestor's object that fabtune joined lives in its owner's; absent, the run's): each node's NodeMaintenance from the moment fabtune created or
joined it until its hold ends (released, or marked failed and kept for a person: then it is a
person's, and leaves the journal), and every ConfigMap the run made (``fabtune-plan`` and the
agents' answers) until the run deleted them. A controller killed in a batch (SIGKILL) leaves its
nodes cordoned and drained, and its ``fabtune-plan`` refuses the next run; ``fabtune rollback
RUN_ID``, once the nodes are restored, ends what the journal names (:func:`end_journaled`) through
the API server of ``$FABTUNE_K8S_SERVER`` (or the cluster it runs in), as the run reached it.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from tuning.errors import ConnectError, InputError
from tuning.k8s import agent as ag
from tuning.k8s import maintenance as nm
from tuning.k8s.api import ApiError, from_env
from tuning.k8s.client import Held, HoldError, MaintenanceClient, path
from tuning.rollout.journal import K8S_HOLDS_KEY

Progress = Callable[[str], None]

#: the journal key (module docstring)
JOURNAL_KEY = K8S_HOLDS_KEY
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _record(j, namespace: str) -> dict:
    """The journal's record of what the run holds (made empty for ``namespace`` if there is none)."""
    return j.data.setdefault(JOURNAL_KEY, {"namespace": namespace, "holds": {}, "configmaps": []})


def journal_holds(j, namespace: str, held: dict[str, Held]) -> None:
    """Journal each node's hold of ``held`` (node -> Held) and save."""
    if not held:
        return
    holds = _record(j, namespace)["holds"]
    for node, h in held.items():
        meta = h.obj["metadata"]
        holds[node] = {"name": meta["name"], "created": bool(h.created), "namespace": meta.get("namespace") or namespace}
    j.save()


def journal_decisions(j, namespace: str, decisions: dict[str, nm.Decision]) -> None:
    """Journal, before any is written, the object each node's hold will create, join or has
    (``decisions``: node -> :class:`tuning.k8s.maintenance.Decision`; refusals left out), and save:
    a controller killed between a write and :func:`journal_holds` leaves no hold unnamed (a joined
    object in its owner's namespace is found there; one not joined yet is left as it is)."""
    journal_holds(j, namespace, {n: Held(n, d.body, nm.owned(d.body)) for n, d in decisions.items()
                                 if d.action != "refuse"})


def journal_configmaps(j, namespace: str, names: list[str]) -> None:
    """Journal ConfigMaps the run is about to make (before they exist) and save."""
    cms = _record(j, namespace)["configmaps"]
    cms += [n for n in names if n not in cms]
    j.save()


def forget(j, nodes: list[str] = (), configmaps: list[str] = ()) -> None:
    """Drop ended holds and deleted ConfigMaps from the journal (the key goes with the last) and save."""
    rec = j.data.get(JOURNAL_KEY)
    if not rec:
        return
    for n in nodes:
        rec["holds"].pop(n, None)
    rec["configmaps"] = [c for c in rec["configmaps"] if c not in configmaps]
    if not rec["holds"] and not rec["configmaps"]:
        j.data.pop(JOURNAL_KEY)
    j.save()


def _checked(rec: object) -> tuple[str, dict[str, tuple[str, bool, str]], list[str]]:
    """``(namespace, {node: (object name, created, object namespace)}, configmaps)`` of a journal's record.

    Raises:
        InputError: a name outside its grammar (a DNS label / subdomain): nothing of an edited
            journal reaches an API path; a record of the wrong shape (holds not an object of
            node -> ``{"name": str, "created": bool}``, configmaps not a list).
    """
    def bad(key: str, value: object) -> InputError:
        return InputError("journal", f"{JOURNAL_KEY}.{key}", f"{str(value)[:60]!r} is not a Kubernetes name")

    if not isinstance(rec, dict) or not _LABEL.fullmatch(str(rec.get("namespace"))):
        raise bad("namespace", rec.get("namespace") if isinstance(rec, dict) else rec)
    held, listed = rec.get("holds") or {}, rec.get("configmaps") or []
    if not (isinstance(held, dict) and isinstance(listed, list)):
        raise InputError("journal", JOURNAL_KEY, "holds must be an object of node -> {name, created}, "
                         "configmaps a list of names")
    holds = {}
    for node, h in held.items():
        try:
            if not (isinstance(h, dict) and isinstance(h.get("name"), str) and isinstance(h.get("created"), bool)
                    and _LABEL.fullmatch(str(h.get("namespace", rec["namespace"])))):
                raise InputError("journal", node, "not {name, created, namespace}")
            nm.check_node_name(node)  # an object name: a DNS subdomain too
            holds[node] = (nm.check_node_name(h["name"]), h["created"], h.get("namespace", rec["namespace"]))
        except InputError:
            raise bad(f"holds.{node[:60]}", h) from None
    cms = []
    for c in listed:
        try:
            cms.append(nm.check_node_name(c if isinstance(c, str) else f"{c!r} (a {type(c).__name__})"))
        except InputError:
            raise bad("configmaps", c) from None
    return rec["namespace"], holds, cms


def end_journaled(j, progress: Progress) -> list[str]:
    """End what the journal ``j`` says the run still holds: each NodeMaintenance released as the run
    releases it (its own object deleted, the operator uncordons; a joined one left), fabtune's own
    object only when it is this run's; each ConfigMap deleted (``fabtune-plan`` only while it holds
    this run's request). What ended leaves the journal. Returns what failed, one line each.

    Raises:
        InputError: a journaled name outside its grammar (or a bad ``$FABTUNE_K8S_*``).
    """
    if not j.data.get(JOURNAL_KEY):
        return []
    namespace, holds, cms = _checked(j.data[JOURNAL_KEY])
    try:
        api, errors = from_env(), []
    except ConnectError as e:  # outside a pod without $FABTUNE_K8S_SERVER: all of it is left, said once
        return [f"$FABTUNE_K8S_SERVER is not set and {e}: export it (and $FABTUNE_K8S_TOKEN_FILE) as the run had them"]
    ended = _release(api, MaintenanceClient(api, j.run_id, namespace), j.run_id, holds, errors, progress)
    deleted = delete_configmaps(api, namespace, j.run_id, cms, errors)
    if deleted:
        progress(f"k8s: deleted the run's ConfigMaps in {namespace}: {', '.join(deleted)}")
    forget(j, ended, deleted)
    return errors


def _release(api, mc: MaintenanceClient, run_id: str, holds: dict[str, tuple[str, bool, str]], errors: list[str],
             progress: Progress) -> list[str]:
    """Release each journaled hold (node -> (object name, created, its namespace)) this run still has; the nodes
    whose hold is over (released, or gone already). A failure goes to ``errors``."""
    ended = []
    for node, (name, created, ns) in sorted(holds.items()):
        try:
            obj = api.get(path(ns, name))
            run = (obj["metadata"].get("annotations") or {}).get(nm.RUN_ANNOTATION)
            if nm.owned(obj) and run != run_id:
                errors.append(f"{node}: NodeMaintenance {ns}/{name} is run {run}'s, not this run's: left")
                continue
            mc.release(Held(node, obj, created))
            progress(f"k8s: {node} {'released' if nm.owned(obj) else 'left'} (NodeMaintenance {ns}/{name}) "
                     f"for run {run_id}")
            ended.append(node)
        except ApiError as e:
            (ended.append(node) if e.reason == "NotFound" else errors.append(f"{node}: hold not released: {e}"))
        except (HoldError, ConnectError) as e:
            errors.append(f"{node}: hold not released: {e}")
    return ended


def delete_configmaps(api, namespace: str, run_id: str, cms: list[str], errors: list[str]) -> list[str]:
    """Delete the journaled ConfigMaps (``fabtune-plan`` only while it is this run's request); the
    names that are gone now (deleted, gone already, or the plan another run's). A failure goes to ``errors``."""
    deleted = []
    for name in cms:
        try:
            if name == ag.PLAN_CM and (api.get(ag.cm_path(namespace, name)).get("data") or {}).get("run-id") != run_id:
                deleted.append(name)  # another run's request now: not this run's to delete
                continue
            api.delete(ag.cm_path(namespace, name))
            deleted.append(name)
        except ApiError as e:
            (deleted.append(name) if e.reason == "NotFound" else errors.append(f"ConfigMap {name} not deleted: {e}"))
        except ConnectError as e:
            errors.append(f"ConfigMap {name} not deleted: {e}")
    return deleted


def abandoned_probe(cm: dict, max_age_s: float, now: float | None = None) -> ag.Request | None:
    """The probe ``cm`` (the ``fabtune-plan`` ConfigMap) holds when the controller that made it is
    gone: a ``probe`` request whose ``metadata.creationTimestamp`` (RFC 3339, UTC) is more than
    ``max_age_s`` seconds before ``now`` (epoch seconds; default: the clock). A live probe deletes
    its plan when its wait ends, and a probe is not journaled (no run exists yet), so a controller
    killed while probing leaves it for no ``fabtune rollback`` to end. None for a run's request,
    a younger probe, or a plan outside its grammar."""
    try:
        req = ag.read_request(cm)
        made = datetime.strptime(cm["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
    except (InputError, KeyError, TypeError, ValueError):
        return None
    age = (time.time() if now is None else now) - made.replace(tzinfo=timezone.utc).timestamp()
    return req if req.action == "probe" and age > max_age_s else None


def end_probe(api, namespace: str, req: ag.Request, journal_dir: Path) -> list[str]:
    """Delete what an abandoned probe ``req`` (:func:`abandoned_probe`) left: its agents' answers,
    the plan while it holds that probe, and its marker file in ``journal_dir``. Returns what
    failed, one line each."""
    errors: list[str] = []
    delete_configmaps(api, namespace, req.run_id, [*[ag.result_name(req.run_id, req.name, n) for n in req.nodes],
                                                   ag.PLAN_CM], errors)
    (Path(journal_dir) / f"{ag.PROBE_PREFIX}{req.run_id}").unlink(missing_ok=True)
    return errors
