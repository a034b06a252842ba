"""The rollout engine: one code path for plan, apply and rollout (STYLE.md section 3).

Stages: VALIDATE -> COLLECT -> PLAN -> (stop: plan) -> [BASELINE] -> per batch (the policy's,
:mod:`tuning.rollout.batches`; one batch by default): APPLY in safe phases -> settle -> [VERIFY]
-> CONFIRM the batch's switches; on a regression RESTORE and halt (:mod:`tuning.rollout.batch_run`).
Every device's ``before`` values are journaled before the first write; on a failure beyond the
policy's caps (a command, a switch commit, verification) the batch's touched devices are restored
(every batch's with ``on_regression: restore-all``) and the run says so. Switch commits use
commit-confirm and are confirmed only after their batch verified.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

from tuning.errors import TuningError
from tuning.inventory import Inventory
from tuning.rollout.batch_run import restore_batches, run_batches
from tuning.rollout.batches import plan_batches
from tuning.rollout.gate import (batch_pairs, confirm_window, incast_bound, measure_baseline, rollout_pairs,  # noqa: F401
                                 verify_pairs)  # verify_pairs: the tests import it from here
from tuning.rollout.journal import Journal, new_run_id, probe_writable
from tuning.rollout.lock import RunLock, lock_path
from tuning.rollout.options import Options, Run
from tuning.rollout.run_report import RunReport
from tuning.rollout.session import (Session, collect, findings, findings_after, plan, refuse_firmware,
                                    refuse_read_only_drift, refuse_unverifiable, snapshot)
from tuning.targets import pause_for_test
from tuning.verify.runner import as_baseline
from tuning.model.outcomes import BatchOutcome, RunOutcome

Progress = Callable[[str], None]


def run(inv: Inventory, opts: Options, progress: Progress = lambda msg: None, front: type = Session) -> RunReport:
    """Plan, apply or roll out ``inv`` (module docstring); ``front``: its Session class (Slurm's: slurm_engine).

    plan, apply and rollout hold the inventory's lock (:mod:`tuning.rollout.lock`) from before the
    first read to the end of the run (a switch plan stages and discards a candidate on the device).

    Raises:
        InputError: the inventory asks for what a device cannot take, no pair would verify, a
            confirm window too short (nothing pushed).
        LockError: another run holds the inventory (nothing read or pushed).
        ConnectError: a device is unreachable (nothing pushed).
        RollbackError: restoring after a failure failed (a human must look).
    """
    t0, started = time.monotonic(), time.time()
    opts = replace(opts, policy=opts.policy or inv.policy)
    devices = inv.select(opts.limit)
    verified = opts.mode == "rollout" and opts.verify
    pairs, window = _gate_plan(inv, opts, devices) if verified else (None, None)  # InputError before any read
    if opts.mode != "plan":
        probe_writable(opts.journal_dir)  # JournalWriteError (exit 2) before any device is read
    run_id = new_run_id()
    # plan locks too: collecting a switch stages and discards a candidate (another run's diff would move)
    lock = RunLock(lock_path(inv.path), run_id, opts.mode, opts.journal_dir / f"{run_id}.json",
                   wait_s=opts.lock_wait_s).acquire()
    s = front(inv, devices, opts.workers, opts.policy)
    report = RunReport(None, opts.mode)
    try:
        plans, batches = _read_and_plan(s, opts, report, progress, run_id)
        if opts.mode == "plan":
            report.outcome = RunOutcome.PLANNED
            return report
        refuse_firmware(plans, opts.allow_firmware)
        refuse_read_only_drift(report.findings)
        r = Run(run_id, pairs, window, opts.policy, batches, batch_pairs={
            b.index: (pairs if len(batches) == 1 else batch_pairs(inv, opts, b.devices))
            for b in batches} if verified else {}, started=started)
        _execute(s, inv, opts, s.states, plans, report, progress, r)
        if report.outcome in (RunOutcome.APPLIED, RunOutcome.KEPT):  # the verification's own findings stay
            own = [f for f in report.findings if f.get("domain") == "verify"]
            report.findings = [f for f in findings_after(s, opts.domains, report, progress)
                               if f.get("domain") != "verify"] + own
        return report
    finally:
        s.close()
        report.seconds = round(time.monotonic() - t0, 2)
        _journal_seconds(opts.journal_dir, report)
        lock.release()


def _journal_seconds(journal_dir, report: RunReport) -> None:
    """Keep the run's own duration (the console's) in its journal as ``seconds``, so ``fabtune
    runs`` and ``fabtune report`` say what the run said; a run without a journal (a plan, nothing
    to change) has none. Never raises: the run's own outcome or error comes first."""
    if not report.run_id:
        return
    try:
        j = Journal.load(journal_dir, report.run_id)
        j.data["seconds"] = report.seconds
        j.save()
    except (TuningError, OSError, ValueError):
        pass


def _read_and_plan(s: Session, opts: Options, report: RunReport, progress: Progress,
                   run_id: str) -> tuple[dict[str, list], list]:
    """Connect, collect, plan and cut the batches, filling ``report`` (policy, batches not run,
    changes, findings). Returns ``(plans, batches)``. Raises ConnectError, InputError (a plan a
    device cannot take, no safe push order: nothing pushed)."""
    progress(f"connecting to {len(s.devices)} device(s)")
    if opts.mode == "plan":  # nothing pushed: at most max_connections sessions at once
        pause_for_test("collect", run_id)
        progress("collecting state (one round trip per device)")
        s.states = s.read_in_waves(opts.domains, opts.policy.max_connections, progress)
    else:
        s.allow_overwrite_files = opts.allow_overwrite_files  # given to the Targets that take it
        s.open()
        pause_for_test("collect", run_id)
        progress("collecting state (one round trip per device)")
        s.states = collect(s, opts.domains)
    plans = plan(s, s.states, opts.domains)
    batches = plan_batches(s.inv, s.devices, opts.policy, plans)
    report.policy = opts.policy.model_dump(mode="json")
    report.batches = [{**b.as_dict(), "outcome": BatchOutcome.NOT_RUN, "failed": [], "unreachable": [], "verify_ok": None}
                      for b in batches]
    report.changes = {n: [c.as_dict() for c in ch] for n, ch in plans.items() if ch}
    report.findings = findings(s, s.states, opts.domains)
    return plans, batches


def _gate_plan(inv: Inventory, opts: Options, devices: list) -> tuple[list, int]:
    """A verified rollout's pairs and switch confirm window (s); first, every selected device must be
    one verification can prove (:func:`refuse_unverifiable`, :func:`rollout_pairs`: [] for subnet
    managers alone, proven by the IB verification). Raises InputError (nothing read)."""
    refuse_unverifiable(devices)
    pairs = rollout_pairs(inv, opts, devices)
    return pairs, confirm_window(opts, pairs, len(devices), extra_s=incast_bound(inv, opts))


def _baseline(s: Session, opts: Options, report: RunReport, progress: Progress, j, r: Run) -> tuple[dict, bool]:
    """The verification before any change (stage ``baseline``): every pair, and the nccl-tests jobs
    the last batch is judged against when the policy enables them and the run changes something
    (a run with no change judges nothing against them). Fills the report and the journal.
    Returns ``(baseline, every pair passed)``."""
    ok, before = measure_baseline(s, opts, r, progress, j, bool(report.changes))
    report.verify_before = j.data["verify"]["before"]
    report.nccl_before = j.data["verify"].get("nccl_before") or []
    return as_baseline(before), ok


def _execute(s: Session, inv: Inventory, opts: Options, states: dict, plans: dict,
             report: RunReport, progress: Progress, r: Run) -> None:
    rollout = opts.mode == "rollout"
    if not report.changes and not rollout:
        report.outcome = RunOutcome.NO_CHANGE
        return
    j = snapshot(s, opts, plans, r)
    report.run_id = j.run_id
    baseline, ok = _baseline(s, opts, report, progress, j, r) if rollout and opts.verify else (None, True)
    if not report.changes:
        report.outcome = RunOutcome.NO_CHANGE
        report.verify_ok = ok if rollout and opts.verify else None
        j.data["verify_ok"] = report.verify_ok
        j.data["outcome"] = RunOutcome.NO_CHANGE
        j.stage("done")
        return
    try:
        run_batches(s, opts, plans, report, progress, j, baseline, r)
    except TuningError as e:  # a lost session, an expired or refused confirm: restore and report
        if j.data["outcome"] is not None:
            raise
        report.errors[e.host or "run"] = str(e)
        _fail(s, j, report, progress, f"{type(e).__name__}: {e}", r)
    except BaseException as e:  # Ctrl-C or a bug mid-change: restore, say so, re-raise
        if j.data["outcome"] is None:
            report.errors["run"] = f"{type(e).__name__}: {e or 'Ctrl-C'}"
            s.reopen()  # a switch command cut short leaves its output in the session
            try:
                _fail(s, j, report, progress, f"stopped by {type(e).__name__}", r)
            except KeyboardInterrupt as again:  # a second Ctrl-C in the restore: its summary too
                again.fabtune_report = report  # type: ignore[attr-defined]
                raise
            # what the restore did travels with the interrupt: the front end prints and writes the
            # same summary as the journal holds (restored devices, kept batches)
            e.fabtune_report = report  # type: ignore[attr-defined]
        raise


def _fail(s: Session, j: Journal, report: RunReport, progress: Progress, why: str, r: Run) -> None:
    """An error stopped the run mid-change: restore the current batch's touched devices (every
    batch's up to it with ``restore-all``), no re-verification (:func:`restore_batches`)."""
    restore_batches(s, report, progress, j, r, why)
    j.data["outcome"] = report.outcome
    j.stage("done", why)
