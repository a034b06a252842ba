"""Helpers of the fleet-scale work (issue 24): what each one promises besides speed."""

from __future__ import annotations

import gc
import shlex

import pytest

from tuning.inventory import collector_paused
from tuning.model import grammar
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
