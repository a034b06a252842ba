"""Grammars of every inventory string that can reach a shell, a device CLI or a file name.

A value is checked at load, before any device is contacted; the domains quote it as well
(defence in depth). Each ``check_*`` returns the value unchanged or raises ``ValueError`` with
a message that says what is allowed; pydantic turns that into a one-line InputError.

Sources of the limits:
    - netdev names: kernel ``dev_valid_name()`` (``net/core/dev.c``): 1..15 bytes (IFNAMSIZ 16
      with the NUL), not ``.``/``..``, no ``/``, ``:`` or whitespace. We allow the portable subset
      ``[A-Za-z0-9_.-]`` and refuse a leading ``-`` (it would read as an option to ``ip``).
    - RDMA device names: ``IB_DEVICE_NAME_MAX`` 64 (``include/rdma/ib_verbs.h``), ``mlx5_0``.
    - sysctl names: ``/proc/sys`` path components joined by dots (``sysctl(8)``); the first
      component is a lowercase kernel table name (``net``, ``kernel``, ``vm``), later ones may hold
      an interface name (``net.ipv4.conf.enp12s0np0.rp_filter``). ``/`` (sysctl(8)'s VLAN notation)
      is refused.
    - sysctl values: integers or integer vectors separated by single spaces (``proc_dointvec``,
      ``tcp_rmem = 4096 87380 6291456``), or one word for the string sysctls
      (``tcp_congestion_control = bbr``).
    - CPU lists: the kernel's ``cpulist`` format (``bitmap_parselist``) with CPU numbers below
      :data:`MAX_CPUS` (``NR_CPUS`` is at most 8192, ``arch/x86/Kconfig``), checked before any list
      is built, so ``0-99999999`` costs nothing.
    - host and user names: a subset of RFC 1123 host names / POSIX portable user names; a host
      name is also a file name under ``render -o``, so ``/``, ``..`` and a leading ``.`` are refused.
"""

from __future__ import annotations

import functools
import re
from typing import Callable

#: the most CPUs a CPU list may name (kernel NR_CPUS maximum, arch/x86/Kconfig: 8192)
MAX_CPUS = 8192

_NETDEV = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]{0,14}")
_RDMA_DEV = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]{0,63}")
_SYSCTL_NAME = re.compile(r"[a-z0-9_]+(\.[A-Za-z0-9_-]+)+")
_SYSCTL_INTS = re.compile(r"-?[0-9]{1,20}( -?[0-9]{1,20}){0,15}")
_SYSCTL_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+-]{0,63}")
_CPULIST = re.compile(r"[0-9]{1,9}(-[0-9]{1,9})?(,[0-9]{1,9}(-[0-9]{1,9})?)*")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_ADDRESS = re.compile(r"[A-Za-z0-9_.:-]{1,253}")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")
_PATH = re.compile(r"[A-Za-z0-9_./~+-]{1,4096}")


def once_per_text(check: Callable[[object], str]) -> Callable[[object], str]:
    """``check`` run once per distinct string (a fleet's 80,000 NICs name a few netdev, RDMA device,
    switch and port names over and over); anything but a ``str`` is checked every time, and a
    refusal raises every time (an exception is never remembered)."""
    memo = functools.lru_cache(maxsize=8192)(check)

    def checked(value: object) -> str:
        return memo(value) if type(value) is str else check(value)

    checked.__doc__ = check.__doc__
    return checked


def _need_str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string; allowed: {what}")
    return value


def check_netdev(value: object) -> str:
    """A kernel interface name (``enp12s0np0``)."""
    v = _need_str(value, "a kernel interface name")
    if not _NETDEV.fullmatch(v) or v in (".", ".."):
        raise ValueError(f"{v!r} is not an interface name; allowed: 1..15 of [A-Za-z0-9_.-], not starting with -")
    return v


def check_rdma_device(value: object) -> str:
    """An RDMA device name (``mlx5_0``)."""
    v = _need_str(value, "an RDMA device name like mlx5_0")
    if not _RDMA_DEV.fullmatch(v):
        raise ValueError(f"{v!r} is not an RDMA device name; allowed: 1..64 of [A-Za-z0-9_] like mlx5_0")
    return v


def check_sysctl_name(value: object) -> str:
    """A kernel parameter name (``net.core.rmem_max``)."""
    v = _need_str(value, "a sysctl name like net.core.rmem_max")
    if len(v) > 255 or not _SYSCTL_NAME.fullmatch(v):
        raise ValueError(f"{v!r} is not a sysctl name; allowed: dotted names like net.core.rmem_max "
                         "([a-z0-9_] then .[A-Za-z0-9_-] parts)")
    return v


def check_sysctl_value(value: object) -> str | int:
    """A kernel parameter value: an int, space-separated ints, or one word (``bbr``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not -2**63 <= value < 2**64:
            raise ValueError(f"{value} is outside the kernel's integer range -2**63..2**64-1")
        return value
    v = _need_str(value, "an integer, integers separated by spaces, or one word")
    if not (_SYSCTL_INTS.fullmatch(v) or _SYSCTL_WORD.fullmatch(v)):
        raise ValueError(f"{v!r} is not a sysctl value; allowed: an integer, up to 16 integers separated by "
                         "single spaces, or one word of [A-Za-z0-9_.:+-]")
    return v


def check_cpulist(value: object) -> str:
    """A CPU list (``0-15,64-79``) whose CPUs are all below :data:`MAX_CPUS`; nothing is expanded."""
    v = _need_str(value, "a CPU list like 0-15,64-79")
    if len(v) > 4096 or not _CPULIST.fullmatch(v):
        raise ValueError(f"{v!r} is not a CPU list; allowed: like 0-15,64-79")
    for part in v.split(","):
        lo, _, hi = part.partition("-")
        if int(hi or lo) >= MAX_CPUS or int(hi or lo) < int(lo):
            raise ValueError(f"{part!r} in {v!r} is not a range of CPUs within 0..{MAX_CPUS - 1}")
    return v


def check_port_name(value: object) -> str:
    """One switch port of any switch OS fabtune drives (NVUE ``swp1``, ``swp1s0``; EOS ``Ethernet1``,
    ``Ethernet3/1/1``: :data:`tuning.model.platforms.SWITCH_PORTS`); the switch's own OS is checked
    with the switch (:class:`tuning.model.settings.SwitchSpec`)."""
    any_port, names = _port_forms()
    v = _need_str(value, f"a switch port like {names}")
    if not any_port.fullmatch(v):
        raise ValueError(f"{v!r} is not a port like {names} (one port, no range)")
    return v


@functools.cache
def _port_forms() -> tuple[re.Pattern, str]:
    """One regex matching a port of any switch OS, and the examples an error names (built once:
    :data:`tuning.model.platforms.SWITCH_PORTS` is imported on first use)."""
    from tuning.model.platforms import SWITCH_PORTS

    forms = list(dict.fromkeys(SWITCH_PORTS.values()))
    names = ", ".join(f.example.split(" or a range")[0] for f in forms)  # one port: no range here
    return re.compile("|".join(f"(?:{f.pattern})" for f in forms)), names


def check_host_name(value: object) -> str:
    """An inventory host or group name: also a file name under ``render -o``."""
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string; quote it (allowed: a host name like node01)")
    if not _HOST.fullmatch(value) or ".." in value:
        raise ValueError(f"{value!r} is not a host name; allowed: 1..63 of [A-Za-z0-9_.-], starting with a "
                         "letter or digit, no '..' or '/'")
    return value


def check_address(value: object) -> str:
    """``ansible_host``: a DNS name, IPv4 or IPv6 address."""
    v = _need_str(value, "a host name or an IP address")
    if not _ADDRESS.fullmatch(v) or v.startswith("-"):
        raise ValueError(f"{v!r} is not a host name or IP address; allowed: [A-Za-z0-9_.:-], not starting with -")
    return v


def check_user(value: object) -> str:
    """``ansible_user`` / ``ansible_become_user``: a POSIX portable user name."""
    v = _need_str(value, "a user name")
    if not _USER.fullmatch(v):
        raise ValueError(f"{v!r} is not a user name; allowed: 1..32 of [A-Za-z0-9_.-], not starting with - or .")
    return v


def check_path(value: object, *, parent_ok: bool = True) -> str:
    """A file path from the inventory (key file, known_hosts, sysroot): no spaces, quotes or newlines.

    Args:
        value: the inventory value.  parent_ok: whether ``..`` components are allowed (not in a sysroot).
    """
    v = _need_str(value, "a path")
    if not _PATH.fullmatch(v) or (not parent_ok and ".." in v.split("/")):
        extra = "" if parent_ok else " without '..' components"
        raise ValueError(f"{v!r} is not a usable path; allowed: [A-Za-z0-9_./~+-]{extra}")
    return v


def _word_check(pattern: str, want: str, allowed: str, doc: str):
    """A validator: a string matching ``pattern`` whole, else ValueError "... is not WANT; allowed: ALLOWED"."""
    rx = re.compile(pattern)

    def check(value: object) -> str:
        v = _need_str(value, allowed)
        if not rx.fullmatch(v):
            raise ValueError(f"{v!r} is not {want}; allowed: {allowed}")
        return v

    check.__doc__ = doc
    return check


def _int_or_word_check(lo: int, hi: int, word, range_text: str, doc: str):
    """A validator: an int in ``lo <= v < hi`` (never a bool), else what ``word`` accepts."""
    def check(value: object) -> str | int:
        if isinstance(value, int) and not isinstance(value, bool):
            if not lo <= value < hi:
                raise ValueError(f"{value} is outside {range_text}")
            return value
        return word(value)

    check.__doc__ = doc
    return check


check_mlx_param = _word_check(
    r"[A-Z][A-Z0-9_]{0,63}(\[[0-9]{1,3}(\.\.[0-9]{1,3})?\])?", "an mlxconfig parameter",
    "upper-case [A-Z0-9_] like NUM_OF_VFS",
    "An ``mlxconfig`` parameter name (``ADVANCED_PCI_SETTINGS``, ``PF_NUM_OF_VF[0]``; MFT docs).")
check_mlx_value = _int_or_word_check(
    0, 2**32, _word_check(r"[A-Za-z0-9_.()-]{1,64}", "an mlxconfig value", "1..64 of [A-Za-z0-9_.()-] or an "
                          "integer", ""), "0..2**32-1",
    "An ``mlxconfig`` value: an int, or a word (``True``, ``ETH``, ``DEVICE_DEFAULT(0)``).")
check_cmdline_name = _word_check(
    r"[a-z0-9][a-z0-9_.-]{0,63}", "a kernel command-line option", "[a-z0-9_.-] like iommu",
    "A kernel command-line option name (``iommu``, ``intel_idle.max_cstate``; kernel-parameters.txt).")
check_cmdline_value = _int_or_word_check(
    -2**63, 2**64, _word_check(r"[A-Za-z0-9_.,:/+-]{0,255}", "a kernel option value",
                               "[A-Za-z0-9_.,:/+-], no spaces", ""),
    "the kernel's integer range -2**63..2**64-1",
    "A kernel command-line option value (``pt``, ``0-15,56-71``; ``\"\"`` for a bare flag); no spaces or "
    "quotes; an integer within the kernel's 64-bit range (``memparse`` / ``kstrtoull``).")
check_word = _word_check(
    r"[a-z][a-z0-9_-]{0,31}", "a name", "[a-z][a-z0-9_-] like performance",
    "A lower-case name that reaches a file (a cpufreq governor: ``performance``).")


#: the NIC MaxReadReq sizes PCIe allows (Device Control bits 14:12, PCIe base spec 7.5.3.4), bytes
MAX_READ_REQUEST = (128, 256, 512, 1024, 2048, 4096)


def check_max_read_request(value: object) -> int:
    """A MaxReadReq size in bytes: an integer (never a float or a bool) of :data:`MAX_READ_REQUEST`."""
    if isinstance(value, bool) or not isinstance(value, int) or value not in MAX_READ_REQUEST:
        raise ValueError(f"{value!r:.40} is not a MaxReadReq size; allowed: {', '.join(map(str, MAX_READ_REQUEST))} "
                         "(bytes, an integer)")
    return value
