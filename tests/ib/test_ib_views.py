"""Host, SM and switch views of one HCA port joined (issue 22): each disagreement its own finding, on real
outputs. One SM read of the 2-node IB lab (``iblinkinfo``, the SM's own read: ``sminfo`` and one ``saquery
PR`` a CA port, the perfquery line) and node01's one read of its HCA ports (sysfs as the lab's kernel-format
trees hold it), captured from the real tools over the real OpenSM before and after node01 mlx5_1's LID was
set to 0x50, mlx5_2's SM LID to 0x9 and mlx5_3's link left half up, its switch port Armed
(``tests/ib/capture_view_cases.py``). The real readers parse them (the SM Target through a host that answers
with the captured outputs), the real localisation judges the burn-in document.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tuning.burnin import ib_judge
from tuning.burnin.collect import ib_round
from tuning.burnin.ib_read import read_fabric, served_command
from tuning.burnin.ib_views import FIXES, findings
from tuning.burnin.localise import localise
from tuning.errors import TuningError
from tuning.model.ib_ports import IbPortsSpec
from tuning.targets.sm import SmTarget
from tuning.transport.base import CommandResult

CASES = Path(__file__).parent / "cases" / "views"
INTENT = IbPortsSpec(hcas=[f"mlx5_{i}" for i in range(8)], width="4X", speed="HDR")


class Captured:
    """The SM host of the captured fabric ``case``: each command of a read answers its captured output."""

    def __init__(self, case: str, served: str | None = None):
        self.case, self.served = case, served

    def run(self, command: str, *, timeout: float = 60.0, privileged: bool = True) -> CommandResult:
        kind = ("iblinkinfo" if command == "iblinkinfo" else "served" if command.startswith("s=$(sminfo)")
                else "perfquery_x" if command.startswith("perfquery -x ") else None)
        if kind is None:
            return CommandResult(command, 127, "", f"sh: {command}: not found")
        text = self.served if kind == "served" and self.served is not None else self.text(kind)
        return CommandResult(command, 0, text, "")

    def text(self, kind: str) -> str:
        return (CASES / f"{kind}__2_nodes_{self.case}.txt").read_text()


def sm_read(case: str, **kw) -> dict:
    return read_fabric(SmTarget("sm01", None, host=Captured(case, **kw)))


def node_round(case: str, edit=lambda text: text) -> dict:
    return ib_round("node01", edit((CASES / f"node01_ports__2_nodes_{case}.txt").read_text()), INTENT)


def doc_of(baseline: dict, read: dict, node: dict) -> dict:
    """A health document: the SM's baseline read, one round with node01's ports and the SM's read."""
    return {"topology": {"nodes": {}, "links": []}, "ib": {"sms": ["sm01"], "baseline": {"sm01": baseline},
                                                           "recovery_s": 0.0},
            "rounds": [{"index": 0, "pairs": [], "nics": {}, "gpus": {}, "errors": {}, "ib": {"sm01": read},
                        "ib_ports": {"node01": node}}]}


@pytest.fixture(scope="module")
def reads() -> dict[str, dict]:
    return {case: sm_read(case) for case in ("clean", "lid_smlid_half_up")}


def test_a_fabric_where_every_view_agrees_has_no_finding(reads):
    node = node_round("clean")
    assert len(node["views"]) == 8 and node["views"]["mlx5_1/1"] == {
        "guid": "0x0c42a10300000111", "state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "200 Gb/sec (4X HDR)",
        "lid": "0x5", "sm_lid": "0x1"}
    clean = reads["clean"]
    assert clean["sm"]["lid"] == 1 and len(clean["sa"]) == 16
    assert {g: lid for g, lid in clean["sa"].items()} == {p["guid"]: p["lid"] for p in clean["ports"].values()
                                                          if p.get("guid")}
    assert localise(doc_of(clean, clean, node)) == []


def test_lid_sm_lid_and_a_half_up_link_are_each_their_own_finding_with_every_sides_value(reads):
    clean, faulty = reads["clean"], reads["lid_smlid_half_up"]
    found = localise(doc_of(clean, faulty, node_round("lid_smlid_half_up")))
    assert [(f["code"], f["kind"], f["target"], f["severity"]) for f in found] == [
        ("ib-view-lid", "link", "node01:mlx5_1/1", "error"),
        ("ib-view-sm-lid", "link", "node01:mlx5_2/1", "error"),
        ("ib-view-state", "link", "node01:mlx5_3/1<->leaf02/3", "error")]
    lid, sm_lid, state = found
    assert lid["evidence"]["guid"] == "0x0c42a10300000111"
    assert (lid["evidence"]["host"]["lid"], lid["evidence"]["sm"]["sa_lid"], lid["evidence"]["sm"]["fabric"]["lid"]) == \
        ("0x50", 5, 0x50)
    assert "the host reads lid 0x50 (iblinkinfo: 0x50, the port's PortInfo); the SM's SA (sm01) serves LID 0x5" in \
        lid["message"]
    assert (sm_lid["evidence"]["host"]["sm_lid"], sm_lid["evidence"]["sm"]["sm_lid"]) == ("0x9", 1)
    assert state["evidence"]["host"]["state"] == "4: ACTIVE" and state["evidence"]["switch"] == {
        "port": "leaf02/3", "state": "Armed", "phys": "LinkUp", "width": None, "speed": None}
    assert "the switch port leaf02/3 at the far end of its cable reads Armed/LinkUp" in state["message"]
    assert all(f["fix"] and "kill -HUP" in f["fix"] for f in found) and all(f["evidence"]["rounds"] == [0] for f in found)


def test_a_link_half_up_in_the_window_is_that_finding_never_link_down(reads):
    clean, faulty = reads["clean"], reads["lid_smlid_half_up"]
    doc = doc_of(clean, faulty, node_round("lid_smlid_half_up"))
    # the cable reading alone: the switch port Active at the baseline is Armed now, "link down"
    assert [(f["code"], f["target"]) for f in ib_judge.findings(doc)] == [("ib-link-down", "node01:mlx5_3/1<->leaf02/3")]
    assert "ib-link-down" not in {f["code"] for f in localise(doc)}


def test_the_ports_no_pma_query_reaches_have_no_counters_and_fail_no_read(reads):
    faulty = reads["lid_smlid_half_up"]
    # mlx5_1 answers at a LID no switch routes, mlx5_3 behind an Armed port: perfquery fails on both (measured)
    assert faulty["ports"]["node01:mlx5_1/1"]["counters"] == {} == faulty["ports"]["node01:mlx5_3/1"]["counters"]
    assert faulty["ports"]["node01:mlx5_2/1"]["counters"]["SymbolErrorCounter"] == 0 and faulty["error"] is None


def test_a_host_rate_other_than_its_switch_ports_is_a_rate_finding(reads):
    clean = reads["clean"]
    node = node_round("clean", lambda t: t.replace("mlx5_4/ports/1/rate\t200 Gb/sec (4X HDR)",
                                                   "mlx5_4/ports/1/rate\t100 Gb/sec (4X EDR)"))
    found = findings(doc_of(clean, clean, node))
    assert [(f["code"], f["target"], f["severity"]) for f in found] == [
        ("ib-view-rate", "node01:mlx5_4/1<->leaf01/5", "warning")]
    assert "the host reads rate 100 Gb/sec (4X EDR); the switch port leaf01/5 reads 4X 53.125 Gbps (HDR)" in \
        found[0]["message"]


def test_a_port_the_host_reads_active_and_the_fabric_does_not_show_is_placed_on_its_cable_by_the_baseline(reads):
    clean = reads["clean"]
    lost = copy.deepcopy(clean)  # the round's read without node01 mlx5_0 (its switch port Down/Polling, no far end)
    del lost["ports"]["node01:mlx5_0/1"], lost["ports"]["leaf01/1"], lost["sa"]["0x0c42a10300000101"]
    lost["states"]["leaf01/1"] = {"type": "Switch", "state": "Down", "phys": "Polling", "remote": None}
    found = findings(doc_of(clean, lost, node_round("clean")))
    assert [(f["code"], f["target"]) for f in found] == [("ib-view-state", "node01:mlx5_0/1<->leaf01/1")]
    assert found[0]["message"].endswith("the switch port leaf01/1 at the far end of its cable reads Down/Polling; the "
                                        "SM's fabric read (iblinkinfo on sm01) does not show the port")


def test_a_port_the_host_reads_init_under_an_active_switch_port_is_a_state_finding_and_no_lid_one(reads):
    clean = reads["clean"]
    init = {"mlx5_6/ports/1/state\t4: ACTIVE": "mlx5_6/ports/1/state\t2: INIT",
            "mlx5_6/ports/1/lid\t0xf": "mlx5_6/ports/1/lid\t0x0", "mlx5_6/ports/1/sm_lid\t0x1": "mlx5_6/ports/1/sm_lid\t0x0"}

    def edit(text: str) -> str:
        for old, new in init.items():
            assert old in text
            text = text.replace(old, new)
        return text

    found = findings(doc_of(clean, clean, node_round("clean", edit)))
    assert [(f["code"], f["target"]) for f in found] == [("ib-view-state", "node01:mlx5_6/1<->leaf01/7")]
    assert "the host reads 2: INIT (5: LinkUp); the switch port leaf01/7 at the far end of its cable reads " \
           "Active/LinkUp 4X 53.125 Gbps" in found[0]["message"]


def test_a_port_the_sa_serves_no_path_to_is_a_lid_finding(reads):
    text = Captured("clean").text("served")
    gone = text.split("== 0x0c42a10300000111\n")
    served = gone[0] + "== 0x0c42a10300000111\n" + "== " + gone[1].split("\n== ", 1)[1]
    read = sm_read("clean", served=served)
    assert read["sa"]["0x0c42a10300000111"] is None
    found = findings(doc_of(reads["clean"], read, node_round("clean")))
    assert [(f["code"], f["target"]) for f in found] == [("ib-view-lid", "node01:mlx5_1/1")]
    assert "serves no path record to it" in found[0]["message"]


def test_an_sm_read_that_failed_judges_no_view_and_a_cut_sm_read_fails_the_read(reads):
    failed = {"ports": {}, "error": "sminfo: exited 1"}
    assert findings(doc_of(reads["clean"], failed, node_round("lid_smlid_half_up"))) == []
    with pytest.raises(TuningError, match="saquery PR answered for 15 of 16 CA ports"):
        text = Captured("clean").text("served")
        sm_read("clean", served=text.rsplit("\n== ", 1)[0] + "\n")
    with pytest.raises(ValueError, match="not a port GUID"):
        served_command(["0x0c42a103000001; reboot"])


def test_a_node_whose_port_guid_is_unreadable_is_not_read():
    with pytest.raises(TuningError, match="mlx5_0 port 1: .*gids/"):
        node_round("clean", lambda t: t.replace("fe80:0000:0000:0000:0c42:a103:0000:0101", "fe80::c42:a103:0:101"))
    views = copy.deepcopy(node_round("clean")["views"])
    assert {v["guid"] for v in views.values()} == {f"0x0c42a1030000{i}1" for i in ("010", "011", "012", "013", "014",
                                                                                  "015", "016", "017")}


def test_the_console_prints_each_view_finding_with_its_fix_and_a_warnings_severity(reads, capsys):
    from tuning.cli_burnin import _show

    node = node_round("clean", lambda t: t.replace("mlx5_4/ports/1/rate\t200 Gb/sec (4X HDR)",
                                                   "mlx5_4/ports/1/rate\t100 Gb/sec (4X EDR)"))
    doc = doc_of(reads["clean"], reads["lid_smlid_half_up"], node_round("lid_smlid_half_up"))
    doc.update(run_id="health-20261205T010000-a1b2c3", seconds=3.0,
               findings=localise(doc) + findings(doc_of(reads["clean"], reads["clean"], node)))
    _show(doc, as_json=False)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ib-view-lid            link   node01:mlx5_1/1: port GUID 0x0c42a10300000111: the host ")
    assert out[1] == " " * 29 + " fix: " + FIXES["ib-view-lid"]
    assert out[6].endswith("on the same cable (warning)") and out[7].endswith(FIXES["ib-view-rate"])
    assert out[8] == "health-20261205T010000-a1b2c3: 1 round(s) in 3 s, 4 finding(s)"
