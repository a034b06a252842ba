"""A rollout batch by batch: the engine's APPLY -> settle -> VERIFY -> CONFIRM for each batch of
:func:`tuning.rollout.batches.plan_batches`, failure accounting and regression handling.

Per batch: its devices are pushed phase after phase (:attr:`Batch.phases`: switches first when the
MTU rises, ...), each device within the policy's ``apply_s``. A device FAILS when its push or read
back fails and is restored at once; it is UNREACHABLE when it did not answer (``ConnectError`` or
``DeviceTimeout``): it is left for ``fabtune rollback RUN_ID`` (the journal holds it) and counted
apart. Both count toward the caps: failed + unreachable of the batch over its nodes x 100 above
``max_fail_percentage``, or of the run above ``max_failed_devices`` => REGRESSION. After
``settle_s`` a rollout verifies the batch: the pairs of its scope
(:func:`tuning.verify.schedule.plan_schedule`) judged against the run's baseline (absolute marks
too in the last batch only: a half-tuned fabric fails them), plus a k-to-1 incast per changed leaf
when the policy enables it and the inventory expects lossless. A verification that fails =>
REGRESSION; else the batch's switches are confirmed and the batch is kept.

REGRESSION: the batch's touched devices are restored (every batch's with ``on_regression:
restore-all``), verified again against the baseline (``restored_verified``) and the run halts:
outcome ``halted`` when earlier batches stay, ``rolled-back`` when nothing stays.

A pair's FINAL result is the one measured after the last batch that changed an end or a hop on
its path (:func:`final_results`): a pair measured while one of its ends was still untuned is
judged on regression only, and its value says nothing of the tuned fabric. The last batch
therefore also measures, with the absolute marks, every pair of the whole schedule whose final
result is missing (:func:`missing_pairs`). ``verify_after`` (what "N/N pairs passed" counts) and
the saved baseline hold final results only, one per pair; each batch keeps its own results in
``batches[i].results``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Callable

from tuning.errors import ConnectError, DeviceTimeout, JournalWriteError
from tuning.rollout import gate, session
from tuning.rollout.batches import Batch, batch_line
from tuning.rollout.journal import Journal
from tuning.rollout.baseline import save_baseline
from tuning.rollout.rollback import kept_changes
from tuning.rollout.run_report import RunReport
from tuning.targets import pause_for_test
from tuning.verify.nccl_verdict import as_baseline as nccl_baseline
from tuning.verify.runner import PairResult, as_baseline, judge
from tuning.model.outcomes import BatchOutcome, RunOutcome

if TYPE_CHECKING:  # pragma: no cover
    from tuning.rollout.options import Options, Run
    from tuning.rollout.session import Session

Progress = Callable[[str], None]


@dataclass
class Measured:
    """One pair's result as measured in one batch: ``batch`` (1-based index), ``result`` (a
    PairResult dict as judged then), ``absolute`` (judged with the absolute marks too)."""

    batch: int
    result: dict
    absolute: bool

    @property
    def pair(self) -> str:
        """The pair's name."""
        return self.result["pair"]


def pair_devices(p) -> set[str]:
    """The devices a pair's result depends on: both nodes, both leaves and every hop of its route."""
    return {p.client, p.server, p.client_nic.switch, p.server_nic.switch, *(h.split(":")[0] for h in p.route)}


def last_change(r: "Run", devices: set[str], upto: int) -> int:
    """The index of the last batch among the first ``upto`` that changes one of ``devices``
    (a device with planned changes, :attr:`Run.changed`); 0 when none does."""
    return max((b.index for b in r.batches[:upto] if r.changed & devices & set(b.devices)), default=0)


def final_results(r: "Run", upto: int, complete: bool) -> list[dict]:
    """Each pair's final result, once, in the order they were measured: its latest measurement,
    when taken at or after :func:`last_change` of its devices over the first ``upto`` batches
    (those that ran). ``complete`` (the last batch verified): only results judged with the
    absolute marks count; else (the run halted) the latest results of the halting batch count
    as they were judged, they are the run's last word on those pairs."""
    latest: dict[str, Measured] = {}
    for m in r.measured:
        latest.pop(m.pair, None)
        latest[m.pair] = m
    return [m.result for name, m in latest.items()
            if m.batch >= last_change(r, r.pair_devs[name], upto) and (m.absolute or not complete)]


def missing_pairs(r: "Run", own: list) -> list:
    """Pairs of the whole schedule (``r.pairs``) the last batch must measure beyond its ``own``:
    those with no final result yet (never measured, measured before a later batch changed an end
    or hop, or judged without the absolute marks)."""
    names = {p.name for p in own}
    latest = {m.pair: m for m in r.measured}
    out = []
    for p in r.pairs or []:
        m = latest.get(p.name)
        if p.name not in names and (m is None or not m.absolute
                                    or m.batch < last_change(r, pair_devices(p), len(r.batches))):
            out.append(p)
            names.add(p.name)
    return out


def is_last(r: "Run", b: Batch) -> bool:
    """Whether ``b`` is the run's last batch, by index (a front end rebuilds the run's batches from
    the journal in each gate, so ``b`` need not be the very object of ``r.batches``)."""
    return bool(r.batches) and b.index == r.batches[-1].index


def batch_verify_pairs(r: "Run", b: Batch, progress: Progress) -> list:
    """The pairs batch ``b`` verifies: its own (``r.batch_pairs[b.index]``) and, in the last batch,
    :func:`missing_pairs` too (said through ``progress``), measured once more with the absolute
    marks: their earlier values are of a half-tuned fabric. Used by the engine and the front ends'
    batch gate (:mod:`tuning.rollout.steps_verify`) alike."""
    pairs = list(r.batch_pairs.get(b.index) or [])
    extra = missing_pairs(r, pairs) if is_last(r, b) else []
    if extra:
        progress(f"batch {b.index}: also measuring {len(extra)} pair(s) of the whole schedule whose last "
                 "measurement came before a later batch changed an end or hop")
    return [*pairs, *extra]


def not_run(j: Journal, changes: dict) -> list[str]:
    """Devices with planned changes the run never pushed (no journaled state: their batch or
    phase never ran)."""
    return sorted(n for n, ch in changes.items() if ch and not j.device(n).get("state"))


def unreachable(err: BaseException) -> bool:
    """Whether a device's error means it did not answer (not a failed push)."""
    return isinstance(err, (ConnectError, DeviceTimeout))


def run_batches(s: "Session", opts: "Options", plans: dict, report: RunReport, progress: Progress,
                j: Journal, baseline: dict | None, r: "Run") -> None:
    """Every batch of ``r.batches`` in order (module docstring); sets ``report.outcome``."""
    verifying = opts.mode == "rollout" and opts.verify
    r.changed = {n for n, ch in plans.items() if ch}
    total = 0
    for b in r.batches:
        r.current = b
        rec = j.data["batches"][b.index - 1]
        todo = {n for n in b.devices if plans.get(n)}
        pairs = batch_verify_pairs(r, b, progress) if verifying else None
        window = gate.confirm_window(opts, pairs, len(todo), extra_s=_incast_bound(s, r, b, plans)) if pairs else None
        j.stage("apply", f"batch {b.index}/{len(r.batches)}")
        progress(batch_line(s.inv, b, len(r.batches), todo, window))
        pause_for_test(f"apply-batch-{b.index}", j.run_id)
        failed: dict[str, BaseException] = {}
        for phase in b.phases:  # a cap exceeded in one phase stops the next (an MTU path half changed)
            new = session.push(s, plans, j, window, only=set(phase) & todo)
            failed.update(new)
            total += len(new)
            why = _account(s, j, report, progress, b, rec, failed, new, total, r)
            if why:
                halt(s, opts, report, progress, j, baseline, r, why)
                return
        if verifying:
            rec["verify_ok"] = _settle_and_verify(s, opts, report, progress, j, baseline, r, plans, pairs)
            if not rec["verify_ok"]:
                halt(s, opts, report, progress, j, baseline, r, gate.gate_failed_why(b.index, rec.get("results") or [],
                                                                       report.nccl_after))
                return
        confirm_batch(s, j, b)
        rec["outcome"] = BatchOutcome.KEPT
        _sync(report, j)
    _keep(s, opts, report, j)


def _keep(s: "Session", opts: "Options", report: RunReport, j: Journal) -> None:
    """Every batch kept: the final verification becomes the baseline (pairs and nccl-tests jobs),
    and the run ends ``kept`` (``applied`` without verification), journaled."""
    if report.verify_after:  # final results only (module docstring): never a half-tuned fabric's values
        save_baseline(opts.journal_dir, s.inv.path, {**as_baseline([PairResult(**x) for x in report.verify_after]),
                                                     **nccl_baseline(report.nccl_after)},
                      {p.name for p in gate.verify_pairs(s.inv, None)})
    report.outcome = RunOutcome.KEPT if opts.mode == "rollout" else RunOutcome.APPLIED
    j.data["outcome"] = report.outcome
    _sync(report, j)
    j.stage("done")


def _settle_and_verify(s: "Session", opts: "Options", report: RunReport, progress: Progress, j: Journal,
                       baseline: dict | None, r: "Run", plans: dict, pairs: list) -> bool:
    """Wait the policy's ``settle_s``, enter the batch's ``verify`` stage and gate batch
    ``r.current`` (:func:`_verify_batch`): whether it passed."""
    b = r.current
    if r.policy.settle_s:
        progress(f"batch {b.index}: settling {r.policy.settle_s:g} s before verification")
        time.sleep(r.policy.settle_s)
    j.stage("verify", f"batch {b.index}")
    pause_for_test("verify", j.run_id)
    pause_for_test(f"verify-batch-{b.index}", j.run_id)
    return _verify_batch(s, opts, report, progress, j, baseline, r, b, plans, pairs)


def confirm_batch(s: "Session", j: Journal, b: Batch) -> None:
    """Keep batch ``b``'s pushes: enter its ``confirm`` stage and confirm each device (a switch's
    commit-confirm proves its revision is still the applied one), journaling ``confirmed``. Both
    front ends call it (the engine and the Ansible verify stage)."""
    j.stage("confirm", f"batch {b.index}")
    pause_for_test("confirm", j.run_id)
    pause_for_test(f"confirm-batch-{b.index}", j.run_id)
    for name in b.devices:
        if name in s.targets and s.targets[name].confirm(j.device(name)):
            j.update(name, confirmed=True)


def _account(s: "Session", j: Journal, report: RunReport, progress: Progress, b: Batch, rec: dict,
             failed: dict[str, BaseException], new: dict[str, BaseException], total: int, r: "Run") -> str | None:
    """Record a batch's failed and unreachable devices (``failed``: the batch's so far, ``new``:
    the last phase's), restore the newly failed ones at once (an unreachable one is left for
    ``fabtune rollback``), and say why the run must halt (a cap exceeded), else None."""
    if not new:
        return None
    gone = sorted(n for n, e in failed.items() if unreachable(e))
    report.errors.update({n: getattr(e, "message", str(e)) for n, e in new.items()})
    report.unreachable += [n for n in gone if n not in report.unreachable]
    rec["failed"], rec["unreachable"] = sorted(set(failed) - set(gone)), gone
    if set(gone) & set(new):
        progress(f"batch {b.index}: {', '.join(sorted(set(gone) & set(new)))}: no answer, or not held by its "
                 f"scheduler (each one's error says which); whatever the run may have left there is for "
                 f"`fabtune rollback {j.run_id}`")
    if set(new) - set(gone):
        got = s.restore(j, progress, only=set(new) - set(gone))
        report.restored = sorted(set(report.restored) | set(got))
    p = r.policy
    share = len(failed) / max(1, len(b.nodes) or len(b.devices)) * 100
    if share > p.max_fail_percentage:
        of = f"its {len(b.nodes)} node(s)" if b.nodes else f"its {len(b.devices)} device(s)"
        return (f"batch {b.index}: {len(failed)} failed or unreachable ({', '.join(sorted(failed))}) against "
                f"{of}: {share:.0f} % > max_fail_percentage {p.max_fail_percentage:g}")
    if p.max_failed_devices is not None and total > p.max_failed_devices:
        return f"{total} device(s) failed or unreachable in the run (> max_failed_devices {p.max_failed_devices})"
    progress(f"batch {b.index}: {len(failed)} device(s) failed ({share:.0f} %, within the policy's caps): going on")
    return None


def _verify_batch(s: "Session", opts: "Options", report: RunReport, progress: Progress, j: Journal,
                  baseline: dict | None, r: "Run", b: Batch, plans: dict, pairs) -> bool:
    """Pairs of the batch (absolute marks in the last batch only), the incasts of its changed leaves
    and the InfiniBand verification of its changed subnet managers (:func:`gate.verify_sm`, its
    verdicts in the batch's ``results`` after the pairs'; not baselines)."""

    last = is_last(r, b)
    ok, after = gate.verify_fabric(s, opts, baseline, progress, pairs, absolute=last,
                                     timeout_s=r.policy.timeouts.verify_s) if pairs else (True, [])
    ids = {id(x) for x in after}
    if not last:  # a pair whose every end and hop already holds the new settings meets the absolute marks
        done = _tuned(s, r, b, plans, report)
        whole = [x for x, p in zip(after, pairs) if pair_devices(p) <= done]
        ids = {id(x) for x in whole}
        rest = [x for x in after if id(x) not in ids]
        ok = judge(whole, opts.thresholds, baseline, absolute=True) & judge(rest, opts.thresholds, baseline,
                                                                           absolute=False)
    for x, p in zip(after, pairs):
        r.pair_devs[p.name] = pair_devices(p)
        r.measured.append(Measured(b.index, dict(x.__dict__), id(x) in ids))
    rec = j.data["batches"][b.index - 1]
    rec["pairs"] = [x.pair for x in after]
    rec["results"] = [m.result for m in r.measured[-len(after):]] if after else []
    ib_ok, ib = gate.verify_sm(s, b.devices, j, plans, progress, set(report.errors) | set(report.unreachable))
    rec["pairs"] += [x.pair for x in ib]
    rec["results"] += [dict(x.__dict__) for x in ib]
    ok = ok and ib_ok
    report.verify_after = final_results(r, b.index, complete=last)
    j.data["verify"]["after"] = report.verify_after
    inc_ok = _incast(s, report, progress, r, b, plans)
    j.data["incast"] = report.incast
    inc_ok = gate.nccl_gate(s, opts, report, progress, j) & inc_ok if last else inc_ok  # whole selection tuned
    report.verify_ok = ok and inc_ok
    j.data["verify_ok"] = report.verify_ok
    return ok and inc_ok


def _tuned(s: "Session", r: "Run", b: Batch, plans: dict, report: RunReport) -> set[str]:
    """Devices that hold the new settings now: pushed in this batch or a kept one (not failed or
    unreachable), or selected with nothing to change."""
    bad = set(report.errors) | set(report.unreachable)
    pushed = {n for x in r.batches[:b.index] for n in x.devices}
    return {d.name for d in s.devices if d.name not in bad and (d.name in pushed or not plans.get(d.name))}


def changed_leaves(inv, b: Batch, plans: dict) -> set[str]:
    """Leaves a batch changed: those its changed nodes' NICs are cabled to, and its changed
    switches that have a NIC cabled (a spine has none)."""
    cabled = {nic.switch for d in inv.nodes for nic in d.spec.nics}
    out = {nic.switch for n in b.nodes if plans.get(n) for nic in inv.devices[n].spec.nics}
    return out | {sw for sw in b.switches if plans.get(sw) and sw in cabled}


def _incast_bound(s: "Session", r: "Run", b: Batch, plans: dict) -> float:
    """Seconds the batch's incasts may take at most (the switch confirm window must outlast them):
    those of every leaf pending after this batch, planned over every node (the tuned-only choice of
    :func:`_incast` can only plan fewer)."""
    if not r.policy.incast.enabled:
        return 0.0
    from tuning.verify.incast import Expectation, expected_seconds, plan_incasts

    leaves = r.incast_pending | changed_leaves(s.inv, b, plans)
    if not leaves or not Expectation.from_inventory(s.inv).lossless:
        return 0.0
    return expected_seconds([i for i in plan_incasts(s.inv, leaves, r.policy.incast.k) if len(i.senders) >= 2])


def _incast(s: "Session", report: RunReport, progress: Progress, r: "Run", b: Batch, plans: dict) -> bool:
    """The k-to-1 incasts of the leaves changed so far and not yet proven (policy ``incast``), when
    the inventory expects a lossless fabric; True when they pass or none is due.

    An incast proves a leaf only when every NIC in it holds the new settings: a sender not yet
    tuned (no PFC) drops under the pauses the tuned receiver sends, and the incast would fail
    for a fabric that is merely half done. So the receiver and senders are taken among nodes
    already pushed (this batch and the kept ones, not failed) and nodes with nothing to change;
    an incast with fewer than 2 such senders waits for a later batch (the leaf stays pending),
    and by the last batch every node is eligible.
    """
    if not r.policy.incast.enabled:
        return True
    from tuning.inventory import Inventory
    from tuning.verify.incast import Expectation, plan_incasts, run_incasts

    expect = Expectation.from_inventory(s.inv)
    r.incast_pending |= changed_leaves(s.inv, b, plans)
    if not expect.lossless or not r.incast_pending:
        return True
    eligible = _tuned(s, r, b, plans, report)
    sub = Inventory(s.inv.path, {n: d for n, d in s.inv.devices.items() if not d.kind.endpoint or n in eligible},
                    s.inv.policy)
    incasts = [inc for inc in plan_incasts(sub, r.incast_pending, r.policy.incast.k) if len(inc.senders) >= 2]
    ok = True
    if incasts:
        hosts = s.node_hosts({inc.receiver for inc in incasts} | {n for inc in incasts for n, _ in inc.senders})
        ok, results = run_incasts(incasts, hosts, expect, progress)
        r.incast_pending -= {inc.leaf for inc in incasts}
        report.incast += [{**asdict(x), "batch": b.index} for x in results]
    if is_last(r, b) and r.incast_pending:  # no batch is left to prove these leaves
        return _incast_not_run(report, progress, sorted(r.incast_pending), r.policy.incast.required) and ok
    return ok


def _incast_not_run(report: RunReport, progress: Progress, leaves: list[str], required: bool) -> bool:
    """Leaves no incast could prove: one ``incast-not-run`` finding each in the report (the lossless
    class was not shown under congestion); False when the policy's ``incast.required`` says a
    check that ran nothing must fail."""
    why = "fewer than 2 same-rail senders on other tuned nodes"
    progress(f"no incast possible on {', '.join(leaves)} ({why})" + ("; incast.required: FAILED" if required else ""))
    report.findings += [{"device": leaf, "domain": "verify", "code": "incast-not-run",
                         "message": f"no k-to-1 incast could run on {leaf} ({why}): its lossless class was not "
                                    "proven under congestion" + (" (incast.required: the verification fails)"
                                                                  if required else ""),
                         "evidence": "policy incast.required: " + str(required).lower()} for leaf in leaves]
    return not required


def _sync(report: RunReport, j: Journal) -> None:
    """The journal's batch records into the report (the one source of both), and the devices
    not run (:func:`not_run`)."""
    report.batches = [{**row, **{k: v for k, v in rec.items() if k != "index"}}
                      for row, rec in zip(report.batches, j.data["batches"])]
    report.not_run = not_run(j, report.changes)
    j.save()


def restore_scope(r: "Run", policy_all: bool) -> set[str]:
    """The devices a regression restores: the current batch's, or every batch's up to it."""
    if r.current is None or policy_all:
        upto = r.current.index if r.current is not None else len(r.batches)
        return {n for b in r.batches[:upto] for n in b.devices}
    return set(r.current.devices)


def journaled_restored(j: Journal, scope: set[str]) -> set[str]:
    """The devices of ``scope`` the journal records as restored (``restored: true``, written per
    device as each restore ends): what a summary counts when the restore itself was interrupted."""
    return {n for n in scope if (j.data.get("devices", {}).get(n) or {}).get("restored")}


def restore_batches(s: "Session", report: RunReport, progress: Progress, j: Journal, r: "Run", why: str) -> None:
    """Restore :func:`restore_scope`'s devices and record it (batch outcomes ``restored``; the
    current one ``failed`` when its restore failed, then the RollbackError goes on); sets
    ``report.outcome`` ``halted`` when a batch stays kept, else ``rolled-back``."""
    every = r.policy.on_regression == "restore-all"
    scope = restore_scope(r, every) - set(report.unreachable)  # no answer: left for `fabtune rollback`
    progress(f"{why}: restoring " + ("every batch" if every or r.current is None else f"batch {r.current.index}"))
    try:
        j.stage("restore", why)
    except JournalWriteError:
        pass  # restoring the devices comes first: the saves below raise it again, after the restore
    upto = r.current.index if r.current is not None else len(r.batches)
    if upto and j.data.get("batches"):
        j.data["batches"][upto - 1]["halt"] = why
    try:
        got = s.restore(j, progress, only=scope)
    except BaseException as e:  # a failed restore, or Ctrl-C/SIGTERM (the restore's pool finishes its devices first)
        report.restored = sorted(set(report.restored) | journaled_restored(j, scope))
        if isinstance(e, Exception) and upto and j.data.get("batches"):
            j.data["batches"][upto - 1]["outcome"] = BatchOutcome.FAILED
            _sync(report, j)
        raise
    report.restored = sorted(set(report.restored) | set(got) | journaled_restored(j, scope))
    report.kept = kept_changes(j)
    if r.measured:  # the run stops here: each pair's last word, as far as the batches that ran go
        report.verify_after = final_results(r, upto, complete=False)
        j.data["verify"]["after"] = report.verify_after
    for rec in j.data.get("batches", [])[:upto]:
        if every or rec["index"] == upto:
            rec["outcome"] = BatchOutcome.RESTORED
    kept = [rec for rec in j.data.get("batches", []) if rec["outcome"] == BatchOutcome.KEPT]
    report.outcome = RunOutcome.HALTED if kept else RunOutcome.ROLLED_BACK
    _sync(report, j)


def halt(s: "Session", opts: "Options", report: RunReport, progress: Progress, j: Journal,
         baseline: dict | None, r: "Run", why: str) -> None:
    """REGRESSION: restore (:func:`restore_batches`), verify the restored pairs against the
    baseline (``restored_verified``), halt. Raises RollbackError when a restore failed."""

    restore_batches(s, report, progress, j, r, why)
    if opts.mode == "rollout" and opts.verify and baseline is not None:
        every = r.policy.on_regression == "restore-all"
        pairs = r.pairs if every else r.batch_pairs.get(r.current.index)
        if pairs:
            progress("verifying the restored devices against the baseline")
            ok, again = gate.verify_fabric(s, opts, baseline, progress, pairs, absolute=False,
                                             timeout_s=r.policy.timeouts.verify_s)
            report.restored_verified = ok
            j.data["restored_verified"] = ok
            for x in (x for x in again if x.status != "pass"):  # which pair is not back, and why
                progress(f"restored, NOT back to the baseline: {x.pair}: {'; '.join(x.reasons) or x.status}")
            j.data["verify"]["restored"] = [x.__dict__ for x in again]
        back = gate.nccl_restored(s, opts, report, progress, j)  # a halt at the last batch's nccl-tests
        if back is not None:
            report.restored_verified = back and report.restored_verified is not False
            j.data["restored_verified"] = report.restored_verified
    j.data["outcome"] = report.outcome
    j.stage("done", why)
