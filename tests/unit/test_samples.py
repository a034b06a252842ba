"""Judging regressions on noisy samples (issue 20): the sample counts, the pooled noise, the
confident / undecided / decided-by-the-mean outcomes, and :func:`judge` on means with the
statement it records. Real numbers from the rule in tuning.verify.samples."""

from __future__ import annotations

import math
import random

import pytest

from tuning.verify.pair_result import PairResult
from tuning.verify.pair_verdict import Thresholds, as_baseline, judge, noise_of, undecided
from tuning.verify.samples import baseline_samples, first_samples, judge_change, observed_noise, z_of

PARAMS = {"bw": {"tool": "ib_write_bw", "size_bytes": 65536, "duration_s": 2, "iters": None, "qps": 1,
                 "direction": "uni"},
          "lat": {"tool": "ib_read_lat", "size_bytes": 2, "duration_s": None, "iters": 1000, "qps": 1,
                  "direction": "uni"}}


def _pair(bw: list[float], lat: list[float], name: str = "node01:mlx5_0->node02:mlx5_0") -> PairResult:
    r = PairResult(name, "leaf", "node01:mlx5_0", "node02:mlx5_0", params=PARAMS)
    r.bw_samples, r.lat_samples = bw, lat
    r.bw_gbps, r.lat_us = sum(bw) / len(bw), sum(lat) / len(lat)
    return r


def test_z_and_sample_counts_follow_the_rule():
    assert round(z_of(0.99), 3) == 2.326 and round(z_of(0.95), 3) == 1.645
    with pytest.raises(ValueError, match="between 0.5 and 1"):
        z_of(1.0)
    # 3 % noise, 5 % mark, 99 %: baseline ceil((2 x 2.326 x 0.6)^2) = ceil(7.79) = 8, first ceil(1.95) = 2
    assert (baseline_samples(3, 5, 0.99, 12), first_samples(3, 5, 0.99, 12)) == (8, 2)
    assert (baseline_samples(1, 5, 0.99, 12), first_samples(1, 5, 0.99, 12)) == (1, 1)
    assert baseline_samples(10, 5, 0.99, 12) == 12  # capped at max_samples
    assert (baseline_samples(0, 5, 0.99, 8), first_samples(3, 0, 0.99, 8)) == (1, 1)
    th = Thresholds(noise_pct=3, max_samples=12)  # the tighter mark (5 % of 5 and 15) decides
    assert (th.baseline_samples(), th.first_samples()) == (8, 2)


def test_observed_noise_pools_relative_spread_and_needs_two_samples():
    assert observed_noise([[390.0], [100.0]]) is None
    # each series' population sd / mean = 1 %, 2 samples each: pooled sqrt(sum(var x n) / sum(n - 1))
    v = observed_noise([[99.0, 101.0], [198.0, 202.0]])
    assert v == pytest.approx(math.sqrt((0.01 ** 2 * 2 * 2) / 2) * 100)
    assert noise_of([_pair([99.0, 101.0], [2.0, 2.0])], Thresholds(noise_pct=1.0), None) == pytest.approx(1.4142, 1e-3)
    assert noise_of([_pair([100.0], [2.0])], Thresholds(noise_pct=1.0), None) == 1.0


def test_judge_change_is_confident_undecided_or_decided_by_the_mean():
    held = judge_change("bandwidth", [390.0], [391.0], 5, 1.0, 0.99, last=False)
    assert held.outcome == "held" and held.text == ("bandwidth drop 0.3 % +/- 3.3 % (99 %, 1 vs 1 sample): "
                                                    "within the 5 % mark")
    bad = judge_change("bandwidth", [195.0], [390.0], 5, 1.0, 0.99, last=False)
    assert bad.outcome == "regressed" and bad.change_pct == 50.0
    near = judge_change("bandwidth", [370.5], [390.0], 5, 1.0, 0.99, last=False)  # 5.0 % drop
    assert near.outcome == "undecided" and near.text.endswith("undecided: more samples")
    at_max = judge_change("bandwidth", [370.0] * 8, [390.0] * 8, 5, 1.0, 0.99, last=True)  # 5.13 %
    assert at_max.outcome == "regressed" and "decided by the mean" in at_max.text
    lat = judge_change("latency", [2.5], [2.0], 15, 0.0, 0.99, last=False)  # exact: a 25 % rise
    assert (lat.outcome, lat.margin_pct, lat.text) == ("regressed", 0.0, "latency rise 25.0 % (99 %, 1 vs 1 sample): "
                                                       "past the 15 % mark")
    gain = judge_change("bandwidth", [780.0], [400.0], 5, 0.0, 0.99, last=False)  # a tuning that doubled it
    fall = judge_change("latency", [1.5], [2.0], 15, 0.0, 0.99, last=False)
    assert (gain.change_pct, gain.text) == (-95.0, "bandwidth gain 95.0 % (99 %, 1 vs 1 sample): within the 5 % mark")
    assert (fall.change_pct, fall.text) == (-25.0, "latency fall 25.0 % (99 %, 1 vs 1 sample): within the 15 % mark")


def test_judge_uses_means_of_samples_and_says_so():
    base = as_baseline([_pair([390.0, 392.0, 388.0, 390.0], [2.0, 2.0, 2.0, 2.0])])
    now = _pair([350.0, 352.0], [2.0, 2.0])
    assert judge([now], Thresholds(min_bw_gbps=0, noise_pct=1.0), base) is False
    assert now.reasons[0].startswith("bandwidth regressed 390.0 -> 351.0 Gb/s (means; bandwidth drop 10.0 %")
    assert now.judged[1].startswith("latency rise 0.0 %") and "2 vs 4 samples" in now.judged[1]
    ok = _pair([389.0, 391.0], [2.01, 1.99])
    assert judge([ok], Thresholds(min_bw_gbps=0, noise_pct=1.0), base) is True and ok.reasons == []


def test_only_pairs_near_their_mark_are_measured_again():
    base = as_baseline([_pair([390.0], [2.0], "a"), _pair([390.0], [2.0], "b"), _pair([390.0], [2.0], "c")])
    results = [_pair([389.0], [2.0], "a"), _pair([370.0], [2.0], "b"), _pair([370.0] * 8, [2.0] * 8, "c")]
    # a: 0.3 % (held), b: 5.1 % within 3.3 % of the mark (undecided), c: at max_samples (decided)
    assert undecided(results, Thresholds(noise_pct=1.0), base) == [1]
    assert undecided(results, Thresholds(noise_pct=0.0), base) == []  # exact: one sample decides


@pytest.mark.parametrize("drop,expect_fail", [(0.0, False), (0.08, True)])
def test_sequential_rule_meets_the_issue_at_3_percent_noise(drop, expect_fail):
    """The issue's must-show on the rule alone: 3 % noise, 5 % mark, 18 pairs (4 through the
    degraded link), 20 verifications each: no false regression on a good change, every 8 %
    degradation caught. Samples drawn as the lab draws them (clipped normal)."""
    th = Thresholds(min_bw_gbps=0, noise_pct=3.0, max_samples=12)
    rng = random.Random(20)

    def sample(mean: float) -> float:
        return mean * (1 + max(-0.09, min(0.09, rng.gauss(0, 0.03))))

    for _ in range(20):
        names = [f"p{i}" for i in range(18)]
        base = as_baseline([_pair([sample(390.0) for _ in range(th.baseline_samples())], [2.0], n) for n in names])
        now = [_pair([sample(390.0 * (1 - (drop if i < 4 else 0))) for _ in range(th.first_samples())], [2.0], n)
               for i, n in enumerate(names)]
        while todo := [i for i in undecided(now, th, base) if len(now[i].bw_samples) < th.max_samples]:
            for i in todo:
                now[i] = _pair(now[i].bw_samples + [sample(390.0 * (1 - (drop if i < 4 else 0)))], [2.0], names[i])
        assert judge(now, th, base) is (not expect_fail)
