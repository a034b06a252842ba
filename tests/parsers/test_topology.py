"""Topology parsers (nvidia-smi topo -m, /proc/interrupts, lscpu, numactl -H) and CPU list helpers."""

from __future__ import annotations

import pytest

from tuning.errors import InputError
from tuning.parsers import parse
from tuning.parsers.topology import (format_cpulist, irq_remote_numa, parse_cpulist, parse_hex_mask, parse_interrupts,
                                     parse_lscpu, parse_numactl_h, parse_nvidia_smi_topo, remote_numa_irqs)


def test_topo_8gpu_legend_remap(cases_dir):
    r = parse_nvidia_smi_topo((cases_dir / "nvidia_smi_topo_m__8gpu_10nic_raw_tabs_ansi_header_gpu_numa_id.txt").read_text())
    assert [g.name for g in r.gpus] == [f"GPU{i}" for i in range(8)] and len(r.nics) == 10
    assert r.nic_legend["NIC1"] == "mlx5_3" and r.nic_legend["NIC8"] == "mlx5_1" and r.nic_legend["NIC9"] == "mlx5_2"
    assert r.nics[1].device == "mlx5_3"
    near = [r.nearest_nic(f"GPU{i}") for i in range(8)]
    assert near == [(r.nic_legend[f"NIC{i}"], "PIX") for i in range(8)]
    assert near[1] == ("mlx5_3", "PIX")
    g0, g4 = r.gpus[0], r.gpus[4]
    assert g0.cpu_affinity == parse_cpulist("0-55,112-167") and g4.cpu_affinity == parse_cpulist("56-111,168-223")
    assert (g0.numa_affinity, g4.numa_affinity, g0.gpu_numa_id) == ([0], [1], None)
    assert g0.links["GPU1"] == "NV18" and g0.links["NIC4"] == "SYS"
    assert r.nics[0].cpu_affinity is None and r.findings == []


def test_topo_single_gpu_phb_is_far(cases_dir):
    r = parse_nvidia_smi_topo((cases_dir / "nvidia_smi_topo_m__single_gpu_phb.txt").read_text())
    assert r.nearest_nic("GPU0") == ("mlx5_0", "PHB") and r.gpus[0].cpu_affinity == list(range(252))
    assert [(f.code, f.subject) for f in r.findings] == [("gpu_nic_far", "GPU0")]


def test_interrupts_completion_irqs_on_remote_numa(cases_dir):
    r = parse_interrupts((cases_dir / "proc_interrupts__32cpu_mlx5_msix_irqs_on_remote_numa.txt").read_text())
    assert r.cpus == list(range(32))
    by = {q.irq: q for q in r.irqs}
    assert by["151"].name == "mlx5_comp0@pci:0000:c1:00.0" and by["151"].bdf == "0000:c1:00.0"
    assert by["151"].counts[0] == 4716506 and by["151"].busiest_cpu == 0
    assert by["150"].name.startswith("mlx5_async0") and by["LOC"].name == "Local timer interrupts"
    assert by["0"].name == "timer" and by["200"].bdf == "0000:02:00.0"
    remote = remote_numa_irqs(r, "0000:c1:00.0", parse_cpulist("16-31"))
    assert [q.irq for q in remote] == [str(n) for n in range(151, 167)]
    assert [q.busiest_cpu for q in remote] == list(range(16))
    assert remote_numa_irqs(r, "0000:c1:00.0", parse_cpulist("0-15")) == []
    [f] = irq_remote_numa(r, "0000:C1:00.0", parse_cpulist("16-31"))
    assert (f.code, f.subject) == ("irq_remote_numa", "0000:c1:00.0") and "0-15" in f.message
    assert irq_remote_numa(r, "0000:02:00.0", [16]) == []  # nvme: no completion IRQs named compN


def test_lscpu_grouped_sections(cases_dir):
    r = parse_lscpu((cases_dir / "lscpu__util_linux_new_grouped_sections.txt").read_text())
    assert (r.cpus, r.threads_per_core, r.cores_per_socket, r.sockets) == (56, 1, 28, 2)
    assert r.numa_nodes == {0: list(range(28)), 1: list(range(28, 56))} and r.online_cpus == list(range(56))
    assert r.model_name == "Intel(R) Xeon(R) Gold 6348 CPU @ 2.60GHz"
    assert {"tsc_adjust", "clflushopt", "cqm_occup_llc", "avx512vbmi", "arch_capabilities"} <= set(r.flags)
    assert r.fields["L3"] == "84 MiB (2 instances)" and r.fields["Virtualization"] == "VT-x"


def test_numactl_h_ht_siblings_and_distances(cases_dir):
    r = parse_numactl_h((cases_dir / "numactl_H__2node_ht_siblings_high_range.txt").read_text())
    n0, n1 = r.nodes
    assert n0.cpus == parse_cpulist("0-17,36-53") and n1.cpus == parse_cpulist("18-35,54-71")
    assert (n0.size.raw, n0.size.unit, n0.size.value) == ("94590", "MB", 94590 * 2**20)
    assert n1.free is not None and n1.free.value == 79679 * 2**20
    assert r.distances == {0: {0: 10, 1: 21}, 1: {0: 21, 1: 10}}


@pytest.mark.parametrize(("text", "cpus"), [("0-27,56-83", list(range(28)) + list(range(56, 84))),
                                             ("3", [3]), ("", []), ("0-1,1-2", [0, 1, 2])])
def test_cpulist_roundtrip(text, cpus):
    assert parse_cpulist(text) == cpus
    assert parse_cpulist(format_cpulist(cpus)) == cpus


def test_cpulist_format_and_masks():
    assert format_cpulist([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert parse_hex_mask("00000000,0000000f") == [0, 1, 2, 3]
    assert parse_hex_mask("00000001,00000000") == [32]
    for bad in ("5-3", "a", "1-"):
        with pytest.raises(ValueError):
            parse_cpulist(bad)
    with pytest.raises(ValueError):
        parse_hex_mask("xyz")


def test_interrupts_context_gives_irq_remote_numa(cases_dir):
    text = (cases_dir / "proc_interrupts__32cpu_mlx5_msix_irqs_on_remote_numa.txt").read_text()
    assert parse("interrupts", text).findings == []  # without the NIC's address and NUMA node: nothing to say
    [f] = parse("interrupts", text, {"bdf": "c1:00.0", "local_cpus": "16-31"}).findings  # short BDF accepted
    assert (f.code, f.subject) == ("irq_remote_numa", "0000:c1:00.0") and "16 completion IRQs" in f.message
    assert parse("interrupts", text, {"bdf": "0000:c1:00.0", "local_cpus": "0-15"}).findings == []
    [f] = parse("interrupts", text, {"bdf": "0000:41:00.0", "local_cpus": "0-15"}).findings
    assert (f.code, f.subject) == ("irq_bdf_absent", "0000:41:00.0")
    for bad in ({"bdf": "0000:c1:00.0"}, {"bdf": "eth0", "local_cpus": "0-3"},
                {"bdf": "0000:c1:00.0", "local_cpus": "3-1"}, {"numa": "1"}):
        with pytest.raises(InputError):
            parse("interrupts", text, bad)
