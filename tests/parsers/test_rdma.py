"""RDMA device parsers (ibdev2netdev, ibv_devinfo, show_gids, hw_counters, rdma statistic)."""

from __future__ import annotations

import pytest

from tuning.errors import ParseError
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
    assert r.entries[5].netdev == "ens1f0" and r.findings == []


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
