"""``fabtune rollout --engine k8s``: the engine's rollout (:func:`tuning.rollout.engine.run`: lock,
plan, batches, switches, verification, confirm, restore and the journal, all on the controller) with
every node write made ON the node by its agent (:mod:`tuning.k8s.agent`), each batch held through
the NVIDIA Maintenance Operator: the Kubernetes counterpart of :mod:`tuning.slurm_engine`.

Per batch, before its nodes' first push (:meth:`KubeSession.push_devices`):

1. hold each node: one NodeMaintenance per node, or fabtune added as an additional requestor to the
   object of another requestor (:meth:`tuning.k8s.client.MaintenanceClient.hold`), then wait for the
   operator's ``Ready`` condition (cordoned, drained). A node refused (another fabtune run's object,
   one being deleted, an API refusal) or not Ready in time is left alone and counted unreachable with
   the reason (the policy's caps judge it, as a node the SSH engine cannot reach);
2. write the batch's plan file beside the journal (:meth:`NodeFront.write_plan`: each agent's
   ``fabtune node apply --plan``, so a node whose settings moved since the plan writes nothing),
   publish the batch's request in the ConfigMap ``fabtune-plan`` (run id, ``apply-bK``, the nodes,
   domains, each node's planned keys) and wait for each node's answer, a ConfigMap its agent creates
   (``fabtune node apply``'s JSON result, exit code, stderr tail). A result must name the node and
   apply exactly the keys the controller planned; exit 4 or no answer within ``apply_s`` + 60 s is
   unreachable, 3 a failed restore, any other non-zero a failed push (restored on the node).

The batch is verified, confirmed or restored by the engine as over SSH. A restore of nodes
(:meth:`KubeSession.restore`) is a ``restore`` request to their agents (``fabtune node restore``:
the journal alone); each restored node's hold then carries the failure: the ``RequestorFailed``
condition on fabtune's own object, the annotation ``fabtune.io/requestor-failed`` on a joined one
(:func:`tuning.k8s.maintenance.mark_failed`), and is kept, so the node stays cordoned for a person.
The holds of a kept batch end when the next batch begins and when the run ends
(:meth:`KubeSession.close`): fabtune's own object deleted (the operator uncordons), a joined one
left to its owner. The plan and result ConfigMaps are deleted at the end.

The API server: ``$FABTUNE_K8S_SERVER`` with ``$FABTUNE_K8S_TOKEN_FILE`` (and ``$FABTUNE_K8S_CA_FILE``),
else the cluster the controller runs in; namespace ``$FABTUNE_K8S_NAMESPACE`` (default ``fabtune``).
The controller's ``--journal-dir`` must be the agents' journal folder (the shared volume).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Callable

from tuning.errors import ConnectError, InputError, RollbackError, SetupError, TuningError
from tuning.k8s import agent as ag
from tuning.k8s import leftovers
from tuning.k8s import maintenance as nm
from tuning.k8s.api import NAMESPACE_ENV, SERVER_ENV, TOKEN_FILE_ENV, Api, ApiError, from_env
from tuning.k8s.client import BASE, Held, HoldError, MaintenanceClient
from tuning.k8s.maintenance import check_node_name
from tuning.model.outcomes import DeviceState
from tuning.rollout.journal import Journal
from tuning.rollout.node_front import NodeFront, off_plan, run_front
from tuning.rollout.options import Options
from tuning.rollout.run_report import RunReport

Progress = Callable[[str], None]
STEP_S = 60.0  # an agent's poll and start-up beyond the policy's apply_s
POLL_S = 0.5
READY_S = 360.0  # the operator's drain (the CRD's default timeout, 300 s) and its steps before it
_EXIT = {ConnectError.exit_code: ConnectError, RollbackError.exit_code: RollbackError}


class KubeSession(NodeFront):
    """The engine's Session with the nodes' writes through their agents (module docstring)."""

    engine_name = "k8s"

    def __init__(self, inv, devices, workers, policy=None, *, api: Api, namespace: str, journal_dir: Path = Path("."),
                 **kw):
        super().__init__(inv, devices, workers, policy, **kw)
        self.api, self.namespace, self.journal_dir = api, namespace, Path(journal_dir)
        self.held: dict[str, Held] = {}
        self.failed: dict[str, Held] = {}
        self.asked: list[str] = []  # result ConfigMaps to delete at the end
        self.mc: MaintenanceClient | None = None
        self.journal: Journal | None = None  # the run's: what is held and made is journaled in it (leftovers.py)

    def open(self, only: set[str] | None = None) -> None:
        """Open every Target as the engine does, then :meth:`probe` the agents (a whole session's open)."""
        super().open(only)
        if only is None:
            self.probe()

    def probe(self) -> None:
        """Before anything is read or pushed: write ``.fabtune-probe-TOKEN`` in this run's journal
        folder and ask every node's agent whether its journal folder holds it (:func:`tuning.k8s.agent.probe`);
        the plan ConfigMap and the answers are deleted after, the file removed.

        Raises:
            SetupError: an agent does not see the file or the inventory (the controller's
                --journal-dir is not the agents' folder), or does not answer within ``connect_s``
                + 60 s (its pod is not running; was left to the push, which waited ``apply_s`` + 60 s
                more, then restored and left the batch's other nodes cordoned): nothing was pushed.
        """
        from tuning.outfile import write_atomic
        from tuning.rollout.journal import new_run_id

        nodes = tuple(sorted(self.nodes & set(self.targets)))
        if not nodes:
            return
        self.reach()
        token = new_run_id()
        marker = self.journal_dir / f"{ag.PROBE_PREFIX}{token}"
        write_atomic(marker, f"fabtune rollout --engine k8s probe {token}\n".encode(), 0o644)
        req = ag.Request(token, "probe", "probe", nodes)
        try:
            _, errors = self.ask(req, {}, self.timeouts.connect_s + STEP_S)
        finally:
            marker.unlink(missing_ok=True)  # the plan only while it is this probe's (never another run's)
            leftovers.delete_configmaps(self.api, self.namespace, token,
                                        [*[ag.result_name(token, "probe", n) for n in nodes], ag.PLAN_CM], [])
            self.asked = [a for a in self.asked if token.lower() not in a]
        refused = sorted((n, e) for n, e in errors.items() if isinstance(e, SetupError))
        if refused:
            raise SetupError(f"{len(refused)} agent(s) refused the probe: {refused[0][1]}", phase="k8s")
        if errors:
            raise SetupError(f"{len(errors)} agent(s) did not answer the probe within {self.timeouts.connect_s + STEP_S:.0f}"
                             f" s ({', '.join(sorted(errors))}): each selected node's fabtune-agent pod (the DaemonSet; "
                             "the lab's: `fabtune lab up --k8s`) must run, or leave the node out with --limit", phase="k8s")

    def reach(self) -> None:
        """Before the probe: the API server answers the controller and lets it list NodeMaintenances
        (every batch's first read). Raises SetupError naming ``$FABTUNE_K8S_SERVER`` (no answer) or
        ``$FABTUNE_K8S_TOKEN_FILE`` (401, 403: not the controller's token): nothing was pushed."""
        try:
            self.api.get(f"{BASE}/{nm.PLURAL}")
        except ConnectError as e:
            raise SetupError(f"${SERVER_ENV}: the API server {self.api.server} did not answer ({e}); export the "
                             "server `fabtune lab up --k8s` printed, or the cluster's", phase="k8s") from None
        except ApiError as e:
            if e.code not in (401, 403):
                raise
            raise SetupError(f"${TOKEN_FILE_ENV}: the API server {self.api.server} refused its token ({e}); it must "
                             "be the fabtune-controller service account's token", phase="k8s") from None

    def push_nodes(self, nodes: list[str], plans: dict, j: Journal) -> dict[str, BaseException]:
        """Hold ``nodes`` (one batch) and have their agents push them (module docstring)."""
        batch, failed, self.journal = j.device(nodes[0]).get("batch"), {}, j
        if self.held and batch != self.batch:  # the previous batch is kept: end its holds
            self.release()
        self.batch = batch
        held = self.hold_nodes(nodes, j, failed)
        for n in held:  # before the request is out, as the SSH engine before its script: a controller
            j.update(n, state=DeviceState.PUSHING)  # stopped now restores (or `rollback`s) these nodes too
        if held:
            req = ag.Request(j.run_id, f"apply-b{batch}", "apply", tuple(held), tuple(sorted(self.domains or ())),
                             self.allow_firmware)
            self.write_plan(j, req.name, held, plans)  # each agent's `node apply --plan`: exactly it, or nothing
            results, errors = self.ask(req, {n: sorted(c.key for c in plans.get(n) or []) for n in held})
            failed.update(errors)
            failed.update(off_plan(results, plans))
        j.save()  # the nodes' records (pushing, applied, restored) into this process's journal
        return failed

    def hold_nodes(self, nodes: list[str], j: Journal, failed: dict) -> list[str]:
        """Hold each node of ``nodes`` and wait for Ready; the others go to ``failed`` (ConnectError
        with the reason). Returns the nodes held and Ready."""
        if self.mc is None:
            self.mc = MaintenanceClient(self.api, j.run_id, self.namespace)
        # journaled before and as held: a controller killed from here on leaves what `fabtune rollback` ends,
        # the object it creates or joins (a joined one in its owner's namespace) named before it is written
        decisions = self.mc.preview(nodes)
        leftovers.journal_decisions(j, self.namespace, decisions)
        holds = self.mc.hold(nodes, decisions)
        leftovers.forget(j, [n for n in nodes if n not in holds.held])
        leftovers.journal_holds(j, self.namespace, holds.held)
        self.held.update(holds.held)
        self.mc.wait_ready(holds, READY_S, POLL_S)
        for n, why in {**holds.refused, **holds.not_ready}.items():
            failed[n] = ConnectError(f"Kubernetes: {n} not held: {why}", host=n, phase="k8s")
        take = [n for n in nodes if n in holds.held and n not in holds.not_ready]
        if take:
            self.progress(f"k8s: {', '.join(take)} held (NodeMaintenance Ready) in namespace {self.namespace}")
        return take

    def ask(self, req: ag.Request, planned: dict[str, list[str]],
            wait_s: float | None = None) -> tuple[dict[str, dict], dict[str, BaseException]]:
        """Publish ``req`` and gather each node's answer within ``wait_s`` (default ``apply_s`` + 60 s):
        ``(results, errors)`` (module docstring)."""
        names = {n: ag.result_name(req.run_id, req.name, n) for n in req.nodes}
        if self.journal is not None:
            leftovers.journal_configmaps(self.journal, self.namespace, [ag.PLAN_CM, *names.values()])
        self.publish(ag.plan_configmap(req, self.namespace, planned))
        self.asked += names.values()
        self.progress(f"k8s: {req.action} published as {req.name} for {', '.join(req.nodes)}")
        wait_s = self.timeouts.apply_s + STEP_S if wait_s is None else wait_s
        deadline, answers = time.monotonic() + wait_s, {}
        while len(answers) < len(names) and time.monotonic() < deadline:
            for n, name in names.items():
                if n not in answers:
                    try:
                        answers[n] = self.api.get(ag.cm_path(self.namespace, name))
                    except ApiError as e:
                        if e.reason != "NotFound":
                            raise
            if len(answers) < len(names):
                time.sleep(POLL_S)
        results, errors = {}, {}
        for n in req.nodes:
            if n not in answers:
                errors[n] = ConnectError(f"no answer from the agent on {n} to {req.name} within {wait_s:.0f} s "
                                         f"(ConfigMap {names[n]})", host=n, phase="k8s")
                continue
            got = answer(n, answers[n])
            (results if isinstance(got, dict) else errors)[n] = got
        return results, errors

    def publish(self, body: dict) -> None:
        """Create or replace the plan ConfigMap with ``body``, read back. Raises TuningError when
        another run's plan is there, or it reads back otherwise; ApiError, ConnectError."""
        path = ag.cm_path(self.namespace, ag.PLAN_CM)
        try:
            self.api.create(ag.cm_path(self.namespace), body)
        except ApiError as e:
            if e.reason != "AlreadyExists":
                raise
            now = self.api.get(path)
            run = body["data"]["run-id"]
            stale = leftovers.abandoned_probe(now, 2 * (self.timeouts.connect_s + STEP_S))
            other = (now.get("data") or {}).get("run-id")
            if stale is not None and not leftovers.end_probe(self.api, self.namespace, stale, self.journal_dir):
                self.progress(f"k8s: deleted the probe {stale.run_id} a stopped controller left in {self.namespace}")
                return self.publish(body)  # a controller killed while probing: nothing of it runs any more
            if other != run:
                raise TuningError(f"ConfigMap {self.namespace}/{ag.PLAN_CM} holds the request of fabtune run {other}, "
                                  f"not {run}: once that run is over (or its controller killed), `fabtune rollback "
                                  f"{other}` or a person deletes it", phase="k8s") from None
            self.api.replace(path, {**body, "metadata": {**body["metadata"],
                                                         "resourceVersion": now["metadata"]["resourceVersion"]}})
        if self.api.get(path).get("data") != body["data"]:
            raise TuningError(f"ConfigMap {self.namespace}/{ag.PLAN_CM} reads back otherwise than written", phase="k8s")

    def restore_nodes(self, nodes: list[str], j: Journal) -> dict[str, BaseException]:
        """A ``restore`` request to the agents of ``nodes`` (nodes no longer held are held again), then
        each of their holds marked failed and kept (:meth:`NodeFront.restore` judges the journal after)."""
        errors: dict[str, BaseException] = {}
        self.journal = j
        again = [n for n in nodes if n not in self.held]
        try:
            take = [n for n in nodes if n in self.held] + (self.hold_nodes(again, j, errors) if again else [])
            if take:
                k = sum(1 for a in self.asked if "-restore-" in a) + 1
                errors.update(self.ask(ag.Request(j.run_id, f"restore-b{self.batch}-{k}", "restore", tuple(take)), {})[1])
        except (ApiError, ConnectError) as e:  # no request out: each hold stays journaled, never released
            for n in nodes:                     # here, for `fabtune rollback` (restores first, then ends it)
                self.held.pop(n, None)
                errors.setdefault(n, RollbackError(f"restore request not sent through the API server: {e}", host=n,
                                                   phase="restore"))
            return errors
        for n in take:
            self._fail(n, f"batch {self.batch}: the change was restored on {n} (verification or push failed)")
        return errors

    def _fail(self, node: str, message: str) -> None:
        """Mark ``node``'s hold failed and keep it (a failure to write it goes to :attr:`release_errors`)."""
        h = self.held.pop(node)
        try:
            self.mc.fail(h, message)
        except (ApiError, HoldError, ConnectError) as e:  # not marked: stays journaled, `fabtune rollback` ends it
            self.release_errors.append(f"{node}: RequestorFailed not written: {e}")
            return
        self.failed[node] = h
        if self.journal is not None:  # a person's now: `fabtune rollback` leaves it
            leftovers.forget(self.journal, [node])
        meta = h.obj.get("metadata") or {}
        self.progress(f"k8s: {node} stays held and cordoned for a person (NodeMaintenance {meta.get('namespace')}/"
                      f"{meta.get('name')}: RequestorFailed); " + (
                          f"`kubectl -n {meta.get('namespace')} delete nodemaintenance {meta.get('name')}` ends it"
                          if h.created else "its owner's hold stays; fabtune's failure is in its annotation"))

    def release(self) -> None:
        """End the holds of the batch (:meth:`tuning.k8s.client.MaintenanceClient.release`); a failure
        is kept in :attr:`release_errors` and the next node is tried."""
        held, self.held = self.held, {}
        ended = []
        for n, h in sorted(held.items()):
            try:
                self.mc.release(h)
                ended.append(n)
            except (ApiError, HoldError, ConnectError) as e:
                self.release_errors.append(f"{n}: hold not released: {e}")
        if self.journal is not None and ended:
            leftovers.forget(self.journal, ended)
        if ended:
            self.progress(f"k8s: released {', '.join(ended)}")
        if len(ended) < len(held):
            self.progress(f"k8s: not released: {', '.join(sorted(set(held) - set(ended)))} (in the report's errors)")

    def close(self) -> None:
        """End the holds (:meth:`release`), delete the plan and result ConfigMaps, close every connection."""
        try:
            self.release()
            deleted = []
            for name in ([ag.PLAN_CM] if self.asked else []) + self.asked:
                try:
                    self.api.delete(ag.cm_path(self.namespace, name))
                    deleted.append(name)
                except ApiError as e:
                    if e.reason != "NotFound":
                        self.release_errors.append(f"ConfigMap {name} not deleted: {e}")
                    else:
                        deleted.append(name)
                except ConnectError as e:
                    self.release_errors.append(f"ConfigMap {name} not deleted: {e}")
            if self.journal is not None and deleted:
                leftovers.forget(self.journal, configmaps=deleted)
        finally:
            super().close()


def answer(node: str, cm: dict) -> dict | TuningError:
    """A node's answer ConfigMap read: its JSON result (exit 0, naming the node), else the error its
    exit code means (4: ConnectError, 3: RollbackError, 2: SetupError naming the journal folder, other:
    TuningError) with its last error line."""
    data = cm.get("data") or {}
    rc = int(data.get("exit-code", "4")) if str(data.get("exit-code", "")).isdigit() else 4
    if rc == 0:
        try:
            doc = json.loads(data.get("result.json") or "")
        except ValueError:
            doc = None
        if isinstance(doc, dict) and doc.get("node") == node:
            return doc
        return ConnectError(f"the agent on {node} answered without a result naming it", host=node, phase="k8s")
    lines = [x.strip() for x in str(data.get("stderr", "")).splitlines() if x.strip()]
    said = ([x for x in lines if x.startswith("fabtune: error:")] or lines or ["no error text"])[-1][:300]
    if rc == SetupError.exit_code:  # the node refused its input before any write
        return SetupError(f"agent on {node}: fabtune node exited {rc}: {said}; the controller's --journal-dir "
                          "must be the agents' journal folder (their shared volume)", host=node, phase="k8s")
    kind = _EXIT.get(rc, TuningError)
    return kind(f"agent on {node}: fabtune node exited {rc}: {said}", host=node,
                phase={RollbackError: "restore", ConnectError: "k8s"}.get(kind, "apply"))


def run(inv, opts: Options, progress: Progress = lambda m: None) -> RunReport:
    """Roll out ``inv`` as :func:`tuning.rollout.engine.run` does, the nodes through their agents
    (module docstring). A hold or ConfigMap that could not be ended is in ``errors["k8s"]``.
    Raises InputError (a selected node whose name no Kubernetes node can have, a bad
    ``$FABTUNE_K8S_*``: both before anything is read or pushed), ConnectError (no API server), as the
    engine does."""
    for dev in inv.select(opts.limit):  # the holds name nodes: a name the API refuses must stop the run
        if dev.kind.endpoint:            # here, not after the switches were pushed (tryout, session 15)
            check_node_name(dev.name)
    try:
        api = from_env()
    except ConnectError as e:  # outside a pod without $FABTUNE_K8S_SERVER: the controller's setup
        raise SetupError(f"${SERVER_ENV} is not set and {e}: export it (and ${TOKEN_FILE_ENV}) as `fabtune lab up "
                         "--k8s` prints, or run the controller in the cluster", phase="k8s") from None
    namespace = os.environ.get(NAMESPACE_ENV) or "fabtune"
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", namespace):
        raise InputError(f"${NAMESPACE_ENV}", namespace[:64], "allowed: a DNS label (RFC 1123)")
    # the SSH engine creates a missing journal folder; the agents' one exists (their shared volume)
    if opts.mode != "plan" and not Path(opts.journal_dir).is_dir():
        raise SetupError(f"--journal-dir {opts.journal_dir}: no such folder; with --engine k8s it is the "
                         "folder the agents mount (their shared volume), never created here", phase="k8s")
    return run_front(inv, opts, progress, KubeSession, api=api, namespace=namespace, journal_dir=opts.journal_dir)
