"""The device platforms fabtune can drive: the one list the inventory model, the switch driver
registry (:func:`tuning.switch.driver_class`) and the target registry (:mod:`tuning.targets`) read.

A switch platform names its OS driver class as ``module:Class`` (imported when first used, so a
node-only run never imports a switch OS's SSH library) and its :class:`PortForm`: how the OS names
a port and which port MTUs it takes, checked at load before any device is contacted.
``cumulus_linux`` is Ansible's ``ansible_network_os`` name of the same NVUE OS (Cumulus Linux 5.x).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class PortForm:
    """How one switch OS names its ports and which port MTU it takes.

    Attributes:
        pattern: one port name (full match), e.g. ``swp[0-9]{1,4}(s[0-9]{1,2})?``.
        example: the names and ranges an error message offers (``swp1, swp1s0 or swp1-16``).
        mtu_min / mtu_max: the port MTU range in bytes the OS accepts; ``mtu_max`` is also a
            switch's ``port_mtu`` when the inventory names none (the largest frame the OS passes).
        source: where the range comes from (vendor document or transcript).
    """

    pattern: str
    example: str
    mtu_min: int
    mtu_max: int
    source: str

    @cached_property
    def regex(self) -> re.Pattern:
        """:attr:`pattern`, compiled once (a fleet checks about 100,000 port names at load)."""
        return re.compile(self.pattern)

    def matches(self, name: str) -> bool:
        """True when ``name`` is one port of this OS."""
        return self.regex.fullmatch(name) is not None


_NVUE_PORTS = PortForm(r"swp[0-9]{1,4}(s[0-9]{1,2})?", "swp1, swp1s0 or a range like swp1-16", 552, 9216,
                       "`nv set interface swp1 link mtu ?` prints (integer:552 - 9216), Cumulus Linux 5.x")
_EOS_PORTS = PortForm(r"Ethernet[0-9]{1,3}(/[0-9]{1,3}){0,2}", "Ethernet1, Ethernet3/1/1 or a range like Ethernet1-16",
                      68, 9214, "Arista EOS User Manual, Ethernet interfaces: `mtu` 68..9214 bytes (routed port); "
                      "shared/cases/cli/eos__errors_invalid_incomplete_ambiguous.txt refuses 10000")
_SONIC_PORTS = PortForm(r"Ethernet[0-9]{1,4}", "Ethernet0 or Ethernet8 (SONiC numbers a port by its first lane)", 68, 9216,
                        "sonic-net/sonic-buildimage src/sonic-yang-models/yang-models/sonic-port.yang: PORT `mtu` "
                        "uint16 range 68..9216 (older images 1..9216: shared/cases/cli/sonic__apply_patch_failure_yang_invalid_value.txt)")

#: switch platform -> its driver (a SwitchDriver class, or its ``module:Class`` path)
SWITCH_DRIVERS: dict[str, object] = {
    "nvue": "tuning.switch.nvue:NvueDriver",
    "cumulus_linux": "tuning.switch.nvue:NvueDriver",
    "eos": "tuning.switch.eos:EosDriver",
    "sonic": "tuning.switch.sonic:SonicDriver",
}
#: switch platform -> how it names ports and which MTUs it takes
SWITCH_PORTS: dict[str, PortForm] = {"nvue": _NVUE_PORTS, "cumulus_linux": _NVUE_PORTS, "eos": _EOS_PORTS,
                                     "sonic": _SONIC_PORTS}
#: node platforms (every node is a Linux host reached over SSH today)
NODE_PLATFORMS: tuple[str, ...] = ("linux",)


#: the fabric kinds fabtune drives (a node's ``fabric``): RoCE v2 on Ethernet only
FABRICS: tuple[str, ...] = ("roce",)
#: what names an InfiniBand fabric in an inventory: a ``fabric`` value, a switch ``platform`` (NVIDIA
#: NVOS runs the Quantum IB switches; UFM and OpenSM are subnet managers)
_IB_WORDS = frozenset({"ib", "infiniband", "nvos", "ufm", "opensm"})
#: an IPoIB interface as the kernel (``ib0``) or rdma-core's udev naming (``ibp12s0``, ``ibs1``, with a PCI
#: domain ``ibP257p0s0``) names it, or a partition child of one (``ib0.8001``: ``ip link add ... type ipoib pkey``)
_IPOIB = re.compile(r"ib([0-9]+|[ps][0-9][0-9a-z]*|P[0-9]+[0-9a-z]*)(\.[0-9a-fA-F]{1,4})?")
#: the one line an InfiniBand inventory gets (issue 19; driving IB is issue 22)
NOT_DRIVEN_IB = ("InfiniBand is not driven yet: fabtune tunes RoCE v2 on Ethernet (on IB the subnet manager owns "
                 "MTU, partitions and SLs); nothing was pushed")


def check_fabric(value: object) -> str:
    """``value`` when it is a fabric kind fabtune drives (:data:`FABRICS`).

    Raises:
        ValueError: :data:`NOT_DRIVEN_IB` for an InfiniBand word, else naming the allowed kinds.
    """
    if isinstance(value, str) and value.lower() in _IB_WORDS:
        raise ValueError(f"{value!r:.40}: {NOT_DRIVEN_IB}; allowed: {', '.join(FABRICS)}")
    if value not in FABRICS:
        raise ValueError(f"{value!r:.40} is not a fabric kind fabtune drives; allowed: {', '.join(FABRICS)}")
    return str(value)


def check_not_ipoib(netdev: str) -> str:
    """``netdev`` unless it is an IPoIB interface (``ib0``, ``ibp12s0``). Raises ValueError
    (:data:`NOT_DRIVEN_IB`)."""
    if _IPOIB.fullmatch(netdev):
        raise ValueError(f"{netdev!r:.40} is an IPoIB interface (an InfiniBand port): {NOT_DRIVEN_IB}; allowed: "
                         "the Ethernet netdev of a RoCE NIC (enp12s0np0)")
    return netdev


def check_switch_platform(value: object) -> str:
    """``value`` when a switch driver serves it.

    Raises:
        ValueError: naming the allowed platforms (the model turns it into an InputError);
            :data:`NOT_DRIVEN_IB` for an InfiniBand switch OS or subnet manager.
    """
    if isinstance(value, str) and value.lower() in _IB_WORDS:
        raise ValueError(f"{value!r:.40}: {NOT_DRIVEN_IB}; allowed: {', '.join(SWITCH_DRIVERS)}")
    if not isinstance(value, str) or value not in SWITCH_DRIVERS:
        raise ValueError(f"{value!r:.40} is not a switch platform fabtune drives; allowed: {', '.join(SWITCH_DRIVERS)}")
    return value


def port_form(platform: str) -> PortForm:
    """The :class:`PortForm` of switch ``platform`` (NVUE's for a platform registered without one)."""
    return SWITCH_PORTS.get(platform, _NVUE_PORTS)
