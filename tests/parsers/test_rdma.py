"""RDMA device parsers (ibdev2netdev, ibv_devinfo, show_gids, hw_counters, rdma statistic)."""

from __future__ import annotations

import pytest

from tuning.errors import InputError, ParseError
from tuning.parsers import parse
from tuning.parsers.ibv_devinfo import parse_ibv_devinfo
from tuning.parsers.rdma import parse_ibdev2netdev, parse_show_gids, resolve_roce_v2_ipv4_gid
from tuning.parsers.rdma_counters import parse_hw_counters, parse_rdma_statistic
from tuning.parsers.text import size_quantity


def test_ibdev2netdev_sorted_numerically_and_classified(cases_dir):
    r = parse_ibdev2netdev((cases_dir / "ibdev2netdev__mixed_ib_eth_vfs_lexical_order.txt").read_text())
    assert [e.device for e in r.entries] == [f"mlx5_{n}" for n in (0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 19, 20)]
    assert [e.netdev for e in r.entries if e.is_vf] == ["ibp75s0v0", "ibp75s0v1", "ibp75s0v7", "ibp141s0v0"]
    assert [e.device for e in r.entries if e.kind == "eth"] == ["mlx5_4"]
    assert r.netdev_of("mlx5_4") == "enp97s0f0" and r.entries[4].up and not r.entries[3].up


def test_ibdev2netdev_verbose_line():
    r = parse_ibdev2netdev("0000:0c:00.0 mlx5_0 (MT4129 - MCX75310AAS-NEAT) ConnectX-7 fw 28.39.2048 port 1 (ACTIVE)"
                           " ==> enp12s0np0 (Up)\n")
    assert (r.entries[0].bdf, r.entries[0].device, r.entries[0].kind) == ("0000:0c:00.0", "mlx5_0", "eth")


def test_ibv_devinfo_roce_mtu_low(cases_dir):
    r = parse_ibv_devinfo((cases_dir / "ibv_devinfo__roce_multi_hca_one_port_down_mtu1024_tabs.txt").read_text())
    assert [d.hca_id for d in r.devices] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert [d.fw_ver for d in r.devices] == ["28.39.2048", "28.39.2048", "22.38.1900", "28.39.2048"]
    assert [d.vendor_part_id for d in r.devices] == [4129, 4129, 4125, 4129]
    p2, p3 = r.devices[2].ports[0], r.devices[3].ports[0]
    assert (p2.state, p2.active_mtu, p3.state, p3.active_mtu, p3.max_mtu) == ("PORT_DOWN", 1024, "PORT_ACTIVE", 1024, 4096)
    assert p3.link_layer == "Ethernet" and p3.attrs["port_lmc"] == "0x00"
    assert [(f.code, f.subject) for f in r.findings] == [("roce_mtu_low", "mlx5_3/1")]


def test_ibv_devinfo_no_devices():
    r = parse_ibv_devinfo("No IB devices found\n")
    assert r.failure is not None and r.failure.kind == "no_rdma_device" and r.devices == []


def test_show_gids_ipv4_v2_at_index5(cases_dir):
    r = parse_show_gids((cases_dir / "show_gids__ipv4_v2_at_index5_extra_linklocal.txt").read_text())
    assert r.n_gids_found == 6 and [e.index for e in r.entries] == list(range(6))
    assert [e.ipv4 for e in r.entries] == [None] * 4 + ["172.20.5.60"] * 2
    assert resolve_roce_v2_ipv4_gid(r.entries) == 5
    assert resolve_roce_v2_ipv4_gid(r.entries, "172.20.5.60") == 5
    assert resolve_roce_v2_ipv4_gid(r.entries, "10.0.0.1") is None
    assert r.entries[5].netdev == "ens1f0"
    [f] = r.findings  # the usable RoCEv2 IPv4 GID index is a finding: 5, not the usual 3
    assert (f.code, f.severity, f.subject) == ("roce_v2_ipv4_gid", "info", "mlx5_0/1") and "GID index 5" in f.message


def test_show_gids_cli_four_entries(cases_dir):
    r = parse_show_gids((cases_dir / "cli" / "show_gids__four_entries_v1_v2_tabs.txt").read_text())
    assert [(e.index, e.ver) for e in r.entries] == [(0, "v1"), (1, "v2"), (2, "v1"), (3, "v2")]
    assert resolve_roce_v2_ipv4_gid(r.entries, "10.42.14.14") == 3


def test_show_gids_no_roce_v2_ipv4_finding():
    text = ("DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV\n---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---\n"
            "mlx5_1\t1\t0\tfe80:0000:0000:0000:0e42:a1ff:fe5b:7c31\t\t\tv1\tens2\n"
            "mlx5_1\t1\t1\tfe80:0000:0000:0000:0e42:a1ff:fe5b:7c31\t\t\tv2\tens2\nn_gids_found=2\n")
    r = parse_show_gids(text)
    assert [(f.code, f.subject) for f in r.findings] == [("no_roce_v2_ipv4_gid", "mlx5_1/1")]


def test_show_gids_footer_count_must_match(cases_dir):
    text = (cases_dir / "cli" / "show_gids__four_entries_v1_v2_tabs.txt").read_text().replace("n_gids_found=4", "n_gids_found=5")
    with pytest.raises(ParseError, match="n_gids_found=4"):
        parse_show_gids(text)


def test_hw_counters_congestion_and_loss(cases_dir):
    r = parse_hw_counters((cases_dir / "hw_counters__sysfs_grep_mlx5_port1.txt").read_text())
    [port] = r.ports
    assert (port.device, port.port, len(port.counters)) == ("mlx5_0", 1, 14)
    assert (r.get("np_cnp_sent"), r.get("np_ecn_marked_roce_packets"), r.get("out_of_sequence")) == (
        17269947, 11293938, 6140236)
    assert (r.get("packet_seq_err"), r.get("local_ack_timeout_err"), r.get("resp_cqe_error")) == (929974, 91316, 20540)
    assert [f.code for f in r.findings] == ["lossless_drops", "heavy_congestion"]


def test_rdma_statistic_wrapped_pairs_two_links():
    text = ("link mlx5_0/1 rx_write_requests 0 rx_read_requests 0 rx_atomic_requests\n"
            "0 out_of_buffer 135 out_of_sequence 0\nlink mlx5_1/1 np_cnp_sent 5 out_of_sequence 7\n")
    r = parse_rdma_statistic(text)
    assert [(p.device, p.port) for p in r.ports] == [("mlx5_0", 1), ("mlx5_1", 1)]
    assert r.get("out_of_buffer", "mlx5_0") == 135 and r.get("rx_atomic_requests") == 0
    assert [(f.code, f.subject) for f in r.findings] == [("lossless_drops", "mlx5_1/1")]


def test_rdma_statistic_dangling_name_is_truncated():
    with pytest.raises(ParseError):
        parse_rdma_statistic("link mlx5_0/1 rx_write_requests 0 out_of_buffer\n")


def test_size_quantity_binary_units():
    q = size_quantity("146.48", "KB")
    assert (q.value, q.raw, q.unit, q.unit_norm) == (149995.5, "146.48", "KB", "bytes")
    with pytest.raises(ValueError):
        size_quantity("1", "furlongs")


# ibv_devinfo -v as rdma-core devinfo.c prints it (tabs; flag lists under the value column, bare notes,
# GID lines "\t\t\tGID[%3d]:\t\t%s, RoCE v2"); layout after open-mpi/ompi#6184 and openucx/ucx#5045.
IBV_V = (
    "hca_id:\tmlx5_1\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t16.23.1020\n"
    "\tvendor_part_id:\t\t\t4119\n\tphys_port_cnt:\t\t\t1\n\tmax_qp:\t\t\t\t262144\n"
    "\tdevice_cap_flags:\t\t0xe5721c36\n\t\t\t\t\tBAD_PKEY_CNTR\n\t\t\t\t\tBAD_QKEY_CNTR\n"
    "\t\t\t\t\tXRC\n\t\t\t\t\tUnknown flags: 0xe5620000\n\tatomic_cap:\t\t\tATOMIC_HCA (1)\n"
    "\tlog atomic arg sizes (mask):\t\t0x0000000c\n\ttso_caps:\n\t\tmax_tso:\t\t\t262144\n"
    "\ttag matching not supported\n\tnum_comp_vectors:\t\t63\n"
    "\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tmax_mtu:\t\t4096 (5)\n"
    "\t\t\tactive_mtu:\t\t4096 (5)\n\t\t\tlink_layer:\t\tEthernet\n\t\t\tmax_vl_num:\t\tinvalid value (0)\n"
    "\t\t\tphys_state:\t\tLINK_UP (5)\n"
    "\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:0e42:a1ff:fe5b:7c31, RoCE v1\n"
    "\t\t\tGID[  1]:\t\tfe80::e42:a1ff:fe5b:7c31, RoCE v2\n"
    "\t\t\tGID[  2]:\t\t0000:0000:0000:0000:0000:ffff:0a2a:0e0e, RoCE v1\n"
    "\t\t\tGID[  3]:\t\t::ffff:10.42.14.14, RoCE v2\n\n"
)


def test_ibv_devinfo_verbose_flags_notes_and_gid_table():
    r = parse_ibv_devinfo(IBV_V)
    [dev] = r.devices
    assert (dev.fw_ver, dev.vendor_part_id, dev.attrs["max_qp"], dev.attrs["atomic_cap"]) == (
        "16.23.1020", 4119, "262144", "ATOMIC_HCA (1)")
    assert dev.flags["device_cap_flags"] == ["BAD_PKEY_CNTR", "BAD_QKEY_CNTR", "XRC", "Unknown flags: 0xe5620000"]
    assert dev.attrs["log atomic arg sizes (mask)"] == "0x0000000c" and dev.attrs["max_tso"] == "262144"
    assert dev.notes == ["tag matching not supported"]
    [port] = dev.ports
    assert (port.state, port.active_mtu, port.attrs["max_vl_num"]) == ("PORT_ACTIVE", 4096, "invalid value (0)")
    assert [(g.index, g.ver, g.ipv4) for g in port.gids] == [(0, "v1", None), (1, "v2", None),
                                                             (2, "v1", "10.42.14.14"), (3, "v2", "10.42.14.14")]
    assert port.gids[1].gid == "fe80:0000:0000:0000:0e42:a1ff:fe5b:7c31"  # inet_ntop form normalised
    assert port.gids[3].gid == "0000:0000:0000:0000:0000:ffff:0a2a:0e0e"
    assert [(f.code, f.severity, f.subject) for f in r.findings] == [("roce_v2_ipv4_gid", "info", "mlx5_1/1")]
    assert "GID index 3" in r.findings[0].message


def test_ibv_devinfo_verbose_without_v2_ipv4_gid_and_ipv4_context():
    no_v2 = IBV_V.replace("::ffff:10.42.14.14, RoCE v2", "0000:0000:0000:0000:0000:ffff:0a2a:0e0f, RoCE v1")
    assert [f.code for f in parse_ibv_devinfo(no_v2).findings] == ["no_roce_v2_ipv4_gid"]
    r = parse("ibv_devinfo", IBV_V, {"ipv4": "10.9.9.9"})
    assert [f.code for f in r.findings] == ["no_roce_v2_ipv4_gid"] and "10.9.9.9" in r.findings[0].message
    assert [f.code for f in parse("ibv_devinfo", IBV_V, {"ipv4": "10.42.14.14"}).findings] == ["roce_v2_ipv4_gid"]


def test_ibv_devinfo_failed_to_open_lines_are_warnings_and_bad_gid_raises():
    r = parse_ibv_devinfo("Failed to open device\n" + IBV_V)
    assert r.warnings == ["Failed to open device"] and len(r.devices) == 1
    with pytest.raises(ParseError) as exc:
        parse_ibv_devinfo(IBV_V.replace("::ffff:10.42.14.14", "::ffff:zz"))
    assert exc.value.line_no == 28 and "GID[  3]" in exc.value.line
    with pytest.raises(ParseError):  # a bare line inside a port section: the output is not ibv_devinfo's
        parse_ibv_devinfo(IBV_V.replace("\t\t\tphys_state:\t\tLINK_UP (5)", "\t\t\tphys_state"))


def test_show_gids_ipv4_context_picks_the_index_for_that_address(cases_dir):
    text = (cases_dir / "show_gids__ipv4_v2_at_index5_extra_linklocal.txt").read_text()
    [f] = parse("show-gids", text, {"ipv4": "172.20.5.60"}).findings
    assert (f.code, f.subject) == ("roce_v2_ipv4_gid", "mlx5_0/1") and "GID index 5" in f.message
    [f] = parse("show-gids", text, {"ipv4": "10.0.0.1"}).findings
    assert f.code == "no_roce_v2_ipv4_gid"
    with pytest.raises(InputError):
        parse("show-gids", text, {"ipv4": "not-an-ip"})
    with pytest.raises(InputError):
        parse("show-gids", text, {"bdf": "0000:c1:00.0"})
