"""The lab's run-to-run noise and graded degradation (issue 20), on the fabric model alone (a
state dir built as in test_fabric_model): the spread of many runs, the seed, the refusals, and a
``degrade 8`` that costs 8 % of the bandwidth."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest

from tests.lab.test_fabric_model import make_state
from tuning.errors import InputError
from tuning.lab.fabric import Fabric
from tuning.lab.inject import inject, list_injections
from tuning.lab.model import compute
from tuning.lab.noise import check


def _set_noise(state: Path, **kw) -> None:
    fabric = Fabric.load(state / "fabric.json")
    fabric.noise = check(**kw)
    fabric.save(state / "fabric.json")


def _bw(state: Path, n: int) -> list[float]:
    return [compute(state, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw").bw_avg_gbps for _ in range(n)]


def test_noise_spreads_runs_as_set_and_a_seed_repeats_them(tmp_path: Path) -> None:
    state = make_state(tmp_path, tuned=True)
    quiet = _bw(state, 2)
    assert quiet[0] == quiet[1] and 388 < quiet[0] < 393  # no noise: the model's number, every run
    _set_noise(state, bw_pct=3.0, lat_pct=3.0, seed=7)
    runs = _bw(state, 200)
    rel = [b / quiet[0] - 1 for b in runs]
    assert statistics.pstdev(rel) == pytest.approx(0.03, rel=0.15)  # 3 % of one standard deviation
    assert abs(statistics.fmean(rel)) < 0.006 and max(map(abs, rel)) <= 0.09 + 1e-9  # clipped at 3 sd
    key = repr(("node01", "mlx5_0", "node02", "mlx5_0", "write_bw"))
    assert json.loads((state / "run/perftest/noise.seq").read_text()) == {key: 200}  # counted per pair and test
    (state / "run/perftest/noise.seq").unlink()  # what power-on does: the series starts again
    assert _bw(state, 5) == runs[:5]
    lat = [compute(state, "node01", "mlx5_0", "node02", "mlx5_0", 3, "read_lat").lat_typical_us for _ in range(50)]
    assert len(set(lat)) > 40 and statistics.pstdev(lat) / statistics.fmean(lat) == pytest.approx(0.03, rel=0.35)


def test_noise_settings_are_checked() -> None:
    assert check(0, 0, None) == {} and check(1, 2, 5) == {"bw_pct": 1.0, "lat_pct": 2.0, "seed": 5}
    for kw, msg in (({"bw_pct": 60, "lat_pct": 0, "seed": None}, "bandwidth noise 60 %: must be 0..50"),
                    ({"bw_pct": 1, "lat_pct": -1, "seed": None}, "latency noise -1 %"),
                    ({"bw_pct": 1, "lat_pct": 1, "seed": -3}, "noise seed -3")):
        with pytest.raises(ValueError, match=msg):
            check(**kw)


def test_a_graded_degrade_costs_its_percent(tmp_path: Path) -> None:
    state = make_state(tmp_path, tuned=True)
    good = compute(state, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    inject(state, "leaf01:swp2", "degrade", "8%")
    bad = compute(state, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    assert bad.bw_avg_gbps == pytest.approx(good.bw_avg_gbps * 0.92, rel=0.007)
    assert bad.lat_typical_us == pytest.approx(good.lat_typical_us + 5 * 0.16, abs=0.05)
    assert "leaf01:swp2 degraded by 8 % (injected)" in bad.reasons
    assert list_injections(state) == [{"target": "leaf01:swp2", "kind": "degrade", "value": 8}]
    for bad_value in ("0", "100", "8.5", "-8", "x"):
        with pytest.raises(InputError, match="degrade takes the bandwidth lost in percent"):
            inject(state, "leaf01:swp2", "degrade", bad_value)
    assert json.loads((state / "fabric.json").read_text())["injections"][0]["value"] == 8


def test_the_noise_counter_is_not_written_through_a_symlink(tmp_path: Path) -> None:
    state = make_state(tmp_path, tuned=True)
    _set_noise(state, bw_pct=1.0, lat_pct=1.0, seed=1)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (state / "run/perftest").mkdir(parents=True, exist_ok=True)
    (state / "run/perftest/noise.seq").symlink_to(victim)
    with pytest.raises(OSError):
        _bw(state, 1)
    assert victim.read_text() == "keep\n"
    shutil.rmtree(state / "run")
