"""Lab hardware of the kernel and power domains: cpufreq, cpuidle, NUMA memory and hugepage pools,
``/proc/meminfo``, the kernel command line and the Ubuntu boot loader config that makes it.

Builder (``EXTRA_BUILDERS``: :func:`build`) and power-on hook (``POWER_ON_HOOKS``: :func:`power_on`)
of a lab node's sysroot. Standard library only: the ``update-grub`` stand-in imports
:func:`grub_cfg` from here. Formats:

- cpufreq (kernel ``Documentation/admin-guide/pm/cpufreq.rst``): ``cpu<N>/cpufreq`` is a link to
  ``cpufreq/policy<N>`` (intel_pstate: one policy per CPU) holding ``scaling_governor``,
  ``scaling_available_governors`` (intel_pstate in active mode: ``performance powersave``),
  ``scaling_driver``, ``affected_cpus``, ``related_cpus``.
- cpuidle (``Documentation/admin-guide/pm/cpuidle.rst``, ``ABI/testing/sysfs-devices-system-cpu``):
  ``cpu<N>/cpuidle/state<K>/{name,desc,latency,residency,disable,usage,time,default_status}``;
  the table is intel_idle's ``spr_cstates`` (Sapphire Rapids, the CPU of a DGX H100) after the
  cpuidle core's POLL: POLL 0/0, C1 1/1, C1E 2/4, C6 290/800 us (exit latency / target residency,
  ``drivers/idle/intel_idle.c``). ``cpuidle/current_driver`` is ``intel_idle``.
- ``/sys/module/intel_idle/parameters/{max_cstate,states_off}`` (``admin-guide/pm/intel_idle.rst``):
  set from the command line at power-on; ``states_off`` bit K disables ``state<K>`` by default on
  every CPU (``disable`` reads 1, ``default_status`` ``disabled``); ``max_cstate=N`` (N >= 1) keeps
  states 1..N only.
- NUMA memory (``Documentation/admin-guide/mm/hugetlbpage.rst``; ``drivers/base/node.c``):
  ``node<N>/meminfo`` (``Node N MemTotal:       %8lu kB``, ``Node N HugePages_Total: %5u``) and
  ``node<N>/hugepages/hugepages-{2048kB,1048576kB}/{nr_hugepages,free_hugepages,surplus_hugepages}``;
  ``/proc/meminfo`` (``fs/proc/meminfo.c``; ``HugePages_Total:   %5lu``, ``Hugetlb:        %8lu kB``).
  Writes of ``nr_hugepages`` go through the ``tee`` stand-in, which allocates as the kernel does:
  only as many pages as the node's free memory holds.
- Boot loader (Ubuntu 24.04, grub 2.12): ``/etc/default/grub`` and the ``/boot/grub/grub.cfg``
  that ``update-grub`` (``grub-mkconfig -o /boot/grub/grub.cfg``) generates from it; at power-on the
  first ``linux`` line of ``grub.cfg`` becomes ``/proc/cmdline`` (``BOOT_IMAGE=<kernel> <args>``).
  ``etc/`` and ``boot/`` are disk: they survive ``fabtune lab reboot``. Of the command line, boot
  models ``intel_idle.max_cstate`` and ``intel_idle.states_off`` only (``hugepages=`` and
  ``isolcpus=`` are carried in ``/proc/cmdline`` but change nothing else in the lab).
"""

from __future__ import annotations

from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tuning.lab.fabric import Node

from tuning.lab.fabric import KERNEL_RELEASE as KERNEL  # noqa: E402  (one kernel for the whole lab)
from tuning.lab import sysroot_share  # noqa: E402
ROOT_UUID = "3b6e9a51-7d1c-4f0e-9a3b-2c5d8e7f1a40"
#: (name, desc, exit latency us, target residency us): the cpuidle core's POLL and intel_idle spr_cstates
IDLE_STATES = (("POLL", "CPUIDLE CORE POLL IDLE", 0, 0), ("C1", "MWAIT 0x00", 1, 1),
               ("C1E", "MWAIT 0x01", 2, 4), ("C6", "MWAIT 0x20", 290, 800))
CPUFREQ_DRIVER = "intel_pstate"
GOVERNORS = "performance powersave"
DEFAULT_GOVERNOR = "powersave"
#: intel_idle's default max_cstate (CPUIDLE_STATE_MAX - 1)
MAX_CSTATE = 9
#: per NUMA node (MemTotal, MemFree) in kB after boot: a DGX H100 (2 TiB, two sockets)
NODE_MEMORY_KB = ((1056466084, 1031234568), (1056956520, 1033718796))
HUGEPAGE_SIZES_KB = (2048, 1048576)
#: what the default grub config passes the kernel (Ubuntu server: no ``quiet splash``; a serial console)
GRUB_CMDLINE_LINUX = "console=tty0 console=ttyS0,115200n8"
GRUB_CMDLINE_LINUX_DEFAULT = ""
DEFAULT_GRUB = f"""# If you change this file or any /etc/default/grub.d/*.cfg file,
# run 'update-grub' afterwards to update /boot/grub/grub.cfg.
# For full documentation of the options in these files, see:
#   info -f grub -n 'Simple configuration'

GRUB_DEFAULT=0
GRUB_TIMEOUT_STYLE=hidden
GRUB_TIMEOUT=0
GRUB_DISTRIBUTOR=`( . /etc/os-release; echo ${{NAME:-Ubuntu}} ) 2>/dev/null || echo Ubuntu`
GRUB_CMDLINE_LINUX_DEFAULT="{GRUB_CMDLINE_LINUX_DEFAULT}"
GRUB_CMDLINE_LINUX="{GRUB_CMDLINE_LINUX}"

# Uncomment to disable graphical terminal
#GRUB_TERMINAL=console

# Uncomment to disable generation of recovery mode menu entries
#GRUB_DISABLE_RECOVERY="true"
"""


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _cpus(node: Node) -> list[int]:
    from tuning.cpulist import parse_cpulist

    return sorted(c for cl in node.numa_cpulists for c in parse_cpulist(cl))


# ---- meminfo (the formats the tee stand-in rewrites; keep both in step) ---------------------

def kb_line(label: str, value: int, node: int | None = None) -> str:
    """``MemFree:        %8lu kB`` (label padded to 16), with ``Node N `` in front for a node file."""
    return ("" if node is None else f"Node {node} ") + f"{label + ':':<16}{value:>8} kB"


def node_meminfo(node: int, total: int, free: int, huge_total: int = 0, huge_free: int = 0) -> str:
    """``/sys/devices/system/node/node<N>/meminfo`` (``drivers/base/node.c``), kB; hugepage counts of
    the default (2048 kB) pool in pages."""
    static = {"SwapCached": 0, "Active": 1835008, "Inactive": 6291456, "Active(anon)": 524288,
              "Inactive(anon)": 16384, "Active(file)": 1310720, "Inactive(file)": 6275072, "Unevictable": 0,
              "Mlocked": 0, "Dirty": 112, "Writeback": 0, "FilePages": 7602176, "Mapped": 262144,
              "AnonPages": 540672, "Shmem": 16384, "KernelStack": 28672, "PageTables": 8192,
              "SecPageTables": 0, "NFS_Unstable": 0, "Bounce": 0, "WritebackTmp": 0, "KReclaimable": 1048576,
              "Slab": 2097152, "SReclaimable": 1048576, "SUnreclaim": 1048576, "AnonHugePages": 262144,
              "ShmemHugePages": 0, "ShmemPmdMapped": 0, "FileHugePages": 0, "FilePmdMapped": 0}
    lines = [kb_line("MemTotal", total, node), kb_line("MemFree", free, node),
             kb_line("MemUsed", total - free, node)] + [kb_line(k, v, node) for k, v in static.items()]
    pools = (("HugePages_Total", huge_total), ("HugePages_Free", huge_free), ("HugePages_Surp", 0))
    lines += [f"Node {node} {label + ':':<17}{value:>5}" for label, value in pools]
    return "\n".join(lines)


def proc_meminfo(total: int, free: int, huge_total: int = 0, huge_free: int = 0, hugetlb_kb: int = 0) -> str:
    """``/proc/meminfo`` (``fs/proc/meminfo.c``; hugetlb lines of ``mm/hugetlb.c``)."""
    kb = [("MemTotal", total), ("MemFree", free), ("MemAvailable", free + 12582912), ("Buffers", 524288),
          ("Cached", 15204352), ("SwapCached", 0), ("Active", 3670016), ("Inactive", 12582912),
          ("SwapTotal", 8388604), ("SwapFree", 8388604), ("Dirty", 224), ("Writeback", 0), ("AnonPages", 1081344),
          ("Mapped", 524288), ("Shmem", 32768), ("KReclaimable", 2097152), ("Slab", 4194304),
          ("SReclaimable", 2097152), ("SUnreclaim", 2097152), ("KernelStack", 57344), ("PageTables", 16384),
          ("CommitLimit", total // 2 + 8388604), ("Committed_AS", 6291456), ("VmallocTotal", 34359738367),
          ("VmallocUsed", 1048576), ("VmallocChunk", 0), ("Percpu", 458752), ("HardwareCorrupted", 0),
          ("AnonHugePages", 524288), ("ShmemHugePages", 0), ("ShmemPmdMapped", 0), ("FileHugePages", 0),
          ("FilePmdMapped", 0)]
    lines = [kb_line(k, v) for k, v in kb]
    lines += [f"{'HugePages_Total:':<19}{huge_total:>5}", f"{'HugePages_Free:':<19}{huge_free:>5}",
              f"{'HugePages_Rsvd:':<19}{0:>5}", f"{'HugePages_Surp:':<19}{0:>5}",
              kb_line("Hugepagesize", 2048), kb_line("Hugetlb", hugetlb_kb), kb_line("DirectMap4k", 1048576),
              kb_line("DirectMap2M", 67108864), kb_line("DirectMap1G", 2080374784)]
    return "\n".join(lines)


# ---- boot loader ----------------------------------------------------------------------------

def grub_cfg(linux: str, linux_default: str) -> str:
    """``/boot/grub/grub.cfg`` as ``grub-mkconfig`` writes it (abridged to the parts boot reads): the
    header, then the default entry whose ``linux`` line passes ``ro GRUB_CMDLINE_LINUX
    GRUB_CMDLINE_LINUX_DEFAULT`` (``/etc/grub.d/10_linux``)."""
    return f"""#
# DO NOT EDIT THIS FILE
#
# It is automatically generated by grub-mkconfig using templates
# from /etc/grub.d and settings from /etc/default/grub
#

### BEGIN /etc/grub.d/00_header ###
if [ -s $prefix/grubenv ]; then
  set have_grubenv=true
  load_env
fi
set default="0"
set timeout_style=hidden
set timeout=0
### END /etc/grub.d/00_header ###

### BEGIN /etc/grub.d/10_linux ###
menuentry 'Ubuntu' --class ubuntu --class gnu-linux --class gnu --class os $menuentry_id_option 'gnulinux-simple-{ROOT_UUID}' {{
	recordfail
	load_video
	insmod gzio
	insmod part_gpt
	insmod ext2
	search --no-floppy --fs-uuid --set=root {ROOT_UUID}
	linux	/boot/vmlinuz-{KERNEL} root=UUID={ROOT_UUID} ro {linux} {linux_default}
	initrd	/boot/initrd.img-{KERNEL}
}}
### END /etc/grub.d/10_linux ###
"""


def cmdline_from_grub_cfg(text: str) -> str:
    """The kernel command line the boot loader passes: ``BOOT_IMAGE=<kernel>`` and the arguments of
    the first ``linux`` line (the default entry), words separated by one space."""
    for line in text.splitlines():
        words = line.split()
        if words and words[0] == "linux":
            return " ".join([f"BOOT_IMAGE={words[1]}", *words[2:]])
    raise ValueError("grub.cfg has no linux line")


def _option(cmdline: str, name: str) -> int | None:
    """The last ``name=N`` of a command line as the kernel parses a uint parameter (base 0), or None."""
    value = None
    for word in cmdline.split():
        key, sep, val = word.partition("=")
        if sep and key.replace("-", "_") == name:
            try:
                value = int(val, 0)
            except ValueError:
                continue
    return value


# ---- builder and power-on hook --------------------------------------------------------------

def build(root: Path, node: Node) -> None:
    """Lay the cpufreq, cpuidle, NUMA memory, meminfo and boot loader files of ``node`` under ``root``
    (at power-on values), then derive ``/proc/cmdline`` and what it sets (:func:`power_on`)."""
    cpu_dir = root / "sys/devices/system/cpu"
    for cpu in _cpus(node):  # ~40 files per CPU: folders made once, files written without _put's mkdir
        policy = cpu_dir / "cpufreq" / f"policy{cpu}"
        policy.mkdir(parents=True)
        (policy / "scaling_governor").write_text(DEFAULT_GOVERNOR + "\n")
        for name, value in (("scaling_available_governors", GOVERNORS), ("scaling_driver", CPUFREQ_DRIVER),
                            ("affected_cpus", str(cpu)), ("related_cpus", str(cpu))):  # read-only: shared
            sysroot_share.put(root, f"sys/devices/system/cpu/cpufreq/policy{cpu}/{name}", value)
        (cpu_dir / f"cpu{cpu}").mkdir(parents=True, exist_ok=True)
        (cpu_dir / f"cpu{cpu}" / "cpufreq").symlink_to(f"../cpufreq/policy{cpu}")
        for k, (name, desc, latency, residency) in enumerate(IDLE_STATES):
            state = cpu_dir / f"cpu{cpu}" / "cpuidle" / f"state{k}"
            state.mkdir(parents=True)
            usage = 0 if k == 0 else 1000 + 37 * cpu + 7919 * k
            (state / "disable").write_text("0\n")
            for fname, value in (("name", name), ("desc", desc), ("latency", str(latency)),
                                 ("residency", str(residency)), ("usage", str(usage)),
                                 ("time", str(usage * (residency + 3))), ("default_status", "enabled")):
                sysroot_share.put(root, f"sys/devices/system/cpu/cpu{cpu}/cpuidle/state{k}/{fname}", value)  # read-only
    for fname, value in (("current_driver", "intel_idle"), ("current_governor", "menu"),
                         ("current_governor_ro", "menu"), ("available_governors", "ladder menu teo ")):
        # drivers/cpuidle/sysfs.c show_available_governors: "%s " per governor, then "\n"
        _put(cpu_dir / "cpuidle" / fname, value)
    _build_memory(root, node)
    _put(root / "etc/default/grub", DEFAULT_GRUB.rstrip("\n"))
    (root / "etc/default/grub.d").mkdir(parents=True, exist_ok=True)
    _put(root / "boot/grub/grub.cfg", grub_cfg(GRUB_CMDLINE_LINUX, GRUB_CMDLINE_LINUX_DEFAULT).rstrip("\n"))
    (root / "boot/grub/grub.cfg").chmod(0o444)
    power_on(root, node)


def _build_memory(root: Path, node: Node) -> None:
    total = free = 0
    for i in range(len(node.numa_cpulists)):
        mem_total, mem_free = NODE_MEMORY_KB[i % len(NODE_MEMORY_KB)]
        total, free = total + mem_total, free + mem_free
        folder = root / f"sys/devices/system/node/node{i}"
        _put(folder / "meminfo", node_meminfo(i, mem_total, mem_free))
        for size in HUGEPAGE_SIZES_KB:
            for fname in ("nr_hugepages", "free_hugepages", "surplus_hugepages"):
                _put(folder / "hugepages" / f"hugepages-{size}kB" / fname, "0")
    _put(root / "proc/meminfo", proc_meminfo(total, free))


def power_on(root: Path, node: Node) -> None:
    """What boot derives from the persisted boot loader config: ``/proc/cmdline`` from the default
    entry of ``boot/grub/grub.cfg``; intel_idle's ``max_cstate`` (states beyond it are not registered)
    and ``states_off`` (those states start disabled on every CPU) from it."""
    cmdline = cmdline_from_grub_cfg((root / "boot/grub/grub.cfg").read_text())
    _put(root / "proc/cmdline", cmdline)
    max_cstate = _option(cmdline, "intel_idle.max_cstate")
    max_cstate = MAX_CSTATE if max_cstate is None or max_cstate < 1 else max_cstate  # 0 would unload intel_idle
    states_off = (_option(cmdline, "intel_idle.states_off") or 0) & 0xFFFFFFFF
    params = root / "sys/module/intel_idle/parameters"
    _put(params / "max_cstate", str(max_cstate))
    _put(params / "states_off", str(states_off))
    for cpu in _cpus(node):
        idle = root / f"sys/devices/system/cpu/cpu{cpu}/cpuidle"
        for k in range(1, len(IDLE_STATES)):
            state = idle / f"state{k}"
            if k > max_cstate:
                for f in state.iterdir():
                    f.unlink()
                state.rmdir()
            elif states_off >> k & 1:
                _put(state / "disable", "1")
                _put(state / "default_status", "disabled")

