"""OpenSM's QoS policy file from the inventory (:mod:`tuning.targets.sm_qos`, pure): the exact text the
lab's real OpenSM 3.3.23 accepted (``test_ib_verify_lab.py`` proves it on the fabric), the plan's diff,
the SLs the verification expects, bad input, and a journal written before the QoS file existed."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from tests.ib.test_sm_model import GOOD_SNAPSHOT
from tuning.model.ib_sm import SmSpec
from tuning.targets import sm_qos
from tuning.targets.sm import snapshot_of

TEXT = ("# fabtune: OpenSM QoS policy, rendered from the inventory (do not edit: fabtune plan shows the diff)\n"
        "qos-ulps\n    default : 1\n    any, pkey 0x0001 : 3\n    any, pkey 0x7fff : 2\nend-qos-ulps\n")


def spec(**qos) -> SmSpec:
    return SmSpec.model_validate({"qos_policy": qos} if qos else {})


def test_the_policy_renders_opensms_qos_ulps_with_its_required_default_line_and_plans_as_a_whole_file_diff():
    s = spec(default_sl=1, ulps=[{"pkey": "0x0001", "sl": 3}, {"pkey": 0x7FFF, "sl": 2}])
    assert sm_qos.render(s) == TEXT
    assert sm_qos.sls(s) == {0x7FFF: 2, 0x0001: 3}  # a rule for Default wins over the default line
    assert sm_qos.render(spec(ulps=[])).count("    default : 0\n") == 1  # never without it (ERR AC10)
    [c] = sm_qos.plan("sm01", s, {"/etc/opensm/qos-policy.conf": None}, "sm")
    assert (c.key, c.before, c.after) == ("file/qos-policy.conf", None, TEXT)
    assert sm_qos.plan("sm01", s, {"/etc/opensm/qos-policy.conf": TEXT}, "sm") == []
    assert sm_qos.plan("sm01", spec(), {}, "sm") == [] and sm_qos.sls(spec()) == {}  # no policy: left alone


@pytest.mark.parametrize("qos, says", [
    ({"ulps": [{"pkey": 1, "sl": 16}]}, "less than or equal to 15"),
    ({"default_sl": -1}, "greater than or equal to 0"),
    ({"ulps": [{"pkey": 1, "sl": 1}, {"pkey": "0x0001", "sl": 2}]}, "pkey 0x0001 given twice; allowed: each pkey once"),
    ({"ulps": [{"pkey": 0x8001, "sl": 1}]}, "0x8001 is outside 0x0001..0x7fff"),
    ({"ulps": [{"pkey": 1, "sl": 1, "service_id": 5}]}, "Extra inputs are not permitted")])
def test_a_policy_opensm_would_refuse_is_refused_in_the_inventory(qos, says):
    with pytest.raises(ValidationError, match=says):
        spec(**qos)


def test_a_journal_from_before_the_qos_file_is_still_restored_from_and_one_naming_it_holds_its_text():
    assert snapshot_of("sm01", {"snapshot": GOOD_SNAPSHOT}) == GOOD_SNAPSHOT  # no opensm_qos_policy_file path
    snap = json.loads(json.dumps(GOOD_SNAPSHOT))
    snap["paths"]["opensm_qos_policy_file"] = "/q.conf"
    snap["files_before"]["/q.conf"] = None
    assert snapshot_of("sm01", {"snapshot": snap}) == snap


@pytest.mark.parametrize("conf, evidence", [
    ("sm_priority 0\nqos FALSE\n", "opensm.conf: qos FALSE"),
    ("sm_priority 0\n", "opensm.conf: no qos line (OpenSM defaults to FALSE)")])
def test_a_policy_opensm_ignores_with_qos_off_is_a_finding_before_the_push(conf, evidence):
    s = spec(ulps=[{"pkey": 1, "sl": 3}])
    [f] = sm_qos.findings("sm01", s, conf, "sm")
    assert (f.code, f.evidence) == ("ib-qos-off", evidence)
    assert sm_qos.findings("sm01", s, "qos TRUE\n", "sm") == [] and sm_qos.findings("sm01", spec(), conf, "sm") == []
