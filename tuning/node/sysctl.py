"""Kernel parameters: read ``/proc/sys/<key with dots as slashes>``, set with ``sysctl -q -w k=v``
(procps-ng; ``sysctl: setting key "k": Invalid argument`` and exit 1 for a value of the wrong
type). Values compare with whitespace collapsed, as tuned does.

``kernel.numa_balancing`` (profile ``kernel.numa_balancing: true|false``) is this domain's key
``sysctl/kernel.numa_balancing`` (1 / 0): written, persisted in the sysctl.d drop-in and restored
like any sysctl, so it is known in one place; the same key under ``sysctl:`` with another value
is refused (``tuning.model.node_tuning.overlaps``).

Example profile::

    sysctl:
      net.core.rmem_max: 268435456
    kernel:
      numa_balancing: false
"""

from __future__ import annotations

from tuning.model import NodeSpec
from tuning.model.node_tuning import overlaps
from tuning.node.base import ABSENT, Domain, NodeFacts, Unfit, cat_cmd
from tuning.transport.base import q, sysroot_path


def wanted(spec: NodeSpec) -> dict[str, str]:
    """Every sysctl the profile sets, ``name -> value`` (whitespace collapsed): ``sysctl:`` and
    ``kernel.numa_balancing`` (``"1"`` / ``"0"``)."""
    out = {k: " ".join(str(v).split()) for k, v in spec.sysctl.items()}
    if spec.kernel.numa_balancing is not None:
        out["kernel.numa_balancing"] = "1" if spec.kernel.numa_balancing else "0"
    return out


def proc_path(key: str) -> str:
    """``net.core.rmem_max`` -> ``/proc/sys/net/core/rmem_max``."""
    return "/proc/sys/" + key.replace(".", "/")


class SysctlDomain(Domain):
    """One key per sysctl: ``sysctl/<name>``."""

    name = "sysctl"

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        return [f"r {q('sysctl/' + k)} {q(sysroot_path(sysroot, proc_path(k)))}" for k in wanted(spec)]

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        return {f"sysctl/{k}": facts.raw.get(f"sysctl/{k}", ABSENT) for k in wanted(spec)}

    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        for key, problem in overlaps(spec.kernel, spec.cpu, spec.sysctl):
            if key == "kernel.numa_balancing":
                raise Unfit(key, problem)
        want = wanted(spec)
        for k in want:
            # a key the read script did not print at all is an offline plan (nothing read): not checked
            if facts.raw.get(f"sysctl/{k}", "?" if k not in spec.sysctl else ABSENT) == ABSENT:
                where = f"sysctl.{k}" if k in spec.sysctl else "kernel.numa_balancing"
                raise Unfit(where, f"the node has no kernel parameter {k} ({proc_path(k)} is missing)")
        return {f"sysctl/{k}": v for k, v in want.items()}

    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str | None:
        if value == ABSENT:
            return None  # a kernel parameter cannot be removed
        return f"sysctl -q -w {q(key.split('/', 1)[1] + '=' + value)}"

    def read_cmd(self, key: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        return cat_cmd(sysroot, proc_path(key.split("/", 1)[1]))
