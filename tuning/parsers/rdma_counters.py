"""RDMA port counters (issue 3): sysfs ``hw_counters`` (``grep "" .../hw_counters/*``, ``path:value``)
and iproute2 ``rdma statistic show``, with the loss and congestion findings.

Formats: Linux ``Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst`` (names),
iproute2 ``rdma/stat.c`` (``link DEV/PORT name value ...``); samples in ``shared/cases/``.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from tuning.errors import ParseError
from tuning.parsers.base import Finding, Parsed, clean_lines, parser
from tuning.parsers.text import is_prompt

# ---------------------------------------------------------------- RDMA port counters

#: np_cnp_sent above this (cumulative) reads as heavy congestion on the notification point.
HEAVY_CNP = 1_000_000


class PortCounters(BaseModel):
    """RDMA counters of one device port (``mlx5_0``/1): name -> value."""

    device: str | None
    port: int | None
    counters: dict[str, int]


class RdmaCounters(Parsed):
    """RDMA port counters from sysfs ``hw_counters`` or ``rdma statistic show``, per port."""

    ports: list[PortCounters]

    def get(self, name: str, device: str | None = None) -> int | None:
        """A counter of ``device`` (or of the only / first port)."""
        port = next((p for p in self.ports if device in (None, p.device)), None)
        return port.counters.get(name) if port else None


def _rdma_findings(result: RdmaCounters) -> RdmaCounters:
    for p in result.ports:
        c, subject = p.counters, f"{p.device}/{p.port}"
        loss = {k: c[k] for k in ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err") if c.get(k)}
        if loss:
            result.findings.append(Finding(code="lossless_drops", severity="warn", subject=subject, message=(
                f"{subject}: " + ", ".join(f"{k}={v}" for k, v in loss.items()) + ": packets lost, lossless is not holding")))
        if c.get("np_cnp_sent", 0) >= HEAVY_CNP:
            result.findings.append(Finding(code="heavy_congestion", severity="info", subject=subject, message=(
                f"{subject}: np_cnp_sent={c['np_cnp_sent']}, np_ecn_marked_roce_packets="
                f"{c.get('np_ecn_marked_roce_packets')}: heavy ECN congestion")))
    return result


_HW_PATH = re.compile(r"^(?:/sys)?/class/infiniband/(?P<dev>[^/]+)/ports/(?P<port>\d+)/hw_counters/(?P<name>\w+):(?P<v>\d+)$")


@parser("hw-counters")
def parse_hw_counters(text: str) -> RdmaCounters:
    """Parse ``grep "" /sys/class/infiniband/DEV/ports/P/hw_counters/*`` (``path:value`` lines).

    Findings: ``lossless_drops`` (out_of_sequence, packet_seq_err, local_ack_timeout_err > 0) and
    ``heavy_congestion`` (np_cnp_sent >= :data:`HEAVY_CNP`).
    """
    ports: dict[tuple[str, int], dict[str, int]] = {}
    for no, line in enumerate(clean_lines(text), 1):
        s = line.strip()
        if not s or is_prompt(line):
            continue
        m = _HW_PATH.match(s)
        if not m:
            raise ParseError("hw-counters", no, "'/sys/class/infiniband/DEV/ports/P/hw_counters/NAME:value'", line)
        key = (m["dev"], int(m["port"]))
        ports.setdefault(key, {})[m["name"]] = int(m["v"])
    if not ports:
        raise ParseError("hw-counters", 0, "hw_counters 'path:value' lines")
    return _rdma_findings(RdmaCounters(tool="hw-counters", ports=[
        PortCounters(device=d, port=p, counters=c) for (d, p), c in ports.items()]))


@parser("rdma-statistic")
def parse_rdma_statistic(text: str) -> RdmaCounters:
    """Parse ``rdma statistic show [link DEV/P]``: ``link DEV/P name value name value ...``.

    Pairs may wrap onto following lines (``-p`` pretty output, mail-wrapped copies). Findings as
    :func:`parse_hw_counters`.
    """
    ports: list[PortCounters] = []
    pending: str | None = None
    for no, line in enumerate(clean_lines(text), 1):
        if is_prompt(line):
            continue
        tokens = line.split()
        if tokens[:1] == ["link"]:
            m = re.fullmatch(r"([^/\s]+)/(\d+)", tokens[1] if len(tokens) > 1 else "")
            if not m:
                raise ParseError("rdma-statistic", no, "'link DEV/PORT'", line)
            ports.append(PortCounters(device=m[1], port=int(m[2]), counters={}))
            tokens = tokens[2:]
        elif tokens and not ports:
            raise ParseError("rdma-statistic", no, "'link DEV/PORT name value ...'", line)
        for tok in tokens:
            if pending is None and re.fullmatch(r"[a-z]\w*", tok):
                pending = tok
            elif pending is not None and tok.isdigit():
                ports[-1].counters[pending], pending = int(tok), None
            else:
                raise ParseError("rdma-statistic", no, "counter name and integer value pairs", line)
    if not ports or pending is not None or not any(p.counters for p in ports):
        raise ParseError("rdma-statistic", 0, "'link DEV/PORT' records with complete name/value pairs")
    return _rdma_findings(RdmaCounters(tool="rdma-statistic", ports=ports))
