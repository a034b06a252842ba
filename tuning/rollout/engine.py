"""The rollout engine: one code path for plan, apply and rollout (STYLE.md section 3).

Stages: VALIDATE -> COLLECT -> PLAN -> (stop: plan) -> [BASELINE] -> per batch (the policy's,
:mod:`tuning.rollout.batches`; one batch by default): APPLY in safe phases -> settle -> [VERIFY]
-> CONFIRM the batch's switches; on a regression RESTORE and halt (:mod:`tuning.rollout.batch_run`).
Every device's ``before`` values are journaled before the first write; on a failure beyond the
policy's caps (a command, a switch commit, verification) the batch's touched devices are restored
(every batch's with ``on_regression: restore-all``) and the run says so. Switch commits use
commit-confirm and are confirmed only after their batch verified.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from tuning.errors import InputError, TuningError
from tuning.inventory import Device, Inventory
from tuning.model.policy import RolloutPolicy
from tuning.rollout.batch_run import journal_batches, restore_batches, run_batches
from tuning.rollout.batches import Batch, plan_batches
from tuning.rollout.fanout import fan_out, nornir_for, outcomes
from tuning.rollout.journal import DEFAULT_DIR, Journal, new_run_id
from tuning.rollout.run_report import RunReport
from tuning.rollout.lock import RunLock, lock_path
from tuning.rollout.rollback import kept_changes, restore_touched, rollback_run, touched_devices  # noqa: F401 (API)
from tuning.targets import Target, pause_for_test, target_for  # noqa: F401 (pause_for_test: the stages' test hook)
from tuning.transport.base import Host
from tuning.verify.pairs import Pair, build_rounds, default_per_node, node_rails
from tuning.verify.runner import Thresholds, as_baseline, expected_seconds, verify
from tuning.verify.schedule import WORKER_CAP, plan_schedule

Progress = Callable[[str], None]


@dataclass
class Options:
    """How to run. ``mode``: plan | apply | rollout. ``confirm_s``: switch commit-confirm window (s),
    at least :func:`confirm_window`'s minimum; None takes the derived default."""

    mode: str = "plan"
    limit: list[str] | None = None
    journal_dir: Path = DEFAULT_DIR
    confirm_s: int | None = None  # None: derived from the expected verification time (confirm_window)
    verify: bool = True
    thresholds: Thresholds = field(default_factory=Thresholds)  # judged as given (the CLI fills them from the policy)
    workers: int = 20
    domains: set[str] | None = None  # only these domains (mtu, sysctl, nic_qos, irq, files, switch)
    rails: tuple[int, ...] | None = None  # verify on these rails only (None: every rail)
    lock_wait_s: float = 0.0  # wait this long for another run's lock (0: refuse at once)
    allow_firmware: bool = False  # push firmware burns (``fw/`` keys); refused without it (exit 2)
    policy: RolloutPolicy | None = None  # batches, caps, timeouts (None: the inventory's ``fabtune_rollout``)


class Session:
    """Open devices of one run (:class:`~tuning.targets.base.Target` per device, from the registry)."""

    def __init__(self, inv: Inventory, devices: list[Device], workers: int, policy: RolloutPolicy | None = None):
        self.inv, self.devices = inv, devices
        self.timeouts = (policy or inv.policy).timeouts  # per device per phase (DeviceTimeout past them)
        self.nr = nornir_for(devices, workers)
        self.targets: dict[str, Target] = {}
        self.readers: dict[str, Target] = {}  # nodes outside the selection, opened for verification
        self.states: dict[str, object] = {}  # device -> state as collected

    def node_hosts(self, names: set[str]) -> dict[str, Host]:
        """The RDMA shells (:attr:`Target.rdma_host`) of ``names``: the selection's own, else opened
        once (read-only use) and kept."""
        for n in sorted(names - set(self.targets) - set(self.readers)):
            t = target_for(self.inv.devices[n])
            t.open()
            self.readers[n] = t
        return {n: (self.targets.get(n) or self.readers[n]).rdma_host for n in names}

    def open(self) -> None:
        """Connect to every device in parallel. Raises the first ConnectError."""
        ok, failed = outcomes(fan_out(self.nr, open_target, "connect", timeout_s=self.timeouts.connect_s))
        self.targets.update(ok)
        if failed:
            self.close()
            raise next(iter(failed.values()))

    def reopen(self) -> None:
        """New sessions where a command cut short may have left its output unread (:meth:`Target.reopen`)."""
        for t in self.targets.values():
            t.reopen()

    def close(self) -> None:
        """Close every connection."""
        for c in [*self.targets.values(), *self.readers.values()]:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - closing must not mask the run's own error
                pass


def open_target(dev: Device) -> Target:
    """The registry's Target of ``dev``, opened. Raises ConnectError; InputError (no target serves it)."""
    t = target_for(dev)
    t.open()
    return t


def _collect(s: Session, only: set[str] | None = None) -> dict[str, object]:
    ok, failed = outcomes(fan_out(s.nr, lambda dev: s.targets[dev.name].collect(only), "collect",
                                  timeout_s=s.timeouts.collect_s))
    if failed:
        raise next(iter(failed.values()))
    return ok


def _plan(s: Session, states: dict, domains: set[str] | None = None) -> dict[str, list]:
    """Per-device changes (only ``domains`` if given). Raises InputError before anything is pushed."""
    return {dev.name: s.targets[dev.name].plan(states[dev.name], domains) for dev in s.devices}


def _findings(s: Session, states: dict, domains: set[str] | None) -> list[dict]:
    """Every selected device's findings (:meth:`Target.findings`), then each kind's findings across
    its devices (a node's C-state drift against its peers), as dicts, only ``domains`` if given."""
    out, kinds = [], {}
    for dev in s.devices:
        t = s.targets[dev.name]
        out += [f.as_dict() for f in t.findings(states[dev.name], domains)]
        kinds.setdefault(type(t), {})[dev.name] = states[dev.name]
    for kind, group in kinds.items():
        out += [f.as_dict() for f in kind.fleet_findings(group, domains)]
    return out


def _findings_after(s: Session, opts: Options, report: RunReport, progress: Progress) -> list[dict]:
    """Findings of the fabric as the run left it: the changed devices whose kind reports findings
    are read again (one round trip each, in parallel), so a report never shows an ACS redirect the
    run cleared or misses a reset the run made pending. A device that cannot be read again keeps
    its findings from before the run."""
    changed = {n for n in report.changes if n in s.targets and s.targets[n].reports_findings}
    if not changed:
        return report.findings
    progress(f"reading {len(changed)} changed device(s) again for the report's findings")
    dev_by_name = {d.name: d for d in s.devices}
    ok, _ = outcomes(fan_out(s.nr, lambda dev: s.targets[dev.name].collect(opts.domains),
                             "collect", only=changed, timeout_s=s.timeouts.collect_s))
    return _findings(s, {**s.states, **{n: st for n, st in ok.items() if n in dev_by_name}}, opts.domains)


def _refuse_firmware(plans: dict, allowed: bool) -> None:
    """A firmware burn (a ``fw/`` change) is pushed only with ``--allow-firmware``.

    Raises:
        InputError: the plan burns firmware and it was not allowed (nothing pushed).
    """
    burns = [f"{n}:{c.key}" for n, ch in plans.items() for c in ch if c.key.startswith("fw/")]
    if burns and not allowed:
        raise InputError("--allow-firmware", "firmware.version",
                         f"the plan burns NIC firmware ({', '.join(burns[:4])}{', ...' if len(burns) > 4 else ''}); "
                         "pass --allow-firmware to push it (nothing was pushed)")


def _apply(s: Session, plans: dict, j: Journal, confirm_s: int | None,
           only: set[str] | None = None) -> dict[str, BaseException]:
    """Push every device's plan (of ``only``, when given) in parallel, each within the policy's
    ``apply_s`` (else ``DeviceTimeout``): :meth:`Target.push`, which journals ``pushing`` BEFORE
    its first write, so a controller killed mid-push still leaves a journal that can be rolled back."""
    todo = {name for name, ch in plans.items() if ch and (only is None or name in only)}
    if not todo:
        return {}
    _, failed = outcomes(fan_out(s.nr, lambda dev: s.targets[dev.name].push(plans[dev.name], j.of(dev.name), confirm_s),
                                 "apply", only=todo, timeout_s=s.timeouts.apply_s))
    return failed


def verify_pairs(inv: Inventory, rails: tuple[int, ...] | None, limit: list[str] | None = None) -> list[Pair]:
    """The pairs that verify ``inv`` (:func:`tuning.verify.schedule.plan_schedule`: every NIC in a
    same-rail pair, every leaf uplink and spine crossed; whole inventory, or the devices ``limit``
    names with partners from the whole inventory; every rail or ``rails``), each with the RoCE MTU
    its hops allow.

    Raises:
        InputError: a rail no node has, a ``limit`` name that is no host or group, or no pair at
            all (a check that would run nothing).
    """
    have = node_rails(inv.nodes)
    missing = sorted(set(rails or ()) - set(have))
    if missing:
        raise InputError("--rail", ",".join(map(str, missing)), f"no node has a NIC on rail(s) "
                         f"{', '.join(map(str, missing))}; the inventory's rails: {', '.join(map(str, have)) or 'none'}")
    scope = inv.select(limit) if limit else None
    pairs = plan_schedule(inv.nodes, inv.switches, scope=scope, rails=rails).pairs
    if not pairs:
        raise InputError(str(inv.path), "gpu_nodes", "no node pairs to verify with (fewer than 2 nodes with NICs "
                         "on the verified rails): a verification that runs nothing cannot prove a change")
    return pairs


#: seconds the confirm window must hold beyond verification and apply: the confirm round trips,
#: a slow SSH session
CONFIRM_MARGIN_S = 15
#: seconds one device's push may take (one script per node, one commit per switch); devices are
#: pushed ``workers`` at a time, and a switch's window starts at its commit, before the others end
APPLY_S = 3
#: the default window is at least this long (NVUE's own default for ``--confirm``, 10 minutes)
DEFAULT_CONFIRM_S = 600


def confirm_window(opts: Options, pairs: list[Pair], n_devices: int, workers: int = WORKER_CAP,
                   extra_s: float = 0.0) -> int:
    """The switch commit-confirm window of a rollout (seconds), derived from what it must outlast:
    minimum = expected verification time (:func:`tuning.verify.runner.expected_seconds` of
    ``pairs``: their rounds, up to ``workers`` pairs at a time) + pushing ``n_devices``
    (:data:`APPLY_S` per batch of ``opts.workers``) + the policy's ``settle_s`` + ``extra_s`` (the
    batch's incasts, :func:`tuning.verify.incast.expected_seconds`) + :data:`CONFIRM_MARGIN_S`; default =
    max(600, 2 x minimum). The lab's 18 pairs (2 rounds) and 7 devices: minimum 21 + 3 + 15 =
    39 s, default 600 s.

    Raises:
        InputError: ``opts.confirm_s`` is not a positive whole number of seconds, or shorter than the
            minimum (names it): the switches would revert while verification still runs.
    """
    pushes = math.ceil(n_devices / max(1, opts.workers)) * APPLY_S
    settle = math.ceil(opts.policy.settle_s) if opts.policy is not None else 0  # a batch settles before it verifies
    need = math.ceil(expected_seconds(pairs, workers) + extra_s) + pushes + settle + CONFIRM_MARGIN_S
    if opts.confirm_s is None:
        return max(DEFAULT_CONFIRM_S, 2 * need)
    if isinstance(opts.confirm_s, bool) or not isinstance(opts.confirm_s, int) or opts.confirm_s <= 0:
        raise InputError("--confirm-s", str(opts.confirm_s), "must be a whole number of seconds above 0")
    if opts.confirm_s < need:
        raise InputError("--confirm-s", str(opts.confirm_s), f"shorter than the verification it must outlast: "
                         f"at least {need} s for {len(pairs)} pair(s) in "
                         f"{len(build_rounds(pairs, default_per_node(pairs)))} wave(s)"
                         + (f" and {extra_s:g} s of incasts" if extra_s else ""))
    return opts.confirm_s


def incast_bound(inv: Inventory, opts: Options) -> float:
    """Seconds the incasts of a rollout of ``opts.limit`` may take (one per leaf of the selection,
    :func:`tuning.verify.incast.expected_seconds`); 0 when the policy or ``--no-incast`` turns
    them off or the inventory does not expect a lossless fabric."""
    if not opts.policy.incast.enabled:
        return 0.0
    from tuning.verify.incast import Expectation, expected_seconds, leaves_of, plan_incasts

    if not Expectation.from_inventory(inv).lossless:
        return 0.0
    incasts = plan_incasts(inv, leaves_of(inv, opts.limit), opts.policy.incast.k)
    return expected_seconds([i for i in incasts if len(i.senders) >= 2])


def verify_fabric(s: Session, opts: Options, baseline: dict | None, progress: Progress,
                  pairs: list[Pair] | None = None, absolute: bool = True, timeout_s: float | None = None):
    """Verify with node pairs of the WHOLE inventory: a change limited to one leaf is proven
    by the nodes behind it. Nodes outside the selection are opened once, read-only. Without
    ``pairs`` (a stand-alone ``verify``), the pairs of :func:`verify_pairs` for ``opts.limit``.
    ``absolute`` False judges regression against ``baseline`` only (a batch before the last);
    ``timeout_s``: per round trip / test (:func:`tuning.verify.runner.verify`).

    Returns:
        ``(ok, [PairResult, ...])`` as :func:`tuning.verify.runner.verify`.

    Raises:
        InputError: no pair to verify with (see :func:`verify_pairs`).
    """
    pairs = pairs if pairs is not None else verify_pairs(s.inv, opts.rails, opts.limit)
    hosts = s.node_hosts({p.client for p in pairs} | {p.server for p in pairs})
    return verify(pairs, hosts, opts.thresholds, baseline, progress, absolute=absolute, timeout_s=timeout_s)


def run(inv: Inventory, opts: Options, progress: Progress = lambda msg: None) -> RunReport:
    """Plan, apply or roll out ``inv`` (see the module docstring for the stages).

    plan, apply and rollout hold the inventory's lock (:mod:`tuning.rollout.lock`) from before the
    first read to the end of the run (a switch plan stages and discards a candidate on the device).

    Raises:
        InputError: the inventory asks for what a device cannot take, no pair would verify, a
            confirm window too short (nothing pushed).
        LockError: another run holds the inventory (nothing read or pushed).
        ConnectError: a device is unreachable (nothing pushed).
        RollbackError: restoring after a failure failed (a human must look).
    """
    t0 = time.monotonic()
    opts = replace(opts, policy=opts.policy or inv.policy)
    devices = inv.select(opts.limit)
    pairs, window = None, None
    if opts.mode == "rollout" and opts.verify:
        pairs = verify_pairs(inv, opts.rails)
        window = confirm_window(opts, pairs, len(devices), extra_s=incast_bound(inv, opts))
    run_id = new_run_id()
    # plan locks too: collecting a switch stages and discards a candidate, which would move the
    # diff under another run's push
    lock = RunLock(lock_path(inv.path), run_id, opts.mode, opts.journal_dir / f"{run_id}.json",
                   wait_s=opts.lock_wait_s).acquire()
    s = Session(inv, devices, opts.workers, opts.policy)
    try:
        progress(f"connecting to {len(devices)} device(s)")
        s.open()
        pause_for_test("collect", run_id)
        progress("collecting state (one round trip per device)")
        states = s.states = _collect(s, opts.domains)
        plans = _plan(s, states, opts.domains)
        report = RunReport(None, opts.mode)
        policy = opts.policy
        batches = plan_batches(inv, devices, policy, plans)  # InputError: no safe order (nothing pushed)
        report.policy = policy.model_dump(mode="json")
        report.batches = [{**b.as_dict(), "outcome": "not-run", "failed": [], "unreachable": [], "verify_ok": None}
                          for b in batches]
        report.changes = {n: [c.as_dict() for c in ch] for n, ch in plans.items() if ch}
        report.findings = _findings(s, states, opts.domains)
        if opts.mode != "plan":
            _refuse_firmware(plans, opts.allow_firmware)
        if opts.mode == "plan":
            report.outcome = "planned"
            return report
        r = Run(run_id, pairs, window, policy, batches)
        if opts.mode == "rollout" and opts.verify:
            r.batch_pairs = {b.index: (pairs if len(batches) == 1 else verify_pairs(inv, opts.rails, b.devices))
                             for b in batches}
        _execute(s, inv, opts, states, plans, report, progress, r)
        if report.outcome in ("applied", "kept"):
            report.findings = _findings_after(s, opts, report, progress)
        return report
    finally:
        s.close()
        if lock is not None:
            lock.release()
        if "report" in locals():
            report.seconds = round(time.monotonic() - t0, 2)


@dataclass
class Run:
    """What a run fixed before its first push: its id, its verification pairs (whole inventory),
    the confirm window (s) checked against them, its policy and batches, each batch's pairs
    (index -> pairs of its scope) and the batch being run (``current``)."""

    run_id: str
    pairs: list[Pair] | None
    confirm_s: int | None
    policy: RolloutPolicy = field(default_factory=RolloutPolicy)
    batches: list[Batch] = field(default_factory=list)
    batch_pairs: dict[int, list[Pair]] = field(default_factory=dict)
    current: Batch | None = None
    incast_pending: set[str] = field(default_factory=set)  # changed leaves no incast has proven yet
    changed: set[str] = field(default_factory=set)  # devices with planned changes
    measured: list = field(default_factory=list)  # batch_run.Measured, in measurement order
    pair_devs: dict[str, set[str]] = field(default_factory=dict)  # pair name -> devices its result depends on


def baseline_pairs(r: Run) -> list[Pair] | None:
    """The pairs the baseline measures: the whole schedule, and every batch's own pairs that it
    lacks (a batch is judged on regression against the baseline, so each of its pairs needs a
    baseline value of the same pair); one batch: the whole schedule alone."""
    if r.pairs is None:
        return None
    seen = {p.name for p in r.pairs}
    extra = [p for b in r.batches for p in r.batch_pairs.get(b.index) or []
             if p.name not in seen and not seen.add(p.name)]
    return [*r.pairs, *extra]


def _snapshot(s: Session, inv: Inventory, opts: Options, states: dict, plans: dict, r: Run) -> Journal:
    """Journal everything a restore needs, before the first write (contract: docs/architecture.md),
    with each device's batch and the run's batches."""
    j = Journal.create(opts.journal_dir, str(inv.path), opts.mode, r.run_id)
    for dev in s.devices:
        j.device(dev.name).update({**s.targets[dev.name].record(states[dev.name]),
                                   "changes": [c.as_dict() for c in plans[dev.name]]})
    journal_batches(j, r.batches)
    j.data["policy"] = r.policy.model_dump(mode="json")  # `fabtune report RUN_ID` prints it again
    j.stage("snapshot")
    return j


def _execute(s: Session, inv: Inventory, opts: Options, states: dict, plans: dict,
             report: RunReport, progress: Progress, r: Run) -> None:
    rollout = opts.mode == "rollout"
    if not report.changes and not rollout:
        report.outcome = "no-change"
        return
    j = _snapshot(s, inv, opts, states, plans, r)
    report.run_id = j.run_id
    baseline, ok = None, True
    if rollout and opts.verify:
        j.stage("baseline")
        ok, before = verify_fabric(s, opts, None, progress, baseline_pairs(r))
        report.verify_before = [x.__dict__ for x in before]
        baseline = as_baseline(before)
        j.data["verify"]["before"] = report.verify_before
    if not report.changes:
        report.outcome = "no-change"
        report.verify_ok = ok if rollout and opts.verify else None
        j.data["verify_ok"] = report.verify_ok
        j.data["outcome"] = "no-change"
        j.stage("done")
        return
    try:
        run_batches(s, opts, plans, report, progress, j, baseline, r)
    except TuningError as e:  # a lost session, an expired or refused confirm: restore and report
        if j.data["outcome"] is not None:
            raise
        report.errors[e.host or "run"] = str(e)
        _fail(s, j, report, progress, f"{type(e).__name__}: {e}", r)
    except BaseException as e:  # Ctrl-C or a bug mid-change: restore, say so, re-raise
        if j.data["outcome"] is None:
            report.errors["run"] = f"{type(e).__name__}: {e}"
            s.reopen()  # a switch command cut short leaves its output in the session
            _fail(s, j, report, progress, f"stopped by {type(e).__name__}", r)
        raise


def _fail(s: Session, j: Journal, report: RunReport, progress: Progress, why: str, r: Run) -> None:
    """An error stopped the run mid-change: restore the current batch's touched devices (every
    batch's up to it with ``restore-all``), no re-verification (:func:`restore_batches`)."""
    restore_batches(s, report, progress, j, r, why)
    j.data["outcome"] = report.outcome
    j.stage("done", why)
