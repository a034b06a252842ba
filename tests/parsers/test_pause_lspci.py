"""Parsers of ``ethtool -a`` and ``lspci -vvv`` against real outputs (issue 7, part D).

Sources of the fixtures in ``tests/parsers/cases/`` (published outputs, kept as found; only host names
in prompts may be made up):

- ``lspci__vvv_s_amd_gpp_bridge_acs_redirect_link_downgraded.txt``: ``lspci -vvv -s 0000:03:02.0`` of an
  AMD Matisse PCIe GPP bridge from a public PCIe power-management bug report (found with the code
  search; pciutils 3.7 layout: ``(downgraded)``/``(ok)`` after LnkSta, ACS at ``[2a0 v1]``).
- ``lspci__vvv_old_pciutils_report_errors_one_line_lnksta_spaces.txt``: an Intel 82576 block from a
  public SR-IOV forum post (old pciutils: ``DevCtl: Report errors:``, LnkSta flags on the same line,
  tabs expanded to spaces by the post; the post's Markdown bold around the slot was removed).
- ``lspci__vv_grep_maxreadreq_4096_acsctl_cleared_h200.txt``: ``lspci -vv | grep`` outputs of an NVIDIA
  H200 + BlueField-3 workload guide (MaxReadReq 4096 on every NIC function, ACS cleared).
- ``ethtool_a__ice_autoneg_negotiated_pause_stats_spaces.txt``: the netdev patch "ice: add pause
  stats" (``ethtool -I -a``; tabs expanded by the mail).
- ``ethtool_a__e1000_autoneg_on_tabs.txt``: a public ethtool tutorial (zutuanxue, e1000, real tabs).
- ``shared/cases/cli/ethtool_a__global_pause_formats.txt``: netdev ethtool pause patches (INDEX.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tuning.errors import InputError, ParseError
from tuning.parsers import parse
from tuning.parsers.ethtool_pause import parse_ethtool_a, parse_pfc
from tuning.parsers.lspci import acs_flags, acs_word, line_fields, parse_lspci

CASES = Path(__file__).parent / "cases"


def _outputs(transcript: str) -> list[str]:
    """The outputs of each command of a shell transcript (prompt lines split them)."""
    out: list[list[str]] = []
    for line in transcript.splitlines(keepends=True):
        if line.startswith("[root@"):
            out.append([])
        elif out:
            out[-1].append(line)
    return ["".join(o) for o in out]


def test_ethtool_a_shared_transcript_every_form(cases_dir):
    outs = _outputs((cases_dir / "cli" / "ethtool_a__global_pause_formats.txt").read_text())
    on, set_, off, eno1, wlan0, _ = outs
    r = parse_ethtool_a(on)
    assert (r.ifname, r.autoneg, r.rx, r.tx, r.rx_negotiated, r.value()) == ("ens1f0np0", False, True, True, None,
                                                                            "rx on tx on")
    assert set_ == ""  # a successful ethtool -A is silent
    assert parse_ethtool_a(off).value() == "rx off tx off"
    r = parse_ethtool_a(eno1)
    assert (r.autoneg, r.rx_negotiated, r.tx_negotiated) == (True, True, True)
    r = parse_ethtool_a(wlan0)
    assert (r.ifname, r.rx, r.failure.kind, r.failure.message) == (
        "wlan0", None, "not_supported", "Cannot get device pause settings: Operation not supported")


def test_ethtool_a_pause_beside_pfc_findings_name_the_direction(cases_dir):
    on = _outputs((cases_dir / "cli" / "ethtool_a__global_pause_formats.txt").read_text())[0]
    r = parse("ethtool-a", on, {"pfc": "0,0,0,1,0,0,0,0"})
    assert [(f.code, f.message) for f in r.findings] == [
        ("global-pause-rx", "ens1f0np0: 802.3x pause RX on beside PFC (priority 3): the peer's pause frames "
                            "throttle this NIC on every priority"),
        ("global-pause-tx", "ens1f0np0: 802.3x pause TX on beside PFC (priority 3): this NIC pauses its peer "
                            "(the switch port) on every priority")]
    assert parse("ethtool-a", on, {"pfc": ""}).findings == []  # no PFC: global pause is the only flow control
    assert parse("ethtool-a", on).findings == []
    with pytest.raises(InputError, match="pfc"):
        parse("ethtool-a", on, {"pfc": "9"})
    assert parse_pfc("3,4") == [3, 4] and parse_pfc("0,0,0,1,1,0,0,0") == [3, 4] and parse_pfc("") == []


def test_ethtool_a_published_copies_with_spaces_stats_and_prompt():
    r = parse_ethtool_a((CASES / "ethtool_a__ice_autoneg_negotiated_pause_stats_spaces.txt").read_text())
    assert (r.ifname, r.autoneg, r.rx, r.tx, r.rx_negotiated, r.tx_negotiated) == (
        "ens785f0np0", True, False, False, False, False)
    assert r.stats == {"tx_pause_frames": 0, "rx_pause_frames": 0}
    r = parse_ethtool_a((CASES / "ethtool_a__e1000_autoneg_on_tabs.txt").read_text())
    assert (r.ifname, r.autoneg, r.value()) == ("ens33", True, "rx off tx off")


def test_ethtool_a_refuses_what_it_cannot_read():
    with pytest.raises(ParseError):
        parse_ethtool_a("Settings for eth0:\n")
    with pytest.raises(ParseError):
        parse_ethtool_a("Pause parameters for eth0:\nAutonegotiate:\toff\nRX:\t\tmaybe\nTX:\t\ton\n")
    with pytest.raises(ParseError):  # a cut output: TX missing, never read as off
        parse_ethtool_a("Pause parameters for eth0:\nAutonegotiate:\toff\nRX:\t\ton\n")


def test_lspci_amd_bridge_acs_redirect_and_downstream_port_link():
    r = parse_lspci((CASES / "lspci__vvv_s_amd_gpp_bridge_acs_redirect_link_downgraded.txt").read_text())
    [d] = r.devices
    assert (d.bdf, d.kind, d.express, d.driver) == ("0000:03:02.0", "PCI bridge", "Downstream Port", "pcieport")
    assert (d.primary, d.secondary, d.subordinate) == (3, 6, 6)
    assert d.acs_cap == "SrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans+"
    assert d.acs_ctl == "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
    assert acs_word(d.acs_ctl) == 0x001D and d.acs_redirects() == ["ReqRedir", "CmpltRedir"]
    assert (d.max_payload, d.max_read_req) == (128, 512)
    assert (d.link_cap.speed_gts, d.link_cap.width, d.link_sta.speed_gts, d.link_sta.width) == (16.0, 4, 8.0, 4)
    # ACS redirect is a finding; a downstream port slower than its capability is not (the device below sets it)
    assert [f.code for f in r.findings] == ["acs-redirect"]
    assert r.findings[0].message == ("0000:03:02.0: ACS ReqRedir, CmpltRedir on: peer-to-peer traffic below this "
                                     "port is sent up to the root complex")


def test_lspci_old_pciutils_layout_with_spaces():
    r = parse("lspci-vvv", (CASES / "lspci__vvv_old_pciutils_report_errors_one_line_lnksta_spaces.txt").read_text())
    [d] = r.devices
    assert (d.bdf, d.kind, d.express, d.acs_ctl, d.driver) == ("0000:07:00.0", "Ethernet controller", "Endpoint",
                                                               None, "igb")
    assert (d.max_payload, d.max_read_req, d.link_sta.speed_gts, d.link_sta.width) == (256, 4096, 2.5, 4)
    assert r.findings == []


def test_lspci_grepped_lines_maxreadreq_and_cleared_acs():
    lines = [l for l in (CASES / "lspci__vv_grep_maxreadreq_4096_acsctl_cleared_h200.txt").read_text().splitlines()
             if not l.startswith("[root@")]
    fields = [line_fields(l) for l in lines]
    assert fields[:14] == [{"max_payload": 256, "max_read_req": 4096}] * 14
    assert {f["acs_ctl"] for f in fields[14:]} == {"SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- "
                                                   "EgressCtrl- DirectTrans-"}
    assert acs_word(fields[14]["acs_ctl"]) == 0


def test_lspci_tree_access_denied_and_bad_input():
    text = ("0000:0a:00.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0) (prog-if 00 [Normal decode])\n"
            "\tBus: primary=09, secondary=0b, subordinate=0c, sec-latency=0\n"
            "\tCapabilities: <access denied>\n\n"
            "0000:0b:00.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0) (prog-if 00 [Normal decode])\n"
            "\tBus: primary=0b, secondary=0c, subordinate=0c, sec-latency=0\n\n"
            "0000:0c:00.0 Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n"
            "\tCapabilities: <access denied>\n")
    r = parse_lspci(text)
    nic = r.device("0c:00.0")
    assert r.parent(nic).bdf == "0000:0b:00.0" and r.parent(r.parent(nic)).bdf == "0000:0a:00.0"
    assert [d.bdf for d in r.children(r.device("0000:0a:00.0"))] == ["0000:0b:00.0"]
    assert nic.access_denied and nic.max_read_req is None  # unknown, never assumed
    assert [f.code for f in r.findings] == ["lspci-access-denied", "lspci-access-denied"]
    with pytest.raises(ParseError):
        parse_lspci("\tMaxPayload 256 bytes, MaxReadReq 4096 bytes\n")
    with pytest.raises(ParseError):
        parse_lspci("0000:0b:00.0 PCI bridge: X\n\t\tACSCtl:\tSrcValid+ TransBlk-\n")
    with pytest.raises(ValueError):
        acs_flags("SrcValid+ TransBlk- ReqRedir+")
