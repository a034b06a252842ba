"""Run reports for CI: a JSON document with a schema, JUnit XML, a Prometheus textfile, and the
history of past runs (``fabtune runs``, ``fabtune report RUN_ID``). See docs/reports.md.

Every report of a run is drawn from ONE document, :func:`tuning.reports.json_report.build`
(RunReport + :class:`~tuning.reports.json_report.Context`); :class:`Recorder` writes the files a
command was asked for when the command ends, whether the run returned or raised.

Exit codes of ``fabtune`` (the table in docs/reports.md sets them beside ansible-playbook's):
    0  ok: nothing failed (plan, no change, applied, kept, verification passed)
    1  a device failed, verification failed or regressed (the run was rolled back or halted), any other error
    2  bad input: inventory, profile, flags, a journal or lock refused (nothing pushed);
       ``plan --detailed-exitcode``: drift (changes planned), and every error is 1 there
    3  a rollback failed: a human must look
    4  a device did not answer (``ConnectError``, ``DeviceTimeout``) and nothing else failed
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path

from tuning.errors import InputError
from tuning.model.outcomes import RunOutcome

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INPUT = 2
#: ``plan --detailed-exitcode`` only: the plan has changes (as ``terraform plan -detailed-exitcode``)
EXIT_DRIFT = 2
EXIT_ROLLBACK_FAILED = 3
EXIT_UNREACHABLE = 4
#: a run stopped by Ctrl-C (SIGINT), as a shell reports it
EXIT_INTERRUPTED = 130


def exit_code(report) -> int:
    """The exit code of a run that returned a RunReport: 4 when devices did not answer
    (``unreachable``) and nothing else failed (no failed device, no failed verification), as
    ansible-playbook's unreachable; 1 when it was rolled back, halted or failed, a device failed,
    or a verification it ran failed (``verify_ok`` False, also when nothing changed); else 0."""
    gone = list(getattr(report, "unreachable", None) or [])
    failed = [n for n in report.errors if n != "run" and n not in gone]
    if gone and not failed and report.verify_ok is not False:
        return EXIT_UNREACHABLE
    bad = report.outcome in (RunOutcome.ROLLED_BACK, RunOutcome.FAILED, RunOutcome.HALTED) or report.verify_ok is False or failed
    return EXIT_FAILED if bad else EXIT_OK


def detailed_code(code: int, detailed: bool) -> int:
    """An error's exit code under ``plan --detailed-exitcode``: 1 for every error (2 means drift
    there, as terraform's; bad input is 2 only without the flag); ``code`` unchanged otherwise."""
    return EXIT_FAILED if detailed and code != EXIT_OK else code


def error_exit_code(err: BaseException, detailed: bool = False) -> int:
    """The exit code of a run stopped by ``err``: a TuningError's own ``exit_code``
    (:mod:`tuning.errors`), 130 for Ctrl-C, 143 for SIGTERM (:class:`tuning.errors.Terminated`),
    else 1; every error is 1 when ``detailed`` (:func:`detailed_code`)."""
    if isinstance(err, KeyboardInterrupt):
        return getattr(err, "exit_code", EXIT_INTERRUPTED)
    code = getattr(err, "exit_code", EXIT_FAILED)
    code = code if isinstance(code, int) and not isinstance(code, bool) else EXIT_FAILED
    return detailed_code(code, detailed)


def verify_report(got, seconds: float):
    """A stand-alone verification (``fabtune verify``; ``got``: a
    :class:`tuning.rollout.verify_run.Verification`) as a RunReport: outcome ``passed`` or
    ``failed``, the pairs in ``verify_after`` (the verification judged), then its IB verdicts
    (``ib ...``: counted apart from the pairs, :func:`tuning.reports.json_report.ib_rows`), the incasts
    (IncastResult dicts) in ``incast``, the nccl-tests jobs in ``nccl_after`` and their findings,
    ``seconds`` wall time."""
    from tuning.rollout.run_report import RunReport

    return RunReport(None, "verify", outcome=RunOutcome.PASSED if got.ok else RunOutcome.FAILED,
                     verify_after=[*got.pairs, *got.ib], verify_ok=got.ok, seconds=round(seconds, 2), incast=list(got.incast),
                     nccl_after=list(got.nccl), findings=list(got.findings))


def report_file(flag: str, suffix: str | None = None):
    """A parser of a report file flag (``--junit``, ``--prom-file``, ``--report-json``): checked
    before the run starts, so a long rollout never ends unable to write its verdict.

    Raises:
        InputError: empty, a directory, a folder that does not exist or is not writable, or (with
            ``suffix``) a name that does not end in it.
    """
    def parse(value: object) -> Path:
        v = str(value)
        if not v.strip():
            raise InputError(flag, "''", "empty; give the file to write the report to")
        p = Path(v)
        if p.is_dir():
            raise InputError(flag, v, "is a directory; give a file name")
        if suffix and (not p.name.endswith(suffix) or p.name == suffix):
            raise InputError(flag, v, f"must end in {suffix}: node_exporter's textfile collector reads "
                             f"only *{suffix} files")
        parent = p.parent
        if not parent.is_dir():
            raise InputError(flag, v, f"folder {parent} does not exist")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise InputError(flag, v, f"folder {parent} is not writable")
        return p
    return parse


@dataclass
class Outputs:
    """The report files a command writes (None: not asked for)."""

    junit: Path | None = None
    prom: Path | None = None
    json: Path | None = None

    def check(self) -> "Outputs":
        """Refuse two reports into one file. Raises InputError naming both flags."""
        flags = {"--junit": self.junit, "--prom-file": self.prom, "--report-json": self.json}
        seen: dict[Path, str] = {}
        for flag, p in flags.items():
            if p is None:
                continue
            key = p.resolve()
            if key in seen:
                raise InputError(flag, str(p), f"the same file as {seen[key]}; give each report its own file")
            seen[key] = flag
        return self

    def write(self, doc: dict) -> None:
        """Write every asked-for report of ``doc``.

        Raises:
            InputError: a file could not be written (names the flag and the OS error).
        """
        from tuning.reports import json_report, junit, prometheus

        writers = (("--report-json", self.json, json_report.write), ("--junit", self.junit, junit.write),
                   ("--prom-file", self.prom, prometheus.write))
        for flag, path, writer in writers:
            if path is None:
                continue
            try:
                writer(doc, path)
            except OSError as e:
                raise InputError(flag, str(path), f"cannot write the report: {e.strerror or e}") from None


def _plain(thresholds: object) -> dict | None:
    return asdict(thresholds) if is_dataclass(thresholds) and not isinstance(thresholds, type) else None


class Recorder:
    """Records one command's run and writes its reports when the ``with`` block ends.

    Example::

        with Recorder(outputs, "rollout", inventory_dir, opts.thresholds) as rec:
            inv = inventory.load(inventory_dir)
            rec.select(inv.select(limit))
            code = rec.done(engine.run(inv, opts))
        raise typer.Exit(code)

    A block left by an exception writes a report of the error (outcome ``unreachable``,
    ``rollback-failed`` or ``error``, exit code of the error) and lets the exception go on.
    """

    def __init__(self, outputs: Outputs | None, command: str, inventory: Path | None = None,
                 thresholds: object = None, detailed: bool = False):
        from tuning.reports.json_report import Context

        self.outputs = outputs or Outputs()
        self.report = None
        self.detailed = detailed  # plan --detailed-exitcode: every error exits 1
        self.ctx = Context(command, str(Path(inventory).resolve()) if inventory is not None else None,
                           thresholds=_plain(thresholds))

    def __enter__(self) -> "Recorder":
        self.ctx.started = time.time()
        return self

    def select(self, devices) -> None:
        """The selected devices (inventory ``Device`` objects: ``name``, ``role``)."""
        self.ctx.devices = {d.name: d.role for d in devices}

    def done(self, report, code: int | None = None, baseline: dict[str, dict] | None = None) -> int:
        """The run returned ``report``. Returns its exit code: ``code`` if given, else :func:`exit_code`.

        Args:
            baseline: pair name -> PairResult dict the verification was judged against; default:
                the run's own ``verify_before`` (a rollout's baseline).
        """
        self.report = report
        self.ctx.exit_code = exit_code(report) if code is None else code
        before = {r["pair"]: r for r in report.verify_before if not r.get("error")}
        self.ctx.baseline = baseline if baseline is not None else before
        return self.ctx.exit_code

    def document(self) -> dict:
        """The report document as it stands (:func:`tuning.reports.json_report.build`)."""
        from tuning.reports.json_report import build

        return build(self.report, self.ctx)

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.ctx.finished = time.time()
        if exc is not None:
            self.ctx.error, self.ctx.exit_code = exc, error_exit_code(exc, self.detailed)
            # a run stopped mid-change (Ctrl-C) carries what its restore did (tuning.rollout.engine)
            self.report = getattr(exc, "fabtune_report", None)
        if not (self.outputs.junit or self.outputs.prom or self.outputs.json):
            return False
        try:
            self.outputs.write(self.document())
        except InputError as e:
            if exc is None:
                raise
            print(f"fabtune: error: {e} (while reporting: {type(exc).__name__})", file=sys.stderr)
        return False
