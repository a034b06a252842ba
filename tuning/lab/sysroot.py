"""Build one lab node's sysroot: the sysfs / procfs / configfs files of a DGX-class node.

The layout is the lab contract (``docs/lab.md``); every file format follows
``shared/cases/cli/SYSFS.md`` (kernel ABI docs for sysfs/procfs/configfs,
MLNX_OFED docs for ``ecn/``, ``drivers/infiniband/hw/mlx5/cong.c`` for debugfs
``cc_params``). Files are plain files: a write is a write, exactly as fabtune
does it on a real host (``echo 9000 > sysroot/sys/class/net/IF/mtu``).

Besides the builder this module holds the small, stdlib-only helpers the tool
stand-ins (``tuning.lab.tools``) share: CPU lists and masks, and the private
stand-in state under ``<sysroot>/run/lab/`` (DCB of ``mlnx_qos``, RDMA-CM
defaults of ``cma_roce_tos``) that the fabric model also reads.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the stand-ins ~3 ms
from tuning.cpulist import cpumask_hex, format_cpulist, parse_cpulist  # noqa: F401  (used by the stand-ins)
from tuning.lab.model import populated_gid_indices  # noqa: F401  (the stand-ins' import; stdlib-only there)
from tuning.lab import sysroot_share
from tuning.cpulist import parse_hex_mask as parse_cpumask  # noqa: F401

if TYPE_CHECKING:  # the stand-ins import this module: keep their start-up stdlib-only and small
    from tuning.lab.fabric import Nic, Node

INT_MAX = 2**31 - 1
#: TCP congestion controls Debian builds as modules (``CONFIG_TCP_CONG_*=m``): setting one as the
#: default loads it (``tcp_ca_find_autoload``, root), and it joins ``tcp_available_congestion_control``
CC_MODULES = ("bic", "westwood", "htcp", "highspeed", "hybla", "vegas", "nv", "scalable", "lp", "veno",
              "yeah", "illinois", "dctcp", "cdg", "bbr")

#: The sysctls of an untuned lab node: ``key -> (value as the file holds it, handler)``.
#:
#: Values are the defaults of Linux 6.1 as Debian 12 (bookworm) builds it (``linux-image-6.1.0-*-amd64``,
#: ``CONFIG_HZ=250``, ``CONFIG_NUMA_BALANCING_DEFAULT_ENABLED=y``) before any ``sysctl.d`` file is read
#: (the lab node's ``etc/sysctl.d`` is empty): only keys whose default does not depend on the memory
#: size or the CPU count (``tcp_mem``, ``tcp_max_syn_backlog``, ``min_free_kbytes``, ``file-max`` and
#: ``pid_max`` are left out, as are keys a distribution's ``sysctl.d`` or patches change).
#: The handler is what the kernel's ``ctl_table`` entry accepts, a tuple:
#:
#: - ``("int", N, LO, HI)``: ``proc_dointvec[_minmax]`` of N ints, ``extra1``/``extra2`` as LO/HI (plain
#:   ``proc_dointvec``: the int range). Whitespace-separated decimals; one out of LO..HI or not a number:
#:   EINVAL, nothing stored; fewer than N values replace the first ones, more are ignored; the file
#:   reads them back tab-separated.
#: - ``("uint", N, LO, HI)``: ``proc_dou8vec_minmax`` / ``proc_douintvec[_minmax]`` (a ``-`` is EINVAL).
#: - ``("ports", 2, 1, 65535)``: ``ipv4_local_port_range``: as ``int``, then EINVAL unless
#:   low <= high and low >= ``ip_unprivileged_port_start`` (1024).
#: - ``("cc",)``: ``proc_tcp_congestion_control``: a registered name or one of :data:`CC_MODULES`
#:   (loaded on the way), else ENOENT.
#: - ``("ro",)``: mode 0444, no write handler: EACCES, root too.
_ANY = ("int", 1, -INT_MAX - 1, INT_MAX)  # plain proc_dointvec: any int
_U8 = ("uint", 1, 0, 255)                # proc_dou8vec_minmax without extra1/extra2
_BOOL = ("int", 1, 0, 1)
_POS = ("int", 1, 0, INT_MAX)
#: ``default_qdisc`` (``qdisc_set_default``): a registered qdisc or a ``sch_<name>`` module Debian ships
QDISCS = ("pfifo_fast", "pfifo", "bfifo", "pfifo_head_drop", "fq_codel", "fq", "fq_pie", "cake", "sfq",
          "codel", "pie", "red", "tbf", "htb", "prio", "multiq", "mq", "mqprio", "drr", "qfq", "hfsc", "sfb",
          "choke", "gred", "hhf", "netem", "plug", "skbprio", "ets", "taprio", "cbs", "etf")
SYSCTLS: dict[str, tuple[str, tuple]] = {
    # net/core/sysctl_net_core.c; minimum SOCK_MIN_RCVBUF 2304 / SOCK_MIN_SNDBUF 4608 (x86_64 sk_buff).
    # Every net.core key of 6.1 but the per-host ones (netdev_rss_key: random, read-only; bpf_jit_limit:
    # the module area; flow_limit_cpu_bitmap: a CPU bitmap)
    "net.core.rmem_max": ("212992", ("int", 1, 2304, INT_MAX)),
    "net.core.wmem_max": ("212992", ("int", 1, 4608, INT_MAX)),
    "net.core.rmem_default": ("212992", ("int", 1, 2304, INT_MAX)),
    "net.core.wmem_default": ("212992", ("int", 1, 4608, INT_MAX)),
    "net.core.netdev_max_backlog": ("1000", _ANY),
    "net.core.somaxconn": ("4096", _POS),
    "net.core.optmem_max": ("20480", _ANY),  # sizeof(unsigned long) * (2 * UIO_MAXIOV + 512)
    "net.core.netdev_budget": ("300", _ANY),
    "net.core.netdev_budget_usecs": ("8000", _POS),  # 2 * USEC_PER_SEC / HZ
    "net.core.netdev_tstamp_prequeue": ("1", _ANY),
    "net.core.netdev_unregister_timeout_secs": ("10", ("int", 1, 1, 3600)),
    "net.core.dev_weight": ("64", _ANY),
    "net.core.dev_weight_rx_bias": ("1", _ANY),
    "net.core.dev_weight_tx_bias": ("1", _ANY),
    "net.core.busy_poll": ("0", _POS),
    "net.core.busy_read": ("0", _POS),
    "net.core.default_qdisc": ("pfifo_fast", ("str", *QDISCS)),  # Debian's systemd sysctl.d sets fq_codel later
    "net.core.rps_sock_flow_entries": ("0", _POS),
    "net.core.flow_limit_table_len": ("4096", _ANY),
    "net.core.gro_normal_batch": ("8", ("int", 1, 1, INT_MAX)),
    "net.core.high_order_alloc_disable": ("0", _BOOL),
    "net.core.max_skb_frags": ("17", ("int", 1, 1, 17)),  # MAX_SKB_FRAGS
    "net.core.message_burst": ("10", _ANY),
    "net.core.message_cost": ("5", _ANY),  # proc_dointvec_jiffies: seconds
    "net.core.skb_defer_max": ("64", _POS),
    "net.core.tstamp_allow_data": ("1", _BOOL),
    "net.core.txrehash": ("1", ("uint", 1, 0, 1)),
    "net.core.devconf_inherit_init_net": ("0", ("int", 1, 0, 3)),
    "net.core.fb_tunnels_only_for_init_net": ("0", ("int", 1, 0, 2)),
    "net.core.bpf_jit_enable": ("1", ("int", 1, 1, 1)),  # CONFIG_BPF_JIT_ALWAYS_ON=y (Debian)
    "net.core.bpf_jit_harden": ("0", ("int", 1, 0, 2)),
    "net.core.bpf_jit_kallsyms": ("0", _BOOL),
    "net.core.xfrm_acq_expires": ("30", _ANY),
    "net.core.xfrm_aevent_etime": ("10", _ANY),
    "net.core.xfrm_aevent_rseqth": ("2", _ANY),
    "net.core.xfrm_larval_drop": ("1", _ANY),
    # net/ipv4/sysctl_net_ipv4.c, net/ipv4/tcp.c tcp_init (tcp_rmem[1] 131072 since 5.4), tcp_ipv4.c
    # tcp_sk_init; u8 keys are proc_dou8vec_minmax since 5.14 (0..255 unless a range is given)
    "net.ipv4.tcp_rmem": ("4096\t131072\t6291456", ("int", 3, 1, INT_MAX)),
    "net.ipv4.tcp_wmem": ("4096\t16384\t4194304", ("int", 3, 1, INT_MAX)),
    "net.ipv4.tcp_mtu_probing": ("0", _U8),
    "net.ipv4.tcp_mtu_probe_floor": ("48", ("int", 1, 48, 65535)),  # TCP_MIN_SND_MSS..65535
    "net.ipv4.tcp_base_mss": ("1024", _ANY),
    "net.ipv4.tcp_min_snd_mss": ("48", ("int", 1, 48, 65535)),
    "net.ipv4.tcp_probe_threshold": ("8", _ANY),
    "net.ipv4.tcp_probe_interval": ("600", ("uint", 1, 0, 2**32 - 1)),
    "net.ipv4.tcp_timestamps": ("1", _U8),
    "net.ipv4.tcp_sack": ("1", _U8),
    "net.ipv4.tcp_dsack": ("1", _U8),
    "net.ipv4.tcp_fack": ("0", _U8),
    "net.ipv4.tcp_window_scaling": ("1", _U8),
    "net.ipv4.tcp_slow_start_after_idle": ("1", _U8),
    "net.ipv4.tcp_no_metrics_save": ("0", _U8),
    "net.ipv4.tcp_no_ssthresh_metrics_save": ("1", ("uint", 1, 0, 1)),
    "net.ipv4.tcp_moderate_rcvbuf": ("1", _U8),
    "net.ipv4.tcp_autocorking": ("1", ("uint", 1, 0, 1)),
    "net.ipv4.tcp_ecn": ("2", _U8),  # 0..2 (SYSCTL_TWO) only in later kernels
    "net.ipv4.tcp_ecn_fallback": ("1", ("uint", 1, 0, 1)),
    "net.ipv4.tcp_tw_reuse": ("2", ("uint", 1, 0, 2)),
    "net.ipv4.tcp_syncookies": ("1", _U8),
    "net.ipv4.tcp_syn_retries": ("6", ("uint", 1, 1, 127)),  # MAX_TCP_SYNCNT
    "net.ipv4.tcp_synack_retries": ("5", _U8),
    "net.ipv4.tcp_retries1": ("3", ("uint", 1, 0, 255)),
    "net.ipv4.tcp_retries2": ("15", _U8),
    "net.ipv4.tcp_orphan_retries": ("0", _U8),
    "net.ipv4.tcp_fastopen": ("1", _ANY),
    "net.ipv4.tcp_fastopen_blackhole_timeout_sec": ("0", _POS),
    "net.ipv4.tcp_fin_timeout": ("60", _ANY),
    "net.ipv4.tcp_keepalive_time": ("7200", _ANY),
    "net.ipv4.tcp_keepalive_intvl": ("75", _ANY),
    "net.ipv4.tcp_keepalive_probes": ("9", _U8),
    "net.ipv4.tcp_notsent_lowat": ("4294967295", ("uint", 1, 0, 2**32 - 1)),
    "net.ipv4.tcp_adv_win_scale": ("1", ("int", 1, -31, 31)),
    "net.ipv4.tcp_app_win": ("31", _U8),  # 0..31 (tcp_app_win_max) only in later kernels
    "net.ipv4.tcp_abort_on_overflow": ("0", _U8),
    "net.ipv4.tcp_stdurg": ("0", _U8),
    "net.ipv4.tcp_rfc1337": ("0", _U8),
    "net.ipv4.tcp_frto": ("2", _U8),
    "net.ipv4.tcp_early_retrans": ("3", ("uint", 1, 0, 4)),
    "net.ipv4.tcp_recovery": ("1", _ANY),
    "net.ipv4.tcp_reordering": ("3", _ANY),
    "net.ipv4.tcp_max_reordering": ("300", _ANY),
    "net.ipv4.tcp_retrans_collapse": ("1", _U8),
    "net.ipv4.tcp_thin_linear_timeouts": ("0", _U8),
    "net.ipv4.tcp_low_latency": ("0", _ANY),  # obsolete, still there
    "net.ipv4.tcp_limit_output_bytes": ("1048576", _ANY),
    "net.ipv4.tcp_tso_win_divisor": ("3", _U8),
    "net.ipv4.tcp_min_tso_segs": ("2", ("uint", 1, 1, 255)),
    "net.ipv4.tcp_tso_rtt_log": ("9", _U8),
    "net.ipv4.tcp_min_rtt_wlen": ("300", ("int", 1, 0, 86400)),
    "net.ipv4.tcp_pacing_ss_ratio": ("200", ("int", 1, 0, 1000)),
    "net.ipv4.tcp_pacing_ca_ratio": ("120", ("int", 1, 0, 1000)),
    "net.ipv4.tcp_invalid_ratelimit": ("500", _ANY),  # proc_dointvec_ms_jiffies
    "net.ipv4.tcp_challenge_ack_limit": ("2147483647", _ANY),  # INT_MAX since 6.0
    "net.ipv4.tcp_comp_sack_delay_ns": ("1000000", ("uint", 1, 0, 2**64 - 1)),
    "net.ipv4.tcp_comp_sack_slack_ns": ("100000", ("uint", 1, 0, 2**64 - 1)),
    "net.ipv4.tcp_comp_sack_nr": ("44", _U8),
    "net.ipv4.tcp_early_demux": ("1", ("uint", 1, 0, 1)),
    "net.ipv4.tcp_fwmark_accept": ("0", _U8),
    "net.ipv4.tcp_l3mdev_accept": ("0", ("uint", 1, 0, 1)),
    "net.ipv4.tcp_reflect_tos": ("0", ("uint", 1, 0, 1)),
    "net.ipv4.tcp_migrate_req": ("0", ("uint", 1, 0, 1)),
    "net.ipv4.tcp_workaround_signed_windows": ("0", _U8),
    "net.ipv4.tcp_child_ehash_entries": ("0", ("uint", 1, 0, 16777216)),
    "net.ipv4.tcp_congestion_control": ("cubic", ("cc",)),
    "net.ipv4.tcp_available_congestion_control": ("reno cubic", ("ro",)),
    "net.ipv4.ip_local_port_range": ("32768\t60999", ("ports", 2, 1, 65535)),
    "net.ipv4.ip_no_pmtu_disc": ("0", _U8),
    "net.ipv4.ip_forward": ("0", _ANY),  # devinet_sysctl_forward: proc_dointvec, non-zero is on
    "net.ipv4.ip_default_ttl": ("64", ("uint", 1, 1, 255)),
    "net.ipv4.udp_rmem_min": ("4096", ("int", 1, 1, INT_MAX)),
    "net.ipv4.udp_wmem_min": ("4096", ("int", 1, 1, INT_MAX)),
    "net.ipv4.neigh.default.gc_thresh1": ("128", _POS),
    "net.ipv4.neigh.default.gc_thresh2": ("512", _POS),
    "net.ipv4.neigh.default.gc_thresh3": ("1024", _POS),
    "net.ipv6.conf.all.disable_ipv6": ("0", _ANY),
    "net.ipv6.conf.default.disable_ipv6": ("0", _ANY),
    # kernel/sched/core.c sched_core_sysctls: numa_balancing is proc_dointvec_minmax with extra1 SYSCTL_ZERO,
    # extra2 SYSCTL_FOUR (since 5.18, memory tiering; unchanged in 6.12+): 0..4 are stored, 5 and up EINVAL
    "kernel.numa_balancing": ("1", ("int", 1, 0, 4)),
    "kernel.sched_autogroup_enabled": ("1", _BOOL),
    "kernel.shmmni": ("4096", ("int", 1, 0, 32768)),  # IPCMNI
    "kernel.msgmax": ("8192", _POS),
    "kernel.msgmnb": ("16384", _POS),
    "kernel.nmi_watchdog": ("1", _BOOL),
    "kernel.watchdog": ("1", _BOOL),
    "kernel.watchdog_thresh": ("10", ("int", 1, 0, 60)),
    # mm/ (vm_table of kernel/sysctl.c, page-writeback.c, page_alloc.c, util.c, compaction.c, ...), every
    # vm key of 6.1 whose default depends neither on the memory size (below: NODE-sized) nor on hugepages
    # (nr_hugepages*: the lab's pools live in sysfs) nor is a trigger (compact_memory, drop_caches, stat_refresh)
    "vm.swappiness": ("60", ("int", 1, 0, 200)),
    "vm.zone_reclaim_mode": ("0", _POS),
    "vm.dirty_ratio": ("20", ("int", 1, 0, 100)),
    "vm.dirty_background_ratio": ("10", ("int", 1, 0, 100)),
    "vm.dirty_bytes": ("0", ("uint", 1, 0, 2**64 - 1)),  # 1..2 pages refused by the handler: not modelled
    "vm.dirty_background_bytes": ("0", ("uint", 1, 0, 2**64 - 1)),
    "vm.dirty_expire_centisecs": ("3000", _POS),
    "vm.dirty_writeback_centisecs": ("500", _ANY),
    "vm.dirtytime_expire_seconds": ("43200", _POS),
    "vm.overcommit_memory": ("0", ("int", 1, 0, 2)),
    "vm.overcommit_ratio": ("50", _ANY),
    "vm.overcommit_kbytes": ("0", ("uint", 1, 0, 2**64 - 1)),
    "vm.max_map_count": ("65530", _POS),
    "vm.vfs_cache_pressure": ("100", _POS),
    "vm.numa_stat": ("1", _BOOL),
    "vm.min_slab_ratio": ("5", ("int", 1, 0, 100)),
    "vm.min_unmapped_ratio": ("1", ("int", 1, 0, 100)),
    "vm.watermark_boost_factor": ("15000", _POS),
    "vm.watermark_scale_factor": ("10", ("int", 1, 1, 3000)),
    "vm.compaction_proactiveness": ("20", ("int", 1, 0, 100)),
    "vm.compact_unevictable_allowed": ("1", _BOOL),
    "vm.extfrag_threshold": ("500", ("int", 1, 0, 1000)),
    "vm.lowmem_reserve_ratio": ("256\t256\t32\t0\t0", ("int", 5, 0, INT_MAX)),  # DMA DMA32 Normal Movable Device
    "vm.page-cluster": ("3", _POS),
    "vm.page_lock_unfairness": ("5", _POS),
    "vm.panic_on_oom": ("0", ("int", 1, 0, 2)),
    "vm.oom_dump_tasks": ("1", _ANY),
    "vm.oom_kill_allocating_task": ("0", _ANY),
    "vm.laptop_mode": ("0", _ANY),
    "vm.legacy_va_layout": ("0", _POS),
    "vm.stat_interval": ("1", _ANY),
    "vm.mmap_min_addr": ("65536", ("uint", 1, 0, 2**64 - 1)),  # CONFIG_DEFAULT_MMAP_MIN_ADDR (Debian)
    "vm.mmap_rnd_bits": ("28", ("int", 1, 28, 32)),
    "vm.mmap_rnd_compat_bits": ("8", ("int", 1, 8, 16)),
    "vm.unprivileged_userfaultfd": ("0", _BOOL),
    "vm.hugetlb_shm_group": ("0", _ANY),
    "vm.nr_overcommit_hugepages": ("0", ("uint", 1, 0, 2**64 - 1)),
    "vm.admin_reserve_kbytes": ("8192", ("uint", 1, 0, 2**64 - 1)),  # min(3 % of free, 8 MiB)
    "vm.user_reserve_kbytes": ("131072", ("uint", 1, 0, 2**64 - 1)),  # min(3 % of the task, 128 MiB)
}
#: ``net.ipv4.conf.<all|default|lo|netdev>.<name>`` (net/ipv4/devinet.c ``devinet_conf_proc``: proc_dointvec,
#: any int; ``ipv4_devconf`` / ``ipv4_devconf_dflt``): name -> (all, default and every interface's value).
#: ``all.accept_source_route`` is 0, ``default`` and the interfaces 1; ``lo`` has ``disable_policy`` and
#: ``disable_xfrm`` 1. Same names and values as a 6.1 node's ``/proc/sys/net/ipv4/conf/*/``.
IPV4_CONF = {
    "accept_local": "0", "accept_redirects": "1", "accept_source_route": "1", "arp_accept": "0",
    "arp_announce": "0", "arp_evict_nocarrier": "1", "arp_filter": "0", "arp_ignore": "0", "arp_notify": "0",
    "bc_forwarding": "0", "bootp_relay": "0", "disable_policy": "0", "disable_xfrm": "0",
    "drop_gratuitous_arp": "0", "drop_unicast_in_l2_multicast": "0", "force_igmp_version": "0",
    "forwarding": "0", "igmpv2_unsolicited_report_interval": "10000",
    "igmpv3_unsolicited_report_interval": "1000", "ignore_routes_with_linkdown": "0", "log_martians": "0",
    "mc_forwarding": "0", "medium_id": "0", "promote_secondaries": "0", "proxy_arp": "0",
    "proxy_arp_pvlan": "0", "route_localnet": "0", "rp_filter": "0", "secure_redirects": "1",
    "send_redirects": "1", "shared_media": "1", "src_valid_mark": "0", "tag": "0",
}
#: how the kernel sized these at boot for the lab node's memory (``hw_cpu.NODE_MEMORY_KB``, 2 TiB; the
#: free pages are taken as the nodes' MemFree, so the values are approximate): ``tcp_mem``/``udp_mem``
#: (``tcp_init_mem``: free buffer pages / 16, then 3/4, 1, 3/2 of it; UDP / 8), ``min_free_kbytes``
#: (``int_sqrt(lowmem_kbytes * 16)``, at most 262144), TCP's ehash (16 M buckets) for
#: ``tcp_max_syn_backlog`` (/ 128), ``tcp_max_tw_buckets`` and ``tcp_max_orphans`` (/ 2)
MEMORY_SIZED = ("net.ipv4.tcp_mem", "net.ipv4.udp_mem", "vm.min_free_kbytes", "net.ipv4.tcp_max_syn_backlog",
                "net.ipv4.tcp_max_tw_buckets", "net.ipv4.tcp_max_orphans")


def memory_sysctls(free_kb: int) -> dict[str, tuple[str, tuple]]:
    """The :data:`MEMORY_SIZED` keys of a node with ``free_kb`` kB free at boot, as :data:`SYSCTLS` entries."""
    pages = free_kb // 4
    tcp = max(pages // 16, 128)
    udp = max(pages // 8, 128)
    ehash = 1 << 24
    longs = ("uint", 3, 0, 2**63 - 1)  # proc_doulongvec_minmax
    return {
        "net.ipv4.tcp_mem": (f"{tcp // 4 * 3}\t{tcp}\t{tcp // 4 * 3 * 2}", longs),
        "net.ipv4.udp_mem": (f"{udp // 4 * 3}\t{udp}\t{udp // 4 * 3 * 2}", longs),
        "vm.min_free_kbytes": (str(min(int((free_kb * 16) ** 0.5), 262144)), _POS),
        "net.ipv4.tcp_max_syn_backlog": (str(max(128, ehash // 128)), _ANY),
        "net.ipv4.tcp_max_tw_buckets": (str(ehash // 2), _ANY),
        "net.ipv4.tcp_max_orphans": (str(ehash // 2), _ANY),
    }


def node_sysctls(node: Node) -> dict[str, tuple[str, tuple]]:
    """Every sysctl of a lab node: :data:`SYSCTLS`, its memory-sized ones and ``net.ipv4.conf.*`` of
    ``all``, ``default``, ``lo`` and each NIC's netdev (one table: the builder, ``sysctl`` and ``tee``
    check writes against it)."""
    from tuning.lab.hw_cpu import NODE_MEMORY_KB

    out = dict(SYSCTLS)
    out.update(memory_sysctls(sum(free for _, free in NODE_MEMORY_KB)))
    for dev in ("all", "default", "lo", *(nic.netdev for nic in node.nics)):
        for name, value in IPV4_CONF.items():
            if dev == "all" and name == "accept_source_route" or dev == "lo" and name.startswith("disable_"):
                value = "0" if dev == "all" else "1"
            out[f"net.ipv4.conf.{dev}.{name}"] = (value, _ANY)
    return out


#: Initial sysctl values of an untuned node (key -> value as the file holds it).
SYSCTL_DEFAULTS = {key: value for key, (value, _) in SYSCTLS.items()}
#: where the handlers of :data:`SYSCTLS` lie in a sysroot for the ``tee`` stand-in (bash: one line
#: per key, ``<path under proc/sys> <kind> [N LO HI | module names]``)
SYSCTL_LIMITS = "run/lab/sysctl-limits"

#: MLNX_OFED ``ecn/roce_rp/<param>`` defaults (ConnectX firmware defaults).
RP_PARAMS = {
    "clamp_tgt_rate": 0, "clamp_tgt_rate_after_time_inc": 1, "rpg_time_reset": 300,
    "rpg_byte_reset": 32767, "rpg_threshold": 1, "rpg_max_rate": 0, "rpg_ai_rate": 5,
    "rpg_hai_rate": 50, "rpg_gd": 11, "rpg_min_dec_fac": 50, "rpg_min_rate": 1,
    "rate_to_set_on_first_cnp": 0, "dce_tcp_g": 1019, "dce_tcp_rtt": 1,
    "rate_reduce_monitor_period": 4, "initial_alpha_value": 1023,
}
#: Inbox-driver debugfs ``cc_params/<name>`` defaults (names of mlx5 ``cong.c``).
CC_PARAMS = {
    "rp_clamp_tgt_rate": 0, "rp_clamp_tgt_rate_ati": 1, "rp_time_reset": 300,
    "rp_byte_reset": 32767, "rp_threshold": 1, "rp_ai_rate": 5, "rp_max_rate": 0,
    "rp_hai_rate": 50, "rp_min_dec_fac": 50, "rp_min_rate": 1,
    "rp_rate_to_set_on_first_cnp": 0, "rp_dce_tcp_g": 1019, "rp_dce_tcp_rtt": 1,
    "rp_rate_reduce_monitor_period": 4, "rp_initial_alpha_value": 1023, "rp_gd": 11,
    "np_min_time_between_cnps": 0, "np_cnp_dscp": 48, "np_cnp_prio_mode": 1, "np_cnp_prio": 6,
}
GID_TABLE_SIZE = 256
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
#: what an empty GID entry's ``gid_attrs/types/<N>`` and ``ndevs/<N>`` are in the lab: a link to an nsfs
#: file, which every kernel has and whose read fails with EINVAL (no read method: ``vfs_read``), the
#: errno the kernel's ``_show_port_gid_attr`` returns "for user space compatibility"
#: (``drivers/infiniband/core/sysfs.c``). So ``cat``, ``grep``, ``head`` or a ``read`` of it say
#: ``Invalid argument`` as on a real node (SYSFS.md), while ``ls`` lists all 256 entries. Only
#: ``ls -l``/``stat`` tell it is a link; the lab's own readers skip links (:func:`populated_gid_indices`).
GID_EMPTY_ATTR = "/proc/self/ns/net"
INITIAL_IRQ_CPULIST = "0-15"
IRQ_PREC = 4  # width of the IRQ number column of /proc/interrupts (nr_irqs >= 1000)


# ---- CPU lists and masks (kernel ``%*pbl`` / ``%*pb`` formats) -----------------------------

def nr_cpus(node: Node) -> int:
    """Number of CPUs of a node: one past the highest CPU of its NUMA nodes."""
    return max(max(parse_cpulist(c)) for c in node.numa_cpulists) + 1


# ---- private stand-in state (<sysroot>/run/lab/) --------------------------------------------

def default_dcb() -> dict:
    """Untuned DCB state of a port: trust pcp, PFC off, the default DSCP->priority map.

    Shape: ``{"trust": "pcp", "pfc": [0]*8, "dscp2prio": [dscp // 8 for dscp in 0..63]}``
    (``dscp2prio`` is indexed by DSCP).
    """
    return {"trust": "pcp", "pfc": [0] * 8, "dscp2prio": [d // 8 for d in range(64)]}


def dcb_path(sysroot: Path, ifname: str) -> Path:
    """Where ``mlnx_qos`` keeps a port's DCB state: ``run/lab/dcb/<if>.json``."""
    return sysroot / "run" / "lab" / "dcb" / f"{ifname}.json"


class dcb_lock:  # noqa: N801 - used as a context manager, like open()
    """Exclusive lock on a node's DCB state (``flock`` on the ``run/lab/dcb`` folder), held by
    ``mlnx_qos`` and the lab's DCBX agent around each read-modify-write, so neither loses the
    other's update. No file is created (the folder itself is locked)."""

    def __init__(self, sysroot: Path):
        self._dir = sysroot / "run" / "lab" / "dcb"

    def __enter__(self) -> "dcb_lock":
        import fcntl

        self._fd = os.open(self._dir, os.O_RDONLY)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)  # closing releases the lock


def rdma_cm_path(sysroot: Path, dev: str) -> Path:
    """Where the RDMA-CM defaults live while configfs has no ``rdma_cm/<dev>`` group."""
    return sysroot / "run" / "lab" / "rdma_cm" / f"{dev}.json"


def populate_rdma_cm(root: Path, dev: str) -> bool:
    """``mkdir rdma_cm/<dev>`` as configfs does it (``drivers/infiniband/core/cma_configfs.c``
    ``make_cma_dev``): the group at once holds ``ports/<p>/default_roce_mode`` and
    ``default_roce_tos`` with the values the kernel keeps (``run/lab/rdma_cm/<dev>.json``).

    Returns False (nothing created) when ``dev`` is not an RDMA device of the node (the kernel's
    mkdir fails with ENODEV).
    """
    ports = root / "sys/class/infiniband" / dev / "ports"
    if not ports.is_dir():
        return False
    values = read_json(rdma_cm_path(root, dev))
    for port in sorted(os.listdir(ports)):
        folder = root / "sys/kernel/config/rdma_cm" / dev / "ports" / port
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("default_roce_mode", "default_roce_tos"):
            (folder / name).write_text(f"{values[name]}\n")
    return True


def read_json(path: Path) -> dict:
    """A private-state JSON file as a dict."""
    return json.loads(path.read_text())


def write_json(path: Path, data: dict) -> None:
    """Write private state atomically (readers in other processes never see half a file)."""
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, sort_keys=True) + "\n")
    tmp.replace(path)


def sysctl_path(sysroot: Path, key: str) -> Path:
    """``net.core.rmem_max`` -> ``<sysroot>/proc/sys/net/core/rmem_max`` (``/`` keys too)."""
    return sysroot / "proc" / "sys" / key.replace(".", "/")


def sysctl_handler(key: str) -> tuple:
    """The handler of sysctl ``key`` (``net.core.rmem_max`` or ``net/core/rmem_max``) in the one table of
    :func:`node_sysctls`; a key it does not know takes whitespace-separated integers."""
    key = key.replace("/", ".")
    if key in SYSCTLS:
        return SYSCTLS[key][1]
    if key in MEMORY_SIZED:
        return memory_sysctls(0)[key][1]
    if key.startswith("net.ipv4.conf.") and key.rsplit(".", 1)[1] in IPV4_CONF:
        return _ANY
    return ("int", 99, -(2**63), 2**63 - 1)


def sysctl_store(sysroot: Path, key: str, value: str) -> tuple[str, str]:
    """What the kernel makes of a write of ``value`` to sysctl ``key`` (handlers of :data:`SYSCTLS`).

    Returns ``("", text the file then holds)`` or ``(errno text, "")`` (``Invalid argument``,
    ``No such file or directory``, ``Permission denied``); ``tuning/lab/tools/tee.sh`` does the same
    from ``run/lab/sysctl-limits``. A key the table does not know takes whitespace-separated integers.
    May load a congestion control (``tcp_available_congestion_control`` grows).
    """
    value = value[:-1] if value.endswith("\n") else value
    handler = sysctl_handler(key)
    kind = handler[0]
    if kind == "ro":
        return "Permission denied", ""
    if kind == "str":  # a name the kernel knows or loads (default_qdisc: qdisc_set_default), else ENOENT
        return ("", value.strip() + "\n") if value.strip() in handler[1:] else ("No such file or directory", "")
    if kind == "cc":
        avail = sysctl_path(sysroot, "net.ipv4.tcp_available_congestion_control")
        names = avail.read_text().split()
        if value not in names:
            if value not in CC_MODULES:
                return "No such file or directory", ""
            avail.write_text(" ".join(names + [value]) + "\n")
        return "", value + "\n"
    count, lo, hi = handler[1:]
    words = value.split()
    pattern = r"[0-9]{1,18}" if kind == "uint" else r"-?[0-9]{1,18}"
    if not words or not all(re.fullmatch(pattern, w) for w in words[:count]):
        return "Invalid argument", ""
    nums = [int(w) for w in words[:count]]
    if not all(lo <= n <= hi for n in nums):
        return "Invalid argument", ""
    current = sysctl_path(sysroot, key).read_text().split()
    merged = nums + [int(c) for c in current[len(nums):count]] if count < 99 else nums
    if kind == "ports" and (merged[1] < merged[0] or merged[0] < 1024):
        return "Invalid argument", ""
    return "", "\t".join(map(str, merged)) + "\n"


#: more of the sysroot, one builder per node domain of issue 7 ("module:function" called with
#: ``(root: Path, node: Node)`` after the files above; imported only when a sysroot is built)
EXTRA_BUILDERS: list[str] = [
    # part A (firmware)
    "tuning.lab.hw_nic:build",
    # part B (topology)
    "tuning.lab.hw_gpu:build",
    # part C (kernel, power)
    "tuning.lab.hw_cpu:build",
    # part D (modules, PCIe, pause)
    "tuning.lab.hw_pci:build",
    # issue 8 part A (incast: NIC counters, link speed)
    "tuning.lab.counters:build",
]


# ---- the builder -----------------------------------------------------------------------------

def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def nic_mac(nic: Nic) -> str:
    """Deterministic MAC of a lab NIC: ConnectX OUI ``0c:42:a1`` + the IPv4's last 3 bytes."""
    octets = [int(o) for o in nic.ipv4.split("/")[0].split(".")]
    return "0c:42:a1:" + ":".join(f"{o:02x}" for o in octets[1:])


def nic_gids(nic: Nic) -> list[tuple[str, str]]:
    """The populated GID entries of a NIC's port 1, in table order: ``[(gid, type), ...]``.

    0/1 link-local v1/v2 (EUI-64 of the MAC), then with ``extra_link_local`` a
    second fe80 pair, then the IPv4-mapped pair (``...:ffff:0a00:0001`` for 10.0.0.1).
    """
    mac = [int(b, 16) for b in nic_mac(nic).split(":")]
    eui = [mac[0] ^ 2, mac[1], mac[2], 0xFF, 0xFE, mac[3], mac[4], mac[5]]
    local = "fe80:0000:0000:0000:" + ":".join(f"{eui[i]:02x}{eui[i + 1]:02x}" for i in range(0, 8, 2))
    ip = [int(o) for o in nic.ipv4.split("/")[0].split(".")]
    v4 = f"0000:0000:0000:0000:0000:ffff:{ip[0]:02x}{ip[1]:02x}:{ip[2]:02x}{ip[3]:02x}"
    addrs = [local]
    if nic.extra_link_local:
        addrs.append(f"fe80:0000:0000:0000:5a1e:77c2:90ab:{ip[1]:02x}{ip[3]:02x}")
    addrs.append(v4)
    return [(gid, kind) for gid in addrs for kind in ("IB/RoCE v1", "RoCE v2")]


def nic_irqs(nic: Nic) -> list[tuple[int, str]]:
    """``[(irq, name), ...]``: ``mlx5_async0`` at ``first_irq``, then ``mlx5_comp0..N-1``."""
    names = ["mlx5_async0"] + [f"mlx5_comp{k}" for k in range(nic.comp_vectors)]
    return [(nic.first_irq + i, name) for i, name in enumerate(names)]


def build_sysroot(root: Path, node: Node) -> None:
    """Create a node's sysroot under ``root`` (which must not exist yet or be empty).

    Args:
        root: the sysroot folder, ``<state>/nodes/<node>/sysroot``.
        node: the node (its NICs, NUMA CPU lists and driver flavour).
    """
    n = nr_cpus(node)
    _put(root / "sys/devices/system/cpu/online", f"0-{n - 1}")
    _put(root / "sys/devices/system/node/online", f"0-{len(node.numa_cpulists) - 1}")
    for i, cpulist in enumerate(node.numa_cpulists):
        _put(root / f"sys/devices/system/node/node{i}/cpulist", cpulist)
    (root / "sys/kernel/config/rdma_cm").mkdir(parents=True)
    for folder in ("etc/sysctl.d", "etc/systemd/system", "etc/udev/rules.d", "usr/local/sbin",
                   "run/lab/dcb", "run/lab/rdma_cm"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    sysctls = node_sysctls(node)
    for key, (value, handler) in sysctls.items():
        _put(sysctl_path(root, key), value)
        if handler[0] == "ro":
            sysctl_path(root, key).chmod(0o444)
    _put(root / SYSCTL_LIMITS, "\n".join(
        " ".join([key.replace(".", "/"), handler[0], *map(str, handler[1:] or (CC_MODULES if handler[0] == "cc" else ()))])
        for key, (_, handler) in sysctls.items()))
    _put(root / "proc/irq/default_smp_affinity", cpumask_hex(list(range(n)), n))
    for index, nic in enumerate(node.nics):
        _build_pci(root, node, nic)
        _build_netdev(root, node, nic, ifindex=index + 2)
        _build_rdma(root, nic)
        _build_irqs(root, node, nic)
    _put(root / "proc/interrupts", render_interrupts(node).rstrip("\n"))
    for target in EXTRA_BUILDERS:
        module, _, func = target.partition(":")
        getattr(__import__(module, fromlist=[func]), func)(root, node)
    # /run/fabtune/node.lock as a node that fabtune has run on holds it (root-only; empty)
    (root / "run/fabtune").mkdir(parents=True)
    (root / "run/fabtune/node.lock").write_bytes(b"")
    (root / "run/fabtune/node.lock").chmod(0o600)
    (root / "run/fabtune").chmod(0o700)


def _build_pci(root: Path, node: Node, nic: Nic) -> None:
    pci = root / "sys/bus/pci/devices" / nic.bdf
    cpulist = node.numa_cpulists[nic.numa_node]
    _put(pci / "numa_node", str(nic.numa_node))
    _put(pci / "local_cpulist", cpulist)
    _put(pci / "local_cpus", cpumask_hex(parse_cpulist(cpulist), nr_cpus(node)))
    for irq, _ in nic_irqs(nic):
        _put(pci / "msi_irqs" / str(irq), "msix")
    (pci / "infiniband" / nic.rdma_device).mkdir(parents=True)
    (pci / "net" / nic.netdev).mkdir(parents=True)
    if node.driver == "inbox":
        for name, value in CC_PARAMS.items():
            _put(root / "sys/kernel/debug/mlx5" / nic.bdf / "cc_params" / name, str(value))


def _build_netdev(root: Path, node: Node, nic: Nic, ifindex: int) -> None:
    net = root / "sys/class/net" / nic.netdev
    _put(net / "mtu", "1500")
    _put(net / "address", nic_mac(nic))
    _put(net / "operstate", "up")
    _put(net / "ifindex", str(ifindex))
    (net / "device").symlink_to(f"../../../bus/pci/devices/{nic.bdf}")
    _put(dcb_path(root, nic.netdev), json.dumps(default_dcb(), sort_keys=True))
    if node.driver != "ofed":
        return
    _put(net / "qos/trust", "pcp")
    for proto in ("roce_np", "roce_rp"):
        for prio in range(8):
            _put(net / "ecn" / proto / "enable" / str(prio), "0")
    _put(net / "ecn/roce_np/cnp_dscp", "48")
    _put(net / "ecn/roce_np/cnp_802p_prio", "6")
    _put(net / "ecn/roce_np/min_time_between_cnps", "0")
    for name, value in RP_PARAMS.items():
        _put(net / "ecn/roce_rp" / name, str(value))


def _build_rdma(root: Path, nic: Nic) -> None:
    ib = root / "sys/class/infiniband" / nic.rdma_device
    ib.mkdir(parents=True)
    (ib / "device").symlink_to(f"../../../bus/pci/devices/{nic.bdf}")
    port = ib / "ports/1"
    _put(port / "link_layer", "Ethernet")
    _put(port / "state", "4: ACTIVE")
    (port / "gids").mkdir()
    gids = nic_gids(nic)
    rel = f"sys/class/infiniband/{nic.rdma_device}/ports/1"
    for index in range(GID_TABLE_SIZE):  # read-only to everyone: the empty entries are shared
        sysroot_share.put(root, f"{rel}/gids/{index}", gids[index][0] if index < len(gids) else ZERO_GID)
    for index, (_, kind) in enumerate(gids):
        set_gid_attrs(port, index, kind, nic.netdev)
    for folder in ("types", "ndevs"):  # the empty entries (a fresh folder: no set_gid_attrs checks, 2 x ~250 per NIC)
        for index in range(len(gids), GID_TABLE_SIZE):
            sysroot_share.put_symlink(root, f"{rel}/gid_attrs/{folder}/{index}", GID_EMPTY_ATTR)
    write_json(rdma_cm_path(root, nic.rdma_device), {"default_roce_mode": "RoCE v2", "default_roce_tos": 0})


def set_gid_attrs(port: Path, index: int, kind: str, ndev: str) -> None:
    """GID entry ``index`` of an RDMA ``port`` folder gets its ``gid_attrs/types`` and ``ndevs``
    (``RoCE v2``, ``ens1f0np0``); empty ``kind``: the entry is empty, both read EINVAL (:data:`GID_EMPTY_ATTR`).
    Each is replaced (unlinked first), never written in place: an empty entry may be one inode of
    every node's sysroot (:mod:`tuning.lab.sysroot_share`)."""
    for folder, text in (("types", kind), ("ndevs", ndev)):
        path = port / "gid_attrs" / folder / str(index)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.exists():
            path.unlink()
        if kind:
            path.write_text(text + "\n")
        else:
            path.symlink_to(GID_EMPTY_ATTR)


def _build_irqs(root: Path, node: Node, nic: Nic) -> None:
    n = nr_cpus(node)
    for irq, _ in nic_irqs(nic):
        folder = root / "proc/irq" / str(irq)
        _put(folder / "smp_affinity_list", INITIAL_IRQ_CPULIST)
        _put(folder / "smp_affinity", cpumask_hex(parse_cpulist(INITIAL_IRQ_CPULIST), n))
        _put(folder / "node", str(nic.numa_node))


# ---- /proc/interrupts (kernel/irq/proc.c show_interrupts layout) ----------------------------

def _irq_row(label: str, counts: list[int], tail: str) -> str:
    return f"{label:>{IRQ_PREC}}: " + "".join(f"{c:10d} " for c in counts) + tail


def render_interrupts(node: Node) -> str:
    """``/proc/interrupts`` of the node as the kernel prints it (sample: proc_interrupts__*.txt).

    Header: ``IRQ_PREC + 8`` spaces then ``CPU%-8d`` per CPU (right-stripped). Row:
    ``%4d: `` then ``%10u `` per CPU, `` %8s`` chip, `` %4lu`` hwirq, ``-%-8s`` ``edge``,
    two spaces and the action name ``mlx5_compK@pci:<bdf>``. Each completion IRQ
    has fired on CPU ``K % 16`` (the initial remote affinity ``0-15``).
    """
    n = nr_cpus(node)
    lines = [(" " * (IRQ_PREC + 8) + "".join(f"CPU{c:<8d}" for c in range(n))).rstrip()]
    timer = [35 if c == 0 else 0 for c in range(n)]
    lines.append(_irq_row("0", timer, f" {'IR-IO-APIC':>8} {2:>{IRQ_PREC}}-{'edge':<8}  timer"))
    for nic in node.nics:
        for hwirq, (irq, name) in enumerate(nic_irqs(nic)):
            counts = [0] * n
            counts[max(hwirq - 1, 0) % 16] = 1000 + 7919 * (irq % 97) + hwirq
            chip = f"IR-PCI-MSIX-{nic.bdf}"
            lines.append(_irq_row(str(irq), counts, f" {chip:>8} {hwirq:>{IRQ_PREC}}-{'edge':<8}  {name}@pci:{nic.bdf}"))
    lines.append(_irq_row("NMI", [100 + c for c in range(n)], "  Non-maskable interrupts"))
    lines.append(_irq_row("LOC", [500000 + 13 * c for c in range(n)], "  Local timer interrupts"))
    return "\n".join(lines) + "\n"


# ---- kernel-derived files kept coherent after each command ----------------------------------

def sync_derived(sysroot: Path) -> None:
    """Mirror what the kernel derives itself: ``smp_affinity`` <-> ``smp_affinity_list``, and the
    configfs ``rdma_cm`` groups (:func:`_sync_rdma_cm`).

    A real kernel parses a write to either affinity file, refuses it or keeps the CPUs, and shows
    both views in its own formats. ``tee`` (the stand-in) does so at once; a plain shell redirect
    cannot be refused, so the node server calls this after every command: the newer of the two
    files is parsed as the kernel parses it (:func:`irq_affinity_parse`) and both are rewritten in
    the read-back formats (``f`` -> ``0000,00000000,00000000,0000000f`` and ``0-3``); text the
    kernel would have refused gives way to the affinity the other file still holds (the kernel
    kept it).
    """
    _sync_rdma_cm(sysroot)
    try:
        n = max(parse_cpulist((sysroot / "sys/devices/system/cpu/online").read_text())) + 1
        with os.scandir(sysroot / "proc" / "irq") as entries:
            folders = [(e.name, e.path) for e in entries]
    except (OSError, ValueError):
        return
    synced = _SYNCED.setdefault((str(sysroot), n), {})  # a mask is as wide as the online CPUs
    for name, folder in folders:
        lst, msk = f"{folder}/smp_affinity_list", f"{folder}/smp_affinity"
        try:
            seen = (_identity(lst), _identity(msk))
            if synced.get(name) == seen:
                continue  # neither file changed since this folder was last made coherent
            newer_is_list = seen[0][0] >= seen[1][0]
            newer, older = (lst, msk) if newer_is_list else (msk, lst)
            err, cpus = irq_affinity_parse(Path(newer).read_text(), n, newer_is_list)
            if err:  # the kernel refused the write and kept what the other view still shows
                err, cpus = irq_affinity_parse(Path(older).read_text(), n, not newer_is_list)
            if err:
                raise ValueError(err)
            _rewrite(Path(msk), cpumask_hex(cpus, n))
            _rewrite(Path(lst), format_cpulist(cpus))
            synced[name] = (_identity(lst), _identity(msk))
        except (OSError, ValueError):
            synced.pop(name, None)
            continue


_EINVAL, _ERANGE, _EOVERFLOW = "Invalid argument", "Numerical result out of range", "Value too large for defined data type"


def irq_affinity_parse(text: str, n: int, as_list: bool) -> tuple[str, list[int]]:
    """A write to ``smp_affinity_list`` (``as_list``: ``bitmap_parselist``) or ``smp_affinity``
    (``bitmap_parse``, ``lib/bitmap-str.c``) of a node with ``n`` CPUs, as ``kernel/irq/proc.c``
    ``write_irq_affinity`` takes it: ``("", CPUs)`` or ``(errno text, [])``; ``tools/tee.sh`` applies the
    same rules. A list: ``N``, ``A-B`` or ``A-B:U/G`` parted by commas (EINVAL; a CPU >= n: ERANGE). A
    mask: hex chunks of at most 32 bits parted by commas or blanks, the last the lowest (a non-hex
    character EINVAL; a longer chunk, more chunks than n bits need or a bit >= n: EOVERFLOW). No online
    CPU: EINVAL (``irq_select_affinity_usr`` on all but Alpha).
    """
    text = text[:-1] if text.endswith("\n") else text
    cpus: set[int] = set()
    if as_list:
        for part in text.split(",") if text else [""]:
            m = re.fullmatch(r"([0-9]{1,10})(?:-([0-9]{1,10})(?::([0-9]{1,10})/([0-9]{1,10}))?)?", part)
            if not m:
                return _EINVAL, []
            lo, hi = int(m[1]), int(m[2] or m[1])
            used, group = (int(m[3]), int(m[4])) if m[3] else (1, 1)
            if lo > hi or group == 0 or used > group:
                return _EINVAL, []
            if hi >= n:
                return _ERANGE, []
            cpus.update(c for base in range(lo, hi + 1, group) for c in range(base, min(base + used, hi + 1)))
    else:
        chunks = [c for c in re.split(r"[,\s]", text) if c]
        if len(chunks) > (n + 31) // 32:
            return _EOVERFLOW, []
        for k, chunk in enumerate(reversed(chunks)):
            if not re.fullmatch(r"[0-9a-fA-F]+", chunk):
                return _EINVAL, []
            word = int(chunk, 16)
            if len(chunk) > 8 or word >> max(0, min(32, n - 32 * k)):
                return _EOVERFLOW, []
            cpus.update(32 * k + b for b in range(32) if word >> b & 1)
    return ("", sorted(cpus)) if cpus else (_EINVAL, [])


#: (sysroot, online CPUs) -> IRQ -> :func:`_identity` of its two affinity files when
#: :func:`sync_derived` last left them coherent: an IRQ whose files have not changed since is not
#: read again (the node server syncs after every command: reading a node's 137 IRQs each time took
#: 7 ms of the daemon's event loop per command, 1 ms now)
_SYNCED: dict[tuple[str, int], dict[str, tuple]] = {}


def _identity(path: str) -> tuple[int, int, int, int]:
    """``(mtime_ns, ctime_ns, size, inode)``: any write, replace or copy back changes one of them."""
    st = os.stat(path)
    return st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino


def _sync_rdma_cm(sysroot: Path) -> None:
    """configfs ``rdma_cm/<dev>`` groups as the kernel keeps them, after a plain ``mkdir``/``echo``:
    an empty group of an RDMA device gets its attributes (:func:`populate_rdma_cm`), a group of a
    name that is no RDMA device is removed (the kernel's ``mkdir`` fails, ENODEV), and a populated
    group's port-1 values are what the kernel keeps past ``rmdir`` (``run/lab/rdma_cm/<dev>.json``).
    """
    configfs = sysroot / "sys/kernel/config/rdma_cm"
    try:
        groups = list(configfs.iterdir())
    except OSError:
        return
    for group in groups:
        try:
            dev = group.name
            if not (group / "ports").is_dir():
                if not populate_rdma_cm(sysroot, dev) and not any(group.iterdir()):
                    group.rmdir()
                continue
            port = group / "ports/1"
            values = {"default_roce_mode": (port / "default_roce_mode").read_text().strip(),
                      "default_roce_tos": int((port / "default_roce_tos").read_text())}
            if read_json(rdma_cm_path(sysroot, dev)) != values:
                write_json(rdma_cm_path(sysroot, dev), values)
        except (OSError, ValueError):
            continue


def _rewrite(path: Path, text: str) -> None:
    if path.read_text().strip() != text:
        path.write_text(text + "\n")
