"""MTU of each RDMA NIC's netdev: read ``/sys/class/net/<if>/mtu``, set with
``ip link set dev <if> mtu <n>`` (iproute2; silent on success, ``Error: mtu greater than
device maximum.`` and exit 2 out of range; mlx5 allows 68..9978).

Example profile::

    mtu: 9000
"""

from __future__ import annotations

from functools import lru_cache

from tuning.model import NodeSpec
from tuning.node.base import ABSENT, Domain, NodeFacts, Unfit, cat_cmd
from tuning.model.tags import mtu_tags
from tuning.transport.base import q, sysroot_path


def _path(netdev: str) -> str:
    return f"/sys/class/net/{netdev}/mtu"


class MtuDomain(Domain):
    """Netdev MTU in bytes, one key per NIC: ``mtu/<netdev>``."""

    name = "mtu"
    boot_script = True

    def tags(self, key: str, before: str | None, after: str | None) -> tuple[str, ...]:
        """``mtu_up`` / ``mtu_down`` (:func:`tuning.node.base.mtu_tags`)."""
        return mtu_tags(before, after)

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        return [f"r {q('mtu/' + n.netdev)} {q(sysroot_path(sysroot, _path(n.netdev)))}" for n in spec.nics]

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        return {f"mtu/{n.netdev}": facts.raw.get(f"mtu/{n.netdev}", "") for n in spec.nics}

    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        for i, n in enumerate(spec.nics):
            if facts.raw.get(f"mtu/{n.netdev}", ABSENT) == ABSENT:
                raise Unfit(f"nics.{i}.netdev", f"the node has no netdev {n.netdev} (/sys/class/net/{n.netdev} is missing)")
        if spec.mtu is None:  # unmanaged: every NIC keeps its MTU
            return {}
        return {f"mtu/{n.netdev}": str(spec.mtu) for n in spec.nics}

    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str | None:
        if value == ABSENT:
            return None
        return _mtu_cmd(key.split("/", 1)[1], value)

    def read_cmd(self, key: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        return cat_cmd(sysroot, _path(key.split("/", 1)[1]))


@lru_cache(maxsize=4096)
def _mtu_cmd(netdev: str, mtu: str) -> str:
    """``ip link set dev IF mtu N``, remembered by its words (a fleet asks for the same few 80,000 times)."""
    return f"ip link set dev {q(netdev)} mtu {q(mtu)}"
