"""What a node's InfiniBand HCA ports must be (issue 22, the node side): the ``ib_ports`` key of a node.

One source, Ansible-readable: ``group_vars/gpu_nodes.yml`` (or a host's ``host_vars``; a host's
``ib_ports`` replaces the group's whole, as Ansible's default ``hash_behaviour=replace`` does)::

    ib_ports:
      hcas: [mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7]
      width: 4X          # lanes every port must run (1X 2X 4X 8X 12X)
      speed: HDR         # per-lane signalling every port must run: 4X HDR = 200 Gb/sec
      active_mtu: 4096   # optional: the least active MTU in bytes (256 512 1024 2048 4096)

Every port of every HCA named is judged (never "any port up", NHC ``check_hw_ib``'s mistake): state
``ACTIVE`` (the only state a job can use), phys_state ``LinkUp``, the width and speed of its sysfs
``rate`` at or above the intent, a LID and an SM LID (``0x0``: no subnet manager configured it). An
HCA named here that the node lacks is a finding too. With ``active_mtu``, an ACTIVE port's active MTU
(``ibv_devinfo``'s ``active_mtu``: sysfs does not hold it) below it is a finding; the SM's partitions
set the path MTU, capped by the ports' (:mod:`tuning.verify.ib_sm`).

Sources: the speed words of the kernel's ``rate`` attribute (``drivers/infiniband/core/sysfs.c``
``rate_show``; their lane rates live with the sysfs reader, :mod:`tuning.parsers.ib_sysfs`) and its
widths (``ib_width_enum_to_int``: 1, 2, 4, 8, 12); the MTUs of IBA's PortInfo MTU codes 1..5, as rdma-core's
``ibv_devinfo`` prints them (``mtu_str``: ``4096 (5)``).
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from tuning.model import grammar

__all__ = ["IbPortsSpec"]


class IbPortsSpec(BaseModel):
    """The intent for a node's InfiniBand HCA ports (module docstring).

    Attributes:
        hcas: the RDMA devices (``mlx5_0``) that must be present with InfiniBand ports; at least one,
            each once. Every port of each is judged.
        width: the lanes each port must run (``1X`` .. ``12X``); fewer lanes is a finding.
        speed: the per-lane speed each port must run, a word of the kernel's ``rate`` (the lane rates:
            :data:`tuning.parsers.ib_sysfs.LANE_GBPS`); a slower one is a finding.
        active_mtu: the least active MTU in bytes each ACTIVE port must run (256 .. 4096), None: not judged.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    hcas: list[Annotated[str, BeforeValidator(grammar.check_rdma_device)]] = Field(min_length=1)
    width: Literal["1X", "2X", "4X", "8X", "12X"] = "4X"
    speed: Literal["SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR", "NDR", "XDR"] = "HDR"
    active_mtu: Optional[Literal[256, 512, 1024, 2048, 4096]] = None

    @field_validator("hcas")
    @classmethod
    def _once(cls, v: list[str]) -> list[str]:
        dup = next((h for i, h in enumerate(v) if h in v[:i]), None)
        if dup is not None:
            raise ValueError(f"{dup!r} is named twice; allowed: each HCA once")
        return v

    @property
    def lanes(self) -> int:
        """The intent's lane count (``4X`` -> 4)."""
        return int(self.width[:-1])
