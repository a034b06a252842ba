"""The devices of one run and the steps every front end takes on them, each over every device in
parallel through its :class:`~tuning.targets.base.Target`: open, collect, plan, findings, push.
The engine (:mod:`tuning.rollout.engine`), its batches and the Ansible stages
(:mod:`tuning.rollout.steps`) share these; none of them reaches a device another way."""

from __future__ import annotations

from typing import Callable

from tuning.errors import InputError
from tuning.inventory import Device, Inventory
from tuning.model.policy import RolloutPolicy
from tuning.rollout.batches import Batch
from tuning.rollout.fanout import fan_out, nornir_for, outcomes
from tuning.rollout.fdlimit import ensure_fds
from tuning.rollout.journal import Journal
from tuning.rollout.rollback import restore_touched
from tuning.rollout.run_report import RunReport
from tuning.targets import Target, local_target_for, platform_of, target_class, target_for
from tuning.transport.base import Host
from tuning.model.outcomes import BatchOutcome

Progress = Callable[[str], None]


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

    def open(self, only: set[str] | None = None) -> None:
        """Connect to every device (or those in ``only``) in parallel; for every device, after making
        room for a session per inventory device (:func:`tuning.rollout.fdlimit.ensure_fds`: the
        selection's and the nodes verification reads). Raises the first ConnectError (every session
        closed); SetupError when the file-descriptor limit cannot hold them."""
        if only is None:
            ensure_fds(len(self.inv.devices))
        ok, failed = outcomes(fan_out(self.nr, open_target, "connect", only=only, timeout_s=self.timeouts.connect_s))
        self.targets.update(ok)
        for t in ok.values():
            permit_overwrite(t, self.allow_overwrite_files)
        if failed:
            self.close()
            raise next(iter(failed.values()))

    def read_in_waves(self, domains: set[str] | None, wave: int, progress: Progress) -> dict[str, object]:
        """A plan's read: nothing is pushed, so no session need outlive its collect. Connect, collect
        (:func:`collect`) and close at most ``wave`` devices at a time (policy ``max_connections``),
        so a fleet larger than the file-descriptor limit is planned (one descriptor a session).
        Returns every device's state. Raises as :meth:`open` and :func:`collect` (sessions closed)."""
        names = [d.name for d in self.devices]
        ensure_fds(min(wave, len(names)))
        states: dict[str, object] = {}
        for i in range(0, len(names), wave):
            chunk = set(names[i:i + wave])
            if len(names) > wave:
                progress(f"devices {i + 1}-{i + len(chunk)} of {len(names)} (at most {wave} connected at once)")
            try:
                self.open(chunk)
                states.update(collect(self, domains, chunk))
            finally:
                self.close(chunk)
        return states

    #: a switch commit may overwrite files edited by hand on the switch (``--allow-overwrite-files``):
    #: given to every opened Target that has the attribute (:class:`tuning.targets.switch.SwitchTarget`)
    allow_overwrite_files = False

    #: the journal is written by the nodes too (a front end that starts ``fabtune node`` on them)
    shared_journal = False

    def journal_keys(self) -> dict:
        """Top-level journal keys a front end adds to the snapshot (:func:`snapshot`); none here."""
        return {}

    def push_devices(self, plans: dict, j: Journal, confirm_s: int | None, todo: set[str]) -> dict[str, BaseException]:
        """Push ``todo``'s plans (:func:`push`): each device's :meth:`Target.push` in parallel; a front
        end that reaches its nodes another way (:mod:`tuning.slurm_engine`) overrides it.
        Returns ``{device: its error}`` for those that failed."""
        _, failed = outcomes(fan_out(self.nr, lambda dev: self.targets[dev.name].push(plans[dev.name], j.of(dev.name),
                                                                                   confirm_s),
                                     "apply", only=todo, timeout_s=self.timeouts.apply_s))
        return failed

    def restore(self, j: Journal, progress: Progress, only: set[str] | None = None) -> list[str]:
        """Restore the touched devices of ``only`` (:func:`tuning.rollout.rollback.restore_touched` over
        the session's targets); overridden as :meth:`push_devices`. Returns the devices restored."""
        return restore_touched(j, self.targets, progress, only=only)

    def reopen(self) -> None:
        """New sessions where a command cut short may have left its output unread (:meth:`Target.reopen`)."""
        for t in self.targets.values():
            t.reopen()

    def close(self, only: set[str] | None = None) -> None:
        """Close every connection (or those of the devices in ``only``; their Targets stay, closed,
        for the pure steps: plan, findings)."""
        for c in [t for n, t in [*self.targets.items(), *self.readers.items()] if only is None or n in only]:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - closing must not mask the run's own error
                pass


def open_target(dev: Device, here: bool | str = False) -> Target:
    """The registry's Target of ``dev``, opened; ``here``: driven from the device itself
    (:func:`tuning.targets.local_target_for`; a string: the sysroot this process sees the device's
    files at). Raises ConnectError; InputError (no target serves it, or not from itself)."""
    t = local_target_for(dev, here if isinstance(here, str) else None) if here else target_for(dev)
    t.open()
    return t


def permit_overwrite(target: Target, allowed: bool) -> Target:
    """Give ``target``, where it takes it (``allow_overwrite_files``: a switch), the run's
    ``--allow-overwrite-files`` (``fabtune_allow_overwrite_files`` in the playbooks). Returns ``target``."""
    if hasattr(target, "allow_overwrite_files"):
        target.allow_overwrite_files = allowed
    return target


def collect(s: Session, only: set[str] | None = None, devices: set[str] | None = None) -> dict[str, object]:
    """Every session device's (or those in ``devices``) state, of the domains ``only``, in parallel
    (:meth:`Target.collect`). Raises the first device's error."""
    ok, failed = outcomes(fan_out(s.nr, lambda dev: s.targets[dev.name].collect(only), "collect", only=devices,
                                  timeout_s=s.timeouts.collect_s))
    if failed:
        raise next(iter(failed.values()))
    return ok


def plan(s: Session, states: dict, domains: set[str] | None = None) -> dict[str, list]:
    """Per-device changes (only ``domains`` if given). Raises InputError before anything is pushed."""
    return {dev.name: s.targets[dev.name].plan(states[dev.name], domains) for dev in s.devices}


def findings(s: Session, states: dict, domains: set[str] | None) -> list[dict]:
    """Every selected device's findings (:meth:`Target.findings`), then each kind's findings across
    its devices (a node's C-state drift against its peers), as dicts, only ``domains`` if given."""
    out, kinds = [], {}
    for dev in s.devices:
        t = s.targets[dev.name]
        out += [f.as_dict() for f in t.findings(states[dev.name], domains)]
        kinds.setdefault(type(t), {})[dev.name] = states[dev.name]
    for kind, group in kinds.items():
        out += [f.as_dict() for f in kind.fleet_findings(group, domains, devices=s.inv.devices)]
    return out


def findings_after(s: Session, domains: set[str] | None, report: RunReport, progress: Progress) -> list[dict]:
    """Findings of the fabric as the run left it: the changed devices whose kind reports findings
    are read again (one round trip each, in parallel), so a report never shows an ACS redirect the
    run cleared or misses a reset the run made pending. A device that cannot be read again keeps
    its findings from before the run."""
    changed = {n for n in report.changes if n in s.targets and s.targets[n].reports_findings}
    if not changed:
        return report.findings
    progress(f"reading {len(changed)} changed device(s) again for the report's findings")
    dev_by_name = {d.name: d for d in s.devices}
    ok, _ = outcomes(fan_out(s.nr, lambda dev: s.targets[dev.name].collect(domains),
                             "collect", only=changed, timeout_s=s.timeouts.collect_s))
    return findings(s, {**s.states, **{n: st for n, st in ok.items() if n in dev_by_name}}, domains)


def refuse_firmware(plans: dict, allowed: bool) -> None:
    """A firmware burn (a ``fw/`` change) is pushed only with ``--allow-firmware``.

    Raises:
        InputError: the plan burns firmware and it was not allowed (nothing pushed).
    """
    burns = [f"{n}:{c.key}" for n, ch in plans.items() for c in ch if c.key.startswith("fw/")]
    if burns and not allowed:
        raise InputError("--allow-firmware", "firmware.version",
                         f"the plan burns NIC firmware ({', '.join(burns[:4])}{', ...' if len(burns) > 4 else ''}); "
                         "pass --allow-firmware to push it (nothing was pushed)")


def refuse_unverifiable(devices: list) -> None:
    """A rollout keeps a change only when its verification proves it: a selected device whose kind
    no verification exercises (:attr:`Target.verifiable` False; every kind today has one: RoCE pairs,
    incasts and nccl-tests for nodes and switches, :mod:`tuning.verify.ib_sm` for a subnet manager)
    is refused before anything is read.

    Raises:
        InputError: naming the devices and the commands that can change them (nothing pushed).
    """
    blind = [d.name for d in devices if not target_class(d.role, platform_of(d)).verifiable]
    if blind:
        raise InputError("--limit", ",".join(blind), f"a rollout keeps a change only when its verification proves "
                         f"it, and no verification exercises {', '.join(blind)}; change it with `fabtune apply` "
                         "(read back, journaled, undone by `fabtune rollback`) or leave it out with --limit; nothing was pushed")


def refuse_read_only_drift(found: list[dict]) -> None:
    """Refuse to push while a ``manage: false`` switch does not hold what its inventory entry says
    (``switch-drift`` findings, :mod:`tuning.targets.switch_findings`): the cross-device rules took
    the entry's word, so the nodes' lossless class would rest on a switch that does not carry it
    (on the lab: every pair through it fails verification, and the rollout is undone).

    Raises:
        InputError: naming each such switch and the first settings it differs in (nothing pushed).
    """
    drift: dict[str, list[str]] = {}
    for f in found:
        if f.get("code") == "switch-drift":
            drift.setdefault(f["device"], []).append(f["message"].partition(": ")[0])
    if drift:
        said = "; ".join(f"{sw}: {len(keys)} setting(s) ({', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''})"
                         for sw, keys in sorted(drift.items()))
        first = sorted(drift)[0]
        raise InputError(f"host_vars/{first}.yml", "manage",
                         f"manage: false switch(es) do not hold what the inventory says ({said}); the nodes' "
                         "settings rely on them: have their owners set them, or make their host_vars say what they "
                         "run (`fabtune plan` lists each as switch-drift); nothing was pushed")


def push(s: Session, plans: dict, j: Journal, confirm_s: int | None,
           only: set[str] | None = None) -> dict[str, BaseException]:
    """Push every device's plan (of ``only``, when given) in parallel, each within the policy's
    ``apply_s`` (else ``DeviceTimeout``): :meth:`Target.push`, which journals ``pushing`` BEFORE
    its first write, so a controller killed mid-push still leaves a journal that can be rolled back."""
    todo = {name for name, ch in plans.items() if ch and (only is None or name in only)}
    return s.push_devices(plans, j, confirm_s, todo) if todo else {}


def snapshot(s: Session, opts, plans: dict, r, shared: bool = False, **extra: object) -> Journal:
    """The run's journal with everything a restore needs, written before the first write
    (contract: docs/architecture.md): each device's :meth:`Target.record` of its collected state
    and its planned changes, the batches (each device's batch), the policy (``fabtune report
    RUN_ID`` prints it again) and ``extra`` top-level keys (a front end's own state); stage
    ``snapshot``. ``opts``: the run's Options; ``r``: its Run; ``shared``: see
    :attr:`Journal.shared`. Raises JournalWriteError (nothing pushed)."""
    j = Journal.create(opts.journal_dir, str(s.inv.path), opts.mode, r.run_id, shared=shared or s.shared_journal,
                       started=getattr(r, "started", None))
    for dev in s.devices:
        j.device(dev.name).update({**s.targets[dev.name].record(s.states[dev.name]),
                                   "changes": [c.as_dict() for c in plans[dev.name]]})
    journal_batches(j, r.batches)
    j.data.update(policy=r.policy.model_dump(mode="json"), **{**s.journal_keys(), **extra})
    j.stage("snapshot")
    return j


def journal_batches(j: Journal, batches: list[Batch]) -> None:
    """Record each device's ``batch`` and the run's ``batches`` (all ``not-run``, each with its
    ``phases``, ``why`` and ``order``: what ``fabtune report RUN_ID`` prints) in the journal."""
    for b in batches:
        for name in b.devices:
            j.device(name)["batch"] = b.index
    j.data["batches"] = [{**b.as_dict(), "outcome": BatchOutcome.NOT_RUN, "failed": [], "unreachable": [], "verify_ok": None}
                         for b in batches]
