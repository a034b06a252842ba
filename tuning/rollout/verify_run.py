"""A stand-alone verification (``fabtune verify``, Ansible's ``verify.yml``): every pair, the
incasts and the nccl-tests jobs of the selection, and the InfiniBand checks of its subnet managers
(:func:`tuning.targets.sm_verify.verify_sms`, the rollout gate's :func:`~tuning.targets.sm_verify.prove`),
judged against the pass marks and the recorded baseline, under the inventory's lock. Nothing is
changed on any device."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from tuning.inventory import Inventory
from tuning.verify.runner import Thresholds


@dataclass
class Verification:
    """What a stand-alone verification measured.

    ``ok``: every pair and incast passed and no nccl-tests job failed (a job the harness kept from
    running fails it only with ``nccl.required``); ``pairs``: PairResult dicts; ``incast``:
    IncastResult dicts; ``nccl``: :class:`tuning.verify.nccl.NcclRun` dicts (bus bandwidth GB/s)
    judged against the baseline file's ``nccl:<test>:<nodes>`` entries; ``findings``: the
    ``nccl-not-run`` findings; ``ib``: the subnet managers' IB verdicts (PairResult dicts named
    ``ib ...``, :mod:`tuning.verify.ib_sm`), every one must pass."""

    ok: bool
    pairs: list[dict]
    incast: list[dict] = field(default_factory=list)
    nccl: list[dict] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)
    ib: list[dict] = field(default_factory=list)


def selected_nodes(inv: Inventory, limit: list[str] | None) -> list:
    """The inventory's nodes a ``--limit`` selects (hosts or groups; None: all), inventory order."""
    if not limit:
        return list(inv.nodes)
    names = {d.name for d in inv.select(limit)}
    return [d for d in inv.nodes if d.name in names]


def verify_only(inv: Inventory, journal_dir: Path, th: Thresholds, progress,
                rails: tuple[int, ...] | None = None, limit: list[str] | None = None,
                incast: bool = True) -> Verification:
    """Measure every pair (of the devices ``limit`` names, None: all) and judge against ``th`` and
    the recorded baseline (if any); then, when the inventory expects lossless
    (:meth:`tuning.verify.incast.Expectation.from_inventory`), ``incast`` is True and the policy's
    ``incast.enabled``, one k-to-1 incast per leaf of the selection (k = ``incast.k``); then, with
    the policy's ``nccl.enabled``, its nccl-tests jobs over the selected nodes against the baseline's
    jobs over the same nodes (:func:`tuning.verify.nccl_verdict.measure`); then the IB verification
    of the selection's subnet managers (:func:`tuning.targets.sm_verify.verify_sms`). A selection of
    subnet managers only has no RoCE pair, incast or job (as a rollout's,
    :func:`tuning.rollout.gate.rollout_pairs`).

    Holds the inventory's lock like a run: RDMA tests beside another run's would load the same
    links and spoil both runs' measurements.

    Raises:
        LockError: another run holds the inventory (nothing measured).
        InputError: no RoCE pair where the selection holds more than subnet managers
            (:func:`tuning.rollout.gate.verify_pairs`).
    """
    from tuning.rollout import baseline, gate, journal, lock, session  # live only: render needs none
    from tuning.targets.sm_verify import verify_sms

    run_id = journal.new_run_id()
    recorded = baseline.load_baseline(journal_dir, inv.path)
    scope = list(inv.select(limit)) if limit else list(inv.devices.values())
    with lock.RunLock(lock.lock_path(inv.path), run_id, "verify", journal_dir / f"{run_id}.json"):
        s = session.Session(inv, [], 1)  # no device is changed: the nodes are opened as the pairs need them
        try:
            got = Verification(True, [])
            if not gate.subnet_managers_only(inv, [d.name for d in scope]):
                got = _roce(s, th, rails, limit, recorded, incast, progress)
            got.ib = [dict(x.__dict__) for x in verify_sms([d for d in scope if gate.ib_verified(d)], progress)]
            got.ok = got.ok and all(x["status"] == "pass" for x in got.ib)
        finally:
            s.close()
    return got


def _roce(s, th: Thresholds, rails: tuple[int, ...] | None, limit: list[str] | None, recorded: dict | None,
          incast: bool, progress) -> Verification:
    """The RoCE part of :func:`verify_only` with the session ``s``: the pairs, the incasts, the nccl-tests jobs."""
    from tuning.rollout import gate, options
    from tuning.verify import nccl_verdict
    from tuning.verify.incast import Expectation, leaves_of, plan_incasts, run_incasts

    inv = s.inv
    opts = options.Options(mode="verify", thresholds=th, rails=rails, limit=limit)
    ok, results = gate.verify_fabric(s, opts, recorded, progress)
    incasts, expect = [], Expectation.from_inventory(inv)
    if incast and inv.policy.incast.enabled and expect.lossless:
        planned = plan_incasts(inv, leaves_of(inv, limit), inv.policy.incast.k)
        hosts = s.node_hosts({i.receiver for i in planned} | {n for i in planned for n, _ in i.senders})
        inc_ok, incasts = run_incasts(planned, hosts, expect, progress)
        ok = ok and inc_ok
    jobs = _nccl(s, limit, recorded, th, progress) if inv.policy.nccl.enabled else []
    ok = ok and nccl_verdict.passed(jobs, inv.policy.nccl.required)
    return Verification(ok, [r.__dict__ for r in results], [asdict(r) for r in incasts],
                        nccl_verdict.as_dicts(jobs), nccl_verdict.findings(jobs, inv.policy.nccl.required))


def _nccl(s, limit: list[str] | None, recorded: dict | None, th: Thresholds, progress) -> list:
    """The policy's nccl-tests jobs over the selected nodes, judged against the baseline file's
    jobs over the same nodes (``recorded``: :func:`tuning.rollout.baseline.load_baseline`)."""
    from tuning.verify.nccl_verdict import measure

    nodes = selected_nodes(s.inv, limit)
    before = [v for k, v in (recorded or {}).items() if k.startswith("nccl:") and isinstance(v, dict)]
    return measure(nodes, s.node_hosts({d.name for d in nodes}), s.inv.policy.nccl, th,
                   float(s.inv.policy.timeouts.verify_s or 600), before, progress)
