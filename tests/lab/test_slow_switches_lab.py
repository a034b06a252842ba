"""Slow device commands on EOS and SONiC (issue 21, field failure "a lab device that answers after
45 s passes"): a commit that holds the switch 45 s (``slow-apply``: EOS's ``commit`` and SONiC's
``apply-patch`` wait, as a busy ConfigAgent or a running GCU does) is waited for with the drivers'
default read timeouts (``apply_timeout_s`` 120 s) and the policy's (``apply_s`` 600 s), read back
and kept. The two switches are pushed side by side: one 45 s wait for both. NVUE's slow apply is
tests/switch/test_nvue_faults.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import lab_up
from tuning import inventory
from tuning.lab.inject import inject
from tuning.lab.scale import write_inventory
from tuning.rollout import engine
from tuning.rollout.engine import Options

pytestmark = pytest.mark.lab

SLOW_S = 45
SWITCHES = ["leaf02", "spine01"]


def test_eos_and_sonic_commits_answering_after_45_s_pass_with_the_default_timeouts(tmp_path: Path):
    inv = write_inventory(tmp_path / "inv", 2, switch_os={"leaf02": "eos", "spine01": "sonic"})
    with lab_up(inv) as lab:
        for sw in SWITCHES:
            inject(lab / ".state", sw, "slow-apply", str(SLOW_S))
        try:
            t0 = time.monotonic()
            rep = engine.run(inventory.load(lab), Options(mode="apply", journal_dir=tmp_path / "j", limit=SWITCHES))
            took = time.monotonic() - t0
            again = engine.run(inventory.load(lab), Options(mode="plan", limit=SWITCHES))
        finally:
            for sw in SWITCHES:
                inject(lab / ".state", sw, "clear")
    assert rep.outcome == "applied" and not rep.errors and not rep.unreachable, (rep.outcome, rep.errors)
    assert sorted(d for d, changes in rep.changes.items() if changes) == SWITCHES
    got = {c["key"]: c["after"] for c in rep.changes["leaf02"]}
    assert got["port/Ethernet1/mtu"] == "9214" and got["port/Ethernet1/pfc_priority/3"] == "no-drop"
    got = {c["key"]: c["after"] for c in rep.changes["spine01"]}
    assert got["port/Ethernet0/mtu"] == "9216" and got["wred/AZURE_LOSSLESS/green_drop_probability"] == "100"
    assert SLOW_S <= took < 2 * SLOW_S  # each waited its commit out, side by side
    assert again.n_changes == 0  # what the slow commits wrote is what the switches run now
