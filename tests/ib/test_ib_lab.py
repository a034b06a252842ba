"""The IB lab over the real OpenSM 3.3.23 on Debian's ibsim 0.10 (issue 22): the fabric comes up,
faults injected at run time read back through the real infiniband-diags and fabtune's parsers.

One lab for the module (about 1 s to start); every test puts back what it injected, so the tests
pass in any order (``FABTUNE_TEST_REVERSE=1``). Without the Debian packages the fixture raises
SetupError: the tests fail, never skip (``.ci/run`` installs them).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tuning.lab.fabric import default_fabric
from tuning.lab.ib import DEFAULT_PARTITIONS, IbLab
from tuning.lab.ib_partitions import IbMember, IbPartition
from tuning.parsers.ib_counters import parse_ibqueryerrors, parse_perfquery
from tuning.parsers.ib_links import parse_iblinkinfo
from tuning.parsers.ib_sm import parse_pkeys, parse_saquery_pr, parse_sminfo

pytestmark = pytest.mark.lab

TENANT = IbPartition("tenant1", 0x0001, (IbMember("node01-mlx5_0", "full"), IbMember("node02-mlx5_0", "limited")),
                     ipoib=True, mtu=5, sl=3)


@pytest.fixture(scope="module")
def ib(tmp_path_factory):
    lab = IbLab(tmp_path_factory.mktemp("iblab"), partitions=DEFAULT_PARTITIONS + (TENANT,))
    lab.convergence_s = lab.up()
    yield lab
    assert lab.down()
    assert not list(lab.dir.glob("sys-*")), "libumad2sim's fake sysfs folders left behind"


def _links(ib: IbLab):
    return parse_iblinkinfo(ib.run("iblinkinfo"))


def _pkeys(ib: IbLab, node_id: str):
    return parse_pkeys(ib.run("smpquery", "pkeys", "-G", hex(ib.topology.hca(node_id).port_guid), "1"))


def _wait(check, timeout_s: float = 15.0):
    deadline = time.monotonic() + timeout_s
    while not (result := check()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return result


def test_sm_is_master_and_every_hca_port_active_at_4x_hdr(ib):
    sm = parse_sminfo(ib.run("sminfo"))
    assert (sm.state_name, sm.sm_guid, sm.findings) == ("MASTER", f"{ib.topology.leaves['leaf01'][0]:#x}", [])
    assert ib.convergence_s < 10, ib.convergence_s
    links = _links(ib)
    for hca in ib.topology.hcas:
        port = links.port(hca.description, 1)
        assert (port.state, port.phys_state, port.width, port.speed, port.rate_gbps) == \
            ("Active", "LinkUp", "4X", "53.125 Gbps", 200.0), port
        assert (port.port_guid, port.remote.name, port.remote.port) == (f"{hca.port_guid:#018x}", hca.leaf, hca.leaf_port)
    assert links.degraded("4X", "HDR") == []


def test_injected_1x_width_reads_degraded_with_its_could_be_hint(ib):
    hca = ib.topology.hca("node02-mlx5_3")
    ib.set_width(hca.node_id, "1X")
    try:
        links = _links(ib)
        port = links.port(hca.description, 1)
        # ibsim 0.10 reports every port able to run 12X, so the hint says 12X (a ConnectX-7: 4X)
        assert (port.width, port.could_be_width, port.rate_gbps, port.state) == ("1X", "12X", 50.0, "Active")
        bad = {(p.node, p.port) for p in links.degraded("4X", "HDR")}
        assert bad == {(hca.description, 1), (hca.leaf, hca.leaf_port)}
        assert links.findings == []  # no finding without the intent (--context width=4X)
    finally:
        ib.set_width(hca.node_id, "4X")
    assert _links(ib).degraded("4X", "HDR") == []


def test_injected_symbol_errors_read_by_perfquery_and_ibqueryerrors(ib):
    hca = ib.topology.hca("node03-mlx5_4")
    ib.set_counter(hca.node_id, "SymbolErrorCounter", 4242)
    try:
        pq = parse_perfquery(ib.run("perfquery", "-G", hex(hca.port_guid), "1"))
        assert pq.blocks[0].errors == {"SymbolErrorCounter": 4242} and pq.blocks[0].port == 1
        qe = parse_ibqueryerrors(ib.run("ibqueryerrors", ok_codes=(1,)))
        assert qe.of(hca.description, 1) == {"SymbolErrorCounter": 4242}
        assert [f.subject for f in qe.findings] == [f"{hca.description} port 1"] and qe.bad_ports == 1
        ib.set_counter(hca.node_id, "SymbolErrorCounter", 65535)
        assert parse_perfquery(ib.run("perfquery", "-G", hex(hca.port_guid), "1")).blocks[0].saturated == \
            ["SymbolErrorCounter"]
    finally:
        ib.set_counter(hca.node_id, "SymbolErrorCounter", 0)
    assert parse_ibqueryerrors(ib.run("ibqueryerrors")).ports == []


def test_partition_pkey_is_full_on_one_hca_and_limited_on_another(ib):
    full, limited, other = _pkeys(ib, "node01-mlx5_0"), _pkeys(ib, "node02-mlx5_0"), _pkeys(ib, "node03-mlx5_0")
    assert [e.raw for e in full.entries] == ["0xffff", "0x8001"] and full.membership(0x0001) == "full"
    assert [e.raw for e in limited.entries] == ["0xffff", "0x0001"] and limited.membership(0x0001) == "limited"
    assert other.membership(0x0001) is None and other.membership(0x7FFF) == "full"
    lid = {p.node: p.lid for p in _links(ib).ports if p.node_type == "CA"}
    pr = parse_saquery_pr(ib.run("saquery", "PR", "--src-to-dst", f"{lid['node01 mlx5_0']}:{lid['node02 mlx5_0']}",
                                 "--pkey", "0x8001"))
    # ibsim's ports cap the MTU at 2048 (the partition asks 4096); QoS is off, so the SL is 0
    assert [(r.pkey, r.mtu_bytes, r.rate_gbps, r.sl) for r in pr.records] == [(0x8001, 2048, 200.0, 0)]


def test_dropping_the_default_rule_leaves_the_hcas_limited_members(ib):
    before = Path(ib.dir / "partitions.conf").read_text()
    ib.set_partitions((TENANT,))
    try:
        assert _pkeys(ib, "node03-mlx5_0").membership(0x7FFF) == "limited"
        assert _pkeys(ib, "node01-mlx5_0").membership(0x0001) == "full"
    finally:
        ib.set_partitions(DEFAULT_PARTITIONS + (TENANT,))
    assert Path(ib.dir / "partitions.conf").read_text() == before
    assert _pkeys(ib, "node03-mlx5_0").membership(0x7FFF) == "full"


def test_link_down_and_back(ib):
    hca = ib.topology.hca("node04-mlx5_6")
    ib.link_down(hca.node_id)
    try:
        links = _links(ib)
        leaf = links.port(hca.leaf, hca.leaf_port)
        assert (leaf.state, leaf.phys_state, leaf.remote) == ("Down", "Polling", None)
        assert hca.description not in {p.node for p in links.ports}  # the SM no longer reaches it
    finally:
        ib.link_up(hca.node_id)
    port = _wait(lambda: next((p for p in _links(ib).ports if p.node == hca.description and p.state == "Active"), None))
    assert port is not None and port.width == "4X"


def test_a_partition_sl_reaches_its_path_records_only_with_qos_on(tmp_path):
    lab = IbLab(tmp_path, default_fabric(n_nodes=2), partitions=DEFAULT_PARTITIONS + (TENANT,), qos=True)
    lab.up()
    try:
        lid = {p.node: p.lid for p in parse_iblinkinfo(lab.run("iblinkinfo")).ports if p.node_type == "CA"}
        pair = f"{lid['node01 mlx5_0']}:{lid['node02 mlx5_0']}"
        tenant = parse_saquery_pr(lab.run("saquery", "PR", "--src-to-dst", pair, "--pkey", "0x8001")).records
        default = parse_saquery_pr(lab.run("saquery", "PR", "--src-to-dst", pair, "--pkey", "0xffff")).records
        assert [(r.pkey, r.sl) for r in tenant + default] == [(0x8001, 3), (0xFFFF, 0)]
    finally:
        assert lab.down()
