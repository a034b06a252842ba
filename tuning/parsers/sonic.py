"""Parsers for SONiC show commands (issue 3): ``show pfc counters`` and ``show queue counters``.

Formats: sonic-net/sonic-utilities (``pfcstat``, ``queuestat`` and their tests
``tests/pfcstat_test.py``, ``tests/queue_counter_test.py``); samples in ``shared/cases/sonic_*``.
Tables are right-aligned with thousands separators (``15,437``); ``N/A`` is None.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from tuning.errors import InputError, ParseError
from tuning.parsers.base import Finding, Parsed, clean_lines, context_findings, parser
from tuning.parsers.text import is_prompt, to_int


def _is_ruler(line: str) -> bool:
    s = line.strip()
    return bool(s) and set(s.replace(" ", "")) == {"-"}

class SonicPfcCounters(Parsed):
    """``show pfc counters``: port -> 8 PFC frame counts (index = priority; N/A = None), per direction."""

    rx: dict[str, list[int | None]]
    tx: dict[str, list[int | None]]
    cached_time: str | None = None


def _sonic_int(tool: str, no: int, line: str, raw: str) -> int | None:
    try:
        return to_int(raw)
    except ValueError as exc:
        raise ParseError(tool, no, "a count (digits, thousands separators, or N/A)", line) from exc


@parser("sonic-pfc-counters")
def parse_sonic_pfc_counters(text: str) -> SonicPfcCounters:
    """Parse SONiC ``show pfc counters`` (``Port Rx`` and ``Port Tx`` tables; ``15,437`` -> 15437)."""
    tables: dict[str, dict[str, list[int | None]]] = {}
    cur, cached = None, None
    for no, line in enumerate(clean_lines(text, expand_tabs=True), 1):
        t = line.split()
        if not t or is_prompt(line) or _is_ruler(line):
            continue
        if line.strip().startswith("Last cached time was"):
            cached = line.strip()[len("Last cached time was"):].strip()
        elif t[:2] in (["Port", "Rx"], ["Port", "Tx"]) and t[2:] == [f"PFC{i}" for i in range(8)]:
            cur = tables.setdefault(t[1].lower(), {})
        elif cur is not None and len(t) == 9:
            cur[t[0]] = [_sonic_int("sonic-pfc-counters", no, line, v) for v in t[1:]]
        else:
            raise ParseError("sonic-pfc-counters", no, "'Port Rx|Tx PFC0..PFC7' header or 'PORT' + 8 counts", line)
    if not tables.get("rx") and not tables.get("tx"):
        raise ParseError("sonic-pfc-counters", 0, "'Port Rx' / 'Port Tx' tables")
    return SonicPfcCounters(tool="sonic-pfc-counters", rx=tables.get("rx", {}), tx=tables.get("tx", {}), cached_time=cached)


class SonicQueue(BaseModel):
    """One queue row. ``kind`` UC (unicast), MC (multicast) or ALL; ``counters``: column -> value (N/A = None)."""

    port: str
    queue: str
    kind: str
    index: int
    counters: dict[str, int | None]

    @property
    def drop_pkts(self) -> int | None:
        """The ``Drop/pkts`` column."""
        return self.counters.get("Drop/pkts")


class SonicQueueCounters(Parsed):
    """``show queue counters [PORT]`` result, rows in printed order."""

    queues: list[SonicQueue]


def lossless_queue_drops(queues: list[SonicQueue], lossless: tuple[int, ...] = (3, 4)) -> list[Finding]:
    """``lossless_drops`` warnings for unicast queues in ``lossless`` (SONiC default 3, 4) that dropped packets."""
    return [Finding(code="lossless_drops", severity="warn", subject=f"{q.port} {q.queue}", message=(
        f"{q.port} {q.queue}: {q.drop_pkts} packets dropped in a lossless queue; PFC or headroom misconfigured"))
        for q in queues if q.kind == "UC" and q.index in lossless and q.drop_pkts]


@parser("sonic-queue-counters")
def parse_sonic_queue_counters(text: str) -> SonicQueueCounters:
    """Parse SONiC ``show queue counters``. Findings: see :func:`lossless_queue_drops` (queues 3, 4)."""
    cols: list[str] | None = None
    queues: list[SonicQueue] = []
    for no, line in enumerate(clean_lines(text, expand_tabs=True), 1):
        t = line.split()
        if not t or is_prompt(line) or _is_ruler(line) or line.strip().startswith("For namespace"):
            continue
        if t[:2] == ["Port", "TxQ"]:
            cols = t[2:]
            continue
        m = re.fullmatch(r"(UC|MC|ALL)(\d+)", t[1]) if len(t) > 1 else None
        if cols is None or not m or len(t) != len(cols) + 2:
            raise ParseError("sonic-queue-counters", no, "'Port TxQ ...' header, then 'PORT UCn|MCn counts'", line)
        counts = {c: _sonic_int("sonic-queue-counters", no, line, v) for c, v in zip(cols, t[2:])}
        queues.append(SonicQueue(port=t[0], queue=t[1], kind=m[1], index=int(m[2]), counters=counts))
    if not queues:
        raise ParseError("sonic-queue-counters", 0, "queue rows under a 'Port TxQ' header")
    result = SonicQueueCounters(tool="sonic-queue-counters", queues=queues)
    result.findings.extend(lossless_queue_drops(queues))
    return result


@context_findings("sonic-queue-counters", keys=("lossless_queues",))
def queue_context(result: Parsed, context: dict[str, str]) -> list[Finding]:
    """``lossless_drops`` for the switch's own lossless queues (``lossless_queues``, e.g. ``3`` or ``3,4``).

    Raises:
        InputError: not a comma-separated list of queue numbers 0-7.
    """
    assert isinstance(result, SonicQueueCounters)
    raw = context.get("lossless_queues", "")
    if not re.fullmatch(r"[0-7](?:,[0-7])*", raw.replace(" ", "")):
        raise InputError("--context", "lossless_queues", f"{raw!r}: expected queue numbers 0-7, e.g. 3,4")
    queues = tuple(int(q) for q in raw.replace(" ", "").split(","))
    kept = [f for f in result.findings if f.code != "lossless_drops"]
    return kept + lossless_queue_drops(result.queues, queues)
