"""CPU power: the cpufreq scaling governor of every CPU and the CPU idle states (C-states) whose exit
latency is too long, live in sysfs.

Sources: kernel ``Documentation/admin-guide/pm/cpufreq.rst`` (``cpu<N>/cpufreq/scaling_governor``;
a governor the policy does not list in ``scaling_available_governors`` is refused with EINVAL),
``Documentation/admin-guide/pm/cpuidle.rst`` and ``ABI/testing/sysfs-devices-system-cpu``
(``cpu<N>/cpuidle/state<K>/{name,desc,latency,disable}``: ``latency`` is the exit latency in
microseconds; writing ``1`` to ``disable`` keeps the governor off that state on that CPU).

Keys (values compared for EVERY CPU; a read-back checks each one):

- ``governor/all``: ``performance`` when every CPU runs it, else the groups as read,
  ``performance on 0-3, powersave on 4-111`` (what a restore writes back, CPU by CPU).
- ``idle/state<K>``: ``disabled`` / ``enabled`` on every CPU (or ``disabled on 0-27, enabled on
  28-111``), for EVERY state of the node: a state whose exit latency is above
  ``cpu.max_idle_latency_us`` is disabled, the others enabled (the profile is the whole policy).

Persistence: this domain is live only and ``boot_script``: the boot script re-applies the
governor and the idle states with these very commands. The idle states' persistent form on the
kernel command line is ``intel_idle.states_off=<mask>`` (intel_idle, kernel >= 5.7: those states
start disabled, still listed in sysfs; ``admin-guide/pm/intel_idle.rst``), planned by the
``cmdline`` domain as ``cmdline/intel_idle.states_off`` (``reboot_required``), so a plan shows the
live (``idle/state3``) and the persisted (``cmdline/intel_idle.states_off``) form apart.

Example profile::

    cpu:
      governor: performance
      max_idle_latency_us: 10      # Sapphire Rapids: C6 (290 us) disabled; POLL, C1, C1E stay
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from tuning.cpulist import format_cpulist, parse_cpulist
from tuning.model import NodeSpec
from tuning.node.base import ABSENT, Domain, Finding, NodeFacts, NodeState, Unfit, decode
from tuning.parsers.cpupower import DEEP_IDLE_US
from tuning.transport.base import q, sysroot_path


CPU = "/sys/devices/system/cpu"
_LINE = re.compile(r"cpu(\d+)/(?:cpuidle/state(\d+)|cpufreq)/(\w+):(.*)$")
_GROUP = re.compile(r"^(\w[\w-]*) on ([\d,-]+)$")


@dataclass(frozen=True)
class IdleState:
    """One cpuidle state of the node's first online CPU: ``index`` (``state<K>``), ``name`` (``C6``),
    ``desc`` (``MWAIT 0x20``), ``latency_us`` (exit latency)."""

    index: int
    name: str
    desc: str
    latency_us: int


def _grep_lines(text: str) -> list[tuple[int, int | None, str, str]]:
    """``grep -H . FILES`` output of cpufreq / cpuidle files -> ``(cpu, state or None, file, value)``."""
    out = []
    for line in text.splitlines():
        m = _LINE.search(line)
        if m:
            out.append((int(m[1]), int(m[2]) if m[2] else None, m[3], m[4].strip()))
    return out


def idle_table_script(sysroot: str) -> list[str]:
    """Read-script lines printing ``power/idle_driver`` (cpuidle ``current_driver``) and
    ``power/idle_table`` (name, desc, latency of every idle state of the first online CPU): what
    :func:`idle_table` reads (the ``cmdline`` domain reads them too, for ``intel_idle.states_off``)."""
    c = q(sysroot_path(sysroot, CPU))
    return [
        f"_pw_c=$(cut -d, -f1 < {c}/online 2>/dev/null); _pw_c=${{_pw_c%%-*}}",
        f"r power/idle_driver {c}/cpuidle/current_driver",
        f'b power/idle_table grep -H . {c}/cpu"$_pw_c"/cpuidle/state[0-9]*/name '
        f'{c}/cpu"$_pw_c"/cpuidle/state[0-9]*/desc {c}/cpu"$_pw_c"/cpuidle/state[0-9]*/latency',
    ]


def idle_table(facts: NodeFacts) -> dict[int, IdleState] | None:
    """The idle states of the node (first online CPU), by index; None when nothing was read (an
    offline plan), ``{}`` when the node has no cpuidle states."""
    raw = facts.raw.get("power/idle_table")
    if raw is None:
        return None
    fields: dict[int, dict[str, str]] = {}
    for _, k, name, value in _grep_lines(decode(raw) if raw != ABSENT else ""):
        if k is not None:
            fields.setdefault(k, {})[name] = value
    return {k: IdleState(k, f.get("name", f"state{k}"), f.get("desc", ""), int(f.get("latency", "0") or 0))
            for k, f in sorted(fields.items()) if f.get("latency", "").isdigit()}


def summary(values: dict[int, str]) -> str:
    """Per-CPU values as one string: ``v`` when every CPU holds ``v``, else ``v1 on 0-3, v2 on 4-111``
    (groups in order of their first CPU); ABSENT when there is no CPU."""
    if not values:
        return ABSENT
    groups: dict[str, list[int]] = {}
    for cpu in sorted(values):
        groups.setdefault(values[cpu], []).append(cpu)
    if len(groups) == 1:
        return next(iter(groups))
    return ", ".join(f"{v} on {format_cpulist(cpus)}" for v, cpus in groups.items())


def groups(value: str) -> list[tuple[str, list[int] | None]]:
    """Inverse of :func:`summary`: ``[(value, cpus)]``, cpus None for "every CPU".

    Raises:
        ValueError: text that :func:`summary` does not make.
    """
    if _GROUP.match(value.split(", ")[0]) is None:
        return [(value, None)]
    out: list[tuple[str, list[int] | None]] = []
    for part in value.split(", "):
        m = _GROUP.match(part)
        if m is None:
            raise ValueError(f"{value!r} is not a per-CPU summary")
        out.append((m[1], parse_cpulist(m[2])))
    return out


def _per_cpu(facts_value: str, state: int | None) -> dict[int, str]:
    text = decode(facts_value) if facts_value not in (ABSENT, "") else ""
    return {cpu: v for cpu, k, _, v in _grep_lines(text) if k == state}


def _leaf(key: str) -> str:
    """The file of a key below ``cpu<N>/``: ``cpufreq/scaling_governor`` or ``cpuidle/state<K>/disable``.

    Raises:
        ValueError: not a key of this domain.
    """
    if key == "governor/all":
        return "cpufreq/scaling_governor"
    m = re.fullmatch(r"idle/(state\d{1,3})", key)
    if m is None:
        raise ValueError(f"{key!r} is not a power key")
    return f"cpuidle/{m[1]}/disable"


def _enabled(value: str) -> str:
    return "enabled" if value == "0" else "disabled"


class PowerDomain(Domain):
    """``governor/all`` and ``idle/state<K>`` (see the module doc)."""

    name = "power"
    boot_script = True

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        c = q(sysroot_path(sysroot, CPU))
        return idle_table_script(sysroot) + [
            f"b power/idle_disable grep -H . {c}/cpu[0-9]*/cpuidle/state[0-9]*/disable",
            f"b power/governor grep -H . {c}/cpu[0-9]*/cpufreq/scaling_governor",
            f'r power/governors {c}/cpu"$_pw_c"/cpufreq/scaling_available_governors',
            f'r power/cpufreq_driver {c}/cpu"$_pw_c"/cpufreq/scaling_driver',
        ]

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        out = {}
        if spec.cpu.governor is not None:
            out["governor/all"] = summary(_per_cpu(facts.raw.get("power/governor", ABSENT), None))
        if spec.cpu.max_idle_latency_us is not None:
            for k in idle_table(facts) or {}:
                per_cpu = _per_cpu(facts.raw.get("power/idle_disable", ABSENT), k)
                out[f"idle/state{k}"] = summary({cpu: _enabled(v) for cpu, v in per_cpu.items()})
        return out

    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        out = {}
        governor, limit = spec.cpu.governor, spec.cpu.max_idle_latency_us
        if governor is not None:
            avail = facts.raw.get("power/governors")  # None: nothing read (offline plan)
            driver = facts.raw.get("power/cpufreq_driver", ABSENT)
            if avail == ABSENT:
                raise Unfit("cpu.governor", "the node has no cpufreq policy (scaling_available_governors is "
                                            "missing): no governor can be set; allowed: leave cpu.governor unset")
            if avail is not None and governor not in avail.split():
                raise Unfit("cpu.governor", f"{governor!r} is not a governor of this node (cpufreq driver "
                                            f"{driver if driver != ABSENT else 'unknown'}); allowed: "
                                            f"{', '.join(avail.split())}")
            out["governor/all"] = governor
        if limit is not None:
            table = idle_table(facts)
            if table == {}:
                raise Unfit("cpu.max_idle_latency_us", "the node has no CPU idle states in sysfs (cpuidle driver "
                                                       f"{facts.raw.get('power/idle_driver', 'none')}); allowed: "
                                                       "leave it unset")
            for k, st in (table or {}).items():
                out[f"idle/state{k}"] = "disabled" if st.latency_us > limit else "enabled"
        return out

    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str | None:
        if value == ABSENT:
            return None  # a CPU's governor or idle state cannot be removed
        leaf, c = _leaf(key), q(sysroot_path(sysroot, CPU))
        cmds = []
        for word, cpus in groups(value):
            text = word if key == "governor/all" else {"disabled": "1", "enabled": "0"}[word]
            if cpus is not None:
                files = " ".join(f"{c}/cpu{n}/{leaf}" for n in cpus)
                cmds.append(f"printf '%s\\n' {q(text)} | tee {files} >/dev/null")
                continue
            # every CPU: when no CPU has the file (an idle state gone after a reboot with another
            # intel_idle.max_cstate) the boot script says so and goes on; an apply's read-back fails
            cmds.append(f"set -- {c}/cpu[0-9]*/{leaf}; if [ -e \"$1\" ]; then printf '%s\\n' {q(text)} | "
                        f"tee \"$@\" >/dev/null; else echo {q(f'fabtune: no CPU has {leaf}: not written')} >&2; fi")
        return " && ".join(cmds)

    def read_cmd(self, key: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        return f"grep -H . {q(sysroot_path(sysroot, CPU))}/cpu[0-9]*/{_leaf(key)}"

    def parse_read(self, key: str, output: str) -> str:
        if key == "governor/all":
            return summary({cpu: v for cpu, _, _, v in _grep_lines(output)})
        return summary({cpu: _enabled(v) for cpu, _, _, v in _grep_lines(output)})


def deep_idle_enabled(facts: NodeFacts, min_latency_us: int = DEEP_IDLE_US) -> list[dict] | None:
    """The idle states with an exit latency above ``min_latency_us`` that are enabled on any CPU:
    ``[{"state": "state3", "name": "C6", "latency_us": 290, "cpus": "0-111"}]``; None when the node's
    idle states were not read."""
    table = idle_table(facts)
    if table is None:
        return None
    out = []
    for k, st in table.items():
        per_cpu = _per_cpu(facts.raw.get("power/idle_disable", ABSENT), k)
        on = [cpu for cpu, v in per_cpu.items() if v == "0"]
        if st.latency_us > min_latency_us and on:
            out.append({"state": f"state{k}", "name": st.name, "latency_us": st.latency_us,
                        "cpus": format_cpulist(sorted(on))})
    return out


def fleet_idle_drift(states: dict[str, NodeState], min_latency_us: int = DEEP_IDLE_US) -> list[dict]:
    """Nodes whose enabled deep idle states (exit latency above ``min_latency_us``) differ from the
    majority of the fleet: the issue's "idle states with long exit latency enabled on some nodes only".

    Args:
        states: node name -> :class:`tuning.node.NodeState` (collected with the ``power`` domain).
        min_latency_us: what counts as a long exit latency (default :data:`DEEP_IDLE_US`).

    Returns:
        One dict per node that differs, in node order: ``{"node": "node03", "deep_enabled":
        [{"state": "state3", "name": "C6", "latency_us": 290, "cpus": "0-111"}], "majority":
        [...], "majority_nodes": 3, "nodes": 4}`` (``deep_enabled`` None: the node's idle states could
        not be read). Empty when every node agrees or fewer than two nodes were read. The majority is
        the most common set of (state name, latency); a tie goes to the set seen first in node order.
    """
    seen = {name: deep_idle_enabled(st.facts, min_latency_us) for name, st in states.items()}
    seen = {n: v for n, v in seen.items() if v is not None or "power" in states[n].current}
    if len(seen) < 2:
        return []

    def sig(v):
        return None if v is None else tuple((d["name"], d["latency_us"]) for d in v)

    counts = Counter(sig(v) for v in seen.values())
    top = max(counts.values())
    major = next(sig(v) for v in seen.values() if counts[sig(v)] == top)
    example = next(v for v in seen.values() if sig(v) == major)
    return [{"node": n, "deep_enabled": v, "majority": example, "majority_nodes": top, "nodes": len(seen)}
            for n, v in seen.items() if sig(v) != major]


def idle_drift_findings(states: dict[str, NodeState]) -> list[Finding]:
    """:func:`fleet_idle_drift` as findings (code ``idle-drift``), one per node that differs from the
    fleet's majority, for plans and reports."""
    out = []
    for d in fleet_idle_drift(states):
        mine = "unreadable" if d["deep_enabled"] is None else (
            ", ".join(f"{x['name']} ({x['latency_us']} us) on {x['cpus']}" for x in d["deep_enabled"]) or "none")
        major = ", ".join(f"{x['name']} ({x['latency_us']} us)" for x in d["majority"] or []) or "none"
        out.append(Finding(d["node"], "power", "idle-drift",
                           f"deep idle states differ from {d['majority_nodes']} of {d['nodes']} nodes: "
                           f"enabled here: {mine}; on the majority: {major}",
                           f"cpuidle stateK/disable and latency of {d['node']}"))
    return out
