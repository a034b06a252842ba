"""Parsers for what the InfiniBand subnet manager programmed: ``smpquery pkeys``, ``saquery PR`` and
``sminfo`` (infiniband-diags as Debian ships it: rdma-core 44; the SM: OpenSM 3.3.23); samples
captured from the real tools over the IB lab's fabric in ``tests/ib/cases/``.

``smpquery pkeys <lid|-G guid> [port]``: the port's P_Key table, 8 entries a line
(``   0: 0xffff 0x8001 0x0000 ...``), then ``64 pkeys capacity for this port``. An entry's top bit
(0x8000) is the membership: set = full member, clear = limited; 0x0000 and 0x8000 are empty slots.

``saquery PR ...``: one ``PathRecord dump:`` block per record, ``\\t\\tname....value`` lines. ``mtu``,
``rate`` and ``pkt_life`` hold a 2-bit selector (top) and a 6-bit code: mtu code 1..5 = 256..4096
bytes; rate code -> Gb/s per IBA's rate table (3 = 10, 17 = 200, 20 = 50...).

``smpquery portinfo <lid|-G guid> [port]``: ``# Port info: Lid 2 port 1`` then one ``Name:....value``
line per PortInfo field (a capability's flags on tab-indented lines below it); ``MtuCap`` and
``NeighborMTU`` in bytes (``2048``).

``sminfo``: ``sminfo: sm lid 1 sm guid 0x..., activity count 589 priority 0 state 3 SMINFO_MASTER``.

``smpquery sl2vl <lid|-G guid> [port]``: the port's SL to VL mapping table (infiniband-diags
``smpquery.c`` ``sl2vl_table``: ``# SL2VL table: <port id>``, the SL header ``#                 SL: | 0|
1|...|15|``, then one ``ports: in %2d, out %2d: `` row of 16 ``|%2d`` VLs (libibmad ``mad_dump_sltovl``):
one row ``in 0, out 0`` on a CA, one per input port on a switch). VL 15 is the management VL: a data SL
mapped there is dropped.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from tuning.errors import ParseError
from tuning.parsers.base import Finding, Parsed, clean_lines, parser, require_text

__all__ = ["IbPathRecord", "IbPkey", "PathRecords", "PkeyTable", "PortInfo", "Sl2VlTable", "SmInfo", "parse_pkeys",
           "parse_portinfo", "parse_saquery_pr", "parse_sl2vl", "parse_sminfo", "umad_line"]

_PKEY_ROW = re.compile(r"^\s*(\d+):((?: 0x[0-9a-f]{4})+)$")
_CAPACITY = re.compile(r"^(\d+) pkeys capacity for this port$")
_PR_FIELD = re.compile(r"^\s+([a-z_0-9]+)\.+(\S+)$")
_SL2VL_HEAD = re.compile(r"^# SL2VL table: (.+)$")
_SL2VL_SLS = "#                 SL: |" + "".join(f"{i:2d}|" for i in range(16))
_SL2VL_ROW = re.compile(r"^ports: in +(\d+), out +(\d+): ((?:\| ?\d{1,2})+)\|$")
_PI_HEAD = re.compile(r"^# Port info: (?:Lid (\d+)|DR path .*) port (\d+)$")
_PI_FIELD = re.compile(r"^([A-Za-z0-9]+):\.*(.*)$")
_SMINFO = re.compile(r"^sminfo: sm lid (\d+) sm guid (0x[0-9a-f]+), activity count (\d+) priority (\d+) "
                     r"state (\d+) SMINFO_([A-Z_]+)$")
#: PathRecord/PortInfo rate code -> Gb/s (IBA 1.3 Table 225; ``ib_types.h`` ``IB_PATH_RECORD_RATE_*``)
RATES = {2: 2.5, 3: 10, 4: 30, 5: 5, 6: 20, 7: 40, 8: 60, 9: 80, 10: 120, 11: 14, 12: 56, 13: 112, 14: 168,
         15: 25, 16: 100, 17: 200, 18: 300, 19: 28, 20: 50, 21: 400, 22: 600}
MTUS = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}


class IbPkey(BaseModel):
    """One used P_Key table entry: its index, the 15-bit pkey, and full (top bit set) or limited."""

    index: int
    pkey: int
    full: bool
    raw: str


class PkeyTable(Parsed):
    """A port's P_Key table (used entries only) and its capacity."""

    entries: list[IbPkey] = Field(default_factory=list)
    capacity: int | None = None

    def membership(self, pkey: int) -> str | None:
        """``full``, ``limited`` (``both`` when the table holds the two) or None for pkey's 15 bits."""
        kinds = {"full" if e.full else "limited" for e in self.entries if e.pkey == pkey & 0x7FFF}
        return "both" if len(kinds) == 2 else next(iter(kinds), None)


def parse_pkeys(text: str) -> PkeyTable:
    """Parse ``smpquery pkeys`` output.

    Raises:
        ParseError: empty input, a row out of order, or an unknown line.
    """
    require_text("smpquery-pkeys", text)
    res, index = PkeyTable(tool="smpquery-pkeys"), 0
    for no, line in enumerate(clean_lines(text), 1):
        if m := _PKEY_ROW.match(line):
            if int(m.group(1)) != index:
                raise ParseError("smpquery-pkeys", no, f"the row of index {index}", line)
            for raw in m.group(2).split():
                value = int(raw, 16)
                if value & 0x7FFF:
                    res.entries.append(IbPkey(index=index, pkey=value & 0x7FFF, full=bool(value & 0x8000), raw=raw))
                index += 1
        elif m := _CAPACITY.match(line):
            res.capacity = int(m.group(1))
        elif line.strip():
            raise ParseError("smpquery-pkeys", no, "'N: 0xPPPP ...' rows and 'N pkeys capacity for this port'", line)
    if res.capacity is None:
        raise ParseError("smpquery-pkeys", 0, "the 'N pkeys capacity for this port' line")
    return res


class IbPathRecord(BaseModel):
    """One PathRecord: ends, pkey (as printed, 16 bits), SL, MTU and rate decoded; ``fields`` as printed."""

    slid: int
    dlid: int
    sgid: str
    dgid: str
    pkey: int
    sl: int
    mtu_bytes: int | None
    mtu_selector: int
    rate_gbps: float | None
    rate_selector: int
    fields: dict[str, str] = Field(default_factory=dict)


class PathRecords(Parsed):
    """A ``saquery PR`` run: its records in order."""

    records: list[IbPathRecord] = Field(default_factory=list)


def _record(fields: dict[str, str], no: int) -> IbPathRecord:
    try:
        mtu, rate = int(fields["mtu"], 16), int(fields["rate"], 16)
        return IbPathRecord(slid=int(fields["slid"]), dlid=int(fields["dlid"]), sgid=fields["sgid"], dgid=fields["dgid"],
                            pkey=int(fields["pkey"], 16), sl=int(fields["sl"], 16), mtu_bytes=MTUS.get(mtu & 0x3F),
                            mtu_selector=mtu >> 6, rate_gbps=RATES.get(rate & 0x3F), rate_selector=rate >> 6,
                            fields=fields)
    except (KeyError, ValueError) as e:
        raise ParseError("saquery-pr", no, f"a PathRecord with slid, dlid, sgid, dgid, pkey, sl, mtu and rate ({e})") from e


def parse_saquery_pr(text: str) -> PathRecords:
    """Parse ``saquery PR`` output (one or more ``PathRecord dump:`` blocks).

    Raises:
        ParseError: empty input, a field before a block, a block missing a field, or an unknown line.
    """
    require_text("saquery-pr", text)
    res = PathRecords(tool="saquery-pr")
    fields: dict[str, str] | None = None
    start = 0
    for no, line in enumerate(clean_lines(text), 1):
        if line == "PathRecord dump:":
            if fields is not None:
                res.records.append(_record(fields, start))
            fields, start = {}, no
        elif (m := _PR_FIELD.match(line)) and fields is not None:
            fields[m.group(1)] = m.group(2)
        elif line.strip():
            raise ParseError("saquery-pr", no, "'PathRecord dump:' and '\\t\\tname....value' lines", line)
    if fields is None:
        raise ParseError("saquery-pr", 0, "a 'PathRecord dump:' block")
    res.records.append(_record(fields, start))
    return res


class PortInfo(Parsed):
    """``smpquery portinfo``: the port's LID (None for a direct-route query), number, every field as
    printed (``fields``: ``{"MtuCap": "2048", ...}``) and ``mtu_cap_bytes`` (IBA PortInfo MtuCap: the
    largest MTU the port supports; OpenSM caps a path's MTU at the lowest on the path)."""

    lid: int | None
    port: int
    fields: dict[str, str] = Field(default_factory=dict)
    mtu_cap_bytes: int


def parse_portinfo(text: str) -> PortInfo:
    """Parse ``smpquery portinfo`` output (infiniband-diags, rdma-core 44).

    Raises:
        ParseError: no ``# Port info:`` header, an unknown line, or no numeric ``MtuCap``.
    """
    require_text("smpquery-portinfo", text)
    lines = clean_lines(text)
    head = _PI_HEAD.match(lines[0])
    if not head:
        raise ParseError("smpquery-portinfo", 1, "'# Port info: Lid L port P'", lines[0])
    fields: dict[str, str] = {}
    for no, line in enumerate(lines[1:], 2):
        if m := _PI_FIELD.match(line):
            fields[m.group(1)] = m.group(2)
        elif line.strip() and not line.startswith("\t"):  # a capability flag sits on a tab-indented line
            raise ParseError("smpquery-portinfo", no, "'Name:....value' lines", line)
    if not fields.get("MtuCap", "").isdigit():
        raise ParseError("smpquery-portinfo", 0, "a 'MtuCap:....N' line in bytes")
    return PortInfo(tool="smpquery-portinfo", lid=int(head.group(1)) if head.group(1) else None,
                    port=int(head.group(2)), fields=fields, mtu_cap_bytes=int(fields["MtuCap"]))


def umad_line(said: str) -> str:
    """The telling line of libibmad's open failure (any infiniband-diags tool): ``can't read ABI
    version from ... is ib_umad module loaded?`` when it says so (without its ``ibwarn: [pid]
    get_abi_version:`` prefix), else its last line (``Failed to open (null) port 0``); at most 200
    characters."""
    lines = [ln.strip() for ln in said.splitlines() if ln.strip()]
    hint = next((ln.split(": ", 2)[-1] for ln in lines if "ib_umad module loaded" in ln), None)
    return (hint or (lines or ["no output"])[-1])[:200]


class SmInfo(Parsed):
    """``sminfo``: the master SM's LID and GUID, its activity count, priority and state."""

    sm_lid: int
    sm_guid: str
    activity_count: int
    priority: int
    state: int
    state_name: str


def parse_sminfo(text: str) -> SmInfo:
    """Parse ``sminfo`` output; an SM LID of 0 (no SM has programmed this port) is an error finding.

    Raises:
        ParseError: not the one ``sminfo: sm lid ...`` line.
    """
    require_text("sminfo", text)
    lines = [x for x in clean_lines(text) if x.strip()]
    m = _SMINFO.match(lines[0]) if len(lines) == 1 else None
    if not m:
        raise ParseError("sminfo", 1, "'sminfo: sm lid L sm guid 0x..., activity count N priority P state S SMINFO_X'",
                         lines[0] if lines else "")
    res = SmInfo(tool="sminfo", sm_lid=int(m.group(1)), sm_guid=m.group(2), activity_count=int(m.group(3)),
                 priority=int(m.group(4)), state=int(m.group(5)), state_name=m.group(6))
    if res.sm_lid == 0:
        res.findings.append(Finding(code="ib_no_sm", severity="error", message="sm lid 0: no subnet manager "
                                    "has programmed this port (no SM running, or it cannot reach the port)"))
    elif res.state_name != "MASTER":
        res.findings.append(Finding(code="ib_sm_not_master", severity="warn",
                                    message=f"the SM answering is {res.state_name}, not MASTER"))
    return res


class Sl2VlTable(Parsed):
    """``smpquery sl2vl``: the port it names (``Lid 2``) and ``rows``: (input port, output port) -> the VL
    of SL 0..15 (16 ints; a CA has the one row ``(0, 0)``)."""

    port: str
    rows: dict[tuple[int, int], list[int]] = Field(default_factory=dict)


def parse_sl2vl(text: str) -> Sl2VlTable:
    """Parse ``smpquery sl2vl`` output (module docstring).

    Raises:
        ParseError: no ``# SL2VL table:`` head, another SL header, a row that is not 16 VLs 0..15, or no row.
    """
    require_text("smpquery-sl2vl", text)
    lines = [x for x in clean_lines(text) if x.strip()]
    head = _SL2VL_HEAD.match(lines[0]) if lines else None
    if not head:
        raise ParseError("smpquery-sl2vl", 1, "'# SL2VL table: <port>'", lines[0] if lines else "")
    if len(lines) < 3 or lines[1] != _SL2VL_SLS:
        raise ParseError("smpquery-sl2vl", 2, repr(_SL2VL_SLS) + " then a row", lines[1] if len(lines) > 1 else "")
    out = Sl2VlTable(tool="smpquery-sl2vl", port=head.group(1))
    for no, line in enumerate(lines[2:], 3):
        m = _SL2VL_ROW.match(line)
        vls = [int(x) for x in m.group(3).split("|")[1:]] if m else []
        if len(vls) != 16 or max(vls) > 15:
            raise ParseError("smpquery-sl2vl", no, "'ports: in N, out M: | v| v|...|' with 16 VLs 0..15", line)
        out.rows[(int(m.group(1)), int(m.group(2)))] = vls
    return out


parser("smpquery-pkeys")(parse_pkeys)
parser("saquery-pr")(parse_saquery_pr)
parser("sminfo")(parse_sminfo)
parser("smpquery-portinfo")(parse_portinfo)
