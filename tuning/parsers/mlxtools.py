"""Parsers for the NVIDIA firmware tools (MFT / mstflint): ``mlxconfig`` (``mstconfig``) query and set,
and ``mlxfwmanager --query`` (issue 3).

Formats: mstflint ``mlxconfig/mlxcfg_ui.cpp`` (``printOpening``, ``printConfHeader``, ``printSingleParam``,
``setDevCfg``, ``askUser``), NVIDIA MFT user manual; samples in ``shared/cases/mlxconfig__*`` and
``mlxfwmanager__*``, set transcripts as published (mstflint README, vendor and user guides).

mlxconfig prints each parameter as ``%s%s     %-Ns`` (``*`` when next boot differs from default or
current, ``RO`` for a read-only parameter) then each value padded to the column width plus a space.
Older releases pad values to 15 (``%-15s ``, the narrow layout), newer ones to 20 or more (the wide
layout) and may misalign the header; a value as wide as its column is followed by one space only.
So rows are split on any whitespace and the columns are taken, in order, from the header.
A set prints the same table with ``Next Boot`` and ``New`` columns (``Default`` and ``Current`` too
with ``-e``), then::

     Apply new Configuration? (y/n) [n] : y
    Applying... Done!
    -I- Please reboot machine to load new configurations.

The ``-I-`` line is printed after EVERY applied set, also when each New value already equals Next
Boot (recorded transcripts in ``tests/parsers/cases/mlxconfig__set_*``): whether a reset is needed is
decided from the value columns only (:attr:`Mlxconfig.reset_needed`), never from that line.
Values compare as mlxconfig reads them (:func:`mlx_same`): ``True`` = ``True(1)`` = ``1``,
``ETH`` = ``ETH(2)``, names case-insensitive (mstflint ``EnumParamValue::parseValue``).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, computed_field

from tuning.errors import ParseError
from tuning.parsers.base import Finding, Parsed, ToolFailure, clean_lines, parser
from tuning.parsers.text import is_prompt, placeholder

__all__ = ["FwDevice", "MlxDevice", "MlxParam", "Mlxconfig", "Mlxfwmanager", "mlx_input", "mlx_same", "mlx_value",
           "parse_mlxconfig", "parse_mlxfwmanager"]

# ---------------------------------------------------------------- mlxconfig

_VALUE = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)\((?P<num>[0-9]+)\)")


def mlx_value(text: str) -> tuple[str | None, int | None]:
    """``(name, number)`` of a value as mlxconfig prints or takes it: ``True(1)`` -> ``("true", 1)``,
    ``ETH`` -> ``("eth", None)``, ``16`` / ``0x10`` -> ``(None, 16)``; names lower-cased (mlxconfig
    compares them with ``strcasecmp``)."""
    t = str(text).strip()
    if m := _VALUE.fullmatch(t):
        return m["name"].lower(), int(m["num"])
    try:
        return None, int(t, 0)
    except ValueError:
        return t.lower(), None


def mlx_input(value: str) -> str:
    """A value as ``mlxconfig set`` takes it: printed ``False(0)`` -> ``False`` (mstflint parses a name
    or a number, not both); other values pass unchanged (stripped)."""
    m = _VALUE.fullmatch(str(value).strip())
    return m["name"] if m else str(value).strip()


def mlx_same(have: str | None, want: str | None) -> bool:
    """Whether two mlxconfig values are the same setting: numbers compare as numbers, names as names
    (``True(1)`` = ``True`` = ``1``, ``ETH(2)`` = ``eth``; ``16`` != ``True``). None (N/A) equals only None."""
    if have is None or want is None:
        return have is None and want is None
    (hn, hv), (wn, wv) = mlx_value(have), mlx_value(want)
    if hv is not None and wv is not None:
        return hv == wv
    return hn is not None and hn == wn


class MlxParam(BaseModel):
    """One mlxconfig parameter; values as printed (``ROCE_ENABLE(2)``, ``Array[0..7]``).

    None = column not printed, or ``N/A``. ``new`` is the value a set asked for (``New`` column).
    ``starred``: printed with ``*``; ``read_only``: printed with ``RO``.
    """

    name: str
    default: str | None = None
    current: str | None = None
    next_boot: str | None = None
    new: str | None = None
    starred: bool = False
    read_only: bool = False

    @property
    def pending(self) -> bool:
        """True when Current differs from Next Boot: a reboot or ``mlxfwreset`` is needed."""
        if self.current is None or self.next_boot is None:
            return False
        return not mlx_same(self.current, self.next_boot)

    @property
    def set_changes(self) -> bool:
        """A set only: True when its New value differs from the Next Boot value it replaces."""
        return self.new is not None and not mlx_same(self.new, self.next_boot)

    @property
    def reset_needed(self) -> bool:
        """Whether this parameter needs a reboot or ``mlxfwreset`` to hold its (new) Next Boot value.

        Query: Current differs from Next Boot. Set: the value after the set (New) differs from Current
        when Current was printed (``-e``), else the set changed Next Boot (without ``-e`` a value left
        pending by an earlier set is not visible).
        """
        if self.new is None:
            return self.pending
        if self.current is not None:
            return not mlx_same(self.current, self.new)
        return self.set_changes


class MlxDevice(BaseModel):
    """One ``Device #N`` block: ``info`` holds the header keys (``Device type``, ``Name``, ``Device``)."""

    info: dict[str, str] = {}
    params: dict[str, MlxParam] = {}


class Mlxconfig(Parsed):
    """``mlxconfig [-e] -d DEV q`` or ``mlxconfig -d DEV [-y] set KEY=VAL ...`` result.

    Attributes:
        command: ``query``, or ``set`` when the table has a ``New`` column.
        answer: the answer echoed after ``Apply new Configuration? (y/n) [n] :`` (``y``/``n``), if any.
        applied: set only: True after ``Applying... Done!``, False when aborted or ``Failed!``.
        messages: ``-I-`` / ``-W-`` lines (``-I- Please reboot machine to load new configurations.``).
    """

    devices: list[MlxDevice]
    command: str = "query"
    answer: str | None = None
    applied: bool | None = None
    messages: list[str] = []

    @computed_field  # type: ignore[prop-decorator]
    @property
    def reset_needed(self) -> list[str]:
        """Names of the parameters that need a reboot or ``mlxfwreset`` (see :attr:`MlxParam.reset_needed`),
        in printed order; an aborted or failed set changed nothing (``[]``). The ``-I- Please reboot``
        line plays no part: the tool prints it after every applied set. In the JSON of ``fabtune parse``."""
        if self.command == "set" and not self.applied:
            return []
        return [p.name for d in self.devices for p in d.params.values() if p.reset_needed]

    @property
    def reboot_required(self) -> bool:
        """Whether any parameter needs a reboot or ``mlxfwreset`` (:attr:`reset_needed` is not empty)."""
        return bool(self.reset_needed)


_MLX_COLS = {"Default": "default", "Current": "current", "Next Boot": "next_boot", "New": "new"}
_NAME = re.compile(r"[A-Za-z0-9_\[\].]+")
_APPLY_Q = re.compile(r"^Apply new Configuration\s*\??\s*\??\s*\(y/n\)\s*\[n\]\s*:\s*(\S*)$")
_APPLYING = re.compile(r"^Applying\.\.\.\s*(Done!|Failed!)?$")
_SKIP = ("The '*' shows", "The 'RO' shows")


def _mlx_param(cols: list[str], no: int, line: str) -> MlxParam:
    s = line.strip()
    starred = s.startswith("*")
    t = s.lstrip("*").split()
    read_only = len(t) > 1 and t[0] == "RO"  # no parameter is called RO: a cut RO row must not shift a column
    t = t[1:] if read_only else t
    if len(t) != len(cols) + 1 or not _NAME.fullmatch(t[0]):
        raise ParseError("mlxconfig", no, f"'[*][RO] PARAM' and {len(cols)} values ({', '.join(cols)})", line)
    values = {_MLX_COLS.get(c, c): placeholder(v) for c, v in zip(cols, t[1:])}
    return MlxParam(name=t[0], starred=starred, read_only=read_only, **values)


class _MlxScan:
    """One pass over the cleaned lines of an mlxconfig output."""

    def __init__(self) -> None:
        self.devices: list[MlxDevice] = []
        self.cols: list[str] | None = None
        self.errors: list[str] = []
        self.messages: list[str] = []
        self.answer: str | None = None
        self.applying: str | None = None  # "" (no result yet), "Done!" or "Failed!"

    def line(self, no: int, line: str) -> None:  # noqa: C901  (one branch per printed line kind)
        s = line.strip()
        if s.startswith("-E-"):
            self.errors.append(s)
        elif s.startswith(("-I-", "-W-")):
            self.messages.append(s)
        elif m := _APPLY_Q.match(s):
            self.answer = m[1] or None
        elif m := _APPLYING.match(s):
            self.applying = m[1] or ""
        elif re.fullmatch(r"Device #\d+:", s):
            self.devices.append(MlxDevice())
            self.cols = None
        elif not self.devices:
            raise ParseError("mlxconfig", no, "'Device #N:'", line)
        elif s.startswith("Configurations:"):
            self.cols = re.findall(r"Next Boot|\S+", s.partition(":")[2])
            if not self.cols or any(c not in _MLX_COLS for c in self.cols):
                raise ParseError("mlxconfig", no, "'Configurations:' then Default/Current/Next Boot/New", line)
        elif self.cols is None and ":" in s:
            k, _, v = s.partition(":")
            self.devices[-1].info[k.strip()] = v.strip()
        elif self.cols:
            p = _mlx_param(self.cols, no, line)
            self.devices[-1].params[p.name] = p
        else:
            raise ParseError("mlxconfig", no, "'Key: value' or 'Configurations:'", line)


def _mlx_failure(scan: _MlxScan) -> ToolFailure | None:
    """Classify mlxconfig's ``-E-`` lines and an aborted or failed set."""
    msg = scan.errors[-1] if scan.errors else ""
    if re.search(r"aborted", msg, re.I) or (scan.answer or "y").lower() not in ("y", "yes"):
        return ToolFailure(kind="aborted", message=msg or f"answered {scan.answer!r}",
                           likely_cause="the 'Apply new Configuration?' prompt was not answered y (use -y in scripts)")
    if not msg:
        return None
    if not scan.devices or re.search(r"no devices found|failed to open device|mst driver|no such device", msg, re.I):
        return ToolFailure(kind="no_rdma_device", message=msg,
                           likely_cause="device not found: wrong -d (PCI address or /dev/mst path) or mst not started")
    return ToolFailure(kind="rejected", message=msg,
                       likely_cause="the firmware refused the configuration (unknown parameter or value, or locked)")


def _mlx_findings(devices: list[MlxDevice], scan: _MlxScan) -> list[Finding]:
    hint = next((m[4:] for m in scan.messages if re.search(r"reboot|power cycle|mlxfwreset", m, re.I)),
                "reboot or mlxfwreset required")
    out = []
    for d in devices:
        for p in d.params.values():
            if p.new is not None and (scan.applying != "Done!" or not p.reset_needed):
                continue  # a set that failed, or whose value is (already) the active one
            if p.new is not None and p.set_changes:
                msg = f"{d.info.get('Device', '?')}: {p.name} {p.next_boot} -> {p.new} set for next boot; {hint}"
            elif p.new is not None:
                msg = f"{d.info.get('Device', '?')}: {p.name} already {p.new} for next boot, {p.current} now; {hint}"
            elif p.pending:
                msg = f"{d.info.get('Device', '?')}: {p.name} {p.current} -> {p.next_boot} at next boot; {hint}"
            else:
                continue
            out.append(Finding(code="mlxconfig_pending_reset", severity="warn", subject=p.name, message=msg))
    return out


@parser("mlxconfig", "mstconfig")
def parse_mlxconfig(text: str) -> Mlxconfig:
    """Parse ``mlxconfig`` query (``q``, ``-e q``; narrow or wide layout) and set (``set K=V``) output.

    Findings: ``mlxconfig_pending_reset`` (warn) per parameter whose Current differs from Next Boot
    (query), or per parameter of an applied set that needs a reset (:attr:`Mlxconfig.reset_needed`:
    none when every New value already equals Next Boot, whatever ``-I-`` line follows). Tool errors:
    ``failure`` with kind ``aborted`` (prompt answered n), ``no_rdma_device`` (no such device) or
    ``rejected`` (set failed).

    Raises:
        ParseError: a line that is none of the above, a table without the header's column count,
            or a set answered y whose ``Applying...`` result is missing (output cut short).
    """
    scan = _MlxScan()
    for no, line in enumerate(clean_lines(text), 1):
        s = line.strip()
        if s and not is_prompt(line) and set(s) != {"-"} and not s.startswith(_SKIP):
            scan.line(no, line)
    command = "set" if any(p.new is not None for d in scan.devices for p in d.params.values()) else "query"
    failure = _mlx_failure(scan)
    if failure is None and (not scan.devices or not any(d.params for d in scan.devices)):
        raise ParseError("mlxconfig", 0, "'Device #N:' and a 'Configurations:' table")
    if command == "set" and failure is None and scan.applying != "Done!":
        raise ParseError("mlxconfig", 0, "'Applying... Done!' after the set table (output cut short?)")
    applied = None if command == "query" else (failure is None and scan.applying == "Done!")
    return Mlxconfig(tool="mlxconfig", devices=scan.devices, command=command, answer=scan.answer, applied=applied,
                     messages=scan.messages, failure=failure,
                     findings=_mlx_findings(scan.devices, scan))


# ---------------------------------------------------------------- mlxfwmanager


class FwDevice(BaseModel):
    """One mlxfwmanager device. ``versions``: component (FW, PXE, UEFI) -> (current, available); N/A = None.

    ``status_kind``: ``update_required``, ``up_to_date``, ``no_image`` (not an error) or ``other``.
    """

    info: dict[str, str | None] = {}
    versions: dict[str, tuple[str | None, str | None]] = {}
    status: str | None = None
    status_kind: str | None = None


class Mlxfwmanager(Parsed):
    """``mlxfwmanager --query`` (or ``mlxup --query``) result."""

    devices: list[FwDevice]


_FW_STATUS = {"update required": "update_required", "up to date": "up_to_date", "no matching image found": "no_image"}


def _fw_line(dev: FwDevice, in_versions: bool, no: int, line: str) -> bool:
    s = line.strip()
    key, sep, val = s.partition(":")
    if key == "Versions":
        return True
    if key == "Status":
        dev.status = val.strip()
        dev.status_kind = _FW_STATUS.get(dev.status.lower(), "other")
        return False
    if sep and re.fullmatch(r"[A-Za-z][A-Za-z ]*", key):
        dev.info[key] = placeholder(val)
        return False
    t = s.split()
    if in_versions and len(t) == 3:
        dev.versions[t[0]] = (placeholder(t[1]), placeholder(t[2]))
        return True
    raise ParseError("mlxfwmanager", no, "'Key: value', a version row or 'Status:'", line)


@parser("mlxfwmanager")
def parse_mlxfwmanager(text: str) -> Mlxfwmanager:
    """Parse ``mlxfwmanager --query``. Findings: ``fw_update_required`` (info) per device that has one."""
    devices: list[FwDevice] = []
    in_versions, errors = False, []
    for no, line in enumerate(clean_lines(text), 1):
        s = line.strip()
        if not s or is_prompt(line) or set(s) == {"-"} or s.startswith("Querying Mellanox devices"):
            continue
        if s.startswith("-E-"):
            errors.append(s)
        elif re.fullmatch(r"Device #\d+:", s):
            devices.append(FwDevice())
        elif not devices:
            raise ParseError("mlxfwmanager", no, "'Device #N:'", line)
        else:
            in_versions = _fw_line(devices[-1], in_versions, no, line)
    if not devices and errors:
        return Mlxfwmanager(tool="mlxfwmanager", devices=[], failure=ToolFailure(
            kind="no_rdma_device", message=errors[-1], likely_cause="no device found, or mst not started"))
    if not devices or any(d.status is None for d in devices):
        raise ParseError("mlxfwmanager", 0, "'Device #N:' blocks each ending in 'Status:'")
    result = Mlxfwmanager(tool="mlxfwmanager", devices=devices)
    for d in devices:
        if d.status_kind == "update_required":
            cur, avail = d.versions.get("FW", (None, None))
            result.findings.append(Finding(code="fw_update_required", severity="info",
                                           subject=d.info.get("PCI Device Name"),
                                           message=f"firmware {cur} -> {avail} available ({d.info.get('PSID')})"))
    return result
