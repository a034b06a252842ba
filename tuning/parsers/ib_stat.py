"""Parser for infiniband-diags ``ibstat`` (rdma-core ``infiniband-diags/ibstat.c``), ``fabtune parse ibstat``.

ibstat prints what libibumad reads from ``/sys/class/infiniband`` (the kernel's sysfs, read through
:mod:`tuning.parsers.ib_sysfs` by the node itself): one block per CA, its ports indented one more tab::

    CA 'mlx5_0'
    \tCA type: MT4129
    \tNumber of ports: 1
    \tFirmware version: 28.39.2048
    \tHardware version: 0
    \tNode GUID: 0x0c42a10300000100
    \tSystem image GUID: 0x0c42a10300000100
    \tPort 1:
    \t\tState: Active
    \t\tPhysical state: LinkUp
    \t\tRate: 200
    \t\tBase lid: 2
    \t\tLMC: 0
    \t\tSM lid: 1
    \t\tCapability mask: 0x0050c048
    \t\tPort GUID: 0x0c42a10300000101
    \t\tLink layer: InfiniBand

``Rate`` is the port's rate in Gb/s without its width and speed (the sysfs ``rate``'s first number). A
copy pasted from a terminal may carry spaces for the tabs; ``ibstat CA PORT`` prints one port without
indent after ``CA: 'mlx5_0'``. Samples: ``tests/ib/cases/ibstat__*.txt`` (the real ibstat over an IB lab
node's sysfs, and a ConnectX-6 host's output as NVIDIA/nccl-tests issue 128 quotes it).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from tuning.errors import InputError, ParseError
from tuning.parsers.base import Finding, Parsed, clean_lines, context_findings, parser, require_text

__all__ = ["IbStat", "IbStatCa", "IbStatPort", "parse_ibstat"]

_CA = re.compile(r"^CA:? '([^']+)'$")
_PORT = re.compile(r"^Port (\d+):$")
_FIELD = re.compile(r"^([A-Za-z][A-Za-z ]*): ?(.*)$")
_CA_KEYS = {"CA type": "ca_type", "Number of ports": "ports_count", "Firmware version": "fw_ver",
            "Hardware version": "hw_ver", "Node GUID": "node_guid", "System image GUID": "sys_image_guid"}
_PORT_KEYS = {"State": "state", "Physical state": "phys_state", "Rate": "rate", "Base lid": "base_lid", "LMC": "lmc",
              "SM lid": "sm_lid", "Capability mask": "cap_mask", "Port GUID": "port_guid", "Link layer": "link_layer"}


class IbStatPort(BaseModel):
    """One ``Port N:`` block; ``rate`` in Gb/s (``200``; ``2.5``), LIDs as integers."""

    port: int
    state: str | None = None
    phys_state: str | None = None
    rate: float | None = None
    base_lid: int | None = None
    lmc: int | None = None
    sm_lid: int | None = None
    cap_mask: str | None = None
    port_guid: str | None = None
    link_layer: str | None = None


class IbStatCa(BaseModel):
    """One ``CA '<name>'`` block (device fields as printed; empty when sysfs lacked the file)."""

    name: str
    ca_type: str | None = None
    ports_count: str | None = None
    fw_ver: str | None = None
    hw_ver: str | None = None
    node_guid: str | None = None
    sys_image_guid: str | None = None
    ports: list[IbStatPort] = Field(default_factory=list)


class IbStat(Parsed):
    """An ``ibstat`` run: its CAs in printed order."""

    cas: list[IbStatCa] = Field(default_factory=list)

    def port(self, ca: str, port: int) -> IbStatPort:
        """Port ``port`` of CA ``ca``. Raises KeyError naming what was printed."""
        for c in self.cas:
            for p in c.ports:
                if c.name == ca and p.port == port:
                    return p
        raise KeyError(f"no {ca} port {port} in ibstat's output; printed: {', '.join(c.name for c in self.cas)}")


def _set_port(port: IbStatPort, key: str, value: str, no: int, line: str) -> None:
    attr = _PORT_KEYS[key]
    if attr == "rate" and not re.fullmatch(r"\d+(\.5)?", value):
        raise ParseError("ibstat", no, "'Rate: <Gb/s>' (200, 2.5)", line)
    if attr in ("base_lid", "lmc", "sm_lid") and not value.isdigit():
        raise ParseError("ibstat", no, f"a number after '{key}:'", line)
    typed = float(value) if attr == "rate" else int(value) if attr in ("base_lid", "lmc", "sm_lid") else value
    setattr(port, attr, typed)


def _line(res: IbStat, no: int, line: str) -> None:
    s = line.strip()
    if m := _CA.match(s):
        res.cas.append(IbStatCa(name=m.group(1)))
    elif not res.cas:
        raise ParseError("ibstat", no, "a 'CA '<name>'' line first", line)
    elif m := _PORT.match(s):
        res.cas[-1].ports.append(IbStatPort(port=int(m.group(1))))
    elif (m := _FIELD.match(s)) and m.group(1) in _CA_KEYS and not res.cas[-1].ports:
        setattr(res.cas[-1], _CA_KEYS[m.group(1)], m.group(2).strip() or None)
    elif m and m.group(1) in _PORT_KEYS and res.cas[-1].ports:
        _set_port(res.cas[-1].ports[-1], m.group(1), m.group(2).strip(), no, line)
    else:
        raise ParseError("ibstat", no, "'Port N:' or a 'Key: value' line of ibstat", line)


def _findings(res: IbStat) -> list[Finding]:
    out = []
    for ca in res.cas:
        for p in ca.ports:
            if p.link_layer != "InfiniBand":
                continue
            subject = f"{ca.name} port {p.port}"
            if p.state != "Active" or p.phys_state != "LinkUp":
                out.append(Finding(code="ib_port_down", severity="error", subject=subject,
                                   message=f"{subject}: {p.state}/{p.phys_state}, not Active/LinkUp"))
            elif p.sm_lid == 0:
                out.append(Finding(code="ib_no_sm", severity="error", subject=subject,
                                   message=f"{subject}: SM lid 0: no subnet manager configured it"))
    return out


@parser("ibstat")
def parse_ibstat(text: str) -> IbStat:
    """Parse ``ibstat`` (every CA, or ``ibstat CA [PORT]``).

    Findings: per InfiniBand port, ``ib_port_down`` (error) when not Active/LinkUp, else ``ib_no_sm``
    (error) when its SM lid is 0. With ``--context rate=GBPS``: ``ib_rate_low`` per Active IB port below it.

    Raises:
        ParseError: no CA line, a port of no CA, a line that is not ibstat's, or a CA whose port printed
            no State, Physical state or Rate (output cut short).
    """
    require_text("ibstat", text)
    res = IbStat(tool="ibstat")
    for no, line in enumerate(clean_lines(text), 1):
        if line.strip():
            _line(res, no, line)
    if not res.cas:
        raise ParseError("ibstat", 0, "a 'CA '<name>'' block")
    for ca in res.cas:
        for p in ca.ports:
            if None in (p.state, p.phys_state, p.rate):
                raise ParseError("ibstat", 0, f"State, Physical state and Rate of {ca.name} port {p.port} (output cut short?)")
    res.findings = _findings(res)
    return res


@context_findings("ibstat", keys=("rate",))
def _rate_findings(res: Parsed, context: dict[str, str]) -> list[Finding]:
    """``rate`` (the intent's Gb/s, ``200``): one ``ib_rate_low`` per Active InfiniBand port below it."""
    assert isinstance(res, IbStat)
    raw = context["rate"]
    if not re.fullmatch(r"\d+(\.5)?", raw):
        raise InputError("--context", "rate", f"{raw!r}: the port rate in Gb/s ibstat prints, like 200 or 2.5")
    want, out = float(raw), list(res.findings)
    for ca in res.cas:
        for p in ca.ports:
            if p.link_layer == "InfiniBand" and p.state == "Active" and (p.rate or 0) < want:
                out.append(Finding(code="ib_rate_low", severity="error", subject=f"{ca.name} port {p.port}",
                                   message=f"{ca.name} port {p.port}: Rate {p.rate:g} Gb/s, below {want:g}"))
    return out
