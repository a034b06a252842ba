"""``fabtune render``, ``plan``, ``apply``, ``rollout`` and ``verify``: the commands that read an
inventory and plan, push or prove its settings. Registered in :mod:`tuning.cli`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import typer

from tuning.cli_args import MAX_CONFIRM_S, deferred, integer, load_inventory, out_dir_arg, raise_refused
from tuning.cli_emit import emit, interrupted_summary, nccl_lines, out, progress
from tuning.cli_options import (BATCH_BY, DETAIL, DOMAIN, FIRMWARE, INV, JDIR_RUN, JSON, JUNIT, LIMIT, MAX_LAT, MIN_BW,
                                MIN_BW_SHARE, OVERWRITE, PROM, RAIL, REBOOT, REPORT_JSON, SERIAL, chosen_domains, report_outputs,
                                run_policy, run_thresholds)
from tuning.errors import InputError
from tuning.report import verify_table
from tuning.reports import EXIT_DRIFT, EXIT_OK, Recorder


def render(inventory: Path = INV, output: Path = typer.Option(..., "-o", "--output", parser=out_dir_arg,
                                                              help="Output directory.")) -> None:
    """Render every device's configuration into files, one per device (changes nothing).

    Example: fabtune render -i inventory/example-su -o /tmp/su-render
    """
    from tuning.rollout.offline import render_inventory

    skipped: list = []
    try:
        paths = render_inventory(load_inventory(inventory), output, skipped)
    except OSError as e:
        name = f"{Path(e.filename).name} " if e.filename else ""
        raise InputError("--output", str(output), f"cannot write {name}there: {e.strerror}") from None
    for name, why in skipped:
        out.print(f"{name}: not rendered: {why}")
    out.print(f"wrote {len(paths)} file(s) to {output}" + (f"; {len(skipped)} device(s) need the fabric" if skipped else ""))


def plan(inventory: Path = INV, limit: Optional[list[str]] = LIMIT, domain: Optional[list[str]] = DOMAIN,
         offline: bool = typer.Option(
        False, "--offline", help="Contact no device: show the desired settings only."),
         diff: bool = typer.Option(False, "--diff", help="Show file changes as unified diffs."),
         detail: bool = DETAIL, as_json: bool = JSON, detailed_exitcode: bool = typer.Option(
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
    from tuning.rollout.offline import offline_plan

    outputs = report_outputs(junit, prom_file, report_json)
    with Recorder(outputs, "plan", inventory, detailed=detailed_exitcode) as rec:
        if offline and detailed_exitcode:
            raise InputError("--detailed-exitcode", "--offline", "drift needs each device's current state, and an "
                             "offline plan reads none; drop --offline")
        inv, only = load_inventory(inventory), chosen_domains(domain)
        rec.select(inv.select(limit))
        policy = run_policy(inv, serial, batch_by=batch_by)  # checked offline too (an offline plan shows no batches)
        if offline:
            report = offline_plan(inv, limit, only)
        else:  # the engine (nornir, the SSH libraries) only for a plan that reads the devices
            from tuning.rollout import engine
            report = engine.run(inv, engine.Options(mode="plan", limit=limit, domains=only, policy=policy), progress)
        code = rec.done(report, (EXIT_DRIFT if report.n_changes else EXIT_OK) if detailed_exitcode else None)
    emit(report, as_json, "plan (offline: current state not read)" if offline else "plan", diff, detail, bool(limit))
    raise typer.Exit(code)


def apply(inventory: Path = INV, limit: Optional[list[str]] = LIMIT, domain: Optional[list[str]] = DOMAIN,
          check: bool = typer.Option(
        False, "--check", help="Dry run: same as plan."), detail: bool = DETAIL, as_json: bool = JSON,
          journal_dir: Path = JDIR_RUN,
          allow_firmware: bool = FIRMWARE, junit: Optional[Path] = JUNIT, prom_file: Optional[Path] = PROM,
          report_json: Optional[Path] = REPORT_JSON, allow_overwrite_files: bool = OVERWRITE) -> None:
    """Apply the inventory's settings (no verification; see rollout). A second run changes nothing.

    Example: fabtune apply -i inventory/lab --limit gpu_nodes
    """
    from tuning.rollout import engine

    with interrupted_summary(as_json, "applied"), \
            Recorder(report_outputs(junit, prom_file, report_json), "apply", inventory) as rec:
        raise_refused(journal_dir)
        inv = load_inventory(inventory)
        rec.select(inv.select(limit))
        report = engine.run(inv, engine.Options(mode="plan" if check else "apply", limit=limit,
                                                journal_dir=journal_dir, domains=chosen_domains(domain),
                                                allow_firmware=allow_firmware,
                                                allow_overwrite_files=allow_overwrite_files), progress)
        code = rec.done(report)
    emit(report, as_json, "plan (--check)" if check else "applied", detail=detail, limited=bool(limit))
    raise typer.Exit(code)


#: rollout's own options (the shared ones are in tuning/cli_options.py)
CONFIRM_S = typer.Option(None, "--confirm-s", parser=deferred(integer("--confirm-s", None, MAX_CONFIRM_S,
                                                                    "a window in seconds")),
                         metavar="SECONDS", help="Switch commit-confirm window, seconds, at most "
                         f"{MAX_CONFIRM_S} (default: derived from the expected verification time, at least 600; a "
                         "shorter window than verification needs is refused).")
MAX_FAIL_PERCENTAGE = typer.Option(None, "--max-fail-percentage", metavar="0..100",
                                   parser=deferred(integer("--max-fail-percentage", 0, 100, "a percentage")),
                                   help="Per batch: halt when failed devices / batch nodes x 100 exceeds it "
                                        "(default 0).")
MAX_FAILED = typer.Option(None, "--max-failed", metavar="N",
                          parser=deferred(integer("--max-failed", 0, 1000000, "a count of devices")),
                          help="Whole run: halt when more than N devices failed (default: no cap).")
SETTLE_S = typer.Option(None, "--settle-s", parser=deferred(integer("--settle-s", 0, 3600, "seconds")),
                        metavar="SECONDS", help="Wait between a batch's apply and its verification (default 0).")
ON_REGRESSION = typer.Option(None, "--on-regression", metavar="restore-batch|restore-all",
                             help="On a regression restore the batch (keep earlier batches; default) or every batch.")
NO_INCAST_LEAF = typer.Option(False, "--no-incast", help="Skip the k-to-1 incast per changed leaf.")
ENGINE = typer.Option("nornir", "--engine", metavar="nornir|ansible|slurm|k8s",
                      help="Drive the rollout with the Nornir fan-out (default), through "
                           "playbooks/tune.yml with ansible-runner, with the nodes' writes made on the nodes "
                           "by Slurm (srun fabtune node apply, each batch held and drained; $SLURM_CONF), or "
                           "by each node's fabtune agent on Kubernetes (each batch held by a NodeMaintenance; "
                           "$FABTUNE_K8S_SERVER, $FABTUNE_K8S_TOKEN_FILE, else in-cluster); same journal and "
                           "report. Example: fabtune rollout -i /shared/inv --journal-dir /shared/j --engine slurm; "
                           "fabtune rollout -i /etc/fabtune/inventory --journal-dir /var/lib/fabtune/journal "
                           "--engine k8s (the agents' journal folder)")


def rollout(inventory: Path = INV, limit: Optional[list[str]] = LIMIT, domain: Optional[list[str]] = DOMAIN,
            as_json: bool = JSON, journal_dir: Path = JDIR_RUN, confirm_s: Optional[int] = CONFIRM_S,
            min_bw: Optional[float] = MIN_BW, max_lat: Optional[float] = MAX_LAT,
            min_bw_share: Optional[float] = MIN_BW_SHARE, rail: Optional[list[int]] = RAIL,
            allow_firmware: bool = FIRMWARE, junit: Optional[Path] = JUNIT, prom_file: Optional[Path] = PROM,
            report_json: Optional[Path] = REPORT_JSON, serial: Optional[str] = SERIAL,
            batch_by: Optional[str] = BATCH_BY, max_fail_percentage: Optional[int] = MAX_FAIL_PERCENTAGE,
            max_failed: Optional[int] = MAX_FAILED, settle_s: Optional[int] = SETTLE_S,
            on_regression: Optional[str] = ON_REGRESSION, no_incast: bool = NO_INCAST_LEAF, engine_name: str = ENGINE,
            allow_reboot: bool = REBOOT, detail: bool = DETAIL, allow_overwrite_files: bool = OVERWRITE) -> None:
    """Snapshot, then per batch (the policy's: inventory fabtune_rollout, flags): apply in a safe
    order, verify with RDMA tests (and an incast per changed leaf), confirm; on a regression restore
    the batch (or every batch) and halt.

    Exit 0 kept (or nothing to do), 1 rolled back or halted, 2 bad input or setup (nothing pushed),
    3 rollback failed, 4 only unreachable devices failed, 130 stopped by Ctrl-C (restored).
    Example: fabtune rollout -i inventory/lab --serial 1,50% --max-failed 1 --domain sysctl
    Example: fabtune rollout -i inventory/lab --engine ansible --serial 2 --report-json run.json
    """
    from tuning.rollout import engine

    with interrupted_summary(as_json, "rollout"), \
            Recorder(report_outputs(junit, prom_file, report_json), "rollout", inventory) as rec:
        raise_refused(journal_dir, confirm_s, min_bw, max_lat, min_bw_share, rail, max_fail_percentage, max_failed,
                      settle_s)
        _known_engine(engine_name, allow_reboot)
        refuse_rail_on_sms(inv := load_inventory(inventory), limit, rail)
        policy = run_policy(inv, serial, batch_by=batch_by, max_fail_percentage=max_fail_percentage,
                            max_failed_devices=max_failed, settle_s=settle_s, on_regression=on_regression,
                            min_bw_gbps=min_bw, max_lat_us=max_lat, min_bw_share=min_bw_share,
                            incast_enabled=False if no_incast else None)
        opts = engine.Options(mode="rollout", limit=limit, journal_dir=journal_dir, confirm_s=confirm_s, policy=policy,
                              thresholds=run_thresholds(rec, policy), rails=tuple(rail) if rail else None,
                              allow_firmware=allow_firmware, allow_reboot=allow_reboot, domains=chosen_domains(domain),
                              allow_overwrite_files=allow_overwrite_files)
        rec.select(inv.select(limit))
        report = _drive(engine_name, inventory, inv, opts, rail, batch_by)
        code = rec.done(report)
    emit(report, as_json, "rollout", detail=detail, limited=bool(limit))
    raise typer.Exit(code)


def refuse_rail_on_sms(inv, limit: Optional[list[str]], rail: Optional[list[int]]) -> None:
    """Raises InputError (exit 2, before any device is reached) when ``--rail`` comes with a selection of
    subnet managers only: a rail picks the RoCE NICs whose node pairs (and a switch's cabled NICs) are
    measured, while an SM's InfiniBand checks go by partition, so the flag would select nothing and be
    silently ignored."""
    chosen = inv.select(limit) if rail else []
    if chosen and all(d.kind.name == "sm" for d in chosen):
        names = ", ".join(d.name for d in chosen)
        raise InputError("--rail", ",".join(map(str, rail)), f"the selection ({names}) holds subnet managers only: "
                         "a rail selects RoCE node pairs, an SM is verified per partition; drop --rail or select nodes")


def _known_engine(name: str, allow_reboot: bool = False) -> None:
    """Raises InputError unless ``name`` is ``nornir``, ``ansible``, ``slurm`` or ``k8s``, and ``--allow-reboot``
    comes with ``slurm`` (the only engine that reboots in a rollout: tuning/slurm_reboot.py)."""
    if name not in ("nornir", "ansible", "slurm", "k8s"):
        raise InputError("--engine", name, "unknown engine; allowed: nornir, ansible, slurm, k8s")
    if allow_reboot and name != "slurm":
        raise InputError("--allow-reboot", name, "only --engine slurm reboots nodes in a rollout (the playbooks: "
                         "-e fabtune_allow_reboot=true); allowed: --engine slurm")


def _drive(engine_name: str, inventory: Path, inv, opts, rail: Optional[list[int]], batch_by: Optional[str]):
    """Run the rollout ``opts`` describe with the engine named (nornir, ansible, slurm, k8s); its RunReport."""
    from tuning.rollout import engine

    if engine_name == "ansible":  # tuning/ansible_engine.py: flags it cannot honour are refused
        from tuning import ansible_engine
        ansible_engine.refuse_unsupported(rail=rail, batch_by=batch_by)
        return ansible_engine.run(ansible_engine.AnsibleRun(
            inventory, opts.policy, opts.limit, opts.domains, opts.journal_dir, opts.confirm_s,
            allow_firmware=opts.allow_firmware, allow_overwrite_files=opts.allow_overwrite_files), progress)
    if engine_name == "slurm":  # tuning/slurm_engine.py: the nodes' writes through srun
        from tuning import slurm_engine
        return slurm_engine.run(inv, opts, progress)
    if engine_name == "k8s":  # tuning/k8s/engine.py: the nodes' writes by their agents, batches held by NodeMaintenances
        from tuning.k8s import engine as k8s_engine
        return k8s_engine.run(inv, opts, progress)
    return engine.run(inv, opts, progress)


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
    Each InfiniBand subnet manager of the selection is verified as a rollout's gate does: every
    partition the inventory defines, on its member ports' pkey tables and path records (an SM whose
    inventory defines none fails: nothing to verify).

    --json prints the report document --report-json writes (schema tuning/reports/report.schema.json:
    pairs, incast, verify_ok, outcome, exit_code).

    Example: fabtune verify -i inventory/lab --limit node01 --json
    """
    from tuning.reports import verify_report
    from tuning.rollout.baseline import load_baseline
    from tuning.rollout.verify_run import verify_only

    with Recorder(report_outputs(junit, prom_file, report_json), "verify", inventory) as rec:
        raise_refused(journal_dir, min_bw, max_lat, min_bw_share, rail)
        inv, t0 = load_inventory(inventory), time.monotonic()
        refuse_rail_on_sms(inv, limit, rail)
        th = run_thresholds(rec, run_policy(inv, min_bw_gbps=min_bw, max_lat_us=max_lat,
                                            min_bw_share=min_bw_share))
        got = verify_only(inv, journal_dir, th, progress, tuple(rail) if rail else None, limit or None,
                          incast=not no_incast)
        code = rec.done(verify_report(got, time.monotonic() - t0), baseline=load_baseline(journal_dir, inv.path) or {})
    if as_json:  # the one report document, as --report-json writes it (tuning/reports/report.schema.json)
        print(json.dumps(rec.document(), indent=2, default=str))
    else:
        _verify_text(got)
    raise typer.Exit(code)


def _verify_text(got) -> None:
    """A stand-alone verification for people: the pairs' table (none on an IB-only inventory), each
    incast, nccl-tests job and IB check with its evidence (smpquery, saquery), then PASS or FAIL."""
    from tuning.verify import ib_sm

    if got.pairs or not got.ib:
        out.print(verify_table(got.pairs, "verification"))
    lines = [f"incast {r['incast']}: {r['verdict']}" + (f": {'; '.join(r['reasons'])}" if r["reasons"] else "")
             for r in got.incast]
    lines += nccl_lines(got.nccl) + ib_sm.lines(got.ib)
    out.print("\n".join(lines + ["PASS" if got.ok else "FAIL"]), markup=False)
