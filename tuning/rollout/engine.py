"""The rollout engine: one code path for plan, apply and rollout (STYLE.md section 3).

Stages: VALIDATE -> COLLECT -> PLAN -> (stop: plan) -> [BASELINE] -> APPLY -> [VERIFY] ->
CONFIRM or RESTORE. Every device's ``before`` values are journaled before the first write; on
any failure (a command, a switch commit, verification) every touched device is restored and
the run says so. Switch commits use commit-confirm and are confirmed only after verification.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tuning import node as node_mod
from tuning.errors import RollbackError, TuningError
from tuning.inventory import Device, Inventory
from tuning.rollout import switch_ops
from tuning.rollout.fanout import fan_out, nornir_for, outcomes
from tuning.rollout.journal import DEFAULT_DIR, TOUCHED, Journal, save_baseline
from tuning.transport.ssh import SshHost
from tuning.verify.pairs import select_pairs
from tuning.verify.runner import PairResult, Thresholds, as_baseline, verify

Progress = Callable[[str], None]


@dataclass
class Options:
    """How to run. ``mode``: plan | apply | rollout. ``confirm_s``: switch commit-confirm window (s)."""

    mode: str = "plan"
    limit: list[str] | None = None
    journal_dir: Path = DEFAULT_DIR
    confirm_s: int = 600
    verify: bool = True
    thresholds: Thresholds = field(default_factory=Thresholds)
    workers: int = 20
    domains: set[str] | None = None  # only these domains (mtu, sysctl, nic_qos, irq, files, switch)
    rails: tuple[int, ...] | None = None  # verify on these rails only (None: every rail)


@dataclass
class RunReport:
    """What a run did, as plain data (JSON-ready via :meth:`as_dict`).

    ``outcome``: planned | no-change | applied | kept | rolled-back | failed.
    """

    run_id: str | None
    mode: str
    outcome: str = "planned"
    changes: dict[str, list[dict]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    restored: list[str] = field(default_factory=list)
    verify_before: list[dict] = field(default_factory=list)
    verify_after: list[dict] = field(default_factory=list)
    verify_ok: bool | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict:
        """JSON-ready dict."""
        return dict(self.__dict__)

    @property
    def n_changes(self) -> int:
        """Number of setting changes planned or made."""
        return sum(len(v) for v in self.changes.values())


class Session:
    """Open connections of one run: SSH hosts for nodes, drivers for switches."""

    def __init__(self, inv: Inventory, devices: list[Device], workers: int):
        self.inv, self.devices = inv, devices
        self.nr = nornir_for(devices, workers)
        self.nodes: dict[str, SshHost] = {}
        self.switches: dict[str, object] = {}
        self.readers: dict[str, SshHost] = {}  # nodes outside the selection, opened for verification

    def node_hosts(self, names: set[str]) -> dict[str, SshHost]:
        """SSH hosts of ``names``: the selection's own, else opened once (read-only use) and kept."""
        for n in sorted(names - set(self.nodes) - set(self.readers)):
            self.readers[n] = SshHost(n, self.inv.devices[n].connection)
        return {n: self.nodes.get(n) or self.readers[n] for n in names}

    def open(self) -> None:
        """Connect to every device in parallel. Raises the first ConnectError."""
        def connect(dev: Device):
            return SshHost(dev.name, dev.connection) if dev.role == "node" else switch_ops.open_driver(dev)
        ok, failed = outcomes(fan_out(self.nr, connect, "connect"))
        for name, conn in ok.items():
            (self.nodes if self.inv.devices[name].role == "node" else self.switches)[name] = conn
        if failed:
            self.close()
            raise next(iter(failed.values()))

    def close(self) -> None:
        """Close every connection."""
        for c in [*self.nodes.values(), *self.switches.values(), *self.readers.values()]:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - closing must not mask the run's own error
                pass


def _collect(s: Session, only: set[str] | None = None) -> dict[str, object]:
    def read(dev: Device):
        if dev.role == "node":
            return node_mod.collect(s.nodes[dev.name], dev, only)
        return switch_ops.collect(s.switches[dev.name], dev)
    ok, failed = outcomes(fan_out(s.nr, read, "collect"))
    if failed:
        raise next(iter(failed.values()))
    return ok


def _plan(s: Session, states: dict, domains: set[str] | None = None) -> dict[str, list]:
    """Per-device changes (only ``domains`` if given). Raises InputError before anything is pushed."""
    out = {}
    for dev in s.devices:
        changes = (node_mod.plan(dev, states[dev.name]) if dev.role == "node"
                   else switch_ops.plan(dev, states[dev.name]))
        out[dev.name] = [c for c in changes if domains is None or c.domain in domains]
    return out


def _apply(s: Session, states: dict, plans: dict, j: Journal, confirm_s: int | None) -> dict[str, BaseException]:
    """Push every device's plan in parallel. Each device is journaled as ``pushing`` BEFORE its
    first write, so a controller killed mid-push still leaves a journal that can be rolled back."""
    def push(dev: Device):
        rec = j.device(dev.name)
        j.update(dev.name, state="pushing")
        if dev.role == "node":
            try:
                applied = node_mod.apply(s.nodes[dev.name], dev, states[dev.name], plans[dev.name])
            except TuningError as e:
                j.update(dev.name, state="failed", applied=[c.as_dict() for c in getattr(e, "applied", [])])
                raise
            j.update(dev.name, state="applied", applied=[c.as_dict() for c in applied])
            return True
        try:
            rev = switch_ops.apply(s.switches[dev.name], dev, plans[dev.name], confirm_s,
                                   switch_ops.revision(states[dev.name]))
        except TuningError:
            j.update(dev.name, state="failed")
            raise
        j.update(dev.name, state="applied" if rev else "unchanged", revision=rev,
                 applied=[c.as_dict() for c in plans[dev.name]] if rev else [])
        return rec

    todo = {name for name, ch in plans.items() if ch}
    _, failed = outcomes(fan_out(s.nr, push, "apply", only=todo))
    return failed


def touched_devices(j: Journal) -> list[str]:
    """Devices a run may have changed and has not restored yet."""
    return sorted(n for n, rec in j.data["devices"].items()
                  if rec.get("state") in TOUCHED and not rec.get("restored"))


def _restore(s: Session, states: dict, j: Journal, report: RunReport, progress: Progress) -> None:
    """Restore every device the journal says may have changed. Raises RollbackError if one fails.

    A node caught mid-push (state ``pushing``) gets every planned change's ``before`` value
    back: writing a value that was never changed is harmless, missing one is not.
    """
    def undo(dev: Device):
        rec = j.device(dev.name)
        if dev.role == "node":
            done = rec.get("applied") if rec.get("state") != "pushing" else rec.get("changes")
            node_mod.restore(s.nodes[dev.name], dev, states[dev.name], [node_mod.Change(**c) for c in done or []])
        else:
            switch_ops.restore(s.switches[dev.name], dev, rec)
        j.update(dev.name, restored=True)
        return True

    touched = set(touched_devices(j))
    if not touched:
        return
    progress(f"restoring {len(touched)} device(s): {', '.join(sorted(touched))}")
    ok, failed = outcomes(fan_out(s.nr, undo, "restore", only=touched))
    report.restored = sorted(ok)
    if failed:
        name, err = next(iter(failed.items()))
        raise RollbackError(f"restore failed on {', '.join(sorted(failed))}: {err}; run "
                            f"`fabtune rollback {j.run_id}` after fixing it", host=name, phase="restore") from err


def verify_fabric(s: Session, opts: Options, baseline: dict | None, progress: Progress):
    """Verify with node pairs of the WHOLE inventory: a change limited to one leaf is proven
    by the nodes behind it. Nodes outside the selection are opened once, read-only.

    Returns:
        ``(ok, [PairResult, ...])`` as :func:`tuning.verify.runner.verify`.
    """
    pairs = select_pairs(s.inv.nodes, rails=opts.rails)
    if not pairs:
        progress("no node pairs to verify with (fewer than 2 nodes with NICs on the verified rails)")
    hosts = s.node_hosts({p.client for p in pairs} | {p.server for p in pairs})
    return verify(pairs, hosts, opts.thresholds, baseline, progress)


def run(inv: Inventory, opts: Options, progress: Progress = lambda msg: None) -> RunReport:
    """Plan, apply or roll out ``inv`` (see the module docstring for the stages).

    Raises:
        InputError: the inventory asks for what a device cannot take (nothing pushed).
        ConnectError: a device is unreachable (nothing pushed).
        RollbackError: restoring after a failure failed (a human must look).
    """
    t0 = time.monotonic()
    devices = inv.select(opts.limit)
    s = Session(inv, devices, opts.workers)
    progress(f"connecting to {len(devices)} device(s)")
    s.open()
    try:
        progress("collecting state (one round trip per device)")
        states = _collect(s, opts.domains)
        plans = _plan(s, states, opts.domains)
        report = RunReport(None, opts.mode)
        report.changes = {n: [c.as_dict() for c in ch] for n, ch in plans.items() if ch}
        if opts.mode == "plan":
            report.outcome = "planned"
            return report
        _execute(s, inv, opts, states, plans, report, progress)
        return report
    finally:
        s.close()
        if "report" in locals():
            report.seconds = round(time.monotonic() - t0, 2)


def _execute(s: Session, inv: Inventory, opts: Options, states: dict, plans: dict,
             report: RunReport, progress: Progress) -> None:
    rollout = opts.mode == "rollout"
    if not report.changes and not rollout:
        report.outcome = "no-change"
        return
    j = Journal.create(opts.journal_dir, str(inv.path), opts.mode)
    report.run_id = j.run_id
    for dev in s.devices:
        j.device(dev.name).update({"role": dev.role, "changes": [c.as_dict() for c in plans[dev.name]]})
        if dev.role == "switch":
            j.device(dev.name)["revision_before"] = switch_ops.revision(states[dev.name])
    j.stage("snapshot")
    baseline, ok = None, True
    if rollout and opts.verify:
        j.stage("baseline")
        ok, before = verify_fabric(s, opts, None, progress)
        report.verify_before = [r.__dict__ for r in before]
        baseline = as_baseline(before)
        j.data["verify"]["before"] = report.verify_before
    if not report.changes:
        report.outcome = "no-change"
        report.verify_ok = ok if rollout and opts.verify else None
        j.data["outcome"] = "no-change"
        j.stage("done")
        return
    try:
        _transact(s, opts, states, plans, report, progress, j, baseline)
    except TuningError as e:  # a lost session, an expired or refused confirm: restore and report
        if j.data["outcome"] is not None:
            raise
        report.errors[e.host or "run"] = str(e)
        _fail(s, states, j, report, progress, f"{type(e).__name__}: {e}")
    except BaseException as e:  # Ctrl-C or a bug mid-change: restore, say so, re-raise
        if j.data["outcome"] is None:
            report.errors["run"] = f"{type(e).__name__}: {e}"
            _fail(s, states, j, report, progress, f"stopped by {type(e).__name__}")
        raise


def _transact(s: Session, opts: Options, states: dict, plans: dict, report: RunReport,
              progress: Progress, j: Journal, baseline: dict | None) -> None:
    """APPLY -> VERIFY -> CONFIRM, or RESTORE when apply fails or verification fails."""
    rollout = opts.mode == "rollout"
    j.stage("apply")
    progress(f"applying {report.n_changes} change(s) on {len(report.changes)} device(s)")
    failed = _apply(s, states, plans, j, opts.confirm_s if rollout and opts.verify else None)
    if failed:
        report.errors = {n: str(e) for n, e in failed.items()}
        _fail(s, states, j, report, progress, "apply failed")
        return
    if rollout and opts.verify:
        j.stage("verify")
        ok, after = verify_fabric(s, opts, baseline, progress)
        report.verify_after = [r.__dict__ for r in after]
        report.verify_ok = ok
        j.data["verify"]["after"] = report.verify_after
        if not ok:
            _fail(s, states, j, report, progress, "verification failed or regressed")
            return
    j.stage("confirm")
    for name, drv in s.switches.items():
        if j.device(name).get("revision"):
            switch_ops.confirm(drv)
    if report.verify_after:
        save_baseline(opts.journal_dir, as_baseline([PairResult(**r) for r in report.verify_after]))
    report.outcome = "kept" if rollout else "applied"
    j.data["outcome"] = report.outcome
    j.stage("done")


def _fail(s: Session, states: dict, j: Journal, report: RunReport, progress: Progress, why: str) -> None:
    progress(f"{why}: restoring the snapshot")
    j.stage("restore", why)
    _restore(s, states, j, report, progress)
    report.outcome = "rolled-back"
    j.data["outcome"] = "rolled-back"
    j.stage("done", why)


def rollback_run(inv: Inventory, journal_dir: Path, run_id: str, progress: Progress = lambda m: None) -> RunReport:
    """Restore every device a journaled run touched and did not already restore.

    Returns:
        A report whose ``outcome`` is ``rolled-back``, or ``no-change`` when the run touched
        nothing or was already rolled back (``errors["run"]`` says which).

    Raises:
        InputError: unknown RUN_ID.  RollbackError: a restore failed.
    """
    t0 = time.monotonic()
    j = Journal.load(journal_dir, run_id)
    names = touched_devices(j)
    report = RunReport(run_id, "rollback", outcome="no-change")
    if not names:
        done = [n for n, rec in j.data["devices"].items() if rec.get("restored")]
        report.errors["run"] = (f"already rolled back ({', '.join(sorted(done))})" if done
                                else "the run changed nothing")
        return report
    report.changes = {n: j.device(n).get("applied") or j.device(n).get("changes") or [] for n in names}
    s = Session(inv, inv.select(names), 20)
    s.open()
    try:
        states = _collect(s)
        _restore(s, states, j, report, progress)
        report.outcome = "rolled-back"
        j.data["outcome"] = "rolled-back (fabtune rollback)"
        j.stage("done", "fabtune rollback")
    finally:
        s.close()
        report.seconds = round(time.monotonic() - t0, 2)
    return report
