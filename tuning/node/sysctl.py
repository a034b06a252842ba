"""Kernel parameters: read ``/proc/sys/<key with dots as slashes>``, set with ``sysctl -q -w k=v``
(procps-ng; ``sysctl: setting key "k": Invalid argument`` and exit 1 for a value of the wrong
type). Values compare with whitespace collapsed, as tuned does.

Example profile::

    sysctl:
      net.core.rmem_max: 268435456
      kernel.numa_balancing: 0
"""

from __future__ import annotations

from tuning.model import NodeSpec
from tuning.node.base import ABSENT, Domain, NodeFacts, Unfit, cat_cmd
from tuning.transport.base import q, sysroot_path


def proc_path(key: str) -> str:
    """``net.core.rmem_max`` -> ``/proc/sys/net/core/rmem_max``."""
    return "/proc/sys/" + key.replace(".", "/")


class SysctlDomain(Domain):
    """One key per sysctl: ``sysctl/<name>``."""

    name = "sysctl"

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        return [f"r {q('sysctl/' + k)} {q(sysroot_path(sysroot, proc_path(k)))}" for k in spec.sysctl]

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        return {f"sysctl/{k}": facts.raw.get(f"sysctl/{k}", ABSENT) for k in spec.sysctl}

    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        for k in spec.sysctl:
            if facts.raw.get(f"sysctl/{k}", ABSENT) == ABSENT:
                raise Unfit(f"sysctl.{k}", f"the node has no kernel parameter {k} ({proc_path(k)} is missing)")
        return {f"sysctl/{k}": " ".join(str(v).split()) for k, v in spec.sysctl.items()}

    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str | None:
        if value == ABSENT:
            return None  # a kernel parameter cannot be removed
        return f"sysctl -q -w {q(key.split('/', 1)[1] + '=' + value)}"

    def read_cmd(self, key: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        return cat_cmd(sysroot, proc_path(key.split("/", 1)[1]))
