"""What the front ends that make the nodes' writes ON the nodes share (``--engine slurm``:
:mod:`tuning.slurm_engine`, ``--engine k8s``: :mod:`tuning.k8s.engine`): the engine's Session with
the switches pushed and restored as the engine does and the nodes handed to the front end
(:meth:`NodeFront.push_nodes`, :meth:`NodeFront.restore_nodes`), the nodes' collects handed to the
front end too, many nodes in one step (:meth:`NodeFront.collect_nodes`), the journal marked as such a run
(``engine``: ``fabtune node apply`` pushes only into a run a front end began), the check that a node
applied exactly what the controller planned, and the run with the holds' errors in the report.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from tuning.errors import JournalWriteError, RollbackError, TuningError
from tuning.rollout import engine, plan_file
from tuning.rollout.journal import Journal, touched
from tuning.rollout.options import Options
from tuning.rollout.run_report import RunReport
from tuning.rollout.session import Session

Progress = Callable[[str], None]


class NodeFront(Session):
    """A Session whose nodes are pushed and restored by a scheduler's node work (module docstring).

    Attributes: ``nodes`` (the endpoint devices' names), ``batch`` (the batch of the last push),
    ``release_errors`` (holds that could not be ended: the report's ``errors[ENGINE]``).
    Subclasses set :attr:`engine_name` and implement :meth:`push_nodes` and :meth:`restore_nodes`.
    """

    shared_journal = True  # the nodes journal their own pushes into the run's journal
    engine_name = ""

    def __init__(self, inv, devices, workers, policy=None, *, domains: set[str] | None = None,
                 allow_firmware: bool = False, progress: Progress = lambda m: None):
        super().__init__(inv, devices, workers, policy)
        self.domains, self.allow_firmware, self.progress = domains, allow_firmware, progress
        self.nodes = {d.name for d in devices if d.kind.endpoint}
        self.batch: int | None = None
        self.release_errors: list[str] = []
        self._read_lock = threading.Lock()
        self._collects: dict[str, int] = {}  # node -> how many times the engine collected it
        self._read: dict[str, object] = {}  # node -> its state, or its error, not yet taken by its collect
        self._stepped: dict[int, set[str]] = {}  # collect round -> the nodes a collect_nodes step was asked for
        self.pushed: set[str] = set()  # nodes handed to push_nodes

    def open(self, only: set[str] | None = None) -> None:
        """Open every Target as the engine does; each node Target's collects then go to the nodes
        (:meth:`_collect_of`). Raises as :meth:`Session.open`."""
        super().open(only)
        for name in sorted(self.nodes & set(self.targets)):
            t = self.targets[name]
            t.collect = self._collect_of(name, t.collect)  # an instance's own: its class stays the Target's

    def _collect_of(self, name: str, own: Callable) -> Callable:
        """``name``'s collect through :meth:`collect_nodes`, one step for many nodes: the first
        collect (after the engine's pause before collecting) reads every node of the session, a
        later one (the report's read again after the run) every node pushed; the state of ``name``
        is taken (its error raised); a node the step did not read (``None``), or not pushed, is read
        by ``own`` as the engine reads it."""
        def collect(domains: set[str] | None = None):
            with self._read_lock:
                n = self._collects.get(name, 0)
                stepped = self._stepped.setdefault(n, set())
                if name not in self._read and name not in stepped and (n == 0 or name in self.pushed):
                    # one step per round: a node the step left out (not collectable) is read by `own`,
                    # never by a second step that would read again the nodes not yet taken
                    pool = self.nodes & set(self.targets) if n == 0 else self.pushed
                    todo = sorted(m for m in pool if self._collects.get(m, 0) == n and m not in stepped)
                    stepped.update(todo)
                    try:
                        self._read.update(self.collect_nodes(todo, domains))
                    except TuningError as e:  # the step itself failed: every node of it says so
                        self._read.update({m: e for m in todo})
                self._collects[name] = n + 1
                got = self._read.pop(name, None)
            if got is None:
                return own(domains)
            if isinstance(got, BaseException):
                raise got
            return got
        return collect

    def collect_nodes(self, nodes: list[str], domains: set[str] | None) -> dict[str, object]:
        """Read ``nodes`` (sorted) on the nodes, of ``domains``: ``{node: its NodeState or its error}``;
        a node left out is read by the controller as the engine reads it. Default: none read here."""
        return {}

    def journal_keys(self) -> dict:
        """``{"engine": NAME}``: ``fabtune node apply`` takes the run as one it may push into."""
        return {"engine": self.engine_name}

    def push_devices(self, plans: dict, j: Journal, confirm_s: int | None, todo: set[str]) -> dict[str, BaseException]:
        """The switches of ``todo`` as the engine pushes them; its nodes through :meth:`push_nodes`."""
        failed = super().push_devices(plans, j, confirm_s, todo - self.nodes) if todo - self.nodes else {}
        nodes = sorted(todo & self.nodes)
        self.pushed.update(nodes)
        if nodes:
            failed.update(self.push_nodes(nodes, plans, j))
        return failed

    def push_nodes(self, nodes: list[str], plans: dict, j: Journal) -> dict[str, BaseException]:
        """Push ``nodes`` (sorted, one batch) on the nodes; each failed node's error."""
        raise NotImplementedError

    @staticmethod
    def write_plan(j: Journal, tag: str, nodes: list[str], plans: dict) -> Path:
        """The controller's plan of ``nodes`` (``plans``: node -> its Changes) as the plan file of the
        step ``tag`` beside the journal (:func:`tuning.rollout.plan_file.path_for`), which each node's
        ``fabtune node apply --plan`` pushes exactly or not at all. Returns its path. Raises
        JournalWriteError: the folder cannot be written (exit 3 once an earlier batch changed a device)."""
        path = plan_file.path_for(j.path.parent, j.run_id, tag)
        try:
            return plan_file.write(path, j.run_id, {n: [c.as_dict() for c in plans.get(n) or []] for n in nodes})
        except OSError as e:
            was = any(touched(r) for r in j.data["devices"].values() if isinstance(r, dict))
            raise JournalWriteError(str(path), e.strerror or str(e), pushed=was, run_id=j.run_id) from None

    def restore(self, j: Journal, progress: Progress, only: set[str] | None = None) -> list[str]:
        """The switches of ``only`` as the engine restores them; its touched nodes through
        :meth:`restore_nodes`. Raises RollbackError naming the nodes a restore did not put back, and
        ``fabtune rollback RUN_ID``."""
        j.save()
        nodes = sorted(n for n in self.nodes if (only is None or n in only)
                       and touched(j.device(n)) and not j.device(n).get("restored"))
        done = super().restore(j, progress, only=(set(j.data["devices"]) if only is None else only) - self.nodes)
        if not nodes:
            return done
        progress(f"{self.engine_name}: restoring {', '.join(nodes)} on the nodes")
        errors = self.restore_nodes(nodes, j)
        j.save()
        bad = {n: e for n, e in errors.items()} | {n: RollbackError("the journal does not say restored", host=n)
                                                  for n in nodes if n not in errors and not j.device(n).get("restored")}
        if bad:
            n, e = sorted(bad.items())[0]
            raise RollbackError(f"restore failed on {', '.join(sorted(bad))}: {e}; run `fabtune rollback "
                                f"{j.run_id}` after fixing it", host=n, phase="restore")
        return done + nodes

    def restore_nodes(self, nodes: list[str], j: Journal) -> dict[str, BaseException]:
        """Restore ``nodes`` from the journal on the nodes; each node's error where it failed."""
        raise NotImplementedError


def off_plan(results: dict[str, dict], plans: dict) -> dict[str, BaseException]:
    """Nodes whose result (``fabtune node apply --json``) applied other keys than the controller
    planned (each planned the node from the same inventory: a difference means the node changed
    under the run), or did not push: failed, naming the keys."""
    out: dict[str, BaseException] = {}
    for node, doc in results.items():
        did = {c.get("key") for c in doc.get("changes") or []}
        want = {c.key for c in plans.get(node) or []}
        if not doc.get("pushed") or did != want:
            out[node] = TuningError(f"the node applied {sorted(did - want)[:3]} and left {sorted(want - did)[:3]} "
                                    "against the controller's plan", host=node, phase="apply")
    return out


def run_front(inv, opts: Options, progress: Progress, cls: type, **kw) -> RunReport:
    """Roll out ``inv`` as :func:`tuning.rollout.engine.run` does with the Session ``cls`` (a
    NodeFront, given this run's domains, firmware consent, progress and ``kw``). Returns its
    RunReport; holds that could not be ended are in ``errors[cls.engine_name]``."""
    made: list[NodeFront] = []

    class Front(cls):  # this run's options
        def __init__(self, *args) -> None:
            super().__init__(*args, domains=opts.domains, allow_firmware=opts.allow_firmware, progress=progress, **kw)
            made.append(self)

    report = engine.run(inv, opts, progress, front=Front)
    left = [e for s in made for e in s.release_errors]
    if left:
        report.errors[cls.engine_name] = "; ".join(left)[:1000]
    return report
