"""Robustness of the non-perftest parsers: the same result through CRLF, trailing spaces, ANSI,
prompt/blank noise and re-spacing (where the format is not column-positional), and a ParseError
for empty, binary, truncated and wrong-tool inputs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuning.errors import ParseError
from tuning.parsers import parse

#: tool -> sample file (relative to shared/cases)
SAMPLES = {
    "mlnx_qos": "mlnx_qos__legacy_trust_dscp_pfc3_tsa_vendor.txt",
    "mlxconfig": "mlxconfig__e_q_default_current_nextboot_pending_narrow_layout.txt",
    "mlxfwmanager": "mlxfwmanager__query_two_devices_update_required_and_no_image.txt",
    "ibdev2netdev": "ibdev2netdev__mixed_ib_eth_vfs_lexical_order.txt",
    "ibv_devinfo": "ibv_devinfo__roce_multi_hca_one_port_down_mtu1024_tabs.txt",
    "show-gids": "show_gids__ipv4_v2_at_index5_extra_linklocal.txt",
    "nvidia-smi-topo": "nvidia_smi_topo_m__8gpu_10nic_raw_tabs_ansi_header_gpu_numa_id.txt",
    "interrupts": "proc_interrupts__32cpu_mlx5_msix_irqs_on_remote_numa.txt",
    "lscpu": "lscpu__util_linux_new_grouped_sections.txt",
    "numactl-H": "numactl_H__2node_ht_siblings_high_range.txt",
    "ethtool-S": "ethtool_S__mlx5_grep_prio3_pause_discards_roce_congested.txt",
    "hw-counters": "hw_counters__sysfs_grep_mlx5_port1.txt",
    "nv-show-qos-roce": "nv_show_qos_roce__lossless_single_ipool_enable_on.txt",
    "nv-show-interface": "nv_show_interface__summary_with_continuation_rows.txt",
    "sonic-pfc-counters": "sonic_show_pfc_counters__cached_time_commas_pfc3_tx.txt",
    "sonic-queue-counters": "sonic_show_queue_counters__lossless_uc3_drops.txt",
}
EXTRA = {"mlnx_qos": "cli/mlnx_qos__set_trust_dscp_pfc3_prints_full_status.txt",
         "show-gids": "cli/show_gids__four_entries_v1_v2_tabs.txt",
         "nv-show-qos-roce": "cli/nvue_show_interface_qos_roce_status__lossless.txt",
         "nvidia-smi-topo": "nvidia_smi_topo_m__single_gpu_phb.txt"}
RDMA_STAT = "link mlx5_0/1 rx_write_requests 0 out_of_buffer 135 out_of_sequence 4\nlink mlx5_1/1 np_cnp_sent 5\n"
#: column-positional (NVUE) or indentation-carrying (lscpu) formats: re-spacing changes their meaning.
NOT_RESPACEABLE = {"nv-show-qos-roce", "nv-show-interface", "lscpu"}
#: formats without an end marker, where a cut at a line end is still a complete, valid output.
NO_END_MARKER = {"lscpu", "ethtool-S", "hw-counters", "nv-show-interface", "rdma-statistic"}


CASES = [*SAMPLES.items(), *EXTRA.items(), ("rdma-statistic", None)]
IDS = [f"{tool}-{i}" for i, (tool, _) in enumerate(CASES)]


def _read(cases_dir: Path, name: str | None) -> str:
    return RDMA_STAT if name is None else (cases_dir / name).read_text()


def _dump(tool: str, text: str) -> dict:
    return parse(tool, text).model_dump()


@st.composite
def _noisy(draw: st.DrawFn, text: str, respace: bool) -> str:
    lines = text.split("\n")
    out = []
    for line in lines:
        if respace and draw(st.booleans()):
            head = line[: len(line) - len(line.lstrip())]
            line = head + re.sub(r"[ \t]{2,}|\t", lambda _: " " * draw(st.integers(2, 5)), line[len(head):])
        if line.strip() and draw(st.booleans()):
            line = f"\x1b[1m{line}\x1b[0m"
        line += " " * draw(st.integers(0, 3))
        out.append(line)
        if draw(st.integers(0, 9)) == 0:
            out.append("")
    prompt = draw(st.sampled_from(["[root@gpu-n014 ~]# cmd", "cumulus@leaf01:mgmt:~$ nv show", "$ cmd"]))
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    return eol.join([prompt] + out)


@pytest.mark.parametrize(("tool", "name"), CASES, ids=IDS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_noise_does_not_change_the_result(cases_dir, tool, name, data):
    text = _read(cases_dir, name)
    noisy = data.draw(_noisy(text, tool not in NOT_RESPACEABLE))
    assert _dump(tool, noisy) == _dump(tool, text)


@pytest.mark.parametrize("tool", sorted(set(SAMPLES) | {"rdma-statistic"}))
@pytest.mark.parametrize("bad", ["", "  \n\t\n", "\x00\x01\x02binary\x00", "\ufffd\ufffd"], ids=["empty", "blank", "nul", "undecodable"])
def test_empty_or_binary_raises(tool, bad):
    with pytest.raises(ParseError):
        parse(tool, bad)


def _cut(text: str) -> str:
    """The first two thirds of the lines, then half of the next line."""
    lines = text.rstrip("\n").split("\n")
    cut = len(lines) * 2 // 3
    return "\n".join(lines[:cut] + [lines[cut][: max(1, len(lines[cut]) // 2)]])


MARKED = [(t, n) for t, n in CASES if t not in NO_END_MARKER]
UNMARKED = [(t, n) for t, n in CASES if t in NO_END_MARKER]


@pytest.mark.parametrize(("tool", "name"), MARKED, ids=[f"{t}-{i}" for i, (t, _) in enumerate(MARKED)])
def test_truncated_mid_line_raises(cases_dir, tool, name):
    with pytest.raises(ParseError):
        parse(tool, _cut(_read(cases_dir, name)))


@pytest.mark.parametrize(("tool", "name"), UNMARKED, ids=[f"{t}-{i}" for i, (t, _) in enumerate(UNMARKED)])
def test_cut_output_without_end_marker_reads_as_less_never_more(cases_dir, tool, name):
    """A format with no end marker cannot tell a cut output from a short one; what it reads of
    the cut must still differ from the whole (the lost lines are missing, nothing is invented)."""
    text = _read(cases_dir, name)
    try:
        cut = _dump(tool, _cut(text))
    except ParseError:
        return  # refusing the cut is also correct
    assert cut != _dump(tool, text)


@pytest.mark.parametrize("tool", sorted(set(SAMPLES) | {"rdma-statistic"}))
def test_wrong_tool_output_raises(cases_dir, tool):
    for other, name in CASES:
        if other != tool:
            with pytest.raises(ParseError):
                parse(tool, _read(cases_dir, name))


def test_parse_error_names_the_line(cases_dir):
    text = (cases_dir / SAMPLES["ibdev2netdev"]).read_text().replace("mlx5_3 port 1 ==> ibp84s0 (Down)", "garbage here")
    with pytest.raises(ParseError) as exc:
        parse("ibdev2netdev", text)
    assert exc.value.line_no == 8 and exc.value.line == "garbage here"
