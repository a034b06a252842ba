"""The node sysroot the lab builds: files and formats of shared/cases/cli/SYSFS.md."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest

from tuning.lab.fabric import default_fabric
from tuning.lab.sysroot import (
    build_sysroot, cpumask_hex, format_cpulist, parse_cpulist, parse_cpumask, read_json, sync_derived,
)


@pytest.fixture(scope="module")
def fabric():
    return default_fabric()


@pytest.fixture(scope="module")
def roots(fabric, tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("sysroots")
    out = {}
    for name in ("node01", "node03", "node04"):
        build_sysroot(base / name, fabric.node(name))
        out[name] = base / name
    return out


def cat(path: Path) -> str:
    return path.read_text()


def test_gid_table_ipv4_at_3_and_256_entries(roots):
    port = roots["node01"] / "sys/class/infiniband/mlx5_0/ports/1"
    assert cat(port / "gids/3") == "0000:0000:0000:0000:0000:ffff:0a00:0001\n"
    assert cat(port / "gid_attrs/types/3") == "RoCE v2\n"
    assert cat(port / "gid_attrs/types/2") == "IB/RoCE v1\n"
    assert cat(port / "gid_attrs/ndevs/3") == "enp12s0np0\n"
    assert cat(port / "gids/0").startswith("fe80:0000:0000:0000:")
    assert re.fullmatch(r"([0-9a-f]{4}:){7}[0-9a-f]{4}\n", cat(port / "gids/0"))
    assert len(os.listdir(port / "gids")) == 256
    assert cat(port / "gids/4") == "0000:0000:0000:0000:0000:0000:0000:0000\n"
    # an empty entry's type and netdev exist (256 each, as sysfs lists them) and read EINVAL as on a real
    # host (_show_port_gid_attr); the lab's older "no file" (ENOENT) was more lenient than a node
    assert len(os.listdir(port / "gid_attrs/types")) == len(os.listdir(port / "gid_attrs/ndevs")) == 256
    for name in ("types", "ndevs"):
        with pytest.raises(OSError) as err:
            cat(port / "gid_attrs" / name / "4")
        assert err.value.errno == errno.EINVAL
    assert cat(port / "link_layer") == "Ethernet\n"


def test_a_lab_build_shares_read_only_attributes_between_nodes_and_nothing_a_node_writes(fabric, tmp_path: Path):
    """Within one lab build (``sysroot_share.sharing``) the read-only attributes that are equal on
    two nodes are one inode; what differs or what a node may write stays its own, and a GID entry a
    node fills later is replaced, leaving the other node's empty entry as it was."""
    from tuning.lab import sysroot_share
    from tuning.lab.sysroot import set_gid_attrs

    with sysroot_share.sharing():
        for name in ("node01", "node02"):
            build_sysroot(tmp_path / name, fabric.node(name))
    one, two = tmp_path / "node01", tmp_path / "node02"
    ino = lambda root, rel: os.lstat(root / rel).st_ino  # noqa: E731
    port = "sys/class/infiniband/mlx5_0/ports/1"
    for rel in (f"{port}/gids/200", f"{port}/gid_attrs/types/200", "sys/devices/system/cpu/cpu3/topology/core_id",
                "sys/devices/system/cpu/cpu5/cpuidle/state3/latency", "sys/devices/system/cpu/cpufreq/policy7/scaling_driver"):
        assert ino(one, rel) == ino(two, rel) and os.lstat(one / rel).st_nlink == 2, rel
    for rel in (f"{port}/gids/3", "sys/class/net/enp12s0np0/mtu", "sys/devices/system/cpu/cpu5/cpuidle/state3/disable",
                "sys/devices/system/cpu/cpufreq/policy7/scaling_governor", "proc/irq/100/smp_affinity_list"):
        assert ino(one, rel) != ino(two, rel), rel
    assert cat(two / port / "gids/3") == "0000:0000:0000:0000:0000:ffff:0a00:0002\n"
    set_gid_attrs(two / port, 200, "RoCE v2", "enp12s0np0")
    assert cat(two / port / "gid_attrs/types/200") == "RoCE v2\n"
    with pytest.raises(OSError) as err:
        cat(one / port / "gid_attrs/types/200")
    assert err.value.errno == errno.EINVAL  # node01's entry is still empty
    shared = sum(1 for p in two.rglob("*") if not p.is_dir() and os.lstat(p).st_nlink > 1)
    assert shared > 9000  # of about 14,300 entries


def test_extra_link_local_moves_ipv4_to_5_on_node03_mlx5_0(roots):
    port = roots["node03"] / "sys/class/infiniband/mlx5_0/ports/1"
    assert cat(port / "gids/2").startswith("fe80:")
    assert cat(port / "gids/2") != cat(port / "gids/0")
    assert cat(port / "gids/5") == "0000:0000:0000:0000:0000:ffff:0a00:0003\n"
    assert cat(port / "gid_attrs/types/5") == "RoCE v2\n"
    other = roots["node03"] / "sys/class/infiniband/mlx5_1/ports/1"
    assert cat(other / "gids/3") == "0000:0000:0000:0000:0000:ffff:0a01:0003\n"


def test_numa_and_local_cpus(roots):
    net = roots["node01"] / "sys/class/net"
    assert cat(net / "enp12s0np0/device/numa_node") == "0\n"
    assert cat(net / "enp12s0np0/device/local_cpulist") == "0-27,56-83\n"
    assert cat(net / "enp12s0np0/device/local_cpus") == "0000,000fffff,ff000000,0fffffff\n"
    assert cat(net / "enp140s0np0/device/numa_node") == "1\n"
    assert cat(net / "enp140s0np0/device/local_cpus") == "ffff,fff00000,00ffffff,f0000000\n"
    assert os.readlink(net / "enp12s0np0/device") == "../../../bus/pci/devices/0000:0c:00.0"
    assert os.listdir(net / "enp12s0np0/device/infiniband") == ["mlx5_0"]
    assert os.listdir(roots["node01"] / "sys/class/infiniband/mlx5_0/device/net") == ["enp12s0np0"]
    assert cat(roots["node01"] / "sys/devices/system/cpu/online") == "0-111\n"
    assert cat(roots["node01"] / "sys/devices/system/node/node1/cpulist") == "28-55,84-111\n"


def test_irqs_msix_and_remote_affinity(roots):
    pci = roots["node01"] / "sys/bus/pci/devices/0000:8c:00.0"  # mlx5_4, NUMA 1, IRQs 180..196
    assert sorted(int(n) for n in os.listdir(pci / "msi_irqs")) == list(range(180, 197))
    assert cat(pci / "msi_irqs/181") == "msix\n"
    irq = roots["node01"] / "proc/irq/181"
    assert cat(irq / "smp_affinity_list") == "0-15\n"
    assert cat(irq / "smp_affinity") == "0000,00000000,00000000,0000ffff\n"
    assert cat(irq / "node") == "1\n"


def test_driver_flavours(roots):
    ofed = roots["node01"] / "sys/class/net/enp12s0np0"
    assert cat(ofed / "ecn/roce_np/enable/3") == "0\n"
    assert cat(ofed / "ecn/roce_rp/enable/7") == "0\n"
    assert cat(ofed / "ecn/roce_np/cnp_dscp") == "48\n"
    assert cat(ofed / "ecn/roce_np/cnp_802p_prio") == "6\n"
    assert cat(ofed / "qos/trust") == "pcp\n"
    assert not (roots["node01"] / "sys/kernel/debug").exists()
    inbox = roots["node04"]
    assert not (inbox / "sys/class/net/enp12s0np0/ecn").exists()
    cc = inbox / "sys/kernel/debug/mlx5/0000:0c:00.0/cc_params"
    assert len(os.listdir(cc)) == 20
    assert cat(cc / "np_cnp_dscp") == "48\n"


def test_sysctl_and_empty_folders(roots):
    root = roots["node01"]
    assert cat(root / "proc/sys/net/core/rmem_max") == "212992\n"
    assert cat(root / "proc/sys/net/ipv4/conf/all/arp_ignore") == "0\n"
    assert cat(root / "proc/sys/kernel/numa_balancing") == "1\n"
    for folder in ("etc/sysctl.d", "etc/systemd/system", "etc/udev/rules.d", "usr/local/sbin",
                   "sys/kernel/config/rdma_cm"):
        assert os.listdir(root / folder) == []
    assert read_json(root / "run/lab/dcb/enp12s0np0.json")["trust"] == "pcp"
    assert read_json(root / "run/lab/rdma_cm/mlx5_0.json") == {"default_roce_mode": "RoCE v2",
                                                                 "default_roce_tos": 0}


def _columns(line: str) -> list[int]:
    """End offsets of the whitespace-separated fields of a line (the columns are right-aligned)."""
    return [m.end() for m in re.finditer(r"\S+", line)]


def test_proc_interrupts_layout_matches_the_kernel_sample(roots, cases_dir):
    sample = (cases_dir / "proc_interrupts__32cpu_mlx5_msix_irqs_on_remote_numa.txt").read_text().splitlines()
    ours = cat(roots["node01"] / "proc/interrupts").splitlines()
    assert _columns(ours[0])[:32] == _columns(sample[0])  # CPUn every 11 characters
    assert ours[0] == ours[0].rstrip() and ours[0].startswith(" " * 12 + "CPU0       CPU1")
    row = next(line for line in ours if "mlx5_comp3@pci:0000:0c:00.0" in line)
    ref = next(line for line in sample if "mlx5_comp3@pci:" in line)
    assert row[:5] == " 104:" and ref[:5] == " 154:"
    assert _columns(row)[:33] == _columns(ref)[:33]  # IRQ number + 32 counter columns
    tail, ref_tail = row[5 + 112 * 11:], ref[5 + 32 * 11:]
    assert tail == "  IR-PCI-MSIX-0000:0c:00.0    4-edge      mlx5_comp3@pci:0000:0c:00.0"
    assert ref_tail.replace("0000:c1:00.0", "0000:0c:00.0") == tail
    counts = [int(x) for x in row[5:5 + 112 * 11].split()]
    assert len(counts) == 112 and counts.index(max(counts)) == 3
    assert sum("@pci:" in line for line in ours) == 8 * 17
    assert ours[-2].startswith(" NMI:") and ours[-1].endswith("  Local timer interrupts")


def test_cpu_helpers_round_trip():
    assert parse_cpulist("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpulist([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert cpumask_hex([3], 112) == "0000,00000000,00000000,00000008"
    assert parse_cpumask("0000,00000000,00000000,00000008") == [3]
    assert cpumask_hex([0, 1], 32) == "00000003"


def test_sync_derived_follows_the_newer_view(tmp_path, fabric):
    build_sysroot(tmp_path, fabric.node("node02"))
    irq = tmp_path / "proc/irq/105"
    (irq / "smp_affinity_list").write_text("0-27\n")
    os.utime(irq / "smp_affinity", ns=(1, 1))
    sync_derived(tmp_path)
    assert cat(irq / "smp_affinity") == "0000,00000000,00000000,0fffffff\n"
    (irq / "smp_affinity").write_text("f0\n")
    os.utime(irq / "smp_affinity_list", ns=(1, 1))
    sync_derived(tmp_path)
    assert cat(irq / "smp_affinity_list") == "4-7\n"
    # the written view reads back in the kernel's format too (it was left as written: more lenient than a node)
    assert cat(irq / "smp_affinity") == "0000,00000000,00000000,000000f0\n"


def test_reboot_resets_live_values_keeps_the_disk_and_runs_only_enabled_units(fabric, tmp_path):
    from tuning.lab.boot import boot_commands, reset_volatile

    root = tmp_path / "sysroot"
    build_sysroot(root, fabric.node("node01"))
    (root / "proc/irq/101/smp_affinity_list").write_text("5\n")
    (root / "sys/class/net/enp12s0np0/mtu").write_text("9000\n")
    (root / "etc/sysctl.d/90-fabtune.conf").write_text("kernel.numa_balancing = 0\n")
    units = root / "etc/systemd/system"
    (units / "fabtune-nic.service").write_text("[Service]\nWorkingDirectory=/\nExecStart=/usr/local/sbin/setup\n"
                                               "[Install]\nWantedBy=multi-user.target\n")
    (units / "other.service").write_text("[Service]\nExecStart=/usr/local/sbin/other\n")
    assert boot_commands(root) == ["sysctl -q --system"]  # installed, not enabled: nothing runs
    (units / "multi-user.target.wants").mkdir()
    (units / "multi-user.target.wants/fabtune-nic.service").symlink_to("/etc/systemd/system/fabtune-nic.service")
    reset_volatile(root, fabric.node("node01"))
    assert cat(root / "proc/irq/101/smp_affinity_list") == "0-15\n"
    assert cat(root / "sys/class/net/enp12s0np0/mtu") == "1500\n"
    assert cat(root / "etc/sysctl.d/90-fabtune.conf") == "kernel.numa_balancing = 0\n"
    assert boot_commands(root) == ["sysctl -q --system", "(cd sysroot/ && ../sysroot/usr/local/sbin/setup )"]
    assert not (tmp_path / "sysroot.old").exists() and not (tmp_path / "sysroot.boot").exists()
