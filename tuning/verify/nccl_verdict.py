"""nccl-tests in a verification (policy ``nccl``, :class:`tuning.model.policy.NcclPolicy`): the jobs
over the tuned nodes, their samples, the verdict against the baseline and the findings.

What runs: one job per test of the policy over the WHOLE selection's nodes (a process per node,
every NIC in ``NCCL_IB_HCA``: :mod:`tuning.verify.nccl`), not one per rail: a training job spans
all of a node's rails at once, NCCL stripes its channels over them and a ring waits on its slowest
link, so one job shows a slow NIC on any rail; the pairs already locate a fault per rail and link.
A rollout measures the jobs in its baseline stage and again after its last batch (the whole
selection then holds the new settings: a job over half-tuned nodes mixes classes).

Verdict of a job (``status``):
    ``pass``       a bus bandwidth, within the baseline's noise rule (or no baseline value)
    ``fail``       a drop past ``thresholds.bw_drop_pct`` judged as a pair's bandwidth
                   (:func:`tuning.verify.samples.judge_change`: means of the samples, sigma the larger of
                   ``noise_pct`` and the samples' own spread, ``confidence``; undecided -> one more
                   sample, up to ``max_samples``), or an NCCL failure on the network (a fabric fault)
    ``not-run``    the harness kept it from running (:data:`tuning.verify.nccl.HARNESS_KINDS`: tool
                   missing, a launch whose ranks never met, a node that did not answer): the finding
                   ``nccl-not-run``, a failure only with ``required``; never read as a fabric fault
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Callable

from tuning.transport.base import Host
from tuning.verify.nccl import NcclRun, baseline_key, run_job, run_once, span
from tuning.verify.pair_verdict import Thresholds
from tuning.verify.samples import judge_change, observed_noise

Progress = Callable[[str], None]


def judge_job(job: NcclRun, base: dict | None, th: Thresholds, last: bool) -> str:
    """Set ``job``'s ``status``, ``reasons``, ``judged`` and ``baseline_gbs`` (module docstring)
    against ``base`` (the baseline's job dict, or None) and return the comparison's outcome:
    ``regressed`` | ``held`` | ``undecided`` | ``none`` (no comparison: no value on a side)."""
    job.reasons, job.judged = [], None
    if job.error_kind:
        job.status = "not-run" if job.error_class == "harness" else "fail"
        job.reasons = [f"{job.test} over {span(job.nodes)} gave no bus bandwidth ({job.error_kind}, "
                       f"{job.error_class}): {job.error}"]
        return "none"
    before = [float(x) for x in (base or {}).get("samples") or [] if x]
    job.status = "pass"
    if not before:
        return "none"
    job.baseline_gbs = round(sum(before) / len(before), 4)
    sigma = max(th.noise_pct, observed_noise([job.samples, before]) or 0.0)
    got = judge_change("bandwidth", job.samples, before, th.bw_drop_pct, sigma, th.confidence, last)
    job.judged = f"bus bandwidth {job.busbw_gbs:g} GB/s vs baseline {job.baseline_gbs:g} GB/s: {got.text}"
    if got.outcome == "regressed":
        job.status = "fail"
        job.reasons = [f"{job.test} over {span(job.nodes)} regressed: {job.judged}"]
    return got.outcome


def measure(devices: list, hosts: dict[str, Host], policy, th: Thresholds, timeout_s: float,
            before: list[dict] | None = None, progress: Progress | None = None) -> list[NcclRun]:
    """Run and judge each of ``policy.tests`` over ``devices`` (the selection's nodes, rank order):
    one job over all of them (the ring a training job forms) and, with ``policy.pairs``, one per
    pair of nodes (:func:`node_groups`), one job at a time.

    Args:
        policy: the :class:`tuning.model.policy.NcclPolicy`.  th: the pairs' thresholds (the noise rule).
        before: the baseline's jobs (dicts of :class:`NcclRun`); None: this is the baseline
            (``th.baseline_samples()`` samples, else ``th.first_samples()`` and more while undecided).
            A job is judged against the baseline's job of the same test over the same nodes.

    Returns:
        One judged :class:`NcclRun` per test and node group; a job over fewer than 2 nodes is
        ``not-run`` (one node's job crosses no link).
    """
    base = {(b["test"], tuple(b.get("nodes") or ())): b for b in before or [] if isinstance(b, dict) and "test" in b}
    out = []
    for test in policy.tests:
        for group in node_groups(devices, getattr(policy, "pairs", False)):
            job = _measure_one(test, group, hosts, policy, th, timeout_s, base, before is None)
            if progress:
                progress(line(job))
            out.append(job)
    return out


def node_groups(devices: list, pairs: bool) -> list[list]:
    """The node sets nccl-tests jobs run over: all of ``devices``, then with ``pairs`` each two
    consecutive ones (an odd last node with the first) when there are more than two."""
    groups = [list(devices)]
    if pairs and len(devices) > 2:
        groups += [[devices[i], devices[(i + 1) % len(devices)]] for i in range(0, len(devices), 2)]
    return groups


def _measure_one(test: str, devices: list, hosts: dict[str, Host], policy, th: Thresholds, timeout_s: float,
                 base: dict, baseline: bool) -> NcclRun:
    """One job of ``test`` over ``devices``, sampled and judged against ``base``'s job of the same
    test and nodes (:func:`measure`)."""
    nodes = [d.name for d in devices]
    if len(devices) < 2:
        job = NcclRun(test, nodes).failed(
            "single_rank", f"{len(devices)} node(s) selected: an nccl-tests job across nodes needs 2 or more")
        judge_job(job, None, th, True)
        return job
    want = th.baseline_samples() if baseline else th.first_samples()
    job = run_job(test, devices, hosts, (policy.min_bytes, policy.max_bytes), timeout_s, want)
    prior = base.get((test, tuple(job.nodes)))
    while judge_job(job, prior, th, len(job.samples) >= th.max_samples) == "undecided":
        if run_once(job, hosts, timeout_s).error_kind:
            judge_job(job, prior, th, True)
            break
    return job


def line(job: NcclRun) -> str:
    """``nccl all_reduce_perf over node01..node04 (4 nodes): 184.4 GB/s bus bandwidth (2 sample(s), class
    106): pass``; a pair's job names both nodes (``over node01, node02 (2 nodes)``)."""
    what = (f"{job.busbw_gbs:g} GB/s bus bandwidth ({len(job.samples)} sample(s), "
            f"{'class ' + str(job.tos) if job.tos is not None else 'traffic class 0'})"
            if not job.error_kind else f"no value ({job.error_kind}: {job.error})")
    return f"nccl {job.test} over {span(job.nodes)} ({len(job.nodes)} nodes): {what}: {job.status}" + (
        f"; {job.judged}" if job.judged else "")


def passed(jobs: list[NcclRun], required: bool) -> bool:
    """Whether the jobs pass the verification: none ``fail``, and with ``required`` none ``not-run``."""
    return all(j.status == "pass" or (j.status == "not-run" and not required) for j in jobs)


def findings(jobs: list[NcclRun], required: bool) -> list[dict]:
    """One ``nccl-not-run`` finding per job the harness kept from running (report ``findings``)."""
    return [{"device": j.nodes[0] if j.nodes else "-", "domain": "verify", "code": "nccl-not-run",
             "message": f"{j.test} did not run across {', '.join(j.nodes) or 'no node'} ({j.error_kind}: {j.error}): "
                        "the tuned class was not shown to NCCL" + (" (nccl.required: the verification fails)"
                                                                   if required else ""),
             "evidence": "policy nccl.required: " + str(required).lower()} for j in jobs if j.status == "not-run"]


def as_dicts(jobs: list[NcclRun]) -> list[dict]:
    """The jobs as report / journal dicts."""
    return [asdict(j) for j in jobs]


def as_baseline(jobs: list[dict]) -> dict[str, dict]:
    """The jobs that gave a value as baseline entries: ``{"nccl:all_reduce_perf:node01,...": job}``
    (:func:`tuning.verify.nccl.baseline_key`), for :func:`tuning.rollout.baseline.save_baseline`."""
    return {baseline_key(j["test"], j["nodes"]): j for j in jobs if j.get("busbw_gbs") is not None
            and not j.get("error_kind")}
