"""``fabtune rollout --engine slurm``, a front end as :mod:`tuning.ansible_engine` is: the engine's
rollout (:func:`tuning.rollout.engine.run`: the lock, plan, batches, switches, verification, confirm,
restore and the journal, all on the controller) with every node write made ON the node by Slurm:
``fabtune node apply`` / ``fabtune node restore`` (:mod:`tuning.cli_node`) started by ``srun``, never
the controller's SSH.

Per batch, before its nodes' first push (:meth:`SlurmSession.push_devices`):

1. read each node's state and reason (``sinfo -h -N -n LIST -o %N|%T|%E``): a node with a reason
   not fabtune's (someone else's drain, Slurm's own ``Not responding``) or a state Slurm cannot
   run a task in (down, drained, fail, ``*`` not responding) is left alone and counted
   unreachable with what Slurm said (the policy's caps judge it, as a node the SSH engine cannot reach);
2. hold the others: one allocation (``salloc --no-shell --exclusive --immediate=connect_s``: no job
   runs beside the change; a busy node makes it fail and the batch's nodes count unreachable),
   then drain each with the reason ``fabtune:RUN_ID: rollout batch K/N``
   (:func:`tuning.burnin.drain.reason`; shown in ``sinfo -R`` while the batch runs; a drained node
   accepts no new job, and the allocation's steps still run: Slurm 22.05, tried in the Slurm lab);
3. ``srun --jobid=JOB --nodelist=LIST --ntasks-per-node=1 fabtune node apply -i INV --run-id RUN
   --journal-dir DIR --plan PLAN --json``, PLAN the batch's plan the controller wrote
   (``DIR/RUN.plans/apply-bK.json``: a node whose settings moved since writes nothing), each task's
   stdout and stderr in ``DIR/RUN.slurm/`` (``%t``: a task's files are its own); the node journals
   into the run's shared journal, reads back, restores itself on a failed push. A task's JSON
   result must name the node and apply exactly the keys the controller planned; a task Slurm
   reports failed fails with the node's own ``fabtune: error:`` line (:mod:`tuning.slurm_tasks`).

With ``--allow-reboot``, the nodes whose pushed changes need a boot are rebooted by Slurm before the
batch is verified (``scontrol reboot ASAP nextstate=RESUME``, once per node per run, then held again:
:mod:`tuning.slurm_reboot`). The batch is verified, confirmed or restored by the engine as over SSH; a restore of nodes is
``srun ... fabtune node restore`` in the batch's allocation (:meth:`SlurmSession.restore`; nodes of
earlier batches, ``on_regression: restore-all``, are held again for it). The hold ends when the next
batch begins and when the run ends (:meth:`SlurmSession.close`): ``scancel JOB``, then
``State=RESUME`` for each node whose reason is still the one this run wrote (a node someone drained
meanwhile keeps their drain).

Before any batch, the nodes are read on the nodes too (:meth:`SlurmSession.collect_nodes`): ONE
``srun --nodelist=ALL --ntasks-per-node=1 --immediate fabtune node collect -i INV --json`` (its own
allocation; read only), each task's state document (:mod:`tuning.node_local_state`) turned back into
the NodeState the controller's SSH collect gives, so the plan, journal and report are those of the
SSH engine. A node Slurm cannot start a task on now (a reason, down, a job running) is read over SSH
as before (its hold refuses it at its push); a task that fails is the node's collect error in
Slurm's words (a killed task or exit 4: unreachable, exit 4 as an SSH collect's). The report's read
again after the run is ``fabtune node collect`` too, of the nodes pushed (the batch held at that
moment in its allocation). The verification reads the nodes as the SSH engine does.

The node command is ``fabtune`` from the task's PATH; ``FABTUNE_NODE_COMMAND`` (a command line,
e.g. ``/opt/fabtune/bin/fabtune``) replaces it. The inventory and journal folder must be at the
same paths on the nodes (a shared file system), as the journal folder of ``fabtune node``.
Sources: ``salloc(1)``, ``srun(1)``, ``sinfo(1)``, ``scontrol(1)``, ``scancel(1)`` of Slurm 22.05.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import time
from pathlib import Path
from typing import Callable

from tuning import slurm_holds, slurm_reboot
from tuning.slurm_cli import call, check_conf, said, unreadable_conf
from tuning.slurm_holds import Hold
from tuning.slurm_tasks import NODE_COMMAND_ENV, collect_dir, task_results
from tuning.burnin import drain
from tuning.errors import ConnectError, InputError, SetupError, TuningError
from tuning.model.grammar import check_path
from tuning.rollout.journal import Journal
from tuning.rollout.node_front import NodeFront, off_plan, run_front
from tuning.rollout.options import Options
from tuning.rollout.run_report import RunReport

Progress = Callable[[str], None]

#: ``salloc --no-shell``'s line with the job id (``salloc: Granted job allocation 42``)
GRANTED = re.compile(r"Granted job allocation (\d+)")
#: node states (``sinfo %T``) a task cannot start in
UNUSABLE = ("down", "drain", "fail", "maint", "reboot", "power", "future", "unknown")
#: node states (``sinfo %T``) of a node running a job
BUSY = ("alloc", "mix", "comp")
STEP_S = 60.0  # srun's own start-up beyond the policy's apply_s
RESPONDING_S = 10.0  # how long a node sinfo shows ``*`` (not responding) without a reason is waited for


def node_states(nodes: list[str]) -> dict[str, tuple[str, str]]:
    """``{node: (state, reason)}`` from ``sinfo -h -N -n LIST -o %N|%T|%E`` (reason ``none`` -> '').

    Raises:
        ConnectError: sinfo failed (slurmctld does not answer).
    """
    rc, out, err = call(["sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N|%T|%E"])
    if rc != 0:
        raise ConnectError(f"sinfo: exit {rc}: {said(out, err)}", phase="slurm")
    states = {}
    for line in out.splitlines():
        name, state, reason = (line.split("|", 2) + ["", ""])[:3]
        states[name] = (state, "" if reason == "none" else reason)
    return states


def collectable(state: str, reason: str) -> bool:
    """Whether a read-only task can start on a node now (sinfo's ``state`` and ``reason``): no
    reason (someone's drain), not unusable (:func:`refusal`) and not running a job (allocated,
    mixed, completing: the read is left to the controller rather than queued behind it)."""
    return not reason and refusal("", "", state, "") is None and not state.startswith(BUSY)


def refusal(run_id: str, node: str, state: str, reason: str) -> str | None:
    """Why Slurm cannot hold ``node`` for this run (its state and reason as sinfo shows them), None if it can."""
    if reason and not reason.startswith(f"{drain.REASON_PREFIX}{run_id}:"):
        return f"Slurm: {node} is {state} with reason {reason!r}, not this run's: left alone"
    if not state or state.endswith("*") or any(w in state for w in UNUSABLE):
        return f"Slurm: {node} is {state or 'not in sinfo'}: no task can run there"
    return None


class SlurmSession(NodeFront):
    """The engine's Session with the nodes' writes through Slurm (module docstring)."""

    engine_name = "slurm"

    def __init__(self, inv, devices, workers, policy=None, *, domains: set[str] | None = None,
                 allow_firmware: bool = False, allow_reboot: bool = False, journal_dir: Path = Path("."),
                 progress: Progress = lambda m: None):
        super().__init__(inv, devices, workers, policy, domains=domains, allow_firmware=allow_firmware,
                         progress=progress)
        self.allow_reboot, self.journal_dir = allow_reboot, Path(journal_dir)
        self.hold: Hold | None = None
        self.journal: Journal | None = None  # the run's, once a hold is journaled in it
        self.command = shlex.split(os.environ.get(NODE_COMMAND_ENV) or "fabtune")

    def push_nodes(self, nodes: list[str], plans: dict, j: Journal) -> dict[str, BaseException]:
        """Hold ``nodes`` (one batch), ``srun fabtune node apply`` on them, reboot if allowed (module docstring)."""
        batch = j.device(nodes[0]).get("batch")
        if self.hold is not None and batch != self.batch:  # the previous batch is done: resume its nodes
            self.release()
        self.batch = batch
        failed: dict[str, BaseException] = {}
        held = self.hold_nodes(nodes, j, failed, f"rollout batch {batch}/{len(j.data.get('batches') or [])}")
        if held:
            plan = self._path(self.write_plan(j, f"apply-b{batch}", held, plans))  # each node: exactly it, or nothing
            args = ["node", "apply", "-i", self._path(self.inv.path), "--run-id", j.run_id, "--journal-dir",
                    self._path(j.path.parent), "--plan", plan, "--json"]
            args += [a for d in sorted(self.domains or ()) for a in ("-d", d)]
            args += ["--allow-firmware"] if self.allow_firmware else []
            results, errors = self._step(self.hold.job, held, args, j, f"apply-b{batch}")
            failed.update(errors)
            failed.update(off_plan(results, plans))
            boot = [n for n in held if n not in failed and slurm_reboot.needs_reboot(results[n])]
            if boot and self.allow_reboot:  # tuning/slurm_reboot.py: once per node, then held again
                label = f"batch {batch}/{len(j.data.get('batches') or [])}"
                failed.update(slurm_reboot.reboot_batch(self, boot, j, label))
        j.save()  # the nodes' records (pushing, applied, restored) into this process's journal
        return failed

    def hold_nodes(self, nodes: list[str], j: Journal, failed: dict, why: str) -> list[str]:
        """Allocate and drain the nodes of ``nodes`` Slurm can hold (:func:`refusal`; the others go to
        ``failed`` as ConnectError); becomes :attr:`hold`. Returns the nodes held."""
        states = node_states(nodes)
        deadline = time.monotonic() + RESPONDING_S
        while any(s.endswith("*") and not r for s, r in states.values()) and time.monotonic() < deadline:
            time.sleep(0.2)  # a node resumed a moment ago shows idle* until slurmd answers slurmctld's ping
            states = node_states(nodes)
        for n in nodes:
            no = refusal(j.run_id, n, *states.get(n, ("", "")))
            if no:
                failed[n] = ConnectError(no, host=n, phase="slurm")
        take = [n for n in nodes if n not in failed]
        if not take:
            return []
        argv = ["salloc", "--no-shell", "--exclusive", f"--immediate={int(self.timeouts.connect_s)}", f"--nodelist="
                f"{','.join(take)}", f"--nodes={len(take)}", f"--job-name={slurm_holds.job_name(j.run_id)}"]
        slurm_holds.request(j, take)  # a controller killed while salloc waits: rollback ends the job by name
        rc, out, err = call(argv, self.timeouts.connect_s + 30)
        job = GRANTED.search(out + err)
        if rc != 0 or job is None:
            slurm_holds.request(j, None)  # nothing granted
            for n in take:
                failed[n] = ConnectError(f"salloc: exit {rc}: {said(out, err)}", host=n, phase="slurm")
            return []
        reason = drain.reason(j.run_id, why)
        # journaled before the first drain: a controller killed from here on leaves what
        # `fabtune rollback RUN_ID` ends (tuning/slurm_holds.py); a resume checks the reason first
        self.hold, self.journal = Hold(job.group(1), take, {n: reason for n in take}), j
        slurm_holds.journal(j, self.hold)
        for n in take:
            drain.Slurm().call(drain.Slurm().drain_calls(n, reason, "rollout")[0])
        self.progress(f"slurm: job {self.hold.job} holds {', '.join(take)}, drained: {reason}")
        return take

    def _step(self, job: str, nodes: list[str], args: list[str], j: Journal,
              tag: str) -> tuple[dict[str, dict], dict[str, BaseException]]:
        """``srun`` one task of ``self.command + args`` per node in ``job``; ``(results, errors)``:
        each node's JSON result, each failed node's error (module docstring)."""
        out_dir = j.path.parent / f"{j.run_id}.slurm"
        out_dir.mkdir(mode=0o700, exist_ok=True)
        head = [f"--jobid={job}", f"--job-name={slurm_holds.job_name(j.run_id)}"]
        return self._srun(head, nodes, args, out_dir, tag, self.timeouts.apply_s)

    def _srun(self, head: list[str], nodes: list[str], args: list[str], out_dir: Path, tag: str,
              budget_s: float) -> tuple[dict[str, dict], dict[str, BaseException]]:
        """``srun HEAD`` one task of ``self.command + args`` per node, each task's output in
        ``out_dir/TAG-%t.out|err``, within ``budget_s`` plus srun's start-up: :func:`task_results`."""
        argv = ["srun", *head, f"--nodelist={','.join(nodes)}", f"--nodes={len(nodes)}", "--ntasks-per-node=1",
                "--kill-on-bad-exit=0", f"--output={out_dir}/{tag}-%t.out", f"--error={out_dir}/{tag}-%t.err",
                *self.command, *args]
        self.progress(f"slurm: {shlex.join(argv[:6])} ... {shlex.join(args[:2])}")
        rc, out, err = call(argv, budget_s + STEP_S)
        return task_results(out_dir, tag, nodes, err, rc)

    def collect_nodes(self, nodes: list[str], domains: set[str] | None) -> dict[str, object]:
        """``srun fabtune node collect --json`` on ``nodes``: those of the batch held now in its
        allocation (the report's read again after the run), the others that Slurm can start a task on
        now (:func:`collectable`) in one allocation of their own (``--immediate``, read only); the
        rest are read by the controller as over SSH (a hold refuses them at their push). Returns
        ``{node: its NodeState (:func:`tuning.node_local_state.state_from_doc`, planned at the
        inventory's sysroot) or its error}``: a failed task in Slurm's words as a push's is
        (:func:`task_results`). Raises ConnectError: sinfo failed."""
        held = [n for n in nodes if self.hold is not None and n in self.hold.nodes]
        states = node_states([n for n in nodes if n not in held]) if len(held) < len(nodes) else {}
        free = [n for n in nodes if n not in held and collectable(*states.get(n, ("", "")))]
        rest = [n for n in nodes if n not in held and n not in free]
        if held or free:
            self.progress(f"slurm: collecting {len(held) + len(free)} node(s) on the nodes")
        if rest:
            self.progress(f"slurm: reading {len(rest)} node(s) over SSH, no task can start there now: "
                          f"{', '.join(rest[:8])}{' ...' if len(rest) > 8 else ''}")
        args = ["node", "collect", "-i", self._path(self.inv.path), "--json"]
        args += [a for d in sorted(domains or ()) for a in ("-d", d)]
        got: dict[str, object] = {}
        if held:
            got.update(self._collect_step(held, [f"--jobid={self.hold.job}", "--job-name=fabtune:collect"], args))
        if free:
            got.update(self._collect_step(free, [f"--immediate={int(self.timeouts.connect_s)}",
                                                 "--job-name=fabtune:collect"], args))
        return got

    def _collect_step(self, nodes: list[str], head: list[str], args: list[str]) -> dict[str, object]:
        """One collect step (``srun HEAD``) of ``nodes``, its files in a folder of the journal's,
        removed after: ``{node: its NodeState or its error}``."""
        from tuning.node_local_state import state_from_doc

        out_dir = collect_dir(Path(self._path(self.journal_dir)))  # a killed controller's are swept first
        try:
            results, errors = self._srun(head, nodes, args, out_dir, "collect", self.timeouts.collect_s)
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
        got: dict[str, object] = dict(errors)
        for n, doc in results.items():
            try:
                got[n] = state_from_doc(doc, n, self.inv.devices[n].connection.sysroot)
            except TuningError as e:
                got[n] = e
        return got

    def restore_nodes(self, nodes: list[str], j: Journal) -> dict[str, BaseException]:
        """``srun fabtune node restore`` on ``nodes``: in the batch's allocation, nodes of earlier
        batches held again for it (:meth:`NodeFront.restore` judges the journal after)."""
        args = ["node", "restore", "--run-id", j.run_id, "--journal-dir", self._path(j.path.parent), "--json"]
        here = [n for n in nodes if self.hold is not None and n in self.hold.nodes]
        errors: dict[str, BaseException] = {}
        if here:
            errors.update(self._step(self.hold.job, here, args, j, f"restore-b{self.batch}")[1])
        rest = [n for n in nodes if n not in here]
        if rest:  # nodes of earlier batches (restore-all): held again for their restore
            current, self.hold = self.hold, None
            try:
                held = self.hold_nodes(rest, j, errors, "rollout restore")
                if held:
                    errors.update(self._step(self.hold.job, held, args, j, "restore-again")[1])
            finally:
                self.release()
                self.hold = current
        return errors

    def release(self) -> None:
        """End :attr:`hold` (:func:`tuning.slurm_holds.end`: ``scancel`` its job, resume each node this
        run drained whose reason is still this run's) and drop it from the journal. A failure is
        kept in :attr:`release_errors` (the run's report names it) and the hold stays journaled."""
        hold, self.hold = self.hold, None
        if hold is None:
            return
        failed = slurm_holds.end(hold, self.progress)
        self.release_errors += failed
        if not failed and self.journal is not None:
            slurm_holds.forget(self.journal, hold.job)
        self.progress(f"slurm: job {hold.job} ended, resumed the nodes it drained")

    def close(self) -> None:
        """End the hold (:meth:`release`), then close every connection."""
        try:
            self.release()
        finally:
            super().close()

    @staticmethod
    def _path(path) -> str:
        """An absolute path for a task's command line, checked by the path grammar. Raises InputError."""
        try:
            return check_path(str(Path(path).resolve()), parent_ok=False)
        except ValueError as e:
            raise InputError("--engine slurm", str(path)[:60], f"a path a node's task is given: {e}") from None


def preflight(nodes: list[str]) -> None:
    """Before the run locks or reads anything: Slurm's clients read their configuration and know
    every node of ``nodes`` (the selected inventory nodes) by that name (``sinfo -h -N -o %N``).

    Raises:
        SetupError: a client is not installed, its configuration cannot be read (names
            ``$SLURM_CONF``), sinfo fails (slurmctld does not answer: sinfo's words, what to check;
            exit 2, not an unreachable node's 4) or nodes Slurm does not know (names them and some it does).
    """
    check_conf("--engine slurm")
    rc, out, err = call(["sinfo", "-h", "-N", "-o", "%N"])
    if rc != 0:
        unreadable_conf("--engine slurm", "sinfo", out, err)
        raise SetupError(f"--engine slurm: sinfo: exit {rc}: {said(out, err)}; check that slurmctld (and munged) "
                         "run and answer, or set SLURM_CONF to the cluster's slurm.conf", phase="slurm")
    known = set(out.split())
    unknown = sorted(set(nodes) - known)
    if unknown:
        raise SetupError(f"--engine slurm: {len(unknown)} inventory node(s) unknown to Slurm: "
                         f"{', '.join(unknown[:8])}{' ...' if len(unknown) > 8 else ''} (Slurm knows "
                         f"{', '.join(sorted(known)[:8]) or 'no node'}{' ...' if len(known) > 8 else ''}); "
                         "the inventory's node names must be Slurm's NodeName")


def run(inv, opts: Options, progress: Progress = lambda m: None) -> RunReport:
    """Roll out ``inv`` as :func:`tuning.rollout.engine.run` does, the nodes through Slurm (module
    docstring), after :func:`preflight`. Returns its RunReport; a hold that could not be ended
    (scancel, resume) is in ``errors["slurm"]``. Raises as :func:`preflight` and
    :func:`tuning.rollout.engine.run`."""
    preflight(sorted(d.name for d in inv.select(opts.limit) if d.kind.endpoint))
    return run_front(inv, opts, progress, SlurmSession, allow_reboot=opts.allow_reboot, journal_dir=opts.journal_dir)

