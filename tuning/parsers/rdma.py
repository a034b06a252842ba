"""Parsers for the RDMA device tools (issue 3): ``ibdev2netdev``, ``ibv_devinfo``, ``show_gids`` and
the RDMA port counters (sysfs ``hw_counters``, ``rdma statistic``); plus the text helpers the other
parser modules share (prompt lines, counts with thousands separators, sizes with units).

Formats: ``ibdev2netdev`` and ``show_gids`` from Mellanox/mlnx-tools, ``ibv_devinfo``
from rdma-core ``libibverbs/examples/devinfo.c``, counters from Linux ``mlx5/counters.rst`` and
iproute2 ``rdma/stat.c``; samples in ``shared/cases/``.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel

from tuning.errors import ParseError
from tuning.parsers.base import Finding, Parsed, Quantity, ToolFailure, clean_lines, parser

# ---------------------------------------------------------------- shared text helpers

_PROMPT = re.compile(r"^(?:\[[^\]]*\]\s?[#$]|[\w.-]+@[\w.:~/-]*[#$]|bash-[\d.]+[#$]|[$#])(?:\s|$)")
_PLACEHOLDERS = {"", "N/A", "n/a", "-", "None"}
_SIZE_FACTORS = {"B": 1, "BYTES": 1, "BYTE": 1, "KB": 2**10, "KIB": 2**10, "K": 2**10,
                 "MB": 2**20, "MIB": 2**20, "M": 2**20, "GB": 2**30, "GIB": 2**30, "G": 2**30}


def is_prompt(line: str) -> bool:
    """True for an echoed shell prompt line (``cumulus@sw:mgmt:~$ nv show ...``, ``[root@h ~]# ...``, ``$ cmd``)."""
    return bool(_PROMPT.match(line.strip()))


def placeholder(raw: str | None) -> str | None:
    """``raw`` stripped, or None for a placeholder (``N/A``, ``-``, blank)."""
    if raw is None:
        return None
    raw = raw.strip()
    return None if raw in _PLACEHOLDERS else raw


def to_int(raw: str) -> int | None:
    """An integer as printed, allowing thousands separators (``15,437``); placeholders are None.

    Raises:
        ValueError: not an integer (callers turn it into a ParseError naming the line).
    """
    value = placeholder(raw)
    return None if value is None else int(value.replace(",", ""))


def size_quantity(raw: str, unit: str) -> Quantity:
    """A size printed with its unit (``146.48`` ``KB``) normalised to bytes.

    NVUE, numactl and mlnx tools print binary sizes with decimal-looking labels: NVUE shows the
    default 150000-byte ECN min-threshold as ``146.48 KB``, so KB = 2^10 and MB = 2^20.

    Raises:
        ValueError: unknown unit.
    """
    factor = _SIZE_FACTORS.get(unit.upper())
    if factor is None:
        raise ValueError(f"unknown size unit {unit!r}")
    return Quantity(value=round(float(raw) * factor, 1), raw=raw, unit=unit, unit_norm="bytes")


def mlx_sort_key(name: str) -> tuple[str, int]:
    """Sort key putting ``mlx5_2`` before ``mlx5_10`` (numeric suffix)."""
    m = re.match(r"^(.*?)(\d+)$", name)
    return (m.group(1), int(m.group(2))) if m else (name, -1)


# ---------------------------------------------------------------- ibdev2netdev

class NetdevMap(BaseModel):
    """One ``mlx5_N port P ==> netdev (Up)`` line.

    Attributes:
        kind: ``ib`` (IPoIB netdev ``ib…``) or ``eth`` (Ethernet / RoCE netdev ``en…``/``eth…``).
        is_vf: the netdev is an SR-IOV VF representor-style name ending in ``v<N>``.
        bdf: PCI address, only with ``ibdev2netdev -v``.
    """

    device: str
    port: int
    netdev: str
    up: bool
    kind: Literal["ib", "eth", "unknown"]
    is_vf: bool
    bdf: str | None = None


class Ibdev2Netdev(Parsed):
    """``ibdev2netdev`` result; ``entries`` sorted numerically (mlx5_2 before mlx5_10)."""

    entries: list[NetdevMap]

    def netdev_of(self, device: str, port: int = 1) -> str | None:
        """The netdev of an RDMA device port, or None."""
        return next((e.netdev for e in self.entries if e.device == device and e.port == port), None)


_IBDEV = re.compile(r"^(?:(?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d)\s+)?(?P<dev>\S+)\s"
                    r"(?:.*?\s)?port\s+(?P<port>\d+)(?:\s+\(\w+\))?\s+==>\s+(?P<nd>\S+)\s+\((?P<st>Up|Down)\)$")


def _netdev_kind(name: str) -> Literal["ib", "eth", "unknown"]:
    if name.startswith("ib"):
        return "ib"
    if name.startswith(("en", "eth")):
        return "eth"
    return "unknown"


@parser("ibdev2netdev")
def parse_ibdev2netdev(text: str) -> Ibdev2Netdev:
    """Parse ``ibdev2netdev`` (and ``-v``) output (Mellanox/mlnx-tools ``ofed_scripts/ibdev2netdev``)."""
    entries = []
    for no, line in enumerate(clean_lines(text), 1):
        if not line.strip() or is_prompt(line):
            continue
        m = _IBDEV.match(line.strip())
        if not m:
            raise ParseError("ibdev2netdev", no, "'mlx5_N port P ==> netdev (Up|Down)'", line)
        nd = m["nd"]
        entries.append(NetdevMap(device=m["dev"], port=int(m["port"]), netdev=nd, up=m["st"] == "Up",
                                 kind=_netdev_kind(nd), is_vf=bool(re.search(r"v\d+$", nd)), bdf=m["bdf"]))
    if not entries:
        raise ParseError("ibdev2netdev", 0, "at least one 'mlx5_N port P ==> netdev' line")
    entries.sort(key=lambda e: (mlx_sort_key(e.device), e.port))
    return Ibdev2Netdev(tool="ibdev2netdev", entries=entries)


# ---------------------------------------------------------------- ibv_devinfo

class IbvPort(BaseModel):
    """One port of ``ibv_devinfo``. MTUs in bytes (``4096 (5)`` -> 4096); ``state`` e.g. ``PORT_ACTIVE``."""

    port: int
    state: str | None = None
    max_mtu: int | None = None
    active_mtu: int | None = None
    link_layer: str | None = None
    attrs: dict[str, str] = {}


class IbvDevice(BaseModel):
    """One ``hca_id:`` block; ``attrs`` holds every device key as printed (``fw_ver``, ``board_id``...)."""

    hca_id: str
    fw_ver: str | None = None
    vendor_part_id: int | None = None
    attrs: dict[str, str] = {}
    ports: list[IbvPort] = []


class IbvDevinfo(Parsed):
    """``ibv_devinfo`` result, devices in printed order."""

    devices: list[IbvDevice]


def _first_int(raw: str | None) -> int | None:
    m = re.match(r"\s*(\d+)", raw or "")
    return int(m.group(1)) if m else None


def _ibv_port(port_no: int, attrs: dict[str, str]) -> IbvPort:
    return IbvPort(port=port_no, state=(attrs.get("state") or "").split(" ")[0] or None,
                   max_mtu=_first_int(attrs.get("max_mtu")), active_mtu=_first_int(attrs.get("active_mtu")),
                   link_layer=attrs.get("link_layer"), attrs=attrs)


def _ibv_blocks(text: str) -> list[tuple[str, dict[str, str], list[tuple[int, dict[str, str]]]]]:
    blocks: list[tuple[str, dict[str, str], list[tuple[int, dict[str, str]]]]] = []
    for no, line in enumerate(clean_lines(text), 1):
        s = line.strip()
        if not s or is_prompt(line):
            continue
        key, sep, value = s.partition(":")
        value = value.strip()
        if not sep:
            raise ParseError("ibv_devinfo", no, "'key: value'", line)
        if key == "hca_id":
            blocks.append((value, {}, []))
        elif not blocks:
            raise ParseError("ibv_devinfo", no, "'hca_id:' first", line)
        elif key == "port" and value.isdigit():
            blocks[-1][2].append((int(value), {}))
        elif blocks[-1][2]:
            blocks[-1][2][-1][1][key] = value
        else:
            blocks[-1][1][key] = value
    return blocks


@parser("ibv_devinfo")
def parse_ibv_devinfo(text: str) -> IbvDevinfo:
    """Parse ``ibv_devinfo`` (also ``-v``; extra keys land in ``attrs``).

    Findings: ``roce_mtu_low`` (warn) for an ACTIVE Ethernet port whose active_mtu < max_mtu.
    A ``No IB devices found`` output is returned as ``failure.kind == "no_rdma_device"``.
    """
    lines = [ln.strip() for ln in clean_lines(text) if ln.strip()]
    if lines and lines[-1].startswith("No IB devices found"):
        return IbvDevinfo(tool="ibv_devinfo", devices=[], failure=ToolFailure(
            kind="no_rdma_device", message=lines[-1], likely_cause="RDMA driver (mlx5_ib) not loaded"))
    devices = []
    for hca, attrs, ports in _ibv_blocks(text):
        devices.append(IbvDevice(hca_id=hca, fw_ver=attrs.get("fw_ver"), attrs=attrs,
                                 vendor_part_id=_first_int(attrs.get("vendor_part_id")),
                                 ports=[_ibv_port(n, a) for n, a in ports]))
    if not devices or not all(d.ports for d in devices):
        raise ParseError("ibv_devinfo", 0, "'hca_id:' blocks with 'port:' sections")
    result = IbvDevinfo(tool="ibv_devinfo", devices=devices)
    for dev in devices:
        for p in dev.ports:
            if (p.state == "PORT_ACTIVE" and p.link_layer == "Ethernet" and p.active_mtu and p.max_mtu
                    and p.active_mtu < p.max_mtu):
                result.findings.append(Finding(
                    code="roce_mtu_low", severity="warn", subject=f"{dev.hca_id}/{p.port}",
                    message=f"{dev.hca_id} port {p.port}: RoCE active_mtu {p.active_mtu} < max_mtu {p.max_mtu};"
                            " raise the netdev MTU to >= 4200"))
    return result


# ---------------------------------------------------------------- show_gids

class GidEntry(BaseModel):
    """One ``show_gids`` row; ``ver`` is ``v1`` (RoCEv1) or ``v2`` (RoCEv2); ``ipv4`` None when blank."""

    dev: str
    port: int
    index: int
    gid: str
    ipv4: str | None
    ver: str
    netdev: str | None


class ShowGids(Parsed):
    """``show_gids`` result: entries in printed order; ``n_gids_found`` from the footer."""

    entries: list[GidEntry]
    n_gids_found: int


_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
_GID = re.compile(r"^[0-9a-fA-F]{4}(?::[0-9a-fA-F]{4}){7}$")


def _gid_row(no: int, line: str) -> GidEntry:
    t = line.split()
    ipv4 = t[4] if len(t) > 4 and _IPV4.match(t[4]) else None
    rest = t[5:] if ipv4 else t[4:]
    if len(t) < 5 or not t[1].isdigit() or not t[2].isdigit() or not _GID.match(t[3]) \
            or not re.fullmatch(r"v\d", rest[0] if rest else "") or len(rest) > 2:
        raise ParseError("show-gids", no, "'DEV PORT INDEX GID [IPv4] VER [DEV]'", line)
    return GidEntry(dev=t[0], port=int(t[1]), index=int(t[2]), gid=t[3].lower(), ipv4=ipv4, ver=rest[0],
                    netdev=rest[1] if len(rest) > 1 else None)


@parser("show-gids", "show_gids")
def parse_show_gids(text: str) -> ShowGids:
    """Parse ``show_gids`` (tab-separated, mlnx-tools ``sbin/show_gids``); tabs or re-spacing both read.

    Findings: ``no_roce_v2_ipv4_gid`` (warn) per device port without a RoCEv2 IPv4 GID.

    Raises:
        ParseError: no ``DEV PORT INDEX`` header, a bad row, or no/incorrect ``n_gids_found=N`` footer
            (a truncated output).
    """
    entries, header, footer = [], False, None
    for no, line in enumerate(clean_lines(text), 1):
        s = line.strip()
        if not s or is_prompt(line) or re.fullmatch(r"[-\s]+", s):
            continue
        if s.split()[:3] == ["DEV", "PORT", "INDEX"]:
            header = True
        elif s.startswith("n_gids_found="):
            footer = (no, line, s.partition("=")[2])
        elif not header:
            raise ParseError("show-gids", no, "header 'DEV PORT INDEX GID IPv4 VER DEV'", line)
        else:
            entries.append(_gid_row(no, line))
    if footer is None or not footer[2].isdigit():
        raise ParseError("show-gids", footer[0] if footer else 0, "footer 'n_gids_found=N'", footer[1] if footer else "")
    if int(footer[2]) != len(entries):
        raise ParseError("show-gids", footer[0], f"n_gids_found={len(entries)} (rows read)", footer[1])
    result = ShowGids(tool="show-gids", entries=entries, n_gids_found=int(footer[2]))
    for dev, port in dict.fromkeys((e.dev, e.port) for e in entries):
        if resolve_roce_v2_ipv4_gid([e for e in entries if (e.dev, e.port) == (dev, port)]) is None:
            result.findings.append(Finding(code="no_roce_v2_ipv4_gid", severity="warn", subject=f"{dev}/{port}",
                                           message=f"{dev} port {port} has no RoCEv2 IPv4 GID"))
    return result


def resolve_roce_v2_ipv4_gid(entries: list[GidEntry], ipv4: str | None = None) -> int | None:
    """The GID index to use for RoCEv2 over IPv4 (perftest ``-x``, ``NCCL_IB_GID_INDEX``).

    Args:
        entries: ``ShowGids.entries`` of one device port.
        ipv4: the address the traffic uses (no prefix); None takes the first RoCEv2 IPv4 GID.

    Returns:
        The lowest matching index (5 in the extra-link-local sample, not the usual 3), or None.
    """
    found = [e.index for e in entries if e.ver == "v2" and e.ipv4 and (ipv4 is None or e.ipv4 == ipv4)]
    return min(found) if found else None


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
