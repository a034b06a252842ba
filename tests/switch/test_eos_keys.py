"""The EOS driver's reading of configuration text, session diffs and its template, without a
switch: the published transcripts (shared/cases/cli/eos__*.txt) and the rendered candidate."""

from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path

import pytest

from tests.conftest import REPO, shared_cases
from tuning import inventory
from tuning.errors import InputError, ParseError
from tuning.model.settings import SwitchSpec
from tuning.render import render_switch
from tuning.switch import eos_keys
from tuning.switch.eos import EosDriver, _hms


def _transcript_body(name: str, first: str, last: str) -> str:
    text = (shared_cases() / "cli" / name).read_text()
    return text[text.index(first):text.index(last)]


RUNNING = _transcript_body("eos__running_config_roce_lines.txt", "! Command", "leaf1#\n")


def test_running_config_of_the_transcript_reads_as_flat_settings():
    flat = eos_keys.settings(RUNNING)
    assert flat["port/Ethernet1/mtu"] == "9214"
    assert flat["port/Ethernet1/qos_trust"] == "dscp"
    assert flat["port/Ethernet1/pfc"] == "on"
    assert flat["port/Ethernet1/pfc_priority/3"] == "no-drop"
    assert (flat["port/Ethernet1/txq/3/ecn_min"], flat["port/Ethernet1/txq/3/ecn_max"]) == ("150 kbytes", "1500 kbytes")
    assert flat["port/Ethernet1/txq/3/ecn_probability"] == "100"
    assert flat["port/Ethernet1/txq/6/priority strict"] == ""
    assert (flat["qos/dscp/26/tc"], flat["qos/dscp/48/tc"]) == ("3", "6")
    # the qos profile's lines are not the port's
    assert flat["qos profile ROCE-LEAF/priority-flow-control priority 3 no-drop"] == ""
    assert "interface Ethernet1" not in flat and "end" not in flat


def test_a_badly_indented_line_is_refused():
    with pytest.raises(ParseError, match="indent"):
        eos_keys.settings("interface Ethernet1\n     mtu 9214\n")


def test_a_session_diff_patches_running_into_the_session_config_and_names_the_changes():
    after = RUNNING.replace("   mtu 9214\n", "   mtu 9000\n").replace(
        "qos map dscp 48 to traffic-class 6\n", "qos map dscp 48 to traffic-class 6\nqos map dscp 46 to traffic-class 5\n")
    diff = "\n".join(difflib.unified_diff(RUNNING.splitlines(), after.splitlines(), "system:/running-config",
                                          "session:/fabtune-x-session-config", lineterm="")) + "\n"
    assert eos_keys.patched(diff, RUNNING) == after
    assert eos_keys.changes_of_diff(diff, RUNNING) == {"port/Ethernet1/mtu": ("9214", "9000"),
                                                       "qos/dscp/46/tc": (None, "5")}
    assert eos_keys.changes_of_diff("", RUNNING) == {}
    with pytest.raises(ParseError, match="running config"):
        eos_keys.patched(diff, RUNNING.replace("   mtu 9214\n", "   mtu 1500\n"))


def test_the_transcript_diff_reads_line_by_line():
    diff = _transcript_body("eos__configure_session_roce_diff_commit.txt", "--- system", "leaf1(config-s-fabtun)#commit")
    hunks = [ln for ln in diff.splitlines() if ln.startswith("@@")]
    assert hunks == ["@@ -53,8 +53,16 @@", "@@ -64,6 +72,8 @@"]
    added = [ln[1:] for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    assert eos_keys.settings("interface Ethernet1\n" + "\n".join(added[:8]) + "\n")["port/Ethernet1/txq/3/ecn_max"] == "1500 kbytes"


def test_digest_ignores_comment_headers_and_tells_configurations_apart():
    moved = RUNNING.replace("! device: leaf1 (DCS-7060X5-64S, EOS-4.31.2F)", "! device: leaf1 (DCS-7060X5-64S, EOS-4.32.1F)")
    assert eos_keys.digest(moved) == eos_keys.digest(RUNNING)
    assert eos_keys.digest(RUNNING.replace("mtu 9214", "mtu 9000")) != eos_keys.digest(RUNNING)
    assert len(eos_keys.digest(RUNNING)) == len("cfg-") + 12


def test_change_tags_read_eos_words():
    assert eos_keys.change_tags("port/Ethernet1/mtu", None, "9214") == ("mtu_up",)  # EOS default 1500
    assert eos_keys.change_tags("port/Ethernet1/mtu", "9214", "1500") == ("mtu_down",)
    assert eos_keys.change_tags("port/Ethernet1/pfc", None, "on") == ("lossless_on",)
    assert eos_keys.change_tags("port/Ethernet1/pfc_priority/3", "no-drop", None) == ("lossless_off",)
    assert eos_keys.change_tags("port/Ethernet1/txq/3/ecn_min", None, "150 kbytes") == ("lossless_on",)
    assert eos_keys.change_tags("qos/dscp/26/tc", None, "3") == ()


def test_commit_timer_form():
    assert (_hms(300), _hms(49), _hms(86400)) == ("00:05:00", "00:00:49", "24:00:00")


def _eos_leaf(**spec: object):
    dev = inventory.load(REPO / "inventory" / "lab").devices["leaf01"]
    data = {**dev.spec.model_dump(exclude={"port_mtu", "ports", "port_mtu_overrides"}), "platform": "eos",
            "ports": ["Ethernet1-2"], **spec}
    return dataclasses.replace(dev, spec=SwitchSpec.model_validate(data))


def test_the_template_renders_the_lossless_class_in_eos_syntax_and_reads_back_as_its_settings():
    dev = _eos_leaf()
    assert dev.spec.port_mtu == 9214  # the OS's largest, not NVUE's 9216
    text = render_switch(dev)
    assert "interface Ethernet2\n   mtu 9214\n   qos trust dscp\n   priority-flow-control on\n" \
           "   priority-flow-control priority 3 no-drop\n   !\n   tx-queue 3\n      random-detect ecn " \
           "minimum-threshold 150 kbytes maximum-threshold 1500 kbytes max-mark-probability 100\n!\n" in text
    assert "qos map dscp 26 to traffic-class 3\nqos map dscp 48 to traffic-class 6\n" in text
    flat = EosDriver.config_settings(text)
    assert [k for k in flat if k.startswith("port/Ethernet1/")] == [
        "port/Ethernet1/mtu", "port/Ethernet1/qos_trust", "port/Ethernet1/pfc", "port/Ethernet1/pfc_priority/3",
        "port/Ethernet1/txq/3/ecn_min", "port/Ethernet1/txq/3/ecn_max", "port/Ethernet1/txq/3/ecn_probability"]


def test_what_eos_cannot_say_is_refused_before_anything_is_rendered():
    with pytest.raises(InputError, match="ecn_min_bytes.*multiple of 1000"):
        render_switch(_eos_leaf(roce={**SwitchSpec().roce.model_dump(), "ecn_min_bytes": 150500}))
    with pytest.raises(InputError, match="lossless_tc"):
        render_switch(_eos_leaf(roce={**SwitchSpec().roce.model_dump(), "lossless_tc": 4}))


@pytest.mark.parametrize("spec, message", [
    ({"port_mtu": 9216}, "MTU 9216 is outside 68..9214"),
    ({"ports": ["swp1-2"]}, "'swp1-2' is not a port like Ethernet1"),
    ({"port_mtu_overrides": {"Ethernet1": 60}}, "Ethernet1: MTU 60 is outside 68..9214"),
])
def test_an_eos_switch_takes_only_eos_ports_and_mtus(spec, message):
    with pytest.raises(ValueError, match=message):
        _eos_leaf(**spec)


def test_the_lab_inventory_of_nvue_is_unchanged():
    dev = inventory.load(Path(REPO / "inventory" / "lab")).devices["leaf01"]
    assert (dev.spec.platform, dev.spec.port_mtu) == ("nvue", 9216)


def test_a_hunk_numbered_without_the_comment_header_is_placed_where_its_lines_are():
    after = RUNNING.replace("   mtu 9214\n", "   mtu 9000\n")
    body = [ln for ln in RUNNING.splitlines() if not ln.startswith("! ")]  # the switch's file: no header
    diff = "\n".join(difflib.unified_diff(body, [ln for ln in after.splitlines() if not ln.startswith("! ")],
                                          "system:/running-config", "session:/s-session-config", lineterm="")) + "\n"
    assert eos_keys.patched(diff, RUNNING) == after
    assert eos_keys.changes_of_diff(diff, RUNNING) == {"port/Ethernet1/mtu": ("9214", "9000")}


def test_fabtune_parse_reads_a_saved_running_config_with_the_same_reader():
    from tuning.parsers import parse

    saved = (shared_cases() / "cli" / "eos__running_config_roce_lines.txt").read_text()  # prompts included
    assert parse("eos-running-config", saved).settings == eos_keys.settings(RUNNING)
