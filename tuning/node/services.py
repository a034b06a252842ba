"""Agents that undo tuning behind fabtune's back: irqbalance moves IRQ affinities back.

Read with ``systemctl is-active irqbalance.service`` (prints ``active``, or ``inactive`` also for
a unit that is not installed; exit 3 then); a running irqbalance shows in the plan, and the
profile (``irqbalance``, while ``irq_affinity`` is on) chooses what to do:

- ``stop`` (default): ``service/irqbalance: active -> inactive`` (``systemctl stop``; restore
  starts it again);
- ``ban``: ``irqbalance/banirq: <before> -> 101,102,...``: the tuned completion IRQs as
  ``--banirq=N`` in ``IRQBALANCE_ARGS`` of ``/etc/sysconfig/irqbalance`` (RHEL) or
  ``/etc/default/irqbalance`` (Debian), the environment file its unit reads; the line is
  rewritten keeping the other arguments, then ``systemctl try-restart irqbalance.service``
  (irqbalance reads its arguments only at start);
- ``leave``: nothing (the read-back after apply then catches it).

Example profile::

    irq_affinity: numa-local
    irqbalance: ban         # or: stop, leave
"""

from __future__ import annotations

import base64
import re
import shlex

from tuning.model import NodeSpec
from tuning.node.base import ABSENT, Change, Domain, NodeFacts, decode
from tuning.transport.base import q, sysroot_path

UNITS = {"irqbalance": "irqbalance.service"}
ENV_FILES = ("/etc/sysconfig/irqbalance", "/etc/default/irqbalance")  # the first that exists is used
_ARGS = re.compile(r"^\s*IRQBALANCE_ARGS=(.*)$", re.M)


def _args(env_text: str) -> list[str]:
    """The arguments in the ``IRQBALANCE_ARGS=`` line, [] when there is none: the shell value,
    word-split as the unit's ``$IRQBALANCE_ARGS`` is."""
    m = _ARGS.search(env_text)
    try:
        return " ".join(shlex.split(m.group(1))).split() if m else []
    except ValueError:
        return []


def bans(env_text: str) -> str:
    """``--banirq=N`` of an environment file as a sorted ``N,M`` list (``""``: none)."""
    irqs = {int(w.split("=", 1)[1]) for w in _args(env_text) if re.fullmatch(r"--banirq=\d+", w)}
    return ",".join(str(i) for i in sorted(irqs))


def _env_file(facts: NodeFacts) -> str:
    for path in ENV_FILES:
        if facts.raw.get(f"irqbalance/env{path}", ABSENT) != ABSENT:
            return path
    return ENV_FILES[1]


class ServicesDomain(Domain):
    """``service/<name>`` -> ``active`` | ``inactive``; ``irqbalance/banirq`` -> ``N,M,...``."""

    name = "services"

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        # is-active exits 3 for an inactive unit: print its output whatever the status
        lines = [f"printf '%s\\t%s\\n' {q('service/' + n)} \"$(systemctl is-active {q(u)} 2>/dev/null "
                 f"| head -n1 | base64 -w0)\"" for n, u in UNITS.items()]
        return lines + [f"rb {q('irqbalance/env' + p)} {q(sysroot_path(sysroot, p))}" for p in ENV_FILES]

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        out = {}
        for n in UNITS:
            raw = facts.raw.get(f"service/{n}", ABSENT)
            text = decode(raw).strip() if raw not in (ABSENT, "") else ""
            out[f"service/{n}"] = text or "inactive"
        env = decode(facts.raw.get(f"irqbalance/env{_env_file(facts)}", ABSENT))
        out["irqbalance/banirq"] = ABSENT if env == ABSENT else bans(env)
        return out

    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        if spec.irq_affinity == "off" or spec.irqbalance == "leave":
            return {}
        if spec.irqbalance == "stop":
            return {"service/irqbalance": "inactive"}
        irqs = sorted(i for nic in spec.nics for i in facts.nics.get(nic.netdev, {}).get("comp_irqs", []))
        return {"irqbalance/banirq": ",".join(str(i) for i in irqs)}

    def plan(self, device: str, desired: dict[str, str], current: dict[str, str],
             ctx: tuple[NodeSpec, NodeFacts, str] | None = None) -> list[Change]:
        """The base diff; the environment file is restored byte for byte (its whole text as read)."""
        out = []
        for ch in super().plan(device, desired, current, ctx):
            if ch.key == "irqbalance/banirq" and ctx is not None:
                _, facts, sysroot = ctx
                path = _env_file(facts)
                target = q(sysroot_path(sysroot, path))
                env = decode(facts.raw.get(f"irqbalance/env{path}", ABSENT))
                put = (f"rm -f {target}" if env == ABSENT else
                       f"printf %s {base64.b64encode(env.encode()).decode()} | base64 -d > {target}")
                ch = Change(**{**ch.as_dict(), "restore_cmd": f"{put} && systemctl try-restart irqbalance.service"})
            out.append(ch)
        return out

    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str | None:
        if key == "irqbalance/banirq":
            return self._ban_cmd(value, facts, sysroot)
        unit = UNITS[key.split("/", 1)[1]]
        if value == "inactive":
            return f"systemctl stop {q(unit)}"
        if value == "active":
            return f"systemctl start {q(unit)}"
        return None

    @staticmethod
    def _ban_cmd(value: str, facts: NodeFacts, sysroot: str) -> str:
        """Rewrite the ``IRQBALANCE_ARGS=`` line with bans ``value`` (other arguments kept), restart."""
        path = _env_file(facts)
        target = q(sysroot_path(sysroot, path))
        restart = "systemctl try-restart irqbalance.service"
        if value == ABSENT:
            return f"rm -f {target} && {restart}"
        env = decode(facts.raw.get(f"irqbalance/env{path}", ABSENT))
        words = [w for w in _args("" if env == ABSENT else env) if not w.startswith("--banirq")]
        words += [f"--banirq={i}" for i in value.split(",") if i]
        line = "IRQBALANCE_ARGS=" + shlex.quote(" ".join(words))
        return (f"{{ grep -v '^[[:space:]]*IRQBALANCE_ARGS=' {target} 2>/dev/null; printf '%s\\n' {q(line)}; }}"
                f" > {target}.fabtune && mv {target}.fabtune {target} && {restart}")

    def read_cmd(self, key: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        if key == "irqbalance/banirq":
            return f"cat {q(sysroot_path(sysroot, _env_file(facts)))}"
        return f"systemctl is-active {q(UNITS[key.split('/', 1)[1]])} || true"

    def parse_read(self, key: str, output: str) -> str:
        if key == "irqbalance/banirq":
            return bans(output)
        return super().parse_read(key, output)
