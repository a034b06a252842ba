"""How ``fabtune`` prints a run report (plan, apply, rollout, rollback, report): JSON, or its tables,
the notes on failed, unreachable, restored and kept devices, and one outcome line (:mod:`tuning.cli`).
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import Iterator

import typer

from tuning.report import (batches_text, changes_summary, changes_table, console, file_diffs, per_setting,
                           findings_table, verify_table)
from tuning.model.outcomes import BatchOutcome, RunOutcome
from tuning.errors import Terminated
from tuning.verify.ib_sm import summarise as ib_summary

out = console()
err = console(stderr=True)


def progress(msg: str) -> None:
    """Print a progress line on stderr (dim)."""
    err.print(f"[dim]... {msg}[/dim]")


def emit(report, as_json: bool, title: str, diff: bool = False, detail: bool = False, limited: bool = False) -> None:
    """Print ``report`` (a RunReport): as JSON, or its batches, tables and notes, then the outcome line.
    ``title`` heads the changes table; ``diff`` adds the file changes as unified diffs; the changes are a
    row per setting or one summary row per domain (:func:`tuning.report.per_setting` of ``detail``,
    ``--detail``, and ``limited``, a ``--limit`` was given)."""
    if as_json:
        dump_report(report.as_dict(), sys.stdout)
        return
    _tables(report, title, diff, detail, limited)
    for dev, e in report.errors.items():
        if report.mode != "rollback":
            out.print(f"{dev}: {e}", style="red", markup=False, highlight=False)
    if report.unreachable:
        out.print(f"unreachable (no answer, or its scheduler would not hold it: its line above says which; "
                  f"whatever the run may have left on it is for `fabtune rollback {report.run_id}`): "
                  f"{', '.join(report.unreachable)}", style="red", markup=False, highlight=False)
    _restored(report)
    run = f" (run {report.run_id})" if report.run_id else ""
    out.print(f"{_outcome_words(report)}{run} in {report.seconds:.1f} s")
    if report.outcome == RunOutcome.NO_CHANGE and report.verify_ok is False:
        out.print("[red]verification FAILED: the fabric is unhealthy as it is (nothing was changed, "
                  "nothing to roll back)[/red]")


#: the report keys whose values are ``{device: [change dicts]}``: a fleet's plan holds 860,000 changes
PER_DEVICE = ("changes", "kept")


def dump_report(doc: dict, fp) -> None:
    """Write a JSON report as it is encoded, never as one string: the document indented as
    ``json.dump(doc, fp, indent=2)`` writes it, except that each change of :data:`PER_DEVICE` is one
    line of compact JSON (``json.dumps`` without indent runs CPython's C encoder; with an indent the
    pure-Python one: 50 of an offline plan's 60 CPU seconds at 10,016 nodes). Values that JSON cannot
    hold are written as their ``str``, as before. Same data, same keys, same order."""
    def enc(v: object, indent: int | None = None) -> str:
        return json.dumps(v, indent=indent, default=str)

    fp.write("{")
    for i, (key, value) in enumerate(doc.items()):
        fp.write(("," if i else "") + f"\n  {enc(key)}: ")
        if key in PER_DEVICE and isinstance(value, dict) and value:
            fp.write("{")
            for k, (dev, items) in enumerate(value.items()):
                fp.write(("," if k else "") + f"\n    {enc(str(dev))}: [")
                fp.write(",".join(f"\n      {enc(c)}" for c in items) + ("\n    ]" if items else "]"))
            fp.write("\n  }")
        else:
            fp.write(enc(value, 2).replace("\n", "\n  "))
    fp.write("\n}\n" if doc else "}\n")


@contextmanager
def interrupted_summary(as_json: bool, title: str) -> Iterator[None]:
    """Ctrl-C in the block: when the run restored what it had changed (its interrupt carries the
    report, :func:`tuning.rollout.engine.run`), print the same summary as any other ending (the
    restored devices, the kept batches, the outcome line: what the journal and the JSON report say)
    and exit 130; an interrupt before anything was journaled goes on as it is."""
    try:
        yield
    except KeyboardInterrupt as e:
        report = getattr(e, "fabtune_report", None)
        if report is None:
            raise
        emit(report, as_json, title)
        kept = sum(1 for b in report.batches if b.get("outcome") == BatchOutcome.KEPT)
        how = "SIGTERM" if isinstance(e, Terminated) else "Ctrl-C"
        err.print(f"interrupted ({how}): {len(report.restored)} device(s) restored"
                  + (f"; {kept} batch(es) kept before it stay tuned" if kept else ""))
        raise typer.Exit(getattr(e, "exit_code", 130)) from None


def _tables(report, title: str, diff: bool, detail: bool = False, limited: bool = False) -> None:
    """The batches, the verification before, the changes (and their diffs), the findings, the
    verification after and each batch's IB checks, each when the report has them."""
    if report.batches and (report.mode == "plan" or len(report.batches) > 1):
        out.print(batches_text(report.batches), markup=False, highlight=False, soft_wrap=True)
    if report.verify_before:
        # the baseline is the verdict only of a run that changed nothing (docs/reports.md "pairs")
        judged = not report.verify_after and report.outcome == RunOutcome.NO_CHANGE
        out.print(verify_table(report.verify_before, "verification before", judged=judged))
    if report.changes:
        heads = ("now", "restored to") if report.mode == "rollback" else ("before", "after")
        if per_setting(report.changes, detail, limited):
            out.print(changes_table(report.changes, title, offline=report.mode == "offline-plan", headings=heads))
        else:
            out.print(changes_summary(report.changes, title))
        if diff:
            out.print(file_diffs(report.changes), markup=False, end="")
    if getattr(report, "findings", None):
        out.print(findings_table(report.findings, compact=out.width < 140))
    if report.verify_after:
        out.print(verify_table(report.verify_after, "verification after", report.verify_before))
    for b in report.batches or []:  # an SM's IB checks, beside the RoCE pairs (a mixed fabric: both)
        said = ib_summary(b.get("results") or [])
        if said:
            out.print(f"InfiniBand verification, batch {b['index']}: {said}", markup=False, highlight=False)
    after = getattr(report, "nccl_after", None)  # none when the run stopped before its last batch's jobs
    for line in nccl_lines(after or getattr(report, "nccl_before", None) or []):
        out.print(line if after else "baseline: " + line, markup=False, highlight=False)
    for line in nccl_lines(getattr(report, "nccl_restored", None) or []):
        out.print("after the restore: " + line, markup=False, highlight=False)


def nccl_lines(jobs: list[dict]) -> list[str]:
    """One line per nccl-tests job of a run (the report's ``nccl_after``, else ``nccl_before``):
    ``nccl-tests all_reduce_perf over node01..node04: 286.2 GB/s bus bandwidth (baseline 191.3 GB/s):
    pass``, or why it gave none. A new user found the jobs only in --report-json."""
    from tuning.verify.nccl import span

    out = []
    for j in jobs:
        where = span(j.get("nodes") or [])
        if j.get("busbw_gbs") is not None:
            base = f" (baseline {j['baseline_gbs']:.1f} GB/s)" if j.get("baseline_gbs") is not None else ""
            said = f"{j['busbw_gbs']:.1f} GB/s bus bandwidth{base}"
        else:
            said = f"no bus bandwidth ({j.get('error_kind')}: {j.get('error')})"
        out.append(f"nccl-tests {j.get('test')} over {where}: {said}: {j.get('status')}")
    return out


def _restored(report) -> None:
    """The restored devices, whether they verified against the baseline, and the firmware kept."""
    if report.restored:
        out.print(f"restored: {', '.join(report.restored)} (every touched device is back to its snapshot"
                  + (", except the firmware settings below)" if report.kept else ")"))
    if report.restored_verified is not None:
        out.print("restored devices verified against the baseline: " + ("back to it" if report.restored_verified
                  else "NOT back to it (check the fabric)"), style=None if report.restored_verified else "red")
    for dev, items in (report.kept or {}).items():
        undo = [c for c in items if c.get("undo") != "by hand"]
        burns = [c for c in items if c.get("undo") == "by hand"]
        if undo:
            keys = ", ".join(f"{c['key']}={c['after']}" for c in undo)
            out.print(f"{dev}: kept {len(undo)} firmware setting(s) (active after a reset; not undone "
                      f"automatically): {keys}; put back with `fabtune rollback --firmware {report.run_id}`",
                      style="yellow", markup=False, highlight=False)
        for c in burns:
            out.print(f"{dev}: {c['key']}: firmware {c['after']} stays burned: fabtune cannot undo a burn (the "
                      f"old image is not at hand); burn {c['before']} again by hand if needed",
                      style="yellow", markup=False, highlight=False)


def _outcome_words(report) -> str:
    """The outcome line's words (without the run id and the seconds)."""
    n = report.n_changes
    words = {"planned": f"{n} change(s) planned, nothing pushed" if n else "0 changes: already in the desired state",
             "no-change": "0 changes: already in the desired state, nothing touched",
             "applied": f"{n} change(s) applied", "kept": f"{n} change(s) applied, verified and kept",
             "rolled-back": f"{n} change(s) ROLLED BACK", "failed": "FAILED",
             "halted": f"HALTED at batch {_halted_at(report)}: that batch restored, "
                       f"{sum(1 for b in report.batches if b.get('outcome') == 'kept')} earlier batch(es) kept"}
    if report.mode == "offline-plan":
        words["planned"] = (f"{n} setting(s) wanted; offline: current state not read, nothing contacted; "
                            "IRQ affinity and ECN/DCQCN need each node's facts (IRQ numbers, NIC driver) "
                            "and are not listed; computed")
    drift = sorted({f["device"] for f in getattr(report, "findings", None) or [] if f.get("code") == "switch-drift"})
    if drift and not n:  # nothing fabtune would write, but not the desired state either
        words["planned"] = words["no-change"] = (f"0 changes fabtune would make; {', '.join(drift)} (manage: false) "
                                                 "does not hold what the inventory says (switch-drift above)")
    if report.mode == "rollback":
        words["rolled-back"] = f"{n} change(s) rolled back on {len(report.restored)} device(s)"
        words["no-change"] = f"nothing to roll back: {report.errors.get('run', 'the run changed no setting')}"
    return words.get(report.outcome, report.outcome)


def _halted_at(report) -> str:
    return next((str(b["index"]) for b in report.batches if b.get("outcome") in (BatchOutcome.RESTORED, BatchOutcome.FAILED)), "?")
