"""The IB burn-in's read and judgement (issue 22, must-show 2) on real outputs: ``iblinkinfo`` and the
perfquery line of one read captured from the real infiniband-diags over a 2-node IB lab
(``tests/ib/capture_burnin_cases.py``), before and after node01 mlx5_0 was retrained at 1X and 500
symbol errors were set on node02 mlx5_3's port. The SM Target runs the captured outputs through a
command runner that answers with them (the host seam; no code of ours is replaced).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tuning.burnin import ib_judge
from tuning.burnin.drain import node_of
from tuning.burnin.ib_read import read_fabric
from tuning.burnin.localise import localise
from tuning.burnin import run as burnin_run
from tuning.parsers.ib_counters import parse_perfquery
from tuning.targets.sm import SmTarget
from tuning.transport.base import CommandResult

CASES = Path(__file__).parent / "cases"
CLEAN = ("iblinkinfo__2_nodes_all_4x.txt", "perfquery_x__2_nodes_every_port_clean.txt")
FAULTY = ("iblinkinfo__2_nodes_node01_mlx5_0_1x.txt", "perfquery_x__2_nodes_node02_mlx5_3_symbol_errors_500.txt")


#: what the SM serves on that fabric (``sminfo``, ``saquery PR`` a CA port: ``tests/ib/capture_view_cases.py``)
SERVED = (CASES / "views" / "served__2_nodes_clean.txt").read_text()


class CapturedHost:
    """A host whose ``iblinkinfo``, SM read and perfquery line print the captured outputs; records the commands."""

    def __init__(self, links: str, counters: str):
        self.links, self.counters, self.commands = links, counters, []

    def run(self, command: str, *, timeout: float = 60.0, privileged: bool = True) -> CommandResult:
        self.commands.append(command)
        out = self.links if command == "iblinkinfo" else self.counters if command.startswith("perfquery -x ") else \
            SERVED if command.startswith("s=$(sminfo)") else None
        return CommandResult(command, 0, out, "") if out is not None else \
            CommandResult(command, 127, "", f"sh: {command}: not found")


def read(names: tuple[str, str], edit=lambda text: text) -> tuple[dict, CapturedHost]:
    host = CapturedHost((CASES / names[0]).read_text(), edit((CASES / names[1]).read_text()))
    return read_fabric(SmTarget("sm01", None, host=host)), host


def doc_of(*reads: dict, recovery: dict | None = None, recovery_s: float = 10.0) -> dict:
    """A burn-in document of an SM-only inventory: baseline, one read per round, the recovery read."""
    ib = {"sms": ["sm01"], "baseline": {"sm01": reads[0]}, "recovery_s": recovery_s}
    if recovery is not None:
        ib["recovery"] = {"sm01": recovery}
    return {"topology": {"nodes": {}, "links": []}, "ib": ib,
            "rounds": [{"index": i, "pairs": [], "nics": {}, "gpus": {}, "errors": {}, "ib": {"sm01": r}}
                       for i, r in enumerate(reads[1:])]}


def test_one_read_holds_every_cabled_port_with_both_ends_and_its_counters():
    r, host = read(FAULTY)
    assert len(r["ports"]) == 34 and r["error"] is None  # 16 HCA ports, their 16 leaf ports, the uplink's 2 ends
    hca, leaf = r["ports"]["node01:mlx5_0/1"], r["ports"]["leaf01/1"]
    assert (hca["width"], hca["could_be"], hca["remote"], leaf["remote"]) == ("1X", ["12X"], "leaf01/1", "node01:mlx5_0/1")
    assert r["ports"]["node02:mlx5_3/1"]["counters"]["SymbolErrorCounter"] == 500
    assert r["ports"]["leaf02/31"]["remote"] == "leaf01/31" and r["ports"]["leaf02/31"]["remote_type"] == "Switch"
    # one perfquery run per HCA port and kind, one per switch and kind (-l <lid> 255: all its ports), after the
    # SM's read: its master SM and the LID its SA serves for each of the 16 CA ports
    line = host.commands[2]
    assert line.count("perfquery -x -l ") == 2 and line.count("perfquery -x ") == 16 + 2
    assert r["sm"] == {"lid": 1, "guid": "0xb83fd20300000001", "state": "MASTER"} and len(r["sa"]) == 16
    assert r["sa"]["0x0c42a10300000101"] == r["ports"]["node01:mlx5_0/1"]["lid"] == 2


def test_the_1x_cable_and_the_node_port_counting_symbol_errors_are_named_and_nothing_else():
    clean, faulty = read(CLEAN)[0], read(FAULTY)[0]
    found = localise(doc_of(clean, faulty, recovery=faulty))
    assert [(f["code"], f["kind"], f["target"], f["evidence"]["end"]) for f in found] == [
        ("ib-width-degraded", "link", "node01:mlx5_0/1<->leaf01/1", None),
        ("ib-link-errors", "link", "node02:mlx5_3/1<->leaf02/4", "node02:mlx5_3/1")]
    assert found[1]["evidence"]["counters"] == {"node02:mlx5_3/1": {"window": {"SymbolErrorCounter": 500}}}
    assert found[1]["message"] == ("the node port node02:mlx5_3/1 counts errors: node02:mlx5_3/1 counted "
                                   "SymbolErrorCounter +500 in the window, none in the 10 s recovery window")
    assert "runs 1X 53.125 Gbps (iblinkinfo: could be 12X); the fabric's links run 4X" in found[0]["message"]
    assert [node_of(f) for f in found] == ["node01", "node02"]  # what a drain would take out


def test_a_clean_fabric_names_nothing():
    clean = read(CLEAN)[0]
    assert localise(doc_of(clean, clean, recovery=clean)) == []


def test_errors_still_counting_in_the_recovery_window_are_said_and_a_switch_end_is_named():
    clean = read(CLEAN)[0]
    after = copy.deepcopy(clean)
    after["ports"]["leaf02/4"]["counters"]["PortRcvErrors"] = 17
    later = copy.deepcopy(after)
    later["ports"]["leaf02/4"]["counters"]["PortRcvErrors"] = 20
    [f] = ib_judge.findings(doc_of(clean, after, recovery=later, recovery_s=30))
    assert (f["target"], f["evidence"]["end"]) == ("node02:mlx5_3/1<->leaf02/4", "leaf02/4")
    assert f["evidence"]["counters"] == {"leaf02/4": {"window": {"PortRcvErrors": 17}, "recovery": {"PortRcvErrors": 3}}}
    assert f["message"].startswith("the switch port leaf02/4 counts errors: ") and \
        "PortRcvErrors +3 in the 30 s recovery window" in f["message"]


@pytest.mark.parametrize("value", ["-1", "0xfffffffffffffffe"])
def test_unknown_counter_values_are_never_zero_or_huge(value):
    text = (CASES / FAULTY[1]).read_text().replace("SymbolErrorCounter:..............500",
                                                   f"SymbolErrorCounter:..............{value}")
    block = next(b for b in parse_perfquery(text).blocks if b.counters.get("SymbolErrorCounter", 0) is None)
    assert block.unknown == ["SymbolErrorCounter"] and "SymbolErrorCounter" not in block.errors
    clean, after = read(CLEAN)[0], read(FAULTY, lambda t: t.replace("..............500", f"..............{value}"))[0]
    assert after["ports"]["node02:mlx5_3/1"]["counters"]["SymbolErrorCounter"] is None
    assert [f["code"] for f in ib_judge.findings(doc_of(clean, after))] == ["ib-width-degraded"]  # no delta from it
    assert ib_judge.rises(clean["ports"]["node02:mlx5_3/1"], after["ports"]["node02:mlx5_3/1"]) == \
        ({}, ["SymbolErrorCounter"], [])


def test_a_counter_that_went_backwards_gives_no_delta_and_a_saturated_one_a_lower_bound():
    faulty, clean = read(FAULTY)[0], read(CLEAN)[0]
    assert ib_judge.rises(faulty["ports"]["node02:mlx5_3/1"], clean["ports"]["node02:mlx5_3/1"]) == \
        ({}, ["SymbolErrorCounter"], [])  # 500 -> 0: cleared (perfquery -R), not a rise
    full = read(FAULTY, lambda t: t.replace("..............500", "..............65535"))[0]
    assert ib_judge.rises(clean["ports"]["node02:mlx5_3/1"], full["ports"]["node02:mlx5_3/1"]) == \
        ({"SymbolErrorCounter": 65535}, [], ["SymbolErrorCounter"])


def test_a_check_that_read_nothing_is_a_harness_error_never_a_pass():
    clean = read(CLEAN)[0]
    failed = {"ports": {}, "error": "perfquery: exit 1: ibwarn: ... mad_rpc failed"}
    nothing = {"ports": {}, "error": None}
    for doc in (doc_of(clean, failed), doc_of(nothing, nothing)):
        [f] = localise(doc)
        assert (f["code"], f["kind"], f["target"]) == ("harness-error", "harness", "sm01")
    unknown = copy.deepcopy(clean)
    for p in unknown["ports"].values():
        p["counters"] = dict.fromkeys(p["counters"])
    [f] = ib_judge.findings(doc_of(clean, unknown))
    assert f["code"] == "harness-error" and "no port's error counters could be compared" in f["message"]


def test_a_link_gone_down_in_the_window_names_its_cable():
    clean = read(CLEAN)[0]
    after = copy.deepcopy(clean)
    del after["ports"]["node01:mlx5_5/1"], after["ports"]["leaf02/5"]
    [f] = ib_judge.findings(doc_of(clean, after))
    assert (f["code"], f["target"], f["evidence"]["rounds"]) == ("ib-link-down", "node01:mlx5_5/1<->leaf02/5", [0])
    assert f["message"] == "node01:mlx5_5/1 was Active at the baseline and is not in the window read"
    [f] = ib_judge.findings(doc_of(clean, clean, recovery=after))  # down in the recovery window: named too
    assert (f["code"], f["target"], f["evidence"]["rounds"]) == ("ib-link-down", "node01:mlx5_5/1<->leaf02/5", ["recovery"])


def test_a_nodes_ib_ports_intent_is_the_width_its_cables_are_judged_against():
    """All at 4X, as most of the fabric: node01's intent of 8X (iblinkinfo: could be 12X) names its 8
    cables, and says whose intent; node02 (no intent) is judged against the fabric's 4X: nothing."""
    clean = read(CLEAN)[0]
    doc = doc_of(clean, clean)
    doc["ib"]["intent"] = {"node01": {"width": "8X", "generation": "HDR"}}
    found = ib_judge.findings(doc)
    assert [f["target"] for f in found] == [f"node01:mlx5_{i}/1<->leaf0{i % 2 + 1}/{i // 2 * 2 + 1}" for i in range(8)]
    assert {f["code"] for f in found} == {"ib-width-degraded"} and \
        found[0]["message"] == "node01:mlx5_0/1 runs 4X 53.125 Gbps (iblinkinfo: could be 12X); its node's ib_ports intent is 8X"


def test_a_round_of_an_sm_only_inventory_that_read_no_port_stops_naming_the_sm():
    rnd = {"index": 0, "pairs": [], "nics": {}, "gpus": {}, "errors": {},
           "ib": {"sm01": {"ports": {}, "error": "perfquery: exit 1: ibwarn: mad_rpc failed"}}}
    assert burnin_run.tested(rnd) == 0
    assert burnin_run.nothing_tested(rnd, []) == ("round 1 tested nothing, stopped: no node to test; the IB fabric was not "
                                       "read through sm01 (perfquery: exit 1: ibwarn: mad_rpc failed)")
    rnd["ib"]["sm01"] = read(CLEAN)[0]
    assert burnin_run.tested(rnd) == 34
