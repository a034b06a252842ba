"""NIC tool parsers (mlnx_qos, mlxconfig, mlxfwmanager, ethtool -S) against shared/cases (values from INDEX.md)."""

from __future__ import annotations

import pytest

from tuning.errors import ParseError
from tuning.parsers import parse
from tuning.parsers.mlxtools import parse_mlxconfig, parse_mlxfwmanager
from tuning.parsers.nic import parse_ethtool_s, parse_mlnx_qos

DEFAULT_DSCP2PRIO = {d: d // 8 for d in range(64)}


def test_mlnx_qos_legacy_layout(cases_dir):
    r = parse_mlnx_qos((cases_dir / "mlnx_qos__legacy_trust_dscp_pfc3_tsa_vendor.txt").read_text())
    assert (r.dcbx_mode, r.trust, r.cable_len) == ("os", "dscp", 7)
    assert r.pfc_enabled == [False, False, False, True, False, False, False, False] and r.pfc_priorities == [3]
    assert r.dscp2prio == DEFAULT_DSCP2PRIO and {d for d, p in r.dscp2prio.items() if p == 3} == set(range(24, 32))
    assert [t.tc for t in r.tcs] == list(range(8))
    assert r.prio2tc()[1] == 0 and r.prio2tc()[0] == 1  # tc0 <-> prio1 swapped, as printed
    assert {t.tsa for t in r.tcs} == {"vendor"} and all(t.ratelimit_gbps is None for t in r.tcs)
    assert r.buffer_sizes is None and r.prio2buffer is None and r.failure is None


def test_mlnx_qos_set_command_full_status_transcript(cases_dir):
    r = parse_mlnx_qos((cases_dir / "cli" / "mlnx_qos__set_trust_dscp_pfc3_prints_full_status.txt").read_text())
    assert (r.trust, r.pfc_priorities, r.dscp2prio[26]) == ("dscp", [3], 3)
    assert [t.tc for t in r.tcs][:3] == [1, 0, 2]  # first-seen order under Python 3
    assert r.buffer_sizes == [130944, 130944, 0, 0, 0, 0, 0, 0] and r.total_size == 1027584
    assert r.max_buffer_size is None and r.prio2buffer == [0, 0, 0, 1, 0, 0, 0, 0]
    assert r.errors == ["pfc list must have 8 items", "Invalid trust state command. Refer to the help."]
    assert r.failure is not None and r.failure.kind == "rejected"


def test_mlnx_qos_lldpad_banner_newer_buffers_and_ets():
    text = ("****** WARNING: lldpad service is running and may overwrite your settings ******\n\n"
            "DCBX mode: Firmware controlled\nPriority trust state: pcp\ndefault priority:\n"
            "Receive buffer size (bytes): 20352,156096,0,0,0,0,0,0,max_buffer_size=1027584\nCable len: 7\n"
            "PFC configuration:\n\tpriority    0   1   2   3   4   5   6   7\n"
            "\tenabled     0   0   0   1   1   0   0   0   \n\tbuffer      0   0   0   1   1   0   0   0   \n"
            "tc: 0 ratelimit: 25.0 Gbps, tsa: ets, bw: 50%\n\t priority:  0\n\t priority:  1\n\t priority:  2\n"
            "tc: 3 ratelimit: unlimited, tsa: ets, bw: 50%\n" + "".join(f"\t priority:  {p}\n" for p in range(3, 8)))
    r = parse_mlnx_qos(text)
    assert r.warnings == ["WARNING: lldpad service is running and may overwrite your settings"]
    assert (r.dcbx_mode, r.trust, r.dscp2prio, r.max_buffer_size) == ("fw", "pcp", {}, 1027584)
    assert r.pfc_priorities == [3, 4]
    assert (r.tcs[0].ratelimit_gbps, r.tcs[0].tsa, r.tcs[0].bw_percent, r.tcs[0].priorities) == (25.0, "ets", 50, [0, 1, 2])


def test_mlnx_qos_error_only_is_a_failure_not_a_state():
    r = parse_mlnx_qos("pfc list must have 8 items\n")
    assert r.failure is not None and r.failure.message == "pfc list must have 8 items"
    assert r.trust is None and r.pfc_enabled == []


def test_mlxconfig_pending_reset(cases_dir):
    r = parse_mlxconfig((cases_dir / "mlxconfig__e_q_default_current_nextboot_pending_narrow_layout.txt").read_text())
    [dev] = r.devices
    assert dev.info["Device"] == "0000:02:00.1" and dev.info["Device type"] == "ConnectX5"
    assert [f.subject for f in r.findings] == ["MEMIC_SIZE_LIMIT", "NUM_OF_VFS", "CNP_DSCP_P1", "ROCE_CONTROL"]
    assert {f.code for f in r.findings} == {"mlxconfig_pending_reset"}
    p = dev.params
    assert (p["NUM_OF_VFS"].current, p["NUM_OF_VFS"].next_boot) == ("8", "16")
    assert (p["CNP_DSCP_P1"].current, p["CNP_DSCP_P1"].next_boot) == ("48", "26")
    assert (p["ROCE_CONTROL"].current, p["ROCE_CONTROL"].next_boot) == ("DEVICE_DEFAULT(0)", "ROCE_ENABLE(2)")
    assert p["SRIOV_EN"].starred and not p["SRIOV_EN"].pending  # differs from Default only
    assert p["PHY_FEC_OVERRIDE_P1"].default == "DEVICE_DEFAULT(0)" and not p["PHY_FEC_OVERRIDE_P1"].pending
    assert p["ESWITCH_HAIRPIN_DESCRIPTORS"].current == "Array[0..7]" and len(p) == 21


def test_mlxfwmanager_update_required_and_no_image(cases_dir):
    r = parse_mlxfwmanager((cases_dir / "mlxfwmanager__query_two_devices_update_required_and_no_image.txt").read_text())
    d1, d2 = r.devices
    assert (d1.info["Device Type"], d1.info["PSID"], d1.status_kind) == ("ConnectX6LX", "MT_0000000575", "update_required")
    assert d1.versions == {"FW": ("26.33.1048", "26.43.1014"), "PXE": ("3.6.0502", "3.7.0500"),
                           "UEFI": ("14.26.0017", "14.36.0016")}
    assert d2.info["PCI Device Name"] == "/dev/mst/mt4119_pciconf0" and d2.info["Base GUID"] is None
    assert (d2.versions["FW"], d2.status, d2.status_kind) == (("16.24.4020", None), "No matching image found", "no_image")
    assert [(f.code, f.severity) for f in r.findings] == [("fw_update_required", "info")]
    assert r.failure is None


def test_ethtool_s_discards_and_pfc(cases_dir):
    r = parse_ethtool_s((cases_dir / "ethtool_S__mlx5_grep_prio3_pause_discards_roce_congested.txt").read_text())
    c = r.counters
    assert (c["rx_prio3_pause"], c["tx_prio3_pause"], c["rx_discards_phy"], c["rx_out_of_buffer"]) == (412877, 95120, 18233, 0)
    assert r.pause_priorities == [3] and len(c) == 20
    assert [(f.code, f.subject) for f in r.findings] == [("lossless_drops", "rx_discards_phy")]
    assert "np_cnp_sent" not in c


@pytest.mark.parametrize("tool", ["mlnx_qos", "mlxconfig", "mlxfwmanager", "ethtool-S"])
def test_registered_and_empty_refused(tool):
    with pytest.raises(ParseError):
        parse(tool, "   \n")


# mlxconfig set transcripts as published (mstflint README / user guides): header "Next Boot  New",
# the Apply prompt with its leading space and the echoed answer, then Applying... Done! and the -I- line.
SET_OK = (
    "\nDevice #1:\n----------\n\nDevice type:    ConnectX3\nDevice:         09:00.0\n\n"
    "Configurations:                              Next Boot       New\n"
    "         LINK_TYPE_P1                        IB(1)           ETH(2)\n\n"
    " Apply new Configuration? (y/n) [n] : y\nApplying... Done!\n"
    "-I- Please reboot machine to load new configurations.\n"
)
# newer wide layout (values %-20s, header misaligned, a value wider than its column, RO and lowercase names):
# after k8snetworkplumbingwg/sriov-network-operator#968 and sriov-network-device-plugin#601.
WIDE = (
    "\nDevice #1:\n----------\n\nDevice type:        ConnectX6LX         \nName:               MCX631102AC-ADA_Ax  \n"
    "Description:        ConnectX-6 Lx EN adapter card; 25GbE ; Dual-port SFP28; PCIe 4.0 x8; Crypto and Secure Boot\n"
    "Device:             0108:00:00.0        \n\n"
    "Configurations:                                          Default             Current         Next Boot\n"
    "        CRYPTO_POLICY                               UNRESTRICTED(1)      UNRESTRICTED(1)      UNRESTRICTED(1)     \n"
    "        PCI_ATOMIC_MODE                             PCI_ATOMIC_DISABLED_EXT_ATOMIC_ENABLED(0) "
    "PCI_ATOMIC_DISABLED_EXT_ATOMIC_ENABLED(0) PCI_ATOMIC_DISABLED_EXT_ATOMIC_ENABLED(0)\n"
    "        EXP_ROM_UEFI_x86_ENABLE                     True(1)              True(1)              True(1)             \n"
    "*       NUM_OF_VFS                                  0                    8                    16                  \n"
    " RO     MODULE_SPLIT_M0                             Array[0..15]         Array[0..15]         Array[0..15]        \n"
    "        BOOT_VLAN                                   N/A                  N/A                  N/A                 \n"
    "The '*' shows parameters with next value different from default/current value.\n\n"
    "The 'RO' shows parameters which are for read only and cannot be changed\n"
)


def test_mlxconfig_wide_layout_ro_and_lowercase_names():
    r = parse_mlxconfig(WIDE)
    [dev] = r.devices
    p = dev.params
    assert dev.info["Device"] == "0108:00:00.0" and dev.info["Device type"] == "ConnectX6LX"
    assert p["PCI_ATOMIC_MODE"].next_boot == "PCI_ATOMIC_DISABLED_EXT_ATOMIC_ENABLED(0)"  # overflow, one space
    assert p["EXP_ROM_UEFI_x86_ENABLE"].current == "True(1)"
    assert p["MODULE_SPLIT_M0"].read_only and p["MODULE_SPLIT_M0"].default == "Array[0..15]"
    assert p["BOOT_VLAN"].current is None and not p["BOOT_VLAN"].pending  # N/A is None, never 0
    assert p["NUM_OF_VFS"].starred and (p["NUM_OF_VFS"].current, p["NUM_OF_VFS"].next_boot) == ("8", "16")
    assert (r.command, r.applied, r.reboot_required) == ("query", None, True)
    assert [(f.code, f.subject) for f in r.findings] == [("mlxconfig_pending_reset", "NUM_OF_VFS")]


def test_mlxconfig_set_confirmation_applied():
    r = parse_mlxconfig(SET_OK)
    [dev] = r.devices
    lt = dev.params["LINK_TYPE_P1"]
    assert (lt.next_boot, lt.new, lt.current) == ("IB(1)", "ETH(2)", None)
    assert (r.command, r.answer, r.applied, r.failure, r.reboot_required) == ("set", "y", True, None, True)
    assert r.messages == ["-I- Please reboot machine to load new configurations."]
    [f] = r.findings
    assert (f.code, f.subject) == ("mlxconfig_pending_reset", "LINK_TYPE_P1")
    assert "IB(1) -> ETH(2)" in f.message and "Please reboot machine" in f.message


def test_mlxconfig_set_aborted_failed_and_cut_short():
    aborted = SET_OK.replace("[n] : y\nApplying... Done!\n-I- Please reboot machine to load new configurations.\n",
                             "[n] : n\n-E- Aborted by user.\n")
    r = parse_mlxconfig(aborted)
    assert (r.applied, r.failure.kind, r.failure.message, r.findings) == (False, "aborted", "-E- Aborted by user.", [])
    failed = SET_OK.replace("Applying... Done!\n-I- Please reboot machine to load new configurations.\n",
                            "Applying... Failed!\n-E- Failed to set configuration: Bad parameter value\n")
    r = parse_mlxconfig(failed)
    assert (r.applied, r.failure.kind) == (False, "rejected") and "Bad parameter" in r.failure.message
    with pytest.raises(ParseError, match="Applying... Done!"):
        parse_mlxconfig(SET_OK.split("Applying")[0])
    with pytest.raises(ParseError) as exc:  # a row with a missing value names its line
        parse_mlxconfig(SET_OK.replace("ETH(2)", ""))
    assert exc.value.line_no == 9 and "LINK_TYPE_P1" in exc.value.line


def test_mlxconfig_device_not_found_is_a_classified_failure():
    r = parse_mlxconfig("-E- Failed to open device: 0000:99:00.0. No such file or directory\n")
    assert r.failure is not None and r.failure.kind == "no_rdma_device" and r.devices == []
