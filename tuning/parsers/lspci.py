"""Parser for ``lspci -vvv`` (``-D``, ``-s SLOT``, ``-nn`` too): the PCIe facts GPUDirect RDMA rests on.

Read per device (pciutils ``lspci.c``, ``ls-caps.c``, ``ls-ecaps.c``; real outputs in
``tests/parsers/cases/lspci__*.txt``):

- the header line ``[DDDD:]BB:DD.F <class>: <name>`` (``-nn`` adds ``[0604]`` / ``[15b3:1021]``);
- a bridge's ``Bus: primary=BB, secondary=BB, subordinate=BB`` (the tree: which bridge a device
  sits behind);
- ``Express (v2) Downstream Port (Slot+)``: the PCIe port type;
- DevCtl's ``MaxPayload N bytes, MaxReadReq N bytes``;
- ``LnkCap: Port #N, Speed 16GT/s, Width x16`` and ``LnkSta: Speed 8GT/s (downgraded), Width x4 (ok)``
  (pciutils >= 3.6 prints ``(downgraded)``/``(ok)`` or, since 3.8, nothing when equal; before 3.6 the
  LnkSta flags follow on the same line);
- the ACS extended capability: ``ACSCap:\\tSrcValid+ TransBlk+ ...`` and ``ACSCtl:\\tSrcValid+ ...``;
- ``Capabilities: <access denied>``: lspci ran without root and could not read past the first 64
  bytes of config space (every capability above is then unknown, never assumed absent).

Lines are matched whatever their indentation (tabs as printed, or spaces where a copy expanded
them). Findings: ACS redirect bits set (``acs-redirect``), a link below its capability on an
endpoint or upstream port (``pcie-link-degraded``; a downstream port wider than the device below it
is normal), and ``lspci-access-denied``.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from tuning.errors import ParseError
from tuning.parsers.base import Finding, Parsed, clean_lines, parser
from tuning.parsers.text import is_prompt

ACS_FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
#: ACS controls that send peer-to-peer traffic up to the root complex instead of across the switch
REDIRECT_FLAGS = ("ReqRedir", "CmpltRedir", "EgressCtrl")
_HEAD = re.compile(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])\s+"
                   r"(.+?)(?:\s\[[0-9a-fA-F]{4}\])?:\s(.*)$")
_BUS = re.compile(r"^Bus: primary=([0-9a-f]{2}), secondary=([0-9a-f]{2}), subordinate=([0-9a-f]{2})")
_EXPRESS = re.compile(r"^Capabilities: \[[0-9a-f]+\] Express \(v(\d+)\) (.+?)(?: \(Slot[+-]\))?, (?:MSI|IntMsgNum) ")
_MRRS = re.compile(r"^MaxPayload (\d+) bytes, MaxReadReq (\d+) bytes$")
_LNKCAP = re.compile(r"^LnkCap:\s+Port #(\d+), Speed ([\d.]+GT/s|unknown), Width x(\d+)")
_LNKSTA = re.compile(r"^LnkSta:\s+Speed ([\d.]+GT/s|unknown)(?: \((?:ok|downgraded|overdriven)\))?, "
                     r"Width x(\d+)")
_ACS = re.compile(r"^(ACSCap|ACSCtl):\s+((?:[A-Za-z]+[+-]\s*){7})$")


class PciLink(BaseModel):
    """A link's speed (GT/s; None when lspci says ``unknown``) and width (lanes)."""

    speed_gts: float | None
    width: int


class PciDevice(BaseModel):
    """One device block of ``lspci -vvv``.

    Attributes:
        bdf: ``0000:0b:00.0`` (domain 0000 added when lspci omitted it).  kind: the class text
            (``PCI bridge``, ``3D controller``).  name: vendor and device as printed.
        primary / secondary / subordinate: a bridge's bus numbers.
        express: the PCIe port type (``Endpoint``, ``Downstream Port``, ``Root Port``...).
        acs_cap / acs_ctl: ACS flags as printed (``SrcValid+ TransBlk- ...``), None without ACS.
        max_payload / max_read_req: DevCtl values in bytes.
        link_cap / link_sta: LnkCap and LnkSta.  access_denied: capabilities unreadable (not root).
        driver: ``Kernel driver in use``.
    """

    bdf: str
    kind: str
    name: str
    primary: int | None = None
    secondary: int | None = None
    subordinate: int | None = None
    express: str | None = None
    acs_cap: str | None = None
    acs_ctl: str | None = None
    max_payload: int | None = None
    max_read_req: int | None = None
    link_cap: PciLink | None = None
    link_sta: PciLink | None = None
    access_denied: bool = False
    driver: str | None = None

    @property
    def bus(self) -> str:
        """``0000:0b``: domain and bus, to match a bridge's ``secondary``."""
        return self.bdf.rsplit(":", 1)[0]

    def acs_redirects(self) -> list[str]:
        """The redirect controls that are on (``["ReqRedir", "CmpltRedir"]``); [] without ACS."""
        flags = acs_flags(self.acs_ctl) if self.acs_ctl else {}
        return [f for f in REDIRECT_FLAGS if flags.get(f)]


class Lspci(Parsed):
    """Every device block of one ``lspci -vvv`` output, in printed order."""

    devices: list[PciDevice] = []

    def device(self, bdf: str) -> PciDevice | None:
        """The device at ``bdf`` (``0000:0c:00.0`` or ``0c:00.0``), or None."""
        want = bdf if bdf.count(":") == 2 else "0000:" + bdf
        return next((d for d in self.devices if d.bdf == want.lower()), None)

    def parent(self, dev: PciDevice) -> PciDevice | None:
        """The bridge whose secondary bus is ``dev``'s bus (the port directly above it), or None."""
        dom, bus = dev.bus.split(":")
        return next((b for b in self.devices if b.secondary == int(bus, 16) and b.bdf.startswith(dom + ":")), None)

    def children(self, bridge: PciDevice) -> list[PciDevice]:
        """Devices on ``bridge``'s secondary bus."""
        if bridge.secondary is None:
            return []
        bus = f"{bridge.bdf.split(':')[0]}:{bridge.secondary:02x}"
        return [d for d in self.devices if d.bus == bus]


def acs_flags(text: str) -> dict[str, bool]:
    """``SrcValid+ TransBlk- ...`` -> ``{"SrcValid": True, "TransBlk": False, ...}`` (the 7 ACS controls).

    Raises:
        ValueError: not the seven flags in lspci's order.
    """
    parts = text.split()
    if len(parts) != 7 or [p[:-1] for p in parts] != list(ACS_FLAGS) or any(p[-1] not in "+-" for p in parts):
        raise ValueError(f"{text!r} is not the 7 ACS flags {' '.join(f + '+|-' for f in ACS_FLAGS)}")
    return {p[:-1]: p[-1] == "+" for p in parts}


def acs_word(text: str) -> int:
    """The ACS Control register value of a flags text (``SrcValid+ ... ReqRedir+ ...`` -> ``0x001d``)."""
    return sum(1 << i for i, name in enumerate(ACS_FLAGS) if acs_flags(text)[name])


def _speed(text: str) -> float | None:
    return None if text == "unknown" else float(text.removesuffix("GT/s"))


def line_fields(line: str) -> dict:
    """The :class:`PciDevice` fields one detail line holds (``{}`` for the many lines fabtune does not
    need), e.g. ``MaxPayload 256 bytes, MaxReadReq 4096 bytes`` -> ``{"max_payload": 256,
    "max_read_req": 4096}``. Works on grepped lines too."""
    s = line.strip()
    if m := _BUS.match(s):
        return dict(zip(("primary", "secondary", "subordinate"), (int(x, 16) for x in m.groups())))
    if m := _EXPRESS.match(s):
        return {"express": m.group(2)}
    if s == "Capabilities: <access denied>":
        return {"access_denied": True}
    if m := _MRRS.match(s):
        return {"max_payload": int(m.group(1)), "max_read_req": int(m.group(2))}
    if m := _LNKCAP.match(s):
        return {"link_cap": PciLink(speed_gts=_speed(m.group(2)), width=int(m.group(3)))}
    if m := _LNKSTA.match(s):
        return {"link_sta": PciLink(speed_gts=_speed(m.group(1)), width=int(m.group(2)))}
    if m := _ACS.match(s):
        return {"acs_cap" if m.group(1) == "ACSCap" else "acs_ctl": " ".join(m.group(2).split())}
    if s.startswith("Kernel driver in use:"):
        return {"driver": s.split(":", 1)[1].strip()}
    return {}


@parser("lspci-vvv", "lspci")
def parse_lspci(text: str) -> Lspci:
    """Parse ``lspci -vvv`` output (one or many devices).

    Raises:
        ParseError: no device header line, an indented line before the first header, or an
            ``ACSCap``/``ACSCtl`` line that is not the seven flags.
    """
    devices: list[dict] = []
    for no, line in enumerate(clean_lines(text), start=1):
        if not line.strip() or is_prompt(line):
            continue
        if not line[0].isspace():
            m = _HEAD.match(line.replace("**", ""))
            if not m:
                raise ParseError("lspci", no, "a device line 'BB:DD.F class: name'", line)
            dom, bus, slot, func, kind, name = m.groups()
            devices.append({"bdf": f"{(dom or '0000').lower():0>4}:{bus}:{slot}.{func}".lower(), "kind": kind,
                            "name": name})
            continue
        if not devices:
            raise ParseError("lspci", no, "a device line before its details", line)
        s = line.strip()
        if s.startswith(("ACSCap:", "ACSCtl:")) and not _ACS.match(s):
            raise ParseError("lspci", no, "ACSCap:/ACSCtl: and the 7 ACS flags", line)
        devices[-1].update(line_fields(s))
    if not devices:
        raise ParseError("lspci", 0, "at least one device line")
    result = Lspci(tool="lspci", devices=[PciDevice(**d) for d in devices])
    result.findings = _findings(result)
    return result


def link_below(dev: PciDevice) -> bool:
    """An endpoint's or upstream port's link trained below its capability (speed or width)."""
    if not dev.link_cap or not dev.link_sta or dev.express in ("Root Port", "Downstream Port"):
        return False
    cap, sta = dev.link_cap, dev.link_sta
    slower = cap.speed_gts is not None and sta.speed_gts is not None and sta.speed_gts < cap.speed_gts
    return slower or sta.width < cap.width


def _gts(link: PciLink) -> str:
    return "unknown speed" if link.speed_gts is None else f"{link.speed_gts:g}GT/s"


def _findings(result: Lspci) -> list[Finding]:
    out = []
    for d in result.devices:
        if d.access_denied:
            out.append(Finding(code="lspci-access-denied", severity="warn", subject=d.bdf,
                               message=f"{d.bdf}: capabilities not readable (lspci without root): ACS, "
                                       "MaxReadReq and link state unknown"))
        if d.acs_redirects():
            out.append(Finding(code="acs-redirect", severity="warn", subject=d.bdf,
                               message=f"{d.bdf}: ACS {', '.join(d.acs_redirects())} on: peer-to-peer "
                                       "traffic below this port is sent up to the root complex"))
        if link_below(d):
            cap, sta = d.link_cap, d.link_sta
            out.append(Finding(code="pcie-link-degraded", severity="warn", subject=d.bdf,
                               message=f"{d.bdf}: link {_gts(sta)} x{sta.width} below its capability "
                                       f"{_gts(cap)} x{cap.width}"))
    return out
