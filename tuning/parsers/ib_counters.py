"""Parsers for InfiniBand port error counters: ``perfquery`` and ``ibqueryerrors`` (infiniband-diags as
Debian ships it: rdma-core 44); samples captured from the real tools over the IB lab's fabric
(OpenSM 3.3.23 on ibsim 0.10, counters set through ibsim's console) in ``tests/ib/cases/``.

``perfquery [-x] <lid|-G guid> <port>``: a block per query, a header
``# Port counters: Lid 2 port 1 (CapMask: 0x1200)`` (``# Port extended counters: ... (CapMask: 0x1200
CapMask2: 0x0000000)`` with ``-x``) then ``Name:.....value`` lines, the dots padding the name to one
column; values are decimal, or ``0x`` hex for the select fields.

``ibqueryerrors``: for each node with a counter above its threshold, ``Errors for "<description>"``
(a CA) or ``Errors for 0x<guid> "<description>"`` (a switch), then per port
``   GUID 0x<guid> port <n|ALL>: [Name == value] [Name == value]`` (the GUID printed without leading
zeros), and a summary (``## Summary: 34 nodes checked, 2 bad nodes found`` / ``##  112 ports checked,
2 ports have errors beyond threshold`` / ``## Thresholds:`` / ``## Suppressed:``). It exits 1 when it
found errors.

The IBA PortCounters error fields are 4 to 16 bits wide and stop at their maximum: a counter at it
(``SymbolErrorCounter`` 65535) is *saturated*, its real count unknown (:attr:`PerfCounters.saturated`).
A value printed as ``-1`` or ``0xfffffffffffffffe`` (:data:`UNKNOWN_VALUES`, issue 22: a counter that
was not read, never a count) is *unknown*: parsed as None, never as 0 or as 2**64-2
(:attr:`PerfCounters.unknown`); a burn-in takes no delta from it.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from tuning.errors import ParseError
from tuning.parsers.base import Finding, Parsed, clean_lines, parser, require_text

__all__ = ["ERROR_COUNTERS", "UNKNOWN_VALUES", "IbErrorPort", "IbQueryErrors", "PerfCounters", "PerfQuery",
           "parse_ibqueryerrors", "parse_perfquery"]

#: the PortCounters error fields and their width in bits (IBA 1.3 Table 247)
ERROR_COUNTERS = {"SymbolErrorCounter": 16, "LinkErrorRecoveryCounter": 8, "LinkDownedCounter": 8,
                  "PortRcvErrors": 16, "PortRcvRemotePhysicalErrors": 16, "PortRcvSwitchRelayErrors": 16,
                  "PortXmitDiscards": 16, "PortXmitConstraintErrors": 8, "PortRcvConstraintErrors": 8,
                  "LocalLinkIntegrityErrors": 4, "ExcessiveBufferOverrunErrors": 4, "VL15Dropped": 16}
_PQ_HEADER = re.compile(r"^# Port (extended )?counters: Lid (\d+) port (\d+) \(CapMask: (0x[0-9a-fA-F]+)"
                        r"(?: CapMask2: (0x[0-9a-fA-F]+))?\)$")
_PQ_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9]*):\.*(0x[0-9a-fA-F]+|\d+|-1)$")
#: printed values that mean "not read" (module docstring): parsed as None
UNKNOWN_VALUES = ("-1", "0xfffffffffffffffe")
_QE_NODE = re.compile(r'^Errors for (?:(0x[0-9a-f]+) )?"(.*)"$')
_QE_PORT = re.compile(r"^\s+GUID (0x[0-9a-f]+) port (\d+|ALL):((?: \[[A-Za-z0-9]+ == \d+\])+)$")
_QE_COUNTER = re.compile(r"\[([A-Za-z0-9]+) == (\d+)\]")
_QE_SUMMARY = re.compile(r"^## Summary: (\d+) nodes checked, (\d+) bad nodes found$")
_QE_PORTS = re.compile(r"^##\s+(\d+) ports checked, (\d+) ports have errors beyond threshold$")


class PerfCounters(BaseModel):
    """One perfquery block: the port, whether extended (``-x``), the capability mask and every field."""

    lid: int
    port: int
    extended: bool = False
    cap_mask: str
    cap_mask2: str | None = None
    counters: dict[str, int | None] = Field(default_factory=dict)

    @property
    def errors(self) -> dict[str, int]:
        """The error fields above zero (an unknown one is not among them: see :attr:`unknown`)."""
        return {k: v for k, v in self.counters.items() if k in ERROR_COUNTERS and v}

    @property
    def unknown(self) -> list[str]:
        """Fields printed as one of :data:`UNKNOWN_VALUES`: their count is not known."""
        return [k for k, v in self.counters.items() if v is None]

    @property
    def saturated(self) -> list[str]:
        """Error fields at their maximum (the count went past what the field holds)."""
        return [k for k, bits in ERROR_COUNTERS.items() if self.counters.get(k) == 2**bits - 1]


class PerfQuery(Parsed):
    """A perfquery run: its blocks in order."""

    blocks: list[PerfCounters] = Field(default_factory=list)


def parse_perfquery(text: str) -> PerfQuery:
    """Parse ``perfquery`` / ``perfquery -x`` output.

    Raises:
        ParseError: empty input, a field before a header, or a line of neither kind.
    """
    require_text("perfquery", text)
    res = PerfQuery(tool="perfquery")
    for no, line in enumerate(clean_lines(text), 1):
        if not line.strip():
            continue
        if h := _PQ_HEADER.match(line):
            res.blocks.append(PerfCounters(lid=int(h.group(2)), port=int(h.group(3)), extended=bool(h.group(1)),
                                           cap_mask=h.group(4), cap_mask2=h.group(5)))
        elif (f := _PQ_FIELD.match(line)) and res.blocks:
            raw = f.group(2).lower()
            res.blocks[-1].counters[f.group(1)] = None if raw in UNKNOWN_VALUES else int(raw, 0)
        else:
            raise ParseError("perfquery", no, "'# Port counters: Lid L port P (CapMask: 0x...)' or 'Name:....value'", line)
    if not res.blocks:
        raise ParseError("perfquery", 0, "a '# Port counters:' block")
    for b in res.blocks:
        for name in b.saturated:
            res.findings.append(Finding(code="ib_counter_saturated", severity="warn", subject=f"lid {b.lid} port {b.port}",
                                        message=f"{name} is at its maximum ({b.counters[name]}): the real count is "
                                                "unknown; clear the counters (perfquery -R) and read again"))
    return res


class IbErrorPort(BaseModel):
    """One ``GUID ... port N: [...]`` line of ibqueryerrors; ``port`` None for ``port ALL`` (a switch's sum)."""

    node: str
    node_guid: str | None = None
    guid: str
    port: int | None
    counters: dict[str, int] = Field(default_factory=dict)


class IbQueryErrors(Parsed):
    """An ibqueryerrors run: the ports over threshold and the summary counts."""

    ports: list[IbErrorPort] = Field(default_factory=list)
    nodes_checked: int | None = None
    bad_nodes: int | None = None
    ports_checked: int | None = None
    bad_ports: int | None = None
    thresholds: str = ""
    suppressed: list[str] = Field(default_factory=list)

    def of(self, node: str, port: int | None) -> dict[str, int]:
        """The counters printed for ``node`` (description) and ``port``; {} when none."""
        return next((p.counters for p in self.ports if p.node == node and p.port == port), {})


def _summary(res: IbQueryErrors, line: str) -> bool:
    if m := _QE_SUMMARY.match(line):
        res.nodes_checked, res.bad_nodes = int(m.group(1)), int(m.group(2))
    elif m := _QE_PORTS.match(line):
        res.ports_checked, res.bad_ports = int(m.group(1)), int(m.group(2))
    elif line.startswith("## Thresholds:"):
        res.thresholds = line.split(":", 1)[1].strip()
    elif line.startswith("## Suppressed:"):
        res.suppressed = [x for x in re.split(r"[\s,]+", line.split(":", 1)[1]) if x]
    else:
        return False
    return True


def parse_ibqueryerrors(text: str) -> IbQueryErrors:
    """Parse ``ibqueryerrors`` output (its stdout; the exit code 1 only says errors were found).

    Raises:
        ParseError: empty input, a port line before its ``Errors for`` line, no summary, or an unknown line.
    """
    require_text("ibqueryerrors", text)
    res = IbQueryErrors(tool="ibqueryerrors")
    node: tuple[str, str | None] | None = None
    for no, line in enumerate(clean_lines(text), 1):
        if not line.strip() or _summary(res, line):
            continue
        if m := _QE_NODE.match(line):
            node = (m.group(2), m.group(1))
        elif (m := _QE_PORT.match(line)) and node:
            counters = {k: int(v) for k, v in _QE_COUNTER.findall(m.group(3))}
            port = None if m.group(2) == "ALL" else int(m.group(2))
            res.ports.append(IbErrorPort(node=node[0], node_guid=node[1], guid=m.group(1), port=port, counters=counters))
        else:
            raise ParseError("ibqueryerrors", no, "'Errors for \"NODE\"', '   GUID 0x... port N: [Name == V]' or '## ...'",
                             line)
    if res.nodes_checked is None:
        raise ParseError("ibqueryerrors", 0, "the '## Summary: N nodes checked, M bad nodes found' line")
    for p in res.ports:
        if p.port is not None:
            shown = ", ".join(f"{k}={v}" for k, v in p.counters.items())
            res.findings.append(Finding(code="ib_port_errors", severity="error", subject=f"{p.node} port {p.port}",
                                        message=f"{p.node} port {p.port} has errors beyond threshold: {shown}"))
    return res


parser("perfquery")(parse_perfquery)
parser("ibqueryerrors")(parse_ibqueryerrors)
