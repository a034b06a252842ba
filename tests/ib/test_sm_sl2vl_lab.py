"""The QoS policy's SL-to-VL table of the HCA ports (issue 22), over the real OpenSM 3.3.23 of the IB lab:
planned as opensm.conf's ``qos_ca_sl2vl`` line, pushed with the policy file in one SIGHUP, read back from
every HCA port's SL2VL table (``smpquery sl2vl``; here also read without the target), restored byte for
byte. With OpenSM's ``qos`` off it programs no table: the push's read back fails naming the port and what it
holds, and the restore puts the files back.
"""

from __future__ import annotations

import copy

import pytest

from tests.ib.test_sm_target import restored_from_journal, start
from tuning.errors import RollbackError, VerifyError
from tuning.lab.fabric import default_fabric
from tuning.lab.ib import IbLab
from tuning.parsers.ib_sm import parse_sl2vl
from tuning.rollout.journal import Journal
from tuning.targets import journaled_connection
from tuning.targets.sm import SmTarget

pytestmark = pytest.mark.lab

SL2VL = [0, 1, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 3, 2, 1, 15]
QOS = {"opensm_qos_policy_file": "/qos-policy.conf", "qos_policy": {"default_sl": 0, "ca_sl2vl": SL2VL}}


def tables(lab: IbLab) -> dict[str, list[int]]:
    """Every HCA port's SL2VL row, read with smpquery in one shell (not through the target)."""
    guids = [f"{h.port_guid:#018x}" for h in lab.topology.hcas]
    out = lab.sm_shell().run(f"for g in {' '.join(guids)}; do echo \"== $g\"; smpquery sl2vl -G $g 1 || exit; done",
                             privileged=False)
    assert out.rc == 0, out.stderr
    return {c.split("\n", 1)[0]: parse_sl2vl(c.split("\n", 1)[1]).rows[(0, 0)] for c in out.stdout.split("== ")[1:]}


@pytest.fixture(params=[True, False], ids=["qos-on", "qos-off"])
def lab(request, tmp_path_factory):
    lab = IbLab(tmp_path_factory.mktemp("sl2vl"), default_fabric(n_nodes=1), qos=request.param)
    lab.up()
    yield lab
    assert lab.down()


def test_the_policys_ca_sl2vl_is_planned_pushed_read_back_on_every_hca_port_and_restored(lab, tmp_path):
    before, t, state, j, changes = start(lab, tmp_path, QOS)
    held = tables(lab)
    assert set(map(tuple, held.values())) == ({tuple(range(8)) * 2} if lab.qos else {(*range(15), 7)})
    assert j.device("sm01")["snapshot"]["sl2vl_before"] == held  # what a restore reads back
    sl2vl = [(c.key, c.before, c.after) for c in changes if c.key == "qos_ca_sl2vl"]
    assert sl2vl == [("qos_ca_sl2vl", "(null)", "0,1,2,3,4,5,6,7,7,6,5,4,3,2,1,15")]  # the installed template's line
    if not lab.qos:
        assert [f.code for f in t.findings(state)] == ["ib-qos-off"]
        with pytest.raises(VerifyError, match=r"8 HCA port\(s\) hold another SL2VL table than opensm.conf's qos_ca_sl2vl "
                                              r"\(is its qos TRUE\?\); 0x0c42a10300000101: smpquery sl2vl reads "
                                              r"\[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 7\], want \[0, 1, 2"):
            t.push(changes, j.of("sm01"))
    else:
        assert t.findings(state) == [] and t.push(changes, j.of("sm01")) == changes
        assert set(map(tuple, tables(lab).values())) == {tuple(SL2VL)} and len(held) == 8
        assert "\nqos_ca_sl2vl 0,1,2,3,4,5,6,7,7,6,5,4,3,2,1,15\n" in (lab.dir / "opensm.conf").read_text()
        assert t.plan(t.collect()) == []  # the second plan changes nothing
        # a restore reads the journaled rows back: one OpenSM does not program again fails it, by name
        rec = copy.deepcopy(Journal.load(j.path.parent, j.run_id).device("sm01"))
        rec["snapshot"]["sl2vl_before"]["0x0c42a10300000131"] = [1] * 16
        wrong = SmTarget("sm01", journaled_connection("sm01", rec), "opensm", host=lab.sm_shell())
        with pytest.raises(RollbackError, match=r"OpenSM not restored: sm01: 1 HCA port\(s\) hold another SL2VL table "
                                                r"than the journal's \(before the push\); 0x0c42a10300000131: "
                                                r"smpquery sl2vl reads \[0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7\], want \[1, 1"):
            wrong.restore(rec)
    restored_from_journal(lab, j, before)
    assert tables(lab) == held and not (lab.dir / "qos-policy.conf").exists()
