"""Parsers for the RDMA device tools (issue 3): ``ibdev2netdev`` and ``show_gids``, and the choice of
the RoCEv2 IPv4 GID index. ``ibv_devinfo`` is in :mod:`.ibv_devinfo`, the RDMA port counters in
:mod:`.rdma_counters`.

Formats: ``ibdev2netdev`` and ``show_gids`` from Mellanox/mlnx-tools; samples in ``shared/cases/``.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import BaseModel

from tuning.errors import InputError, ParseError
from tuning.parsers.base import Finding, Parsed, clean_lines, context_findings, parser
from tuning.parsers.text import is_prompt, mlx_sort_key

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

    def gid_tables(self) -> dict[str, list[GidEntry]]:
        """GIDs per device port, keyed ``DEV/PORT`` (``mlx5_0/1``)."""
        tables: dict[str, list[GidEntry]] = {}
        for e in self.entries:
            tables.setdefault(f"{e.dev}/{e.port}", []).append(e)
        return tables


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

    Findings: per device port, see :func:`gid_findings`.

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
        result.findings.extend(gid_findings(f"{dev}/{port}", [e for e in entries if (e.dev, e.port) == (dev, port)]))
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


def gid_findings(subject: str, entries: list[GidEntry], ipv4: str | None = None) -> list[Finding]:
    """The GID finding of one device port: which index carries RoCEv2 over IPv4, or that none does.

    Args:
        subject: ``DEV/PORT`` (``mlx5_0/1``).
        entries: the GIDs of that port (``show_gids`` rows or ``ibv_devinfo -v`` GID lines).
        ipv4: the address the traffic uses; None takes the first RoCEv2 IPv4 GID.

    Returns:
        ``[roce_v2_ipv4_gid]`` (info, e.g. "use GID index 5") or ``[no_roce_v2_ipv4_gid]`` (warn).
    """
    index = resolve_roce_v2_ipv4_gid(entries, ipv4)
    want = f" for {ipv4}" if ipv4 else ""
    if index is None:
        return [Finding(code="no_roce_v2_ipv4_gid", severity="warn", subject=subject,
                        message=f"{subject} has no RoCEv2 IPv4 GID{want}: RoCEv2 over IPv4 cannot use this port")]
    addr = next(e.ipv4 for e in entries if e.index == index)
    return [Finding(code="roce_v2_ipv4_gid", severity="info", subject=subject, message=(
        f"{subject}: RoCEv2 IPv4 GID index {index} ({addr}); use it for perftest -x and NCCL_IB_GID_INDEX"))]


_GID_CODES = ("roce_v2_ipv4_gid", "no_roce_v2_ipv4_gid")


@context_findings("show-gids", "show_gids", keys=("ipv4",))
def gids_context(result: Parsed, context: dict[str, str]) -> list[Finding]:
    """GID findings for the address the traffic uses (``ipv4``): the index carrying RoCEv2 for it, or none.

    ``result`` is anything with ``gid_tables()`` (``show_gids``, ``ibv_devinfo -v``); the context-free
    GID findings are replaced, the others kept.

    Raises:
        InputError: ``ipv4`` is not an IPv4 address.
    """
    try:
        ipv4 = str(ipaddress.IPv4Address(context.get("ipv4", "")))
    except ValueError:
        raise InputError("--context", "ipv4", f"{context.get('ipv4')!r} is not an IPv4 address") from None
    kept = [f for f in result.findings if f.code not in _GID_CODES]
    tables = result.gid_tables()  # type: ignore[attr-defined]
    return kept + [f for subject, entries in tables.items() for f in gid_findings(subject, entries, ipv4)]
