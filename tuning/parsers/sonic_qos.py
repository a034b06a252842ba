"""Parsers for SONiC's RoCE QoS settings (issue 21): ``ecnconfig -l`` / ``show ecn`` (WRED and ECN
profiles, ``ecnconfig -q`` queue status) and CONFIG_DB as JSON (``show runningconfiguration all``,
``sonic-cfggen -d --print-data``, ``/etc/sonic/config_db.json``).

Formats (shared/cases/cli/INDEX-switch.md):
- ``ecnconfig``: shared/cases/cli/sonic__ecnconfig_l_show_ecn_q.txt; sonic-net/sonic-utilities
  scripts/ecnconfig, tests/ecn_input/ecn_test_vectors.py, doc/Command-Reference.md (``show ecn``);
  the ``Invalid gmin ...`` error from sonic-net/sonic-utilities#579. One ``Profile: NAME`` block per
  profile: a borderless tabulate table (ruler, ``field  value`` rows in redis hash order, ruler).
- CONFIG_DB: shared/cases/cli/sonic__config_db_json_roce_qos_tables.txt; sonic-utilities
  tests/qos_config_input/config_qos.json, tests/mock_tables/config_db.json. ``TABLE -> key -> {field:
  "string"}``; multi-part keys joined by ``|`` (``Ethernet0|3-4``); a reference is a plain name
  (``AZURE``, 202211 on) or ``[TABLE|name]`` (older images). Read with :mod:`json`.

Units: thresholds and buffer sizes in bytes, drop / mark probabilities in percent, MTU in bytes,
PFC watchdog times in milliseconds.
"""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, ValidationError

from tuning.errors import ParseError
from tuning.parsers.base import Finding, Parsed, clean_lines, parser
from tuning.parsers.sonic import is_ruler, mtu_mismatch, segments, split_cells
from tuning.parsers.text import is_prompt

# ---------------------------------------------------------------- WRED / ECN profiles


class WredProfile(BaseModel):
    """A WRED_PROFILE entry, from ``ecnconfig -l`` or CONFIG_DB. Thresholds in bytes, drop
    probabilities in percent; ``ecn``: ``ecn_none``, ``ecn_green``, ..., ``ecn_all``; ``other``: any
    field this model does not name, as printed."""

    name: str
    ecn: str | None = None
    green_min_threshold: int | None = None
    green_max_threshold: int | None = None
    green_drop_probability: int | None = None
    yellow_min_threshold: int | None = None
    yellow_max_threshold: int | None = None
    yellow_drop_probability: int | None = None
    red_min_threshold: int | None = None
    red_max_threshold: int | None = None
    red_drop_probability: int | None = None
    wred_green_enable: bool | None = None
    wred_yellow_enable: bool | None = None
    wred_red_enable: bool | None = None
    other: dict[str, str] = {}


def wred_profile(tool: str, no: int, name: str, fields: dict[str, str]) -> WredProfile:
    """A :class:`WredProfile` from its fields as strings (``"1048576"``, ``"true"``).

    Raises:
        ParseError: a threshold or probability that is not an integer, an enable not true/false.
    """
    named = {k: v for k, v in fields.items() if k in WredProfile.model_fields and k not in ("name", "other")}
    try:
        return WredProfile(name=name, other={k: v for k, v in fields.items() if k not in named}, **named)
    except ValidationError as exc:
        raise ParseError(tool, no, f"WRED profile {name!r}: integer thresholds and probabilities, true/false enables",
                         str(exc.errors()[0].get("input"))) from exc


class EcnQueueStatus(BaseModel):
    """One ``queue N: on|off`` line of ``ecnconfig -q``; ``ports`` as ``-vv`` lists them (None: not listed)."""

    queue: int
    on: bool
    ports: list[str] | None = None


class SonicEcnConfig(Parsed):
    """``ecnconfig -l`` / ``show ecn`` (profiles by name), ``ecnconfig -q`` (queue ECN status) and
    ``config ecn`` errors (also ``ecn_config_error`` findings), from one output or a transcript of them."""

    profiles: dict[str, WredProfile] = {}
    queues: list[EcnQueueStatus] = []
    errors: list[str] = []


_ECN_ERROR = re.compile(r"(Invalid \w+.*|Exception caught:.*|Error: .*)")
_QUEUE_STATUS = re.compile(r"(?:(\S+) )?queue (\d+): (on|off)")


@parser("sonic-ecnconfig", "sonic-show-ecn")
def parse_sonic_ecnconfig(text: str) -> SonicEcnConfig:
    """Parse ``ecnconfig -l`` / ``show ecn`` / ``ecnconfig -q Q [-vv]`` (formats: the module docstring).
    Field order within a profile is free (redis hash order); values right-aligned only in numeric columns."""
    tool = "sonic-ecnconfig"
    result = SonicEcnConfig(tool=tool)
    name, fields, rulers, start = None, {}, 0, 0
    for no, line in enumerate(clean_lines(text, expand_tabs=True), 1):
        s = line.strip()
        status = _QUEUE_STATUS.fullmatch(s)
        if not s or is_prompt(line) or s == "ECN status:":
            continue
        if s.startswith("Profile:") and name is None:
            name, fields, rulers, start = s[len("Profile:"):].strip(), {}, 0, no
        elif name is not None and is_ruler(line):
            rulers += 1
            if rulers == 2:
                result.profiles[name] = wred_profile(tool, start, name, fields)
                name = None
        elif name is not None and rulers == 1 and len(cells := split_cells(line)) == 2:
            fields[cells[0]] = cells[1]
        elif name is None and status:
            result.queues.append(EcnQueueStatus(queue=int(status[2]), on=status[3] == "on",
                                                ports=status[1].split(",") if status[1] else None))
        elif name is None and _ECN_ERROR.fullmatch(s):
            result.errors.append(s)
        else:
            raise ParseError(tool, no, "'Profile: NAME', a ruler, 'field  value' rows, 'queue N: on|off' or an error", line)
    if name is not None:
        raise ParseError(tool, start, f"the closing ruler of profile {name!r}")
    if not result.profiles and not result.queues and not result.errors:
        raise ParseError(tool, 0, "'Profile: NAME' blocks or 'queue N: on|off' lines")
    if result.errors:
        result.findings.append(Finding(code="ecn_config_error", severity="error", message=" / ".join(result.errors)))
    return result


# ---------------------------------------------------------------- CONFIG_DB


class BufferProfile(BaseModel):
    """A BUFFER_PROFILE entry; sizes in bytes (``dynamic_th`` is the alpha exponent, not a size);
    ``lossless``: it has ``xoff`` headroom (the ``pg_lossless_<speed>_<cable>_profile`` shape)."""

    name: str
    pool: str | None = None
    size: int | None = None
    xon: int | None = None
    xoff: int | None = None
    dynamic_th: int | None = None
    static_th: int | None = None

    @property
    def lossless(self) -> bool:
        """True when the profile reserves ``xoff`` headroom."""
        return self.xoff is not None


class SonicPortQos(BaseModel):
    """One port's RoCE QoS as CONFIG_DB sets it, references resolved to names.

    Attributes:
        mtu: PORT|<port> mtu, bytes. pfc_enable: PORT_QOS_MAP pfc_enable (priorities).
        dscp_to_tc_map: the DSCP_TO_TC_MAP the port uses: its own, else PORT_QOS_MAP|global's.
        dscp_to_tc: that map's content, the EFFECTIVE DSCP -> traffic class of the port.
        queue_wred: queue -> WRED_PROFILE name (QUEUE|<port>|<q> wred_profile).
        buffer_pg: PG range as keyed (``3-4``) -> BUFFER_PROFILE name. lossless_pgs: PGs whose profile has xoff.
        pfc_wd: the PFC_WD|<port> fields (action; detection_time, restoration_time in ms).
    """

    port: str
    mtu: int | None = None
    pfc_enable: list[int] = []
    dscp_to_tc_map: str | None = None
    dscp_to_tc: dict[int, int] = {}
    queue_wred: dict[int, str] = {}
    buffer_pg: dict[str, str] = {}
    lossless_pgs: list[int] = []
    pfc_wd: dict[str, str] = {}


class SonicConfigDb(Parsed):
    """The RoCE QoS tables of a CONFIG_DB JSON (formats: the module docstring).

    Attributes:
        ports: per port (PORT, PORT_QOS_MAP, QUEUE, BUFFER_PG, PFC_WD keys), in PORT order.
        dscp_to_tc_maps: every DSCP_TO_TC_MAP by name. wred_profiles, buffer_profiles: by name.
        pfc_wd_poll_interval: PFC_WD|GLOBAL POLL_INTERVAL, ms. metadata: DEVICE_METADATA|localhost.
    """

    ports: list[SonicPortQos]
    dscp_to_tc_maps: dict[str, dict[int, int]] = {}
    wred_profiles: dict[str, WredProfile] = {}
    buffer_profiles: dict[str, BufferProfile] = {}
    pfc_wd_poll_interval: int | None = None
    metadata: dict[str, str] = {}


def _config_db_json(tool: str, text: str) -> dict[str, dict[str, dict[str, object]]]:
    """The CONFIG_DB object of ``text`` (a bare JSON file, or one command's output in a transcript)."""
    body = [(no, ln) for _, lines in segments(text) for no, ln in lines if ln.strip()]
    if not body or not body[0][1].lstrip().startswith("{"):
        raise ParseError(tool, body[0][0] if body else 0, "a CONFIG_DB JSON object", body[0][1] if body else "")
    try:
        doc = json.loads("\n".join(ln for _, ln in body))
    except json.JSONDecodeError as exc:
        raise ParseError(tool, body[0][0] + exc.lineno - 1, f"valid JSON ({exc.msg})") from exc
    for table, keys in doc.items():
        if not (isinstance(keys, dict) and all(isinstance(f, dict) and all(
                isinstance(v, (str, list)) for v in f.values()) for f in keys.values())):
            raise ParseError(tool, 0, f"TABLE -> key -> {{field: string}}, not so in {table!r}")
    return doc


def _ref(value: object, table: str) -> str | None:
    """A CONFIG_DB reference as a name: ``[TABLE|name]`` (before 202211) or ``name``."""
    if not isinstance(value, str) or not value:
        return None
    m = re.fullmatch(r"\[([A-Z_]+)\|(.+)\]", value)
    return (m[2] if m[1] == table else value) if m else value


def _ints(tool: str, table: str, fields: dict[str, object]) -> dict[int, int]:
    try:
        return {int(k): int(str(v)) for k, v in fields.items()}
    except ValueError as exc:
        raise ParseError(tool, 0, f"{table}: integer keys and values", str(fields)[:120]) from exc


def _keyed(table: dict[str, dict[str, object]]) -> list[tuple[str, str, dict[str, object]]]:
    """``(port, rest, fields)`` for every ``PORT[,PORT...]|rest`` key (old multi-port keys expanded)."""
    out = []
    for key, fields in table.items():
        ports, _, rest = key.partition("|")
        out += [(port, rest, fields) for port in ports.split(",")]
    return out


def _range(raw: str) -> list[int]:
    lo, _, hi = raw.partition("-")
    return list(range(int(lo), int(hi or lo) + 1)) if lo.isdigit() and (hi or lo).isdigit() else []


@parser("sonic-config-db")
def parse_sonic_config_db(text: str) -> SonicConfigDb:
    """Parse CONFIG_DB JSON into its RoCE QoS (formats, units: the module docstring). Findings:
    ``mtu_mismatch`` among PORT MTUs, ``dangling_reference`` (a map or profile named but absent),
    ``pfc_without_lossless_pg`` (a PFC priority without a lossless BUFFER_PG on a port that has PGs)."""
    tool = "sonic-config-db"
    db = _config_db_json(tool, text)
    if not {"PORT", "PORT_QOS_MAP"} & set(db):
        raise ParseError(tool, 0, "a CONFIG_DB with a PORT or PORT_QOS_MAP table")
    maps = {n: _ints(tool, "DSCP_TO_TC_MAP", f) for n, f in db.get("DSCP_TO_TC_MAP", {}).items()}
    wred = {n: wred_profile(tool, 0, n, {k: str(v) for k, v in f.items()}) for n, f in db.get("WRED_PROFILE", {}).items()}
    try:
        buffers = {n: BufferProfile(name=n, **{k: v for k, v in f.items() if k in BufferProfile.model_fields})
                   for n, f in db.get("BUFFER_PROFILE", {}).items()}
    except ValidationError as exc:
        raise ParseError(tool, 0, "BUFFER_PROFILE sizes in bytes (integers)", str(exc.errors()[0].get("input"))) from exc
    ports = list(_ports(db, maps, buffers).values())
    result = SonicConfigDb(tool=tool, ports=ports, dscp_to_tc_maps=maps, wred_profiles=wred,
                           buffer_profiles=buffers, metadata=db.get("DEVICE_METADATA", {}).get("localhost", {}))
    poll = db.get("PFC_WD", {}).get("GLOBAL", {}).get("POLL_INTERVAL")
    result.pfc_wd_poll_interval = int(str(poll)) if str(poll).isdigit() else None
    tables = {"DSCP_TO_TC_MAP": maps, "WRED_PROFILE": wred, "BUFFER_PROFILE": buffers}
    result.findings = (mtu_mismatch({p.port: p.mtu for p in ports}, "CONFIG_DB PORT")
                       + _dangling(ports, tables) + _pfc_without_pg(ports))
    return result


def _ports(db: dict, maps: dict[str, dict[int, int]], buffers: dict[str, BufferProfile]) -> dict[str, SonicPortQos]:
    qos = db.get("PORT_QOS_MAP", {})
    default_map = _ref(qos.get("global", {}).get("dscp_to_tc_map"), "DSCP_TO_TC_MAP")
    names = [*db.get("PORT", {}), *(p for p in qos if p != "global")]
    ports = {p: SonicPortQos(port=p) for p in dict.fromkeys(names)}
    for name, port in ports.items():
        mtu = db.get("PORT", {}).get(name, {}).get("mtu")
        port.mtu = int(mtu) if isinstance(mtu, str) and mtu.isdigit() else None
        fields = qos.get(name, {})
        port.pfc_enable = [int(x) for x in str(fields.get("pfc_enable", "")).split(",") if x.strip().isdigit()]
        port.dscp_to_tc_map = _ref(fields.get("dscp_to_tc_map"), "DSCP_TO_TC_MAP") or default_map
        port.dscp_to_tc = maps.get(port.dscp_to_tc_map or "", {})
        port.pfc_wd = {k: str(v) for k, v in db.get("PFC_WD", {}).get(name, {}).items()}
    for name, rest, fields in _keyed(db.get("QUEUE", {})):
        if name in ports and fields.get("wred_profile"):
            for q in _range(rest):
                ports[name].queue_wred[q] = _ref(fields["wred_profile"], "WRED_PROFILE") or ""
    for name, rest, fields in _keyed(db.get("BUFFER_PG", {})):
        if name in ports and (profile := _ref(fields.get("profile"), "BUFFER_PROFILE")):
            ports[name].buffer_pg[rest] = profile
            if profile in buffers and buffers[profile].lossless:
                ports[name].lossless_pgs += _range(rest)
    return ports


def _dangling(ports: list[SonicPortQos], tables: dict[str, dict]) -> list[Finding]:
    out = []
    for p in ports:
        refs = [("DSCP_TO_TC_MAP", p.dscp_to_tc_map), *(("WRED_PROFILE", w) for w in p.queue_wred.values()),
                *(("BUFFER_PROFILE", b) for b in p.buffer_pg.values())]
        out += [Finding(code="dangling_reference", severity="error", subject=p.port,
                        message=f"{p.port}: {table} {name!r} is referenced but not defined")
                for table, name in dict.fromkeys(refs) if name and name not in tables[table]]
    return out


def _pfc_without_pg(ports: list[SonicPortQos]) -> list[Finding]:
    return [Finding(code="pfc_without_lossless_pg", severity="warn", subject=p.port, message=(
        f"{p.port}: PFC on priority {prio} but no lossless BUFFER_PG (xoff headroom) for PG {prio}"))
        for p in ports if p.buffer_pg for prio in p.pfc_enable if prio not in p.lossless_pgs]
