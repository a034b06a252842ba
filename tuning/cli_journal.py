"""``fabtune rollback``, ``runs`` and ``report``: the commands that read the run journals (a run is
restored, listed or printed again from its journal alone). Registered in :mod:`tuning.cli`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from tuning.cli_args import integer, inventory_arg
from tuning.cli_emit import emit, out, progress
from tuning.cli_options import JDIR, JSON, JUNIT, PROM, REPORT_JSON, report_outputs
from tuning.errors import InputError


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

    NIC firmware / mlxconfig changes are kept unless --firmware is given. A run through Slurm or
    Kubernetes whose controller was killed in a batch left its holds: once the nodes are restored,
    what the journal names is ended (Slurm: scancel, resume the nodes still drained by this run;
    Kubernetes, through $FABTUNE_K8S_SERVER as the run reached it: its NodeMaintenances released,
    its ConfigMaps deleted).

    Exit 0 restored (or nothing to restore), 1 a hold could not be ended, 2 bad input, 3 a restore
    failed (the holds stay: no job lands on a node not put back).

    Example: fabtune rollback 20261130T101500-1a2b3c
    """
    from tuning.errors import TuningError
    from tuning.rollout.rollback import rollback_run

    report = rollback_run(journal_dir, run_id, inventory, force, progress, firmware)
    left = _end_holds(journal_dir, run_id, as_json)
    # what a rollback did, setting by setting (now -> restored to) for a run of up to 32 devices
    emit(report, as_json, "rollback: now -> restored to", limited=True)
    if left:
        raise TuningError(f"holds of run {run_id} not ended (still in its journal; run `fabtune rollback "
                          f"{run_id}` again): {'; '.join(left)[:600]}")


def _end_holds(journal_dir: Path, run_id: str, as_json: bool) -> list[str]:
    """End what the run's journal says it still holds outside its devices (Slurm jobs and drains,
    NodeMaintenances, ConfigMaps), say which ended (before the outcome line, whose "nothing to roll
    back" is about settings), and return those that could not be ended."""
    from tuning import slurm_holds
    from tuning.k8s import leftovers
    from tuning.reports.history import holds_left
    from tuning.rollout.journal import Journal

    j = Journal.load(journal_dir, run_id)
    held = holds_left(j.data)
    left = slurm_holds.end_journaled(j, progress)
    if j.data.get(leftovers.JOURNAL_KEY):
        left += leftovers.end_journaled(j, progress)
    ended = [h for h in held if h not in holds_left(Journal.load(journal_dir, run_id).data)]
    if ended and not as_json:
        out.print(f"ended what run {run_id} held outside its devices: {'; '.join(ended)}", markup=False, highlight=False,
                  soft_wrap=True)
    return left


def runs(journal_dir: Path = JDIR, as_json: bool = JSON,
         last: int = typer.Option(20, "--last", parser=integer("--last", None, 10**6, "a count of runs", "1..1000000"),
                                  help="How many of the newest runs (1 or more).")) -> None:
    """List journaled runs (newest last): id, start time (UTC), duration, mode (with the engine where
    not SSH: slurm, k8s, ansible), inventory, outcome, change count, the devices each touched and,
    when a killed run left any, what it still holds (Slurm jobs and allocations asked for,
    NodeMaintenances, ConfigMaps: `fabtune rollback RUN_ID` ends them). `fabtune report RUN_ID` prints one again.

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
    # the run id is what `fabtune rollback` takes and the start time what a person looks for: never cut;
    # what a killed run still holds has a column of its own that wraps (in the outcome it squeezed the rest out)
    holds = any(r["holds"] for r in rows)
    widths = {"run id": max((len(r["run_id"]) for r in rows), default=6), "started (UTC)": 19, "inventory": 16}
    for col in ("run id", "started (UTC)", "seconds", "mode", "inventory", "outcome", "changes", "touched") + \
            (("still holds (fabtune rollback RUN_ID ends them)",) if holds else ()):
        t.add_column(col, overflow="fold", no_wrap=col in ("run id", "started (UTC)", "seconds", "mode", "outcome",
                                                              "changes"), min_width=widths.get(col))
    for r in rows:
        outcome = r["outcome"] or ("unreadable" if r["stage"] == "unreadable"
                                   else f"not finished (running or killed) at stage {r['stage']}")
        mode = f"{r['mode']} ({r['engine']})" if r["engine"] not in (None, "ssh") else str(r["mode"])
        t.add_row(r["run_id"], (r["started"] or "-").replace("T", " ")[:19], _or_dash(r["seconds"]), mode,
                  str(r["inventory"] or "-"), str(outcome), _or_dash(r["n_changes"]), ", ".join(r["touched"]) or "-",
                  *(["; ".join(r["holds"]) or "-"] if holds else []))
    out.print(t)


def _or_dash(v: object) -> str:
    return "-" if v is None else str(v)


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

    outputs = report_outputs(junit, prom_file, report_json)
    rep, doc = load(journal_dir, run_id)
    outputs.write(doc)
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    emit(rep, False, f"{rep.mode} run {rep.run_id} (from its journal)", limited=True)
