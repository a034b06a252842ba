"""The switch plan is the device's own diff of the pushed candidate (issue 6 item 3): every
field of SwitchSpec shows in the plan, is pushed, and the switch holds it afterwards.

All over real SSH against the lab's NVUE switch, through the engine's own switch_ops.
"""

from __future__ import annotations

import pytest

from tests.switch.conftest import leaf
from tuning.errors import CandidateError
from tuning.targets import switch as switch_ops
from tuning.switch.nvue_keys import command_leaves, flat_key

pytestmark = pytest.mark.lab

#: field of SwitchSpec / SwitchRoce, its new value, the plan keys and values it must give (None: no change)
FIELDS = [
    ("port_mtu", {"port_mtu": 9100}, {"port/swp1/mtu": "9100", "port/swp31/mtu": "9100"}),
    ("port_mtu_overrides", {"port_mtu_overrides": {"swp2": 9050}}, {"port/swp2/mtu": "9050"}),
    ("ports", {"ports": ["swp1-8"], "port_mtu": 9150}, {"port/swp8/mtu": "9150", "port/swp9/mtu": None}),
    ("roce.pfc_priority", {"roce": {"pfc_priority": 4, "dscp_to_switch_priority": {26: 4, 48: 6}}},
     {"roce/pfc_priority": "4", "roce/sp/4/tc": "3", "roce/dscp/26": "4"}),
    ("roce.trust", {"roce": {"trust": "pcp"}}, {"roce/trust": "l2"}),
    ("roce.dscp_to_switch_priority", {"roce": {"dscp_to_switch_priority": {26: 3, 48: 6, 34: 3}}},
     {"roce/dscp/34": "3"}),
    ("roce.lossless_tc", {"roce": {"lossless_tc": 2}},
     {"roce/sp/3/tc": "2", "roce/tc/2/scheduler": "dwrr", "roce/tc/2/bw_percent": "50", "roce/tc/2/ecn": "enable",
      "roce/tc/2/ecn_min_bytes": "150000", "roce/tc/2/ecn_max_bytes": "1500000", "roce/tc/2/ecn_probability": "100"}),
    ("roce.cnp_priority", {"roce": {"cnp_priority": 5}}, {"roce/sp/5/tc": "5", "roce/tc/5/scheduler": "strict"}),
    ("roce.ecn_min_bytes", {"roce": {"ecn_min_bytes": 200000}}, {"roce/tc/3/ecn_min_bytes": "200000"}),
    ("roce.ecn_max_bytes", {"roce": {"ecn_max_bytes": 2000000}}, {"roce/tc/3/ecn_max_bytes": "2000000"}),
    ("roce.ecn_probability", {"roce": {"ecn_probability": 80}}, {"roce/tc/3/ecn_probability": "80"}),
]


def test_first_plan_names_every_line_the_template_pushes(leaf01) -> None:
    inv_dir, drv = leaf01
    dev = leaf(inv_dir)
    state = switch_ops.collect(drv, dev)
    changes = {c.key: c for c in switch_ops.plan(dev, state)}
    pushed = {flat_key(p): v for p, v in command_leaves(state.candidate or "").items()}
    assert len(pushed) == 17 + 16 and set(pushed) <= set(changes)  # an MTU per port + 16 RoCE lines
    assert {k: changes[k].after for k in ("roce/tc/3/ecn_probability", "roce/pfc_tx", "roce/pfc_rx",
                                          "roce/sp/6/tc", "roce/tc/6/scheduler", "roce/tc/3/bw_percent")} == {
        "roce/tc/3/ecn_probability": "100", "roce/pfc_tx": "enable", "roce/pfc_rx": "enable",
        "roce/sp/6/tc": "6", "roce/tc/6/scheduler": "strict", "roce/tc/3/bw_percent": "50"}
    assert changes["port/swp1/type"].after == "swp"  # NVUE's implied key is in the device's diff too
    assert changes["port/swp1/mtu"].before is None  # not configured before
    assert drv.compare() == ""  # collect left nothing staged
    rev = switch_ops.apply(drv, dev, list(changes.values()), None, state.revision)
    assert rev is not None and int(rev) == int(state.revision) + 1
    again = switch_ops.collect(drv, dev)
    assert switch_ops.plan(dev, again) == [] and again.revision == rev  # idempotent twin


@pytest.mark.parametrize(("field", "change", "want"), FIELDS, ids=[f[0] for f in FIELDS])
def test_each_switch_field_is_planned_pushed_and_read_back(leaf01, field: str, change: dict,
                                                           want: dict[str, str]) -> None:
    """The spec is changed through the model (validated): a consistent inventory would need the
    nodes changed too (the cross-host QoS rules), which is not what this test is about."""
    inv_dir, drv = leaf01
    dev = leaf(inv_dir, **change)
    state = switch_ops.collect(drv, dev)
    changes = switch_ops.plan(dev, state)
    planned = {c.key: c.after for c in changes}
    assert {k: planned.get(k) for k in want} == want, planned
    rev = switch_ops.apply(drv, dev, changes, None, state.revision)
    assert rev is not None and int(rev) > int(state.revision)
    held = {flat_key(p): v for p, v in command_leaves(drv.running_config()).items()}
    pushed = {k: v for k, v in want.items() if v is not None}
    assert {k: held.get(k) for k in pushed} == pushed
    ports = drv.get_state().ports
    assert all(str(ports[k.split("/")[1]]) == v for k, v in pushed.items() if k.endswith("/mtu"))
    assert switch_ops.plan(dev, switch_ops.collect(drv, dev)) == []


def test_apply_refuses_a_diff_that_moved_since_the_plan(leaf01) -> None:
    inv_dir, drv = leaf01
    dev = leaf(inv_dir, port_mtu=9120)
    state = switch_ops.collect(drv, dev)
    changes = switch_ops.plan(dev, state)
    drv.load_candidate("nv set interface swp3 link mtu 1500\n")  # someone else's change lands
    drv.commit()
    with pytest.raises(CandidateError, match="no longer the planned one"):
        switch_ops.apply(drv, dev, changes, None, state.revision)
    assert drv.compare() == "" and drv.get_state().ports["swp1"] != 9120
