"""Parser for ``cpupower idle-info`` (linux ``tools/power/cpupower/utils/cpuidle-info.c``).

Layout (every line is the tool's ``printf``): ``CPUidle driver: intel_idle``, ``CPUidle governor:
menu``, then per CPU ``analyzing CPU N:`` (older builds: ``Analyzing CPU N:``, printed after the
blank line), a blank line, ``Number of idle states: 4``, ``Available idle states: POLL C1 C1E C6``
and, unless ``-s``, per state ``NAME:`` (``NAME (DISABLED) :`` for a disabled one, cpupower >= 3.17),
``Flags/Description: ...``, ``Latency: <us>``, ``Residency: <us>`` (cpupower >= 6.12 only),
``Usage: <count>``, ``Duration: <us>``. An offline CPU prints `` *is offline``; a CPU without idle
states ``CPU N: No idle states``. Lines may be indented (pasted transcripts) and the values of
POLL are 0. Samples: ``tests/parsers/cases/cpupower__*.txt``.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from tuning.errors import ParseError
from tuning.parsers.base import Finding, Parsed, clean_lines, parser, require_text

#: an enabled idle state with an exit latency above this (us) is deep (finding ``deep_idle_enabled``;
#: the fleet drift of :func:`tuning.node.power.fleet_idle_drift`): a wake-up from it stalls a polling
#: RDMA / NCCL thread; C1 and C1E (1..10 us) are not, C6 (85..290 us) is
DEEP_IDLE_US = 10


class IdleStateInfo(BaseModel):
    """One idle state of one CPU.

    Attributes:
        index: ``state<K>`` index (order of printing, POLL is 0).  name: ``C6``.
        disabled: printed with ``(DISABLED)``.  description: ``MWAIT 0x20``.
        latency_us: exit latency, microseconds.  residency_us: target residency (us), None when the
            build does not print it.  usage: times entered.  duration_us: time spent, microseconds.
    """

    index: int
    name: str
    disabled: bool = False
    description: str | None = None
    latency_us: int | None = None
    residency_us: int | None = None
    usage: int | None = None
    duration_us: int | None = None


class CpuIdleInfo(BaseModel):
    """One ``analyzing CPU N:`` block: ``offline`` when the tool says so; ``available`` the names of
    the ``Available idle states:`` line; ``states`` the detailed states (empty with ``-s``)."""

    cpu: int
    offline: bool = False
    count: int | None = None
    available: list[str] = Field(default_factory=list)
    states: list[IdleStateInfo] = Field(default_factory=list)


class IdleInfo(Parsed):
    """``cpupower idle-info`` result: the cpuidle ``driver`` and ``governor`` and one entry per CPU."""

    driver: str | None = None
    governor: str | None = None
    cpus: list[CpuIdleInfo] = Field(default_factory=list)

    def enabled_deep(self, min_latency_us: int = DEEP_IDLE_US) -> list[IdleStateInfo]:
        """States of the first CPU that are enabled and have an exit latency above ``min_latency_us``."""
        cpu = next((c for c in self.cpus if c.states), None)
        return [s for s in cpu.states if not s.disabled and (s.latency_us or 0) > min_latency_us] if cpu else []


_CPU = re.compile(r"^[Aa]nalyzing CPU (\d+):$")
_STATE = re.compile(r"^(\S+?)( \(DISABLED\) )?:$")
_FIELDS = {"Flags/Description": "description", "Flags/Desc": "description", "Latency": "latency_us",
           "Residency": "residency_us", "Usage": "usage", "Duration": "duration_us"}


def _num(tool: str, no: int, line: str, value: str) -> int:
    if not value.isdigit():
        raise ParseError(tool, no, "a decimal number", line)
    return int(value)


@parser("cpupower-idle-info")
def parse_idle_info(text: str) -> IdleInfo:
    """Parse ``cpupower [-c CPUS] idle-info [-s]`` output (layout in the module doc).

    Raises:
        ParseError: no ``analyzing CPU`` block, a state field before any state, a number that is not
            one, or a line the tool does not print (named with its number).
    """
    tool = "cpupower-idle-info"
    out = IdleInfo(tool=tool)
    cpu: CpuIdleInfo | None = None
    state: IdleStateInfo | None = None
    for no, raw in enumerate(clean_lines(require_text(tool, text)), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("CPUidle driver:"):
            out.driver = line.split(":", 1)[1].strip()
        elif line.startswith("CPUidle governor:"):
            out.governor = line.split(":", 1)[1].strip()
        elif m := _CPU.match(line):
            cpu, state = CpuIdleInfo(cpu=int(m[1])), None
            out.cpus.append(cpu)
        elif cpu is None:
            raise ParseError(tool, no, "'CPUidle driver:' or 'analyzing CPU N:'", raw)
        else:
            state = _cpu_line(tool, no, raw, cpu, state)
    if not out.cpus:
        raise ParseError(tool, 0, "at least one 'analyzing CPU N:' block")
    for st in out.enabled_deep():
        out.findings.append(Finding(code="deep_idle_enabled", severity="warn", subject=st.name,
                                    message=f"idle state {st.name} (exit latency {st.latency_us} us) is enabled: "
                                            f"a CPU waking from it stalls RDMA/NCCL polling threads"))
    return out


def _cpu_line(tool: str, no: int, raw: str, cpu: CpuIdleInfo, state: IdleStateInfo | None) -> IdleStateInfo | None:
    """Read line ``no`` (``raw``) of ``cpu``'s block into it; returns the state its next fields belong to.

    Raises:
        ParseError: a state field before any state, a number that is not one, or an unknown line.
    """
    line = raw.strip()
    key, sep, value = line.partition(": ")
    if line == "*is offline":
        cpu.offline = True
    elif re.fullmatch(r"CPU \d+: No idle states", line):
        cpu.count = 0
    elif key == "Number of idle states" and sep:
        cpu.count = _num(tool, no, raw, value)
    elif line.startswith("Available idle states:"):
        cpu.available = line.split(":", 1)[1].split()
    elif sep and key in _FIELDS or line.endswith(":") and line[:-1] in _FIELDS:
        key, value = (key, value) if sep else (line[:-1], "")
        if state is None:
            raise ParseError(tool, no, "a state name line ('C6:') before its fields", raw)
        field = _FIELDS[key]
        setattr(state, field, value.strip() if field == "description" else _num(tool, no, raw, value.strip()))
    elif m := _STATE.match(line):
        state = IdleStateInfo(index=len(cpu.states), name=m[1], disabled=bool(m[2]))
        cpu.states.append(state)
    else:
        raise ParseError(tool, no, "a cpupower idle-info line", raw)
    return state
