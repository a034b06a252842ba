"""The texts the NVUE driver judges and the lab prints, against the real samples in
shared/cases/cli/ (INDEX.md sections A and C); the diff and ``nv set`` readers behind the plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuning.lab.fabric import default_fabric
from tuning.lab.nvue import NvueSwitch
from tuning.lab.nvue_faults import FAILED_TO_PREPARE, NVUED_DOWN, PROGRESS_WORD, faults_of
from tuning.switch import nvue_text as text
from tuning.switch.nvue_keys import changes_of_diff, command_leaves, diff_leaves, expand_interfaces, flat_key


def _output(cases_dir: Path, name: str) -> str:
    """The text between the first prompt line and the last one of a transcript."""
    lines = (cases_dir / "cli" / name).read_text().splitlines()
    return "\n".join(lines[1:-1]) + "\n"


def test_failure_texts_of_the_samples(cases_dir: Path) -> None:
    failed = _output(cases_dir, "nvue_config_apply__failed_to_prepare_internal_error.txt").split("apply \n")[-1]
    assert failed == FAILED_TO_PREPARE  # the lab prints the sample to the character
    assert text.failure(failed) == "Failed to prepare to apply: Unrecoverable internal error"
    down = _output(cases_dir, "nvue_config_apply__nvued_down_progress_word_concat.txt")
    assert down == PROGRESS_WORD + NVUED_DOWN
    assert text.failure(down) == "Error: Could not connect to nvued."
    assert text.failure("Invalid Command: set interface swp1 link mtu 9300\n").startswith("Invalid Command: set")
    assert text.failure("Ambiguous Command: \n   nv show interface\n") is not None
    for ok in ("applied [rev_id: 5]\n", "", "- set:\n    system:\n      hostname: x\n",
               "nv set system message pre-login 'Error: not an error here'\n"):
        assert text.failure(ok) is None


def test_success_texts(cases_dir: Path) -> None:
    assert text.applied_revision(_output(cases_dir, "nvue_config_apply__rollback_to_revision.txt")) == (True, "5")
    assert text.applied_revision("applied\n") == (True, None)  # NVOS layout
    assert text.applied_revision("Warning: There are no configuration changes to apply.\n") == (False, None)
    assert text.is_diff(_output(cases_dir, "nvue_config_diff__pending_mtu_and_roce.txt"))
    assert text.is_diff("") and not text.is_diff("Warning: something\n")
    assert text.is_commands(_output(cases_dir, "nvue_config_show__commands_510plus_state_syntax.txt"))
    assert not text.is_commands("nv set x 1\nreloading\n")


def test_applied_revision_from_the_documented_table(cases_dir: Path) -> None:
    rows = text.revision_rows(_output(cases_dir, "nvue_config_revision__table.txt"))
    assert [(r["Rev ID"], r["State"], r["Apply ID"]) for r in rows][1] == ("2", "applied_and_saved", "rev_2_apply_2")
    assert rows[0]["Message"] == "Password sync for user: cumulus"
    assert text.applied_from_table(rows) == "4"
    assert text.applied_from_table(rows[:2] + [{**rows[2], "State": "confirm"}]) == "3"


def test_lab_table_read_like_the_sample(tmp_path: Path) -> None:
    fabric = default_fabric()
    sw = NvueSwitch(fabric.switch("leaf01"), fabric, tmp_path)
    for line in ("nv set interface swp1 link mtu 9000", "nv config apply -y", "nv set interface swp1 link mtu 4000",
                 "nv config apply --confirm 60s -y"):
        assert sw.run(line).rc == 0
    assert text.applied_from_table(text.revision_rows(sw.run("nv config revision").stdout)) == "3"
    sw.close()


def test_diff_and_commands_read_into_the_same_keys(cases_dir: Path) -> None:
    sets, unsets = diff_leaves(_output(cases_dir, "nvue_config_diff__pending_mtu_and_roce.txt"))
    assert sets == {("interface", "swp1", "link", "mtu"): "9216", ("interface", "swp1", "type"): "swp",
                    ("qos", "roce", "enable"): "on", ("qos", "roce", "mode"): "lossless"} and unsets == []
    first = _output(cases_dir, "nvue_config_diff__revisions_unset.txt").split("cumulus@")[0]
    _, unsets = diff_leaves(first)
    assert unsets == [("system", "wjh", "channel", "forwarding", "trigger", "l2")]
    held = command_leaves(_output(cases_dir, "nvue_config_show__commands_510plus_state_syntax.txt"))
    assert held and all(p[0] != "interface" or "-" not in p[1] for p in held)  # ranges expanded
    assert expand_interfaces("swp1-2,32") == ["swp1", "swp2", "swp32"]
    assert changes_of_diff("- set:\n    interface:\n      swp1:\n        link:\n          mtu: 9000\n",
                           "nv set interface swp1-2 link mtu 9216\n") == {"port/swp1/mtu": ("9216", "9000")}
    assert changes_of_diff("- unset:\n    qos:\n      roce:\n", "nv set qos roce enable on\nnv set qos roce mode lossy\n") \
        == {"roce/enabled": ("on", None), "roce/mode": ("lossy", None)}
    assert flat_key(("qos", "pfc", "default-global", "tx")) == "roce/pfc_tx"
    assert flat_key(("system", "hostname")) == "system/hostname"


@pytest.mark.parametrize("bad", ["nv set", "nv set qos", "show me", "nv set interface 'swp1 link mtu 9000"])
def test_command_reader_refuses_what_is_not_nv_set(bad: str) -> None:
    from tuning.errors import ParseError

    with pytest.raises(ParseError):
        command_leaves(bad)


def test_faults_of_injections() -> None:
    inj = [{"target": "leaf01", "kind": "slow-apply", "value": 3}, {"target": "leaf01:swp1", "kind": "oper-mtu",
                                                                    "value": 9000},
           {"target": "leaf02", "kind": "nvued-down"}, {"target": "leaf01:swp2", "kind": "degrade"}]
    f = faults_of(inj, "leaf01")
    assert (f.apply_fails, f.nvued_down, f.slow_apply_s, f.oper_mtu) == (False, False, 3.0, {"swp1": 9000})
    assert faults_of(inj, "leaf02").nvued_down


@pytest.mark.parametrize("line", ["nv set interface swp1 description $(touch pwned)",
                                  "nv set interface swp1 description a;reboot", "nv set system hostname `id`",
                                  "nv config apply -y", "sudo reboot"])
def test_candidate_lines_pass_a_grammar_before_any_send(line: str) -> None:
    """The switch's login shell is bash: a candidate line with shell syntax never reaches it."""
    from tuning.errors import CandidateError
    from tuning.switch.nvue import NvueDriver

    with pytest.raises(CandidateError, match="not an `nv set`/`nv unset` line"):
        NvueDriver("192.0.2.1", username="fabtune").load_candidate(line + "\n")  # never opened: nothing sent


@pytest.mark.parametrize("out, on", [
    ("enable: off\n", False),  # CL 5.4-5.6 (System-Config.md, YAML)
    ("        operational  applied\n------  -----------  -------\nenable  on           on\n", True),  # CL 5.7+
    ("state: disabled\n", False),  # the page's latest version
    ("       operational  applied\n-----  -----------  -------\nstate  enabled      enabled\n", True),
])
def test_auto_save_in_each_documented_layout(out: str, on: bool) -> None:
    from tuning.switch.nvue_text import auto_save

    assert auto_save(out) is on


def test_auto_save_refuses_text_without_its_row_and_save_reads_both_forms() -> None:
    from tuning.errors import ParseError
    from tuning.switch.nvue_text import SAVED, auto_save

    with pytest.raises(ParseError, match="auto-save"):
        auto_save("Error: Could not connect to nvued.\n")
    assert SAVED.search("saved [rev_id: applied]\n") and SAVED.search("saved\n")  # CL 5.x; CL 5.0
    assert not SAVED.search("Warning: nothing saved\n")
