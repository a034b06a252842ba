"""Pair selection and scheduling over the lab inventory (pure: no lab running), the one-line
verification summary, and how the report prints IRQ moves, offline plans and parsed perftest rows."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from tests.conftest import REPO
from tuning import inventory
from tuning.parsers import parse
from tuning.report import _cpus, changes_table, parsed_table, verify_table
from tuning.verify.pairs import schedule_waves, select_pairs
from tuning.verify.runner import PairResult, Thresholds, judge, summarise


@pytest.fixture(scope="module")
def nodes():
    return inventory.load(REPO / "inventory" / "lab").nodes


def _text(renderable) -> str:
    c = Console(file=io.StringIO(), width=200, highlight=False)
    c.print(renderable)
    return c.file.getvalue()


def test_default_pairs_cover_every_rail_and_every_nic(nodes):
    pairs = select_pairs(nodes)
    assert len(pairs) == 8 * 2 + 2
    leaf = [p for p in pairs if p.path == "leaf"]
    assert sorted({p.client_nic.rail for p in leaf}) == list(range(8))
    assert all(p.client_nic.rail == p.server_nic.rail for p in leaf)
    used = {end for p in pairs for end in p.nics}
    assert used == {f"{d.name}:{n.rdma_device}" for d in nodes for n in d.spec.nics}
    assert len(used) == 32
    rail2 = [p.name for p in pairs if p.client_nic.rail == 2 and p.path == "leaf"]
    assert rail2 == ["node01:mlx5_2->node02:mlx5_2", "node03:mlx5_2->node04:mlx5_2"]
    # the cross-rail pairs stay the ones earlier runs and baselines know
    assert [p.name for p in pairs if p.path == "spine"] == ["node01:mlx5_0->node03:mlx5_1",
                                                            "node02:mlx5_1->node04:mlx5_0"]


def test_explicit_rails_and_spine_pairs_still_honoured(nodes):
    pairs = select_pairs(nodes, rails=(0, 1), spine_pairs=1)
    assert [p.name for p in pairs] == [
        "node01:mlx5_0->node02:mlx5_0", "node03:mlx5_0->node04:mlx5_0",
        "node01:mlx5_1->node02:mlx5_1", "node03:mlx5_1->node04:mlx5_1",
        "node01:mlx5_0->node03:mlx5_1"]
    assert select_pairs(nodes[:1]) == []


def test_odd_node_out_pairs_with_the_first_node_on_its_rail(nodes):
    pairs = select_pairs(nodes[:3], spine_pairs=0)
    assert len(pairs) == 8 * 2
    rail5 = [p.name for p in pairs if p.client_nic.rail == 5]
    assert rail5 == ["node01:mlx5_5->node02:mlx5_5", "node03:mlx5_5->node01:mlx5_5"]
    assert {e for p in pairs for e in p.nics} == {f"{d.name}:mlx5_{i}" for d in nodes[:3] for i in range(8)}


@pytest.mark.parametrize("n_nodes", [2, 3, 4])
def test_waves_never_use_a_nic_twice_and_keep_every_pair(nodes, n_nodes):
    pairs = select_pairs(nodes[:n_nodes])
    waves = schedule_waves(pairs)
    assert sorted(i for w in waves for i in w) == list(range(len(pairs)))
    for wave in waves:
        ends = [e for i in wave for e in pairs[i].nics]
        assert len(ends) == len(set(ends)), wave


def test_lab_pairs_run_in_two_waves(nodes):
    assert schedule_waves(select_pairs(nodes)) == [list(range(16)), [16, 17]]


def _judged(nodes, bw_by_pair: dict[str, float]) -> list[PairResult]:
    results = []
    for p in select_pairs(nodes):
        r = PairResult.of(p)
        r.bw_gbps, r.lat_us = bw_by_pair.get(p.name, 391.6), 2.2
        results.append(r)
    judge(results, Thresholds())
    return results


def test_summary_names_the_nic_every_failing_pair_shares(nodes):
    results = _judged(nodes, {"node01:mlx5_0->node02:mlx5_0": 120.0, "node01:mlx5_0->node03:mlx5_1": 118.5})
    assert summarise(results) == ("2/18 pairs failed: node01:mlx5_0->node02:mlx5_0, node01:mlx5_0->node03:mlx5_1; "
                                  "common NIC node01:mlx5_0 (leaf01:swp1)")
    assert summarise(_judged(nodes, {})) == "18/18 pairs passed"


def test_summary_falls_back_to_the_shared_switch_and_reads_dicts(nodes):
    # rail 2 and rail 4 sit on leaf01: no NIC or port in common, the switch is
    results = _judged(nodes, {"node01:mlx5_2->node02:mlx5_2": 10.0, "node03:mlx5_4->node04:mlx5_4": 10.0})
    line = summarise([r.__dict__ for r in results])
    assert line.endswith("; common switch leaf01"), line
    one = summarise(_judged(nodes, {"node01:mlx5_2->node02:mlx5_2": 10.0}))
    assert one == "1/18 pairs failed: node01:mlx5_2->node02:mlx5_2"


def test_verify_table_carries_the_summary_as_caption(nodes):
    results = [r.__dict__ for r in _judged(nodes, {"node03:mlx5_7->node04:mlx5_7": 150.0})]
    text = _text(verify_table(results, "verification after"))
    assert "1/18 pairs failed: node03:mlx5_7->node04:mlx5_7" in text
    assert "bandwidth 150.0 Gb/s below 300" in text
    assert "flows in traffic class 0 (no nic_qos)" in text  # no --tclass in these results' params
    for r in results:
        r["params"] = {"bw": {"tool": "ib_write_bw", "tos": 106}}
    assert "; flows in ToS 106 (DSCP 26)" in _text(verify_table(results, "verification after"))


def _irq_changes(netdev: str, first: int, before: str, after: list[int]) -> list[dict]:
    return [{"device": "node01", "domain": "irq", "key": f"irq/{netdev}/{first + i}", "before": before,
             "after": str(cpu)} for i, cpu in enumerate(after)]


def test_irq_moves_print_one_row_per_nic():
    changes = {"node01": [{"device": "node01", "domain": "mtu", "key": "mtu/enp12s0np0", "before": "1500",
                           "after": "9000"},
                          *_irq_changes("enp12s0np0", 101, "0-15", list(range(0, 16))),
                          *_irq_changes("enp140s0np0", 181, "0-15", list(range(28, 44)))]}
    lines = _text(changes_table(changes, "plan")).splitlines()
    irq_rows = [line for line in lines if " irq " in line]
    assert len(irq_rows) == 2
    assert "irq enp140s0np0 (16 completion IRQs)" in irq_rows[1]
    assert "0-15" in irq_rows[1] and "28-43, 1 CPU each" in irq_rows[1]
    # every IRQ on all of 0-15 before, one CPU each after: the row says how they spread
    assert "0-15" in irq_rows[0] and "0-15, 1 CPU each" in irq_rows[0], irq_rows[0]
    assert _cpus(["0", "1-2"]) == "0-2, mixed" and _cpus(["0-3", "0-3"]) == "0-3" and _cpus([None]) is None
    assert any("mtu/enp12s0np0" in line and "1500" in line for line in lines)


def test_offline_plan_says_not_read_instead_of_absent():
    changes = {"node02": [{"device": "node02", "domain": "sysctl", "key": "net.core.rmem_max", "before": None,
                           "after": "268435456"}]}
    assert "(absent)" in _text(changes_table(changes, "plan"))
    offline = _text(changes_table(changes, "plan", offline=True))
    assert "(not read)" in offline and "(absent)" not in offline


def test_parsed_perftest_rows_print_as_a_table(cases_dir: Path):
    text = (cases_dir / "ib_write_bw__client_all_sizes_gbits_mtu1024_gid5.txt").read_text()
    out = _text(parsed_table(parse("ib_write_bw", text).model_dump(mode="json")))
    assert "size_bytes" not in out and "{'" not in out.split("bw_rows")[1]
    assert "bw avg Gb/s" in out and "msg rate Mpps" in out
    row = next(line for line in out.splitlines() if " 16384 " in line)
    assert row.split()[2:7] == ["16384", "5000", "92.46", "92.46", "0.705381"]
    assert "roce_mtu_low" in out  # findings kept
    lat = (cases_dir / "ib_read_lat__roce_mtu1024_gid12_cpufreq_warnings.txt").read_text()
    out = _text(parsed_table(parse("ib_read_lat", lat).model_dump(mode="json")))
    assert "t_typical us" in out and "p99.9 us" in out and "bw_rows" not in out
    row = next(line for line in out.splitlines() if " 1000 " in line)
    assert row.split()[2:11] == ["2", "1000", "6.88", "16.81", "7.04", "7.06", "0.31", "7.38", "16.81"]


def test_parsed_server_row_skips_the_unmeasured_peak(cases_dir: Path):
    text = (cases_dir / "ib_write_bw__roce_server_duration_mbsec_peak0_tabs.txt").read_text()
    out = _text(parsed_table(parse("ib_write_bw", text).model_dump(mode="json")))
    assert "peak" not in out.split("bw_rows")[1] and "34.8452" in out


def test_a_baseline_table_says_measured_never_failed():
    """A rollout's baseline is measured, not judged: an untuned fabric missing the absolute marks is
    why it is tuned, so its table carries no verdict and its caption no "N/M pairs failed" (issue 19)."""
    from tuning.report import verify_table

    rows = [{"pair": "node01:mlx5_0->node02:mlx5_0", "path": "leaf", "bw_gbps": 90.0, "lat_us": 3.0,
             "verdict": "fail", "reasons": ["bw 90.0 < 350 Gb/s"]},
            {"pair": "node03:mlx5_0->node04:mlx5_0", "path": "leaf", "bw_gbps": None, "lat_us": None,
             "verdict": "fail", "reasons": ["did not run"], "error": "connect_failed: no route"}]
    text = _text(verify_table(rows, "verification before", judged=False))
    assert "2 pair(s) measured: the baseline the change is compared with (not judged)" in text
    assert "pairs failed" not in text and "bw 90.0 < 350" not in text and "connect_failed: no route" in text
    assert "2/2 pairs failed" in _text(verify_table(rows, "verification before"))  # judged: as before
