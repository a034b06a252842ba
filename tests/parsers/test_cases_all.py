"""Every reference output in shared/cases (and the parseable ones in shared/cases/cli) is read by the
parser of its tool, with the headline value of INDEX.md; a new file without a tool here fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuning.parsers import parse

#: file-name prefix (before ``__``) -> tool name of ``fabtune parse``
PREFIX_TOOL = {
    "ethtool_S": "ethtool-S", "hw_counters": "hw-counters", "ib_read_lat": "ib_read_lat", "ib_write_bw": "ib_write_bw",
    "ibdev2netdev": "ibdev2netdev", "ibv_devinfo": "ibv_devinfo", "lscpu": "lscpu", "mlnx_qos": "mlnx_qos",
    "mlxconfig": "mlxconfig", "mlxfwmanager": "mlxfwmanager", "nccl_tests": "nccl-tests", "numactl_H": "numactl-H",
    "nv_show_interface": "nv-show-interface", "nv_show_qos_roce": "nv-show-qos-roce",
    "nvidia_smi_topo_m": "nvidia-smi-topo", "proc_interrupts": "interrupts",
    "rping": "rping",
    "show_gids": "show-gids", "sonic_show_pfc_counters": "sonic-pfc-counters",
    "sonic_show_queue_counters": "sonic-queue-counters",
    "nvue_show_interface_qos_roce_status": "nv-show-qos-roce",
}
#: cli/ switch transcripts whose prefix (``sonic``, ``eos``) names no one tool -> the tool that reads them
#: (INDEX-switch.md; the others are logins, prompts, session flows and the EOS running-config, which
#: tuning.switch.eos_keys reads)
FILE_TOOL = {
    "sonic__show_interfaces_status.txt": "sonic-show-interfaces-status", "sonic__show_pfc_counters.txt": "sonic-show-pfc-counters",
    "sonic__show_queue_counters_namespace_header_raw.txt": "sonic-show-queue-counters",
    "sonic__ecnconfig_l_show_ecn_q.txt": "sonic-ecnconfig", "sonic__config_db_json_roce_qos_tables.txt": "sonic-config-db",
    "sonic__apply_patch_roce_success.txt": "sonic-apply-patch",
    "sonic__apply_patch_failure_yang_invalid_value.txt": "sonic-apply-patch",
    "sonic__checkpoint_list_rollback_delete.txt": "sonic-checkpoints",
    "eos__show_interfaces_json_mtu.txt": "eos-show-interfaces-json",
    "eos__show_configuration_sessions_detail_json_pre_4_32.txt": "eos-show-sessions-json",
}
#: cli/ transcripts read by a registered parser (the others are sysfs files and NVUE sessions, see SYSFS.md)
CLI_PARSEABLE = ("mlnx_qos__set_trust_dscp_pfc3_prints_full_status.txt", "show_gids__four_entries_v1_v2_tabs.txt",
                 "nvue_show_interface_qos_roce_status__lossless.txt", *FILE_TOOL)
#: file -> (dotted path into the JSON result, value from INDEX.md), or the finding code INDEX.md names
HEADLINE = {
    "ethtool_S__mlx5_grep_prio3_pause_discards_roce_congested.txt": ("counters.rx_discards_phy", 18233),
    "hw_counters__sysfs_grep_mlx5_port1.txt": ("ports.0.counters.np_cnp_sent", 17269947),
    "ib_read_lat__roce_mtu1024_gid12_cpufreq_warnings.txt": ("lat_rows.0.t_typical", 7.04),
    "ib_write_bw__client_all_sizes_gbits_mtu1024_gid5.txt": ("gid_index", 5),
    "ib_write_bw__client_err_couldnt_connect_concatenated.txt": ("failure.kind", "connect_failed"),
    "ib_write_bw__client_err_modify_qp_rtr.txt": ("local_qpn", 263),
    "ib_write_bw__roce_client_MiBsec_new_perftest.txt": ("bw_rows.0.bw_avg.raw", "45428.46"),
    "ib_write_bw__roce_server_duration_mbsec_peak0_tabs.txt": ("bw_rows.0.bw_peak", None),
    "ibdev2netdev__mixed_ib_eth_vfs_lexical_order.txt": ("entries.8.device", "mlx5_10"),
    "ibv_devinfo__roce_multi_hca_one_port_down_mtu1024_tabs.txt": ("devices.3.ports.0.active_mtu", 1024),
    "lscpu__util_linux_new_grouped_sections.txt": ("cpus", 56),
    "mlnx_qos__legacy_trust_dscp_pfc3_tsa_vendor.txt": ("trust", "dscp"),
    "mlxconfig__e_q_default_current_nextboot_pending_narrow_layout.txt": ("devices.0.params.NUM_OF_VFS.next_boot", "16"),
    "mlxfwmanager__query_two_devices_update_required_and_no_image.txt": ("devices.1.status_kind", "no_image"),
    "nccl_tests__all_reduce_2node_good_new_format.txt": ("avg_busbw.raw", "19.7866"),
    "numactl_H__2node_ht_siblings_high_range.txt": ("distances.0.1", 21),
    "nv_show_interface__summary_with_continuation_rows.txt": ("findings.0.subject", "swp51"),
    "nv_show_qos_roce__lossless_single_ipool_enable_on.txt": ("applied.enable", "on"),
    "nvidia_smi_topo_m__8gpu_10nic_raw_tabs_ansi_header_gpu_numa_id.txt": ("nic_legend.NIC1", "mlx5_3"),
    "nvidia_smi_topo_m__single_gpu_phb.txt": ("findings.0.code", "gpu_nic_far"),
    "proc_interrupts__32cpu_mlx5_msix_irqs_on_remote_numa.txt": ("irqs.0.irq", "0"),
    "rping__client_verbose_ok.txt": ("pings.2.index", 2),
    "show_gids__ipv4_v2_at_index5_extra_linklocal.txt": ("findings.0.message", "GID index 5"),
    "sonic_show_pfc_counters__cached_time_commas_pfc3_tx.txt": ("tx.Ethernet6.3", 15437),
    "sonic_show_queue_counters__lossless_uc3_drops.txt": ("queues.3.counters.Drop/pkts", 1203),
    "cli/sonic__show_interfaces_status.txt": ("findings.0.subject", "Ethernet16"),
    "cli/sonic__show_pfc_counters.txt": ("rx.Ethernet0.3", 1284551),
    "cli/sonic__show_queue_counters_namespace_header_raw.txt": ("queues.3.counters.Counter/bytes", 8060183452116),
    "cli/sonic__ecnconfig_l_show_ecn_q.txt": ("profiles.AZURE_LOSSLESS.green_min_threshold", 1048576),
    "cli/sonic__config_db_json_roce_qos_tables.txt": ("ports.0.dscp_to_tc.26", 3),
    "cli/sonic__apply_patch_roce_success.txt": ("success", True),
    "cli/sonic__apply_patch_failure_yang_invalid_value.txt": ("failure.kind", "invalid_config"),
    "cli/sonic__checkpoint_list_rollback_delete.txt": ("findings.0.code", "checkpoint_missing"),
    "cli/eos__show_interfaces_json_mtu.txt": ("interfaces.0.mtu", 9214),
    "cli/eos__show_configuration_sessions_detail_json_pre_4_32.txt": ("pending_commit", "fabtune-roce"),
}


def _files(cases_dir: Path) -> list[Path]:
    return sorted(cases_dir.glob("*.txt")) + [cases_dir / "cli" / n for n in CLI_PARSEABLE]


def _get(doc: object, path: str) -> object:
    for part in path.split("."):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]  # type: ignore[index]
    return doc


def test_every_case_file_has_a_tool_and_a_headline(cases_dir):
    names = {p.name for p in cases_dir.glob("*.txt")}
    assert names and {n.split("__")[0] for n in names} <= set(PREFIX_TOOL)
    assert names <= set(HEADLINE), sorted(names - set(HEADLINE))


@pytest.mark.parametrize("name", sorted(set(HEADLINE) | {f"cli/{n}" for n in CLI_PARSEABLE}))
def test_case_file_parses_with_its_index_value(cases_dir, name):
    path = cases_dir / name
    assert path.is_file(), f"{name} missing from shared/cases"
    tool = FILE_TOOL.get(path.name) or PREFIX_TOOL[path.name.split("__")[0]]
    doc = parse(tool, path.read_text()).model_dump(mode="json")
    if name in HEADLINE:
        key, want = HEADLINE[name]
        got = _get(doc, key)
        assert (want in got) if isinstance(want, str) and key.endswith("message") else got == want, (key, got)
