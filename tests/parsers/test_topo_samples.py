"""Topology discovery on real outputs: the ``nvidia-smi topo -m`` samples of shared/cases give the GPU-NIC
pairs, NUMA nodes and CPU lists (tuning.node.topology), the NVIDIA driver's per-GPU ``information`` file
and ``nvidia-smi -L`` parse, PCI paths classify as nvidia-smi's legend does, and the lab's stand-ins print
the samples' layout.

Fixtures in tests/parsers/cases/ and their sources:
- ``nvidia_gpu_information__a10g_minor3.txt``: the ``sampleGPUInformation`` fixture of the Datadog agent's
  Go package ``safenvml`` (a public test; ``Device Minor: \\t 3`` is not the GPU's index 0);
- ``nvidia_gpu_information__rtx3090_firmware_excluded_no_space.txt``: a public gpu-dashboard test's
  ``_REAL_BLOCK`` (driver 590: ``GPU Firmware`` line, ``GPU Excluded:\\t No`` without a space);
- ``nvidia_smi_L__8x_h100.txt``: the University at Buffalo CCR OpenFold README (``nvidia-smi -L`` on an
  8x H100 node).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tuning.errors import ParseError
from tuning.parsers import parse
from tuning.parsers.topology import parse_nvidia_smi_topo
from tuning.node.topology import TopoNic, from_smi, path_link

CASES = Path(__file__).parent / "cases"
EIGHT = "nvidia_smi_topo_m__8gpu_10nic_raw_tabs_ansi_header_gpu_numa_id.txt"


def _smi(cases_dir: Path, name: str):
    return parse_nvidia_smi_topo((cases_dir / name).read_text())


def test_8gpu_sample_pairs_each_gpu_with_its_pix_nic_through_the_legend(cases_dir):
    smi = _smi(cases_dir, EIGHT)
    topo = from_smi(smi)
    assert [n.rdma_device for n in topo.nics] == ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7",
                                                  "mlx5_8", "mlx5_9", "mlx5_1", "mlx5_2"]  # NIC0..NIC9
    assert [(l.gpu, l.nearest_nic, l.link) for l in topo.links] == [
        (0, "mlx5_0", "PIX"), (1, "mlx5_3", "PIX"), (2, "mlx5_4", "PIX"), (3, "mlx5_5", "PIX"),
        (4, "mlx5_6", "PIX"), (5, "mlx5_7", "PIX"), (6, "mlx5_8", "PIX"), (7, "mlx5_9", "PIX")]
    assert [g.numa_node for g in topo.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [g.cpus for g in topo.gpus] == ["0-55,112-167"] * 4 + ["56-111,168-223"] * 4
    assert topo.numa_nodes == {0: "0-55,112-167", 1: "56-111,168-223"}
    assert topo.flagged() == []  # no rails known from the output alone


def test_8gpu_sample_flags_a_rail_cabled_to_a_nic_behind_another_switch(cases_dir):
    smi = _smi(cases_dir, EIGHT)
    legend = [n.device for n in smi.nics]
    rails = {dev: i for i, dev in enumerate(legend[:8])}  # NICi on rail i (the legend order)
    rails["mlx5_1"], rails["mlx5_3"] = 1, 8  # rail 1 recabled to NIC8 (mlx5_1): NODE from GPU1
    nics = [TopoNic(dev, None, "", -1, "", rails[dev] if dev in rails else None) for dev in legend]
    topo = from_smi(smi, nics)
    assert [(l.gpu, l.rail_nic, l.rail_link) for l in topo.flagged()] == [(1, "mlx5_1", "NODE")]
    assert topo.flagged()[0].flag == ("rail 1: NIC mlx5_1 is NODE from GPU1 (behind another PCIe host bridge of "
                                      "the same NUMA node)")
    assert topo.links[1].nearest_nic == "mlx5_3"  # the nearest NIC is still NIC1 (PIX), off the rail


def test_single_gpu_sample_is_phb_and_flags_its_rail(cases_dir):
    smi = _smi(cases_dir, "nvidia_smi_topo_m__single_gpu_phb.txt")
    topo = from_smi(smi, [TopoNic("mlx5_0", "ens1f0np0", "", -1, "", 0)])
    [link] = topo.links
    assert (link.nearest_nic, link.link, link.rail_link) == ("mlx5_0", "PHB", "PHB")
    assert link.flag == "rail 0: NIC mlx5_0 is PHB from GPU0 (through the PCIe host bridge (CPU))"
    assert (topo.gpus[0].numa_node, topo.gpus[0].cpus, topo.numa_nodes) == (0, "0-251", {0: "0-251"})


def test_gpu_information_gives_the_dev_minor_not_the_index():
    r = parse("nvidia-gpu-information", (CASES / "nvidia_gpu_information__a10g_minor3.txt").read_text())
    assert (r.model, r.bdf, r.minor) == ("NVIDIA A10G", "0000:00:1e.0", 3)
    r2 = parse("nvidia-gpu-information",
               (CASES / "nvidia_gpu_information__rtx3090_firmware_excluded_no_space.txt").read_text())
    assert (r2.model, r2.minor, r2.fields["GPU Excluded"], r2.fields["GPU Firmware"]) == (
        "NVIDIA GeForce RTX 3090", 0, "No", "590.48.01")
    with pytest.raises(ParseError, match="Device Minor"):
        parse("nvidia-gpu-information", "Model: \t\t NVIDIA A10G\n")


def test_nvidia_smi_list():
    r = parse("nvidia-smi-L", (CASES / "nvidia_smi_L__8x_h100.txt").read_text())
    assert [g.index for g in r.gpus] == list(range(8)) and {g.name for g in r.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert r.gpus[7].uuid == "GPU-f65a6ec2-ce6f-ba6c-d4c2-8ca414d6e709"
    with pytest.raises(ParseError):
        parse("nvidia-smi-L", "No devices were found\n")


@pytest.mark.parametrize(("a", "b", "numa", "want"), [
    ("pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:00.0/0000:1b:00.0",
     "pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:01.0/0000:1c:00.0", (0, 0), "PIX"),   # one switch
    ("pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0/0000:1b:00.0",
     "pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:01.0/0000:1c:00.0", (0, 0), "PXB"),   # two switch levels
    ("pci0000:17/0000:17:01.0/0000:18:00.0", "pci0000:17/0000:17:02.0/0000:20:00.0", (0, 0), "PHB"),
    ("pci0000:17/0000:17:01.0/0000:18:00.0", "pci0000:38/0000:38:01.0/0000:39:00.0", (0, 0), "NODE"),
    ("pci0000:17/0000:17:01.0/0000:18:00.0", "pci0000:97/0000:97:01.0/0000:98:00.0", (0, 1), "SYS"),
])
def test_pci_paths_classify_as_the_nvidia_smi_legend(a, b, numa, want):
    assert path_link("/sys/devices/" + a, "/sys/devices/" + b, *numa) == want
    assert path_link("/lab/sysroot/sys/bus/pci/devices/0000:1b:00.0", "/sys/devices/" + b) is None


def test_lab_stand_ins_print_the_samples_layout(cases_dir, tmp_path, monkeypatch, capsys):
    from tuning.lab.fabric import default_fabric
    from tuning.lab.sysroot import build_sysroot
    from tuning.lab.tools import topo

    build_sysroot(tmp_path / "sysroot", default_fabric().node("node01"))
    monkeypatch.setenv("FABTUNE_LAB_SYSROOT", str(tmp_path / "sysroot"))
    assert topo.nvidia_smi(["topo", "-m"]) == 0
    lab = capsys.readouterr().out
    sample = (cases_dir / EIGHT).read_text()
    assert lab.startswith("\x1b[4m\tGPU0\tGPU1") and lab.splitlines()[0].endswith("\tGPU NUMA ID\x1b[0m")
    assert lab.splitlines()[1] == "GPU0\t X \t" + "\t".join(["NV18"] * 7) + "\tPIX\t" + "\t".join(
        ["NODE"] * 3 + ["SYS"] * 4) + "\t0-27,56-83\t0\t\tN/A"
    nic_rows = [l for l in lab.splitlines() if l.startswith("NIC") and "\t" in l]
    assert nic_rows and all(l.endswith("\t\t\t\t") for l in nic_rows)
    legend = sample[sample.index("\nLegend:"):sample.index("NIC Legend:")]
    assert legend in lab and lab.endswith("  NIC7: mlx5_7\n\n")
    assert parse_nvidia_smi_topo(lab).nearest_nic("GPU3") == ("mlx5_3", "PIX")
    for tool, argv, sample_name in (("lscpu", [], "lscpu__util_linux_new_grouped_sections.txt"),
                                    ("numactl", ["-H"], "numactl_H__2node_ht_siblings_high_range.txt")):
        assert getattr(topo, tool)(argv) == 0
        out = capsys.readouterr().out
        parsed = parse("lscpu" if tool == "lscpu" else "numactl-H", out)
        if tool == "lscpu":
            assert (parsed.cpus, parsed.threads_per_core, parsed.sockets) == (112, 2, 2)
            assert parsed.numa_nodes[1] == list(range(28, 56)) + list(range(84, 112))
            ref = (cases_dir / sample_name).read_text().splitlines()
            assert [l for l in out.splitlines() if l.startswith("NUMA:")] == [l for l in ref if l.startswith("NUMA:")]
        else:
            assert parsed.distances == {0: {0: 10, 1: 21}, 1: {0: 21, 1: 10}}
            assert out.splitlines()[-3:] == ["node   0   1", "  0:  10  21", "  1:  21  10"]
