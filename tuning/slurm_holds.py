"""The Slurm holds of a rollout (``--engine slurm``, :mod:`tuning.slurm_engine`): one batch's
allocation and the drains it wrote, journaled while they last, and the one way a hold ends.

A hold is journaled the moment ``salloc`` grants it, before any node is drained: the run's journal
keeps ``slurm_holds: {JOB: {"nodes": [...], "drained": {NODE: REASON}}}`` until the hold ends. A
controller killed in a batch (SIGKILL, a lost login node) leaves an allocation without a time
limit (``salloc --no-shell``: the job runs until cancelled, every node of it exclusive) and nodes
drained with this run's reason; ``fabtune rollback RUN_ID`` ends what the journal names
(:func:`end_journaled`) after the nodes are restored, and ``fabtune runs`` shows them.

An allocation is journaled as asked for (:data:`REQUEST_KEY`, :func:`request`) before ``salloc``
runs, until it answers: ``salloc --immediate`` waits while a node is busy, and one left behind by a
killed controller is still granted (a job of no time limit that no hold names). A rollback of such a
run ends every job Slurm lists under the run's job name (:func:`job_name`; ``squeue --name``).
Ending holds takes the inventory's run lock as a rollback does: never under the run's own live
controller (exit 2, naming it), which ends them itself.

Ending a hold (:func:`end`): ``scancel JOB`` (a job Slurm no longer knows, ``Invalid job id
specified``, is already over), then ``scontrol update NodeName=N State=RESUME`` for each node whose
reason is still the one this run wrote (a node someone drained meanwhile keeps their drain, and
is named). Sources: ``scancel(1)``, ``scontrol(1)`` of Slurm 22.05; the reasons' form is
:func:`tuning.burnin.drain.reason`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from tuning.burnin import drain
from tuning.errors import ConnectError, InputError
from tuning.model.grammar import check_host_name
from tuning.rollout.journal import SLURM_HOLDS_KEY, SLURM_REQUEST_KEY
from tuning.rollout.rollback import rollback_lock
from tuning.slurm_cli import call, check_conf, said, unreadable_conf

Progress = Callable[[str], None]

#: the journal key of the holds a run has now (job id -> nodes and drains)
JOURNAL_KEY = SLURM_HOLDS_KEY
#: the journal key of an allocation asked for and not answered yet: the nodes asked for
REQUEST_KEY = SLURM_REQUEST_KEY
#: scancel's words for a job Slurm no longer knows (Slurm 22.05 ``src/scancel/scancel.c``)
GONE = "Invalid job id specified"
#: a journaled job id (ASCII digits only: ``str.isdigit`` also takes "²" and "０")
_JOB = re.compile(r"[0-9]{1,12}")


@dataclass
class Hold:
    """One batch's allocation: ``job`` (Slurm job id), its ``nodes`` and the reason this run drained
    each with (``drained``: node -> reason; only those are resumed)."""

    job: str
    nodes: list[str]
    drained: dict[str, str] = field(default_factory=dict)

    def record(self) -> dict:
        """This hold as the journal keeps it: ``{"nodes": [...], "drained": {node: reason}}``."""
        return {"nodes": list(self.nodes), "drained": dict(self.drained)}


def job_name(run_id: str) -> str:
    """The Slurm job name of run ``run_id``'s allocations and steps: ``fabtune:RUN_ID``."""
    return f"fabtune:{run_id}"


def request(j, nodes: list[str] | None) -> None:
    """Journal (and save) in ``j`` that an allocation of ``nodes`` is being asked for now
    (:data:`REQUEST_KEY`), or with None that salloc answered (granted: :func:`journal` the hold)."""
    if nodes is None:
        j.data.pop(REQUEST_KEY, None)
    else:
        j.data[REQUEST_KEY] = list(nodes)
    j.save()


def journal(j, hold: Hold) -> None:
    """Write ``hold`` into the run's journal ``j`` (under :data:`JOURNAL_KEY`; the request it
    answers goes) and save it."""
    j.data.setdefault(JOURNAL_KEY, {})[hold.job] = hold.record()
    j.data.pop(REQUEST_KEY, None)
    j.save()


def forget(j, job: str) -> None:
    """Drop the ended hold ``job`` from the journal ``j`` and save it (the key goes with the last)."""
    holds = j.data.get(JOURNAL_KEY) or {}
    holds.pop(job, None)
    if not holds:
        j.data.pop(JOURNAL_KEY, None)
    j.save()


def end(hold: Hold, progress: Progress) -> list[str]:
    """End ``hold``: ``scancel`` its job (one Slurm no longer knows is over already), then
    :func:`resume` the nodes it drained. Returns what failed, one line each (the next step is tried
    anyway)."""
    errors: list[str] = []
    rc, out, err = call(["scancel", hold.job])
    if rc != 0:
        unreadable_conf("slurm", "scancel", out, err)  # a setup error: nothing was ended
    if rc != 0 and GONE not in err + out:
        errors.append(f"scancel {hold.job}: exit {rc}: {said(out, err)}")
    return errors + resume(hold.drained, progress)


def resume(drained: dict[str, str], progress: Progress) -> list[str]:
    """``State=RESUME`` for each node of ``drained`` (node -> the reason this run drained it with)
    whose reason is still that one; another reason is left and said through ``progress``. Returns
    what failed, one line each (the next node is tried anyway)."""
    errors: list[str] = []
    ad = drain.Slurm()
    for n, reason in drained.items():
        try:
            now = ad.reason(n)
            if now is None:
                progress(f"slurm: {n} has no drain now (resumed, or not drained yet): nothing to resume")
                continue
            if now != reason:
                progress(f"slurm: {n} not resumed: its reason is now {now!r}, not this run's")
                continue
            ad.call(ad.resume_calls(n)[0])
        except drain.DrainError as e:
            errors.append(str(e))
    return errors


def journaled(data: dict) -> list[Hold]:
    """The holds a journal document still names (oldest job first).

    Raises:
        InputError: holds that are not an object of job id -> ``{"nodes": [...], "drained": {...}}``,
            a job id that is not 1-12 ASCII digits, or a node name outside the host-name grammar
            (the journal was edited: nothing of it reaches scancel or scontrol).
    """
    holds = data.get(JOURNAL_KEY) or {}
    if not isinstance(holds, dict):
        raise InputError("journal", JOURNAL_KEY, f"a {type(holds).__name__}, not an object of job id -> hold")
    return [_hold(job, rec) for job, rec in sorted(holds.items(), key=lambda kv: (len(kv[0]), kv[0]))]


def _hold(job: str, rec: object) -> Hold:
    """One journaled hold, checked (raises InputError as :func:`journaled`)."""
    if not (_JOB.fullmatch(job) and isinstance(rec, dict)):
        raise InputError("journal", JOURNAL_KEY, f"{job[:40]!r} is not a Slurm job id (digits) with a hold object")
    nodes, drained = rec.get("nodes") or [], rec.get("drained") or {}
    if not (isinstance(nodes, list) and isinstance(drained, dict)):
        raise InputError("journal", f"{JOURNAL_KEY}.{job}", "nodes must be a list of node names, "
                         "drained an object of node -> reason")
    for n in nodes + list(drained):
        try:
            check_host_name(n if isinstance(n, str) else f"{n!r} (a {type(n).__name__})")
        except ValueError as e:
            raise InputError("journal", f"{JOURNAL_KEY}.{job}", str(e)) from None
    return Hold(job, list(nodes), {n: str(r) for n, r in drained.items()})


def end_journaled(j, progress: Progress) -> list[str]:
    """End every hold the journal ``j`` still names (:func:`end`), forgetting each that ended
    cleanly, and with a journaled request every job Slurm lists under the run's :func:`job_name`
    (:func:`named_jobs`; the request goes once all ended), under the inventory's run lock. Returns
    what failed (a hold with a failure stays journaled, for the next rollback).

    Raises:
        InputError: as :func:`journaled`.
        SetupError: Slurm's configuration cannot be read (``$SLURM_CONF``): nothing ended.
        LockError: a live run holds the inventory (this run's own controller: it ends its holds).
        ConnectError: squeue failed (slurmctld does not answer).
    """
    errors: list[str] = []
    holds, asked = journaled(j.data), REQUEST_KEY in j.data
    if not (holds or asked):
        return errors
    check_conf("slurm")
    lock = rollback_lock(j)
    if lock is not None:
        lock.acquire()
    try:
        if asked:
            holds += [Hold(job, []) for job in named_jobs(j.run_id) if job not in {h.job for h in holds}]
        for hold in holds:
            left = f"nodes {', '.join(hold.nodes)}" if hold.nodes else "asked for before its controller ended"
            progress(f"slurm: ending job {hold.job} the run left ({left})")
            failed = end(hold, progress)
            errors += failed
            if not failed:
                forget(j, hold.job)
        if asked and not errors:
            request(j, None)
    finally:
        if lock is not None:
            lock.release()
    return errors


def named_jobs(run_id: str) -> list[str]:
    """The ids of the jobs Slurm has (pending or running) under run ``run_id``'s :func:`job_name`
    (``squeue -h --name=NAME -o %i``). Raises SetupError (configuration unreadable) or ConnectError."""
    rc, out, err = call(["squeue", "-h", f"--name={job_name(run_id)}", "-o", "%i"])
    if rc != 0:
        unreadable_conf("slurm", "squeue", out, err)
        raise ConnectError(f"squeue: exit {rc}: {said(out, err)}", phase="slurm")
    return [job for job in out.split() if _JOB.fullmatch(job)]
