"""What a run did, as plain data: :class:`RunReport`, built by the engine, rollback, the offline
plan and the Ansible front end, read by the reports (text, JSON, JUnit, history) and the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field

from tuning.model.outcomes import RunOutcome


@dataclass
class RunReport:
    """What a run did, as plain data (JSON-ready via :meth:`as_dict`).

    ``outcome``: a :class:`~tuning.model.outcomes.RunOutcome` (planned | no-change | applied | kept |
    halted | rolled-back | failed). ``batches``: per batch ``{index, nodes, switches, phases, why,
    order, outcome: a BatchOutcome, failed, unreachable, verify_ok}``;
    ``unreachable``: devices that did not answer (counted apart from ``errors``' failed ones);
    ``restored_verified``: after a regression's restore, whether verification is back to the
    baseline (None: not verified); ``incast``: :class:`tuning.verify.incast.IncastResult` dicts.
    ``verify_after``: each verified pair's FINAL result once (measured after the last batch that
    changed an end or hop of it, :func:`tuning.rollout.batch_run.final_results`); every batch's
    own results are in ``batches[i]["results"]``. ``not_run``: devices with planned changes the
    run never pushed (it halted before their batch or phase); their changes stay in ``changes``
    as planned and are not counted by :attr:`n_changes`. ``nccl_before`` / ``nccl_after``: the
    nccl-tests jobs of a rollout's baseline and of its last batch (policy ``nccl``;
    :class:`tuning.verify.nccl.NcclRun` dicts, bus bandwidth in GB/s); empty when none ran.
    ``nccl_restored``: the jobs again after a regression's restore put every batch back
    (:func:`tuning.rollout.gate.nccl_restored`), judged against ``nccl_before``.
    """

    run_id: str | None
    mode: str
    outcome: RunOutcome = RunOutcome.PLANNED
    changes: dict[str, list[dict]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    restored: list[str] = field(default_factory=list)
    verify_before: list[dict] = field(default_factory=list)
    verify_after: list[dict] = field(default_factory=list)
    verify_ok: bool | None = None
    seconds: float = 0.0
    findings: list[dict] = field(default_factory=list)
    kept: dict[str, list[dict]] = field(default_factory=dict)  # irreversible changes a restore left in place
    batches: list[dict] = field(default_factory=list)
    policy: dict | None = None
    unreachable: list[str] = field(default_factory=list)
    restored_verified: bool | None = None
    incast: list[dict] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)
    nccl_before: list[dict] = field(default_factory=list)
    nccl_after: list[dict] = field(default_factory=list)
    nccl_restored: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        """JSON-ready dict."""
        return dict(self.__dict__)

    @property
    def n_changes(self) -> int:
        """Number of setting changes planned (a plan) or pushed: the changes of :attr:`not_run`
        devices are not counted."""
        skip = set(self.not_run)
        return sum(len(v) for n, v in self.changes.items() if n not in skip)
