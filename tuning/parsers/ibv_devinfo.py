"""Parser for rdma-core ``ibv_devinfo`` and ``ibv_devinfo -v`` (``libibverbs/examples/devinfo.c``; sample in
shared/cases/ibv_devinfo__*.txt).

Layout: ``hca_id:`` blocks of ``key:<tabs>value`` lines, then one ``port:`` section per port. ``-v``
adds flag lists continued under the value column (``device_cap_flags: 0x...`` then one flag a line,
``Unknown flags: 0x...``), nested capability keys, bare notes (``tag matching not supported``) and,
per port, the GID table::

    \t\t\tGID[  0]:\t\tfe80:0000:0000:0000:0e42:a1ff:fe5b:7c31, RoCE v1
    \t\t\tGID[  3]:\t\t::ffff:10.0.0.1, RoCE v2

RoCE v1 GIDs print as 8 hex groups, RoCE v2 ones through ``inet_ntop`` (compressed); IB ports print no
type. GIDs are kept normalised to 8 groups of 4 lowercase hex digits, as ``show_gids`` prints them.
"""

from __future__ import annotations

import ipaddress
import re

from pydantic import BaseModel

from tuning.errors import ParseError
from tuning.parsers.base import Finding, Parsed, ToolFailure, clean_lines, context_findings, parser
from tuning.parsers.rdma import GidEntry, gid_findings, gids_context
from tuning.parsers.text import is_prompt

__all__ = ["IbvDevice", "IbvDevinfo", "IbvPort", "parse_ibv_devinfo"]


class IbvPort(BaseModel):
    """One port of ``ibv_devinfo``. MTUs in bytes (``4096 (5)`` -> 4096); ``state`` e.g. ``PORT_ACTIVE``.

    ``gids``: the ``-v`` GID table (``ver`` ``v1``/``v2``, ``ib`` on an IB port); empty without ``-v``.
    """

    port: int
    state: str | None = None
    max_mtu: int | None = None
    active_mtu: int | None = None
    link_layer: str | None = None
    attrs: dict[str, str] = {}
    gids: list[GidEntry] = []


class IbvDevice(BaseModel):
    """One ``hca_id:`` block; ``attrs`` holds every device key as printed (``fw_ver``, ``board_id``...).

    ``-v`` flag lists (``device_cap_flags``) are kept in ``flags`` (key -> flag lines), bare lines in ``notes``.
    """

    hca_id: str
    fw_ver: str | None = None
    vendor_part_id: int | None = None
    attrs: dict[str, str] = {}
    flags: dict[str, list[str]] = {}
    notes: list[str] = []
    ports: list[IbvPort] = []


class IbvDevinfo(Parsed):
    """``ibv_devinfo`` result, devices in printed order; ``warnings``: ``Failed to ...`` lines of the tool."""

    devices: list[IbvDevice]
    warnings: list[str] = []

    def gid_tables(self) -> dict[str, list[GidEntry]]:
        """The ``-v`` GID tables of the Ethernet (RoCE) ports, keyed ``DEV/PORT``."""
        return {f"{d.hca_id}/{p.port}": p.gids for d in self.devices for p in d.ports
                if p.gids and p.link_layer == "Ethernet"}


_GID_LINE = re.compile(r"^GID\[\s*(\d+)\]:\s*([0-9A-Fa-f:.]+)(?:,\s*(.+))?$")
#: devinfo.c ``gid_type_str``: ``RoCE v1`` (``IB/RoCE v1`` in older rdma-core), ``RoCE v2``; none on IB
_GID_TYPE = re.compile(r"(?:(?:IB/)?RoCE v[12]|Invalid gid type)?")
_KEY = re.compile(r"[A-Za-z_][\w ()/.-]*")


def _first_int(raw: str | None) -> int | None:
    m = re.match(r"\s*(\d+)", raw or "")
    return int(m.group(1)) if m else None


def _gid(dev: str, port: int, ethernet: bool, no: int, line: str, m: re.Match[str]) -> GidEntry:
    try:
        addr = ipaddress.IPv6Address(m[2])
    except ValueError:
        raise ParseError("ibv_devinfo", no, "'GID[ N]: <IPv6 GID>[, RoCE v1|v2]'", line) from None
    kind = (m[3] or "").strip()
    if not _GID_TYPE.fullmatch(kind) or (not kind and ethernet):  # an Ethernet port always prints the type
        raise ParseError("ibv_devinfo", no, "'GID[ N]: <IPv6 GID>, RoCE v1|v2' (line cut short?)", line)
    ver = "ib" if not kind else ("v2" if kind.endswith("v2") else "v1")
    mapped = addr.ipv4_mapped
    return GidEntry(dev=dev, port=port, index=int(m[1]), gid=addr.exploded, ipv4=str(mapped) if mapped else None,
                    ver=ver, netdev=None)


class _Scan:
    """One pass over the cleaned lines (tabs expanded), filling devices and ports."""

    def __init__(self) -> None:
        self.devices: list[IbvDevice] = []
        self.warnings: list[str] = []
        self.port: IbvPort | None = None
        self.key: str | None = None  # the last key, its indent and the column its value started at
        self.key_indent, self.value_col = 0, 0

    def line(self, no: int, raw: str) -> None:
        s, indent = raw.strip(), len(raw) - len(raw.lstrip())
        key, sep, value = s.partition(":")
        if s.startswith("Failed to") or s.startswith("No IB devices found"):
            self.warnings.append(s)
        elif key == "hca_id":
            self.devices.append(IbvDevice(hca_id=value.strip()))
            self.port, self.key = None, None
        elif not self.devices:
            raise ParseError("ibv_devinfo", no, "'hca_id:' first", raw)
        elif m := _GID_LINE.match(s):
            if self.port is None:
                raise ParseError("ibv_devinfo", no, "a GID line inside a 'port:' section", raw)
            ethernet = self.port.attrs.get("link_layer") == "Ethernet"
            self.port.gids.append(_gid(self.devices[-1].hca_id, self.port.port, ethernet, no, raw, m))
        elif self.key and self.value_col and indent >= max(self.value_col, self.key_indent + 16) \
                or self.key and not sep and indent > self.key_indent:
            self.devices[-1].flags.setdefault(self.key, []).append(s)
        elif sep and _KEY.fullmatch(key.strip()):
            self._key(key.strip(), value.strip(), indent, raw)
        elif not sep and self.port is None:  # a device-level note ("tag matching not supported")
            self.devices[-1].notes.append(s)
        else:
            raise ParseError("ibv_devinfo", no, "'key: value', a flag line or 'GID[ N]: ...'", raw)

    def _key(self, key: str, value: str, indent: int, raw: str) -> None:
        dev = self.devices[-1]
        if key == "port" and value.isdigit():
            self.port = IbvPort(port=int(value))
            dev.ports.append(self.port)
        elif self.port is not None and indent > 8:
            self.port.attrs[key] = value
        else:
            self.port = None
            dev.attrs[key] = value
        self.key, self.key_indent = key, indent
        self.value_col = (len(raw) - len(raw.split(":", 1)[1].lstrip())) if value else 0


def _typed(dev: IbvDevice) -> IbvDevice:
    dev.fw_ver, dev.vendor_part_id = dev.attrs.get("fw_ver"), _first_int(dev.attrs.get("vendor_part_id"))
    for p in dev.ports:
        a = p.attrs
        p.state = (a.get("state") or "").split(" ")[0] or None
        p.max_mtu, p.active_mtu = _first_int(a.get("max_mtu")), _first_int(a.get("active_mtu"))
        p.link_layer = a.get("link_layer")
    return dev


def _findings(devices: list[IbvDevice]) -> list[Finding]:
    out = []
    for dev in devices:
        for p in dev.ports:
            subject = f"{dev.hca_id}/{p.port}"
            if (p.state == "PORT_ACTIVE" and p.link_layer == "Ethernet" and p.active_mtu and p.max_mtu
                    and p.active_mtu < p.max_mtu):
                out.append(Finding(code="roce_mtu_low", severity="warn", subject=subject, message=(
                    f"{dev.hca_id} port {p.port}: RoCE active_mtu {p.active_mtu} < max_mtu {p.max_mtu};"
                    " raise the netdev MTU to >= 4200")))
            if p.gids and p.link_layer == "Ethernet":
                out.extend(gid_findings(subject, p.gids))
    return out


@parser("ibv_devinfo")
def parse_ibv_devinfo(text: str) -> IbvDevinfo:
    """Parse ``ibv_devinfo`` or ``ibv_devinfo -v`` (flag lists, notes and GID tables).

    Findings: ``roce_mtu_low`` (warn) for an ACTIVE Ethernet port whose active_mtu < max_mtu; with
    ``-v``, per Ethernet port ``roce_v2_ipv4_gid`` (info, the index to use) or ``no_roce_v2_ipv4_gid`` (warn).
    A ``No IB devices found`` output is returned as ``failure.kind == "no_rdma_device"``.

    Raises:
        ParseError: no ``hca_id:`` block, a device without ``port:`` sections, a port without state /
            MTUs, a bad GID or key line (an Ethernet port's GID without its ``, RoCE v1|v2`` type).
    """
    scan = _Scan()
    for no, raw in enumerate(clean_lines(text, expand_tabs=True), 1):
        if raw.strip() and not is_prompt(raw):
            scan.line(no, raw)
    if not scan.devices and any(w.startswith("No IB devices found") for w in scan.warnings):
        return IbvDevinfo(tool="ibv_devinfo", devices=[], warnings=scan.warnings, failure=ToolFailure(
            kind="no_rdma_device", message="No IB devices found",
            likely_cause="RDMA driver (mlx5_ib) not loaded, or no /dev/infiniband in the container"))
    if not scan.devices or not all(d.ports for d in scan.devices):
        raise ParseError("ibv_devinfo", 0, "'hca_id:' blocks with 'port:' sections")
    for dev in scan.devices:
        for port in dev.ports:
            if not {"state", "max_mtu", "active_mtu"} <= set(port.attrs):
                raise ParseError("ibv_devinfo", 0, f"state, max_mtu and active_mtu in {dev.hca_id} port {port.port}"
                                 " (output cut short?)")
    devices = [_typed(d) for d in scan.devices]
    return IbvDevinfo(tool="ibv_devinfo", devices=devices, warnings=scan.warnings, findings=_findings(devices))


context_findings("ibv_devinfo", keys=("ipv4",))(gids_context)
