"""The verification gate of a run: which pairs prove it (the whole inventory's schedule, or a
batch's), the switch confirm window that must outlast them, the incasts' time, and one
verification of the fabric with the session's node shells."""

from __future__ import annotations

import math
from typing import Callable

from tuning.errors import InputError
from tuning.inventory import Inventory
from tuning.rollout.options import Options, Run
from tuning.rollout.session import Session
from tuning.targets import platform_of, target_class
from tuning.verify.pairs import Pair, build_rounds, default_per_node, node_rails
from tuning.verify.pair_result import harness_node
from tuning.verify.runner import expected_seconds, verify
from tuning.verify.schedule import WORKER_CAP, plan_schedule

Progress = Callable[[str], None]


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


def ib_verified(dev) -> bool:
    """Whether the IB verification (:func:`verify_sm`) proves ``dev`` (its Target's ``ib_verified``:
    a subnet manager), not RoCE pairs."""
    return getattr(target_class(dev.role, platform_of(dev)), "ib_verified", False)


def subnet_managers_only(inv: Inventory, names) -> bool:
    """Whether every device ``names`` lists is proven by the IB verification alone (:func:`ib_verified`):
    a selection with no RoCE pair."""
    return all(ib_verified(inv.devices[n]) for n in names)


def rollout_pairs(inv: Inventory, opts: Options, devices: list) -> list[Pair]:
    """A rollout's RoCE pairs (:func:`verify_pairs` of the whole inventory), [] when the selection
    holds subnet managers only; before that, a subnet manager whose partitions cannot be proven
    (:func:`tuning.verify.ib_sm.unprovable`) is refused.

    Raises:
        InputError: naming the SM's file, ``partitions`` and why (nothing read or pushed), or as
            :func:`verify_pairs`.
    """
    from tuning.verify.ib_sm import unprovable

    for d in devices:
        why = unprovable(d.spec) if ib_verified(d) else []
        if why:
            raise InputError(d.sources.get("partitions", str(inv.path)), "partitions",
                             f"{'; '.join(why)}: a rollout keeps a change only when its verification proves it "
                             f"(host {d.name}); nothing was pushed")
    return [] if subnet_managers_only(inv, [d.name for d in devices]) else verify_pairs(inv, opts.rails)


def batch_pairs(inv: Inventory, opts: Options, names: list[str]) -> list[Pair]:
    """A batch's own RoCE pairs (:func:`verify_pairs` limited to its devices); [] for a batch of
    subnet managers only (proven by :func:`verify_sm`)."""
    return [] if subnet_managers_only(inv, names) else verify_pairs(inv, opts.rails, names)


def verify_sm(s: Session, names: list[str], j, plans: dict, progress: Progress,
              skip: set[str] = frozenset()) -> tuple[bool, list]:
    """The InfiniBand verification (:func:`tuning.targets.sm_verify.prove_said`) of each subnet manager of
    ``names`` that the run changed (``plans``) and that holds its push (not in ``skip``: failed or
    unreachable, restored or left), with the session's SM shells and each SM's journal record.

    Returns:
        ``(every verdict passed, [PairResult, ...])``; ``(True, [])`` when no such SM.

    Raises:
        TuningError: a read on an SM host failed (:func:`tuning.targets.sm_verify.prove`).
    """
    from tuning.targets.sm_verify import prove_said

    out = []
    for name in names:
        t = s.targets.get(name)
        if not getattr(t, "ib_verified", False) or not plans.get(name) or name in skip:
            continue
        out += prove_said(t, s.inv.devices[name].spec, progress, j.device(name), plans[name])
    return all(x.status == "pass" for x in out), out


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
    ``pairs``: their rounds, up to ``workers`` pairs at a time, times the samples a pair starts with
    under the thresholds' noise, ``Thresholds.first_samples``) + pushing ``n_devices``
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
    samples = opts.thresholds.first_samples()  # a noisy fabric's policy measures each pair more than once
    need = math.ceil(expected_seconds(pairs, workers, samples=samples) + extra_s) + pushes + settle + CONFIRM_MARGIN_S
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


def verify_nccl(s: Session, opts: Options, before: list[dict] | None, progress: Progress) -> list:
    """The policy's nccl-tests jobs over the selection's nodes (inventory order), with the session's
    node shells (:func:`tuning.verify.nccl_verdict.measure`; ``before``: the baseline's jobs, None
    when this is the baseline). Each command may take the policy's ``verify_s`` (default 600 s)."""
    from tuning.verify.nccl_verdict import measure

    names = {d.name for d in s.devices}
    nodes = [d for d in s.inv.nodes if d.name in names]
    hosts = s.node_hosts({d.name for d in nodes})
    return measure(nodes, hosts, opts.policy.nccl, opts.thresholds, float(opts.policy.timeouts.verify_s or 600),
                   before, progress)


def measure_baseline(s: Session, opts: Options, r, progress: Progress, journal, changed: bool) -> tuple[bool, list]:
    """The stage ``baseline`` of a verified run (the engine's and the Ansible begin's, ``r``: its
    :class:`tuning.rollout.batch_run.Run`): every pair of :func:`baseline_pairs` into the journal's
    ``verify.before``, then, when the policy enables nccl-tests and the run ``changed`` something,
    its jobs into ``verify.nccl_before`` (the last batch is judged against them; a run with no
    change judges nothing against them). Returns ``(every pair passed, PairResults)``."""
    from tuning.verify.nccl_verdict import as_dicts

    journal.stage("baseline")
    ok, before = verify_fabric(s, opts, None, progress, baseline_pairs(r))
    journal.data["verify"]["before"] = [x.__dict__ for x in before]
    if opts.policy.nccl.enabled and changed:
        journal.data["verify"]["nccl_before"] = as_dicts(verify_nccl(s, opts, None, progress))
    return ok, before


def nccl_gate(s: Session, opts: Options, report, progress: Progress, journal) -> bool:
    """After the last batch (policy ``nccl.enabled``): :func:`verify_nccl` against the baseline
    stage's jobs (the journal's ``verify.nccl_before``), into ``report.nccl_after``, its ``nccl-not-run``
    findings and the journal; whether the jobs pass (:func:`tuning.verify.nccl_verdict.passed`)."""
    if not opts.policy.nccl.enabled:
        return True
    from tuning.verify import nccl_verdict

    jobs = verify_nccl(s, opts, journal.data["verify"].get("nccl_before") or [], progress)
    report.nccl_after = nccl_verdict.as_dicts(jobs)
    report.findings += nccl_verdict.findings(jobs, opts.policy.nccl.required)
    journal.data["verify"]["nccl_after"] = report.nccl_after
    return nccl_verdict.passed(jobs, opts.policy.nccl.required)


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


def nccl_restored(s: Session, opts: Options, report, progress: Progress, journal) -> bool | None:
    """After a regression's restore put every batch back (nothing kept) in a run whose last batch
    ran nccl-tests (policy ``nccl.enabled``): the jobs again, judged against the baseline stage's
    (the journal's ``verify.nccl_before``), into ``verify.nccl_restored`` and ``report.nccl_restored``.
    Returns whether the restored fabric is back to the baseline by them: False when a job regressed
    or failed on the network, True when every job passed, None when none ran or the harness kept
    one from running (that says nothing of the fabric)."""
    from tuning.model.outcomes import RunOutcome
    from tuning.verify.nccl_verdict import as_dicts

    v = journal.data["verify"]
    if not (opts.policy.nccl.enabled and v.get("nccl_before") and v.get("nccl_after")
            and report.outcome == RunOutcome.ROLLED_BACK):
        return None
    progress("nccl-tests on the restored fabric against the baseline")
    jobs = verify_nccl(s, opts, v["nccl_before"], progress)
    report.nccl_restored = v["nccl_restored"] = as_dicts(jobs)
    if any(j.status == "fail" for j in jobs):
        return False
    return True if all(j.status == "pass" for j in jobs) else None


def gate_failed_why(index: int, results: list[dict], nccl: list[dict] | None = None) -> str:
    """Why batch ``index``'s gate failed (the console, the journal's ``halt`` and the report say it),
    from its pair results (the journal's batch record ``results``): ``batch 2: verification failed
    or regressed``, with the pairs the harness kept from testing (``error_class == "harness"``); when
    the harness alone failed, it says so: the fabric was not tested, the change is unproven and
    restored as such, not as a fabric regression. Up to 3 failed IB verdicts (``ib ...``,
    :func:`verify_sm`) are named with their first reason, the evidence read. When every pair passed, the nccl-tests jobs that
    did not (``nccl``: the report's ``nccl_after``) are named with their reasons."""
    bad = [x for x in results if x.get("status") != "pass"]
    jobs = [x for x in nccl or [] if x.get("status") != "pass"]
    if not bad and jobs:
        return f"batch {index}: every pair passed, nccl-tests did not: " + "; ".join(
            r for x in jobs for r in x.get("reasons") or [f"{x.get('test')} {x.get('status')}"])
    harness = [x for x in bad if x.get("error_class") == "harness"]
    if bad and len(harness) == len(bad):
        kinds = ", ".join(sorted({str(x.get("error_kind")) for x in harness}))
        nodes = ", ".join(sorted({harness_node(x) for x in harness}))
        return (f"batch {index}: the verification harness failed on {len(harness)} pair(s) ({kinds} on {nodes}): "
                f"the fabric was not tested, the change is unproven (not a fabric regression)")
    tail = f" ({len(harness)} pair(s) not tested: the verification harness failed)" if harness else ""
    from tuning.verify.ib_sm import failed_words

    return f"batch {index}: verification failed or regressed{tail}{failed_words(bad)}"
