"""The Arista EOS stand-in (tuning.lab.eos), without SSH: the transcripts of
shared/cases/cli/eos__*.txt replayed line by line (prompt, command, output), plus one SSH test
through netmiko's ``arista_eos`` driver (``-m lab``)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.conftest import TEST_BASE_PORT
from tuning.lab.controller import port_open
from tuning.lab.eos import EosSwitch, EosTerminal
from tuning.lab.fabric import Switch, default_fabric

PROMPT = re.compile(r"^(leaf1(?:\([^)]*\))?[>#])(.*)$")
#: the origin the transcripts show (eAPI) and the one the lab's first SSH login shows
EAPI, VTY = "command-api (192.0.2.10)", "vty1 (127.0.0.1)"


def cli(cases_dir: Path, name: str) -> list[str]:
    return (cases_dir / "cli" / name).read_text().splitlines()


def replay(term: EosTerminal, lines: list[str], fix=lambda line: line, keep=lambda line: True) -> None:
    """Type every ``PROMPT command`` of a transcript; the prompt and each output line must be the
    transcript's (``fix`` maps an expected line to the lab's, e.g. the syslog origin; only lines
    ``keep`` accepts are compared, on both sides)."""
    steps: list[tuple[str, str, list[str]]] = []
    for line in lines:
        m = PROMPT.match(line)
        if m:
            steps.append((m.group(1), m.group(2), []))
        else:
            steps[-1][2].append(fix(line))
    for prompt, command, want in steps:
        assert term.prompt == prompt, command
        if command:
            got = term.run(command).splitlines()
            assert [ln for ln in got if keep(ln)] == [ln for ln in want if keep(ln)], command


def leaf(ports: int = 2, **kw) -> EosSwitch:
    return EosSwitch(Switch("leaf1", 47000, "leaf", [f"Ethernet{i}" for i in range(1, ports + 1)]), **kw)


def typed(term: EosTerminal, *lines: str) -> str:
    return "".join(term.run(line) for line in lines)


def test_prompts_and_modes_as_transcript(cases_dir: Path) -> None:
    lines = cli(cases_dir, "eos__prompts_modes_session_prep.txt")
    lines = lines[:next(i for i, ln in enumerate(lines) if ln.startswith("spine1"))]  # no modular chassis
    lines = [ln for ln in lines if "router bgp" not in ln and "-router-bgp)" not in ln]  # BGP not modelled
    sw = leaf()
    term = sw.terminal()
    sw.open_session("sess-1"), sw.open_session("sess-2"), sw.open_session("sess-3")  # the next one is sess-4...
    replay(term, lines[:-3] + ["leaf1#configure session"])
    assert re.fullmatch(r"leaf1\(config-s-sess-\d\)#", term.prompt)  # auto-named sess-<pid>-..., 6 characters shown
    assert typed(term, "abort") == "" and term.prompt == "leaf1#"
    assert typed(term, "exit") == "" and term.closed


def test_session_diff_and_commit_as_transcript(cases_dir: Path) -> None:
    sw = leaf()
    term = sw.terminal()
    typed(term, "enable", "configure terminal", "interface Ethernet1", "description SRV-GPU01_eth0",
          "ip address 10.10.1.0/31", "interface Ethernet2", "description SRV-GPU02_eth0", "ip address 10.10.1.2/31", "end")
    term.privileged = False
    lines = cli(cases_dir, "eos__configure_session_roce_diff_commit.txt")
    replay(term, lines, keep=lambda ln: not ln.startswith("@@"))  # hunk headers: below
    # the hunk headers are the transcript's shifted by one offset (the device has 48 more lines first)
    sw2 = leaf()
    t2 = sw2.terminal()
    typed(t2, "enable", "configure terminal", "interface Ethernet1", "description SRV-GPU01_eth0",
          "ip address 10.10.1.0/31", "interface Ethernet2", "description SRV-GPU02_eth0", "ip address 10.10.1.2/31", "end")
    typed(t2, *[PROMPT.match(ln).group(2) for ln in lines if PROMPT.match(ln)][1:12])
    mine = [ln for ln in t2.run("show session-config diffs").splitlines() if ln.startswith("@@")]
    hunks = [ln for ln in lines if ln.startswith("@@")]
    nums = lambda h: [int(n) for n in re.findall(r"\d+", h)]  # noqa: E731
    shift = nums(hunks[0])[0] - nums(mine[0])[0]
    assert [re.sub(r"\d+", "N", h) for h in mine] == [re.sub(r"\d+", "N", h) for h in hunks]
    assert [[n + shift if i % 2 == 0 else n for i, n in enumerate(nums(h))] for h in mine] == [nums(h) for h in hunks]


def test_errors_and_pending_session_limit_as_transcript(cases_dir: Path) -> None:
    sw = leaf()
    other = sw.terminal()
    typed(other, "enable")
    for i in range(2, 6):
        typed(other, f"configure session fabtune-roce{i}", "end")
    term = sw.terminal()
    typed(term, "enable", "configure session fabtune-roce", "interface Ethernet1")
    replay(term, cli(cases_dir, "eos__errors_invalid_incomplete_ambiguous.txt"))
    assert set(sw.sessions) == {"fabtune-roce", *[f"fabtune-roce{i}" for i in range(2, 6)]}


def test_commit_timer_confirm_abort_and_syslog_as_transcript(cases_dir: Path) -> None:
    now = [time.mktime((2025, 3, 11, 9, 31, 2, 0, 0, -1))]
    sw = leaf(clock=lambda: now[0])
    term = sw.terminal("admin")
    term.run("enable")
    lines = cli(cases_dir, "eos__commit_timer_confirm_abort_syslog.txt")
    split = lines.index("leaf1#configure session fabtune-roce2")
    try:
        replay(term, lines[:split], fix=lambda ln: ln.replace(EAPI, VTY))
        assert sw.running["interfaces"]["Ethernet1"]["lines"]["pfc priority 3"] == "priority-flow-control priority 3 no-drop"
        now[0] += 9 * 60 + 11
        abort = lines.index("leaf1#configure session fabtune-roce2 abort")
        replay(term, lines[split:abort], fix=lambda ln: ln.replace(EAPI, VTY))
        assert sw.running["interfaces"]["Ethernet2"]["lines"]["mtu"] == "mtu 9214"
        now[0] += 4
        replay(term, lines[abort:abort + 1])
        assert "mtu" not in sw.running["interfaces"]["Ethernet2"]["lines"]  # rolled back
        # the transcript shows the log's last 5 lines (the lab's log still has the first commit's too)
        got = term.run(lines[abort + 1].split("#", 1)[1]).splitlines()
        assert got[-5:] == [ln.replace(EAPI, VTY) for ln in lines[abort + 2:-1]] and len(got) == 7
    finally:
        sw.close()


def test_sessions_detail_json_before_and_from_4_32(cases_dir: Path) -> None:
    want = cli(cases_dir, "eos__show_configuration_sessions_detail_json_pre_4_32.txt")[1:-1]
    for version in ("4.31.2F", "4.32.1F"):
        sw = leaf(version=version)
        term = sw.terminal("admin")
        try:
            typed(term, "enable", "configure session fabtune-roce", "interface Ethernet1", "mtu 9214",
                  "commit timer 00:05:00")
            out = term.run("show configuration sessions detail | json")
        finally:
            sw.close()
        doc = json.loads(out)
        if version.startswith("4.31"):
            assert [re.sub(r"\d+\.\d+", "T", ln) for ln in out.splitlines()] == [re.sub(r"\d+\.\d+", "T", ln) for ln in want]
            entry = doc["sessions"]["fabtune-roce"]
            assert entry["commitBy"] - entry["completedTime"] == pytest.approx(300)
        else:
            assert doc["sessions"]["fabtune-roce"]["state"] == "committed" and "commitBy" not in doc["sessions"]["fabtune-roce"]
            assert doc["commitTimerSessionName"] == "fabtune-roce"
            assert doc["commitTimerExpireTime"] - doc["sessions"]["fabtune-roce"]["completedTime"] == pytest.approx(300)
        assert term.run("show configuration sessions detail").startswith("% ")


def test_show_interfaces_json_and_injected_oper_mtu(cases_dir: Path, tmp_path: Path) -> None:
    sw = leaf(state_dir=tmp_path)
    term = sw.terminal()
    typed(term, "enable", "configure", "interface Ethernet1", "mtu 9214", "end")
    assert term.run("show interfaces Ethernet1 | json").splitlines() == \
        cli(cases_dir, "eos__show_interfaces_json_mtu.txt")[1:-1]
    assert json.loads(term.run("show interfaces et2 | json"))["interfaces"]["Ethernet2"]["mtu"] == 1500
    (tmp_path / "fabric.json").write_text(json.dumps({"injections": [
        {"target": "leaf1:Ethernet1", "kind": "oper-mtu", "value": 9000}]}))
    assert json.loads(term.run("show interfaces | json"))["interfaces"]["Ethernet1"]["mtu"] == 9000
    state = json.loads((tmp_path / "switches" / "leaf1.fabric.json").read_text())
    assert state["ports"] == {"Ethernet1": {"mtu": 9000}, "Ethernet2": {"mtu": 1500}}


def test_running_config_layout_from_a_pasted_config(cases_dir: Path) -> None:
    lines = cli(cases_dir, "eos__running_config_roce_lines.txt")[1:-1]
    profile = lines.index("qos profile ROCE-LEAF")
    want = lines[:profile] + lines[lines.index("interface Ethernet1"):]  # qos profiles are not modelled
    sw = leaf(ports=1)
    term = sw.terminal()
    typed(term, "enable", "configure terminal", "no ip route 0.0.0.0/0")
    paste = want[want.index("interface Ethernet1"):-1]
    shuffled = paste[:1] + [paste[5], paste[1], paste[4], paste[3], paste[2], paste[6], paste[7]] + paste[8:]
    assert all(term.run(line) == "" for line in shuffled)  # a pasted config, interface lines in another order
    assert term.prompt == "leaf1(config)#"
    assert term.run("show running-config").splitlines() == want


def test_fall_through_to_a_parent_mode() -> None:
    sw = leaf()
    term = sw.terminal()
    typed(term, "enable", "configure session s", "interface Ethernet1", "tx-queue 3")
    assert term.prompt == "leaf1(config-s-s-if-Et1-txq-3)#"
    assert term.run("interface Ethernet2") == "" and term.prompt == "leaf1(config-s-s-if-Et2)#"
    assert term.run("qos map dscp 26 48 to traffic-class 3") == "" and term.prompt == "leaf1(config-s-s)#"
    assert term.run("interface Ethernet9") == "% Invalid input (at token 1: 'Ethernet9')\n"
    assert term.run("tx-queue 8") == "% Invalid input (at token 0: 'tx-queue')\n"
    assert sw.sessions["s"].config["qos_map"] == {26: 3, 48: 3}


def test_privileged_commands_refused_at_the_user_prompt() -> None:
    term = leaf().terminal()
    for line in ("configure session x", "show running-config", "write memory", "configure"):
        assert term.run(line) == "% Invalid input (privileged mode required)\n"
    assert term.prompt == "leaf1>"


def test_fabric_json_after_commit_and_after_timer_expiry(tmp_path: Path) -> None:
    fabric = default_fabric()
    sw_def = fabric.switch("leaf01")
    sw_def.ports = ["Ethernet1", "Ethernet2"]
    sw = EosSwitch(sw_def, None, tmp_path)
    path = tmp_path / "switches" / "leaf01.fabric.json"
    assert json.loads(path.read_text()) == {"ports": {"Ethernet1": {"mtu": 1500}, "Ethernet2": {"mtu": 1500}}, "roce": {
        "enabled": False, "mode": None, "pfc_priority": None, "trust": None, "dscp_to_switch_priority": {},
        "lossless_tc": None, "ecn_tcs": [], "ecn_min_bytes": None, "ecn_max_bytes": None}}
    term = sw.terminal()
    roce = ["qos trust dscp", "priority-flow-control on", "priority-flow-control priority 3 no-drop", "tx-queue 3",
            "random-detect ecn minimum-threshold 150 kbytes maximum-threshold 1500 kbytes max-mark-probability 100"]
    typed(term, "enable", "configure session a", "qos map dscp 26 to traffic-class 3", "qos map dscp 48 to traffic-class 6",
          "interface Ethernet1", "mtu 9214", *roce, "interface Ethernet2", "mtu 9214", *roce, "commit")
    want = {"ports": {"Ethernet1": {"mtu": 9214}, "Ethernet2": {"mtu": 9214}}, "roce": {
        "enabled": True, "mode": "lossless", "pfc_priority": 3, "trust": "dscp", "dscp_to_switch_priority": {"26": 3, "48": 6},
        "lossless_tc": 3, "ecn_tcs": [3], "ecn_min_bytes": 150000, "ecn_max_bytes": 1500000}}
    assert json.loads(path.read_text()) == want
    typed(term, "configure session b", "interface Ethernet2", "no priority-flow-control on", "qos trust cos", "mtu 9000")
    assert term.run("commit timer 00:00:01") == "" and term.prompt == "leaf01#"
    lossy = json.loads(path.read_text())
    assert (lossy["roce"]["mode"], lossy["roce"]["trust"], lossy["roce"]["pfc_priority"]) == ("lossy", None, 3)
    assert lossy["ports"]["Ethernet2"] == {"mtu": 9000}
    assert term.run("configure session c commit timer 00:00:05").startswith("% ")  # one timer at a time
    deadline = time.time() + 3
    while json.loads(path.read_text()) != want and time.time() < deadline:
        time.sleep(0.05)
    assert json.loads(path.read_text()) == want and "b" not in sw.sessions


def test_checkpoint_replace_write_memory_and_reboot() -> None:
    sw = leaf()
    term = sw.terminal()
    assert typed(term, "enable", "copy running-config flash:fabtune-ckpt") == "Copy completed successfully.\n"
    before = term.run("show running-config")
    typed(term, "configure", "interface Ethernet1", "mtu 9000", "end")
    assert term.run("configure replace flash:nothing") == \
        "% Error copying flash:nothing to running-config (No such file or directory)\n"
    assert term.run("configure replace flash:fabtune-ckpt") == "" and term.run("show running-config") == before
    typed(term, "configure", "interface Ethernet1", "mtu 9100", "end")
    assert term.run("write memory") == "Copy completed successfully.\n"
    assert "   mtu 9100" in term.run("show startup-config").splitlines()
    typed(term, "configure", "interface Ethernet1", "mtu 9200", "end", "configure session pending")
    sw.reboot_from_startup()
    assert sw.running["interfaces"]["Ethernet1"]["lines"]["mtu"] == "mtu 9100" and not sw.sessions


def test_an_injected_reboot_happens_before_the_next_command(tmp_path: Path) -> None:
    """``fabtune lab inject leaf1 reboot`` (a fabric.json injection, as tuning.lab.nvue_faults writes
    it): the switch reloads once, from its startup configuration, before it answers its next line."""
    (tmp_path / "fabric.json").write_text(json.dumps({"injections": []}))
    sw = leaf(state_dir=tmp_path)
    term = sw.terminal()
    typed(term, "enable", "configure", "interface Ethernet1", "mtu 9100", "end", "write memory",
          "configure", "interface Ethernet1", "mtu 9200", "end")
    inject = {"target": "leaf1", "kind": "reboot", "value": time.time_ns()}
    (tmp_path / "fabric.json").write_text(json.dumps({"injections": [inject]}))
    assert "   mtu 9100" in term.run("show running-config").splitlines()  # the unsaved 9200 is gone
    typed(term, "configure", "interface Ethernet1", "mtu 9000", "end")
    assert "   mtu 9000" in term.run("show running-config").splitlines()  # once, not at every command
    assert json.loads((tmp_path / "switches" / "leaf1.fabric.json").read_text())["ports"]["Ethernet1"]["mtu"] == 9000


def test_ecn_thresholds_units_and_optional_probability() -> None:
    sw = leaf(ports=1)
    term = sw.terminal()
    typed(term, "enable", "configure", "interface Ethernet1", "tx-queue 3")
    assert term.run("random-detect ecn minimum-threshold 1 mbytes maximum-threshold 2 mbytes") == ""
    assert (sw.fabric_state()["roce"]["ecn_min_bytes"], sw.fabric_state()["roce"]["ecn_max_bytes"]) == (1000000, 2000000)
    assert term.run("random-detect ecn minimum-threshold 10 segments maximum-threshold 20 segments "
                    "max-mark-probability 101") == "% Invalid input (at token 9: '101')\n"
    assert term.run("random-detect ecn minimum-threshold 10 segments maximum-threshold 20 segments") == ""
    roce = sw.fabric_state()["roce"]
    assert (roce["ecn_tcs"], roce["ecn_min_bytes"], roce["mode"]) == ([3], None, "lossy")  # segments: no byte count
    assert term.run("no random-detect ecn") == "" and sw.fabric_state()["roce"]["enabled"] is False
    assert "tx-queue" not in term.run("show running-config")


def _eos_host(tmp_path: Path, sw: EosSwitch, port: int):
    """A FakeNOS host on 127.0.0.1:``port`` serving ``sw`` with the lab's shell and SSH server."""
    from fakenos import FakeNOS
    from fakenos.core.nos import Nos

    from tuning.lab.eos_shell import PROMPT as EOS_PROMPT, EosShell
    from tuning.lab.keys import client_public_line, ensure_host_key, host_key_path, write_known_hosts
    from tuning.lab.switches import NvueSshServer

    nos = Nos(name="eos_leaf1", initial_prompt=EOS_PROMPT)
    nos.device = sw
    write_known_hosts(tmp_path, {port: ensure_host_key(tmp_path, "leaf1")})
    host = {"username": "fabtune", "password": "", "port": port,
            "server": {"plugin": "ParamikoSshServer", "configuration": {
                "address": "127.0.0.1", "host_key_file": str(host_key_path(tmp_path, "leaf1")),
                "authorized_key": client_public_line(tmp_path)}},
            "shell": {"plugin": "CMDShell", "configuration": {}}, "nos": {"plugin": "eos_leaf1"}}
    net = FakeNOS(inventory={"hosts": {"leaf1": host}}, plugins=[nos])
    net.shell_plugins["CMDShell"] = EosShell
    net.servers_plugins["ParamikoSshServer"] = NvueSshServer
    net.start()
    deadline = time.monotonic() + 10  # FakeNOS binds in start() but listens in its thread: wait for it, as `lab up` does
    while not port_open(port) and time.monotonic() < deadline:
        time.sleep(0.02)
    return net


@pytest.mark.lab
def test_netmiko_arista_eos_over_ssh(tmp_path: Path) -> None:
    from netmiko import ConnectHandler

    port = TEST_BASE_PORT + 280  # this process's own range: a fixed port in the kernel's ephemeral range
    # (47001 was) can be any client connection's source port under load, and the server cannot bind it
    sw = leaf(state_dir=tmp_path)
    net = _eos_host(tmp_path, sw, port)
    try:
        conn = ConnectHandler(device_type="arista_eos", host="127.0.0.1", port=port, username="fabtune",
                              use_keys=True, key_file=str(tmp_path / "ssh" / "id_ed25519"), ssh_strict=True,
                              system_host_keys=False, alt_host_keys=True, alt_key_file=str(tmp_path / "ssh" / "known_hosts"),
                              allow_agent=False)
        assert conn.find_prompt() == "leaf1>"
        conn.enable()
        assert conn.find_prompt() == "leaf1#"
        conn.send_command("configure session fabtune-roce", expect_string=r"\(config-s-fabtun\)#")
        conn.write_channel("interface Ethernet1\nmtu 9214\npriority-flow-control on\n")
        conn.read_until_pattern(r"\(config-s-fabtun-if-Et1\)#\s*$")
        conn.send_command("end", expect_string=r"leaf1#")
        diff = conn.send_command("show session-config named fabtune-roce diffs", expect_string=r"leaf1#").splitlines()
        assert "+   mtu 9214" in diff and "+   priority-flow-control on" in diff
        conn.send_command("configure session fabtune-roce commit timer 00:00:02", expect_string=r"leaf1#")
        assert "   mtu 9214" in conn.send_command("show running-config interfaces Ethernet1").splitlines()
        time.sleep(2.5)
        assert "   mtu 9214" not in conn.send_command("show running-config interfaces Ethernet1").splitlines()
        assert json.loads((tmp_path / "switches" / "leaf1.fabric.json").read_text())["ports"]["Ethernet1"] == {"mtu": 1500}
        conn.disconnect()
    finally:
        net.stop()
        sw.close()


def test_a_fault_the_eos_switch_cannot_play_is_refused_not_ignored(tmp_path: Path) -> None:
    """`fabtune lab inject leaf02 apply-fails` on an EOS leaf: no real EOS commit-failure text exists
    to print, so the lab refuses the injection (naming what the switch plays) instead of taking it in
    silence and letting a rollout pass a test of a failure that never happened."""
    from tuning.errors import InputError
    from tuning.lab.nvue_faults import inject_switch

    fabric = default_fabric(base_port=47000, switch_os={"leaf02": "eos"})
    path = tmp_path / "fabric.json"
    fabric.save(path)
    for kind in ("apply-fails", "nvued-down"):
        with pytest.raises(InputError, match=rf"leaf02's OS \(eos\) has no {kind} fault.*allowed on leaf02: "
                                             "slow-apply, oper-mtu, reboot, clear"):
            inject_switch(path, fabric, "leaf02", kind, None)
    assert inject_switch(path, fabric, "leaf02", "slow-apply", "2") == [{"target": "leaf02", "kind": "slow-apply", "value": 2}]
    assert inject_switch(path, fabric, "leaf01", "apply-fails", None)[-1]["kind"] == "apply-fails"  # NVUE plays it
