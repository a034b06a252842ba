"""A rollout cut into stages a front end drives one at a time (the Ansible playbooks): the same
engine as ``fabtune rollout``, with the run's state kept in its journal between stages.

Stages (each may run in another process: Ansible forks a worker per host and task):

- :func:`begin` (once): the whole inventory validated, the inventory's lock taken in the name of
  the front end's long-lived process (``holder_pid``: the ``ansible-playbook`` process, so the
  stale-lock rules of :mod:`tuning.rollout.lock` judge the playbook run), every selected device
  collected and planned, batches cut as the front end will run them, the push order checked against
  the front end's play order, the journal created (``engine``, policy, batches, each device's plan
  and connection facts) and, for a verified run, the baseline measured.
- :func:`push` (per device and task): collect, plan, journal the snapshot BEFORE the first write,
  apply with read back (switches with commit-confirm); a failed device is restored at once.
- :func:`tuning.rollout.steps_verify.verify_batch` (once per batch): verify the batch as the engine
  does, confirm its switches, or restore it and halt.
- :func:`end` (once): outcome, baseline merge, lock released.

Check mode (``check``): :func:`begin` and :func:`push` plan only, nothing is written on a device
and no journal is created (the lock is held meanwhile, as ``fabtune plan`` holds it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tuning.errors import InputError, TuningError
from tuning.inventory import Device, Inventory
from tuning.model.policy import RolloutPolicy, parse_serial
from tuning.rollout import gate, plan_file, session
from tuning.rollout.options import Options, Run
from tuning.rollout.batches import plan_batches
from tuning.rollout.fanout import _within
from tuning.rollout.journal import DEFAULT_DIR, Journal, new_run_id, refuse_ended
from tuning.rollout.baseline import save_baseline
from tuning.rollout.journal_check import check_run_id, refuse_push
from tuning.rollout.lock import RunLock, lock_path, release
from tuning.rollout.rollback import restore_touched
from tuning.targets import Target, platform_of, target_class
from tuning.verify.runner import PairResult, Thresholds, as_baseline
from tuning.model.outcomes import BatchOutcome, DeviceState, RunOutcome

Progress = Callable[[str], None]
#: the play orders a front end may run: all switches before the node batches, or after them
PLAY_ORDERS = ("switches-first", "nodes-first")
#: effects (:attr:`tuning.node.base.Change.effect`) a front end reports as facts
EFFECTS = ("reboot_required", "pending_reset")


@dataclass
class StepOptions:
    """What every stage of one front-end run shares.

    Attributes:
        journal_dir: where the run's journal goes (default ``.fabtune/journal``, as the CLI).
        verify: verify each batch with RDMA tests (a rollout), else only confirm (an apply).
        confirm_s: switch commit-confirm window (s); None: derived (:func:`tuning.rollout.gate.confirm_window`).
        allow_firmware: push firmware burns (``fw/`` keys); refused without it (exit 2).
        allow_overwrite_files: a switch commit may overwrite files edited by hand (``--allow-overwrite-files``).
        domains: the domains of this run (None: all); a front end's tags.
        rails: verify on these rails only (None: every rail).
        serial: the front end's batch sizes (Ansible's ``serial``; None: the policy's).
        max_fail_percentage: the front end's cap (None: the policy's).
        check: plan only (Ansible's check mode).
        workers: parallel devices in begin's collect and the verification.
        expect: the plan this push must equal (:func:`tuning.rollout.plan_file.read`), or None.
    """

    journal_dir: Path = DEFAULT_DIR
    verify: bool = True
    confirm_s: int | None = None
    allow_firmware: bool = False
    allow_overwrite_files: bool = False
    domains: set[str] | None = None
    rails: tuple[int, ...] | None = None
    serial: str | None = None
    max_fail_percentage: int | float | None = None
    check: bool = False
    workers: int = 20
    thresholds: Thresholds | None = field(default=None)
    expect: list[dict] | None = None

    def policy(self, inv: Inventory) -> RolloutPolicy:
        """The run's policy: the inventory's, with the front end's serial and cap; nodes batched in the
        front end's host order (``batch_by: none``: Ansible cuts ``serial`` batches in inventory order).

        Raises:
            InputError: a serial or cap outside its range (names ``fabtune_serial`` / ``fabtune_max_fail_percentage``).
        """
        try:
            serial = parse_serial(self.serial) if self.serial is not None else None
        except InputError as e:
            raise InputError("fabtune_serial", str(self.serial), e.problem) from None
        return inv.policy.override(serial=serial, batch_by="none", max_fail_percentage=self.max_fail_percentage)

    def engine_options(self, inv: Inventory) -> Options:
        """The engine's Options for this run (mode ``rollout`` when verified, else ``apply``)."""
        policy = self.policy(inv)
        th = self.thresholds or Thresholds(**policy.thresholds.model_dump())
        return Options(mode="rollout" if self.verify else "apply", journal_dir=self.journal_dir, confirm_s=self.confirm_s,
                       verify=self.verify, thresholds=th, workers=self.workers, domains=self.domains, rails=self.rails,
                       allow_firmware=self.allow_firmware, policy=policy)


def _selected(inv: Inventory, hosts: list[str]) -> list[Device]:
    """The inventory's devices among ``hosts``, in the front end's order."""
    return [inv.devices[h] for h in hosts if h in inv.devices]


def _check_order(batches: list, play_order: str) -> None:
    """Refuse a play order the plan makes unsafe (:func:`tuning.rollout.batches.phases`).

    Raises:
        InputError: one line naming the rule and how to split the run.
    """
    if play_order not in PLAY_ORDERS:
        raise InputError("play_order", play_order, f"allowed: {', '.join(PLAY_ORDERS)}")
    for b in batches:
        if len(b.phases) == 2 and (b.phases[0][0] in b.nodes) != (play_order == "nodes-first"):
            raise InputError("play order", play_order, f"unsafe for this plan: {b.order}; push the two "
                             "groups in separate runs in that order (e.g. --tags for the node domains, then "
                             "--tags switch), nothing was pushed")


def begin(inv: Inventory, hosts: list[str], opts: StepOptions, holder_pid: int, run_id: str | None = None,
          play_order: str = "switches-first", progress: Progress = lambda m: None) -> dict:
    """Start a run (module docstring).

    Args:
        hosts: the selected hosts in the front end's order (Ansible's play hosts after ``--limit``).
        holder_pid: the process the lock names (the ``ansible-playbook`` process).
        run_id: the run's id (None: a new one).
        play_order: whether the front end pushes every switch before the node batches.

    Returns:
        ``{"run_id", "check", "confirm_s", "batches": [{"index", "nodes", "switches", ...}],
        "changes": {device: [change dicts]}, "baseline_pairs": int, "unreachable_hosts": [devices
        that did not answer: left out of the run, each reported by its own push]}``.

    Raises:
        InputError: bad options, a ``run_id`` that is not a run id (:func:`check_run_id`: a path
            built from it must stay in the journal folder), an unsafe play order, a firmware burn
            not allowed, no pair to verify with.
        LockError: another run holds the inventory.
        ConnectError / DeviceTimeout: a device did not answer and a verified run's baseline needs
            it (an end of a pair), raised before anything is journaled or pushed, as the engine's
            connect (``fabtune rollout --engine nornir`` exits 4 the same way).
    """
    run_id = check_run_id(run_id, "fabtune_run_id") if run_id else new_run_id()
    eopts, devices = opts.engine_options(inv), _selected(inv, hosts)
    lock = RunLock(lock_path(inv.path), run_id, "plan" if opts.check else eopts.mode,
                   opts.journal_dir / f"{run_id}.json", pid=holder_pid).acquire()
    try:
        return _plan_and_journal(session.Session(inv, devices, opts.workers, eopts.policy), opts, eopts, run_id,
                                 play_order, progress)
    except BaseException:
        lock.release()
        raise


def _plan_and_journal(s: session.Session, opts: StepOptions, eopts: Options, run_id: str, play_order: str,
                      progress: Progress) -> dict:
    """:func:`begin` under the run's lock: open the reachable devices, collect, plan, batch; unless
    a check, journal the snapshot and measure the baseline. Returns begin's dict; closes ``s``."""
    selected = list(s.devices)  # an unreachable device stays in its batch (reported by its own push)
    try:
        gone = _open_reachable(s)
        s.states = session.collect(s, opts.domains)
        plans = session.plan(s, s.states, opts.domains)
        batches = plan_batches(s.inv, selected, eopts.policy, plans)
        _check_order(batches, play_order)
        out = {"run_id": run_id, "check": opts.check, "confirm_s": None, "baseline_pairs": 0,
               "unreachable_hosts": sorted(gone), "batches": [b.as_dict() for b in batches],
               "changes": {n: [c.as_dict() for c in ch] for n, ch in plans.items() if ch}}
        if not opts.check:
            session.refuse_firmware(plans, opts.allow_firmware)
            session.refuse_read_only_drift(session.findings(s, s.states, opts.domains))
            _journal_and_baseline(s, eopts, (plans, Run(run_id, None, None, eopts.policy, batches)), selected,
                                  gone, out, progress)
        return out
    finally:
        s.close()


def _journal_and_baseline(s: session.Session, eopts: Options, planned: tuple[dict, Run], devices: list,
                          gone: dict[str, BaseException], out: dict, progress: Progress) -> None:
    """Size a verified run's gate for its selected ``devices`` (``out["confirm_s"]``), refuse
    a baseline with an unreachable end, write the journal snapshot (before any push), measure the baseline
    (``out["baseline_pairs"]``) and enter the ``apply`` stage."""
    plans, r = planned
    if eopts.verify:
        out["confirm_s"] = _gate(r, s.inv, eopts, devices)
        _refuse_unmeasurable(gone, gate.baseline_pairs(r))
    j = session.snapshot(s, eopts, plans, r, shared=True, engine="ansible",
                         ansible={"confirm_s": None, "measured": [], "incast_pending": [], "verify": eopts.verify})
    if eopts.verify:
        _, before = gate.measure_baseline(s, eopts, r, progress, j, any(plans.values()))
        out["baseline_pairs"] = len(before)
    j.data["ansible"]["confirm_s"] = out["confirm_s"]
    j.stage("apply")


def _gate(r: Run, inv: Inventory, eopts: Options, devices: list) -> int:
    """Fill ``r``'s verification pairs (the whole schedule, and each batch's, as the engine does:
    :func:`tuning.rollout.gate.rollout_pairs`, ``batch_pairs``; none for subnet managers, proven by the
    IB verification) for the selected ``devices`` and return the switch
    confirm window (s) that outlasts every batch's verification and incasts, and the last batch's
    re-measured pairs (:func:`tuning.rollout.batch_run.missing_pairs`: within ``r.pairs``): the
    front end pushes every switch before the node batches. Raises InputError (no pair, too short)."""
    r.pairs = gate.rollout_pairs(inv, eopts, devices)
    r.batch_pairs = {b.index: gate.batch_pairs(inv, eopts, b.devices) for b in r.batches}
    every = [p for b in r.batches for p in r.batch_pairs[b.index]]
    if len(r.batches) > 1:
        every += r.pairs
    return gate.confirm_window(eopts, every, len(devices), extra_s=gate.incast_bound(inv, eopts) * len(r.batches))


def _refuse_unmeasurable(gone: dict[str, BaseException], pairs: list | None) -> None:
    """Raise the connect error of the first device in ``gone`` (name -> its ConnectError or
    DeviceTimeout) that is an end of one of ``pairs`` (the baseline's): that pair cannot be
    measured, so the verified run cannot begin."""
    ends = {n for p in pairs or [] for n in (p.client, p.server)}
    lost = sorted(set(gone) & ends)
    if lost:
        raise gone[lost[0]]


def _open_reachable(s: session.Session) -> dict[str, BaseException]:
    """Connect the session's devices in parallel; those that do not answer (ConnectError,
    DeviceTimeout) are dropped from the session and returned with their errors (name -> error):
    the front end reports each one unreachable from its own task, and an unverified run goes on
    without them (as a batch's unreachable devices). Any other error closes the session and is
    raised."""
    from tuning.rollout.batch_run import unreachable
    from tuning.rollout.fanout import fan_out, nornir_for, outcomes

    ok, failed = outcomes(fan_out(s.nr, lambda dev: _connect(dev, s.timeouts.connect_s), "connect"))
    s.targets.update(ok)
    bad = {n: e for n, e in failed.items() if not unreachable(e)}
    if bad:
        s.close()
        raise next(iter(bad.values()))
    s.devices = [d for d in s.devices if d.name not in failed]
    s.nr = nornir_for(s.devices, len(s.devices) or 1)
    return dict(sorted(failed.items()))


def open_journal(journal_dir: Path, run_id: str) -> Journal:
    """A front-end run's journal, for updates from several processes (:attr:`Journal.shared`).

    Raises:
        InputError: not a run id, no such run, or not a run :func:`begin` started (no ``ansible`` state).
    """
    j = Journal.load(journal_dir, check_run_id(run_id, "fabtune_run_id"))
    if not isinstance(j.data.get("ansible"), dict) and j.data.get("engine") not in ("slurm", "k8s"):  # slurm_, k8s engine
        raise InputError("fabtune_run_id", run_id, "not a run begun by the playbooks' begin stage")
    j.shared = True
    return j


def _connect(dev: Device, timeout_s: float, here: bool | str = False) -> Target:
    """:func:`session.open_target` within ``timeout_s`` (DeviceTimeout past it). Raises ConnectError."""
    return _within(lambda: session.open_target(dev, here), dev.name, "connect", timeout_s)


def push(dev: Device, policy: RolloutPolicy, opts: StepOptions, run_id: str | None,
         progress: Progress = lambda m: None, here: bool | str = False) -> dict:
    """Plan (check mode) or push one device's changes of ``opts.domains`` (module docstring);
    ``here``: from the device itself (node-local mode, ``fabtune node apply``; :func:`_connect`).

    Returns:
        ``{"changes": [change dicts], "effects": {"reboot_required": bool, "pending_reset": bool},
        "pushed": bool}``; ``changes`` are the planned ones in check mode, else the applied ones.

    Raises:
        ConnectError / DeviceTimeout: the device did not answer (a timed-out push is journaled
            ``pushing``: ``fabtune rollback RUN_ID`` restores it).
        InputError: the inventory asks for what the device cannot take; a firmware burn not allowed; the run
            ended, restored the device, or pushes another batch (:func:`journal_check.refuse_push`).
        StalePlanError: the device's plan differs from ``opts.expect`` (nothing written).
        CommandError / VerifyError / CommitError / CandidateError: the push failed; the device
            was restored at once (a RollbackError when that failed too).
    """
    t = policy.timeouts
    target = session.permit_overwrite(_connect(dev, t.connect_s, here), opts.allow_overwrite_files)
    try:
        state = _within(lambda: target.collect(opts.domains), dev.name, "collect", t.collect_s)
        changes = target.plan(state, opts.domains)
        plan_file.refuse_stale(dev.name, opts.expect, changes)  # a plan file: exactly its changes, or nothing
        effects = {e: any(c.effect == e for c in changes) for e in EFFECTS}
        if opts.check or not changes:
            return {"changes": [c.as_dict() for c in changes], "effects": effects, "pushed": False}
        session.refuse_firmware({dev.name: changes}, opts.allow_firmware)
        if run_id is None:
            raise InputError("fabtune_run_id", "-", "no run id: the playbook's begin stage must run first")
        j = refuse_ended(open_journal(opts.journal_dir, run_id))  # a late request of a run whose controller is gone
        refuse_push(j, dev.name)  # restored already, or (a scheduler's run) not in the batch being pushed
        applied = _apply(target, changes, j, state, t.apply_s, progress)
        return {"changes": applied, "effects": effects, "pushed": True}
    finally:
        target.close()


def planned(begun: object, host: str, domains: set[str] | None) -> dict | None:
    """A check-mode :func:`push` answered from the plan :func:`begin` made in the same check run
    (one parallel collect of every device, as ``fabtune plan``), so a check run costs each host task
    no SSH session and no second read; a real push always reads the device again.

    Args:
        begun: what :func:`begin` returned in this run (the playbook's registered result).
        host: the task's host.  domains: the task's domains (None: all).

    Returns:
        :func:`push`'s shape, ``pushed`` False; None when ``begun`` is no check-mode begin result
        or ``host`` did not answer begin (the caller then plans by reading the device, and reports
        its own connect error).
    """
    if not isinstance(begun, dict) or begun.get("check") is not True or not isinstance(begun.get("changes"), dict):
        return None
    if host in (begun.get("unreachable_hosts") or []):
        return None  # the caller's own connect gives the device's own error (ConnectError, DeviceTimeout)
    changes = [c for c in begun["changes"].get(host) or [] if domains is None or c.get("domain") in domains]
    effects = {e: any(c.get("effect") == e for c in changes) for e in EFFECTS}
    return {"changes": changes, "effects": effects, "pushed": False}


def _apply(target: Target, changes: list, j: Journal, state, apply_s: float, progress: Progress) -> list[dict]:
    """Journal the snapshot, push with read back (:meth:`Target.push`), restore at once on failure.
    A device pushed once per domain (the playbook's tasks) keeps its earlier domains' changes."""
    name = target.name
    rec = j.device(name)
    planned = [c.as_dict() for c in changes]
    domains = {c.domain for c in changes}
    others = [c for c in rec.get("changes") or [] if c.get("domain") not in domains]
    first = target.record(state)
    # the snapshot of the run's first push of this device stays (a later domain's push reads the
    # device after the earlier ones changed it)
    snap = {**first, **{k: rec[k] for k in first if k in rec}, "changes": others + planned, "state": DeviceState.PUSHING}
    j.update(name, **snap)  # BEFORE the first write: a killed worker leaves a restorable journal
    try:
        window = (j.data.get("ansible") or {}).get("confirm_s")
        return [c.as_dict() for c in _within(lambda: target.push(changes, j.of(name), window), name, "apply", apply_s)]
    except TuningError as e:
        from tuning.rollout.batch_run import unreachable

        if unreachable(e):
            raise  # no answer: left for `fabtune rollback RUN_ID` (journaled `pushing`)
        restore_touched(j, {name: target}, progress, only={name})
        raise


def end(inv: Inventory, opts: StepOptions, run_id: str, progress: Progress = lambda m: None) -> dict:
    """End a run: its outcome (``kept`` verified, ``applied`` unverified, ``no-change``; a halted run
    keeps the outcome its gate wrote), the baseline merged with the final results of a verified
    run, the lock released.

    Returns:
        ``{"run_id", "outcome", "not_run": [devices never pushed]}``.
    """
    try:
        if opts.check:
            return {"run_id": run_id, "outcome": RunOutcome.PLANNED, "not_run": []}
        j = open_journal(opts.journal_dir, run_id)
        pushed = [n for n, rec in j.data["devices"].items() if rec.get("state")]
        planned = [n for n, rec in j.data["devices"].items() if rec.get("changes")]
        if j.data.get("outcome") is None:
            done = [b for b in j.data.get("batches", []) if b["outcome"] == BatchOutcome.KEPT]
            verified = j.data["ansible"].get("verify")
            j.data["outcome"] = (RunOutcome.NO_CHANGE if not pushed and not planned else
                                 (RunOutcome.KEPT if verified else RunOutcome.APPLIED) if len(done) == len(j.data["batches"])
                                 else RunOutcome.HALTED if done else RunOutcome.FAILED)
            after = j.data["verify"].get("after") or []
            if j.data["outcome"] in (RunOutcome.KEPT, RunOutcome.APPLIED):
                j.data["findings"] = _findings_after(inv, opts, pushed)
            if verified and after and j.data["outcome"] == RunOutcome.KEPT:
                save_baseline(opts.journal_dir, inv.path, as_baseline([PairResult(**x) for x in after]),
                              {p.name for p in gate.verify_pairs(inv, None)})
            j.stage("done", "ansible end")
        return {"run_id": run_id, "outcome": j.data["outcome"], "not_run": sorted(set(planned) - set(pushed))}
    finally:
        release(inv.path, run_id)


def _findings_after(inv: Inventory, opts: StepOptions, pushed: list[str]) -> list[dict]:
    """The pushed nodes' findings as the run left them (as the engine's report: a node read again,
    :func:`tuning.node.findings`), journaled so ``fabtune report RUN_ID`` shows them."""
    devs = [inv.devices[n] for n in pushed if n in inv.devices]
    devs = [d for d in devs if target_class(d.role, platform_of(d)).reports_findings]
    if not devs:
        return []
    s = session.Session(inv, devs, opts.workers, inv.policy)
    try:
        s.open()
        return session.findings(s, session.collect(s, opts.domains), opts.domains)
    except TuningError as e:  # a node gone since its push: the run's outcome stands, the report says so
        return [{"device": e.host or "run", "domain": "run", "code": "findings-unread",
                 "message": f"findings not read after the run: {e}", "evidence": ""}]
    finally:
        s.close()
