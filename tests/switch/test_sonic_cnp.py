"""The CNP queue of a community SONiC switch (issue 21): a strict-priority SCHEDULER entry added whole
and each port's CNP queue pointing at it, read back from CONFIG_DB, undone whole by a rollback, and a
queue pointing at no scheduler refused by GCU's YANG check as libyang words it. In process: the
driver over the lab's SONiC terminal (tests/switch/test_sonic_keys.py ``_driver``), no SSH."""

from __future__ import annotations

import copy
import json

import pytest

from tests.switch.test_sonic_keys import _driver, switch
from tuning.errors import CandidateError
from tuning.lab.fabric import Switch
from tuning.lab.sonic import SonicSwitch
from tuning.switch import sonic_keys
from tuning.switch.sonic import SonicDriver

ENTRY = '[{"op": "add", "path": "/SCHEDULER/fabtune_cnp", "value": {"type": "STRICT"}}]'


def test_the_cnp_queue_gets_a_strict_scheduler_read_back_and_rolled_back_whole() -> None:
    sw = SonicSwitch(Switch("leaf01", 1, "leaf", ["Ethernet0", "Ethernet8"]))
    power_on = copy.deepcopy(sw.config)
    drv = _driver(sw)
    drv.load_candidate(SonicDriver.render_config(switch(cnp_priority=5)))
    diff = drv.compare()
    assert f"Patch Applier:   * {ENTRY}\n" in diff  # the new entry in one change, before the queues naming it
    assert diff.index("/SCHEDULER/fabtune_cnp") < diff.index("/QUEUE/Ethernet0|5/scheduler")
    changes = SonicDriver.diff_changes(diff, drv.running_config())
    assert changes["SCHEDULER/fabtune_cnp/type"] == (None, "STRICT")
    assert changes["port/Ethernet8/queue/5/scheduler"] == ("scheduler.0", "fabtune_cnp")
    before = drv.current_revision()
    drv.commit()
    held = sonic_keys.config_settings(json.loads(drv.running_config()))
    assert held["SCHEDULER/fabtune_cnp/type"] == "STRICT" and held["SCHEDULER/scheduler.0/type"] == "DWRR"
    assert [held[f"port/{p}/queue/{q}/scheduler"] for p in ("Ethernet0", "Ethernet8") for q in (4, 5, 6)] == \
        ["scheduler.1", "fabtune_cnp", "scheduler.0"] * 2  # only the CNP queue moved
    drv.rollback_to(before)
    assert sw.config == power_on and "fabtune_cnp" not in sw.config["SCHEDULER"]  # removed whole, byte for byte


def test_a_queue_naming_no_scheduler_is_refused_with_the_leafref_text() -> None:
    sw = SonicSwitch(Switch("leaf01", 1, "leaf", ["Ethernet0"]))
    start = copy.deepcopy(sw.config)
    out, rc = sw.apply_patch([{"op": "add", "path": "/QUEUE/Ethernet0|6/scheduler", "value": "fabtune_cnp"}], False)
    assert rc == 2 and out.count('Leafref "/sonic-scheduler:sonic-scheduler/sonic-scheduler:SCHEDULER/sonic-scheduler:'
                                 'SCHEDULER_LIST/sonic-scheduler:name" of value "fabtune_cnp" points to a non-existing '
                                 "leaf.") == 2  # GCU prints the reason twice
    out, rc = sw.apply_patch([{"op": "add", "path": "/SCHEDULER/x", "value": {"type": "PRIORITY"}}], False)
    assert rc == 2 and 'Invalid value "PRIORITY" in "type" element.' in out  # an older YANG's enum, not this one's
    assert sw.config == start
    drv = _driver(sw)
    drv.load_candidate(json.dumps([{"op": "add", "path": "/QUEUE/Ethernet0|6/scheduler", "value": "fabtune_cnp"}]))
    with pytest.raises(CandidateError, match="points to a non-existing leaf"):
        drv.compare()  # the dry run refuses it too: nothing is planned that the switch would refuse


def test_the_template_writes_the_real_forms() -> None:
    """Against tests/switch/data/sonic_strict_scheduler_and_entry_add.txt: the scheduler entry is the
    STRICT scheduler's CONFIG_DB form, the queue names it as a queue names its scheduler, and the
    entry op is the form GCU prints a new entry in (and fabtune reads it)."""
    path = __file__.rsplit("/", 1)[0] + "/data/sonic_strict_scheduler_and_entry_add.txt"
    scheduler, queue, change = open(path).read().split("---\n", 1)[1].split("===\n")
    strict = json.loads("{" + scheduler + "}")["scheduler.7"]
    ops = json.loads(SonicDriver.render_config(switch()))
    assert ops[0] == {"op": "add", "path": "/SCHEDULER/fabtune_cnp", "value": strict}
    names_it = json.loads("{" + queue + "}")["{{ port }}|7"]
    assert {o["path"].rsplit("/", 1)[1]: o["value"] for o in ops if o["path"] == "/QUEUE/Ethernet0|6/scheduler"} == \
        {field: "fabtune_cnp" for field in names_it}
    real = sonic_keys.parse_ops("[" + change + "]")
    assert sonic_keys.patch_settings(real) == {"VLAN_MEMBER/Vlan1000|Ethernet0/tagging_mode": "untagged"}
