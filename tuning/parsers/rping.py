"""Parser for ``rping`` (librdmacm examples, ``librdmacm/examples/rping.c``).

With ``-v`` each ping prints ``ping data: rdma-ping-N: <payload>`` (the server
prints ``server ping data: ...``); the payload of ping N is a run of consecutive
characters from ``A`` (65) to ``z`` (122), wrapping, that starts one character
later than ping N-1's. The end of a run prints ``client DISCONNECT EVENT...``
(or ``server ...``). Errors are printed as ``cma event RDMA_CM_EVENT_..., error N``,
``rdma_resolve_addr: ...``, ``... completion error ...`` (sample:
shared/cases/rping__client_verbose_ok.txt).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from tuning.errors import ParseError
from tuning.parsers.base import Finding, Parsed, ToolFailure, clean_lines, parser, require_text
from tuning.parsers.text import is_noise

__all__ = ["PingLine", "RpingResult", "parse_rping"]

_PING = re.compile(r"^(?:(server|client) )?ping data: rdma-ping-(\d+): (.*)$")
_DISCONNECT = re.compile(r"^(server|client) DISCONNECT EVENT")
_COMMAND = re.compile(r"\brping\b(?=.*\s-[cs]\b).*")
_COUNT_FLAG = re.compile(r"\s-C\s*(\d+)")
_STATUS = re.compile(r"(?:status|error)\D*?(-?\d+)", re.I)
_FIRST, _LAST = 65, 122  # 'A'..'z', rping's payload alphabet

# (kind, pattern, likely cause); first match wins (rping.c and librdmacm messages).
_FAILURES = tuple((k, re.compile(p, re.I), c) for k, p, c in (
    ("no_rdma_device", r"rdma_create_event_channel|no such device|rdma_bind_addr.*(?:cannot assign|no such)",
     "no RDMA device bound to that address: rdma_rxe/mlx5_ib not loaded or the IP is not on an RDMA netdev"),
    ("connect_failed", r"RDMA_CM_EVENT_(?:ADDR_ERROR|ROUTE_ERROR|UNREACHABLE|REJECTED|CONNECT_ERROR)|"
                       r"rdma_resolve_(?:addr|route)|connect error|wait for (?:CONNECTED|ADDR|ROUTE)",
     "RDMA-CM connect failed: server not running (rping -s), address not routable, or port rejected"),
    ("completion_error", r"completion (?:error|failed)|cq completion|poll error|bad completion",
     "a work completion failed: lossy fabric, PFC not holding, or the peer went away"),
))


class PingLine(BaseModel):
    """One ``ping data`` line.

    Attributes:
        index: N of ``rdma-ping-N``.
        payload: the characters after ``rdma-ping-N: `` as printed.
    """

    index: int
    payload: str


class RpingResult(Parsed):
    """An rping run.

    Attributes:
        role: ``client`` or ``server`` (from the data / DISCONNECT lines).
        requested_count: ``-C N`` when the command line was echoed, else None.
        pings: the ``ping data`` lines in order.
        disconnect_seen: the ``DISCONNECT EVENT`` line was printed (clean end).
    """

    role: str = "client"
    requested_count: int | None = None
    pings: list[PingLine] = Field(default_factory=list)
    disconnect_seen: bool = False

    @property
    def ping_count(self) -> int:
        """Number of ``ping data`` lines."""
        return len(self.pings)

    def ok(self) -> bool:
        """True when the run ended cleanly, every payload rotated and ``-C`` pings (if known) came back."""
        short = self.requested_count is not None and self.ping_count != self.requested_count
        bad = any(f.severity == "error" for f in self.findings)
        return self.failure is None and self.disconnect_seen and not short and not bad


def _payload_ok(index: int, payload: str) -> bool:
    """Ping N's payload starts at 'A'+N (mod 58) and each next character is one higher, wrapping z->A."""
    span = _LAST - _FIRST + 1
    start = _FIRST + index % span
    return all(ord(ch) == _FIRST + (start - _FIRST + i) % span for i, ch in enumerate(payload))


def _classify(lines: list[str]) -> ToolFailure | None:
    for kind, pattern, cause in _FAILURES:
        hits = [x for x in lines if pattern.search(x)]
        if hits:
            status = next((m.group(1) for x in hits if (m := _STATUS.search(x))), None)
            return ToolFailure(kind=kind, message=" / ".join(hits), likely_cause=cause, status=status)
    return None


def _findings(res: RpingResult) -> list[Finding]:
    out = []
    for i, ping in enumerate(res.pings):
        if ping.index != i:
            out.append(Finding(code="rping_sequence_gap", severity="error", subject=f"rdma-ping-{ping.index}",
                               message=f"ping {i} expected, got rdma-ping-{ping.index}: pings were lost"))
            break
    for ping in res.pings:
        if not _payload_ok(ping.index, ping.payload):
            out.append(Finding(code="rping_payload_corrupt", severity="error", subject=f"rdma-ping-{ping.index}",
                               message=f"payload of rdma-ping-{ping.index} does not rotate as rping writes it: "
                                       "data corrupted on the path"))
    if res.requested_count is not None and res.ping_count < res.requested_count:
        out.append(Finding(code="rping_count_short", severity="error",
                           message=f"{res.ping_count} of {res.requested_count} pings (-C) came back"))
    return out


def parse_rping(text: str) -> RpingResult:
    """Parse an rping (``-v``) output.

    Args:
        text: rping's stdout+stderr, optionally with the echoed command line first.

    Returns:
        An :class:`RpingResult`; ``failure`` is set for a classified error (then no pings are kept).

    Raises:
        ParseError: empty/binary input, or no rping line at all (another tool's output).
    """
    require_text("rping", text)
    lines = clean_lines(text, expand_tabs=True)
    norm = [" ".join(x.split()) for x in lines]
    res = RpingResult(tool="rping")
    known = False
    for line in norm:
        if m := _PING.match(line):
            res.role = m.group(1) or "client"
            res.pings.append(PingLine(index=int(m.group(2)), payload=m.group(3)))
        elif m := _DISCONNECT.match(line):
            res.role, res.disconnect_seen = m.group(1), True
        elif (m := _COMMAND.search(line)) and (c := _COUNT_FLAG.search(" " + m.group(0))):
            res.requested_count = int(c.group(1))
        else:
            continue
        known = True
    res.failure = _classify([x for x in norm if x and not is_noise(x)])
    if res.failure is not None:
        res.pings = []
        return res
    if not known:
        no, line = next(((i, x) for i, x in enumerate(lines, 1) if x.strip()), (0, ""))
        raise ParseError("rping", no, "rping output ('ping data: rdma-ping-N: ...' or 'DISCONNECT EVENT')", line)
    res.findings = _findings(res)
    return res


parser("rping")(parse_rping)
