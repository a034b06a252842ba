"""Shared pieces of every tool-output parser: the registry, the cleaning rules,
typed quantities and findings.

Rules every parser keeps (issue 3):
- units come from the header, never assumed; values are normalised to Gb/s,
  microseconds and bytes, and the raw value and unit are kept as printed;
- noise lines, MPI prefixes (``[1,0]<stdout>:``), ANSI escapes, tabs, CRLF and
  trailing spaces are tolerated (see :func:`clean_lines`);
- a placeholder (``N/A``, a duration-mode ``0.00`` peak) is ``None``, never 0;
- an output it cannot read raises :class:`tuning.errors.ParseError` naming the line.
"""

from __future__ import annotations

import re
from typing import Callable, Literal, TypeVar

from pydantic import BaseModel, Field

from tuning.errors import ParseError

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")
_MPI_PREFIX = re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:\s?")


def clean_lines(text: str, *, expand_tabs: bool = False) -> list[str]:
    """Split a tool output into lines with the noise every tool shares removed.

    Removes ANSI escapes, CR of CRLF, MPI/OpenMPI ``[r,c]<stdout>:`` prefixes and
    trailing spaces. Tabs are kept unless ``expand_tabs`` (some formats, e.g.
    ``show_gids`` and ``nvidia-smi topo -m``, are tab-separated).

    Returns:
        The lines, without line ends. Blank lines are kept (some formats use them).
    """
    text = _ANSI.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    out = []
    for line in text.split("\n"):
        line = _MPI_PREFIX.sub("", line)
        if expand_tabs:
            line = line.expandtabs(8)
        out.append(line.rstrip())
    while out and out[-1] == "":
        out.pop()
    return out


def require_text(tool: str, text: str) -> str:
    """Refuse empty and binary inputs with a ParseError before any parsing.

    Raises:
        ParseError: the text is empty, or holds NUL / undecodable bytes.
    """
    if "\x00" in text or "\ufffd" in text:
        raise ParseError(tool, 0, f"{tool} text output, got binary data")
    if not text.strip():
        raise ParseError(tool, 0, f"{tool} output, got an empty input")
    return text


class Quantity(BaseModel):
    """A number as the tool printed it and normalised.

    Attributes:
        value: in the normalised unit named by ``unit_norm`` (Gb/s, us, bytes, KB...).
        raw: the text as printed (``"45428.46"``).
        unit: the unit as printed (``"MiB/sec"``).
        unit_norm: the normalised unit (``"Gb/s"``).
    """

    value: float
    raw: str
    unit: str
    unit_norm: str


# perftest: MB/sec and MiB/sec are both 2^20 bytes/s; Gb/sec is 10^9 bit/s (shared/cases/INDEX.md).
_BW_TO_GBPS = {
    "MB/sec": 2**20 * 8 / 1e9,
    "MiB/sec": 2**20 * 8 / 1e9,
    "Gb/sec": 1.0,
    "Gbit/sec": 1.0,
}


def bandwidth(raw: str, unit: str) -> Quantity:
    """Normalise a perftest bandwidth to Gb/s (10^9 bit/s).

    Raises:
        ValueError: unknown unit (the caller turns it into a ParseError with the line).
    """
    if unit not in _BW_TO_GBPS:
        raise ValueError(f"unknown bandwidth unit {unit!r}, expected one of {sorted(_BW_TO_GBPS)}")
    return Quantity(value=round(float(raw) * _BW_TO_GBPS[unit], 4), raw=raw, unit=unit, unit_norm="Gb/s")


Severity = Literal["info", "warn", "error"]


class Finding(BaseModel):
    """Something one output is enough to say (a pending mlxconfig reset, Mtu 1024 on RoCE).

    Attributes:
        code: stable machine name, e.g. ``roce_mtu_low``.
        severity: info, warn or error.
        message: one line for people.
        subject: what it is about (a device, a parameter, an IRQ), if any.
    """

    code: str
    severity: Severity
    message: str
    subject: str | None = None


class ToolFailure(BaseModel):
    """A tool's own error output, classified.

    Attributes:
        kind: ``connect_failed``, ``qp_rtr_failed``, ``qp_rts_failed``, ``gid_type_mismatch``,
            ``completion_error``, ``no_rdma_device`` or ``unknown``.
        message: the tool's error line(s) as printed.
        likely_cause: what usually causes it, for the operator.
        status: completion status where the tool printed one (e.g. ``12``).
    """

    kind: str
    message: str
    likely_cause: str
    status: str | None = None


class Parsed(BaseModel):
    """Base of every parser's result: the tool name, findings and a failure if the tool failed."""

    tool: str
    findings: list[Finding] = Field(default_factory=list)
    failure: ToolFailure | None = None


P = TypeVar("P", bound=Parsed)
ParserFn = Callable[[str], Parsed]

#: tool name (as given to ``fabtune parse``) -> parser function
REGISTRY: dict[str, ParserFn] = {}


def parser(*names: str) -> Callable[[ParserFn], ParserFn]:
    """Register a parser function under one or more tool names."""

    def deco(fn: ParserFn) -> ParserFn:
        for name in names:
            REGISTRY[name] = fn
        return fn

    return deco


ContextFn = Callable[[Parsed, dict[str, str]], list[Finding]]

#: tool name -> (the context keys it takes, function returning the findings with that context applied).
#: Some findings need a fact the output does not hold: the NIC's PCI address and NUMA-local CPUs for
#: ``interrupts``, the traffic's IPv4 address for ``show-gids``, the lossless queues of a SONiC switch.
CONTEXT: dict[str, tuple[tuple[str, ...], ContextFn]] = {}


def context_findings(*names: str, keys: tuple[str, ...]) -> Callable[[ContextFn], ContextFn]:
    """Register ``fn(result, context) -> findings`` for tools whose findings need outside facts.

    ``fn`` gets only keys among ``keys`` and returns the result's complete findings list (it may
    replace a context-free finding by a sharper one). It raises InputError for a bad or missing value.
    """

    def deco(fn: ContextFn) -> ContextFn:
        for name in names:
            CONTEXT[name] = (keys, fn)
        return fn

    return deco
