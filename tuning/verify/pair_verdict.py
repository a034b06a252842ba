"""The verdict on measured pairs: pass marks (:class:`Thresholds`), like-with-like baselines
(:func:`compare_params`), GID drift, :func:`judge`, and one line for people (:func:`summarise`)
naming what every failing pair has in common (a NIC, a switch port, a switch).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tuning.verify.pair_result import PairResult, error_class
from tuning.verify.samples import Judged, baseline_samples, first_samples, judge_change, observed_noise


@dataclass
class Thresholds:
    """Pass marks. bandwidth in Gb/s, latency in microseconds, drops/rises in percent.

    ``min_bw_share``: fraction (0..1) of the slower end's link speed (``/sys/class/net/<if>/speed``,
    Mb/s, read with the GID table right before the pair) the bandwidth must reach; None: not judged.

    Noise (:mod:`tuning.verify.samples`): ``noise_pct`` the run-to-run spread of one sample the
    fabric is assumed to have (percent; the samples' own spread is used when larger; 0: compare
    one sample exactly), ``confidence`` (0.5..1, one-sided) of a regression verdict,
    ``max_samples`` (1..64) a pair is measured at most per verification. Default 1 %: an
    ``ib_write_bw`` on a quiet fabric.
    """

    min_bw_gbps: float = 300.0
    max_lat_us: float = 10.0
    bw_drop_pct: float = 5.0
    lat_rise_pct: float = 15.0
    min_bw_share: float | None = None
    noise_pct: float = 1.0
    confidence: float = 0.99
    max_samples: int = 8

    def baseline_samples(self) -> int:
        """Samples per pair of a measurement with no baseline (:func:`tuning.verify.samples.baseline_samples`
        on the tighter of the two marks)."""
        return baseline_samples(self.noise_pct, min(self.bw_drop_pct, self.lat_rise_pct), self.confidence,
                                self.max_samples)

    def first_samples(self) -> int:
        """Samples per pair a measurement against a baseline starts with."""
        return first_samples(self.noise_pct, min(self.bw_drop_pct, self.lat_rise_pct), self.confidence,
                             self.max_samples)


#: ``params`` fields compared for like with like: field -> (label, unit)
_PARAM_LABELS = {"tool": ("test", ""), "size_bytes": ("size", " B"), "duration_s": ("duration", " s"),
                 "iters": ("iterations", ""), "qps": ("QPs", ""), "direction": ("direction", ""),
                 "tos": ("ToS", "")}


def compare_params(now: dict[str, dict], base: dict | None) -> str:
    """Whether a baseline entry measured the same tests as this run (like with like).

    Args:
        now: this run's ``PairResult.params``; base: the baseline entry (a result dict) or None.

    Returns:
        ``"compared"`` (same tool, size, duration or iterations, QPs and direction for every test),
        ``"none"`` (no entry), or ``"mismatch: size 65536 vs 4096 B (ib_write_bw)"`` (this run's
        value first, then the baseline's; every differing field, ``, `` joined); an entry
        without ``params`` (recorded before they were) is ``"mismatch: the baseline has no test
        parameters"``.
    """
    if not base:
        return "none"
    then = base.get("params")
    if not isinstance(then, dict) or not then:
        return "mismatch: the baseline has no test parameters"
    diffs = []
    for key in sorted(set(now) | set(then)):
        a, b = now.get(key), then.get(key)
        if not isinstance(a, dict) or not isinstance(b, dict):
            diffs.append(f"test {key} {'missing' if not isinstance(a, dict) else 'run'} vs "
                         f"{'missing' if not isinstance(b, dict) else 'run'}")
            continue
        for f, (label, unit) in _PARAM_LABELS.items():
            if a.get(f) != b.get(f):  # an absent ToS is traffic class 0: "none"
                x, y = ("none" if v is None and f == "tos" else v for v in (a.get(f), b.get(f)))
                diffs.append(f"{label} {x} vs {y}{unit} ({a.get('tool') or key})")
    return "mismatch: " + ", ".join(diffs) if diffs else "compared"


def gid_drift(r: PairResult, base: dict | None) -> list[str]:
    """Each end's GID index or type changed since the baseline entry ``base``.

    Returns:
        ``["client node01:mlx5_0 GID index 3 -> 5"]``, ``["server node02:mlx5_0 GID type RoCE v2 ->
        IB/RoCE v1"]``; empty without a baseline or where either side is unknown.
    """
    if not base:
        return []
    out = []
    for end, nic in (("client", r.client_nic), ("server", r.server_nic)):
        then_idx = base.get(f"{end}_gid_index", base.get("gid_index") if end == "client" else None)
        for what, now, then in (("GID index", getattr(r, f"{end}_gid_index"), then_idx),
                                ("GID type", getattr(r, f"{end}_gid_type"), base.get(f"{end}_gid_type"))):
            if now is not None and then is not None and now != then:
                out.append(f"{end} {nic} {what} {then} -> {now}")
    return out


def judge(results: list[PairResult], th: Thresholds, baseline: dict[str, dict] | None = None,
          absolute: bool = True, last: bool = True) -> bool:
    """Set each result's status, verdict, reasons, baseline and drift.

    Args:
        baseline: :func:`as_baseline`'s shape (``{pair name: result dict}``); an entry is compared
            only when its ``params`` equal the result's (else ``baseline = "mismatch: size 65536 vs
            4096 B (ib_write_bw)"`` and no regression is judged; an entry without ``params`` is a
            mismatch too, see :func:`compare_params`).
        absolute: judge the absolute marks (min/max, share of line rate, MTU) too; False: only
            regression against the baseline and tests that did not run fail (a batch in the
            middle of a rollout: a half-tuned fabric fails the absolute marks).

    A pair whose test did not run (``error_kind`` / ``error`` set) is ``status = "error"`` with the
    reason ``did not run: <kind>: <cause>``, never a regression, and its ``error_class`` (harness or
    fabric). Drift (:func:`gid_drift`): ``drift`` and ``drift: ...`` reasons, not failures alone.
    Regression is judged on the samples' means with the confidence of ``th``
    (:mod:`tuning.verify.samples`); ``judged`` holds each comparison's statement. ``last`` False:
    an undecided comparison stays undecided (the caller measures again, :func:`undecided`).

    Returns:
        True when every pair passes.
    """
    ok = True
    sigma = noise_of(results, th, baseline)
    for r in results:
        base = (baseline or {}).get(r.pair)
        r.baseline = compare_params(r.params, base)
        r.drift = gid_drift(r, base)
        failing: list[str] = []
        if r.error or r.error_kind:
            r.error_kind = r.error_kind or "unknown"
            failing.append(f"did not run: {r.error_kind}: {r.error or 'no result'}")
        else:
            if absolute:
                failing += _absolute(r, th)
            if r.baseline == "compared":
                outs = _compare(r, th, base, sigma, last)
                r.judged = [j.text for _, j in outs]
                failing += [why for why, j in outs if j.outcome == "regressed"]
        r.reasons = failing + [f"drift: {d}" for d in r.drift]
        r.status = "error" if (r.error or r.error_kind) else ("fail" if failing else "pass")
        r.error_class = error_class(r.error_kind) if r.status == "error" else None
        r.verdict = "pass" if r.status == "pass" else "fail"
        ok = ok and r.verdict == "pass"
    return ok


def _absolute(r: PairResult, th: Thresholds) -> list[str]:
    """Reasons a measured pair misses the absolute marks (MTU, bandwidth, share of line rate, latency)."""
    out = []
    if r.mtu_allowed and r.mtu_bytes is None:
        out.append("perftest printed no Mtu line: the RoCE active MTU is unknown")
    elif r.mtu_allowed and r.mtu_bytes < r.mtu_allowed:
        out.append(f"RoCE active MTU {r.mtu_bytes} B where every hop allows {r.mtu_allowed} B "
                   f"(an end's netdev MTU is lower than the inventory's)")
    if r.bw_gbps is not None and r.bw_gbps < th.min_bw_gbps:
        out.append(f"bandwidth {r.bw_gbps:.1f} Gb/s below {th.min_bw_gbps:.0f}")
    if th.min_bw_share is not None and r.bw_gbps is not None:
        speeds = [r.client_speed_mbps, r.server_speed_mbps]
        if None in speeds:
            out.append(f"link speed of an end unknown (client {r.client_speed_mbps}, server "
                       f"{r.server_speed_mbps} Mb/s): the share of line rate cannot be judged")
        elif r.bw_gbps < th.min_bw_share * min(speeds) / 1000:
            line = min(speeds) / 1000
            out.append(f"bandwidth {r.bw_gbps:.1f} Gb/s below {th.min_bw_share:.2f} of the slower end's "
                       f"{line:g} Gb/s link ({th.min_bw_share * line:.1f})")
    if r.lat_us is not None and r.lat_us > th.max_lat_us:
        out.append(f"latency {r.lat_us:.2f} us above {th.max_lat_us:.1f}")
    return out


def _series(d: PairResult | dict, metric: str) -> list[float]:
    """A result's (or baseline entry's) samples of ``bw`` or ``lat``: its ``*_samples``, else its one
    value (a result or baseline written before samples were kept)."""
    samples, value = _field(d, f"{metric}_samples"), _field(d, "bw_gbps" if metric == "bw" else "lat_us")
    return [v for v in (samples or ([value] if value else [])) if v]


def noise_of(results: list[PairResult], th: Thresholds, baseline: dict | None) -> float:
    """The noise of one sample (percent) a comparison assumes: the larger of ``th.noise_pct`` and
    the pooled spread of every series of 2 or more samples, now and in the baseline
    (:func:`tuning.verify.samples.observed_noise`); bandwidth and latency pooled apart, the larger taken."""
    seen = [observed_noise([_series(x, m) for x in [*results, *(baseline or {}).values()]]) for m in ("bw", "lat")]
    return max([th.noise_pct, *(v for v in seen if v is not None)])


def _compare(r: PairResult, th: Thresholds, base: dict, sigma: float, last: bool) -> list[tuple[str, Judged]]:
    """(reason if regressed, :class:`Judged`) for bandwidth and latency against a like-with-like entry."""
    out = []
    for metric, key, limit, word, unit, fmt in (("bandwidth", "bw", th.bw_drop_pct, "bandwidth", "Gb/s", ".1f"),
                                               ("latency", "lat", th.lat_rise_pct, "latency", "us", ".2f")):
        now, then = _series(r, key), _series(base, key)
        if not now or not then:
            continue
        j = judge_change(metric, now, then, limit, sigma, th.confidence, last or len(now) >= th.max_samples)
        mean_then, mean_now = sum(then) / len(then), sum(now) / len(now)
        why = f"{word} regressed {mean_then:{fmt}} -> {mean_now:{fmt}} {unit}" \
            + (f" (means; {j.text})" if len(now) > 1 or len(then) > 1 else "")
        out.append((why, j))
    return out


def undecided(results: list[PairResult], th: Thresholds, baseline: dict | None) -> list[int]:
    """Indexes of the results whose regression is undecided at their sample count (not yet
    ``th.max_samples``): those :func:`tuning.verify.runner.verify` measures once more."""
    sigma = noise_of(results, th, baseline)
    out = []
    for i, r in enumerate(results):
        base = (baseline or {}).get(r.pair)
        if r.error or r.error_kind or compare_params(r.params, base) != "compared":
            continue
        if any(j.outcome == "undecided" for _, j in _compare(r, th, base, sigma, last=False)):
            out.append(i)
    return out


def _field(r: PairResult | dict, name: str):
    return r.get(name) if isinstance(r, dict) else getattr(r, name)


def common_culprit(failed: list[PairResult | dict]) -> str | None:
    """What every failing pair shares, most specific first: a NIC (named with its leaf port),
    a leaf port, a switch; None with fewer than 2 failing pairs or nothing shared.

    Returns:
        ``"NIC node01:mlx5_0 (leaf01:swp1)"``, ``"switch port leaf01:swp5"``, ``"switch leaf02"``.
    """
    if len(failed) < 2:
        return None
    ends = [{(_field(r, "client_nic"), _field(r, "client_link")), (_field(r, "server_nic"), _field(r, "server_link"))}
            for r in failed]
    nics = set.intersection(*ends) - {(None, None)}
    if nics:
        nic, link = sorted(nics, key=str)[0]
        return f"NIC {nic}" + (f" ({link})" if link else "")
    links = set.intersection(*({lk for _, lk in e if lk} for e in ends))
    if links:
        return f"switch port {sorted(links)[0]}"
    switches = set.intersection(*({lk.split(":")[0] for _, lk in e if lk} for e in ends))
    return f"switch {sorted(switches)[0]}" if switches else None


def summarise(results: list[PairResult | dict], max_names: int = 4) -> str:
    """One line about judged results (PairResult or their dicts), for people.

    Returns:
        ``"18/18 pairs passed"`` or ``"2/18 pairs failed: node01:mlx5_0->node02:mlx5_0,
        node01:mlx5_0->node03:mlx5_1; common NIC node01:mlx5_0 (leaf01:swp1)"`` (at most
        ``max_names`` pairs named, then ``+N more``).
    """
    failed = [r for r in results if _field(r, "verdict") == "fail"]
    if not failed:
        return f"{len(results)}/{len(results)} pairs passed"
    names = [_field(r, "pair") for r in failed]
    listed = ", ".join(names[:max_names]) + (f" (+{len(names) - max_names} more)" if len(names) > max_names else "")
    culprit = common_culprit(failed)
    return f"{len(failed)}/{len(results)} pairs failed: {listed}" + (f"; common {culprit}" if culprit else "")


def as_baseline(results: list[PairResult]) -> dict[str, dict]:
    """Results keyed by pair name, the shape :func:`judge` takes as a baseline: every field,
    ``params`` (like with like) and the per-end GID indexes and types (drift) included; pairs
    whose test did not run are left out."""
    return {r.pair: asdict(r) for r in results if not r.error and not r.error_kind}
