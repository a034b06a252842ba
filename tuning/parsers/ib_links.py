"""Parser for ``iblinkinfo`` (infiniband-diags as Debian ships it: rdma-core 44,
``infiniband-diags/iblinkinfo.c``), default and ``-l`` (line) layouts; samples captured from the
real tool over the IB lab's fabric (OpenSM 3.3.23 on ibsim 0.10) in ``tests/ib/cases/iblinkinfo*``.

Default layout: a header per node, ``CA: <description>:`` or ``Switch: 0x<guid> <description>:``,
then one line per port. A CA port line starts with its port GUID, a switch port line with the
switch's LID::

      0x0c42a10300000101      2    1[  ] ==( 4X        53.125 Gbps Active/  LinkUp)==>       1    1[  ] "leaf01" (Could be 12X )
               1    2[  ] ==(                Down/ Polling)==>             [  ] "" ( )

``-l`` puts the node's GUID and description (``"%30s"``, right-aligned) before every port line and
the remote port's GUID before the remote LID. Inside ``==( )==>``: width, speed, port state and
physical state (a Down port shows only the two states: "C14-24.2.1", the rest is invalid); ``-p``
adds `` (HOQ:n VL_Stall:n)``. After ``==>``: the remote LID, port, ``[ext port]``, description and
``(<width hint> <speed hint>)``, where a hint reads ``Could be 4X`` / ``Could be 53.125 Gbps`` when
the link runs below what both ends *support*; ``"Port not available"`` when a live port's remote
end was not discovered. Speeds as libibmad prints them: ``2.5``/``5.0``/``10.0 Gbps`` (SDR, DDR,
QDR), ``10.0 Gbps (FDR10)``, ``14.0625`` (FDR), ``25.78125`` (EDR), ``53.125`` (HDR),
``106.25 Gbps`` (NDR).

ibsim 0.10 reports LinkWidthSupported 1X|2X|4X|8X|12X on every port, so in the lab every link says
``(Could be 12X )``; whether a port is degraded is therefore judged against the intent (the width and
speed the fabric should run, :meth:`IbLinkInfo.degraded`, ``--context width=4X``), never from the
hint alone.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from tuning.errors import InputError, ParseError
from tuning.parsers.base import Finding, Parsed, clean_lines, context_findings, parser, require_text

__all__ = ["IbLinkInfo", "IbLinkPort", "IbRemote", "SPEEDS", "parse_iblinkinfo"]

#: speed as printed -> (generation, nominal data rate per lane in Gb/s)
SPEEDS = {"2.5 Gbps": ("SDR", 2.5), "5.0 Gbps": ("DDR", 5.0), "10.0 Gbps": ("QDR", 10.0),
          "10.0 Gbps (FDR10)": ("FDR10", 10.0), "14.0625 Gbps": ("FDR", 14.0), "25.78125 Gbps": ("EDR", 25.0),
          "53.125 Gbps": ("HDR", 50.0), "106.25 Gbps": ("NDR", 100.0), "212.5 Gbps": ("XDR", 200.0)}
_HEADER = re.compile(r"^(CA|Switch|Router): (?:(0x[0-9a-f]{16}) )?(.*):$")
_LINE_NODE = re.compile(r'^(0x[0-9a-f]{16}) "(.*?)" ')
_LOCAL = re.compile(r"^\s*(?:(0x[0-9a-f]{16})\s+)?(\d+)\s+(\d+)\[([ \d]{2})\] ")
_LINK = re.compile(r"==\(\s*(?:(?P<width>\d+X|\?)\s+(?P<speed>\S.*?)\s+)?(?P<state>[A-Za-z?]+)/\s*(?P<phys>[A-Za-z?]+)\)"
                   r"(?: \(HOQ:(?P<hoq>\d+) VL_Stall:(?P<stall>\d+)\))?==>\s+")
_REMOTE = re.compile(r'^(?:(?P<guid>0x[0-9a-f]{16}) )?\s*(?P<lid>\d+)\s+(?P<port>\d+)\[(?P<ext>[ \d]{2})\] "(?P<name>.*)" '
                     r"\((?P<hint>.*)\)$")
_NO_REMOTE = re.compile(r'^\[  \] "" \( \)$')
_UNAVAILABLE = '"Port not available"'
_COULD_WIDTH = re.compile(r"Could be (\d+X)")
_COULD_SPEED = re.compile(r"Could be ([\d.]+ Gbps(?: \(FDR10\))?)")


class IbRemote(BaseModel):
    """The far end of a cable: LID, port, description, and its GUID in ``-l`` output."""

    lid: int
    port: int
    name: str
    guid: str | None = None
    ext_port: int | None = None


class IbLinkPort(BaseModel):
    """One port line.

    Attributes:
        node / node_type / node_guid: the node's description, ``CA``/``Switch``/``Router`` and GUID
            (switch header or ``-l``; a CA's node GUID is not printed).
        port_guid: the CA port's GUID (``-l``: the GUID printed for the node's port).
        lid: the CA port's LID, a switch's (port 0) LID.
        width: ``4X`` (None on a Down port).  speed: as printed (``53.125 Gbps``).
        generation: ``HDR``...  rate_gbps: width x nominal lane rate (4X HDR: 200.0).
        could_be_width / could_be_speed: the tool's hints (``12X``, ``53.125 Gbps``), as printed.
        remote: the far end; None for an unconnected port.  remote_unavailable: ``"Port not available"``.
    """

    node: str
    node_type: str | None = None
    node_guid: str | None = None
    port_guid: str | None = None
    lid: int
    port: int
    ext_port: int | None = None
    state: str
    phys_state: str
    width: str | None = None
    speed: str | None = None
    generation: str | None = None
    rate_gbps: float | None = None
    could_be_width: str | None = None
    could_be_speed: str | None = None
    hoq: int | None = None
    vl_stall: int | None = None
    remote: IbRemote | None = None
    remote_unavailable: bool = False


class IbLinkInfo(Parsed):
    """An ``iblinkinfo`` run: every port line, in the order printed."""

    ports: list[IbLinkPort] = Field(default_factory=list)

    def port(self, node: str, port: int) -> IbLinkPort:
        """The line of ``node`` (description) port ``port``. Raises KeyError."""
        for p in self.ports:
            if p.node == node and p.port == port:
                return p
        raise KeyError(f"{node} port {port} is not in this iblinkinfo output")

    def cabled(self) -> list[IbLinkPort]:
        """Ports with a far end (the ones a cable joins), as printed."""
        return [p for p in self.ports if p.remote is not None]

    def degraded(self, width: str | None = None, generation: str | None = None) -> list[IbLinkPort]:
        """Cabled ports below the intent: not Active/LinkUp, narrower than ``width`` (``4X``) or slower
        than ``generation`` (``HDR``); None skips that check."""
        out = []
        for p in self.cabled():
            low_width = width is not None and (p.width is None or _lanes(p.width) < _lanes(width))
            low_speed = generation is not None and (p.generation is None or _rank(p.generation) < _rank(generation))
            if p.state != "Active" or p.phys_state != "LinkUp" or low_width or low_speed:
                out.append(p)
        return out


def _lanes(width: str) -> int:
    return int(width[:-1]) if width[:-1].isdigit() else 0


_GENERATIONS = [g for g, _ in SPEEDS.values()]


def _rank(generation: str) -> int:
    return _GENERATIONS.index(generation) if generation in _GENERATIONS else -1


def _link(port: IbLinkPort, m: re.Match) -> None:
    port.state, port.phys_state = m.group("state"), m.group("phys")
    if m.group("hoq") is not None:
        port.hoq, port.vl_stall = int(m.group("hoq")), int(m.group("stall"))
    if m.group("width"):
        port.width, port.speed = m.group("width"), m.group("speed")
        gen = SPEEDS.get(port.speed)
        if gen is not None and _lanes(port.width):
            port.generation, port.rate_gbps = gen[0], _lanes(port.width) * gen[1]


def _remote(port: IbLinkPort, text: str) -> bool:
    if _NO_REMOTE.match(text):
        return True
    if text == _UNAVAILABLE:
        port.remote_unavailable = True
        return True
    m = _REMOTE.match(text)
    if not m:
        return False
    ext = m.group("ext").strip()
    port.remote = IbRemote(lid=int(m.group("lid")), port=int(m.group("port")), name=m.group("name"),
                           guid=m.group("guid"), ext_port=int(ext) if ext else None)
    if w := _COULD_WIDTH.search(m.group("hint")):
        port.could_be_width = w.group(1)
    if s := _COULD_SPEED.search(m.group("hint")):
        port.could_be_speed = s.group(1)
    return True


def _port_line(line: str, node: tuple[str, str | None, str | None]) -> IbLinkPort | None:
    name, kind, guid = node
    local, link = _LOCAL.match(line), _LINK.search(line)
    if not local or not link or link.start() != local.end():
        return None
    ext = local.group(4).strip()
    port = IbLinkPort(node=name, node_type=kind, node_guid=guid, port_guid=local.group(1),
                      lid=int(local.group(2)), port=int(local.group(3)), ext_port=int(ext) if ext else None,
                      state="", phys_state="")
    _link(port, link)
    return port if _remote(port, line[link.end():]) else None


def parse_iblinkinfo(text: str) -> IbLinkInfo:
    """Parse ``iblinkinfo`` or ``iblinkinfo -l`` output (stdout).

    In ``-l`` output a line does not say whether its node is a CA or a switch: ``node_type`` is None
    and the GUID it starts with (the port's: a switch port's is the switch's) is ``port_guid``.

    Raises:
        ParseError: empty or binary input, a port line before any node header, or a line that is
            neither a header nor a port line (names the line).
    """
    require_text("iblinkinfo", text)
    res = IbLinkInfo(tool="iblinkinfo")
    node: tuple[str, str | None, str | None] | None = None
    for no, line in enumerate(clean_lines(text), 1):
        if not line.strip():
            continue
        if h := _HEADER.match(line):
            node = (h.group(3), h.group(1), h.group(2))
            continue
        rest, line_guid = line, None
        if m := _LINE_NODE.match(line):
            rest, line_guid, node = line[m.end():], m.group(1), (m.group(2).strip(), None, None)
        if node is None:
            raise ParseError("iblinkinfo", no, "a 'CA: <name>:' or 'Switch: 0x<guid> <name>:' header first", line)
        port = _port_line(rest, node)
        if port is None:
            raise ParseError("iblinkinfo", no, "a port line 'LID PORT[ ] ==( width speed state/phys)==> remote'", line)
        port.port_guid = line_guid or port.port_guid
        res.ports.append(port)
    if not res.ports:
        raise ParseError("iblinkinfo", 0, "at least one port line")
    return res


@context_findings("iblinkinfo", keys=("width", "speed"))
def _intent_findings(res: Parsed, context: dict[str, str]) -> list[Finding]:
    """``width`` (``4X``) and ``speed`` (a generation, ``HDR``): one error per cabled port below it."""
    assert isinstance(res, IbLinkInfo)
    width, gen = context.get("width"), context.get("speed")
    if width is not None and not re.fullmatch(r"(1|2|4|8|12)X", width):
        raise InputError("--context", "width", f"{width!r}: one of 1X, 2X, 4X, 8X, 12X")
    if gen is not None and gen not in _GENERATIONS:
        raise InputError("--context", "speed", f"{gen!r}: one of {', '.join(dict.fromkeys(_GENERATIONS))}")
    out = list(res.findings)
    for p in res.degraded(width, gen):
        hint = " ".join(f"could be {h}" for h in (p.could_be_width, p.could_be_speed) if h)
        out.append(Finding(code="ib_link_degraded", severity="error", subject=f"{p.node} port {p.port}",
                           message=f"{p.node} port {p.port} runs {p.width or '-'} {p.generation or p.speed or ''} "
                                   f"{p.state}/{p.phys_state}, the fabric wants {width or 'any width'} "
                                   f"{gen or ''}".rstrip() + (f" (iblinkinfo: {hint})" if hint else "")))
    return out


parser("iblinkinfo")(parse_iblinkinfo)
