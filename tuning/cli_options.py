"""The options several ``fabtune`` commands share (typer), and what a run makes of them: the rollout
policy, the pass marks, the report files, the domains (:mod:`tuning.cli`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from tuning.cli_args import deferred, file_arg, integer, inventory_arg, journal_dir_arg, number, state_dir_arg
from tuning.errors import InputError
from tuning.reports import Outputs, Recorder, report_file
from tuning.rollout.journal import DEFAULT_DIR
from tuning.targets import domains as target_domains

INV = typer.Option(Path("inventory/lab"), "-i", "--inventory", parser=inventory_arg,
                   help="Ansible-format inventory directory.")
LIMIT = typer.Option(None, "--limit", "-l", help="Only these hosts or groups (repeatable; Ansible patterns: "
                                                  "node0*, leaves:!leaf02, gpu_nodes:&rack1).")
JSON = typer.Option(False, "--json", help="Print the result as JSON on stdout.")
DETAIL = typer.Option(False, "--detail", help="One row per setting however large the plan (a plan of more "
                      "than 40 changes prints one summary row per domain, unless --limit selects 32 devices "
                      "or fewer; --json always has every change).")
JDIR = typer.Option(DEFAULT_DIR, "--journal-dir", parser=journal_dir_arg,
                    help="Where run journals and the baseline live (yours, not group/world-writable).")
#: the same, for a command that writes reports: a refusal is raised in its body (cli_args.Refused)
JDIR_RUN = typer.Option(DEFAULT_DIR, "--journal-dir", parser=deferred(journal_dir_arg),
                        help="Where run journals and the baseline live (yours, not group/world-writable).")
#: every domain a run can be limited to (:func:`tuning.targets.domains`)
DOMAINS = target_domains()
DOMAIN = typer.Option(None, "--domain", "-d", help=f"Only these domains (repeatable): {', '.join(DOMAINS)}.")
RAIL = typer.Option(None, "--rail", parser=deferred(integer("--rail", 0, 31, "a rail")), metavar="0..31",
                    help="Verify on these rails only (an integer 0..31, repeatable; default: every rail).")
# The pass marks: None keeps the inventory policy's (fabtune_rollout.thresholds), see run_thresholds
MIN_BW = typer.Option(None, "--min-bw", parser=deferred(number("--min-bw")), metavar="GBPS",
                      help="Pass mark per pair, Gb/s, finite >= 0 (default: the policy's, 300).")
MAX_LAT = typer.Option(None, "--max-lat", parser=deferred(number("--max-lat")), metavar="US",
                       help="Pass mark per pair, typical latency us, finite >= 0 (default: the policy's, 10).")
MIN_BW_SHARE = typer.Option(None, "--min-bw-share", parser=deferred(number("--min-bw-share", 1, "a fraction of "
                            "line rate")), metavar="0..1", help="Pass mark per pair: share 0..1 of the slower "
                            "end's line rate (default: the policy's; none: not judged).")
FIRMWARE = typer.Option(False, "--allow-firmware", help="Push NIC firmware burns the profile pins "
                        "(firmware.version); without it a plan that burns firmware is refused (exit 2).")
OVERWRITE = typer.Option(False, "--allow-overwrite-files", help="Let a switch commit overwrite files the switch OS "
                         "manages that were edited by hand since its last save (NVUE lists them before `Are you sure? "
                         "[y/N]`); without it such a commit is refused, nothing applied on that switch.")
REBOOT = typer.Option(False, "--allow-reboot", help="Let Slurm reboot (scontrol reboot ASAP nextstate=RESUME, once "
                      "per node) the nodes whose pushed changes need a boot (kernel command line) before the batch "
                      "is verified: --engine slurm only; the playbooks' fabtune_allow_reboot (docs/burnin.md).")
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
STATE = typer.Option(None, "--state-dir", parser=state_dir_arg, help="Lab state directory (default: INVENTORY/.state).")


def run_policy(inv, serial: Optional[str] = None, **flags):
    """The run's rollout policy: the inventory's ``fabtune_rollout`` with the flags given (None:
    not given). Raises InputError naming the flag."""
    from tuning.model.policy import parse_serial

    return inv.policy.override(serial=parse_serial(serial) if serial is not None else None, **flags)


def run_thresholds(rec: Recorder, policy):
    """The run's pass marks (:class:`tuning.verify.runner.Thresholds`): the policy's
    ``thresholds`` (inventory ``fabtune_rollout.thresholds``, the flags already applied by
    :func:`run_policy`), recorded in ``rec``'s reports. One function for rollout and verify."""
    from dataclasses import asdict

    from tuning.verify.runner import Thresholds

    th = Thresholds(**policy.thresholds.model_dump())
    rec.ctx.thresholds = asdict(th)
    return th


def report_outputs(junit: Optional[Path], prom: Optional[Path], report_json: Optional[Path]) -> Outputs:
    """The report files asked for. Raises InputError when two name the same file."""
    return Outputs(junit=junit, prom=prom, json=report_json).check()


def chosen_domains(values: Optional[list[str]]) -> set[str] | None:
    """Validate ``--domain`` values. Raises InputError naming the allowed ones."""
    for v in values or []:
        if v not in DOMAINS:
            raise InputError("--domain", v, f"unknown domain; allowed: {', '.join(DOMAINS)}")
    return set(values) if values else None
