"""Agents that undo tuning behind fabtune's back: irqbalance moves IRQ affinities back.

Read with ``systemctl is-active irqbalance.service`` (prints ``active``, or ``inactive`` also for
a unit that is not installed; exit 3 then); a running irqbalance shows in the plan as
``service/irqbalance: active -> inactive`` when the profile asks to stop it (``irqbalance: stop``,
the default while ``irq_affinity`` is on), stopped with ``systemctl stop`` and started again on
restore. ``irqbalance: leave`` keeps it running (then the read-back after apply catches it).

Example profile::

    irq_affinity: numa-local
    irqbalance: stop        # or: leave
"""

from __future__ import annotations

from tuning.model import NodeSpec
from tuning.node.base import ABSENT, Domain, NodeFacts, decode
from tuning.transport.base import q

UNITS = {"irqbalance": "irqbalance.service"}


class ServicesDomain(Domain):
    """One key per agent: ``service/<name>`` -> ``active`` | ``inactive``."""

    name = "services"

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        # is-active exits 3 for an inactive unit: print its output whatever the status
        return [f"printf '%s\\t%s\\n' {q('service/' + n)} \"$(systemctl is-active {q(u)} 2>/dev/null "
                f"| head -n1 | base64 -w0)\"" for n, u in UNITS.items()]

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        out = {}
        for n in UNITS:
            raw = facts.raw.get(f"service/{n}", ABSENT)
            text = decode(raw).strip() if raw not in (ABSENT, "") else ""
            out[f"service/{n}"] = text or "inactive"
        return out

    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        if spec.irq_affinity == "off" or spec.irqbalance == "leave":
            return {}
        return {"service/irqbalance": "inactive"}

    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str | None:
        unit = UNITS[key.split("/", 1)[1]]
        if value == "inactive":
            return f"systemctl stop {q(unit)}"
        if value == "active":
            return f"systemctl start {q(unit)}"
        return None

    def read_cmd(self, key: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        return f"systemctl is-active {q(UNITS[key.split('/', 1)[1]])} || true"
