"""Helpers of the fleet-scale work (issue 24): what each one promises besides speed."""

from __future__ import annotations

import gc
import shlex

import pytest

from tuning.inventory import collector_paused
from tuning.model import grammar
from tuning.model.layout import parse_tree
from tuning.switch.nvue_keys import command_leaves


@pytest.mark.parametrize("enabled", [True, False])
def test_collector_paused_restores_what_it_found(enabled: bool):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with pytest.raises(RuntimeError):
            with collector_paused():
                assert not gc.isenabled()
                with collector_paused():
                    pass
                assert not gc.isenabled()  # the inner one leaves it off for the outer
                raise RuntimeError("a load refused")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


class _Cell:
    """An object that can hold a reference to itself (a cycle only the collector frees)."""


def test_collector_paused_leaves_what_it_built_in_the_oldest_generation_and_still_frees_cycles():
    was = gc.isenabled()
    gc.enable()
    try:
        with collector_paused():
            kept, cycle = _Cell(), _Cell()
            cycle.me = cycle
        assert gc.get_freeze_count() == 0  # nothing left frozen
        oldest = {id(o) for o in gc.get_objects(generation=2)}
        assert id(kept) in oldest and id(cycle) in oldest  # a young collection does not walk them
        del cycle
        assert gc.collect() >= 1  # the full collection still finds the cycle
    finally:
        (gc.enable if was else gc.disable)()


def test_a_parsed_group_tree_holds_no_reference_cycle(tmp_path):
    (tmp_path / "hosts.yaml").write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        n1:\n"
                                         "    switches:\n      children:\n        leaves:\n          hosts:\n"
                                         "            leaf1:\n")
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        tree = parse_tree(tmp_path / "hosts.yaml")
        assert tree.groups["leaves"].depth == 2
        del tree
        assert gc.collect() == 0  # freed by reference counting as soon as the load drops it
    finally:
        (gc.enable if was else gc.disable)()


def test_once_per_text_refuses_every_time_and_checks_non_strings():
    check = grammar.once_per_text(grammar.check_host_name)
    assert check("su1-leaf-r0") == "su1-leaf-r0" and check("su1-leaf-r0") == "su1-leaf-r0"
    for _ in range(2):
        with pytest.raises(ValueError, match="'a/b' is not a host name"):
            check("a/b")
    with pytest.raises(ValueError, match="123 is not a string"):
        check(123)
    with pytest.raises(ValueError, match=r"\['x'\] is not a string"):
        check(["x"])  # unhashable: checked, not remembered


def test_nv_set_lines_split_as_shlex_splits_them():
    text = ("nv set interface swp1-2 link mtu 9216\n"
            "nv set interface swp3 description \"to node 03\"\n"
            "nv set qos roce mode lossless\n")
    leaves = command_leaves(text)
    assert leaves[("interface", "swp2", "link", "mtu")] == "9216"
    assert leaves[("interface", "swp3", "description")] == "to node 03"
    assert leaves[("qos", "roce", "mode")] == "lossless"
    for line in text.splitlines()[1:]:  # the first names a range, expanded above
        words = shlex.split(line)
        assert leaves[tuple(words[2:-1])] == words[-1]
