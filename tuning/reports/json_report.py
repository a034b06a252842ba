"""The JSON run report: one document per run, the one model the JUnit and Prometheus reports
are drawn from (:mod:`tuning.reports.junit`, :mod:`tuning.reports.prometheus`).

The document is :meth:`tuning.rollout.run_report.RunReport.as_dict` plus what a CI job needs to act
on it without reading fabtune's code: the schema version, the inventory, UTC start and end
times, the exit code, the error that stopped the run (if one did), one row per device with its
outcome, one row per verified pair with the baseline it was judged against, one row per InfiniBand
check, and counts. Every
field is documented, with its unit, in ``report.schema.json`` beside this module (JSON Schema
draft 2020-12; :func:`schema` loads it); ``docs/reports.md`` says the same for people.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

from tuning import __version__
from tuning.model.outcomes import DeviceOutcome, PairOutcome, RunOutcome
from tuning.outfile import write_atomic
from tuning.verify.ib_sm import check_kind, is_ib

#: bumped when a field changes meaning or goes away (a new optional field keeps the version)
SCHEMA_VERSION = 1
#: the schema file shipped in the package (package data)
SCHEMA_FILE = "report.schema.json"

#: device outcomes (docs/reports.md): what the run did to each selected device
DEVICE_OUTCOMES = tuple(DeviceOutcome)
#: run outcomes: RunReport's own (planned, no-change, applied, kept, halted, rolled-back, failed), then
#: ``passed`` (verify), ``unreachable`` / ``rollback-failed`` / ``error`` (the run raised),
#: ``unfinished`` (a journal without an outcome: still running, or its controller died)
RUN_OUTCOMES = tuple(RunOutcome)
#: judged pair outcomes (:func:`pair_rows`)
PAIR_OUTCOMES = tuple(PairOutcome)
#: the outcome of a run stopped by these errors (any other error: ``error``)
RAISED_OUTCOMES = {"ConnectError": RunOutcome.UNREACHABLE, "RollbackError": RunOutcome.ROLLBACK_FAILED}


@dataclass
class Context:
    """What a run's report needs beyond its RunReport.

    Attributes:
        command: the fabtune command (``plan``, ``apply``, ``rollout``, ``verify``, ``report``).
        inventory: the inventory directory (made absolute), None when unknown.
        devices: selected device name -> role (``node`` | ``switch``), in inventory order.
        started / finished: wall-clock times, seconds since the epoch (UTC).
        thresholds: the pass marks as a dict (:class:`tuning.verify.runner.Thresholds` fields:
            Gb/s, us, percent), None when not known (a report rebuilt from a journal).
        baseline: pair name -> baseline PairResult dict the verification was judged against.
        error: the TuningError (or other exception) that stopped the run, None when it returned.
        exit_code: what ``fabtune`` exits with for this run (:func:`tuning.reports.exit_code`);
            None for a run rebuilt from a journal that has no outcome (it has not ended).
    """

    command: str
    inventory: str | None = None
    devices: dict[str, str] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    finished: float | None = None
    thresholds: dict | None = None
    baseline: dict[str, dict] | None = None
    error: BaseException | None = None
    exit_code: int | None = 0


def iso_utc(t: float | None) -> str | None:
    """``2026-11-30T10:15:00.123Z`` (UTC, milliseconds) for epoch seconds ``t``; None for None."""
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def judged_pairs(report: dict) -> list[dict]:
    """The verification the run's verdict rests on: ``verify_after`` (after the change; ``verify``
    puts its one measurement there), else ``verify_before`` of a rollout that changed nothing (its
    only verification). A baseline measured before a change is not judged: an untuned fabric may
    fail absolute thresholds, and that is why it is being tuned."""
    if report.get("verify_after"):
        return list(report["verify_after"])
    if report.get("outcome") == RunOutcome.NO_CHANGE and report.get("verify_ok") is not None:
        return list(report.get("verify_before") or [])
    return []


def _device_outcome(name: str, rep: dict, ctx: Context) -> tuple[str, str | None]:
    """(outcome, error text) of one device; see :data:`DEVICE_OUTCOMES` and docs/reports.md."""
    err = ctx.error
    if err is not None:
        host = getattr(err, "host", None)
        if host == name:
            return (DeviceOutcome.UNREACHABLE if type(err).__name__ == "ConnectError" else DeviceOutcome.ERROR), str(err)
        return DeviceOutcome.UNKNOWN, f"the run stopped ({type(err).__name__}) before this device had a result"
    if name in (rep.get("unreachable") or []):  # did not answer mid-run (counted apart from failed)
        return DeviceOutcome.UNREACHABLE, rep.get("errors", {}).get(name)
    if name in rep.get("errors", {}):
        return DeviceOutcome.FAILED, rep["errors"][name]
    if name in (rep.get("not_run") or []):  # its batch (or push phase) never ran: nothing pushed
        return DeviceOutcome.NOT_RUN, None
    has_changes = bool(rep.get("changes", {}).get(name))
    if name in rep.get("restored", []):
        return DeviceOutcome.RESTORED, None
    if not has_changes:
        return DeviceOutcome.UNCHANGED, None
    return (DeviceOutcome.PLANNED if rep.get("outcome") == RunOutcome.PLANNED else DeviceOutcome.CHANGED), None


def device_rows(rep: dict, ctx: Context) -> list[dict]:
    """One row per selected device (and per device the report names beyond the selection)."""
    names = dict(ctx.devices)
    for name in [*rep.get("changes", {}), *rep.get("errors", {}), *rep.get("restored", [])]:
        if name != "run":
            names.setdefault(name, "unknown")
    rows = []
    for name, role in names.items():
        outcome, error = _device_outcome(name, rep, ctx)
        rows.append({"name": name, "role": role, "outcome": outcome,
                     "changes": len(rep.get("changes", {}).get(name, [])),
                     "restored": name in rep.get("restored", []), "error": error,
                     "kept": [c["key"] for c in rep.get("kept", {}).get(name, [])]})
    return rows


def _outcome(r: dict) -> str:
    """``error`` (the test or check ran nothing), ``fail`` or ``pass`` of one PairResult dict."""
    return PairOutcome.ERROR if r.get("error") else (PairOutcome.FAIL if r.get("verdict") == "fail" else PairOutcome.PASS)


def pair_rows(rep: dict, ctx: Context) -> list[dict]:
    """The judged RoCE pairs (:func:`judged_pairs`, IB checks left to :func:`ib_rows`), each with its
    baseline values and an outcome: ``pass``, ``fail`` (measured, and a threshold or the baseline
    says no) or ``error`` (the test did not run or gave no value: not a measurement, never judged as
    a regression)."""
    base = ctx.baseline or {}
    return [{**r, "outcome": _outcome(r), "baseline_bw_gbps": (base.get(r["pair"]) or {}).get("bw_gbps"),
             "baseline_lat_us": (base.get(r["pair"]) or {}).get("lat_us")} for r in judged_pairs(rep) if not is_ib(r)]


def ib_rows(rep: dict) -> list[dict]:
    """The InfiniBand checks the run ran (:mod:`tuning.verify.ib_sm`), each with its ``outcome`` (as
    :func:`pair_rows`), ``check`` (:func:`tuning.verify.ib_sm.check_kind`) and ``batch``: a
    rollout's from every batch's ``results`` (the batch index), a verify's from its verification
    (:func:`judged_pairs`; ``batch`` None)."""
    ran = [(b.get("index"), r) for b in rep.get("batches") or [] for r in b.get("results") or []]
    ran += [(None, r) for r in judged_pairs(rep)]
    return [{**r, "outcome": _outcome(r), "check": check_kind(r), "batch": i} for i, r in ran if is_ib(r)]


def _error(err: BaseException | None) -> dict | None:
    if err is None:
        return None
    return {"type": type(err).__name__, "host": getattr(err, "host", None), "message": str(err) or repr(err)}


def run_outcome(rep: dict, ctx: Context) -> str:
    """The run's outcome: RunReport's own, or what stopped it (:data:`RAISED_OUTCOMES`, else ``error``);
    a run stopped mid-change that restored (Ctrl-C: its error carries the report) has its report's own
    (``rolled-back``, ``halted``), as its journal says."""
    if ctx.error is not None and getattr(ctx.error, "fabtune_report", None) is None:
        return RAISED_OUTCOMES.get(type(ctx.error).__name__, "error")
    return rep["outcome"]


def build(report, ctx: Context) -> dict:
    """The report document of one run (the shape ``report.schema.json`` documents).

    Args:
        report: the run's :class:`~tuning.rollout.run_report.RunReport`, or None when the run raised
            before it had one (``ctx.error`` says why).
        ctx: what the run's RunReport does not hold.

    Returns:
        A JSON-ready dict: RunReport's fields, then ``schema_version``, ``generator``,
        ``command``, ``inventory``, ``started`` / ``finished`` (ISO 8601 UTC), ``exit_code``,
        ``error``, ``n_changes``, ``thresholds``, ``devices``, ``pairs``, ``ib_checks`` and ``summary``.
    """
    from tuning.rollout.run_report import RunReport

    until = ctx.finished if ctx.finished is not None else time.time()
    rep = (report or RunReport(None, ctx.command, outcome=RunOutcome.FAILED,
                               seconds=round(max(0.0, until - ctx.started), 2))).as_dict()
    devices, pairs, ib = device_rows(rep, ctx), pair_rows(rep, ctx), ib_rows(rep)
    return {
        "schema_version": SCHEMA_VERSION, "generator": f"fabtune {__version__}", "command": ctx.command,
        **rep, "outcome": run_outcome(rep, ctx),
        "inventory": ctx.inventory, "started": iso_utc(ctx.started), "finished": iso_utc(ctx.finished),
        "exit_code": ctx.exit_code, "error": _error(ctx.error),
        "n_changes": sum(len(v) for n, v in rep.get("changes", {}).items() if n not in (rep.get("not_run") or [])),
        "thresholds": ctx.thresholds, "devices": devices, "pairs": pairs, "ib_checks": ib,
        "summary": {"devices": len(devices), **{o: _count(devices, o) for o in DEVICE_OUTCOMES},
                    **_counts("pairs", pairs), **_counts("ib_checks", ib)},
    }


def _count(rows: list[dict], outcome: str) -> int:
    return sum(1 for r in rows if r["outcome"] == outcome)


def _counts(name: str, rows: list[dict]) -> dict[str, int]:
    """``{name: n, name_passed: n, name_failed: n, name_errored: n}`` of judged ``rows`` (the one
    source of the counts: JUnit's suites and the console read them from the summary)."""
    return {name: len(rows), f"{name}_passed": _count(rows, PairOutcome.PASS),
            f"{name}_failed": _count(rows, PairOutcome.FAIL), f"{name}_errored": _count(rows, PairOutcome.ERROR)}


def schema() -> dict:
    """The JSON Schema (draft 2020-12) of :func:`build`'s document, from the package data."""
    return json.loads(resources.files("tuning.reports").joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


def write(doc: dict, path: Path) -> None:
    """Write the report document as indented JSON (UTF-8), atomically, never through a link or onto
    a special file (:func:`tuning.outfile.write_atomic`). Raises OSError."""
    write_atomic(path, (json.dumps(doc, indent=2, default=str) + "\n").encode())
