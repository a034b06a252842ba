"""Profile sections of the node domains added for issue 7: NIC firmware, CPU, kernel, modules,
PCIe and link-level pause. Each is a key of :class:`~tuning.model.settings.NodeSpec` and every
field defaults to "leave as it is" (None / False), so an inventory that does not name a section
plans no change for it.

Example ``group_vars/nodes.yml``::

    firmware:
      mlxconfig: {ADVANCED_PCI_SETTINGS: "True", MAX_ACC_OUT_READ: "44"}
    cpu:
      reserved_cpus: "0-1,56-57"     # kept for the OS: no GPU worker, no NIC IRQ
      governor: performance
      max_idle_latency_us: 10        # idle states with a longer exit latency are disabled
    kernel:
      cmdline: {iommu: pt}
      hugepages_2m_per_numa: 1024
      numa_balancing: false
    modules: {nvidia_peermem: true}
    pcie: {clear_acs: false, max_read_request_bytes: 4096}
    pause: {global_pause: "off"}
"""

from __future__ import annotations

from typing import Literal, Optional

from typing import Annotated, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from tuning.model import grammar

CpuList = Annotated[str, BeforeValidator(grammar.check_cpulist)]
MlxParamName = Annotated[str, BeforeValidator(grammar.check_mlx_param)]
MlxParamValue = Annotated[Union[str, int], BeforeValidator(grammar.check_mlx_value)]
CmdlineName = Annotated[str, BeforeValidator(grammar.check_cmdline_name)]
CmdlineValue = Annotated[Union[str, int], BeforeValidator(grammar.check_cmdline_value)]
Word = Annotated[str, BeforeValidator(grammar.check_word)]

_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)


class FirmwareSpec(BaseModel):
    """NIC firmware and non-volatile configuration (``mlxconfig``, ``mlxfwmanager``; NVIDIA MFT docs).

    Attributes:
        version: firmware version to pin (``28.39.2048``); burned only with ``--allow-firmware``.
        mlxconfig: parameter -> value as ``mlxconfig -d DEV set P=V`` takes it (``LINK_TYPE_P1: ETH``,
            ``ADVANCED_PCI_SETTINGS: "True"``, ``NUM_OF_VFS: 8``); a value set is active after the next
            reboot or ``mlxfwreset`` only (``pending_reset``).
        allow_reset: let fabtune run ``mlxfwreset`` once when a value is pending (never a reboot).
    """

    model_config = _STRICT
    version: Optional[str] = None
    mlxconfig: dict[MlxParamName, MlxParamValue] = Field(default_factory=dict)
    allow_reset: bool = False


class CpuSpec(BaseModel):
    """CPU plan and power settings.

    Attributes:
        reserved_cpus: CPUs kept for the OS (no GPU worker, no NIC IRQ), a CPU list (``0-1,56-57``).
        irq_cores_per_numa: physical cores per NUMA node set aside for NIC completion IRQs (with
            their SMT siblings); the rest of a NUMA node's CPUs are split among its GPUs.
        isolate: put the GPU workers' CPUs on the kernel command line (``isolcpus``, ``nohz_full``):
            ``reboot_required``.
        governor: cpufreq scaling governor of every online CPU (``performance``); None leaves it.
        max_idle_latency_us: disable every idle state whose exit latency (us, cpuidle ``latency``) is
            above this; None leaves idle states alone.
    """

    model_config = _STRICT
    reserved_cpus: Optional[CpuList] = None
    irq_cores_per_numa: int = Field(2, ge=1, le=64)
    isolate: bool = False
    governor: Optional[Word] = None
    max_idle_latency_us: Optional[int] = Field(None, ge=0, le=1_000_000)


class KernelSpec(BaseModel):
    """Kernel command line, hugepages and NUMA balancing.

    Attributes:
        cmdline: options added to the kernel command line (``{iommu: pt}`` -> ``iommu=pt``; value
            ``""`` for a bare flag); through the boot loader config, ``reboot_required``.
        hugepages_2m_per_numa / hugepages_1g_per_numa: pool size per NUMA node, pages.
        numa_balancing: automatic NUMA balancing (``kernel.numa_balancing``) on or off.
    """

    model_config = _STRICT
    cmdline: dict[CmdlineName, CmdlineValue] = Field(default_factory=dict)
    hugepages_2m_per_numa: Optional[int] = Field(None, ge=0, le=16_777_216)
    hugepages_1g_per_numa: Optional[int] = Field(None, ge=0, le=65_536)
    numa_balancing: Optional[bool] = None


class ModulesSpec(BaseModel):
    """Kernel modules. ``nvidia_peermem``: loaded now and at boot and registered with the RDMA core
    (``/sys/kernel/mm/memory_peers/nv_mem/version``); None leaves it."""

    model_config = _STRICT
    nvidia_peermem: Optional[bool] = None


class PcieSpec(BaseModel):
    """PCIe. ``clear_acs``: clear ACS redirect bits on the bridges between each GPU and its NIC with
    ``setpci`` (``not_persistent``); ``max_read_request_bytes``: NIC MaxReadReq (128..4096, power of 2)."""

    model_config = _STRICT
    clear_acs: bool = False
    max_read_request_bytes: Optional[Literal[128, 256, 512, 1024, 2048, 4096]] = None


class PauseSpec(BaseModel):
    """802.3x link-level (global) pause on the RDMA NICs (``ethtool -a`` / ``-A``): ``off`` turns RX and
    TX pause off (PFC in use); ``report`` only reports it on."""

    model_config = _STRICT
    global_pause: Literal["off", "report"] = "report"
