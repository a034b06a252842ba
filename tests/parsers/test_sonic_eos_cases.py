"""The SONiC and Arista EOS outputs fabtune acts on (issue 21), read from shared/cases/cli (INDEX-switch.md
says what each must give) and shared/cases (INDEX.md); variants (older layouts, dry run, EOS 4.32+)
are derived from those files, so every value asserted here is one the case file holds."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tuning.errors import ParseError
from tuning.parsers import parse

#: case file (under shared/cases) -> the tool that reads it
FILES = {
    "cli/sonic__show_interfaces_status.txt": "sonic-show-interfaces-status",
    "cli/sonic__show_pfc_counters.txt": "sonic-show-pfc-counters",
    "sonic_show_pfc_counters__cached_time_commas_pfc3_tx.txt": "sonic-show-pfc-counters",
    "cli/sonic__show_queue_counters_namespace_header_raw.txt": "sonic-show-queue-counters",
    "sonic_show_queue_counters__lossless_uc3_drops.txt": "sonic-show-queue-counters",
    "cli/sonic__ecnconfig_l_show_ecn_q.txt": "sonic-ecnconfig",
    "cli/sonic__config_db_json_roce_qos_tables.txt": "sonic-config-db",
    "cli/sonic__apply_patch_roce_success.txt": "sonic-apply-patch",
    "cli/sonic__apply_patch_failure_yang_invalid_value.txt": "sonic-apply-patch",
    "cli/sonic__checkpoint_list_rollback_delete.txt": "sonic-checkpoints",
    "cli/eos__show_interfaces_json_mtu.txt": "eos-show-interfaces-json",
    "cli/eos__show_configuration_sessions_detail_json_pre_4_32.txt": "eos-show-sessions-json",
}
#: other outputs none of these tools may read
OTHERS = ["cli/sonic__ssh_login_banner_prompt.txt", "cli/eos__running_config_roce_lines.txt",
          "cli/eos__errors_invalid_incomplete_ambiguous.txt", "cli/nvue_show_interface_qos_roce_status__lossless.txt",
          "cli/mlnx_qos__set_trust_dscp_pfc3_prints_full_status.txt", "nv_show_interface__summary_with_continuation_rows.txt"]
TOOLS = sorted(set(FILES.values()))


def _text(cases_dir: Path, name: str) -> str:
    return (cases_dir / name).read_text()


def _doc(cases_dir: Path, name: str) -> dict:
    return parse(FILES[name], _text(cases_dir, name)).model_dump(mode="json")


# ---------------------------------------------------------------- counters


def test_pfc_counters_commas_and_na(cases_dir):
    r = parse("sonic-show-pfc-counters", _text(cases_dir, "cli/sonic__show_pfc_counters.txt"))
    assert r.rx["Ethernet0"][3] == 1284551 and r.rx["Ethernet8"][3] == 903417
    assert r.tx["Ethernet0"][3] == 73019 and r.tx["Ethernet8"][3] == 12
    assert r.rx["Ethernet24"] == [None] * 8 and r.tx["Ethernet24"] == [None] * 8  # N/A: unknown, never 0
    assert list(r.rx) == ["Ethernet0", "Ethernet8", "Ethernet16", "Ethernet24"] and r.cached_time is None
    cached = parse("sonic-show-pfc-counters", _text(cases_dir, "sonic_show_pfc_counters__cached_time_commas_pfc3_tx.txt"))
    assert (cached.tx["Ethernet6"][3], cached.tx["Ethernet4"][3], cached.rx["Ethernet6"][3]) == (15437, 2019, 1234)
    assert cached.cached_time == "2024-03-11 09:41:07.117256"
    assert parse("sonic-pfc-counters", _text(cases_dir, "cli/sonic__show_pfc_counters.txt")).rx == r.rx  # the older name


def test_queue_counters_namespace_header_raw_integers(cases_dir):
    r = parse("sonic-show-queue-counters", _text(cases_dir, "cli/sonic__show_queue_counters_namespace_header_raw.txt"))
    uc3 = next(q for q in r.queues if q.queue == "UC3")
    assert (uc3.counters["Counter/pkts"], uc3.counters["Counter/bytes"]) == (884612093, 8060183452116)
    assert [q.queue for q in r.queues] == [f"UC{i}" for i in range(10)] + [f"MC{i}" for i in range(10, 20)]
    assert (r.queues[10].kind, r.queues[10].index, r.queues[10].counters["Counter/pkts"]) == ("MC", 10, 311)
    assert r.namespace == "" and r.cached_time is None and r.findings == []


def test_queue_counters_legacy_layout_with_cache_line(cases_dir):
    """Before sonic-utilities#3554: no ``For namespace :`` header; after a clear, the cache line."""
    text = _text(cases_dir, "sonic_show_queue_counters__lossless_uc3_drops.txt")
    legacy = text.replace("For namespace :\n", "Last cached time was 2024-03-11 09:41:07.117256\n")
    new, old = parse("sonic-show-queue-counters", text), parse("sonic-show-queue-counters", legacy)
    assert (old.namespace, old.cached_time, new.namespace) == (None, "2024-03-11 09:41:07.117256", "")
    assert old.queues == new.queues and old.queues[3].counters["Counter/bytes"] == 371823101223
    assert [(f.code, f.subject) for f in old.findings] == [("lossless_drops", "Ethernet0 UC3")]


# ---------------------------------------------------------------- show interfaces status


def test_interfaces_status_eleven_columns_and_mtu_mismatch(cases_dir):
    r = parse("sonic-show-interfaces-status", _text(cases_dir, "cli/sonic__show_interfaces_status.txt"))
    ports = {p.interface: p for p in r.interfaces}
    assert list(ports) == ["Ethernet0", "Ethernet8", "Ethernet16", "Ethernet24", "Ethernet32", "Ethernet512"]
    assert len(r.columns) == 11 and r.columns[-1] == "Asym PFC"
    assert ports["Ethernet16"].mtu == 1500 and ports["Ethernet0"].mtu == 9100
    assert ports["Ethernet0"].type == "QSFP-DD Double Density 8X Pluggable Transceiver"
    assert ports["Ethernet0"].lanes == "1,2,3,4,5,6,7,8" and ports["Ethernet512"].lanes == "513"
    assert (ports["Ethernet32"].type, ports["Ethernet512"].fec, ports["Ethernet512"].speed) == (None, None, "10G")
    assert (ports["Ethernet24"].oper, ports["Ethernet24"].admin, ports["Ethernet0"].vlan) == ("down", "up", "routed")
    assert [(f.code, f.subject) for f in r.findings] == [("mtu_mismatch", "Ethernet16")]
    assert "1500" in r.findings[0].message and "9100" in r.findings[0].message


def test_interfaces_status_older_nine_column_layout(cases_dir):
    """Older images print no FEC and Vlan: the same table with those columns dropped, right-aligned."""
    lines = [ln for ln in _text(cases_dir, "cli/sonic__show_interfaces_status.txt").splitlines()
             if not ln.startswith(("admin@", "---"))]
    rows = [[c for i, c in enumerate(re.split(r" {2,}", ln.strip())) if i not in (4, 6)] for ln in lines]
    widths = [max(len(r[i]) for r in rows) for i in range(9)]
    text = "\n".join(["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows[:1]]
                     + ["  ".join("-" * w for w in widths)]
                     + ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows[1:]])
    r = parse("sonic-show-interfaces-status", text)
    assert len(r.columns) == 9 and {p.fec for p in r.interfaces} == {None} and {p.vlan for p in r.interfaces} == {None}
    assert {p.interface: p.mtu for p in r.interfaces}["Ethernet16"] == 1500
    assert [f.subject for f in r.findings] == ["Ethernet16"]


# ---------------------------------------------------------------- ecnconfig


def test_ecnconfig_profiles_queue_status_and_error(cases_dir):
    r = parse("sonic-ecnconfig", _text(cases_dir, "cli/sonic__ecnconfig_l_show_ecn_q.txt"))
    lossless, lossy = r.profiles["AZURE_LOSSLESS"], r.profiles["AZURE_LOSSY"]
    assert (lossless.green_min_threshold, lossless.green_max_threshold, lossless.ecn) == (1048576, 2097152, "ecn_all")
    assert (lossless.green_drop_probability, lossless.wred_green_enable) == (5, True)
    assert (lossy.green_min_threshold, lossy.red_max_threshold, lossy.yellow_drop_probability, lossy.ecn) == (4095, 32760, 2, None)
    assert [(q.queue, q.on, q.ports) for q in r.queues] == [
        (3, True, None), (3, True, ["Ethernet0", "Ethernet8", "Ethernet16"]), (4, True, ["Ethernet0", "Ethernet8", "Ethernet16"])]
    [f] = r.findings
    assert (f.code, f.severity) == ("ecn_config_error", "error") and "Invalid gmin (2097152)" in f.message
    assert parse("sonic-show-ecn", _text(cases_dir, "cli/sonic__ecnconfig_l_show_ecn_q.txt")).model_dump() == r.model_dump()


def test_ecnconfig_field_order_is_free(cases_dir):
    text = _text(cases_dir, "cli/sonic__ecnconfig_l_show_ecn_q.txt")
    block = text.split("Profile: AZURE_LOSSLESS\n", 1)[1].split("\n\n", 1)[0].splitlines()
    rows = block[1:-1]
    random.Random(21).shuffle(rows)
    shuffled = text.replace("\n".join(block), "\n".join([block[0], *rows, block[-1]]))
    assert shuffled != text
    assert parse("sonic-ecnconfig", shuffled).profiles == parse("sonic-ecnconfig", text).profiles


def test_ecnconfig_unclosed_profile_raises(cases_dir):
    text = _text(cases_dir, "cli/sonic__ecnconfig_l_show_ecn_q.txt")
    with pytest.raises(ParseError):
        parse("sonic-ecnconfig", text.split("Profile: AZURE_LOSSY")[0] + "Profile: AZURE_LOSSY\n-----  -----\nred_max_threshold  32760\n")


# ---------------------------------------------------------------- CONFIG_DB


def _db(cases_dir: Path) -> dict:
    return json.loads(_text(cases_dir, "cli/sonic__config_db_json_roce_qos_tables.txt"))


def test_config_db_roce_qos_per_port(cases_dir):
    r = parse("sonic-config-db", _text(cases_dir, "cli/sonic__config_db_json_roce_qos_tables.txt"))
    assert [p.port for p in r.ports] == ["Ethernet0", "Ethernet8"]
    p = r.ports[0]
    assert (p.mtu, p.pfc_enable, p.dscp_to_tc_map) == (9100, [3, 4], "AZURE")
    assert (p.dscp_to_tc[26], p.dscp_to_tc[48], p.dscp_to_tc[8], len(p.dscp_to_tc)) == (3, 6, 0, 64)
    assert p.queue_wred == {3: "AZURE_LOSSLESS", 4: "AZURE_LOSSLESS"}
    assert p.buffer_pg == {"0": "ingress_lossy_profile", "3-4": "pg_lossless_400000_5m_profile"} and p.lossless_pgs == [3, 4]
    assert p.pfc_wd == {"action": "drop", "detection_time": "200", "restoration_time": "200"}
    assert r.pfc_wd_poll_interval == 200 and r.metadata["hostname"] == "rdma-leaf03"
    assert (r.wred_profiles["AZURE_LOSSLESS"].green_min_threshold, r.wred_profiles["AZURE_LOSSLESS"].green_max_threshold) == (1048576, 2097152)
    pg = r.buffer_profiles["pg_lossless_400000_5m_profile"]
    assert (pg.xon, pg.xoff, pg.size, pg.lossless) == (19456, 23552, 19456, True)
    assert r.findings == []


def test_config_db_old_style_references_resolve_the_same(cases_dir):
    db = _db(cases_dir)
    for fields in db["PORT_QOS_MAP"].values():
        fields["dscp_to_tc_map"] = "[DSCP_TO_TC_MAP|AZURE]"
    for fields in db["QUEUE"].values():
        if "wred_profile" in fields:
            fields["wred_profile"] = f"[WRED_PROFILE|{fields['wred_profile']}]"
    for fields in db["BUFFER_PG"].values():
        fields["profile"] = f"[BUFFER_PROFILE|{fields['profile']}]"
    old = parse("sonic-config-db", json.dumps(db, indent=4))
    new = parse("sonic-config-db", _text(cases_dir, "cli/sonic__config_db_json_roce_qos_tables.txt"))
    assert old.ports == new.ports and old.findings == []


def test_config_db_effective_dscp_map_per_port(cases_dir):
    """A port without its own map uses PORT_QOS_MAP|global's; a port's own map wins."""
    db = _db(cases_dir)
    db["DSCP_TO_TC_MAP"]["ROCE"] = {**db["DSCP_TO_TC_MAP"]["AZURE"], "26": "4"}
    del db["PORT_QOS_MAP"]["Ethernet0"]["dscp_to_tc_map"]
    db["PORT_QOS_MAP"]["global"] = {"dscp_to_tc_map": "AZURE"}
    db["PORT_QOS_MAP"]["Ethernet8"]["dscp_to_tc_map"] = "ROCE"
    r = parse("sonic-config-db", json.dumps(db))
    assert [(p.port, p.dscp_to_tc_map, p.dscp_to_tc[26]) for p in r.ports] == [("Ethernet0", "AZURE", 3), ("Ethernet8", "ROCE", 4)]


def test_config_db_dangling_reference_and_pfc_without_lossless_pg(cases_dir):
    db = _db(cases_dir)
    db["PORT_QOS_MAP"]["Ethernet8"]["dscp_to_tc_map"] = "MISSING"
    db["PORT_QOS_MAP"]["Ethernet0"]["pfc_enable"] = "3,4,6"
    r = parse("sonic-config-db", json.dumps(db))
    assert sorted((f.code, f.subject) for f in r.findings) == [
        ("dangling_reference", "Ethernet8"), ("pfc_without_lossless_pg", "Ethernet0")]
    assert r.ports[1].dscp_to_tc == {}


# ---------------------------------------------------------------- apply-patch


def test_apply_patch_success(cases_dir):
    text = _text(cases_dir, "cli/sonic__apply_patch_roce_success.txt")
    r = parse("sonic-apply-patch", text)
    assert (r.success, r.applied, r.dry_run, r.config_changed, r.exit_code) == (True, True, False, True, 0)
    given = json.loads(text.split("$ cat roce-qos.json-patch\n", 1)[1].split("admin@", 1)[0])
    assert [op.model_dump(by_alias=True, exclude_none=True) for op in r.patch] == given
    assert r.change_count == 3 and [c[0].path for c in r.changes] == [
        "/WRED_PROFILE/AZURE_LOSSLESS/green_min_threshold", "/PORT/Ethernet16/mtu", "/PORT_QOS_MAP/Ethernet16/pfc_enable"]
    assert (r.changes[1][0].op, r.changes[1][0].value) == ("replace", "9100")
    assert r.findings == [] and r.failure is None and r.reason is None


def test_apply_patch_failure_reason_once_config_unchanged_exit_2(cases_dir):
    r = parse("sonic-apply-patch", _text(cases_dir, "cli/sonic__apply_patch_failure_yang_invalid_value.txt"))
    assert (r.success, r.applied, r.config_changed, r.exit_code) == (False, False, False, 2)
    assert r.reason.count("Data Loading Failed") == 1  # printed twice, kept once
    assert 'Value "9300" does not satisfy the constraint "1..9216" (range, length, or pattern).' in r.reason
    assert r.stage == "localhost: sorting patch updates." and r.changes == [] and r.patch[0].value == "9300"
    assert r.failure.kind == "invalid_config"
    assert [(f.code, f.severity) for f in r.findings] == [("apply_patch_failed", "error")]
    assert "CONFIG_DB unchanged" in r.findings[0].message


def test_apply_patch_dry_run_is_not_applied(cases_dir):
    text = _text(cases_dir, "cli/sonic__apply_patch_roce_success.txt")
    r = parse("sonic-apply-patch", text.replace("config apply-patch roce-qos", "config apply-patch --dry-run roce-qos"))
    assert (r.success, r.dry_run, r.applied, r.config_changed) == (True, True, False, False)
    assert [(f.code, f.severity) for f in r.findings] == [("dry_run", "info")]
    # a bare output (no command line) tells a dry run by DryRunConfigWrapper's lines
    body = text.split("roce-qos.json-patch\nPatch Applier: localhost: Patch application", 1)[1].split("\nadmin@")[0]
    bare = "Patch Applier: localhost: Patch application" + re.sub(
        r"Patch Applier:   \* (\[.*\])", r"Patch Applier:   * \1\n** DryRun: Would apply \1", body)
    b = parse("sonic-apply-patch", bare)
    assert (b.success, b.dry_run, b.applied, b.command, b.exit_code) == (True, True, False, None, 0)


def test_apply_patch_success_only_when_last_line(cases_dir):
    text = _text(cases_dir, "cli/sonic__apply_patch_roce_success.txt")
    with pytest.raises(ParseError):  # cut before the verdict: neither success nor a reason
        parse("sonic-apply-patch", text.replace("Patch applied successfully.\n", ""))


def test_apply_patch_failure_after_changes_began_may_be_partial(cases_dir):
    text = _text(cases_dir, "cli/sonic__apply_patch_roce_success.txt")
    head = text.split("Patch Applier: localhost: verifying")[0]
    r = parse("sonic-apply-patch", head + "Failed to apply patch due to: boom\nUsage: config apply-patch [OPTIONS]"
              " PATCH_FILE_PATH\nTry \"config apply-patch -h\" for help.\n\nError: boom\n")
    assert (r.success, r.config_changed, r.reason, r.exit_code, len(r.changes)) == (False, None, "boom", 2, 3)
    assert [f.code for f in r.findings] == ["apply_patch_failed", "apply_patch_partial"]


# ---------------------------------------------------------------- checkpoints


def test_checkpoints_list_rollback_missing_delete(cases_dir):
    r = parse("sonic-checkpoints", _text(cases_dir, "cli/sonic__checkpoint_list_rollback_delete.txt"))
    assert r.checkpoints == ["fabtune-pre-roce", "nightly-0310"]
    assert r.times == {"fabtune-pre-roce": "2025-03-11T09:20:41.118264+00:00", "nightly-0310": "2025-03-10T02:00:07.402981+00:00"}
    assert [(o.action, o.name, o.ok) for o in r.operations] == [
        ("checkpoint", "fabtune-pre-roce", True), ("rollback", "fabtune-pre-roce", True),
        ("rollback", "no-such-cp", False), ("delete", "nightly-0310", True)]
    assert r.operations[0].path == "/etc/sonic/checkpoints/fabtune-pre-roce.cp.json"
    assert [(c[0].op, c[0].path) for c in r.operations[1].changes] == [
        ("replace", "/WRED_PROFILE/AZURE_LOSSLESS/green_min_threshold"), ("remove", "/PORT_QOS_MAP/Ethernet16/pfc_enable"),
        ("replace", "/PORT/Ethernet16/mtu")]
    assert r.operations[2].error == "Checkpoint 'no-such-cp' does not exist"
    assert [(f.code, f.severity, f.subject) for f in r.findings] == [("checkpoint_missing", "error", "no-such-cp")]


# ---------------------------------------------------------------- EOS


def test_eos_interfaces_json_mtu(cases_dir):
    r = parse("eos-show-interfaces-json", _text(cases_dir, "cli/eos__show_interfaces_json_mtu.txt"))
    [i] = r.interfaces
    assert (i.name, i.mtu, i.l2_mru, i.l3_mtu_configured, i.forwarding_model) == ("Ethernet1", 9214, 0, True, "routed")


def test_eos_sessions_pre_4_32(cases_dir):
    r = parse("eos-show-sessions-json", _text(cases_dir, "cli/eos__show_configuration_sessions_detail_json_pre_4_32.txt"))
    assert (r.layout, r.pending_commit, r.commit_by) == ("pre-4.32", "fabtune-roce", 1741685762.8256721)
    assert (r.sessions["fabtune-roce"].state, r.max_open_sessions, r.max_saved_sessions, r.merge_on_commit) == (
        "pendingCommitTimer", 5, 1, False)
    assert [(f.code, f.subject) for f in r.findings] == [("commit_timer_pending", "fabtune-roce")]


def _eos_432(cases_dir: Path, timer: bool) -> str:
    """The case's sessions in the 4.32+ layout of napalm-automation/napalm#2166 (fixed by #2281)."""
    text = _text(cases_dir, "cli/eos__show_configuration_sessions_detail_json_pre_4_32.txt")
    doc = json.loads(text[text.index("{"): text.rindex("}") + 1])
    session = doc["sessions"]["fabtune-roce"]
    expire = session.pop("commitBy")
    session["state"] = "committed"
    if timer:
        doc.update(commitTimerSessionName="fabtune-roce", commitTimerExpireTime=expire)
    return "leaf1#show configuration sessions detail | json\n" + json.dumps(doc, indent=4) + "\nleaf1#\n"


def test_eos_sessions_4_32_timer_is_top_level(cases_dir):
    r = parse("eos-show-sessions-json", _eos_432(cases_dir, timer=True))
    assert (r.layout, r.pending_commit, r.commit_by, r.sessions["fabtune-roce"].state) == (
        "4.32+", "fabtune-roce", 1741685762.8256721, "committed")
    assert [f.code for f in r.findings] == ["commit_timer_pending"]
    done = parse("eos-show-sessions-json", _eos_432(cases_dir, timer=False))
    assert (done.pending_commit, done.commit_by, done.findings) == (None, None, [])


def test_eos_sessions_full(cases_dir):
    text = _text(cases_dir, "cli/eos__show_configuration_sessions_detail_json_pre_4_32.txt")
    doc = json.loads(text[text.index("{"): text.rindex("}") + 1])
    doc["sessions"] = {f"sess-{i}": {"state": "pending", "instances": {}} for i in range(doc["maxOpenSessions"])}
    r = parse("eos-show-sessions-json", json.dumps(doc))
    assert (r.pending_commit, len(r.open_sessions)) == (None, 5)
    assert [(f.code, f.severity) for f in r.findings] == [("sessions_full", "error")]


# ---------------------------------------------------------------- every file, every tool


@pytest.mark.parametrize("name", sorted(FILES))
def test_noise_does_not_change_the_result(cases_dir, name):
    text = _text(cases_dir, name)
    noisy = "\r\n".join(f"\x1b[1m{ln}\x1b[0m  " if ln.strip() else ln for ln in text.split("\n"))
    assert parse(FILES[name], noisy) == parse(FILES[name], text)


@pytest.mark.parametrize("tool", TOOLS)
def test_other_outputs_raise(cases_dir, tool):
    for name in [*(n for n, t in FILES.items() if t != tool), *OTHERS]:
        with pytest.raises(ParseError):
            parse(tool, _text(cases_dir, name))
            pytest.fail(f"{tool} read {name}")


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("bad", ["", " \n", "\x00binary"], ids=["empty", "blank", "nul"])
def test_empty_or_binary_raises(tool, bad):
    with pytest.raises(ParseError):
        parse(tool, bad)


@pytest.mark.parametrize("name", [n for n in sorted(FILES) if "json" in n or "config_db" in n])
def test_cut_json_raises(cases_dir, name):
    lines = _text(cases_dir, name).splitlines()
    with pytest.raises(ParseError):
        parse(FILES[name], "\n".join(lines[: len(lines) * 2 // 3]))


def test_cli_parse_pfc_counters_table_and_json(cases_dir):
    path = str(cases_dir / "cli/sonic__show_pfc_counters.txt")
    cmd = [sys.executable, "-m", "tuning", "parse", "sonic-show-pfc-counters", path, "--format"]
    js = subprocess.run([*cmd, "json"], capture_output=True, text=True, timeout=60)
    assert js.returncode == 0, js.stderr
    doc = json.loads(js.stdout)
    assert (doc["rx"]["Ethernet0"][3], doc["tx"]["Ethernet0"][3], doc["rx"]["Ethernet24"][3]) == (1284551, 73019, None)
    table = subprocess.run([*cmd, "table"], capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "400"})
    assert table.returncode == 0, table.stderr
    assert "1284551" in table.stdout and "73019" in table.stdout and "sonic-pfc-counters" in table.stdout
