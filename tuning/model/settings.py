"""The desired state of one device, validated.

Defaults follow the NVIDIA RoCE configuration for Spectrum switches and ConnectX NICs
("RDMA over Converged Ethernet (RoCE)", Cumulus Linux 5.x user guide; NVIDIA
"Lossless RoCE Configuration for Linux Drivers in DSCP-Based QoS Mode"): lossless
priority 3, RoCE traffic DSCP 26, CNP DSCP 48 on priority 6, switch ECN thresholds
min 150000 / max 1500000 bytes on the lossless traffic class, and a jumbo MTU that
leaves room for headers (node 9000 under switch 9216; RoCE then runs at 4096).
"""

from __future__ import annotations

import functools
import re
from ipaddress import IPv4Interface
from typing import Annotated, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from tuning.model import grammar
from tuning.model.cabling import UplinkEnd
from tuning.model.ipv4 import IPV4_ALLOWED, check_nic_ipv4  # noqa: F401 (IPV4_ALLOWED re-exported)
from tuning.model.ib_ports import IbPortsSpec
from tuning.model.node_tuning import CpuSpec, FirmwareSpec, KernelSpec, ModulesSpec, PauseSpec, PcieSpec
from tuning.model.platforms import check_fabric, check_not_ipoib, check_switch_platform, port_form

#: strict types: a YAML ``true`` is not the priority 1, ``22.5`` is not the port 22
_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)


Netdev = Annotated[str, BeforeValidator(grammar.once_per_text(grammar.check_netdev))]
RdmaDevice = Annotated[str, BeforeValidator(grammar.once_per_text(grammar.check_rdma_device))]
PortName = Annotated[str, BeforeValidator(grammar.once_per_text(grammar.check_port_name))]
HostName = Annotated[str, BeforeValidator(grammar.once_per_text(grammar.check_host_name))]
SysctlName = Annotated[str, BeforeValidator(grammar.check_sysctl_name)]
SysctlValue = Annotated[Union[str, int], BeforeValidator(grammar.check_sysctl_value)]
CpuList = Annotated[str, BeforeValidator(grammar.check_cpulist)]
Ipv4 = Annotated[IPv4Interface, BeforeValidator(check_nic_ipv4)]


class NicQos(BaseModel):
    """RoCE QoS of a node's ConnectX NICs (applied with ``mlnx_qos``, sysfs ECN, ``cma_roce_tos``).

    Attributes:
        trust: ``dscp`` (L3, the RoCE default) or ``pcp`` (VLAN priority).
        pfc_priority: the one lossless priority with PFC on (0..7). Default 3 (NVIDIA RoCE doc).
        ecn: ECN reaction and notification point (DCQCN RP/NP) on ``pfc_priority``.
        roce_dscp: DSCP of RoCE data (0..63); written as ToS ``dscp << 2 | 2`` (ECT(0)): 26 -> 106.
        cnp_dscp / cnp_priority: DSCP (0..63) and priority (0..7) of congestion notification packets.
        dcbx: who owns the NIC's DCB settings: ``os`` (OS controlled, fabtune's values hold) or
            ``fw`` (firmware DCBX agent: the switch's TLVs put PFC back); ``mlnx_qos --dcbx``.
    """

    model_config = _STRICT
    trust: Literal["pcp", "dscp"] = "dscp"
    pfc_priority: int = Field(3, ge=0, le=7)
    ecn: bool = True
    roce_dscp: int = Field(26, ge=0, le=63)
    cnp_dscp: int = Field(48, ge=0, le=63)
    cnp_priority: int = Field(6, ge=0, le=7)
    dcbx: Literal["os", "fw"] = "os"

    @property
    def roce_tos(self) -> int:
        """The IP ToS byte for RDMA-CM: DSCP in the upper 6 bits, ECT(0) in the lower 2."""
        return self.roce_dscp << 2 | 2


class NicSpec(BaseModel):
    """One RDMA NIC port of a node and where it is cabled.

    Attributes:
        netdev: kernel interface (``enp12s0np0``).  rdma_device: ``mlx5_0``.
        rail: rail number (0..31).  ipv4: address with prefix length (``10.0.0.1/24``).
        switch / switch_port: the leaf port at the other end of the cable.
    """

    model_config = _STRICT
    netdev: Annotated[Netdev, AfterValidator(grammar.once_per_text(check_not_ipoib))]
    rdma_device: RdmaDevice
    rail: int = Field(ge=0, le=31)
    ipv4: Ipv4
    switch: HostName
    switch_port: PortName


class NodeSpec(BaseModel):
    """Desired state of a GPU node.

    Attributes:
        A setting the inventory does not ask for is left as the node has it (None, ``off``): the
        defaults are "leave alone", never a tuning profile.
        mtu: netdev MTU of every RDMA NIC, bytes (68..9216 here; mlx5 itself allows up to 9978);
            None (default): each NIC keeps its MTU.
        nic_qos: RoCE QoS, see :class:`NicQos` (``nic_qos: {}`` asks for NVIDIA's RoCE defaults);
            None (default): the NICs' QoS is left alone.
        sysctl: kernel parameters, ``{"net.core.rmem_max": "268435456"}``; values compared as strings
            with whitespace collapsed.
        irq_affinity: ``numa-local`` spreads each NIC's completion IRQs over the CPUs of the NIC's
            own NUMA node (``local_cpulist``); ``off`` (default) leaves IRQs alone.
        irqbalance: what to do with a running irqbalance, which moves IRQs back (node domain
            ``services``): ``stop`` it (``systemctl stop irqbalance.service``), ``ban`` the tuned IRQs
            (``--banirq=N`` in ``IRQBALANCE_ARGS`` of /etc/default or /etc/sysconfig ``irqbalance``,
            then ``systemctl try-restart``) or ``leave`` it.
        irq_cpus: optional CPU list (``0-15,64-79``) to use instead of the NIC's local CPUs;
            checked against the node's online CPUs before anything is pushed.
        fabric: what the NICs speak: ``roce`` (RoCE v2 on Ethernet, the default and the only kind
            driven; ``ib`` gets one line saying InfiniBand is not driven yet:
            :func:`tuning.model.platforms.check_fabric`).
        nics: the RDMA NICs (usually in ``host_vars/<node>.yml``); at least one unless ``ib_ports`` is given.
        ib_ports: what the node's InfiniBand HCA ports must be (:mod:`tuning.model.ib_ports`), judged by
            the health checks; None (default): the node has no InfiniBand ports to judge.
        firmware, cpu, kernel, modules, pcie, pause: see :mod:`tuning.model.node_tuning`; each
            defaults to leaving the node as it is.
    """

    model_config = _STRICT
    role: Literal["node"] = "node"
    fabric: Annotated[str, BeforeValidator(check_fabric)] = "roce"
    mtu: Optional[int] = Field(None, ge=68, le=9216)
    nic_qos: Optional[NicQos] = None
    sysctl: dict[SysctlName, SysctlValue] = Field(default_factory=dict)
    irq_affinity: Literal["numa-local", "off"] = "off"
    irqbalance: Literal["stop", "ban", "leave"] = "stop"
    irq_cpus: Optional[CpuList] = None
    ib_ports: Optional[IbPortsSpec] = None  # before nics: the nics check reads it
    nics: list[NicSpec]  # required, as [] only for an ib_ports node (_ib_only_node)
    # a default holding a dict is unhashable, and pydantic deep-copies such a default for every node
    # (25 us each); a factory builds it new instead (4 us)
    firmware: FirmwareSpec = Field(default_factory=FirmwareSpec)
    cpu: CpuSpec = CpuSpec()
    kernel: KernelSpec = Field(default_factory=KernelSpec)
    modules: ModulesSpec = ModulesSpec()
    pcie: PcieSpec = PcieSpec()
    pause: PauseSpec = PauseSpec()

    @field_validator("nics")
    @classmethod
    def _unique_nics(cls, v: list[NicSpec]) -> list[NicSpec]:
        for attr in ("netdev", "rdma_device"):
            names = [getattr(n, attr) for n in v]
            dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
            if dup is not None:
                raise ValueError(f"two NICs have {attr} {dup!r}; allowed: each {attr} once per node")
        return v

    @model_validator(mode="before")
    @classmethod
    def _ib_only_node(cls, data: object) -> object:
        """A node with ``ib_ports`` and no ``nics`` has no RoCE NIC; any other node without ``nics`` is
        refused as a missing key (the load message names its host_vars file)."""
        if isinstance(data, dict) and "nics" not in data and data.get("ib_ports") is not None:
            return {**data, "nics": []}
        return data

    @field_validator("nics")
    @classmethod
    def _some_nic(cls, v: list[NicSpec], info: ValidationInfo) -> list[NicSpec]:
        if not v and info.data.get("ib_ports") is None:
            raise PydanticCustomError("too_short", "a node needs at least one NIC, or ib_ports",
                                      {"field_type": "List", "min_length": 1, "actual_length": 0})
        return v


#: bytes of the largest frame an NVUE port passes (``nv set interface swp1 link mtu`` 552..9216)
ONE_FRAME_BYTES = 9216


class SwitchRoce(BaseModel):
    """RoCE lossless settings of an NVUE switch (``nv set qos roce`` and the PFC / mapping / ECN knobs).

    Attributes:
        mode: ``lossless`` (PFC + ECN) as in the Cumulus RoCE doc, or ``lossy`` (ECN only; ``nv set qos
            roce mode lossy``, the other mode the same doc names).
        pfc_priority: switch priority with PFC (0..7), default 3.
        trust: ``dscp`` (L3 trust), the RoCE default.
        dscp_to_switch_priority: DSCP (0..63) -> switch priority (0..7); default 26->3, 48->6.
        lossless_tc: traffic class of the lossless queue (0..7), default 3.
        cnp_priority: switch priority of CNPs (strict priority), default 6.
        ecn_min_bytes / ecn_max_bytes: ECN marking thresholds on the lossless queue, bytes
            (Cumulus default 150000 / 1500000, shown by ``nv show qos roce`` as 146.48 KB / 1.43 MB).
        ecn_probability: marking probability at the max threshold, percent (1..100).
    """

    model_config = _STRICT
    mode: Literal["lossless", "lossy"] = "lossless"
    pfc_priority: int = Field(3, ge=0, le=7)
    trust: Literal["dscp", "pcp"] = "dscp"
    dscp_to_switch_priority: dict[int, int] = Field(default_factory=lambda: {26: 3, 48: 6})
    lossless_tc: int = Field(3, ge=0, le=7)
    cnp_priority: int = Field(6, ge=0, le=7)
    ecn_min_bytes: int = Field(150000, ge=1, le=100_000_000)
    ecn_max_bytes: int = Field(1500000, ge=1, le=100_000_000)
    ecn_probability: int = Field(100, ge=1, le=100)

    @field_validator("dscp_to_switch_priority")
    @classmethod
    def _dscp_map(cls, v: dict[int, int]) -> dict[int, int]:
        for dscp, prio in v.items():
            if not 0 <= dscp <= 63:
                raise ValueError(f"DSCP {dscp} is outside 0..63")
            if not 0 <= prio <= 7:
                raise ValueError(f"priority {prio} (for DSCP {dscp}) is outside 0..7")
        return dict(sorted(v.items()))

    @model_validator(mode="after")
    def _ecn_order(self) -> "SwitchRoce":
        if self.ecn_min_bytes > self.ecn_max_bytes:
            raise ValueError(f"ecn_min_bytes {self.ecn_min_bytes} is above ecn_max_bytes {self.ecn_max_bytes}; min must be <= max")
        if self.ecn_max_bytes < ONE_FRAME_BYTES:
            raise ValueError(f"ecn_max_bytes {self.ecn_max_bytes} is below one frame ({ONE_FRAME_BYTES} bytes, NVUE's "
                             "largest MTU): every queued packet would be marked and DCQCN would throttle every flow; "
                             f"allowed: >= {ONE_FRAME_BYTES} (Cumulus default 1500000)")
        if self.lossless_tc == self.cnp_priority:
            raise ValueError(f"lossless_tc {self.lossless_tc} is the traffic class of CNPs (cnp_priority "
                             f"{self.cnp_priority} maps to TC {self.cnp_priority} in every switch template, strict "
                             "priority on NVUE): RoCE "
                             "data would share the CNP queue; allowed: any other TC in 0..7")
        return self


class SwitchSpec(BaseModel):
    """Desired state of a switch.

    Attributes:
        platform: network OS driver name, one of :data:`tuning.model.platforms.SWITCH_DRIVERS`
            (``nvue`` or ``cumulus_linux``: Cumulus Linux 5.x NVUE; ``eos``: Arista EOS).
        port_mtu: MTU of every listed port, bytes, within the OS's range
            (:data:`tuning.model.platforms.SWITCH_PORTS`: NVUE 552..9216, EOS 68..9214); default the
            OS's largest (9216 on NVUE, 9214 on EOS).
        ports: port names or ranges in the OS's names (``swp1-16``, ``swp31``; ``Ethernet1-16``).
        port_mtu_overrides: per-port MTU where it differs from ``port_mtu``.
        roce: RoCE lossless settings, or None to leave QoS alone ("unmanaged"; refused by
            :func:`tuning.checks.check_qos` when the inventory has nodes, whose PFC needs every hop
            lossless).
        uplinks: this leaf's uplink cabling, leaf port -> ``SPINE:PORT`` (``{swp33: spine01:swp1}``;
            :mod:`tuning.model.cabling`, checked against the inventory at load); empty: not given,
            the verification schedule assumes it (:func:`tuning.verify.fabric_topology.topology_of`).
        manage: False for a switch another team owns: fabtune reads it (collect, lint, verification
            paths; what it holds against these settings is reported as ``switch-drift`` findings)
            and never writes it: no candidate staged, no plan, no push, no restore. Default True.
    """

    model_config = _STRICT
    role: Literal["switch"] = "switch"
    platform: str = "nvue"
    port_mtu: int = Field(None)  # type: ignore[assignment]  # not given: the OS's largest (_os_defaults); range: _mtu_range
    ports: list[str] = Field(default_factory=list)
    port_mtu_overrides: dict[PortName, int] = Field(default_factory=dict)
    roce: SwitchRoce | None = Field(default_factory=SwitchRoce)  # a new one, not a deep copy (see NodeSpec)
    uplinks: dict[PortName, UplinkEnd] = Field(default_factory=dict)
    manage: bool = True

    @model_validator(mode="before")
    @classmethod
    def _os_defaults(cls, data: object) -> object:
        """``port_mtu`` not given: the largest the switch's OS takes (an explicit null is refused)."""
        if isinstance(data, dict) and "port_mtu" not in data:
            platform = data.get("platform", "nvue")
            if isinstance(platform, str):
                data = {**data, "port_mtu": port_form(platform).mtu_max}
        return data

    @field_validator("platform")
    @classmethod
    def _platform(cls, v: str) -> str:
        return check_switch_platform(v)

    @field_validator("port_mtu")
    @classmethod
    def _mtu_range(cls, v: int, info: ValidationInfo) -> int:
        return _os_mtu(v, info.data.get("platform"))

    @field_validator("ports")
    @classmethod
    def _ports(cls, v: list[str], info: ValidationInfo) -> list[str]:
        expand_ports(v, info.data.get("platform") or "nvue")
        return v

    @field_validator("port_mtu_overrides")
    @classmethod
    def _override_range(cls, v: dict[str, int], info: ValidationInfo) -> dict[str, int]:
        platform = info.data.get("platform") or "nvue"
        for port, mtu in v.items():
            _os_mtu(mtu, platform, port)
        ports = info.data.get("ports")  # validated before this field (declared above it)
        known = set(expand_ports(ports, platform)) if ports else None
        unknown = [p for p in v if p not in known] if known is not None else []
        if unknown:
            raise ValueError(f"names {', '.join(unknown)}, not a port of this switch (an override of a port it "
                             f"lacks would be dropped in silence); allowed: the ports {', '.join(ports)}")
        return v

    def port_names(self) -> list[str]:
        """Every port of :attr:`ports`, ranges expanded in the OS's names (:func:`expand_ports`)."""
        return expand_ports(self.ports, self.platform)


def _os_mtu(mtu: int, platform: object, port: str | None = None) -> int:
    """``mtu`` when switch OS ``platform`` takes it as a port MTU (of ``port``, for an override).
    Raises ValueError naming the OS's range (:class:`tuning.model.platforms.PortForm`)."""
    form = port_form(platform) if isinstance(platform, str) else None
    if form is not None and not form.mtu_min <= mtu <= form.mtu_max:
        raise ValueError(f"{f'{port}: ' if port else ''}MTU {mtu} is outside {form.mtu_min}..{form.mtu_max}, the "
                         f"port MTUs platform {platform} takes")
    return mtu


DeviceSpec = Union[NodeSpec, SwitchSpec]


#: the most ports one range may name (a 64-port switch broken out 4 ways has 256)
MAX_PORTS = 1024


def expand_ports(specs: list[str], platform: str = "nvue") -> list[str]:
    """Expand port ranges in the names of switch OS ``platform``: NVUE ``["swp1-3", "swp31", "swp1s0"]``
    -> ``["swp1", "swp2", "swp3", "swp31", "swp1s0"]``; EOS ``["Ethernet1-2", "Ethernet3/1"]`` ->
    ``["Ethernet1", "Ethernet2", "Ethernet3/1"]`` (a range counts up the last number). Each distinct
    list is expanded once (a fleet's thousands of leaves list the same few ranges); a new list is
    returned every time.

    Raises:
        ValueError: a name that is not one of the OS's ports, or a range that is empty or wider
            than :data:`MAX_PORTS`.
    """
    key = (tuple(specs), platform)
    try:
        hash(key)
    except TypeError:  # an item that is no port name: expanded (and refused) without the cache
        return list(_expand.__wrapped__(*key))
    return list(_expand(*key))


_RANGE = re.compile(r"(.*?)(\d+)-(\d+)")


@functools.lru_cache(maxsize=256)
def _expand(specs: tuple, platform: str) -> tuple[str, ...]:
    """:func:`expand_ports` of one list (a refused list raises every time: errors are not cached)."""
    form = port_form(platform)
    out: dict[str, None] = {}  # ordered, each name once (a list's "in" made 256 ports quadratic)
    for spec in specs:
        for part in (p.strip() for p in str(spec).split(",")):
            m = _RANGE.fullmatch(part)
            if m and int(m.group(3)) - int(m.group(2)) >= MAX_PORTS:
                raise ValueError(f"{part!r} spans more than {MAX_PORTS} ports")
            if m and int(m.group(3)) >= int(m.group(2)):
                names = [f"{m.group(1)}{n}" for n in range(int(m.group(2)), int(m.group(3)) + 1)]
            else:
                names = [part]
            if not all(form.matches(n) for n in names):
                raise ValueError(f"{part!r} is not a port like {form.example} (switch platform {platform})")
            out.update(dict.fromkeys(names))
    return tuple(out)


def _port(value: object) -> int:
    """``ansible_port``: an int, or digits as Ansible casts them; never a bool or a float."""
    if isinstance(value, str) and value.isdigit() and len(value) <= 5:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ValueError(f"{value!r} is not a TCP port; allowed: 1..65535")
    return value


class ConnectionVars(BaseModel):
    """The connection variables fabtune reads (Ansible's names), strictly typed.

    Attributes:
        ansible_host: DNS name or address (default: the inventory name).  ansible_port: SSH port.
        ansible_user: login user (default ``root``). (``ansible_become*``: :mod:`tuning.transport.become`.)
        fabtune_sysroot: prefix of every node file path (``/``; the lab uses ``sysroot``).
        fabtune_ssh_key_file / fabtune_known_hosts_file: paths, relative to the inventory folder.
    """

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)
    ansible_host: Annotated[str, BeforeValidator(grammar.check_address)] = ""
    ansible_port: Annotated[int, BeforeValidator(_port)] = 22
    ansible_user: Annotated[str, BeforeValidator(grammar.check_user)] = "root"
    fabtune_sysroot: Annotated[str, BeforeValidator(lambda v: grammar.check_path(v, parent_ok=False))] = "/"
    fabtune_ssh_key_file: Optional[Annotated[str, BeforeValidator(grammar.check_path)]] = None
    fabtune_known_hosts_file: Optional[Annotated[str, BeforeValidator(grammar.check_path)]] = None
    fabtune_local: bool = False  # the device is this controller (a subnet manager's host): no SSH
