"""Switch show-command parsers (NVUE, SONiC) against shared/cases."""

from __future__ import annotations

import pytest

from tuning.errors import InputError, ParseError
from tuning.parsers import parse
from tuning.parsers.sonic import parse_sonic_pfc_counters, parse_sonic_queue_counters
from tuning.parsers.switch import parse_nv_roce_counters, parse_nv_show_interface, parse_nv_show_qos_roce


def test_nv_show_qos_roce_lossless_single_ipool(cases_dir):
    r = parse_nv_show_qos_roce((cases_dir / "nv_show_qos_roce__lossless_single_ipool_enable_on.txt").read_text())
    op, ap = r.operational, r.applied
    assert (op.enable, ap.enable) == (None, "on")  # operational blank, applied on
    assert op.mode == ap.mode == "lossless-single-ipool"
    assert (op.pfc_priorities, op.ecn_enabled_tcs, op.trust_mode, op.probability) == ([3], [0, 3], ["pcp", "dscp"], 100)
    assert op.min_threshold is not None and (op.min_threshold.raw, op.min_threshold.unit) == ("146.48", "KB")
    assert abs(op.min_threshold.value - 146.48 * 1024) < 1  # NVUE's KB is 2^10 (default 150000 B)
    assert op.max_threshold is not None and abs(op.max_threshold.value - 1.43 * 2**20) < 1
    assert r.tree["pfc.cable-length"].operational == "100" and r.tree["lldp-app-tlv.protocol-id"].operational == "4791"
    assert {d for d, sp in r.dscp2sp.items() if sp == 3} == set(range(24, 32)) and len(r.dscp2sp) == 64
    assert (r.sp2tc[3], r.sp2tc[6], r.sp2tc[0]) == (3, 6, 0)
    assert (r.sp_scheduler[3], r.sp_scheduler[6]) == ("DWRR-50%", "strict-priority")
    pools = r.tables["RoCE pool config"]
    assert [p["name"] for p in pools] == ["lossy-default-ingress", "lossy-default-egress", "roce-reserved-egress"]
    assert pools[2]["size"] == "inf" and pools[2]["switch-priorities"] is None
    assert r.tables["Exception List"] == []


def test_nv_show_interface_qos_roce_status(cases_dir):
    r = parse_nv_show_qos_roce((cases_dir / "cli" / "nvue_show_interface_qos_roce_status__lossless.txt").read_text())
    op = r.operational
    assert (op.mode, op.congestion_mode, op.pfc_priorities, op.ecn_enabled_tcs) == ("lossless", "ecn, absolute", [3], [0, 3])
    assert op.min_threshold is not None and op.min_threshold.value == 153 * 1024
    assert r.tree["mode"].description == "Roce Mode" and r.tree["mode"].applied is None
    assert (r.dscp2sp, r.pcp2sp, r.sp2tc) == ({48: 6, 26: 3}, {6: 6, 3: 3}, {6: 6, 3: 3})
    assert r.sp_scheduler == {6: "strict priority", 3: "dwrr-50%"}
    pool = r.tables["RoCE Pool Status"][1]
    assert (pool["name"], pool["current-usage"], pool["max-usage"]) == ("roce-reserved-ingress", "7.30 MB", "7.90 MB")


def test_nv_show_interface_mtu_and_continuations(cases_dir):
    r = parse_nv_show_interface((cases_dir / "nv_show_interface__summary_with_continuation_rows.txt").read_text())
    assert [i.name for i in r.interfaces][:3] == ["esxi01", "eth0", "lo"] and len(r.interfaces) == 10
    swp51 = r.get("swp51")
    assert swp51 is not None and (swp51.mtu, swp51.speed, swp51.state, swp51.remote_host, swp51.remote_port) == (
        1500, "100G", "up", "spine01", "swp1")
    lo = r.get("lo")
    assert lo is not None and lo.summary == ["IP Address:       127.0.0.1/8", "IP Address:           ::1/128"]
    assert (lo.mtu, lo.speed, lo.type) == (65536, None, "loopback")
    assert r.get("swp52").state == "down" and r.get("swp1").remote_port == "44:38:39:00:00:99"
    assert [(f.code, f.subject) for f in r.findings] == [("mtu_mismatch", "swp51")]


def test_sonic_pfc_counters_commas(cases_dir):
    r = parse_sonic_pfc_counters((cases_dir / "sonic_show_pfc_counters__cached_time_commas_pfc3_tx.txt").read_text())
    assert (r.tx["Ethernet6"][3], r.tx["Ethernet4"][3], r.rx["Ethernet6"][3]) == (15437, 2019, 1234)
    assert len(r.rx) == len(r.tx) == 8 and r.cached_time == "2024-03-11 09:41:07.117256"
    assert sum(sum(v) for v in r.rx.values()) == 1234


def test_sonic_queue_counters_uc3_drops(cases_dir):
    r = parse_sonic_queue_counters((cases_dir / "sonic_show_queue_counters__lossless_uc3_drops.txt").read_text())
    assert [q.queue for q in r.queues] == [f"UC{i}" for i in range(8)] + [f"MC{i}" for i in range(8, 16)]
    uc3 = r.queues[3]
    assert (uc3.drop_pkts, uc3.counters["Drop/bytes"], uc3.counters["Counter/bytes"]) == (1203, 4932011, 371823101223)
    assert [(f.code, f.subject) for f in r.findings] == [("lossless_drops", "Ethernet0 UC3")]


# `nv show interface swp16 qos roce counters` as the Cumulus Linux 5.12 RoCE page prints it (part of it)
ROCE_COUNTERS = """cumulus@switch:mgmt:~$ nv show interface swp16 qos roce counters
                               operational   applied  description
-----------------------------  ------------  -------  ------------------------------------------------------
rx-stats
  rx-non-roce-stats
    buffer-max-usage           144 Bytes              Max Ingress Pool-buffer usage for non-RoCE traffic
    no-buffer-discard          55                     Rx buffer discards for non-RoCE traffic
    non-roce-bytes             56.52 MB               non-roce rx bytes
  rx-pfc-stats
    pause-duration             0                      Rx PFC pause duration for RoCE traffic
    pause-packets              0                      Rx PFC pause packets for RoCE traffic
  rx-roce-stats
    buffer-max-usage           0 Bytes                Max Ingress Pool-buffer usage for RoCE traffic
    no-buffer-discard          0                      Rx buffer discards for RoCE traffic
tx-stats
  tx-cnp-stats
    unicast-no-buffer-discard  0                      Tx buffer discards for CNP traffic
  tx-ecn-stats
    ecn-marked-packets         693777677344           Tx ECN marked packets
  tx-roce-stats
    buffer-max-usage           13.47 MB               Max Egress Pool-buffer usage for RoCE traffic
    roce-bytes                 92824.38 GB            Tx RoCE Packet bytes
    roce-packets               803785675319           Tx RoCE Packets
    unicast-no-buffer-discard  663060754115           Tx buffer discards for RoCE traffic
"""


def test_nv_show_interface_qos_roce_counters():
    r = parse_nv_roce_counters(ROCE_COUNTERS)
    assert r.interface == "swp16" and r.tool == "nv-show-interface-qos-roce-counters"
    assert r.counts["rx-stats.rx-non-roce-stats.no-buffer-discard"] == 55
    assert r.counts["tx-stats.tx-ecn-stats.ecn-marked-packets"] == 693777677344
    assert r.sizes["rx-stats.rx-non-roce-stats.buffer-max-usage"].value == 144
    assert r.sizes["rx-stats.rx-roce-stats.buffer-max-usage"].value == 0  # same leaf, other parent
    assert r.sizes["tx-stats.tx-roce-stats.roce-bytes"].value == round(92824.38 * 2**30, 1)
    assert r.tree["tx-stats.tx-roce-stats.roce-packets"].description == "Tx RoCE Packets"
    assert [(f.code, f.subject) for f in r.findings] == [
        ("lossless_drops", "swp16 tx-stats.tx-roce-stats.unicast-no-buffer-discard")]  # non-RoCE discards: lossy
    same = parse_nv_show_interface(ROCE_COUNTERS)  # `nv-show-interface` hands the counter tree over
    assert same.model_dump() == r.model_dump()


def test_nv_roce_counters_bad_value_names_the_line():
    with pytest.raises(ParseError) as exc:
        parse_nv_roce_counters(ROCE_COUNTERS.replace("663060754115", "lots"))
    assert exc.value.line_no == 24 and "unicast-no-buffer-discard" in exc.value.line


def test_sonic_queue_counters_lossless_queues_context(cases_dir):
    text = (cases_dir / "sonic_show_queue_counters__lossless_uc3_drops.txt").read_text()
    assert parse("sonic-queue-counters", text, {"lossless_queues": "4"}).findings == []
    [f] = parse("sonic-queue-counters", text, {"lossless_queues": "3"}).findings
    assert (f.code, f.subject) == ("lossless_drops", "Ethernet0 UC3")
    with pytest.raises(InputError):
        parse("sonic-queue-counters", text, {"lossless_queues": "9"})
