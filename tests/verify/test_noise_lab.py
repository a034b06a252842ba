"""Verification on a noisy lab over real SSH (issue 20): with 3 % run-to-run noise (``fabtune lab
noise``) and a 5 % mark, a baseline takes 8 samples per pair, an unchanged fabric passes with every
comparison's confidence stated, and an 8 % degrade of one NIC (``lab inject NIC degrade 8``) fails
exactly the pairs through it, on the means of their samples. Three pairs, one lab."""

from __future__ import annotations

import re
import statistics

import pytest
from typer.testing import CliRunner

from tests.conftest import running_lab
from tuning import inventory
from tuning.cli import app
from tuning.errors import InputError
from tuning.lab.inject import inject
from tuning.transport.ssh import SshHost
from tuning.verify.pairs import select_pairs
from tuning.verify.runner import Thresholds, as_baseline, verify

pytestmark = pytest.mark.lab

PAIRS = ("node01:mlx5_0->node02:mlx5_0", "node03:mlx5_0->node04:mlx5_0", "node01:mlx5_1->node02:mlx5_1")
DEGRADED = "node02:mlx5_0"


def test_noisy_lab_keeps_an_unchanged_fabric_and_catches_8_percent(tmp_path):
    with running_lab(tmp_path) as inv:
        run = CliRunner().invoke(app, ["lab", "noise", "-i", str(inv), "--bw-pct", "3", "--seed", "11"])
        assert run.exit_code == 0 and "lab noise: bandwidth 3 %, latency 3 % (one standard deviation), seed 11" \
            in run.stdout, run.output
        bad = CliRunner().invoke(app, ["lab", "noise", "-i", str(inv), "--bw-pct", "70"])
        assert isinstance(bad.exception, InputError) and "bandwidth noise 70.0 %: must be 0..50" in str(bad.exception)
        nodes = inventory.load(inv).nodes
        pairs = [p for p in select_pairs(nodes) if p.name in PAIRS]
        hosts = {d.name: SshHost(d.name, d.connection) for d in nodes if d.name in {"node01", "node02", "node03",
                                                                                      "node04"}}
        th = Thresholds(noise_pct=3.0, max_samples=12)
        lines: list[str] = []
        try:
            _, before = verify(pairs, hosts, th, None, lines.append, absolute=False)
            assert [len(r.bw_samples) for r in before] == [8, 8, 8] and not any(r.error for r in before)
            spread = [statistics.pstdev(r.bw_samples) / statistics.fmean(r.bw_samples) for r in before]
            assert all(0.005 < s < 0.07 for s in spread), spread  # the lab's 3 % is in the samples
            assert lines[0].endswith("x 8 samples") and any("sample 8 of 8" in x for x in lines), lines
            base = as_baseline(before)

            ok, same = verify(pairs, hosts, th, base, absolute=False)
            assert ok, [r.reasons for r in same]
            assert all(2 <= len(r.bw_samples) <= 12 and r.judged[0].startswith(("bandwidth drop ", "bandwidth gain "))
                       and "within the 5 % mark" in r.judged[0] for r in same), [r.judged for r in same]

            inject(inv / ".state", DEGRADED, "degrade", "8")
            ok, after = verify(pairs, hosts, th, base, absolute=False)
            assert not ok
            failed = {r.pair for r in after if r.verdict == "fail"}
            assert failed == {p for p in PAIRS if DEGRADED in p}, [(r.pair, r.judged) for r in after]
            why = next(r for r in after if r.verdict == "fail").reasons[0]
            m = re.search(r"\(means; bandwidth drop (\d+\.\d) % \+/- (\d+\.\d) % \(99 %, (\d+) vs 8 samples\): "
                          r"past the 5 % mark", why)
            assert m and 5 < float(m.group(1)) < 11, why
        finally:
            for h in hosts.values():
                h.close()
