"""The batch gate of a staged run (:mod:`tuning.rollout.steps`): verify one batch the way the
engine does (:mod:`tuning.rollout.batch_run`), then confirm the batch's switches, or restore the
batch (every batch with ``on_regression: restore-all``), verify the restored pairs and halt.

The engine keeps a rollout's state in memory (:class:`tuning.rollout.Run`); a front end
runs each batch's gate in a new process, so :func:`verify_batch` rebuilds that state from the
journal (batches, each device's plan, the baseline, the pairs measured so far and the leaves no
incast has proven yet, kept under the journal's ``ansible`` key) and writes it back.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Callable

from tuning.errors import InputError
from tuning.inventory import Inventory
from tuning.node.base import Change
from tuning.rollout import gate, session
from tuning.rollout.options import Options, Run
from tuning.rollout.run_report import RunReport
from tuning.targets import pause_for_test
from tuning.rollout.batch_run import (Measured, _sync, _verify_batch, batch_verify_pairs, confirm_batch, halt,
                                     pair_devices)
from tuning.rollout.batches import Batch
from tuning.rollout.journal import Journal
from tuning.rollout.lock import release
from tuning.rollout.steps import StepOptions, open_journal
from tuning.verify.runner import PairResult, as_baseline
from tuning.model.outcomes import BatchOutcome, DeviceState, RunOutcome

Progress = Callable[[str], None]


def _current(j: Journal, active: list[str]) -> Batch:
    """The batch the front end is gating: the first not yet run whose nodes hold every ``active``
    host (Ansible's ``ansible_play_batch``: the batch's hosts that did not fail).

    Raises:
        InputError: no such batch (the front end cut other batches than begin planned).
    """
    fields = ("index", "nodes", "switches", "phases", "why", "order")
    for rec in j.data.get("batches", []):
        if rec["outcome"] == BatchOutcome.NOT_RUN and set(active) <= set(rec["nodes"]) | set(rec["switches"]):
            return Batch(**{k: rec[k] for k in fields})
    raise InputError("ansible_play_batch", ",".join(active)[:80], "is no batch this run planned (begin cut "
                     "its batches with fabtune_serial; the play's serial must be the same)")


def _run_state(j: Journal, inv: Inventory, eopts: Options, b: Batch) -> Run:
    """The engine's :class:`~tuning.rollout.Run` of this run, rebuilt from the journal."""
    fields = ("index", "nodes", "switches", "phases", "why", "order")
    batches = [Batch(**{k: rec[k] for k in fields}) for rec in j.data["batches"]]
    r = Run(j.run_id, None, j.data["ansible"].get("confirm_s"), eopts.policy, batches, current=None)
    r.current = next(x for x in batches if x.index == b.index)
    r.changed = {n for n, rec in j.data["devices"].items() if rec.get("changes")}
    r.incast_pending = set(j.data["ansible"].get("incast_pending") or [])
    r.measured = [Measured(**m) for m in j.data["ansible"].get("measured") or []]
    if eopts.verify:
        r.pairs = gate.rollout_pairs(inv, eopts, [inv.devices[n] for x in batches for n in x.devices])  # begin's
        r.batch_pairs = {x.index: gate.batch_pairs(inv, eopts, x.devices) for x in batches}
        for p in [*r.pairs, *(p for ps in r.batch_pairs.values() for p in ps)]:
            r.pair_devs[p.name] = pair_devices(p)
    return r


def _report(j: Journal, eopts: Options, gone: list[str]) -> RunReport:
    """A RunReport holding what the journal says so far (the engine's functions fill it further)."""
    rep = RunReport(j.run_id, eopts.mode, outcome=RunOutcome.APPLIED)
    rep.policy = j.data.get("policy")
    rep.batches = [{k: v for k, v in rec.items() if k in ("index", "nodes", "switches", "phases", "why", "order")}
                   for rec in j.data["batches"]]
    rep.changes = {n: rec["changes"] for n, rec in j.data["devices"].items() if rec.get("changes")}
    rep.errors = {n: "failed (restored at once)" for n, rec in j.data["devices"].items() if rec.get("state") == DeviceState.FAILED}
    rep.unreachable = list(gone)
    rep.verify_after = list(j.data["verify"].get("after") or [])
    rep.incast = list(j.data.get("incast") or [])
    return rep


def verify_batch(inv: Inventory, opts: StepOptions, run_id: str, active: list[str],
                 progress: Progress = lambda m: None) -> dict:
    """Gate one batch (module docstring).

    Args:
        active: the batch's hosts still in play (Ansible's ``ansible_play_batch``).

    Returns:
        ``{"batch": index, "ok": bool, "outcome": a RunOutcome (kept | no-change | halted | rolled-back), "pairs": n,
        "restored": [devices], "restored_verified": bool | None, "reasons": [one line per check of the gate
        that failed: a RoCE pair or an IB check, with its evidence], "halt": the run's halt line (None: kept),
        "not_restored": [one line per restored pair not back to the baseline]}``.

    Raises:
        InputError: not a batch of this run.  RollbackError: restoring the batch failed.
    """
    eopts = opts.engine_options(inv)
    j = open_journal(opts.journal_dir, run_id)
    b = _current(j, active)
    rec = j.data["batches"][b.index - 1]
    if not any(d.get("changes") for d in j.data["devices"].values()):
        return _nothing_planned(j, eopts, b, rec)
    r = _run_state(j, inv, eopts, b)
    b = r.current  # the run state's own batch object (the engine's functions compare against r.batches)
    s, gone = _batch_session(inv, opts, eopts, j, r, active)
    report = _report(j, eopts, gone)
    plans = {n: [Change(**c) for c in rec2.get("changes") or []] for n, rec2 in j.data["devices"].items()}
    try:
        ok = _gate_and_keep(s, eopts, report, progress, j, r, plans)
    finally:
        s.close()
        if j.data.get("outcome") is not None:
            release(inv.path, run_id)  # halted: the run is over
    done = j.data["batches"][b.index - 1]
    return {"batch": b.index, "ok": ok, "outcome": RunOutcome.KEPT if ok else report.outcome, "restored": report.restored,
            "pairs": len(rec.get("pairs") or []), "restored_verified": report.restored_verified,
            "reasons": _failed(done.get("results") or []), "halt": done.get("halt"),
            "not_restored": _failed(report.verify_after)}


def _failed(results: list[dict]) -> list[str]:
    """One line per check that did not pass: ``PAIR: reason; reason`` (a RoCE pair or an IB check)."""
    return [f"{x.get('pair')}: {'; '.join(x.get('reasons') or [x.get('status', '?')])}" for x in results
            if x.get("status") != "pass"]


def _nothing_planned(j: Journal, eopts: Options, b: Batch, rec: dict) -> dict:
    """The gate of a run that planned nothing anywhere (a second, idempotent run): begin's baseline
    was the run's one verification, as in the engine's no-change rollout, and its verdict is this
    gate's: measuring the same fabric again proves nothing, and a verified run whose baseline
    measured nothing fails. Returns :func:`verify_batch`'s dict."""
    before = j.data["verify"].get("before") or []
    bad = _failed(before)
    ok = not eopts.verify or (bool(before) and not bad)
    rec["outcome"], rec["verify_ok"] = BatchOutcome.KEPT, ok if eopts.verify else None
    j.data["verify_ok"] = rec["verify_ok"]
    j.save()
    return {"batch": b.index, "ok": ok, "outcome": RunOutcome.KEPT if ok else RunOutcome.NO_CHANGE, "restored": [],
            "pairs": len(before), "restored_verified": None, "reasons": bad or ([] if ok else ["no pair was measured"]),
            "halt": None, "not_restored": []}


def _batch_session(inv: Inventory, opts: StepOptions, eopts: Options, j: Journal, r: Run,
                   active: list[str]) -> tuple[session.Session, list[str]]:
    """The (unopened) session of the devices a regression of batch ``r.current`` restores (the
    batch, or every batch so far under ``restore-all``) and the batch's nodes that dropped out of
    the play (unreachable), both journaled in the batch's record with its failed devices."""
    b, rec = r.current, j.data["batches"][r.current.index - 1]
    gone = sorted(n for n in b.nodes if n not in active and j.device(n).get("state") != DeviceState.FAILED)
    rec["failed"] = sorted(n for n in b.devices if j.device(n).get("state") == DeviceState.FAILED)
    rec["unreachable"] = gone
    scope = {n for x in r.batches[:b.index] for n in x.devices} if eopts.policy.on_regression == "restore-all" \
        else set(b.devices)
    devices = [inv.devices[n] for n in sorted(scope - set(gone)) if n in inv.devices]
    return session.Session(inv, devices, opts.workers, eopts.policy), gone


def _gate_and_keep(s: session.Session, eopts: Options, report: RunReport, progress: Progress, j: Journal,
                   r: Run, plans: dict) -> bool:
    """Open ``s``, gate batch ``r.current``, then keep it (confirm) or halt the run (restore), and
    journal the run state the next batch's stage reads. Returns whether the batch passed."""
    b = r.current
    s.open()
    # the engine's "tuned" set (absolute marks, incast senders) is judged over every selected device
    s.devices = [s.inv.devices[n] for n in j.data["devices"] if n in s.inv.devices]
    ok = _gate(s, eopts, report, progress, j, r, b, plans)
    if ok:
        confirm_batch(s, j, b)
        j.data["batches"][b.index - 1]["outcome"] = BatchOutcome.KEPT
        _sync(report, j)
    else:
        baseline = as_baseline([PairResult(**x) for x in j.data["verify"].get("before") or []]) or None
        results = j.data["batches"][b.index - 1].get("results") or []
        halt(s, eopts, report, progress, j, baseline, r, gate.gate_failed_why(b.index, results))
    j.data["ansible"]["measured"] = [asdict(m) for m in r.measured]
    j.data["ansible"]["incast_pending"] = sorted(r.incast_pending)
    j.save()
    return ok


def _gate(s: session.Session, eopts: Options, report: RunReport, progress: Progress, j: Journal,
          r: Run, b: Batch, plans: dict) -> bool:
    """Verify the batch (when the run is verified) as :func:`tuning.rollout.batch_run.run_batches` does."""
    if not eopts.verify:
        return True
    pairs = batch_verify_pairs(r, b, progress)
    if r.policy.settle_s:
        progress(f"batch {b.index}: settling {r.policy.settle_s:g} s before verification")
        time.sleep(r.policy.settle_s)
    j.stage("verify", f"batch {b.index}")
    pause_for_test(f"verify-batch-{b.index}", j.run_id)
    baseline = as_baseline([PairResult(**x) for x in j.data["verify"].get("before") or []])
    ok = _verify_batch(s, eopts, report, progress, j, baseline, r, b, plans, pairs)
    j.data["batches"][b.index - 1]["verify_ok"] = ok
    return ok


