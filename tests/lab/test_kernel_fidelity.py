"""The lab refuses what the kernel refuses, with the same texts, and holds what a real node holds
(issue 20): the sysctls of a stock kernel, the numeric ranges of their ``ctl_table`` handlers, an
IRQ's two affinity views, configfs ``rdma_cm`` groups. Stand-ins run as subprocesses on a sysroot
built in-process (no lab daemon).

Kernel facts followed (Linux 6.1, Debian 12's ``linux-image-6.1.0-*-amd64``): the defaults in
``tuning.lab.sysroot.SYSCTLS``; ``kernel.numa_balancing`` is ``proc_dointvec_minmax`` 0..4
(``extra2 = SYSCTL_FOUR`` since 5.18, ``kernel/sched/core.c``); ``smp_affinity`` is parsed by
``bitmap_parse`` (``lib/bitmap-str.c``: 32-bit chunks, EOVERFLOW past them or past ``nr_cpu_ids``)
and read back as ``%*pb``, ``smp_affinity_list`` as ``%*pbl``; ``mkdir rdma_cm/<dev>`` makes the
group's attributes (``cma_configfs.c`` ``make_cma_dev``, ENODEV for a name that is no RDMA device).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import served_stand_ins
from tuning.lab.controller import write_wrappers
from tuning.lab.fabric import default_fabric
from tuning.lab.sysroot import (SYSCTLS, build_sysroot, irq_affinity_parse, node_sysctls, read_json, sync_derived,
                                write_json)
from tuning.verify.gid import gid_table_command, pick_roce_v2_ipv4

EINVAL, ERANGE, EOVERFLOW = "Invalid argument", "Numerical result out of range", "Value too large for defined data type"


class Node:
    """node01's sysroot (CPUs 0-111) and the stand-ins' ``bin/``."""

    def __init__(self, base: Path):
        self.root = base / "sysroot"
        build_sysroot(self.root, default_fabric().node("node01"))
        self.bin = base / "bin"
        write_wrappers(self.bin)
        self.env = {"PATH": f"{self.bin}:/usr/bin:/bin", "FABTUNE_LAB_SYSROOT": str(self.root)}

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=30,
                              cwd=self.root.parent)

    def tee(self, value: str, rel: str) -> subprocess.CompletedProcess:
        """``printf '%s\\n' VALUE | tee sysroot/REL >/dev/null``, as fabtune writes a kernel file."""
        return self.run("bash", "-c", 'printf "%s\\n" "$1" | tee "$2" >/dev/null', "-", value, f"sysroot/{rel}")

    def cat(self, rel: str) -> str:
        return (self.root / rel).read_text()


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Node:
    base = tmp_path_factory.mktemp("fidelity")
    with served_stand_ins(base):
        yield Node(base)


# ---- 1. the sysctls every node has ------------------------------------------------------------

#: Linux 6.1 defaults (net/ipv4/tcp.c tcp_init, sysctl_net_core.c, mm/, kernel/), tabs as proc_dointvec prints
KERNEL_DEFAULTS = {
    "net/ipv4/tcp_rmem": "4096\t131072\t6291456\n",
    "net/ipv4/tcp_wmem": "4096\t16384\t4194304\n",
    "net/ipv4/ip_local_port_range": "32768\t60999\n",
    "net/ipv4/tcp_congestion_control": "cubic\n",
    "net/ipv4/tcp_available_congestion_control": "reno cubic\n",
    "net/core/somaxconn": "4096\n",
    "net/core/rmem_max": "212992\n",
    "net/core/netdev_max_backlog": "1000\n",
    "net/ipv4/tcp_timestamps": "1\n",
    "net/ipv4/tcp_notsent_lowat": "4294967295\n",
    "vm/swappiness": "60\n",
    "vm/max_map_count": "65530\n",
    "kernel/numa_balancing": "1\n",
}


def test_sysroot_holds_the_common_sysctls_at_the_kernel_defaults(tmp_path: Path):
    node = Node(tmp_path)  # its own: the module's node is changed by the tests that set values, in any order
    assert len(SYSCTLS) >= 150
    for rel, value in KERNEL_DEFAULTS.items():
        assert node.cat(f"proc/sys/{rel}") == value, rel
    for key, (value, _) in node_sysctls(default_fabric().node("node01")).items():
        assert node.cat("proc/sys/" + key.replace(".", "/")) == value + "\n", key


#: the families a GPU/RoCE profile sets, as a 6.1 node lists them (``ls /proc/sys/...``): every name must be there
FAMILIES = {
    "net/core": {"rmem_max", "wmem_max", "rmem_default", "wmem_default", "optmem_max", "netdev_max_backlog",
                 "netdev_budget", "netdev_budget_usecs", "somaxconn", "busy_poll", "busy_read", "default_qdisc",
                 "dev_weight", "rps_sock_flow_entries", "gro_normal_batch", "high_order_alloc_disable",
                 "max_skb_frags", "skb_defer_max", "flow_limit_table_len", "tstamp_allow_data", "txrehash"},
    "net/ipv4": {"tcp_rmem", "tcp_wmem", "tcp_mem", "udp_mem", "tcp_max_syn_backlog", "tcp_limit_output_bytes",
                 "tcp_notsent_lowat", "tcp_adv_win_scale", "tcp_mtu_probing", "tcp_ecn", "tcp_sack",
                 "tcp_low_latency", "tcp_slow_start_after_idle", "tcp_no_metrics_save", "ip_local_port_range"},
    "vm": {"swappiness", "min_free_kbytes", "zone_reclaim_mode", "dirty_ratio", "dirty_background_ratio",
           "dirty_bytes", "dirty_background_bytes", "max_map_count", "overcommit_memory", "vfs_cache_pressure",
           "watermark_scale_factor", "compaction_proactiveness", "numa_stat", "stat_interval"},
    "kernel": {"numa_balancing"},
}


def test_the_families_a_profile_sets_are_all_there(node):
    for folder, names in FAMILIES.items():
        assert names <= set(os.listdir(node.root / "proc/sys" / folder)), folder
    conf = node.root / "proc/sys/net/ipv4/conf"
    nics = [nic.netdev for nic in default_fabric().node("node01").nics]
    assert sorted(os.listdir(conf)) == sorted(["all", "default", "lo", *nics])
    for dev in os.listdir(conf):  # devinet.c: one folder of the same 33 attributes per interface
        assert len(os.listdir(conf / dev)) == 33, dev
        assert {"arp_ignore", "arp_announce", "rp_filter", "accept_local"} <= set(os.listdir(conf / dev))
    assert node.cat("proc/sys/net/ipv4/conf/all/accept_source_route") == "0\n"  # ipv4_devconf
    assert node.cat(f"proc/sys/net/ipv4/conf/{nics[0]}/accept_source_route") == "1\n"  # ipv4_devconf_dflt
    assert node.cat("proc/sys/net/ipv4/conf/lo/disable_xfrm") == "1\n"


def test_a_roce_interface_key_is_set_and_an_unknown_interface_fails(node):
    nic = default_fabric().node("node01").nics[0].netdev
    for name, value in (("arp_ignore", "1"), ("arp_announce", "2"), ("rp_filter", "2"), ("accept_local", "1")):
        key = f"net.ipv4.conf.{nic}.{name}"
        res = node.run("sysctl", "-w", f"{key}={value}")
        assert (res.returncode, res.stdout, res.stderr) == (0, f"{key} = {value}\n", "")
        assert node.run("sysctl", "-n", key).stdout == f"{value}\n"
        assert node.tee("0", f"proc/sys/net/ipv4/conf/{nic}/{name}").returncode == 0
    res = node.run("sysctl", "-w", "net.ipv4.conf.eth9.arp_ignore=1")
    assert (res.returncode, res.stderr) == (1, "sysctl: cannot stat /proc/sys/net/ipv4/conf/eth9/arp_ignore: No such file or directory\n")
    res = node.run("sysctl", "-w", f"net.ipv4.conf.{nic}.arp_ignore=x")
    assert (res.returncode, res.stderr) == (1, f'sysctl: setting key "net.ipv4.conf.{nic}.arp_ignore": {EINVAL}\n')


def test_memory_sized_keys_and_default_qdisc(node):
    res = node.run("sysctl", "-w", "vm.min_free_kbytes=4194304")
    assert (res.returncode, res.stdout) == (0, "vm.min_free_kbytes = 4194304\n")
    res = node.run("sysctl", "-q", "-w", "net.ipv4.tcp_mem=786432 1048576 1572864")
    assert (res.returncode, res.stderr) == (0, "")
    assert node.cat("proc/sys/net/ipv4/tcp_mem") == "786432\t1048576\t1572864\n"
    res = node.run("sysctl", "-w", "net.core.default_qdisc=fq")
    assert (res.returncode, res.stdout) == (0, "net.core.default_qdisc = fq\n")
    res = node.run("sysctl", "-w", "net.core.default_qdisc=nope")  # qdisc_set_default: no such qdisc, ENOENT
    assert (res.returncode, res.stderr) == (1, 'sysctl: setting key "net.core.default_qdisc": No such file or directory\n')
    res = node.tee("nope", "proc/sys/net/core/default_qdisc")
    assert (res.returncode, res.stderr) == (1, "tee: sysroot/proc/sys/net/core/default_qdisc: No such file or directory\n")
    assert node.tee("fq_codel", "proc/sys/net/core/default_qdisc").returncode == 0
    assert node.cat("proc/sys/net/core/default_qdisc") == "fq_codel\n"


def test_a_profile_key_of_every_node_is_set_and_read_back(node):
    res = node.run("sysctl", "-w", "net.core.somaxconn=65535")
    assert (res.returncode, res.stdout, res.stderr) == (0, "net.core.somaxconn = 65535\n", "")
    assert node.run("sysctl", "-n", "net.core.somaxconn").stdout == "65535\n"
    res = node.run("sysctl", "-q", "-w", "net.ipv4.tcp_rmem=4096 87380 16777216")
    assert (res.returncode, res.stderr) == (0, "")
    assert node.cat("proc/sys/net/ipv4/tcp_rmem") == "4096\t87380\t16777216\n"
    # fewer values than the vector holds replace the first ones (__do_proc_dointvec)
    assert node.tee("8192", "proc/sys/net/ipv4/tcp_wmem").returncode == 0
    assert node.cat("proc/sys/net/ipv4/tcp_wmem") == "8192\t16384\t4194304\n"


def test_a_key_the_kernel_does_not_have_fails_as_the_real_tools(node):
    res = node.run("sysctl", "-w", "net.foo=1")
    assert (res.returncode, res.stdout, res.stderr) == (1, "", "sysctl: cannot stat /proc/sys/net/foo: No such file or directory\n")
    res = node.run("sysctl", "net.ipv4.tcp_foo")
    assert (res.returncode, res.stderr) == (1, "sysctl: cannot stat /proc/sys/net/ipv4/tcp_foo: No such file or directory\n")
    res = node.tee("1", "proc/sys/net/foo")
    assert (res.returncode, res.stderr) == (1, "tee: sysroot/proc/sys/net/foo: No such file or directory\n")
    assert not (node.root / "proc/sys/net/foo").exists()


def test_congestion_control_loads_a_module_or_fails_with_enoent(node):
    res = node.run("sysctl", "-w", "net.ipv4.tcp_congestion_control=reno_foo")
    assert (res.returncode, res.stderr) == (1, 'sysctl: setting key "net.ipv4.tcp_congestion_control": No such file or directory\n')
    assert node.cat("proc/sys/net/ipv4/tcp_congestion_control") == "cubic\n"
    res = node.run("sysctl", "-w", "net.ipv4.tcp_congestion_control=bbr")
    assert (res.returncode, res.stdout) == (0, "net.ipv4.tcp_congestion_control = bbr\n")
    assert node.cat("proc/sys/net/ipv4/tcp_available_congestion_control") == "reno cubic bbr\n"
    res = node.tee("nope", "proc/sys/net/ipv4/tcp_congestion_control")
    assert (res.returncode, res.stderr) == (1, "tee: sysroot/proc/sys/net/ipv4/tcp_congestion_control: No such file or directory\n")
    assert node.tee("cubic", "proc/sys/net/ipv4/tcp_congestion_control").returncode == 0
    assert node.cat("proc/sys/net/ipv4/tcp_congestion_control") == "cubic\n"
    ro = node.run("sysctl", "-w", "net.ipv4.tcp_available_congestion_control=reno")
    assert (ro.returncode, ro.stderr) == (1, "sysctl: permission denied on key 'net.ipv4.tcp_available_congestion_control'\n")
    ro = node.tee("reno", "proc/sys/net/ipv4/tcp_available_congestion_control")
    assert (ro.returncode, ro.stderr) == (1, "tee: sysroot/proc/sys/net/ipv4/tcp_available_congestion_control: Permission denied\n")


# ---- 2. the ranges of the handlers --------------------------------------------------------------

@pytest.mark.parametrize("key, bad, good", [
    ("kernel.numa_balancing", "7", "3"),     # proc_dointvec_minmax 0..SYSCTL_FOUR
    ("kernel.numa_balancing", "-1", "0"),
    ("kernel.numa_balancing", "5", "4"),
    ("vm.swappiness", "201", "200"),         # 0..SYSCTL_TWO_HUNDRED (5.8)
    ("vm.overcommit_memory", "3", "2"),
    ("vm.dirty_ratio", "101", "100"),
    ("net.ipv4.tcp_tw_reuse", "3", "2"),
    ("net.ipv4.tcp_sack", "-1", "0"),        # proc_dou8vec_minmax: no sign, 0..255
    ("net.ipv4.tcp_mtu_probing", "256", "2"),
    ("net.ipv4.tcp_adv_win_scale", "32", "-31"),
    ("net.ipv4.tcp_rmem", "0 87380 16777216", "1 87380 16777216"),  # extra1 SYSCTL_ONE
    ("net.core.rmem_max", "2303", "2304"),   # SOCK_MIN_RCVBUF
    ("net.core.somaxconn", "2147483648", "2147483647"),
    ("net.ipv4.ip_local_port_range", "1023 60999", "1024 60999"),  # not below ip_unprivileged_port_start
    ("net.ipv4.ip_local_port_range", "40000 30000", "30000 40000"),
])
def test_out_of_range_values_are_refused_like_the_kernel(node, key, bad, good):
    rel = "proc/sys/" + key.replace(".", "/")
    before = node.cat(rel)
    res = node.run("sysctl", "-q", "-w", f"{key}={bad}")
    assert (res.returncode, res.stderr) == (1, f'sysctl: setting key "{key}": {EINVAL}\n')
    res = node.tee(bad, rel)
    assert (res.returncode, res.stderr) == (1, f"tee: sysroot/{rel}: {EINVAL}\n")
    assert node.cat(rel) == before
    assert node.run("sysctl", "-q", "-w", f"{key}={good}").returncode == 0
    assert node.cat(rel) == "\t".join(good.split()) + "\n"
    assert node.tee(good, rel).returncode == 0
    node.run("sysctl", "-q", "-w", f"{key}={before.strip()}")


# ---- 3. an IRQ's affinity, both views ---------------------------------------------------------

IRQ = "proc/irq/102"


@pytest.mark.parametrize("name, value, listed, shown", [
    ("smp_affinity", "ff", "0-7", "0000,00000000,00000000,000000ff"),
    ("smp_affinity", "0,000000ff", "0-7", "0000,00000000,00000000,000000ff"),
    ("smp_affinity", "f0000,0", "48-51", "0000,00000000,000f0000,00000000"),
    ("smp_affinity", "8000,00000000,00000000,00000001", "0,111", "8000,00000000,00000000,00000001"),
    ("smp_affinity", "1 0000000f", "0-3,32", "0000,00000000,00000001,0000000f"),  # blanks part chunks too
    ("smp_affinity_list", "0-7", "0-7", "0000,00000000,00000000,000000ff"),
    ("smp_affinity_list", "5,0-3,2", "0-3,5", "0000,00000000,00000000,0000002f"),
    ("smp_affinity_list", "0-15:2/4", "0-1,4-5,8-9,12-13", "0000,00000000,00000000,00003333"),
    ("smp_affinity_list", "56-83", "56-83", "0000,000fffff,ff000000,00000000"),
])
def test_either_affinity_file_sets_both_views(node, name, value, listed, shown):
    res = node.tee(value, f"{IRQ}/{name}")
    assert (res.returncode, res.stderr) == (0, "")
    assert node.cat(f"{IRQ}/smp_affinity") == shown + "\n"
    assert node.cat(f"{IRQ}/smp_affinity_list") == listed + "\n"


@pytest.mark.parametrize("mask, errno", [
    ("0", EINVAL),                      # no online CPU
    ("g", EINVAL),
    ("123456789", EOVERFLOW),           # a chunk of more than 32 bits
    ("1,0,0,0,0", EOVERFLOW),           # more chunks than 112 CPUs need
    ("10000,00000000,00000000,00000000", EOVERFLOW),  # CPU 112 and up
])
def test_smp_affinity_refuses_like_the_kernel(node, mask, errno):
    node.tee("0-15", f"{IRQ}/smp_affinity_list")
    res = node.tee(mask, f"{IRQ}/smp_affinity")
    assert (res.returncode, res.stderr) == (1, f"tee: sysroot/{IRQ}/smp_affinity: {errno}\n")
    assert node.cat(f"{IRQ}/smp_affinity") == "0000,00000000,00000000,0000ffff\n"
    assert node.cat(f"{IRQ}/smp_affinity_list") == "0-15\n"


def _redirect(node: Node, value: str, rel: str) -> None:
    """``echo VALUE > FILE``: a plain shell write, which no stand-in sees; the node server then syncs."""
    assert node.run("bash", "-c", 'echo "$1" > "$2"', "-", value, f"sysroot/{rel}").returncode == 0
    os.utime(node.root / rel, ns=(2**62, 2**62))  # newer than the other view, whatever the clock's granularity
    sync_derived(node.root)  # the node server runs it after every command


@pytest.mark.parametrize("name, value, listed, shown", [
    ("smp_affinity", "f", "0-3", "0000,00000000,00000000,0000000f"),  # irq-affinity.rst: zero-padded groups
    ("smp_affinity", "1 0000000f", "0-3,32", "0000,00000000,00000001,0000000f"),
    ("smp_affinity_list", "5,0-3,2", "0-3,5", "0000,00000000,00000000,0000002f"),
    ("smp_affinity_list", "0-15:2/4", "0-1,4-5,8-9,12-13", "0000,00000000,00000000,00003333"),
])
def test_a_plain_redirect_reads_back_as_the_kernel_shows_it(node, name, value, listed, shown):
    node.tee("0-15", f"{IRQ}/smp_affinity_list")
    _redirect(node, value, f"{IRQ}/{name}")
    assert node.cat(f"{IRQ}/smp_affinity") == shown + "\n"
    assert node.cat(f"{IRQ}/smp_affinity_list") == listed + "\n"


@pytest.mark.parametrize("name, value", [
    ("smp_affinity", "0"), ("smp_affinity", "g"), ("smp_affinity", "123456789"),
    ("smp_affinity", "10000,00000000,00000000,00000000"), ("smp_affinity_list", "200"), ("smp_affinity_list", "3-1"),
])
def test_a_plain_redirect_the_kernel_refuses_leaves_the_affinity(node, name, value):
    """The kernel refuses the write (EINVAL / EOVERFLOW / ERANGE) and keeps the affinity: a shell's write in
    the lab cannot fail, but the value it left gives way to the one the kernel kept."""
    node.tee("0-15", f"{IRQ}/smp_affinity_list")
    _redirect(node, value, f"{IRQ}/{name}")
    assert node.cat(f"{IRQ}/smp_affinity") == "0000,00000000,00000000,0000ffff\n"
    assert node.cat(f"{IRQ}/smp_affinity_list") == "0-15\n"


def test_the_python_parser_refuses_as_the_tee_stand_in():
    """irq_affinity_parse (the node server's) and tools/tee.sh (a tee write) apply the same kernel rules."""
    for mask, errno in (("0", EINVAL), ("g", EINVAL), ("123456789", EOVERFLOW), ("1,0,0,0,0", EOVERFLOW),
                        ("10000,00000000,00000000,00000000", EOVERFLOW)):
        assert irq_affinity_parse(mask + "\n", 112, as_list=False) == (errno, [])
    assert irq_affinity_parse("112", 112, as_list=True) == (ERANGE, [])
    assert irq_affinity_parse("8000,00000000,00000000,00000001", 112, as_list=False) == ("", [0, 111])


# ---- 4. configfs rdma_cm ------------------------------------------------------------------------

def test_mkdir_of_an_rdma_cm_group_holds_the_kernel_attributes(node):
    configfs = node.root / "sys/kernel/config/rdma_cm"
    write_json(node.root / "run/lab/rdma_cm/mlx5_1.json", {"default_roce_mode": "RoCE v2", "default_roce_tos": 106})
    # a mkdir the stand-in does not see (called by its path): the node server's sync does the kernel's part after
    # the command (the stand-in does it at once and fails mlx5_99 with ENODEV: the next test)
    real_mkdir = shutil.which("mkdir", path="/usr/bin:/bin")
    assert node.run(real_mkdir, "sysroot/sys/kernel/config/rdma_cm/mlx5_1", "sysroot/sys/kernel/config/rdma_cm/mlx5_99").returncode == 0
    sync_derived(node.root)  # the node server runs it after every command
    assert sorted(os.listdir(configfs)) == ["mlx5_1"]  # no RDMA device mlx5_99: the kernel's mkdir fails (ENODEV)
    assert sorted(os.listdir(configfs / "mlx5_1/ports/1")) == ["default_roce_mode", "default_roce_tos"]
    assert node.cat("sys/kernel/config/rdma_cm/mlx5_1/ports/1/default_roce_mode") == "RoCE v2\n"
    assert node.cat("sys/kernel/config/rdma_cm/mlx5_1/ports/1/default_roce_tos") == "106\n"
    tos = "sys/kernel/config/rdma_cm/mlx5_1/ports/1/default_roce_tos"
    res = node.tee("256", tos)  # kstrtou8
    assert (res.returncode, res.stderr) == (1, f"tee: sysroot/{tos}: {ERANGE}\n")
    res = node.tee("ef", tos)
    assert (res.returncode, res.stderr) == (1, f"tee: sysroot/{tos}: {EINVAL}\n")
    assert node.tee("0x68", tos).returncode == 0
    assert node.cat(tos) == "104\n"
    mode = "sys/kernel/config/rdma_cm/mlx5_1/ports/1/default_roce_mode"
    res = node.tee("RoCE v3", mode)
    assert (res.returncode, res.stderr) == (1, f"tee: sysroot/{mode}: {EINVAL}\n")
    sync_derived(node.root)  # the kernel keeps the group's values past rmdir
    assert read_json(node.root / "run/lab/rdma_cm/mlx5_1.json") == {"default_roce_mode": "RoCE v2", "default_roce_tos": 104}
    assert node.run("rm", "-r", "sysroot/sys/kernel/config/rdma_cm/mlx5_1").returncode == 0
    node.run(real_mkdir, "sysroot/sys/kernel/config/rdma_cm/mlx5_1")
    sync_derived(node.root)
    assert node.cat(tos) == "104\n"


# ---- 5. the GID table's empty entries -----------------------------------------------------------

def test_an_empty_gid_entry_reads_zeros_and_its_attributes_einval(node):
    """drivers/infiniband/core/sysfs.c: ``show_port_gid`` prints the zero GID for an empty entry
    ("return zero GID as before. This maintains backward compatibility"), ``_show_port_gid_attr``
    returns -EINVAL ("for user space compatibility"); all 256 entries are listed."""
    port = "sysroot/sys/class/infiniband/mlx5_0/ports/1"
    res = node.run("cat", f"{port}/gids/5")
    assert (res.returncode, res.stdout, res.stderr) == (0, "0000:0000:0000:0000:0000:0000:0000:0000\n", "")
    for attr in ("types", "ndevs"):
        res = node.run("cat", f"{port}/gid_attrs/{attr}/5")
        assert (res.returncode, res.stdout, res.stderr) == (1, "", f"cat: {port}/gid_attrs/{attr}/5: {EINVAL}\n")
    res = node.run("grep", "-H", ".", f"{port}/gid_attrs/types/3", f"{port}/gid_attrs/types/4")
    assert (res.returncode, res.stdout) == (2, f"{port}/gid_attrs/types/3:RoCE v2\n")
    assert res.stderr == f"grep: {port}/gid_attrs/types/4: {EINVAL}\n"
    assert node.run("bash", "-c", f"ls {port}/gid_attrs/types | wc -l").stdout == "256\n"
    # fabtune's reader takes the EINVAL of an empty entry as "no type" and finds the RoCE v2 IPv4 GID
    table = node.run("bash", "-c", gid_table_command("sysroot", "mlx5_0"))
    assert (table.returncode, table.stderr) == (0, "")
    assert pick_roce_v2_ipv4(table.stdout, "10.0.0.1") == 3
    shown = node.run("show_gids", "mlx5_0")
    assert shown.stdout.splitlines()[-1] == "n_gids_found=4"


def test_mkdir_populates_the_group_within_the_same_command_and_rmdir_removes_it(node):
    """cma_configfs.c: mkdir makes the group with its attributes in the same system call (a host's
    ``mkdir G && echo 106 > G/ports/1/default_roce_tos`` works), rmdir drops the group with its attributes
    (configfs) and the kernel keeps the values; mkdir of a name that is no RDMA device fails with ENODEV."""
    group = "sysroot/sys/kernel/config/rdma_cm/mlx5_2"
    res = node.run("bash", "-c", f"mkdir {group} && printf '106\\n' | tee {group}/ports/1/default_roce_tos >/dev/null"
                                 f" && cat {group}/ports/1/default_roce_mode {group}/ports/1/default_roce_tos")
    assert (res.returncode, res.stdout, res.stderr) == (0, "RoCE v2\n106\n", "")
    res = node.run("bash", "-c", f"rmdir {group} && ls sysroot/sys/kernel/config/rdma_cm")
    assert (res.returncode, res.stderr) == (0, "")
    assert "mlx5_2" not in res.stdout.split()
    assert read_json(node.root / "run/lab/rdma_cm/mlx5_2.json") == {"default_roce_mode": "RoCE v2", "default_roce_tos": 106}
    res = node.run("bash", "-c", f"mkdir {group} && cat {group}/ports/1/default_roce_tos && rmdir {group}")
    assert (res.returncode, res.stdout) == (0, "106\n")
    res = node.run("env", "LC_ALL=C", "mkdir", "sysroot/sys/kernel/config/rdma_cm/mlx5_99")
    assert (res.returncode, res.stderr) == (1, "mkdir: cannot create directory 'sysroot/sys/kernel/config/rdma_cm/mlx5_99': No such device\n")
    assert not (node.root / "sys/kernel/config/rdma_cm/mlx5_99").exists()
    # anywhere else they are the real tools
    res = node.run("bash", "-c", "mkdir -p -m 0700 sysroot/tmp/a/b && rmdir sysroot/tmp/a/b sysroot/tmp/a && rmdir nope")
    assert (res.returncode, res.stderr) == (1, "rmdir: failed to remove 'nope': No such file or directory\n")
