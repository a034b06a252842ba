"""A mixed fabric's report for people (issue 22, must-show 4), no lab: a batch holding RoCE pairs and an
SM's IB checks says both, ``1/1 pairs passed`` and ``InfiniBand verification, batch 1: 17/17 checks
passed`` (the console counted the RoCE pairs only). The verdicts are the IB verification's own
(:mod:`tuning.verify.ib_sm`) over the fixture fabric of ``tests/ib/test_sm_model.py``; the lab test is
``test_ib_mixed_lab.py``."""

from __future__ import annotations

from tuning.model.ib_sm import pkey_word
from tuning.verify import ib_sm
from tuning.verify.pair_result import PairResult

from tests.ib.test_ib_verify import ALL_FULL, GUIDS, NAMES, PORTS, plan, spec
from tests.ib.test_sm_model import TENANT
from tuning.targets.sm_verify import intents

ROCE = dict(PairResult("node01:mlx5_0->node02:mlx5_0", "leaf01", "node01:mlx5_0", "node02:mlx5_0", bw_gbps=390.2,
                       verdict="pass", status="pass").__dict__)


def verdicts(tables: dict | None = None) -> list[dict]:
    """The pkey verdicts of a rollout of tenant1 without a Default rule against ``tables`` read (None:
    every port holds what the intents say)."""
    s = spec(TENANT)
    its = intents(s, PORTS, plan(s), ALL_FULL)
    if tables is None:
        tables = {g: {pkey_word(it.pkey): it.members[g] for it in its if g in it.members} for g in GUIDS}
    return [dict(ib_sm.judge_pkeys("sm01", it, NAMES, tables).__dict__) for it in its]


def test_a_batch_of_roce_pairs_and_ib_checks_says_how_many_ib_checks_passed():
    assert ib_sm.summarise([ROCE, *verdicts()]) == "2/2 checks passed"
    assert ib_sm.summarise([ROCE]) is None  # a RoCE-only batch: no IB line


def test_a_failed_ib_check_is_named_with_its_evidence_and_the_harness_apart():
    bad = verdicts({g: {"0x7fff": "limited"} for g in GUIDS})
    lone = dict(ib_sm.harness("sm01", "solo paths", "no_pairs", "partition solo: no full member").__dict__)
    said = ib_sm.summarise([ROCE, *bad, lone])
    assert said == ("3/3 checks failed; ib tenant1 0x0001 pkeys: node01 mlx5_0/1: 0x0001 absent, want full (+15 more); "
                    "ib Default 0x7fff pkeys: node01 mlx5_0/1: 0x7fff limited, want full (full before the run: it "
                    "cannot talk to other limited members) (+15 more) (1 not run: the verification harness failed)")
    assert ib_sm.failed_words([ROCE, lone]) == ""  # neither a RoCE pair nor the harness's error is an IB failure
