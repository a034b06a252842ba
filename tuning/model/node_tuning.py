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

import re
from typing import Literal, Optional

from typing import Annotated, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from tuning.model import grammar

CpuList = Annotated[str, BeforeValidator(grammar.check_cpulist)]
MlxParamName = Annotated[str, BeforeValidator(grammar.check_mlx_param)]
MlxParamValue = Annotated[Union[str, int], BeforeValidator(grammar.check_mlx_value)]
CmdlineName = Annotated[str, BeforeValidator(grammar.check_cmdline_name)]
CmdlineValue = Annotated[Union[str, int], BeforeValidator(grammar.check_cmdline_value)]
Word = Annotated[str, BeforeValidator(grammar.check_word)]

_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)


def _check_fw_version(value: object) -> str:
    """A firmware version as ``mlxfwmanager --query`` prints it: ``MAJOR.MINOR.SUBMINOR`` (``28.39.2048``)."""
    if not isinstance(value, str) or not re.fullmatch(r"[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,5}", value):
        raise ValueError(f"{value!r} is not a firmware version; allowed: like 28.39.2048 (quote it in YAML)")
    return value


def _check_image_dir(value: object) -> str:
    """An absolute folder of firmware images on the node (``mlxfwmanager -D``), no ``..``."""
    v = grammar.check_path(value, parent_ok=False)
    if not v.startswith("/"):
        raise ValueError(f"{v!r} is not an absolute path; allowed: a folder on the node like /opt/mlnx-fw")
    return v


class FirmwareSpec(BaseModel):
    """NIC firmware and non-volatile configuration (``mlxconfig``, ``mlxfwmanager``; NVIDIA MFT docs).

    Attributes:
        version: firmware version to pin (``28.39.2048``); burned only with ``--allow-firmware``, from the
            image for the NIC's PSID in ``image_dir`` (``mlxfwmanager -u -f -y -d BDF -D image_dir``).
        image_dir: folder on the node holding the firmware images (absolute path); needed with ``version``.
        mlxconfig: parameter -> value as ``mlxconfig -d DEV set P=V`` takes it (``LINK_TYPE_P1: ETH``,
            ``ADVANCED_PCI_SETTINGS: "True"``, ``NUM_OF_VFS: 8``); a value set is active after the next
            reboot or ``mlxfwreset`` only (``pending_reset``).
        allow_reset: let fabtune run ``mlxfwreset`` once per NIC when a value it set is pending (never a
            reboot, never a second reset).
    """

    model_config = _STRICT
    version: Optional[Annotated[str, BeforeValidator(_check_fw_version)]] = None
    image_dir: Optional[Annotated[str, BeforeValidator(_check_image_dir)]] = None
    mlxconfig: dict[MlxParamName, MlxParamValue] = Field(default_factory=dict)
    allow_reset: bool = False


class CpuSpec(BaseModel):
    """CPU plan and power settings.

    Attributes:
        reserved_cpus: CPUs kept for the OS (no GPU worker, no NIC IRQ), a CPU list (``0-1,56-57``);
            NIC completion IRQs never go there (checked against the node's online CPUs at plan).
        irq_cores_per_numa: physical cores per NUMA node set aside for NIC completion IRQs (with
            their SMT siblings); the rest of a NUMA node's CPUs are split among its GPUs
            (:mod:`tuning.node.cpuplan`). None (default): no CPU plan for IRQs, they spread over the
            NIC's NUMA-local CPUs minus ``reserved_cpus``.
        isolate: put the GPU workers' CPUs on the kernel command line (``isolcpus``, ``nohz_full``):
            ``reboot_required``; needs ``irq_cores_per_numa`` (the IRQ CPUs must stay out of it).
        governor: cpufreq scaling governor of every online CPU (``performance``); None leaves it.
        max_idle_latency_us: disable every idle state whose exit latency (us, cpuidle ``latency``) is
            above this; None leaves idle states alone.
    """

    model_config = _STRICT
    reserved_cpus: Optional[CpuList] = None
    irq_cores_per_numa: Optional[int] = Field(None, ge=1, le=64)
    isolate: bool = False
    governor: Optional[Word] = None
    max_idle_latency_us: Optional[int] = Field(None, ge=0, le=1_000_000)

    @model_validator(mode="after")
    def _isolate_needs_irq_cores(self) -> "CpuSpec":
        if self.isolate and self.irq_cores_per_numa is None:
            raise ValueError("isolate: true needs irq_cores_per_numa (the NIC IRQ cores stay out of the "
                             "isolated GPU workers' CPUs); allowed: set cpu.irq_cores_per_numa (1..64)")
        return self


#: command-line words the boot loader writes itself (``BOOT_IMAGE``, ``root=``, ``ro``): a profile never
#: replaces them (a wrong ``root=`` leaves the node unbootable)
BOOT_LOADER_OPTIONS = ("root", "ro", "rw", "init", "initrd", "boot_image")
#: kernel command-line options other profile fields compute (tuning.node.cmdline): never set twice
COMPUTED_OPTIONS = {"isolcpus": "cpu.isolate", "nohz_full": "cpu.isolate",
                    "intel_idle.states_off": "cpu.max_idle_latency_us"}


class KernelSpec(BaseModel):
    """Kernel command line, hugepages and NUMA balancing (domains ``cmdline``, ``hugepages``, ``sysctl``).

    Attributes:
        cmdline: options added to the kernel command line (``{iommu: pt}`` -> ``iommu=pt``; value
            ``""`` for a bare flag), written to the boot loader config (Debian/Ubuntu:
            ``GRUB_CMDLINE_LINUX`` of ``/etc/default/grub``, then ``update-grub``): ``reboot_required``
            until ``/proc/cmdline`` holds them. Never a reboot. Not allowed: the boot loader's own
            words (:data:`BOOT_LOADER_OPTIONS`).
        hugepages_2m_per_numa / hugepages_1g_per_numa: pool size of every NUMA node, pages of 2 MiB /
            1 GiB (``node<N>/hugepages/hugepages-{2048,1048576}kB/nr_hugepages``); more than a NUMA
            node's memory is refused at plan; re-applied at every boot.
        numa_balancing: automatic NUMA balancing on (true) or off (false): written once, as the sysctl
            ``kernel.numa_balancing`` (1 / 0); setting ``sysctl.kernel.numa_balancing`` to another
            value as well is refused.
    """

    model_config = _STRICT
    cmdline: dict[CmdlineName, CmdlineValue] = Field(default_factory=dict)
    hugepages_2m_per_numa: Optional[int] = Field(None, ge=0, le=16_777_216)
    hugepages_1g_per_numa: Optional[int] = Field(None, ge=0, le=65_536)
    numa_balancing: Optional[bool] = None

    @model_validator(mode="after")
    def _not_the_boot_loaders(self) -> "KernelSpec":
        for name in self.cmdline:
            if name.replace("-", "_") in BOOT_LOADER_OPTIONS:
                raise ValueError(f"cmdline.{name}: the boot loader writes {name!r} itself; fabtune does not "
                                 f"change it (allowed: other options)")
        return self


def overlaps(kernel: KernelSpec, cpu: CpuSpec, sysctl: dict) -> list[tuple[str, str]]:
    """Settings the profile gives twice, as ``(key, problem)``: ``kernel.numa_balancing`` beside a
    different ``sysctl.kernel.numa_balancing``, and a ``kernel.cmdline`` option that another field
    computes (``isolcpus`` / ``nohz_full`` with ``cpu.isolate``, ``intel_idle.states_off`` with
    ``cpu.max_idle_latency_us``). Empty when there is none.

    The node domains refuse these at plan (``Unfit``); a ``NodeSpec`` validator can refuse them at load.
    """
    out = []
    if kernel.numa_balancing is not None and "kernel.numa_balancing" in sysctl:
        want = "1" if kernel.numa_balancing else "0"
        have = " ".join(str(sysctl["kernel.numa_balancing"]).split())
        if have != want:
            out.append(("kernel.numa_balancing", f"{str(kernel.numa_balancing).lower()} (sysctl {want}) but "
                        f"sysctl.kernel.numa_balancing is {have}; allowed: set it in one place"))
    seen: dict[str, str] = {}
    for name in kernel.cmdline:  # the kernel reads - and _ in an option name as one (parameq)
        other = seen.setdefault(name.replace("-", "_"), name)
        if other != name:
            out.append((f"kernel.cmdline.{name}", f"the kernel reads {name} and {other} as one option; allowed: "
                        "give it once"))
    for name in kernel.cmdline:
        owner = COMPUTED_OPTIONS.get(name.replace("-", "_"))
        active = owner == "cpu.isolate" and cpu.isolate or owner == "cpu.max_idle_latency_us" and \
            cpu.max_idle_latency_us is not None
        if active:
            out.append((f"kernel.cmdline.{name}", f"{owner} computes {name}; allowed: leave it to {owner} "
                        f"or remove {owner}"))
    return out


class ModulesSpec(BaseModel):
    """Kernel modules (node domain ``modules``). ``nvidia_peermem``: true = loaded now (``modprobe``) and
    at boot (``/etc/modules-load.d/fabtune-nvidia-peermem.conf``); false = unloaded and not loaded at boot;
    None leaves it. Loaded but not registered with the RDMA core (no
    ``/sys/kernel/mm/memory_peers/nv_mem/version``) is reported, never "fixed"."""

    model_config = _STRICT
    nvidia_peermem: Optional[bool] = None


class PcieSpec(BaseModel):
    """PCIe (node domains ``pcie`` and ``mrrs``). ``clear_acs``: clear ACS on the switch ports between each
    GPU and its NIC with ``setpci`` (``not_persistent``: the BIOS sets it again at boot; ACS redirect is
    reported either way); ``max_read_request_bytes``: NIC MaxReadReq (128..4096, power of 2), re-applied
    at boot by the boot script."""

    model_config = _STRICT
    clear_acs: bool = False
    max_read_request_bytes: Optional[Annotated[int, BeforeValidator(grammar.check_max_read_request)]] = None


def _check_pause_mode(value: object) -> object:
    """YAML 1.1 reads a bare ``off`` as false: say so instead of a bare type error."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is a boolean (YAML reads a bare off/on as one); allowed: \"off\" (quoted) "
                         "or \"report\"")
    return value


class PauseSpec(BaseModel):
    """802.3x link-level (global) pause on the RDMA NICs (``ethtool -a`` / ``-A``): ``off`` turns RX and
    TX pause off (PFC in use); ``report`` only reports it on."""

    model_config = _STRICT
    global_pause: Annotated[Literal["off", "report"], BeforeValidator(_check_pause_mode)] = "report"
