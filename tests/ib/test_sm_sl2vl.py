"""The SL-to-VL table of the QoS policy (issue 22), pure: ``smpquery sl2vl``'s real output parsed (captured
from the real tool over the IB lab, ``tests/ib/capture_sl2vl_cases.py``; the layout is infiniband-diags'
``smpquery.c`` ``sl2vl_table`` / libibmad ``mad_dump_sltovl``), the policy's ``ca_sl2vl`` planned as
opensm.conf's ``qos_ca_sl2vl`` line, written beside a priority change in the same file, and refused when
OpenSM could not take it. The push and its read back on the fabric: ``test_sm_sl2vl_lab.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.ib.test_sm_model import GOOD_SNAPSHOT
from tuning.errors import ParseError, RollbackError
from tuning.model.ib_sm import SmSpec
from tuning.node.base import Change
from tuning.parsers.ib_sm import parse_sl2vl
from tuning.targets import sm_partitions as sp
from tuning.targets import sm_qos
from tuning.targets.sm_snapshot import snapshot_of

CASES = Path(__file__).parent / "cases" / "sl2vl"
SET = [0, 1, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 3, 2, 1, 15]
CONF = "# OpenSM's template\nsm_priority 0\nqos TRUE\nqos_ca_sl2vl (null)\nqos_swe_sl2vl (null)\n"


def test_smpquery_sl2vl_of_a_ca_and_of_a_switch_parse_to_their_rows():
    ca = parse_sl2vl((CASES / "smpquery_sl2vl__ca_qos_ca_sl2vl_set.txt").read_text())
    assert (ca.port, ca.rows) == ("Lid 2", {(0, 0): SET})
    assert parse_sl2vl((CASES / "smpquery_sl2vl__ca_opensm_default.txt").read_text()).rows == {(0, 0): [*range(8)] * 2}
    assert parse_sl2vl((CASES / "smpquery_sl2vl__ca_qos_off_ibsim_table.txt").read_text()).rows == {
        (0, 0): [*range(15), 7]}
    leaf = parse_sl2vl((CASES / "smpquery_sl2vl__switch_leaf01_out_port_1.txt").read_text())
    assert leaf.port == "Lid 1" and sorted(leaf.rows) == [(i, 1) for i in range(41)]
    assert set(map(tuple, leaf.rows.values())) == {tuple(range(8)) * 2}


@pytest.mark.parametrize("edit, line", [
    (lambda t: t.replace("|15|\nports", "|\nports", 1), 2),                       # the SL header cut
    (lambda t: t.replace("| 1|15|", "| 1|16|"), 3),                               # VL 16 does not exist
    (lambda t: t.replace("| 2| 1|15|", "| 1|15|"), 3),                            # 15 VLs
    (lambda t: t.replace("# SL2VL table: Lid 2", "SL2VL table"), 1),
    (lambda t: t.rsplit("\n", 2)[0] + "\n", 2)])                                  # no row
def test_an_output_not_in_smpquerys_layout_is_refused_naming_the_line(edit, line):
    text = edit((CASES / "smpquery_sl2vl__ca_qos_ca_sl2vl_set.txt").read_text())
    with pytest.raises(ParseError) as e:
        parse_sl2vl(text)
    assert e.value.line_no == line


def spec(**qos) -> SmSpec:
    return SmSpec.model_validate({"opensm_conf_file": "/c.conf", "qos_policy": qos})


def test_the_policys_ca_sl2vl_is_planned_as_opensm_confs_qos_ca_sl2vl_line_and_written_beside_a_priority():
    s = spec(ca_sl2vl=SET)
    files = {"/c.conf": CONF, s.opensm_qos_policy_file: sm_qos.render(s)}
    [c] = sm_qos.plan("sm01", s, files, "sm")
    assert (c.key, c.before, c.after) == ("qos_ca_sl2vl", "(null)", "0,1,2,3,4,5,6,7,7,6,5,4,3,2,1,15")
    rec = {"paths": {"opensm_conf_file": "/c.conf"}, "files_before": {"/c.conf": CONF}}
    written = sp.files_after(rec, [Change("sm01", "sm", "sm_priority", "0", "5"), c])["/c.conf"]
    assert written == CONF.replace("sm_priority 0", "sm_priority 5").replace(
        "qos_ca_sl2vl (null)", "qos_ca_sl2vl 0,1,2,3,4,5,6,7,7,6,5,4,3,2,1,15")
    assert sm_qos.plan("sm01", s, {**files, "/c.conf": written}, "sm") == []  # as the policy says: nothing
    # no line at all: appended; no ca_sl2vl in the policy: the line is left alone
    assert sm_qos.set_conf_line("sm_priority 0\n", "qos_ca_sl2vl", "1,2") == "sm_priority 0\nqos_ca_sl2vl 1,2\n"
    assert sm_qos.plan("sm01", spec(), files, "sm") == []
    assert sm_qos.conf_value(None, "qos_ca_sl2vl") is None


@pytest.mark.parametrize("sl2vl, says", [([0] * 15, "at least 16 items"), ([0] * 17, "at most 16 items"),
                                         ([16] + [0] * 15, "less than or equal to 15")])
def test_a_table_opensm_could_not_take_is_refused_in_the_inventory(sl2vl, says):
    with pytest.raises(ValidationError, match=says):
        spec(ca_sl2vl=sl2vl)



@pytest.mark.parametrize("rows, ok", [({"0x0c42a10300000101": SET}, True), ({"0x0c42a10300000101": SET[:15]}, False),
                                      ({"0x0c42a10300000101": [16] + SET[1:]}, False), ({"node01": SET}, False),
                                      ({"0x0c42a10300000101": None}, False)])
def test_a_journals_sl2vl_rows_are_checked_before_a_restore_reads_them_back(rows, ok):
    snap = {**GOOD_SNAPSHOT, "sl2vl_before": rows}
    if ok:
        assert snapshot_of("sm01", {"snapshot": snap})["sl2vl_before"] == rows
    else:
        with pytest.raises(RollbackError, match="sl2vl_before"):
            snapshot_of("sm01", {"snapshot": snap})


def test_an_sl_the_policy_uses_mapped_to_vl15_is_a_finding_before_the_push_and_an_unused_one_is_not():
    s = SmSpec.model_validate({"qos_policy": {"default_sl": 0, "ulps": [{"pkey": 1, "sl": 3}], "ca_sl2vl": SET},
                               "partitions": [{"name": "t2", "pkey": 2, "sl": 15, "members": {"ALL": "full"}}]})
    [f] = sm_qos.findings("sm01", s, CONF, "sm")
    assert (f.code, f.evidence) == ("ib-sl-vl15", "qos_ca_sl2vl 0,1,2,3,4,5,6,7,7,6,5,4,3,2,1,15")
    assert f.message.startswith("the QoS policy's ca_sl2vl maps SL 15 (used by its rules, its default or a partition)")
    assert sm_qos.used_sls(s) == [0, 3, 15]
    unused = s.model_copy(update={"partitions": []})
    assert sm_qos.findings("sm01", unused, CONF, "sm") == []  # SL 15 maps to VL 15, but nothing uses it
    assert [x.code for x in sm_qos.findings("sm01", s, "qos FALSE\n", "sm")] == ["ib-sl-vl15", "ib-qos-off"]
