"""Parsers for the NIC tools ``mlnx_qos`` and ``ethtool -S`` (issue 3). The firmware tools (``mlxconfig``,
``mlxfwmanager``) live in :mod:`.mlxtools`, the RDMA port counters in :mod:`.rdma_counters`.

Formats: Mellanox/mlnx-tools ``python/mlnx_qos`` (``pretty_print``), Linux ``Documentation/networking/
device_drivers/ethernet/mellanox/mlx5/counters.rst`` (ethtool counter names); samples in ``shared/cases/``.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from tuning.errors import ParseError
from tuning.parsers.base import Finding, Parsed, ToolFailure, clean_lines, parser
from tuning.parsers.text import is_prompt

# ---------------------------------------------------------------- mlnx_qos


class MlnxQosTc(BaseModel):
    """One ``tc: N ratelimit: R, tsa: T`` block. ``ratelimit_gbps`` None = unlimited; ``bw_percent`` for ETS."""

    tc: int
    priorities: list[int] = []
    ratelimit_gbps: float | None = None
    tsa: str
    bw_percent: int | None = None


class MlnxQos(Parsed):
    """The NIC QoS state ``mlnx_qos -i IF`` prints (also after a set command).

    Attributes:
        dcbx_mode: ``os`` (OS controlled) or ``fw`` (Firmware controlled).
        trust: ``pcp``, ``dscp`` (or ``none`` when unsupported).
        dscp2prio: DSCP -> priority, when trust is dscp.
        pfc_enabled: 8 booleans, index = priority.
        prio2buffer: receive buffer per priority (newer format only).
        buffer_sizes: receive buffer sizes in bytes (8), with ``total_size`` / ``max_buffer_size`` bytes.
        tcs: traffic classes in printed (first-seen) order.
        warnings: banners such as the lldpad warning. ``errors``: mlnx_qos error lines (also in ``failure``).
    """

    dcbx_mode: str | None = None
    trust: str | None = None
    dscp2prio: dict[int, int] = {}
    default_priority: int | None = None
    buffer_sizes: list[int] | None = None
    total_size: int | None = None
    max_buffer_size: int | None = None
    cable_len: int | None = None
    pfc_enabled: list[bool] = []
    prio2buffer: list[int] | None = None
    tcs: list[MlnxQosTc] = []
    warnings: list[str] = []
    errors: list[str] = []

    @property
    def pfc_priorities(self) -> list[int]:
        """Priorities with PFC on, e.g. ``[3]``."""
        return [p for p, on in enumerate(self.pfc_enabled) if on]

    def prio2tc(self) -> dict[int, int]:
        """Priority -> traffic class."""
        return {p: tc.tc for tc in self.tcs for p in tc.priorities}


_QOS_ERRORS = re.compile(r"^(pfc list must have 8 items|Too many items for \w+|Bad value for .*|Invalid .* command\..*"
                         r"|trust and dscp2prio .*|.* command failed|Interface name is required|Bad arguments)$")
_TC = re.compile(r"^tc:\s*(\d+)\s+ratelimit:\s*(unlimited|[\d.]+\s*Gbps),\s*tsa:\s*(\w+)(?:,\s*bw:\s*(\d+)%)?$")


def _qos_row(q: dict, key: str, no: int, s: str) -> None:
    vals = s.split()[1:]
    if len(vals) != 8 or not all(v.isdigit() for v in vals):
        raise ParseError("mlnx_qos", no, f"'{key}' and 8 numbers", s)
    if key == "enabled":
        q["pfc_enabled"] = [v == "1" for v in vals]
    elif key == "buffer":
        q["prio2buffer"] = [int(v) for v in vals]


def _qos_buffers(q: dict, no: int, s: str) -> None:
    parts = [p for p in s.partition(":")[2].replace(" ", "").split(",") if p]
    sizes = [p for p in parts if p.isdigit()]
    extra = dict(p.split("=", 1) for p in parts if "=" in p)
    if len(sizes) != 8 or len(sizes) + len(extra) != len(parts) or not all(v.isdigit() for v in extra.values()):
        raise ParseError("mlnx_qos", no, "8 buffer sizes then total_size=N or max_buffer_size=N", s)
    q["buffer_sizes"] = [int(v) for v in sizes]
    for k in ("total_size", "max_buffer_size"):
        if k in extra:
            q[k] = int(extra[k])


def _qos_line(q: dict, no: int, s: str) -> None:  # noqa: C901  (one branch per printed line kind)
    key, sep, val = s.partition(":")
    if s.startswith("DCBX mode:"):
        q["dcbx_mode"] = "os" if "OS" in val else "fw"
    elif s.startswith("Priority trust state:"):
        q["trust"] = val.strip()
    elif s.startswith("Receive buffer size"):
        _qos_buffers(q, no, s)
    elif s.startswith("Cable len:") and val.strip().isdigit():
        q["cable_len"] = int(val)
    elif (m := re.fullmatch(r"prio:(\d)\s+dscp:((?:\d+,)*\d*)", s)) and q["section"] == "dscp":
        q["dscp2prio"].update({int(d): int(m[1]) for d in m[2].split(",") if d})
    elif (m := re.fullmatch(r"prio:(\d)", s)) and q["section"] == "default":
        q["default_priority"] = int(m[1])
    elif (word := s.split()[0]) in ("priority", "enabled", "buffer") and q["section"] == "pfc" and not sep:
        _qos_row(q, word, no, s)
    elif (m := _TC.match(s)):
        rate = None if m[2] == "unlimited" else float(m[2].split()[0].replace("Gbps", ""))
        q["tcs"].append(MlnxQosTc(tc=int(m[1]), ratelimit_gbps=rate, tsa=m[3], bw_percent=m[4] and int(m[4])))
    elif key == "priority" and val.strip().isdigit() and q["tcs"]:
        q["tcs"][-1].priorities.append(int(val))
    else:
        raise ParseError("mlnx_qos", no, "an mlnx_qos status line", s)


_SECTIONS = {"dscp2prio mapping:": "dscp", "default priority:": "default", "PFC configuration:": "pfc"}


def _qos_scan(text: str) -> dict:
    q: dict = {"section": None, "dscp2prio": {}, "tcs": [], "warnings": [], "errors": [], "started": 0}
    for no, line in enumerate(clean_lines(text), 1):
        s = line.strip()
        if not s or is_prompt(line):
            continue
        if s.startswith("DCBX mode:") and q["started"]:
            q.update({"dscp2prio": {}, "tcs": [], "section": None})  # a second status table: the last one wins
        if s.startswith("DCBX mode:"):
            q["started"] = no
        if s.startswith("*") and "WARNING" in s or s.endswith("not supported on your system"):
            q["warnings"].append(s.strip("* "))
        elif _QOS_ERRORS.match(s):
            q["errors"].append(s)
        elif s in _SECTIONS:
            q["section"] = _SECTIONS[s]
        elif not q["started"]:
            raise ParseError("mlnx_qos", no, "'DCBX mode: ...' (start of the mlnx_qos status)", line)
        else:
            _qos_line(q, no, s)
    return q


@parser("mlnx_qos")
def parse_mlnx_qos(text: str) -> MlnxQos:
    """Parse ``mlnx_qos -i IF`` status output, legacy (no buffers) or newer (buffers, Python-3 tc order).

    A text holding only an mlnx_qos error (``pfc list must have 8 items``) returns ``failure``
    (kind ``rejected``) and no state; an error next to a status table sets both.

    Raises:
        ParseError: unknown line, or a status table cut short (no PFC row, tc blocks missing priorities).
    """
    q = _qos_scan(text)
    failure = None
    if q["errors"]:
        failure = ToolFailure(kind="rejected", message=q["errors"][-1],
                              likely_cause="bad mlnx_qos argument (see the message)")
    fields = {k: v for k, v in q.items() if k not in ("section", "started")}
    if not q["started"]:
        if failure:
            return MlnxQos(tool="mlnx_qos", failure=failure, **fields)
        raise ParseError("mlnx_qos", 0, "'DCBX mode:' status output")
    covered = sorted(p for tc in q["tcs"] for p in tc.priorities)
    if "pfc_enabled" not in q or covered != list(range(8)):
        raise ParseError("mlnx_qos", 0, "a complete status (PFC 'enabled' row and tc blocks covering priorities 0-7)")
    return MlnxQos(tool="mlnx_qos", failure=failure, **fields)


# ---------------------------------------------------------------- ethtool -S

class EthtoolStats(Parsed):
    """``ethtool -S IF`` counters (name -> value); ``pause_priorities``: priorities with PFC pause frames."""

    counters: dict[str, int]

    @property
    def pause_priorities(self) -> list[int]:
        """Priorities whose rx/tx ``prioN_pause`` counter is non-zero (PFC in use there)."""
        return sorted({int(m[1]) for k, v in self.counters.items() if v and (m := re.fullmatch(r"[rt]x_prio(\d)_pause", k))})


@parser("ethtool-S")
def parse_ethtool_s(text: str) -> EthtoolStats:
    """Parse ``ethtool -S IF`` (whole or grepped) lines ``     name: value``.

    Findings: ``lossless_drops`` (warn) for ``rx_discards_phy`` > 0 (port-buffer drops: PFC is off
    or on the wrong priority) and for a non-zero ``rx_prioN_discards`` / ``_buf_discard`` / ``_cong_discard``.
    """
    counters: dict[str, int] = {}
    for no, line in enumerate(clean_lines(text), 1):
        s = line.strip()
        if not s or is_prompt(line) or s.startswith("NIC statistics:"):
            continue
        m = re.fullmatch(r"([\w.\[\]-]+):\s*(\d+)", s)
        if not m:
            raise ParseError("ethtool-S", no, "'counter_name: integer'", line)
        counters[m[1]] = int(m[2])
    if not counters:
        raise ParseError("ethtool-S", 0, "'name: value' counter lines")
    result = EthtoolStats(tool="ethtool-S", counters=counters)
    drops = {k: v for k, v in counters.items() if v and (
        k == "rx_discards_phy" or re.fullmatch(r"rx_prio\d_(discards|buf_discard|cong_discard)", k))}
    for name, value in drops.items():
        result.findings.append(Finding(code="lossless_drops", severity="warn", subject=name,
                                       message=f"{name} = {value}: drops at the port buffer; lossless is not holding"
                                               " (PFC off or on the wrong priority)"))
    return result
