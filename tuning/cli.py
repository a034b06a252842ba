"""The ``fabtune`` command (typer + rich). Exit codes: 0 ok, 1 failed / rolled back,
2 bad input, 3 rollback failed (page a human), 4 a device unreachable. See ``fabtune COMMAND --help``
(and docs/reports.md for the table beside ansible-playbook's).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from tuning.cli_args import (MAX_CONFIRM_S, click, deferred, existing_inventory, file_arg, integer, inventory_arg,
                             journal_dir_arg, load_inventory, number, out_dir_arg, raise_refused, state_dir_arg,
                             usage_line)
from tuning.errors import ConnectError, InputError, TuningError
from tuning.node import domains as node_domains
from tuning.report import batches_text, changes_table, console, file_diffs, findings_table, verify_table
from tuning.reports import EXIT_DRIFT, EXIT_OK, Outputs, Recorder, report_file
from tuning.rollout.journal import DEFAULT_DIR

app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False,
                  help="Tune a GPU/RDMA fabric's nodes and switches, and prove every change.\n\n"
                       "Example: fabtune lab up && fabtune rollout -i inventory/lab")
lab_app = typer.Typer(no_args_is_help=True, help="The embedded lab: a digital twin of a GPU fabric on this machine.")
app.add_typer(lab_app, name="lab")

INV = typer.Option(Path("inventory/lab"), "-i", "--inventory", parser=inventory_arg,
                   help="Ansible-format inventory directory.")
LIMIT = typer.Option(None, "--limit", "-l", help="Only these hosts or groups (repeatable).")
JSON = typer.Option(False, "--json", help="Print the result as JSON on stdout.")
JDIR = typer.Option(DEFAULT_DIR, "--journal-dir", parser=journal_dir_arg,
                    help="Where run journals and the baseline live (yours, not group/world-writable).")
#: the same, for a command that writes reports: a refusal is raised in its body (cli_args.Refused)
JDIR_RUN = typer.Option(DEFAULT_DIR, "--journal-dir", parser=deferred(journal_dir_arg),
                        help="Where run journals and the baseline live (yours, not group/world-writable).")
#: every domain a run can be limited to: the node domains in apply order, then the switches
DOMAINS = tuple(d.name for d in node_domains()) + ("switch",)
DOMAIN = typer.Option(None, "--domain", "-d", help=f"Only these domains (repeatable): {', '.join(DOMAINS)}.")
RAIL = typer.Option(None, "--rail", parser=deferred(integer("--rail", 0, 31, "a rail")), metavar="0..31",
                    help="Verify on these rails only (an integer 0..31, repeatable; default: every rail).")
# The pass marks: None keeps the inventory policy's (fabtune_rollout.thresholds), see _thresholds
MIN_BW = typer.Option(None, "--min-bw", parser=deferred(number("--min-bw")), metavar="GBPS",
                      help="Pass mark per pair, Gb/s, finite >= 0 (default: the policy's, 300).")
MAX_LAT = typer.Option(None, "--max-lat", parser=deferred(number("--max-lat")), metavar="US",
                       help="Pass mark per pair, typical latency us, finite >= 0 (default: the policy's, 10).")
MIN_BW_SHARE = typer.Option(None, "--min-bw-share", parser=deferred(number("--min-bw-share", 1, "a fraction of "
                            "line rate")), metavar="0..1", help="Pass mark per pair: share 0..1 of the slower "
                            "end's line rate (default: the policy's; none: not judged).")
FIRMWARE = typer.Option(False, "--allow-firmware", help="Push NIC firmware burns the profile pins "
                        "(firmware.version); without it a plan that burns firmware is refused (exit 2).")
JUNIT = typer.Option(None, "--junit", metavar="FILE", parser=file_arg("--junit", report_file("--junit")),
                     help="Write JUnit XML: a test case per device and per verified pair (docs/reports.md).")
PROM = typer.Option(None, "--prom-file", metavar="FILE.prom",
                    parser=file_arg("--prom-file", report_file("--prom-file", ".prom")),
                    help="Write a Prometheus textfile (node_exporter textfile collector) of the run.")
REPORT_JSON = typer.Option(None, "--report-json", metavar="FILE",
                           parser=file_arg("--report-json", report_file("--report-json")),
                           help="Write the JSON run report (schema: tuning/reports/report.schema.json).")


SERIAL = typer.Option(None, "--serial", metavar="1,5,20%", help="Batch sizes, as Ansible's serial: nodes, or N% of "
                      "the selected nodes; the last repeats (default: the inventory's fabtune_rollout, else 100%: "
                      "one batch).")
BATCH_BY = typer.Option(None, "--batch-by", metavar="leaf|rail|none", help="Order nodes so a batch fills one leaf "
                        "(or rail) before the next (default leaf).")


def _policy(inv, serial: Optional[str] = None, **flags):
    """The run's rollout policy: the inventory's ``fabtune_rollout`` with the flags given (None:
    not given). Raises InputError naming the flag."""
    from tuning.model.policy import parse_serial

    return inv.policy.override(serial=parse_serial(serial) if serial is not None else None, **flags)


def _thresholds(rec: Recorder, policy):
    """The run's pass marks (:class:`tuning.verify.runner.Thresholds`): the policy's
    ``thresholds`` (inventory ``fabtune_rollout.thresholds``, the flags already applied by
    :func:`_policy`), recorded in ``rec``'s reports. One function for rollout and verify."""
    from dataclasses import asdict

    from tuning.verify.runner import Thresholds

    th = Thresholds(**policy.thresholds.model_dump())
    rec.ctx.thresholds = asdict(th)
    return th


def _outputs(junit: Optional[Path], prom: Optional[Path], report_json: Optional[Path]) -> Outputs:
    """The report files asked for. Raises InputError when two name the same file."""
    return Outputs(junit=junit, prom=prom, json=report_json).check()


def _domains(values: Optional[list[str]]) -> set[str] | None:
    """Validate ``--domain`` values. Raises InputError naming the allowed ones."""
    for v in values or []:
        if v not in DOMAINS:
            raise InputError("--domain", v, f"unknown domain; allowed: {', '.join(DOMAINS)}")
    return set(values) if values else None
out = console()
err = console(stderr=True)


def _progress(msg: str) -> None:
    err.print(f"[dim]... {msg}[/dim]")


def _emit(report, as_json: bool, title: str, diff: bool = False) -> None:
    if as_json:
        print(json.dumps(report.as_dict(), indent=2, default=str))
        return
    if report.batches and (report.mode == "plan" or len(report.batches) > 1):
        out.print(batches_text(report.batches), markup=False, highlight=False, soft_wrap=True)
    if report.verify_before:
        out.print(verify_table(report.verify_before, "verification before"))
    if report.changes:
        heads = ("now", "restored to") if report.mode == "rollback" else ("before", "after")
        out.print(changes_table(report.changes, title, offline=report.mode == "offline-plan", headings=heads))
        if diff:
            out.print(file_diffs(report.changes), markup=False, end="")
    if getattr(report, "findings", None):
        out.print(findings_table(report.findings))
    if report.verify_after:
        out.print(verify_table(report.verify_after, "verification after", report.verify_before))
    for dev, e in report.errors.items():
        if report.mode != "rollback":
            out.print(f"{dev}: {e}", style="red", markup=False, highlight=False)
    if report.unreachable:
        out.print(f"unreachable (no answer; left for `fabtune rollback {report.run_id}`): "
                  f"{', '.join(report.unreachable)}", style="red", markup=False, highlight=False)
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
    n = report.n_changes
    words = {"planned": f"{n} change(s) planned, nothing pushed" if n else "0 changes: already in the desired state",
             "no-change": "0 changes: already in the desired state, nothing touched",
             "applied": f"{n} change(s) applied", "kept": f"{n} change(s) applied, verified and kept",
             "rolled-back": f"{n} change(s) ROLLED BACK", "failed": "FAILED",
             "halted": f"HALTED at batch {_halted_at(report)}: that batch restored, "
                       f"{sum(1 for b in report.batches if b.get('outcome') == 'kept')} earlier batch(es) kept"}
    run = f" (run {report.run_id})" if report.run_id else ""
    if report.mode == "offline-plan":
        words["planned"] = (f"{n} setting(s) wanted; offline: current state not read, nothing contacted; "
                            "IRQ affinity and ECN/DCQCN need each node's facts (IRQ numbers, NIC driver) "
                            "and are not listed")
    if report.mode == "rollback":
        words["rolled-back"] = f"{n} change(s) rolled back on {len(report.restored)} device(s)"
        words["no-change"] = f"nothing to roll back: {report.errors.get('run', 'the run changed nothing')}"
    out.print(f"{words.get(report.outcome, report.outcome)}{run} in {report.seconds:.1f} s")
    if report.outcome == "no-change" and report.verify_ok is False:
        out.print("[red]verification FAILED: the fabric is unhealthy as it is (nothing was changed, "
                  "nothing to roll back)[/red]")


def _halted_at(report) -> str:
    return next((str(b["index"]) for b in report.batches if b.get("outcome") in ("restored", "failed")), "?")


def _load(path: Path):
    return load_inventory(path)


@app.command()
def render(inventory: Path = INV, output: Path = typer.Option(..., "-o", "--output", parser=out_dir_arg,
                                                              help="Output directory.")) -> None:
    """Render every device's configuration into files, one per device (changes nothing).

    Example: fabtune render -i inventory/example-su -o /tmp/su-render
    """
    from tuning.render import render_inventory

    try:
        paths = render_inventory(_load(inventory), output)
    except OSError as e:
        raise InputError("--output", str(output), f"cannot write there: {e.strerror}") from None
    out.print(f"wrote {len(paths)} file(s) to {output}")


@app.command()
def plan(inventory: Path = INV, limit: Optional[list[str]] = LIMIT, domain: Optional[list[str]] = DOMAIN,
         offline: bool = typer.Option(
        False, "--offline", help="Contact no device: show the desired settings only."),
         diff: bool = typer.Option(False, "--diff", help="Show file changes as unified diffs."),
         as_json: bool = JSON, detailed_exitcode: bool = typer.Option(
        False, "--detailed-exitcode", help="Exit 0 when nothing would change, 2 when the plan has changes "
        "(drift), 1 on any error, bad input included (as terraform plan -detailed-exitcode)."),
         junit: Optional[Path] = JUNIT, prom_file: Optional[Path] = PROM,
         report_json: Optional[Path] = REPORT_JSON, serial: Optional[str] = SERIAL,
         batch_by: Optional[str] = BATCH_BY) -> None:
    """Show, per device and setting, what apply would change, and the rollout's batches with the
    push order inside each and its reason (the policy: inventory fabtune_rollout, --serial). Changes nothing.

    Exit 0; with --detailed-exitcode 0 no drift, 2 drift, 1 error (docs/reports.md).
    Example: fabtune plan -i inventory/lab --limit leaf01 --detailed-exitcode
    """
    from tuning.rollout import engine
    from tuning.rollout.offline import offline_plan

    with Recorder(_outputs(junit, prom_file, report_json), "plan", inventory, detailed=detailed_exitcode) as rec:
        if offline and detailed_exitcode:
            raise InputError("--detailed-exitcode", "--offline", "drift needs each device's current state, and an "
                             "offline plan reads none; drop --offline")
        inv, only = _load(inventory), _domains(domain)
        rec.select(inv.select(limit))
        policy = _policy(inv, serial, batch_by=batch_by)  # checked offline too (an offline plan shows no batches)
        report = (offline_plan(inv, limit, only) if offline
                  else engine.run(inv, engine.Options(mode="plan", limit=limit, domains=only, policy=policy), _progress))
        code = rec.done(report, (EXIT_DRIFT if report.n_changes else EXIT_OK) if detailed_exitcode else None)
    _emit(report, as_json, "plan (offline: current state not read)" if offline else "plan", diff)
    raise typer.Exit(code)


@app.command()
def apply(inventory: Path = INV, limit: Optional[list[str]] = LIMIT, domain: Optional[list[str]] = DOMAIN,
          check: bool = typer.Option(
        False, "--check", help="Dry run: same as plan."), as_json: bool = JSON, journal_dir: Path = JDIR_RUN,
          allow_firmware: bool = FIRMWARE, junit: Optional[Path] = JUNIT, prom_file: Optional[Path] = PROM,
          report_json: Optional[Path] = REPORT_JSON) -> None:
    """Apply the inventory's settings (no verification; see rollout). A second run changes nothing.

    Example: fabtune apply -i inventory/lab --limit gpu_nodes
    """
    from tuning.rollout import engine

    with Recorder(_outputs(junit, prom_file, report_json), "apply", inventory) as rec:
        raise_refused(journal_dir)
        inv = _load(inventory)
        rec.select(inv.select(limit))
        report = engine.run(inv, engine.Options(mode="plan" if check else "apply", limit=limit,
                                                journal_dir=journal_dir, domains=_domains(domain),
                                                allow_firmware=allow_firmware), _progress)
        code = rec.done(report)
    _emit(report, as_json, "plan (--check)" if check else "applied")
    raise typer.Exit(code)


@app.command()
def rollout(inventory: Path = INV, limit: Optional[list[str]] = LIMIT, domain: Optional[list[str]] = DOMAIN,
            as_json: bool = JSON,
            journal_dir: Path = JDIR_RUN, confirm_s: Optional[int] = typer.Option(
                None, "--confirm-s", parser=deferred(integer("--confirm-s", None, MAX_CONFIRM_S, "a window in seconds")),
                metavar="SECONDS", help="Switch commit-confirm window, seconds, at most "
                f"{MAX_CONFIRM_S} (default: derived from the expected verification time, at least 600; a shorter "
                "window than verification needs is refused)."),
            min_bw: Optional[float] = MIN_BW, max_lat: Optional[float] = MAX_LAT,
            min_bw_share: Optional[float] = MIN_BW_SHARE,
            rail: Optional[list[int]] = RAIL,
            allow_firmware: bool = FIRMWARE, junit: Optional[Path] = JUNIT, prom_file: Optional[Path] = PROM,
            report_json: Optional[Path] = REPORT_JSON, serial: Optional[str] = SERIAL,
            batch_by: Optional[str] = BATCH_BY,
            max_fail_percentage: Optional[int] = typer.Option(
                None, "--max-fail-percentage", metavar="0..100",
                parser=deferred(integer("--max-fail-percentage", 0, 100, "a percentage")),
                help="Per batch: halt when failed devices / batch nodes x 100 exceeds it (default 0)."),
            max_failed: Optional[int] = typer.Option(
                None, "--max-failed", metavar="N",
                parser=deferred(integer("--max-failed", 0, 1000000, "a count of devices")),
                help="Whole run: halt when more than N devices failed (default: no cap)."),
            settle_s: Optional[int] = typer.Option(None, "--settle-s",
                                                   parser=deferred(integer("--settle-s", 0, 3600, "seconds")),
                                                   metavar="SECONDS", help="Wait between a batch's apply and its "
                                                   "verification (default 0)."),
            on_regression: Optional[str] = typer.Option(None, "--on-regression", metavar="restore-batch|restore-all",
                                                        help="On a regression restore the batch (keep earlier "
                                                             "batches; default) or every batch."),
            no_incast: bool = typer.Option(False, "--no-incast", help="Skip the k-to-1 incast per changed leaf."),
            engine_name: str = typer.Option("nornir", "--engine", metavar="nornir|ansible",
                                            help="Drive the rollout with the Nornir fan-out (default) or through "
                                                 "playbooks/tune.yml with ansible-runner; same journal and report.")
            ) -> None:
    """Snapshot, then per batch (the policy's: inventory fabtune_rollout, flags): apply in a safe
    order, verify with RDMA tests (and an incast per changed leaf), confirm; on a regression restore
    the batch (or every batch) and halt.

    Exit 0 kept (or nothing to do), 1 rolled back or halted, 3 rollback failed, 4 only unreachable
    devices failed.
    Example: fabtune rollout -i inventory/lab --serial 1,50% --max-failed 1
    Example: fabtune rollout -i inventory/lab --domain sysctl --domain irq
    Example: fabtune rollout -i inventory/lab --engine ansible --serial 2 --report-json run.json
    """
    from tuning.rollout import engine

    with Recorder(_outputs(junit, prom_file, report_json), "rollout", inventory) as rec:
        raise_refused(journal_dir, confirm_s, min_bw, max_lat, min_bw_share, rail, max_fail_percentage, max_failed,
                      settle_s)
        if engine_name not in ("nornir", "ansible"):
            raise InputError("--engine", engine_name, "unknown engine; allowed: nornir, ansible")
        inv = _load(inventory)
        policy = _policy(inv, serial, batch_by=batch_by, max_fail_percentage=max_fail_percentage,
                         max_failed_devices=max_failed, settle_s=settle_s, on_regression=on_regression,
                         min_bw_gbps=min_bw, max_lat_us=max_lat, min_bw_share=min_bw_share,
                         incast_enabled=False if no_incast else None)
        th = _thresholds(rec, policy)
        opts = engine.Options(mode="rollout", limit=limit, journal_dir=journal_dir, confirm_s=confirm_s,
                              thresholds=th, rails=tuple(rail) if rail else None, allow_firmware=allow_firmware,
                              policy=policy, domains=_domains(domain))
        rec.select(inv.select(limit))
        if engine_name == "ansible":  # tuning/ansible_engine.py: flags it cannot honour are refused
            from tuning import ansible_engine
            ansible_engine.refuse_unsupported(rail=rail, batch_by=batch_by)
            report = ansible_engine.run(ansible_engine.AnsibleRun(
                inventory, policy, limit, opts.domains, journal_dir, confirm_s, allow_firmware=allow_firmware), _progress)
        else:
            report = engine.run(inv, opts, _progress)
        code = rec.done(report)
    _emit(report, as_json, "rollout")
    raise typer.Exit(code)


@app.command()
def verify(inventory: Path = INV, as_json: bool = JSON, journal_dir: Path = JDIR_RUN,
           min_bw: Optional[float] = MIN_BW, max_lat: Optional[float] = MAX_LAT,
           min_bw_share: Optional[float] = MIN_BW_SHARE, rail: Optional[list[int]] = RAIL,
           limit: Optional[list[str]] = LIMIT, junit: Optional[Path] = JUNIT, prom_file: Optional[Path] = PROM,
           report_json: Optional[Path] = REPORT_JSON,
           no_incast: bool = typer.Option(False, "--no-incast", help="Skip the k-to-1 incast per leaf (run when "
                                          "the inventory expects lossless RoCE and its policy enables it).")) -> None:
    """Run ib_write_bw and ib_read_lat between node pairs (leaf and spine paths) against the
    pass marks (the inventory's fabtune_rollout.thresholds, the flags overriding them, as rollout's)
    and the recorded baseline. Exit 1 if a pair fails. With --limit, only the named
    hosts or groups are proven: their NICs (a leaf: the NICs cabled to it), their leaves' uplinks
    and the spines, partners taken from the whole inventory. When the inventory expects lossless
    RoCE, a k-to-1 incast per leaf (of the selection) is judged too: loss, PFC pauses, CNPs, shares.

    Example: fabtune verify -i inventory/lab --limit node01 --json
    """
    from tuning.reports import verify_report
    from tuning.rollout.baseline import load_baseline
    from tuning.rollout.offline import verify_only

    with Recorder(_outputs(junit, prom_file, report_json), "verify", inventory) as rec:
        raise_refused(journal_dir, min_bw, max_lat, min_bw_share, rail)
        inv, t0 = _load(inventory), time.monotonic()
        th = _thresholds(rec, _policy(inv, min_bw_gbps=min_bw, max_lat_us=max_lat, min_bw_share=min_bw_share))
        ok, results, incasts = verify_only(inv, journal_dir, th, _progress, tuple(rail) if rail else None,
                                           limit or None, incast=not no_incast)
        code = rec.done(verify_report(ok, results, time.monotonic() - t0, incasts),
                        baseline=load_baseline(journal_dir, inv.path) or {})
    if as_json:
        print(json.dumps({"ok": ok, "pairs": results, "incast": incasts}, indent=2))
    else:
        out.print(verify_table(results, "verification"))
        for r in incasts:
            out.print(f"incast {r['incast']}: {r['verdict']}" + (f": {'; '.join(r['reasons'])}" if r["reasons"] else ""))
        out.print("PASS" if ok else "FAIL")
    raise typer.Exit(code)


@app.command()
def rollback(run_id: str = typer.Argument(..., help="Run id printed by apply/rollout (see `fabtune runs`)."),
             inventory: Optional[Path] = typer.Option(
                 None, "-i", "--inventory", parser=inventory_arg,
                 help="Optional: must be the run's own inventory (the journal names it)."),
             journal_dir: Path = JDIR, as_json: bool = JSON,
             force: bool = typer.Option(False, "--force", help="Roll back even where later runs changed the same "
                                        "settings (their changes to those settings are undone too)."),
             firmware: bool = typer.Option(False, "--firmware", help="Also put back NIC firmware / mlxconfig "
                                           "settings (kept by every other restore: a value put back is active "
                                           "only after the next reboot or mlxfwreset).")) -> None:
    """Restore every device a run touched, from the on-disk journal alone (connection facts and
    restore commands are journaled; today's inventory is not read). Refused when a later run
    changed the same settings and was not rolled back (the list is printed; --force overrides).

    NIC firmware / mlxconfig changes are kept unless --firmware is given.

    Example: fabtune rollback 20261130T101500-1a2b3c
    """
    from tuning.rollout.rollback import rollback_run

    report = rollback_run(journal_dir, run_id, inventory, force, _progress, firmware)
    _emit(report, as_json, "rollback: now -> restored to")


def _parse_context(pairs: list[str], named: dict[str, Optional[str]]) -> dict[str, str]:
    """``--context KEY=VALUE`` pairs plus the named shortcuts (``--bdf``...) as one context dict."""
    context: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError("--context", pair, "expected KEY=VALUE, e.g. --context local_cpus=16-31")
        context[key.strip().replace("-", "_")] = value.strip()
    context.update({k: v for k, v in named.items() if v is not None})
    return context


@app.command()
def runs(journal_dir: Path = JDIR, as_json: bool = JSON,
         last: int = typer.Option(20, "--last", parser=integer("--last", None, 10**6, "a count of runs", "1..1000000"),
                                  help="How many of the newest runs (1 or more).")) -> None:
    """List journaled runs (newest last): id, start time (UTC), duration, mode, inventory, outcome,
    change count and the devices each touched. `fabtune report RUN_ID` prints one again.

    Example: fabtune runs --last 5
    """
    from rich.table import Table

    from tuning.reports.history import rows as history_rows

    if last < 1:
        raise InputError("--last", str(last), "must be 1 or more")
    rows = history_rows(journal_dir, last) if journal_dir.is_dir() else []
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    t = Table(title=f"runs in {journal_dir}", title_justify="left")
    for col in ("run id", "started (UTC)", "seconds", "mode", "inventory", "outcome", "changes", "touched"):
        t.add_column(col, overflow="fold", no_wrap=col not in ("inventory", "touched"))
    for r in rows:
        outcome = r["outcome"] or ("unreadable" if r["stage"] == "unreadable"
                                   else f"not finished (running or killed) at stage {r['stage']}")
        t.add_row(r["run_id"], (r["started"] or "-").replace("T", " ")[:19], _or_dash(r["seconds"]), str(r["mode"]),
                  str(r["inventory"] or "-"), str(outcome), _or_dash(r["n_changes"]), ", ".join(r["touched"]) or "-")
    out.print(t)


def _or_dash(v: object) -> str:
    return "-" if v is None else str(v)


@app.command("report")
def report_cmd(run_id: str = typer.Argument(..., help="Run id printed by apply/rollout (see `fabtune runs`)."),
               journal_dir: Path = JDIR, as_json: bool = typer.Option(
                   False, "--json", help="Print the JSON run report (tuning/reports/report.schema.json)."),
               junit: Optional[Path] = JUNIT, prom_file: Optional[Path] = PROM,
               report_json: Optional[Path] = REPORT_JSON) -> None:
    """Print a past run again from its journal alone (changes, verification, restored devices,
    outcome), and write its JUnit XML, Prometheus textfile or JSON report. What a journal does
    not keep (a failed device's error text, findings, the pass marks) is said, not invented.
    Exit 0 printed, 2 no such run or an unreadable journal.

    Example: fabtune report 20261130T101500-1a2b3c --junit run.xml
    """
    from tuning.reports.history import load

    outputs = _outputs(junit, prom_file, report_json)
    rep, doc = load(journal_dir, run_id)
    outputs.write(doc)
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    _emit(rep, False, f"{rep.mode} run {rep.run_id} (from its journal)")


@app.command("parse")
def parse_cmd(tool: str = typer.Argument(..., help="Tool name, e.g. ib_write_bw, mlnx_qos, interrupts."),
              file: str = typer.Argument("-", help="Saved output, or - for stdin."),
              fmt: str = typer.Option("json", "--format", help="json or table."),
              bdf: Optional[str] = typer.Option(None, "--bdf", help="interrupts: the NIC's PCI address."),
              local_cpus: Optional[str] = typer.Option(None, "--local-cpus", help="interrupts: the NIC's local CPUs."),
              ipv4: Optional[str] = typer.Option(None, "--ipv4", help="show-gids, ibv_devinfo: the traffic's IPv4."),
              context: Optional[list[str]] = typer.Option(None, "--context", help="KEY=VALUE fact a finding needs "
                                                          "(repeatable), e.g. lossless_queues=3,4.")) -> None:
    """Print what fabtune understands of a saved tool output, with findings.

    Tools: ib_write_bw ib_read_bw ib_send_bw ib_write_lat ib_read_lat ib_send_lat rping
    nccl-tests mlnx_qos mlxconfig mlxfwmanager ibdev2netdev ibv_devinfo show-gids
    nvidia-smi-topo nvidia-smi-L nvidia-gpu-information interrupts lscpu numactl-H ethtool-S
    ethtool-a lspci-vvv cpupower-idle-info hw-counters rdma-statistic nv-show-qos-roce
    nv-show-interface sonic-pfc-counters sonic-queue-counters.

    Exit 0 parsed (a classified tool error included), 2 unreadable or a bad option.
    Example: fabtune parse interrupts saved/interrupts.txt --bdf 0000:c1:00.0 --local-cpus 16-31
    """
    from tuning.parsers import parse

    if fmt not in ("json", "table"):
        raise InputError("--format", "format", f"{fmt!r}; allowed: json, table")
    ctx = _parse_context(context or [], {"bdf": bdf, "local_cpus": local_cpus, "ipv4": ipv4})
    try:
        data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as e:
        raise InputError(file, "FILE", f"cannot read: {e.strerror}") from None
    result = parse(tool, data.decode("utf-8", errors="replace"), ctx or None)
    doc = result.model_dump(mode="json")
    if fmt == "json":
        print(json.dumps(doc, indent=2))
        return
    from tuning.report import parsed_table

    out.print(parsed_table(doc))


def _state_dir(inventory: Path, state_dir: Optional[Path]) -> Path:
    return state_dir or inventory / ".state"


def _running_state_dir(inventory: Path, state_dir: Optional[Path]) -> Path:
    """The state directory of a running lab. Raises InputError naming --state-dir when no lab runs there."""
    sd = _state_dir(inventory, state_dir)
    if not (sd / "fabric.json").is_file():
        raise InputError("--state-dir", str(sd), f"the lab is not running in {sd}; start it with "
                         f"`fabtune lab up -i {inventory}`")
    return sd


STATE = typer.Option(None, "--state-dir", parser=state_dir_arg, help="Lab state directory (default: INVENTORY/.state).")


from tuning.cli_topology import topology as topology_cmd  # noqa: E402  (its own room: tuning/cli_topology.py)

app.command("topology")(topology_cmd)


@lab_app.command("up")
def lab_up(inventory: Path = INV, state_dir: Optional[Path] = STATE) -> None:
    """Start the lab: 4 GPU nodes (SSH), 2 leaves and 1 spine (NVUE), untuned, listening on the
    ports INVENTORY names (so two labs on two inventories run side by side).

    Example: fabtune lab up -i inventory/lab
    """
    from tuning.lab import controller
    from tuning.lab.fabric import fabric_for_inventory

    sd = _state_dir(inventory, state_dir)
    controller.up(sd, fabric_for_inventory(existing_inventory(inventory)))
    _lab_status(sd)


@lab_app.command("status")
def lab_status(inventory: Path = INV, state_dir: Optional[Path] = STATE, as_json: bool = JSON) -> None:
    """Show every lab endpoint and whether it answers. Exit 1 if the lab is down.

    Example: fabtune lab status --json
    """
    sd = _state_dir(inventory, state_dir)
    ok = _lab_status(sd, as_json)
    raise typer.Exit(0 if ok else 1)


def _lab_status(sd: Path, as_json: bool = False) -> bool:
    from rich.table import Table

    from tuning.lab import controller

    st = controller.status(sd)
    if as_json:
        print(json.dumps(st, indent=2, default=str))
    else:
        t = Table(title=f"lab {sd}", title_justify="left")
        for col in ("name", "kind", "port", "up"):
            t.add_column(col)
        for e in st.get("endpoints", []):
            t.add_row(str(e["name"]), str(e["kind"]), str(e["port"]), "yes" if e["up"] else "NO")
        out.print(t)
    eps = st.get("endpoints", [])
    return bool(eps) and all(e["up"] for e in eps)


@lab_app.command("inject")
def lab_inject(target: str = typer.Argument(..., help="node01:mlx5_0 or leaf01:swp1"),
               kind: str = typer.Argument("degrade", help="degrade | down | clear | flap | lossy | pcie-width W "
                                          "(NODE:DEV); node: irqbalance | dcbx | gpu-xid N; switch: apply-fails | "
                                          "nvued-down | slow-apply SECONDS | (SWITCH:PORT) oper-mtu N"),
               value: Optional[str] = typer.Argument(None, help="SECONDS (slow-apply), MTU (oper-mtu), W (pcie-width) or N (gpu-xid)"),
               inventory: Path = INV, state_dir: Optional[Path] = STATE) -> None:
    """Inject a fault on a link (the fabric model applies it to every RDMA test crossing it)
    or on a switch (see tuning.lab.nvue_faults).

    Example: fabtune lab inject leaf01:swp1 degrade; fabtune lab inject leaf01 slow-apply 30
    """
    from tuning.lab.inject import inject

    sd = _running_state_dir(inventory, state_dir)
    inject(sd, target, kind, value)
    out.print(f"{kind}{'' if value is None else ' ' + value} on {target}")


@lab_app.command("reboot")
def lab_reboot(node: str = typer.Argument(..., help="a lab node, e.g. node01"),
               inventory: Path = INV, state_dir: Optional[Path] = STATE) -> None:
    """Power-cycle a lab node: live values drop back to power-on (NIC firmware makes its Next Boot
    values current, the boot loader's command line becomes /proc/cmdline), then boot runs what is
    persisted (modules-load.d, sysctl.d, and the ENABLED systemd units' ExecStart) as root over the
    node's SSH endpoint.

    Example: fabtune lab reboot node01
    """
    from tuning.lab.boot import reboot

    dev = {d.name: d for d in load_inventory(inventory).nodes}.get(node)
    if dev is None:
        raise InputError("NODE", "node", f"{node!r} is not a node of {inventory}")
    cmds = reboot(_running_state_dir(inventory, state_dir), node, dev.connection)
    out.print(f"{node} rebooted; boot ran: {'; '.join(cmds)}")


@lab_app.command("down")
def lab_down(inventory: Path = INV, state_dir: Optional[Path] = STATE) -> None:
    """Stop the lab (its state directory stays for inspection).

    Example: fabtune lab down
    """
    from tuning.lab import controller

    stopped = controller.down(_state_dir(inventory, state_dir))
    out.print("lab stopped" if stopped else "lab was not running")


@lab_app.command("reset")
def lab_reset(inventory: Path = INV, state_dir: Optional[Path] = STATE, as_json: bool = JSON) -> None:
    """Put the running lab back to power-on without restarting it: node files, switch revisions,
    injected faults and agents, the sudo policy (checked after; exit 1 if it is not at power-on).

    Example: fabtune lab reset -i inventory/lab
    """
    from tuning.lab import power_on

    done = power_on.reset(_state_dir(inventory, state_dir))
    if as_json:
        print(json.dumps(done))
    else:
        out.print(f"lab at power-on: {done['paths_restored']} node path(s) restored, "
                  f"{done['processes_stopped']} process(es) stopped, switches at revision "
                  + ", ".join(f"{name} {rev}" for name, rev in done["switches"].items()))


from tuning.cli_burnin import register as _register_burnin  # noqa: E402  (its own room: tuning/cli_burnin.py)

_register_burnin(app, lab_app)


def main() -> None:
    """Console entry point: usage errors (click) and fabtune errors print ONE line on stderr and exit
    with their code (2 for bad input, see :mod:`tuning.errors`), never a Rich box or a traceback."""
    try:
        code = app(prog_name="fabtune", standalone_mode=False)
    except click.NoArgsIsHelpError as e:
        print(e.ctx.get_help() if e.ctx else "", file=sys.stderr)
        sys.exit(e.exit_code)
    except click.UsageError as e:
        print(usage_line(e), file=sys.stderr)
        sys.exit(_error_code(2))
    except click.ClickException as e:
        print(f"fabtune: error: {' '.join(e.format_message().split())}", file=sys.stderr)
        sys.exit(_error_code(e.exit_code))
    except typer.Abort:
        print("fabtune: aborted", file=sys.stderr)
        sys.exit(1)
    except TuningError as e:
        hint = ""
        if isinstance(e, ConnectError) and "127.0.0.1" in str(e):
            hint = " (is the lab up? `fabtune lab up`)"
        elif isinstance(e, InputError) and e.file.startswith("--"):  # a flag's value: as click's usage errors
            hint = f" (see `fabtune {_command_words()}--help`)"
        print(f"fabtune: error: {e}{hint}", file=sys.stderr)  # one line, never wrapped
        sys.exit(_error_code(e.exit_code))
    sys.exit(code if isinstance(code, int) else 0)


def _command_words() -> str:
    """The command of this process's argv, with a trailing space (``rollout ``, ``lab up ``), or ''."""
    words: list[str] = []
    for a in sys.argv[1:]:
        if a.startswith("-") or len(words) == (2 if words[:1] == ["lab"] else 1):
            break
        words.append(a)
    return "".join(w + " " for w in words)


def _error_code(code: int) -> int:
    """An error's exit code: under ``plan --detailed-exitcode`` every error is 1, as 2 means drift
    there (:func:`tuning.reports.detailed_code`)."""
    from tuning.reports import detailed_code

    argv = sys.argv[1:]
    return detailed_code(code, argv[:1] == ["plan"] and "--detailed-exitcode" in argv)
