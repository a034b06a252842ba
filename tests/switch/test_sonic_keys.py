"""Community SONiC's reading (tuning.switch.sonic_keys, tuning.switch.sonic): the published
transcripts parse, the template renders a patch that reads back as the same keys, and what GCU
refuses (or a QoS transaction must not touch) is refused before anything is pushed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuning.errors import CandidateError, CommitError, ConnectError, InputError, ParseError
from tuning.model.settings import SwitchSpec
from tuning.switch import sonic_keys
from tuning.switch.sonic import SonicDriver, interfaces_status, roce_state


def text(cases_dir: Path, name: str) -> str:
    return (cases_dir / "cli" / name).read_text()


def config_db(cases_dir: Path) -> dict:
    return json.loads(text(cases_dir, "sonic__config_db_json_roce_qos_tables.txt"))


def switch(**roce) -> dict:
    spec = SwitchSpec(platform="sonic", ports=["Ethernet0", "Ethernet8"], roce=roce or {})
    r = spec.roce.model_dump()
    return {"name": "leaf01", "role": "leaf", "roce": r,
            "ports": [{"name": p, "mtu": spec.port_mtu, "description": ""} for p in spec.port_names()]}


def test_config_db_reads_as_flat_keys_without_generated_entries(cases_dir: Path) -> None:
    cfg = config_db(cases_dir)
    flat = sonic_keys.config_settings(cfg)
    assert flat["port/Ethernet0/mtu"] == "9100" and flat["port/Ethernet0/pfc_enable"] == "3,4"
    assert flat["port/Ethernet8/dscp_to_tc_map"] == "AZURE" and flat["qos/dscp_to_tc/AZURE/26"] == "3"
    assert flat["port/Ethernet0/queue/3/wred_profile"] == "AZURE_LOSSLESS"
    assert flat["wred/AZURE_LOSSLESS/green_min_threshold"] == "1048576"
    assert flat["PFC_WD/GLOBAL/POLL_INTERVAL"] == "200"
    assert not [k for k in flat if "pg_lossless_" in k or k.startswith("BUFFER_PG/Ethernet0|3-4")]
    assert "BUFFER_PG/Ethernet0|0/profile" in flat  # a lossy PG is not generated
    bumped = json.loads(json.dumps(cfg))
    bumped["BUFFER_PG"]["Ethernet0|3-4"]["profile"] = "pg_lossless_100000_5m_profile"
    assert sonic_keys.digest(bumped) == sonic_keys.digest(cfg)  # buffermgrd's writes are no new revision
    bumped["PORT"]["Ethernet0"]["mtu"] = "9216"
    assert sonic_keys.digest(bumped) != sonic_keys.digest(cfg)
    state = roce_state(cfg)
    assert state.dscp_to_switch_priority[26] == 3 and state.pfc_priority is None  # "3,4": two priorities


def test_interfaces_status_parses_with_spaces_in_type(cases_dir: Path) -> None:
    out = text(cases_dir, "sonic__show_interfaces_status.txt").split("admin@rdma-leaf03:~$ show interfaces status Ethernet16")[0]
    rows = interfaces_status(out.split("\n", 1)[1])
    assert [r["Interface"] for r in rows][-1] == "Ethernet512" and len(rows) == 6
    assert rows[2]["MTU"] == "1500" and rows[0]["Type"] == "QSFP-DD Double Density 8X Pluggable Transceiver"
    assert rows[3]["Oper"] == "down" and rows[4]["Admin"] == "down" and rows[5]["FEC"] == "N/A"
    with pytest.raises(ParseError):
        interfaces_status("Ethernet0  9100\n")


def test_apply_patch_change_lines_are_the_diff(cases_dir: Path) -> None:
    out = text(cases_dir, "sonic__apply_patch_roce_success.txt")
    ops = sonic_keys.ops_of_output(out)
    assert [o["path"] for o in ops] == ["/WRED_PROFILE/AZURE_LOSSLESS/green_min_threshold", "/PORT/Ethernet16/mtu",
                                        "/PORT_QOS_MAP/Ethernet16/pfc_enable"]
    running = {"PORT": {"Ethernet16": {"mtu": "1500"}}, "PORT_QOS_MAP": {"Ethernet16": {"dscp_to_tc_map": "AZURE"}},
               "WRED_PROFILE": {"AZURE_LOSSLESS": {"green_min_threshold": "2097152"}}}
    got = SonicDriver.diff_changes(out, json.dumps(running))
    assert got == {"port/Ethernet16/mtu": ("1500", "9100"), "port/Ethernet16/pfc_enable": (None, "3,4"),
                   "wred/AZURE_LOSSLESS/green_min_threshold": ("2097152", "1048576")}
    rollback = text(cases_dir, "sonic__checkpoint_list_rollback_delete.txt")
    assert [o["op"] for o in sonic_keys.ops_of_output(rollback)] == ["replace", "remove", "replace"]
    assert SonicDriver.diff_changes("Patch Applier: The localhost patch was converted into 0 changes.\n", "{}") == {}


def test_the_template_renders_a_patch_that_reads_back_as_the_same_keys() -> None:
    rendered = SonicDriver.render_config(switch())
    ops = json.loads(rendered)
    entries = [o for o in ops if not isinstance(o["value"], str)]  # the CNP queue's strict scheduler, added whole
    assert entries == [{"op": "add", "path": "/SCHEDULER/fabtune_cnp", "value": {"type": "STRICT"}}]
    assert {o["op"] for o in ops} == {"add"}
    flat = SonicDriver.config_settings(rendered)
    assert flat["SCHEDULER/fabtune_cnp/type"] == "STRICT" and flat["port/Ethernet8/queue/6/scheduler"] == "fabtune_cnp"
    assert flat["port/Ethernet0/mtu"] == "9216" and flat["port/Ethernet8/pfc_enable"] == "3"
    assert flat["qos/dscp_to_tc/AZURE/26"] == "3" and flat["qos/dscp_to_tc/AZURE/48"] == "6"
    assert flat["wred/AZURE_LOSSLESS/green_max_threshold"] == "1500000" and flat["port/Ethernet0/dscp_to_tc_map"] == "AZURE"
    cfg = {"PORT": {p: {"mtu": "9100"} for p in ("Ethernet0", "Ethernet8")},
           "PORT_QOS_MAP": {p: {"pfc_enable": "3,4"} for p in ("Ethernet0", "Ethernet8")},
           "QUEUE": {f"{p}|{q}": {} for p in ("Ethernet0", "Ethernet8") for q in (3, 6)},
           "DSCP_TO_TC_MAP": {"AZURE": {"26": "1"}}, "WRED_PROFILE": {"AZURE_LOSSLESS": {}}, "SCHEDULER": {}}
    held = sonic_keys.config_settings(sonic_keys.patched(cfg, ops))
    assert {k: held.get(k) for k in flat} == flat  # every candidate key held once applied


def test_what_sonic_cannot_say_is_refused_before_rendering() -> None:
    with pytest.raises(InputError, match="roce.trust"):
        SonicDriver.render_config(switch(trust="pcp"))
    with pytest.raises(InputError, match="roce.lossless_tc"):
        SonicDriver.render_config(switch(lossless_tc=4))
    with pytest.raises(InputError, match="roce.mode"):
        SonicDriver.render_config(switch(mode="lossy"))
    with pytest.raises(ValueError, match="MTU 9300 is outside 68..9216, the port MTUs platform sonic takes"):
        SwitchSpec(platform="sonic", ports=["Ethernet0"], port_mtu=9300)


@pytest.mark.parametrize("path", ["/BUFFER_POOL/ingress_lossless_pool/size", "/BUFFER_PROFILE/egress_lossy_profile/size",
                                  "/PORT/Ethernet0/speed", "/PORT/Ethernet0/admin_status", "/CABLE_LENGTH/AZURE/Ethernet0",
                                  "/BUFFER_PG/Ethernet0|3-4/profile", "/PFC_WD/Ethernet0/action"])
def test_gcu_limits_are_refused_before_a_push(path: str) -> None:
    ops = [{"op": "replace", "path": path, "value": "1"}]
    with pytest.raises(CandidateError, match=path.replace("|", r"\|")):
        sonic_keys.check_limits(ops)
    drv = SonicDriver("127.0.0.1", username="x")
    with pytest.raises(CandidateError):
        drv.load_candidate(json.dumps(ops))  # refused before any session is needed
    sonic_keys.check_limits([{"op": "replace", "path": "/BUFFER_PROFILE/egress_lossy_profile/dynamic_th", "value": "1"}])


def test_a_candidate_is_a_patch_of_string_fields() -> None:
    for bad in ('{"PORT": 1}', '[{"op": "add", "path": "/PORT/Ethernet0/mtu", "value": 9100}]',
                '[{"op": "move", "path": "/PORT/Ethernet0/mtu"}]', '[{"op": "add", "path": "/PORT", "value": "x"}]'):
        with pytest.raises(ParseError):
            sonic_keys.parse_ops(bad)
    with pytest.raises(CandidateError, match="removes"):
        SonicDriver.config_settings('[{"op": "remove", "path": "/PORT/Ethernet0/mtu"}]')


def test_a_whole_entry_is_added_and_removed_as_gcu_prints_it() -> None:
    """GCU prints a new entry as one add of ``/TABLE/key`` with its fields (sonic-utilities
    tests/generic_config_updater/files/patch_sorter_test_success.json, ``ADD_TABLE__SUCCESS``)."""
    line = ('Patch Applier:   * [{"op": "add", "path": "/SCHEDULER/fabtune_cnp", "value": {"type": "STRICT"}}]\n'
            'Patch Applier:   * [{"op": "replace", "path": "/QUEUE/Ethernet0|6/scheduler", "value": "fabtune_cnp"}]\n')
    running = {"SCHEDULER": {"scheduler.0": {"type": "DWRR", "weight": "14"}}, "QUEUE": {"Ethernet0|6": {"scheduler": "scheduler.0"}}}
    assert SonicDriver.diff_changes(line, json.dumps(running)) == {
        "SCHEDULER/fabtune_cnp/type": (None, "STRICT"), "port/Ethernet0/queue/6/scheduler": ("scheduler.0", "fabtune_cnp")}
    gone = sonic_keys.patched(running, [{"op": "remove", "path": "/SCHEDULER/scheduler.0"}])
    assert gone["SCHEDULER"] == {}
    for bad in ('[{"op": "add", "path": "/SCHEDULER/x", "value": {"weight": 14}}]',
                '[{"op": "replace", "path": "/SCHEDULER/x", "value": {"type": "STRICT"}}]',
                '[{"op": "add", "path": "/SCHEDULER/x", "value": "STRICT"}]'):
        with pytest.raises(ParseError):
            sonic_keys.parse_ops(bad)
    for missing in ({}, running):  # no table for the entry / no entry to remove
        with pytest.raises(CandidateError, match="not there"):
            sonic_keys.patched(missing, [{"op": "remove", "path": "/SCHEDULER/fabtune_cnp"}] if missing else
                               [{"op": "add", "path": "/SCHEDULER/fabtune_cnp", "value": {"type": "STRICT"}}])
    for path in ("/BUFFER_PROFILE/new_profile", "/PORT/Ethernet16"):  # a whole entry of a guarded table
        with pytest.raises(CandidateError, match=path):
            sonic_keys.check_limits([{"op": "add", "path": path, "value": {"size": "0"}}])


def test_change_tags() -> None:
    assert SonicDriver.change_tags("port/Ethernet0/mtu", None, "9216") == ("mtu_up",)
    assert SonicDriver.change_tags("port/Ethernet0/pfc_enable", None, "3") == ("lossless_on",)
    assert SonicDriver.change_tags("qos/dscp_to_tc/AZURE/26", "1", "3") == ()


class _Conn:
    """netmiko's side of a session, served by the lab's SONiC terminal without SSH (each line of a
    command typed in turn, as bash reads a heredoc)."""

    def __init__(self, term, prompt: str = "fabtune@leaf01:~$") -> None:
        self.term, self.base_prompt, self._prompt = term, prompt[:-1], prompt

    def find_prompt(self) -> str:
        return self._prompt

    def send_command(self, command: str, **kw) -> str:
        return "".join(self.term.run(line) for line in command.split("\n")).rstrip("\n")

    def disconnect(self) -> None:
        pass


def _driver(sw, prompt: str = "fabtune@leaf01:~$") -> SonicDriver:
    from tuning.switch import nvue_session

    drv = SonicDriver("127.0.0.1", username="fabtune", name="leaf01")
    drv._ses, drv._conn = nvue_session, _Conn(sw.terminal(), prompt)
    return drv


def test_an_apply_patch_failure_is_no_commit_and_leaves_no_timer_nor_lock() -> None:
    from tuning.lab.fabric import Switch
    from tuning.lab.nvue_faults import Faults
    from tuning.lab.sonic import SonicSwitch

    sw = SonicSwitch(Switch("leaf01", 1, "leaf", ["Ethernet0", "Ethernet8"]))
    sw.faults = lambda: Faults(apply_fails=True)
    drv = _driver(sw)
    start = drv.current_revision()
    drv.load_candidate(json.dumps([{"op": "add", "path": "/PORT/Ethernet0/mtu", "value": "9000"}]))
    assert drv.compare() and drv.next_revision() != start  # the dry run is not refused
    with pytest.raises(CommitError, match=r'Error: Failed to apply patch on the following scopes:\n- localhost: Given '
                                          r'patch will produce invalid config\. Error: Data Loading Failed\nValue "9000"'):
        drv.commit(confirm_within_s=60)
    assert drv.current_revision() == start and not sw.timers and not sw.dirs  # disarmed, unlocked
    assert "fabtune-" + start in sw.checkpoints


def test_a_commit_is_read_back_and_confirmed_and_enterprise_sonic_is_refused() -> None:
    from tuning.lab.fabric import Switch
    from tuning.lab.sonic import STARTUP_FILE, SonicSwitch

    sw = SonicSwitch(Switch("leaf01", 1, "leaf", ["Ethernet0", "Ethernet8"]))
    drv = _driver(sw)
    drv.load_candidate(SonicDriver.render_config(switch()))
    rev = drv.commit(confirm_within_s=60)
    assert drv.has_pending_commit() and drv.pending_commit() == (rev, drv._tx["before"])
    drv.confirm(rev)
    assert not sw.timers and not sw.dirs and json.loads(sw.files[STARTUP_FILE]) == sw.config
    drv.rollback_to(drv._tx["before"])
    assert drv.current_revision() == drv._tx["before"]
    klish = _driver(sw, "sonic#")
    with pytest.raises(ConnectError, match="Enterprise SONiC's klish CLI is not driven") as err:
        klish._after_open()
    assert "\n" not in str(err.value)
