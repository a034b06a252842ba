"""fabtune's parsers of infiniband-diags on the outputs the real tools printed over the IB lab's
fabric (``tests/ib/cases/``, written by ``python -m tests.ib.capture_cases``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuning.errors import InputError, ParseError
from tuning.parsers import parse
from tuning.parsers.ib_counters import parse_ibqueryerrors, parse_perfquery
from tuning.parsers.ib_links import parse_iblinkinfo
from tuning.parsers.ib_sm import parse_pkeys, parse_saquery_pr, parse_sminfo

CASES = Path(__file__).parent / "cases"
#: file-name prefix -> the tool name of ``fabtune parse``
TOOLS = {"iblinkinfo": "iblinkinfo", "iblinkinfo_l": "iblinkinfo", "ibqueryerrors": "ibqueryerrors",
         "perfquery": "perfquery", "perfquery_x": "perfquery", "saquery_pr": "saquery-pr", "sminfo": "sminfo",
         "smpquery_pkeys": "smpquery-pkeys", "smpquery_portinfo": "smpquery-portinfo", "ibstat": "ibstat"}


def _text(name: str) -> str:
    return (CASES / name).read_text()


@pytest.mark.parametrize("name", sorted(p.name for p in CASES.glob("*.txt") if not p.name.endswith(".stderr.txt")))
def test_every_captured_output_parses_with_its_tool(name):
    assert parse(TOOLS[name.split("__")[0]], _text(name)).failure is None


def test_iblinkinfo_healthy_fabric_every_link_4x_hdr():
    links = parse_iblinkinfo(_text("iblinkinfo__hdr_4x_all_active.txt"))
    assert len(links.ports) == 32 + 2 * 40 and len(links.cabled()) == 2 * 32 + 2
    port = links.port("node01 mlx5_0", 1)
    assert port.model_dump(exclude={"remote"}) == {
        "node": "node01 mlx5_0", "node_type": "CA", "node_guid": None, "port_guid": "0x0c42a10300000101", "lid": 2,
        "port": 1, "ext_port": None, "state": "Active", "phys_state": "LinkUp", "width": "4X", "speed": "53.125 Gbps",
        "generation": "HDR", "rate_gbps": 200.0, "could_be_width": "12X", "could_be_speed": None, "hoq": None,
        "vl_stall": None, "remote_unavailable": False}
    assert (port.remote.lid, port.remote.port, port.remote.name) == (1, 1, "leaf01")
    leaf = links.port("leaf01", 1)
    assert (leaf.node_type, leaf.node_guid, leaf.lid, leaf.remote.name) == ("Switch", "0xb83fd20300000001", 1, "node01 mlx5_0")
    unused = links.port("leaf01", 40)
    assert (unused.state, unused.phys_state, unused.width, unused.remote) == ("Down", "Polling", None, None)
    assert links.degraded("4X", "HDR") == [] and links.degraded("4X", "NDR") == links.cabled()


def test_iblinkinfo_1x_link_is_degraded_against_the_intent_with_its_hint():
    links = parse_iblinkinfo(_text("iblinkinfo__one_hca_1x_could_be.txt"))
    port = links.port("node01 mlx5_0", 1)
    assert (port.width, port.could_be_width, port.rate_gbps) == ("1X", "12X", 50.0)
    assert [(p.node, p.port) for p in links.degraded("4X")] == [("node01 mlx5_0", 1), ("leaf01", 1)]
    found = parse("iblinkinfo", _text("iblinkinfo__one_hca_1x_could_be.txt"), {"width": "4X", "speed": "HDR"})
    assert [f.subject for f in found.findings] == ["node01 mlx5_0 port 1", "leaf01 port 1"]
    assert "runs 1X HDR" in found.findings[0].message and "could be 12X" in found.findings[0].message
    with pytest.raises(InputError):
        parse("iblinkinfo", _text("iblinkinfo__one_hca_1x_could_be.txt"), {"width": "3X"})


def test_iblinkinfo_link_down_hca_gone_and_leaf_port_polling():
    links = parse_iblinkinfo(_text("iblinkinfo__hca_link_down.txt"))
    assert "node03 mlx5_1" not in {p.node for p in links.ports}
    leaf = links.port("leaf02", 3)
    assert (leaf.state, leaf.phys_state, leaf.remote) == ("Down", "Polling", None)


def test_iblinkinfo_line_mode_reads_the_same_links():
    line = parse_iblinkinfo(_text("iblinkinfo_l__line_mode.txt"))
    default = parse_iblinkinfo(_text("iblinkinfo__hca_link_down.txt"))
    assert [(p.node, p.port, p.state, p.width, p.lid) for p in line.ports] == \
        [(p.node, p.port, p.state, p.width, p.lid) for p in default.ports]
    port = line.port("node01 mlx5_0", 1)
    assert (port.node_type, port.port_guid, port.remote.guid) == (None, "0x0c42a10300000101", "0xb83fd20300000001")


def test_perfquery_counters_and_extended():
    pq = parse_perfquery(_text("perfquery__hca_symbol_errors_1234.txt")).blocks[0]
    assert (pq.lid, pq.port, pq.extended, pq.cap_mask) == (2, 1, False, "0x1200")
    assert pq.errors == {"SymbolErrorCounter": 1234, "LinkDownedCounter": 3} and pq.saturated == []
    assert pq.counters["CounterSelect2"] == 0 and pq.counters["PortXmitWait"] == 0
    ext = parse_perfquery(_text("perfquery_x__hca_extended.txt")).blocks[0]
    assert ext.extended and ext.cap_mask2 == "0x0000000" and "PortUnicastXmitPkts" in ext.counters
    saturated = _text("perfquery__hca_symbol_errors_1234.txt").replace("..1234", "65535")
    res = parse_perfquery(saturated)
    assert res.blocks[0].saturated == ["SymbolErrorCounter"] and res.findings[0].code == "ib_counter_saturated"


def test_ibqueryerrors_per_port_counters_and_summary():
    qe = parse_ibqueryerrors(_text("ibqueryerrors__symbol_linkdowned_rcverrors.txt"))
    assert qe.of("node01 mlx5_0", 1) == {"SymbolErrorCounter": 1234, "LinkDownedCounter": 3}
    assert qe.of("leaf01", 1) == {"PortRcvErrors": 17} and qe.of("leaf01", None) == {"PortRcvErrors": 17}
    assert qe.ports[0].guid == "0xc42a10300000101" and qe.ports[1].node_guid == "0xb83fd20300000001"
    assert (qe.nodes_checked, qe.bad_nodes, qe.ports_checked, qe.bad_ports) == (34, 2, 112, 2)
    assert [f.subject for f in qe.findings] == ["node01 mlx5_0 port 1", "leaf01 port 1"]


def test_pkey_tables_full_and_limited_members():
    full, limited = parse_pkeys(_text("smpquery_pkeys__full_member_0x8001.txt")), \
        parse_pkeys(_text("smpquery_pkeys__limited_member_0x0001.txt"))
    assert [(e.index, e.pkey, e.full) for e in full.entries] == [(0, 0x7FFF, True), (1, 0x0001, True)]
    assert (full.membership(0x8001), limited.membership(0x0001), limited.membership(0x7FFF)) == ("full", "limited", "full")
    assert limited.capacity == 64 and limited.membership(0x0002) is None


def test_path_records_mtu_rate_sl_pkey():
    pr = parse_saquery_pr(_text("saquery_pr__tenant_pkey_0x8001_mtu2048_sl0.txt")).records[0]
    assert (pr.slid, pr.dlid, pr.pkey, pr.sl, pr.mtu_bytes, pr.mtu_selector, pr.rate_gbps) == (2, 3, 0x8001, 0, 2048, 2, 200.0)
    assert pr.sgid == "fe80::c42:a103:0:101" and pr.fields["pkt_life"] == "0x92"


def test_sminfo_master_and_no_sm():
    sm = parse_sminfo(_text("sminfo__master_on_leaf01.txt"))
    assert (sm.sm_lid, sm.sm_guid, sm.priority, sm.state, sm.state_name, sm.findings) == \
        (1, "0xb83fd20300000001", 0, 3, "MASTER", [])
    no_sm = parse_sminfo(_text("sminfo__master_on_leaf01.txt").replace("sm lid 1 ", "sm lid 0 "))
    assert [f.code for f in no_sm.findings] == ["ib_no_sm"]


@pytest.mark.parametrize("tool", sorted(set(TOOLS.values())))
@pytest.mark.parametrize("text", ["", "garbage line\n", "CA: x:\n  not a port line\n"])
def test_unreadable_output_is_a_parse_error_never_a_partial_result(tool, text):
    with pytest.raises(ParseError):
        parse(tool, text)


def test_truncated_outputs_are_refused():
    with pytest.raises(ParseError):  # no summary: ibqueryerrors did not finish
        parse_ibqueryerrors(_text("ibqueryerrors__symbol_linkdowned_rcverrors.txt").split("##")[0])
    with pytest.raises(ParseError):  # no capacity line
        parse_pkeys(_text("smpquery_pkeys__full_member_0x8001.txt").rsplit("\n", 2)[0])
    with pytest.raises(ParseError):  # a PathRecord without its rate
        parse_saquery_pr(_text("saquery_pr__tenant_pkey_0x8001_mtu2048_sl0.txt").split("\t\trate")[0])
