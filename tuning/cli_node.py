"""``fabtune node collect | apply | verify | restore | check``: one node's part of a run, done ON the node (node-local mode,
issue 23): a scheduler (``srun``, a DaemonSet) starts it there, and it reaches the node through the
local shell instead of the controller's SSH. The run is the controller's: begun by a front end
(:func:`tuning.rollout.steps.begin`, which holds the inventory's lock, plans every device and
writes the journal), so the node pushes exactly the stage a front end pushes
(:func:`tuning.rollout.steps.push`: collect, plan, journal ``pushing`` before the first write,
apply with read back, restored at once on failure) into the same journal (a shared folder), and
prints a JSON result the controller aggregates. ``node collect`` is the read a front end plans
from: the node's state document (:mod:`tuning.node_local_state`). Registered in :mod:`tuning.cli`.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Optional

import typer

from tuning.cli_args import load_inventory
from tuning.cli_emit import out
from tuning.cli_options import DOMAIN, FIRMWARE, INV, JDIR, JSON, chosen_domains
from tuning.errors import InputError
from tuning.transport.base import SYSROOT_ENV

NODE = typer.Option(None, "--node", help="This node's inventory name (default: $SLURMD_NODENAME, else the "
                                         "short host name).")
RUN_ID = typer.Option(None, "--run-id", help="The run the controller began (its journal's run id).")
PLAN = typer.Option(None, "--plan", help="A `fabtune plan --json` report (or the plan a front end wrote): push "
                                         "exactly this node's changes in it, or nothing when the node's own plan "
                                         "differs (exit 1, nothing written).")
SYSROOT = typer.Option(None, "--sysroot", envvar=SYSROOT_ENV,
                       help=f"Where this process sees the node's filesystem (default: ${SYSROOT_ENV}, else the "
                            "inventory's fabtune_sysroot; a pod mounting the host at /host: /host).")


def this_node(inv, node: Optional[str]):
    """The inventory node this process runs on: ``node``, else ``$SLURMD_NODENAME`` (Slurm sets it in
    every task), else the short host name.

    Raises:
        InputError: not a name of the inventory's nodes (names ``--node`` and how it was found).
    """
    from tuning.model.grammar import check_host_name

    found = node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    how = "--node" if node else ("$SLURMD_NODENAME" if os.environ.get("SLURMD_NODENAME") else "the host name")
    try:
        name = check_host_name(found)
    except ValueError as e:
        raise InputError("--node", str(found)[:60], f"{how}: {e}") from None
    dev = next((d for d in inv.nodes if d.name == name), None)
    if dev is None:
        raise InputError("--node", name, f"{how} names no node of {inv.path}; pass --node NAME")
    return dev


def node_collect(inventory: Path = INV, node: Optional[str] = NODE, domain: Optional[list[str]] = DOMAIN,
                 sysroot: Optional[str] = SYSROOT, as_json: bool = JSON) -> None:
    """Read this node's settings from the node itself (no SSH): the same one-round-trip read as the
    controller's collect (:func:`tuning.node.collect` through the local shell), printed as the
    node's state document (:mod:`tuning.node_local_state`), which a front end plans from. Writes
    nothing. Exit 0 read, 2 bad input or an unreadable tool output, 4 the node's shell did not answer.

    Example: srun --nodelist=node01,node02 --ntasks-per-node=1 fabtune node collect -i /shared/inv --json
    """
    from tuning.node_local_state import state_doc
    from tuning.rollout.session import open_target

    dev = this_node(load_inventory(inventory, lint=False), node)
    domains = chosen_domains(domain)
    target = open_target(dev, here=_sysroot(sysroot) or True)
    try:
        state = target.collect(domains)
    finally:
        target.close()
    doc = state_doc(dev.name, state, domains)
    if as_json:
        print(json.dumps(doc, separators=(",", ":")))
    else:
        out.print(f"{dev.name}: read {sum(len(v) for v in state.current.values())} setting(s) of "
                  f"{', '.join(sorted(state.current))}")


def node_apply(inventory: Path = INV, node: Optional[str] = NODE, run_id: Optional[str] = RUN_ID,
               journal_dir: Path = JDIR, domain: Optional[list[str]] = DOMAIN,
               check: bool = typer.Option(False, "--check", help="Plan only: print this node's changes, "
                                                                 "write nothing (no run needed)."),
               allow_firmware: bool = FIRMWARE, plan: Optional[Path] = PLAN, sysroot: Optional[str] = SYSROOT,
               as_json: bool = JSON) -> None:
    """Push this node's part of a run the controller began, from the node itself (no SSH): read,
    plan, journal before the first write, apply with read back; a failed push is restored at once.
    With --plan FILE the node's own plan must equal FILE's changes for it (domain, key, before,
    after), else nothing is written: what was planned is exactly what is pushed.
    Exit 0 done (or nothing to change), 1 the push failed (restored at once) or the node is not as
    planned (nothing written), 2 bad input, 3 the restore failed too (`fabtune node restore` or
    `fabtune rollback RUN_ID`), 4 the node's shell did not answer.

    Example: srun --nodelist=node01 fabtune node apply -i /shared/inv --run-id 20261203T1500-ab12 --plan plan.json
    """
    from tuning.rollout import plan_file, steps

    inv = load_inventory(inventory, lint=False)
    dev = this_node(inv, node)
    if not check and not run_id:
        raise InputError("--run-id", "-", "a push belongs to a run the controller began; pass its --run-id "
                         "(or --check to plan only)")
    domains = chosen_domains(domain)
    expect = plan_file.read(plan, dev.name, run_id, domains) if plan is not None else None
    opts = steps.StepOptions(journal_dir=journal_dir, domains=domains, check=check,
                             allow_firmware=allow_firmware, expect=expect)
    res = steps.push(dev, inv.policy, opts, run_id, here=_sysroot(sysroot) or True)
    doc = {"command": "node apply", "node": dev.name, "run_id": run_id, "check": check, **res}
    if as_json:
        print(json.dumps(doc, indent=2, default=str))
    else:
        verb = "would change" if check else ("changed" if res["pushed"] else "nothing to change:")
        out.print(f"{dev.name}: {verb} {len(res['changes'])} setting(s)" if res["changes"] or check
                  else f"{dev.name}: nothing to change")
        for c in res["changes"]:
            out.print(f"  {c.get('key')}: {c.get('before')} -> {c.get('after')}")


def node_verify(inventory: Path = INV, node: Optional[str] = NODE, domain: Optional[list[str]] = DOMAIN,
                plan: Optional[Path] = typer.Option(None, "--plan", help="A `fabtune plan --json` report (or a front "
                                                    "end's plan): check that each of this node's changes in it is in "
                                                    "force."),
                sysroot: Optional[str] = SYSROOT, as_json: bool = JSON) -> None:
    """Check from the node itself, reading only, that its settings are as planned: with --plan FILE,
    every change FILE plans for this node reads its planned value (a kept rollout, or one a reboot
    or a person undid); without it, the inventory has nothing left to change here. One read round
    trip through the local shell, no SSH, nothing written. Exit 0 in force, 1 not (each setting with
    what it reads), 2 bad input, 4 the node's shell did not answer.

    Example: srun --nodelist=node01,node02 --ntasks-per-node=1 fabtune node verify -i /shared/inv --plan plan.json
    """
    from tuning import node as node_mod
    from tuning.node.base import ABSENT
    from tuning.rollout import plan_file
    from tuning.rollout.session import open_target

    dev = this_node(load_inventory(inventory, lint=False), node)
    domains = chosen_domains(domain)
    expect = plan_file.read(plan, dev.name, None, domains, need=True) if plan is not None else None
    target = open_target(dev, here=_sysroot(sysroot) or True)
    try:
        state = target.collect(domains)
        own = target.plan(state, domains)  # also with a plan: a read that failed is said as such, not as drift
    finally:
        target.close()
    if expect is None:
        wrong = [{"domain": c.domain, "key": c.key, "want": c.after, "have": c.before} for c in own]
        if not (checked := sum(len(v) for v in state.current.values())):  # a check of nothing fails
            raise InputError("--domain", ",".join(sorted(domains or ())) or "-", "no setting read: nothing to check")
    else:
        by_name = {d.name: d for d in node_mod.domains()}
        wrong = plan_file.drift(expect, state.current, lambda d, h, w: by_name[d].same(h, w), ABSENT)
        checked = len(expect)
    what = "planned change(s)" if expect is not None else "setting(s) against the inventory"
    _say({"command": "node verify", "node": dev.name, "plan": str(plan) if plan else None, "checked": checked,
          "in_force": not wrong, "drift": wrong}, as_json, plan_file.verdict(dev.name, checked, what, wrong))
    if wrong:
        raise typer.Exit(1)


def node_restore(node: Optional[str] = NODE, run_id: str = typer.Option(..., "--run-id", help="The run to undo."),
                 journal_dir: Path = JDIR, sysroot: Optional[str] = SYSROOT, as_json: bool = JSON) -> None:
    """Put this node back to what the run's journal recorded before it wrote, from the node itself:
    the journal alone (its record's connection facts, each change's before value), no inventory.
    Exit 0 restored (or nothing to restore), 2 bad input, 3 the restore failed.

    Example: srun --nodelist=node01 fabtune node restore --run-id 20261203T1500-ab12 --journal-dir /shared/j
    """
    from tuning.rollout.journal import Journal
    from tuning.rollout.journal_check import check_run_id
    from tuning.rollout.rollback import restore_touched
    from tuning.targets import local_target_from_record

    try:
        j = Journal.load(journal_dir, check_run_id(run_id, "--run-id"))
    except InputError as e:  # the journal's own words name RUN_ID; this command's flag is --run-id
        raise InputError("--run-id", run_id[:60], e.problem) from None
    j.shared = True  # other nodes of the run write their records into the same journal
    name = _record_name(j, node)
    target = local_target_from_record(name, j.device(name), _sysroot(sysroot))
    target.open()
    try:
        done = restore_touched(j, {name: target}, lambda m: None, only={name})
    finally:
        target.close()
    doc = {"command": "node restore", "node": name, "run_id": run_id, "restored": done}
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        out.print(f"{name}: restored" if done else f"{name}: nothing to restore (the run left it unchanged)")


def node_check(inventory: Path = INV, node: Optional[str] = NODE,
               passive: bool = typer.Option(False, "--passive", help="Slurm's HealthCheckProgram: the gate's checks and "
                                            "the local health read; drain a failing node (fabtune: reason), resume "
                                            "a passing one that a health check drained."),
               prolog: bool = typer.Option(False, "--prolog", help="Slurm's Prolog: the checks a job needs (port ACTIVE, "
                                           "RoCE v2 GID, MTU, PFC, trust); one line on stderr when one fails."),
               sysroot: Optional[str] = SYSROOT,
               state: Optional[Path] = typer.Option(None, "--state", help="--passive: the file keeping the counters "
                                                    "of the previous check (default: var/lib/fabtune/node-check.json "
                                                    "under the sysroot); counters are judged on what they rose since."),
               as_json: bool = JSON) -> None:
    """Check this node from itself, reading only (no RDMA traffic), for Slurm's hooks: --passive
    (HealthCheckProgram: drains a failing node through scontrol with a fabtune: reason, never
    touching another's drain; resumes a passing node only from a health check's own drain; NIC
    counters judged on what they rose since the previous check, kept in --state) or
    --prolog (a job's gate: Slurm drains the node and requeues the job on a non-zero exit).
    Exit 0 healthy, 1 unhealthy (drained, or left to another's drain), 2 bad input, 4 could not read
    (or the --state file could not be written).

    Example: HealthCheckProgram=/usr/local/bin/fabtune-health (a script: exec fabtune node check --passive -i /shared/inv)
    """
    from tuning.burnin import node_check as nc

    if passive == prolog:
        raise InputError("--passive", "-", "give exactly one of --passive (HealthCheckProgram) and --prolog (Prolog)")
    dev = this_node(load_inventory(inventory, lint=False), node)
    root = _sysroot(sysroot)
    if prolog:
        problems = nc.gate(dev, root)
        if problems:
            raise nc.NotReady(f"not ready for a job: {'; '.join(problems)}", host=dev.name)
        _say({"command": "node check", "mode": "prolog", "node": dev.name, "problems": []}, as_json, f"{dev.name}: ready")
        return
    raise typer.Exit(_passive(dev, root, state, as_json))


def _passive(dev, root: str | None, state: Optional[Path], as_json: bool) -> int:
    """Run the passive check (:func:`tuning.burnin.node_check.passive`), print its result (JSON or one line)
    and, on stderr, each scontrol failure and a state file not written; returns the exit code."""
    from tuning.burnin import node_check as nc

    v = nc.passive(dev, root, state=state)
    doc = {"command": "node check", "mode": "passive", "node": dev.name, "healthy": not v.problems,
           "problems": v.problems, "drain": v.drain, "undrain": v.undrain, "counters": v.counters,
           "run_id": v.doc["run_id"]}
    _say(doc, as_json, _passive_line(v))
    if v.counters["save_error"]:
        print(f"fabtune: error: {v.counters['save_error']}", file=sys.stderr)
    for what, res in (("drain", v.drain), ("resume", v.undrain)):
        for why in ((res or {}).get("failed") or {}).values():  # scontrol failed: said, never taken as done
            print(f"fabtune: error: {what} failed: {why}", file=sys.stderr)
    return v.exit_code


def _passive_line(v) -> str:
    """One line of a passive check: healthy (resumed or not) or what is wrong and what became of the drain."""
    if not v.problems:
        unjudged = "" if v.counters["judged"] else "; counters not judged (no previous read)"
        return f"{v.node}: healthy" + ("; resumed (a health check had drained it)" if v.undrain["resumed"] else
                                       "; NOT resumed (scontrol failed)" if v.undrain["failed"] else "") + unjudged
    d = v.drain
    act = ("drained" if d["drained"] else f"left alone ({d['left'][v.node]})" if v.node in d["left"]
           else "NOT drained (the drain failed)")
    return f"{v.node}: unhealthy, {act}: {'; '.join(v.problems)}"


def _say(doc: dict, as_json: bool, line: str) -> None:
    print(json.dumps(doc, indent=2, default=str) if as_json else line)  # one line, never wrapped (a log reads it)


def _sysroot(value: Optional[str]) -> str | None:
    """A ``--sysroot`` checked by the path grammar (it reaches the node's shell commands). Raises InputError."""
    if value is None:
        return None
    from tuning.model.grammar import check_path

    try:
        return check_path(value, parent_ok=False)
    except ValueError as e:
        raise InputError("--sysroot", value[:60], str(e)) from None


def _record_name(j, node: Optional[str]) -> str:
    """This node's name in the journal ``j`` (as :func:`this_node` finds it). Raises InputError."""
    from tuning.model.grammar import check_host_name

    found = node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    try:
        name = check_host_name(found)
    except ValueError as e:
        raise InputError("--node", str(found)[:60], str(e)) from None
    if not isinstance(j.data.get("devices", {}).get(name), dict):
        raise InputError("--node", name, f"run {j.run_id} holds no device called {name}; pass --node NAME")
    return name


def register(app: typer.Typer) -> None:
    """Add ``fabtune node collect|apply|verify|restore|check`` to the ``fabtune`` app."""
    node_app = typer.Typer(help="One node's part of a run, done on the node itself (under srun or a DaemonSet).",
                           no_args_is_help=True)
    node_app.command("collect")(node_collect)
    node_app.command("apply")(node_apply)
    node_app.command("verify")(node_verify)
    node_app.command("restore")(node_restore)
    node_app.command("check")(node_check)
    app.add_typer(node_app, name="node")
