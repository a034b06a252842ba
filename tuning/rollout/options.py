"""What a run is told (:class:`Options`) and what it fixes before its first push (:class:`Run`):
shared by the engine, its batches (:mod:`tuning.rollout.batch_run`) and the Ansible stages."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tuning.model.policy import RolloutPolicy
from tuning.rollout.batches import Batch
from tuning.rollout.journal import DEFAULT_DIR
from tuning.verify.pairs import Pair
from tuning.verify.runner import Thresholds


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
    allow_overwrite_files: bool = False  # a switch commit may overwrite files edited by hand (NVUE's warning)
    allow_reboot: bool = False  # reboot nodes whose changes need a boot (--engine slurm only: tuning.slurm_reboot)
    policy: RolloutPolicy | None = None  # batches, caps, timeouts (None: the inventory's ``fabtune_rollout``)


@dataclass
class Run:
    """What a run fixed before its first push: its id, its verification pairs (whole inventory),
    the confirm window (s) checked against them, its policy and batches, each batch's pairs
    (index -> pairs of its scope), the batch being run (``current``) and when it began
    (``started``: the console's duration and ``fabtune runs`` count from it)."""

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
    started: float | None = None  # wall clock (epoch s) when the run began; the journal's ``started``
