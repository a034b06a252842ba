"""The community SONiC stand-in (tuning.lab.sonic), without SSH: shared/cases/cli/sonic__*.txt
replayed line by line (prompt, command, output), and the GCU limits it refuses with GCU's texts."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tuning.lab.fabric import Switch, default_fabric
from tuning.lab.nvue_faults import Faults
from tuning.lab.sonic import SonicSwitch, SonicTerminal

PROMPT = re.compile(r"^admin@rdma-leaf03:~\$ ?(.*)$")
ROCE = [{"op": "replace", "path": "/PORT/Ethernet16/mtu", "value": "9100"},
        {"op": "add", "path": "/PORT_QOS_MAP/Ethernet16/pfc_enable", "value": "3,4"},
        {"op": "replace", "path": "/WRED_PROFILE/AZURE_LOSSLESS/green_min_threshold", "value": "1048576"}]


def cli(cases_dir: Path, name: str) -> list[str]:
    return (cases_dir / "cli" / name).read_text().splitlines()


def replay(term: SonicTerminal, lines: list[str], fix=lambda line: line) -> None:
    """Type every ``PROMPT command``; each output line must be the transcript's (``fix`` maps an
    expected line to the lab's: a value that depends on the whole CONFIG_DB)."""
    steps: list[tuple[str, list[str]]] = []
    for line in lines:
        m = PROMPT.match(line)
        if m:
            steps.append((m.group(1), []))
        else:
            steps[-1][1].append(fix(line))
    for command, want in steps:
        assert term.prompt == "admin@rdma-leaf03:~$ ", command
        if command:
            assert term.run(command).splitlines() == want, command


def rdma_leaf03(**kw) -> SonicSwitch:
    """The transcripts' switch before the RoCE patch: Ethernet16 at MTU 1500 without PFC, the
    lossless WRED profile's green minimum at 2097152."""
    ports = ["Ethernet0", "Ethernet8", "Ethernet16", "Ethernet24", "Ethernet32", "Ethernet512"]
    sw = SonicSwitch(Switch("rdma-leaf03", 47000, "leaf", ports), **kw)
    cfg = sw.config
    cfg["PORT"]["Ethernet16"]["mtu"] = "1500"
    del cfg["PORT_QOS_MAP"]["Ethernet16"]["pfc_enable"]
    cfg["WRED_PROFILE"]["AZURE_LOSSLESS"]["green_min_threshold"] = "2097152"
    cfg["PORT"]["Ethernet32"]["admin_status"] = "down"
    cfg["PORT"]["Ethernet512"].update(admin_status="down", lanes="513", speed="10000", alias="etp65")
    del cfg["PORT"]["Ethernet512"]["fec"]
    sw.set_config(cfg)
    return sw


def test_login_banner_and_prompt_as_transcript(cases_dir: Path) -> None:
    lines = cli(cases_dir, "sonic__ssh_login_banner_prompt.txt")
    sw = rdma_leaf03(clock=lambda: time.mktime(time.strptime("Tue Mar 11 09:14:02 2025", "%a %b %d %H:%M:%S %Y"))
                     - time.timezone)
    sw.terminal("admin")
    term = sw.terminal("admin", "192.0.2.10")
    assert term.banner.splitlines() == lines[2:-1]
    assert lines[-1] == term.prompt + "exit" and term.run("exit") and term.closed


def test_show_interfaces_status_as_transcript(cases_dir: Path) -> None:
    sw = rdma_leaf03()
    sw.faults = lambda: Faults(down_ports=frozenset({"Ethernet24"}))
    term = sw.terminal("admin")
    lines = cli(cases_dir, "sonic__show_interfaces_status.txt")
    replay(term, lines)


def test_apply_patch_success_and_yang_failure_as_transcripts(cases_dir: Path) -> None:
    sw = rdma_leaf03()
    term = sw.terminal("admin")
    lines = cli(cases_dir, "sonic__apply_patch_roce_success.txt")
    sw.files["roce-qos.json-patch"] = "\n".join(lines[1:lines.index("]") + 1]) + "\n"
    assert json.loads(sw.files["roce-qos.json-patch"]) == ROCE
    replay(term, lines)
    assert sw.config["PORT"]["Ethernet16"]["mtu"] == "9100" and sw.config["BUFFER_PG"]["Ethernet16|3-4"]

    before = json.dumps(sw.config, sort_keys=True)
    sw.files["mtu.json-patch"] = json.dumps([{"op": "replace", "path": "/PORT/Ethernet16/mtu", "value": "9300"}])
    replay(term, cli(cases_dir, "sonic__apply_patch_failure_yang_invalid_value.txt"))
    assert term.run("echo $?") == "2\n" and json.dumps(sw.config, sort_keys=True) == before  # unchanged


def test_checkpoint_list_rollback_delete_as_transcript(cases_dir: Path) -> None:
    stamps = iter([1741572007.402981, 0.0, 1741684841.118264])  # nightly, the login, fabtune-pre-roce
    sw = rdma_leaf03(clock=lambda: next(stamps))
    sw.checkpoint("nightly-0310")
    term = sw.terminal("admin")
    lines = cli(cases_dir, "sonic__checkpoint_list_rollback_delete.txt")
    at = next(i for i, ln in enumerate(lines) if "list-checkpoints" in ln)
    replay(term, lines[:at])
    before = json.dumps(sw.config, sort_keys=True)
    sw.files["p"] = json.dumps(ROCE)
    assert term.run("sudo config apply-patch p").endswith("Patch applied successfully.\n")
    length = len(json.dumps(sw.checkpoints["fabtune-pre-roce"][1]))
    replay(term, lines[at:], fix=lambda ln: re.sub(r"Target config length: \d+", f"Target config length: {length}", ln))
    assert json.dumps(sw.config, sort_keys=True) == before and "nightly-0310" not in sw.checkpoints


def test_a_dry_run_changes_nothing_and_still_ends_applied_successfully() -> None:
    sw = rdma_leaf03()
    term = sw.terminal("admin")
    before = json.dumps(sw.config, sort_keys=True)
    sw.files["p"] = json.dumps(ROCE)
    out = term.run("sudo config apply-patch --dry-run p")
    assert out.startswith("** DRY RUN EXECUTION **\n") and out.endswith("Patch applied successfully.\n")
    assert "converted into 3 changes:" in out and json.dumps(sw.config, sort_keys=True) == before
    assert term.run("config apply-patch p") == "Root privileges are required for this operation\n"
    assert term.run("echo $?") == "1\n"


@pytest.mark.parametrize("path,value,text", [
    ("/BUFFER_POOL/ingress_lossless_pool/size", "1000", "Modification of BUFFER_POOL table is illegal- validating "
     "function generic_config_updater.field_operation_validators.rdma_config_update_validator returned False"),
    ("/BUFFER_PROFILE/egress_lossy_profile/size", "0", "Modification of BUFFER_PROFILE table is illegal- validating "
     "function generic_config_updater.field_operation_validators.buffer_profile_config_update_validator returned False"),
])
def test_gcu_refuses_buffer_edits_with_its_text(path: str, value: str, text: str) -> None:
    sw = rdma_leaf03()
    term = sw.terminal("admin")
    sw.files["p"] = json.dumps([{"op": "replace", "path": path, "value": value}])
    out = term.run("sudo config apply-patch p")
    assert out.count(text) == 2 and "sorting patch updates" not in out and term.run("echo $?") == "2\n"
    sw.files["q"] = json.dumps([{"op": "replace", "path": "/BUFFER_PROFILE/egress_lossy_profile/dynamic_th", "value": "1"}])
    assert term.run("sudo config apply-patch q").endswith("Patch applied successfully.\n")  # dynamic_th: allowed


def test_pfc_wd_on_an_unknown_hwsku_and_wred_on_an_older_image_are_refused() -> None:
    wd = [{"op": "replace", "path": "/PFC_WD/Ethernet0/detection_time", "value": "400"}]
    wred = [{"op": "replace", "path": "/WRED_PROFILE/AZURE_LOSSLESS/green_min_threshold", "value": "150000"}]
    for sw, patch, table in ((rdma_leaf03(hwsku="Vendor-X-64x400G"), wd, "PFC_WD"),
                             (rdma_leaf03(branch="20220300"), wred, "WRED_PROFILE")):
        sw.files["p"] = json.dumps(patch)
        out = sw.terminal("admin").run("sudo config apply-patch p")
        assert f"Modification of {table} table is illegal" in out and out.endswith("returned False\n")
    ok = rdma_leaf03()
    ok.files["p"] = json.dumps(wd + wred)
    assert ok.terminal().run("sudo config apply-patch p").endswith("Patch applied successfully.\n")


def test_a_patch_that_empties_a_table_is_refused() -> None:
    sw = rdma_leaf03()
    sw.files["p"] = json.dumps([{"op": "remove", "path": f"/SCHEDULER/{n}"} for n in ("scheduler.0", "scheduler.1")])
    out = sw.terminal().run("sudo config apply-patch p")
    pad = " " * 32
    assert (f"- localhost: localhost: given patch is not valid because it will result in empty tables {pad}which is "
            f"not allowed in ConfigDb. {pad}Table: SCHEDULER\n") in out and "SCHEDULER" in sw.config


def test_the_dead_man_timer_rolls_back_unless_stopped() -> None:
    sw = rdma_leaf03()
    term = sw.terminal()
    before = json.dumps(sw.config, sort_keys=True)
    term.run("sudo config checkpoint fabtune-x")
    out = term.run("sudo systemd-run --on-active=1 --unit=fabtune-confirm-x /usr/local/bin/config rollback fabtune-x")
    assert out == "Running timer as unit: fabtune-confirm-x.timer\nWill run service as unit: fabtune-confirm-x.service\n"
    sw.files["p"] = json.dumps(ROCE)
    term.run("sudo config apply-patch p")
    listed = term.run("systemctl list-units --type=timer --state=active --plain --no-legend --no-pager 'fabtune-confirm-*'")
    assert listed.split()[0] == "fabtune-confirm-x.timer"
    deadline = time.monotonic() + 10
    while sw.timers and time.monotonic() < deadline:
        time.sleep(0.05)
    assert json.dumps(sw.config, sort_keys=True) == before  # rolled back by the timer
    assert term.run("sudo systemctl stop fabtune-confirm-x.timer").startswith("Failed to stop")


def test_an_untuned_leaf_maps_dscp_26_to_lossy_tc1_in_its_fabric_state() -> None:
    fabric = default_fabric(switch_os={"leaf01": "sonic"})
    leaf = fabric.switch("leaf01")
    assert leaf.ports[:3] == ["Ethernet0", "Ethernet8", "Ethernet16"]
    assert fabric.nodes[0].nics[0].switch_port == "Ethernet0"
    roce = SonicSwitch(leaf, fabric).fabric_state()["roce"]
    assert roce["dscp_to_switch_priority"]["26"] == 1 and roce["dscp_to_switch_priority"]["3"] == 3
    assert roce["pfc_priority"] == 3 and roce["trust"] == "dscp" and roce["ecn_tcs"] == [3, 4]


def test_mkdir_is_the_switchs_lock() -> None:
    term = rdma_leaf03().terminal()
    assert term.run("sudo mkdir /run/lock/fabtune") == "" and term.run("echo $?") == "0\n"
    assert term.run("sudo mkdir /run/lock/fabtune") == "mkdir: cannot create directory '/run/lock/fabtune': File exists\n"
    assert term.run("echo $?") == "1\n" and term.run("sudo rmdir /run/lock/fabtune") == ""
    assert term.run("sudo rmdir /run/lock/fabtune").startswith("rmdir: failed to remove '/run/lock/fabtune': No such file")
