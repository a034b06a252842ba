"""The NVUE state machine (tuning.lab.nvue), without SSH: transcripts of shared/cases/cli/nvue_*.txt."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tuning.lab.fabric import default_fabric
from tuning.lab.nvue import NvueSwitch, parse_duration
from tuning.parsers import parse


@pytest.fixture()
def sw(tmp_path: Path) -> NvueSwitch:
    fabric = default_fabric()
    return NvueSwitch(fabric.switch("leaf01"), fabric, tmp_path)


def out(sw: NvueSwitch, line: str) -> str:
    reply = sw.run(line)
    assert reply.rc == 0, reply.stderr
    return reply.stdout


def fabric_json(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "switches" / "leaf01.fabric.json").read_text())


def test_pending_diff_matches_transcript(sw: NvueSwitch, cases_dir: Path) -> None:
    assert out(sw, "nv config diff") == ""
    for line in ("nv set interface swp1 link mtu 9216", "nv set qos roce", "nv set qos roce mode lossless"):
        assert sw.run(line).stdout == ""
    want = (cases_dir / "cli" / "nvue_config_diff__pending_mtu_and_roce.txt").read_text().splitlines()[1:-1]
    assert out(sw, "nv config diff").splitlines() == want


def test_invalid_commands_go_to_stderr(sw: NvueSwitch) -> None:
    for line in ("nv set system m123ssage pre-login WARNING", "nv set interface swp1 link mtu 551",
                 "nv set interface swp1 link mtu 9217", "nv set interface swp99 link mtu 9000",
                 "nv set qos pfc default-global switch-priority 8"):
        reply = sw.run(line)
        assert (reply.stdout, reply.rc) == ("", 1)
        assert reply.stderr == f"Invalid Command: {line[3:]}\n"
    assert out(sw, "nv config diff") == ""


def test_apply_writes_revision_and_fabric_json(sw: NvueSwitch, tmp_path: Path) -> None:
    assert fabric_json(tmp_path)["ports"]["swp1"] == {"mtu": 9216}
    assert fabric_json(tmp_path)["roce"]["enabled"] is False
    out(sw, "nv set interface swp1-4,31 link mtu 9000")
    out(sw, "nv set qos roce")
    assert out(sw, "nv config apply -y") == "applied [rev_id: 2]\n"
    state = fabric_json(tmp_path)
    assert [state["ports"][p]["mtu"] for p in ("swp1", "swp4", "swp5", "swp31")] == [9000, 9000, 9216, 9000]
    assert state["roce"] == {"enabled": True, "mode": "lossless", "pfc_priority": 3, "trust": "pcp,dscp",
                             "dscp_to_switch_priority": {"26": 3, "48": 6}, "lossless_tc": 3, "ecn_tcs": [3],
                             "ecn_min_bytes": 150000, "ecn_max_bytes": 1500000}
    assert out(sw, "nv config diff") == ""
    assert out(sw, "nv config show -o commands") == (
        "nv set interface swp1-4,31 link mtu 9000\nnv set interface swp1-4,31 type swp\n"
        "nv set qos roce enable on\nnv set qos roce mode lossless\n")
    assert out(sw, "nv config save") == "saved [rev_id: applied]\n"


def test_interactive_prompt_and_assume_no(sw: NvueSwitch) -> None:
    out(sw, "nv set interface swp1 link mtu 9000")
    asked: list[str] = []
    assert sw.run("nv config apply", ask=lambda p: asked.append(p) or "n").stdout == ""
    assert asked == ["Are you sure? [y/N] "]
    assert out(sw, "nv config apply --assume-no") == ""
    assert out(sw, "nv config apply", ) == ""  # no answer means N
    assert sw.run("nv config apply", ask=lambda p: "y").stdout == "applied [rev_id: 2]\n"


def test_revision_table_layout(sw: NvueSwitch, cases_dir: Path) -> None:
    out(sw, "nv set interface swp1 link mtu 9000")
    out(sw, "nv config apply -y")
    lines = out(sw, "nv config revision").splitlines()
    sample = (cases_dir / "cli" / "nvue_config_revision__table.txt").read_text().splitlines()
    assert lines[:2] == sample[1:3]
    assert lines[2].startswith("1                     applied_and_saved  rev_1_apply_1  ")
    assert lines[2].endswith("  CLI       root     Config update  Password sync for user: cumulus")
    assert lines[3].endswith("Config update by cumulus") and len(lines[3]) < len(lines[2])


def test_confirm_yes_keeps_and_no_rolls_back(sw: NvueSwitch, tmp_path: Path) -> None:
    out(sw, "nv set interface swp1 link mtu 9000")
    assert out(sw, "nv config apply --confirm 300s -y") == "applied [rev_id: 2]\n"
    assert json.loads(out(sw, "nv config revision -o json"))["2"]["state"] == "confirm"
    assert fabric_json(tmp_path)["ports"]["swp1"]["mtu"] == 9000
    assert sw.run("nv config apply -y").rc == 1  # a second apply while a confirm is pending
    out(sw, "nv config apply 2 --confirm-yes")
    assert json.loads(out(sw, "nv config revision -o json"))["2"]["state"] == "applied"  # CL 5.8: not saved
    out(sw, "nv set interface swp1 link mtu 1500")
    out(sw, "nv config apply --confirm 10m -y")
    assert out(sw, "nv config apply 3 --confirm-no") == "applied [rev_id: 2]\n"
    assert fabric_json(tmp_path)["ports"]["swp1"]["mtu"] == 9000
    assert json.loads(out(sw, "nv config revision --applied -o json"))["applied"]["additional-data"]["rev-id"] == "2"


def test_confirm_expires_by_itself(sw: NvueSwitch, tmp_path: Path) -> None:
    out(sw, "nv set qos roce")
    out(sw, "nv config apply --confirm 1s -y")
    assert fabric_json(tmp_path)["roce"]["enabled"] is True
    deadline = time.monotonic() + 5
    while fabric_json(tmp_path)["roce"]["enabled"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fabric_json(tmp_path)["roce"]["enabled"] is False
    assert json.loads(out(sw, "nv config revision -o json"))["2"]["state"] != "confirm"


def test_rollback_to_revision_startup_and_empty(sw: NvueSwitch, tmp_path: Path) -> None:
    out(sw, "nv set interface swp1 link mtu 9000")
    out(sw, "nv config apply -y")
    out(sw, "nv set interface swp1 link mtu 4000")
    out(sw, "nv config apply -y")
    assert out(sw, "nv config apply 2 --y") == "applied [rev_id: 2]\n"
    assert fabric_json(tmp_path)["ports"]["swp1"]["mtu"] == 9000
    assert out(sw, "nv config apply empty -y") == "applied [rev_id: 4]\n"
    assert fabric_json(tmp_path)["ports"]["swp1"]["mtu"] == 9216
    assert sw.run("nv config apply 42 -y").stderr == "Invalid Command: config apply 42 -y\n"


def test_detach_drops_pending(sw: NvueSwitch) -> None:
    out(sw, "nv set interface swp2 description node02:mlx5_0")
    assert "description: node02:mlx5_0" in out(sw, "nv config diff")
    out(sw, "nv config detach")
    assert out(sw, "nv config diff") == ""


def test_show_outputs_read_by_the_parsers(sw: NvueSwitch) -> None:
    ifs = parse("nv-show-interface", out(sw, "nv show interface"))
    assert ifs.get("swp1").mtu == 9216 and ifs.get("swp1").remote_host == "node01"
    assert ifs.get("swp31").remote_host == "spine01"
    lossy = parse("nv-show-qos-roce", out(sw, "nv show qos roce"))
    assert lossy.applied.enable == "off" and lossy.operational.pfc_priorities is None
    out(sw, "nv set qos roce")
    out(sw, "nv set interface swp3 link mtu 1500")
    out(sw, "nv config apply -y")
    roce = parse("nv-show-qos-roce", out(sw, "nv show qos roce"))
    assert roce.applied.enable == "on" and roce.operational.mode == "lossless"
    assert roce.operational.pfc_priorities == [3] and roce.operational.ecn_enabled_tcs == [3]
    assert round(roce.operational.min_threshold.value) == 149996  # 146.48 KB as printed
    assert roce.dscp2sp[26] == 3 and roce.dscp2sp[48] == 6 and roce.sp2tc[6] == 6
    assert [f.subject for f in parse("nv-show-interface", out(sw, "nv show interface")).findings] == ["swp3"]


def test_parse_duration() -> None:
    assert [parse_duration(t) for t in ("300", "300s", "10m", "1h")] == [300, 300, 600, 3600]
    with pytest.raises(ValueError):
        parse_duration("soon")


def test_apply_does_not_save_and_a_reboot_brings_back_startup(sw: NvueSwitch, tmp_path: Path) -> None:
    """CL 5.8 (the lab's release): apply leaves startup alone; `nv config save` makes it survive a reboot."""
    assert out(sw, "nv show system config auto-save") == (
        "        operational  applied\n------  -----------  -------\nenable  off          off\n")
    out(sw, "nv set interface swp1 link mtu 9000")
    out(sw, "nv config apply -y")
    assert out(sw, "nv config diff startup applied") == (
        "- set:\n    interface:\n      swp1:\n        link:\n          mtu: 9000\n        type: swp\n")
    assert out(sw, "nv config diff 2 1") == "- unset:\n    interface: {}\n"
    assert sw.reboot() == 1 and fabric_json(tmp_path)["ports"]["swp1"]["mtu"] == 9216
    out(sw, "nv config apply 2 -y")
    assert out(sw, "nv config save") == "saved [rev_id: applied]\n"
    assert out(sw, "nv config diff startup applied") == ""
    out(sw, "nv set interface swp1 link mtu 4000")
    out(sw, "nv config apply --confirm 60s -y")
    assert sw.reboot() == 2 and fabric_json(tmp_path)["ports"]["swp1"]["mtu"] == 9000
    assert not sw.confirm and json.loads(out(sw, "nv config revision -o json"))["3"]["state"] != "confirm"
    assert sw.run("nv config save now").stderr == "Invalid Command: config save now\n"


def test_a_release_that_auto_saves(tmp_path: Path) -> None:
    """CL 5.9+ (auto save on by default), or auto save set on a 5.8: apply and confirm save."""
    fabric = default_fabric()
    new = NvueSwitch(fabric.switch("leaf01"), fabric, tmp_path, auto_save=True)
    assert out(new, "nv show system config auto-save").splitlines()[2] == "enable  on           on"
    out(new, "nv set interface swp2 link mtu 9000")
    out(new, "nv config apply --confirm 60s -y")
    out(new, "nv config apply 2 --confirm-yes")
    assert out(new, "nv config diff startup applied") == "" and new.reboot() == 2
    old = NvueSwitch(fabric.switch("leaf02"), fabric, None)
    out(old, "nv set system config auto-save enable on")
    out(old, "nv config apply -y")
    assert out(old, "nv config diff startup applied") == "" and old.auto_save
    assert out(old, "nv show system config").endswith("auto-save\n  enable     on           on\n")


def test_a_port_down_shows_in_show_interface_and_the_fabric_state(sw: NvueSwitch, tmp_path: Path) -> None:
    """Admin down (`link state down` applied) and a `down` link injected on SWITCH:PORT both show
    State down in `nv show interface`; the admin one is also in fabric.json for the fabric model."""
    from tuning.lab.inject import inject

    fabric = default_fabric()
    fabric.save(tmp_path / "fabric.json")
    out(sw, "nv set interface swp3 link state down")
    out(sw, "nv config apply -y")
    inject(tmp_path, "leaf01:swp4", "down")
    ifs = parse("nv-show-interface", out(sw, "nv show interface"))
    assert [(i.name, i.state) for i in ifs.interfaces if i.state == "down"] == [("swp3", "down"), ("swp4", "down")]
    assert ifs.get("swp5").state == "up"
    assert fabric_json(tmp_path)["ports"]["swp3"] == {"mtu": 9216, "state": "down"}
    assert fabric_json(tmp_path)["ports"]["swp4"] == {"mtu": 9216}  # the injection itself is the model's
