"""Batches of a rollout and the safe order inside each, computed (no lab): the policy's ``serial``
(Ansible's batch sizes: counts, percentages, the last repeating), leaf and rail ordering, where
switches go, MTU up / down / mixed and lossless on / off ordering; the policy read from the
inventory's ``all`` group only. Fabrics: the lab inventory and ``bench/verify_schedule.py``'s
SuperPOD-style layouts of 256 and 2,000 nodes (8 rails, rail leaves per scalable unit, 32 spines).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.verify_schedule import superpod
from tests.conftest import REPO
from tuning import inventory
from tuning.errors import InputError
from tuning.inventory import Inventory
from tuning.model.policy import RolloutPolicy, parse_serial
from tuning.rollout.batches import Batch, phases, plan_batches

LAB = REPO / "inventory" / "lab"


def _fabric(n: int):
    nodes, switches, _ = superpod(n)
    return Inventory(Path("."), {d.name: d for d in nodes + switches}), nodes, switches


def _check_partition(batches: list[Batch], nodes, switches) -> None:
    seen = [n for b in batches for n in b.devices]
    assert sorted(seen) == sorted(d.name for d in nodes + switches), "a device in no batch or in two"
    assert [b.index for b in batches] == list(range(1, len(batches) + 1))


def test_serial_sizes_as_ansible_counts_them():
    assert RolloutPolicy(serial=[1, 5, "20%"]).sizes(100) == [1, 5, 20, 20, 20, 20, 14]
    assert RolloutPolicy().sizes(4) == [4]  # the default: one batch, today's run
    assert RolloutPolicy(serial=["30%"]).sizes(3) == [1, 1, 1]  # int(0.9) = 0 -> at least 1
    assert RolloutPolicy(serial=[1]).sizes(4) == [1, 1, 1, 1]
    assert RolloutPolicy(serial=[2, 10]).sizes(5) == [2, 3]
    assert RolloutPolicy().sizes(0) == []
    assert parse_serial("1, 5,20%") == [1, 5, "20%"]
    for bad in ("0%", "101%", "1.5", "", "a"):
        with pytest.raises(InputError, match="--serial|batch size"):
            RolloutPolicy.model_validate({"serial": parse_serial(bad)})
    with pytest.raises(Exception, match="batch size"):
        RolloutPolicy.model_validate({"serial": [0]})
    with pytest.raises(Exception):
        RolloutPolicy.model_validate({"serial": [True]})  # a YAML true is not 1


@pytest.mark.parametrize("n", [256, 2000])
def test_superpod_batches_fill_leaves_in_order_and_place_every_switch(n: int):
    inv, nodes, switches = _fabric(n)
    batches = plan_batches(inv, nodes + switches, RolloutPolicy(serial=[1, 5, "20%"]))
    _check_partition(batches, nodes, switches)
    step = max(1, int(0.2 * n))
    expect = [1, 5] + [step] * ((n - 6) // step) + ([(n - 6) % step] if (n - 6) % step else [])
    assert [len(b.nodes) for b in batches] == expect
    assert batches[0].why.startswith("canary: 1 node(s) of su001-r0")
    # nodes fill one leaf (their first NIC's) before the next: the push order is leaf, then name
    order = [n for b in batches for n in b.nodes]
    leaf_of = {d.name: d.spec.nics[0].switch for d in nodes}
    assert order == sorted(order, key=lambda x: (leaf_of[x], x))
    # each leaf joins the first batch with a node cabled to it; spines (no NIC cabled) batch 1
    first = {}
    for b in batches:
        for name in b.nodes:
            for nic in inv.devices[name].spec.nics:
                first.setdefault(nic.switch, b.index)
    where = {sw: b.index for b in batches for sw in b.switches}
    for sw in switches:
        assert where[sw.name] == first.get(sw.name, 1), sw.name
    assert all(where[s.name] == 1 for s in switches if s.name.startswith("spine"))
    assert batches[0].phases == [batches[0].devices]  # no plan given: one phase, all at once


def test_batch_by_rail_and_none_and_switches_only():
    inv = inventory.load(LAB)
    nodes = inv.nodes
    by_rail = plan_batches(inv, inv.nodes + inv.switches, RolloutPolicy(serial=[1], batch_by="rail"))
    assert [b.nodes for b in by_rail] == [["node01"], ["node02"], ["node03"], ["node04"]]
    assert sorted(by_rail[0].switches) == ["leaf01", "leaf02", "spine01"]  # node01 is cabled to both leaves
    none = plan_batches(inv, list(reversed(nodes)), RolloutPolicy(serial=[3], batch_by="none"))
    assert [b.nodes for b in none] == [["node04", "node03", "node02"], ["node01"]]
    only = plan_batches(inv, inv.switches, RolloutPolicy(serial=[1]))
    assert [b.switches for b in only] == [["leaf01"], ["leaf02"], ["spine01"]]
    assert only[0].why == "no node: 1 device(s) (switches) (serial 1)"  # by role group: an SM is no switch
    assert len(plan_batches(inv, inv.switches, RolloutPolicy())) == 1
    # a leaf no selected node is cabled to goes to batch 1
    sel = [inv.devices["node01"], inv.devices["node02"], inv.devices["leaf02"]]
    sw_only_leaf = plan_batches(inv, sel, RolloutPolicy(serial=[1]))
    assert sw_only_leaf[0].switches == ["leaf02"] or "leaf02" in sw_only_leaf[0].switches


#: the node domain that owns a key's first part (its tags are that domain's own)
_OWNER = {"mtu": "mtu", "pfc": "nic_qos", "ecn": "nic_qos", "sysctl": "sysctl"}


def _ch(key: str, before: str, after: str) -> dict:
    """A planned change dict tagged as the code that plans it tags it: an NVUE key (``port/``,
    ``roce/``) by the NVUE driver, a node key by the node domain that owns it."""
    from tuning import node
    from tuning.switch.nvue import NvueDriver

    if key.split("/")[0] in ("port", "roce"):
        tags = NvueDriver.change_tags(key, before, after)
    else:
        owner = next(d for d in node.domains() if d.name == _OWNER[key.split("/")[0]])
        tags = owner.tags(key, before, after)
    return {"key": key, "before": before, "after": after, "tags": list(tags)}


def _one_batch(changes: dict[str, list[dict]]):
    return phases(Batch(1, ["node01", "node02"], ["leaf01"]), changes)


def test_mtu_up_switches_first_down_nodes_first_mixed_refused():
    up = {"node01": [_ch("mtu/enp12s0np0", "1500", "9000")], "node02": [_ch("sysctl/x", "1", "2")],
          "leaf01": [_ch("port/swp1/mtu", "1500", "9216")]}
    got, why = _one_batch(up)
    assert got == [["leaf01"], ["node01", "node02"]]
    assert why.startswith("MTU raised (") and why.endswith("switches first, then nodes") and "1500 -> 9000" in why
    down = {"node01": [_ch("mtu/enp12s0np0", "9000", "1500")], "leaf01": [_ch("port/swp1/mtu", "9216", "1500")]}
    got, why = _one_batch(down)
    assert got == [["node01"], ["leaf01"]] and "nodes first, then switches" in why  # node02: nothing to push
    oper = {"node01": [_ch("mtu/enp12s0np0", "9000", "1500")], "leaf01": [_ch("port/swp1/oper_mtu", "9216", "1500")]}
    assert _one_batch(oper)[0] == [["node01"], ["leaf01"]]
    mixed = {"node01": [_ch("mtu/enp12s0np0", "1500", "9000")], "leaf01": [_ch("port/swp1/mtu", "9216", "1500")]}
    with pytest.raises(InputError, match="up .* and down .*split the rollout"):
        _one_batch(mixed)
    plain = {"node01": [_ch("sysctl/net.core.rmem_max", "212992", "268435456")], "leaf01": []}
    got, why = _one_batch(plain)
    assert got == [["node01"]] and why == "no MTU or lossless change: all at once"


def test_lossless_on_switches_first_off_nodes_first():
    on = {"node01": [_ch("pfc/enp12s0np0", "0,0,0,0,0,0,0,0", "0,0,0,1,0,0,0,0")],
          "leaf01": [_ch("roce/mode", "lossy", "lossless")]}
    got, why = _one_batch(on)
    assert got == [["leaf01"], ["node01"]] and why.startswith("lossless turned on")
    off = {"node01": [_ch("ecn/enp12s0np0/roce_np/3", "1", "0")], "leaf01": [_ch("roce/tc/3/ecn", "enable", "disable")]}
    got, why = _one_batch(off)
    assert got == [["node01"], ["leaf01"]] and why.startswith("lossless turned off")
    clash = {"node01": [_ch("mtu/enp12s0np0", "1500", "9000")], "leaf01": [_ch("roce/pfc_tx", "enable", "disable")]}
    with pytest.raises(InputError, match="switches first but .* nodes first"):
        _one_batch(clash)


def test_the_run_wide_rule_orders_every_batch():
    """Batch 2 holds only a node whose sysctl changes; the run raises the MTU elsewhere, so a batch
    with both roles still pushes switches first (one rule for the whole run)."""
    inv = inventory.load(LAB)
    changes = {"node01": [_ch("mtu/enp12s0np0", "1500", "9000")], "node02": [_ch("sysctl/x", "1", "2")],
               "node03": [_ch("sysctl/x", "1", "2")], "node04": [_ch("sysctl/x", "1", "2")],
               "leaf01": [_ch("port/swp1/mtu", "1500", "9216")], "leaf02": [_ch("port/swp9/mtu", "1500", "9216")],
               "spine01": []}
    batches = plan_batches(inv, inv.nodes + inv.switches, RolloutPolicy(serial=[1]), changes)
    assert batches[0].phases == [["leaf01", "leaf02"], ["node01"]]
    assert [b.phases for b in batches[1:]] == [[["node02"]], [["node03"]], [["node04"]]]


def _copy_lab(tmp_path: Path) -> Path:
    dst = tmp_path / "inv"
    shutil.copytree(LAB, dst, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    return dst


def test_policy_is_read_from_the_all_group_only(tmp_path: Path):
    inv_dir = _copy_lab(tmp_path)
    all_yml = inv_dir / "group_vars" / "all.yml"
    base = all_yml.read_text()
    all_yml.write_text(base + "fabtune_rollout:\n  serial: [1, \"50%\"]\n  max_failed_devices: 2\n")
    pol = inventory.load(inv_dir).policy
    assert pol.serial == [1, "50%"] and pol.max_failed_devices == 2 and pol.max_fail_percentage == 0
    assert pol.override(max_fail_percentage=25, min_bw_gbps=100.0).thresholds.min_bw_gbps == 100.0
    with pytest.raises(InputError, match="--on-regression"):
        pol.override(on_regression="restore-some")
    nodes_yml = inv_dir / "group_vars" / "gpu_nodes.yml"
    keep = nodes_yml.read_text()
    nodes_yml.write_text(keep + "fabtune_rollout:\n  serial: [1]\n")
    with pytest.raises(InputError, match=r"gpu_nodes\.yml: fabtune_rollout: set for group gpu_nodes; .*all group"):
        inventory.load(inv_dir)
    nodes_yml.write_text(keep + "fabtune_rolout:\n  serial: [1]\n")
    with pytest.raises(InputError, match="did you mean fabtune_rollout"):
        inventory.load(inv_dir)
    nodes_yml.write_text(keep)
    all_yml.write_text(base + "fabtune_rollout:\n  serail: [1]\n")
    with pytest.raises(InputError, match=r"all\.yml: fabtune_rollout\.serail: unknown key; allowed: batch_by"):
        inventory.load(inv_dir)
    all_yml.write_text(base + "fabtune_rollout:\n  max_fail_percentage: 101\n")
    with pytest.raises(InputError, match=r"fabtune_rollout\.max_fail_percentage: 101 is not allowed; allowed: a number in 0\.\.100"):
        inventory.load(inv_dir)
    all_yml.write_text(base + "fabtune_rollout:\n  timeouts: {apply_s: \"5\"}\n")
    with pytest.raises(InputError, match=r"fabtune_rollout\.timeouts\.apply_s: '5' is not allowed; allowed: an integer in 1\.\.3600"):
        inventory.load(inv_dir)
    all_yml.write_text(base)
    assert inventory.load(inv_dir).policy == RolloutPolicy()


def test_exit_codes_reports_and_junit_of_a_halted_run():
    """halted is 1; devices that only did not answer are 4 (a failure beside them wins: 1); the JSON
    report of a run in batches validates against its schema and JUnit carries each batch."""
    import jsonschema

    from tuning.reports import exit_code
    from tuning.reports.json_report import Context, build, schema
    from tuning.reports.junit import to_xml
    from tuning.rollout.run_report import RunReport

    assert exit_code(RunReport("r", "rollout", outcome="halted")) == 1
    gone = RunReport("r", "rollout", outcome="halted", errors={"node03": "no answer in apply after 600 s"},
                     unreachable=["node03"])
    assert exit_code(gone) == 4
    gone.errors["node02"] = "CommitError"
    assert exit_code(gone) == 1
    assert exit_code(RunReport("r", "rollout", outcome="kept", errors={"node02": "failed"})) == 1
    batches = [{"index": 1, "nodes": ["node01"], "switches": ["leaf01"], "phases": [["leaf01"], ["node01"]],
                "why": "canary", "order": "MTU raised: switches first, then nodes", "outcome": "kept", "failed": [],
                "unreachable": [], "verify_ok": True, "pairs": []},
               {"index": 2, "nodes": ["node02"], "switches": [], "phases": [["node02"]], "why": "batch 2",
                "order": "all at once", "outcome": "restored", "failed": ["node02"], "unreachable": [],
                "verify_ok": None, "halt": "batch 2: 1 of 1 failed (100 % > max_fail_percentage 0)"}]
    rep = RunReport("20261130T101500-1a2b3c", "rollout", outcome="halted", errors={"node02": "CommitError"},
                    batches=batches, policy=RolloutPolicy(serial=[1]).model_dump(), restored=["node02"])
    ctx = Context("rollout", "/inv", {"node01": "node", "node02": "node", "leaf01": "switch"}, exit_code=exit_code(rep))
    doc = build(rep, ctx)
    jsonschema.Draft202012Validator(schema()).validate(doc)
    assert doc["outcome"] == "halted" and doc["exit_code"] == 1
    root = __import__("xml.etree.ElementTree", fromlist=["x"]).fromstring(to_xml(doc))
    props = {p.get("name"): p.get("value") for p in root.find("testsuite/properties")}
    assert props["batches"] == "2" and props["batch.1"] == "kept" and props["batch.2"] == "restored; failed node02"
    assert props["halted_at"].startswith("2: batch 2: 1 of 1 failed")


def test_order_quotes_a_change_of_its_own_batch_or_none():
    """The run's MTU rule orders every batch, but batch 2's reason never names batch 1's node01."""
    inv = inventory.load(LAB)
    changes = {"node01": [_ch("mtu/enp12s0np0", "1500", "9000")], "node02": [_ch("mtu/enp12s0np0", "1500", "9000")],
               "node03": [_ch("sysctl/x", "1", "2")], "node04": [_ch("sysctl/x", "1", "2")],
               "leaf01": [_ch("port/swp1/mtu", "1500", "9216")], "leaf02": [], "spine01": []}
    batches = plan_batches(inv, inv.nodes + inv.switches, RolloutPolicy(serial=[1]), changes)
    assert batches[0].order == "MTU raised (node01 mtu/enp12s0np0 1500 -> 9000): switches first, then nodes"
    assert batches[1].order == "MTU raised (node02 mtu/enp12s0np0 1500 -> 9000): all at once"
    assert batches[2].order == "MTU raised: all at once"  # node03 changes no MTU: no device quoted


def _measure(r, b: int, pairs, absolute) -> None:
    """Record ``pairs`` as measured in batch ``b`` (``absolute``: pair name -> judged with the absolute marks)."""
    from tuning.rollout.batch_run import Measured, pair_devices

    for p in pairs:
        r.pair_devs[p.name] = pair_devices(p)
        r.measured.append(Measured(b, {"pair": p.name, "batch": b}, absolute(p)))


def test_final_results_are_measured_after_the_last_change_of_each_pair():
    """The lab in batches [1, "50%"]: node01 with every switch (so batch 1 measures all 18 pairs, most
    with an untuned end), node02 + node03, node04. A pair's final result is its measurement after the
    last batch changing an end or hop; the last batch measures again every pair of the whole schedule
    left without one, and a halted run keeps the halting batch's results as its last word."""
    from tuning.rollout import engine
    from tuning.rollout.batch_run import final_results, missing_pairs

    inv = inventory.load(LAB)
    devs = inv.nodes + inv.switches
    policy = RolloutPolicy(serial=[1, "50%"])
    batches = plan_batches(inv, devs, policy)
    assert [(b.nodes, b.switches) for b in batches] == [(["node01"], ["leaf01", "leaf02", "spine01"]),
                                                         (["node02", "node03"], []), (["node04"], [])]
    whole = engine.verify_pairs(inv, None)
    r = engine.Run("x", whole, None, policy, batches, changed={d.name for d in devs})
    own = {b.index: engine.verify_pairs(inv, None, b.devices) for b in batches}
    assert {p.name for p in own[1]} == {p.name for p in whole}  # every NIC is in batch 1's scope
    tuned = {1: {"node01"}, 2: {"node01", "node02", "node03"}, 3: {d.name for d in inv.nodes}}
    for b in (1, 2):
        _measure(r, b, own[b], lambda p, b=b: {p.client, p.server} <= tuned[b])
    halted = final_results(r, 2, complete=False)  # the run stops in batch 2: what batches 1-2 say
    # node04 never changed then: batch 1's values of its pairs stand; a pair of node02 or node03
    # counts only as batch 2 measured it (after their change)
    assert {x["pair"] for x in halted} == {p.name for p in whole if not {"node02", "node03"} & {p.client, p.server}} \
        | {p.name for p in own[2]}
    extra = missing_pairs(r, own[3])
    mine = {p.name for p in own[3]}
    # pairs of the whole schedule not in batch 3's own, whose ends were not all tuned when last measured
    want = {p.name for p in whole if p.name not in mine
            and not any(m.absolute and m.batch >= 2 for m in r.measured if m.pair == p.name)}
    assert {p.name for p in extra} == want and want and not mine & want
    _measure(r, 3, own[3] + extra, lambda p: True)
    final = final_results(r, 3, complete=True)
    names = [x["pair"] for x in final]
    assert len(names) == len(set(names)) and {p.name for p in whole} <= set(names)  # one per pair, all there
    by = {x["pair"]: x["batch"] for x in final}
    assert all(by[p.name] == 3 for p in whole if "node04" in p.name)
    assert "node01:mlx5_0->node02:mlx5_0" in by and by["node01:mlx5_0->node02:mlx5_0"] >= 2  # never batch 1's value
