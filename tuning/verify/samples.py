"""How many samples a pair needs and whether they show a regression, with a stated confidence.

A perftest result varies from run to run on a real fabric (other traffic, ECMP hashing, CPU
frequency): ``ib_write_bw`` on a quiet fabric spreads about 1 % between runs, a busy one 3 % or
more. Judging one short sample against a 5 % drop mark would then roll back good changes. So a
regression is judged on the means of several samples:

    d  = relative change of the mean (bandwidth: drop, 1 - now / before; latency: rise, now / before - 1)
    se = sigma * sqrt(1/n + 1/m)          n samples now, m in the baseline; sigma: the noise of one
                                          sample, the larger of the policy's ``noise_pct`` and what
                                          the samples themselves show (:func:`observed_noise`)
    regressed  when d - z se >  limit     (confident: the change is past the mark)
    held       when d + z se <= limit     (confident: it is within the mark)
    undecided  otherwise: one more sample now, up to ``max_samples``; at ``max_samples`` the point
               estimate decides (d > limit) and the statement says the noise left it close

z is the one-sided normal quantile of ``confidence`` (0.99: 2.33). A baseline takes
:func:`baseline_samples` (its error is carried by every later comparison), a measurement after a
change starts with :func:`first_samples`. With ``noise_pct`` 0 both are 1 and the rule is the plain
``d > limit`` of one sample each. On a quiet fabric (1 %, a 5 % mark) both are 1 as well and a pair
is resampled only when its first change lies between about 1.7 % and 8.3 %.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist, fmean, pstdev

__all__ = ["Judged", "baseline_samples", "first_samples", "judge_change", "observed_noise", "z_of"]


def z_of(confidence: float) -> float:
    """The one-sided standard normal quantile: 0.99 -> 2.326, 0.95 -> 1.645.

    Raises:
        ValueError: ``confidence`` outside (0.5, 1).
    """
    if not 0.5 < confidence < 1:
        raise ValueError(f"confidence {confidence}: must be between 0.5 and 1 (exclusive)")
    return NormalDist().inv_cdf(confidence)


def _count(noise_pct: float, limit_pct: float, confidence: float, factor: float, most: int) -> int:
    if noise_pct <= 0 or limit_pct <= 0:
        return 1
    return max(1, min(most, math.ceil((factor * z_of(confidence) * noise_pct / limit_pct) ** 2)))


def baseline_samples(noise_pct: float, limit_pct: float, confidence: float, most: int) -> int:
    """Samples per pair for a baseline: ``ceil((2 z sigma / limit)^2)`` within 1..``most`` (its own
    standard error is then at most half the mark over 2 z). 3 % noise, 5 % mark, 0.99: 8; 1 %: 1."""
    return _count(noise_pct, limit_pct, confidence, 2.0, most)


def first_samples(noise_pct: float, limit_pct: float, confidence: float, most: int) -> int:
    """Samples per pair a measurement after a change starts with: ``ceil((z sigma / limit)^2)``
    within 1..``most``. 3 % noise, 5 % mark, 0.99: 2; 1 %: 1."""
    return _count(noise_pct, limit_pct, confidence, 1.0, most)


def observed_noise(series: list[list[float]]) -> float | None:
    """The pooled relative standard deviation of repeated samples, in percent, or None when no
    series has 2 or more samples. Each series (one pair's samples of one metric, one side) is
    scaled by its own mean, so pairs of different speeds pool; the pooled variance weighs each
    series by its degrees of freedom (n - 1)."""
    num = dof = 0.0
    for s in series:
        vals = [v for v in s if v is not None and v > 0]
        if len(vals) < 2:
            continue
        mean = fmean(vals)
        num += (pstdev(vals) / mean) ** 2 * len(vals)
        dof += len(vals) - 1
    return math.sqrt(num / dof) * 100 if dof else None


@dataclass
class Judged:
    """One metric's comparison. ``change_pct``: the drop (bandwidth) or rise (latency) of the
    mean, percent; ``margin_pct``: z se, percent; ``outcome``: ``regressed``, ``held`` or
    ``undecided``; ``text``: the statement a report prints."""

    change_pct: float
    margin_pct: float
    outcome: str
    text: str


def judge_change(metric: str, now: list[float], before: list[float], limit_pct: float, sigma_pct: float,
                 confidence: float, last: bool) -> Judged:
    """Judge one metric's samples against its baseline samples (module docstring).

    Args:
        metric: ``bandwidth`` (a drop regresses) or ``latency`` (a rise regresses).
        now / before: samples (Gb/s or us), each non-empty, values > 0.
        limit_pct: the mark, percent (``bw_drop_pct`` / ``lat_rise_pct``).
        sigma_pct: the noise of one sample, percent (0: exact comparison).
        last: no more samples can be taken (``max_samples`` reached): an undecided comparison
            is decided by its point estimate.

    Returns:
        The :class:`Judged`; its text e.g. ``"bandwidth drop 8.1 % +/- 2.4 % (99 %, 4 vs 8 samples):
        past the 5 % mark"`` (a higher bandwidth is a ``gain``, a lower latency a ``fall``; the
        ``change`` field keeps its sign: negative is better).

    Raises:
        ValueError: an unknown metric or an empty series.
    """
    if metric not in ("bandwidth", "latency") or not now or not before:
        raise ValueError(f"judge_change({metric!r}): metric bandwidth|latency and samples on both sides")
    ratio = fmean(now) / fmean(before)
    change = (1 - ratio if metric == "bandwidth" else ratio - 1) * 100
    margin = z_of(confidence) * sigma_pct * math.sqrt(1 / len(now) + 1 / len(before)) if sigma_pct > 0 else 0.0
    if change - margin > limit_pct:
        outcome = "regressed"
    elif change + margin <= limit_pct:
        outcome = "held"
    else:
        outcome = "undecided" if not last else ("regressed" if change > limit_pct else "held")
    word = ("drop", "gain") if metric == "bandwidth" else ("rise", "fall")
    stat = (f"{metric} {word[change < 0]} {abs(change):.1f} %" + (f" +/- {margin:.1f} %" if margin else "")
            + f" ({confidence * 100:g} %, {len(now)} vs {len(before)} sample{'s' if len(before) > 1 else ''})")
    close = last and change - margin <= limit_pct < change + margin
    verdict = {"regressed": f"past the {limit_pct:g} % mark", "held": f"within the {limit_pct:g} % mark",
               "undecided": "undecided: more samples"}[outcome]
    return Judged(round(change, 3), round(margin, 3), outcome,
                  f"{stat}: {verdict}" + (" (decided by the mean: the noise leaves it close)" if close else ""))
