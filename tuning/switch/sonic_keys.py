"""Community SONiC's CONFIG_DB -> the flat setting keys of plans (``port/Ethernet0/mtu = 9216``).

One reading for every source of SONiC configuration, so a plan can only name what the device's own
dry run holds: the rendered candidate (an RFC 6902 JSON patch, ``tuning/templates/sonic/switch.j2``),
``show runningconfiguration all`` (CONFIG_DB as one JSON object, sonic-net/sonic-utilities
doc/Command-Reference.md "show runningconfiguration") and CONFIG_DB patched with the changes
``sudo config apply-patch --dry-run`` prints (``Patch Applier:   * [{"op": ...}]`` lines,
shared/cases/cli/sonic__apply_patch_roce_success.txt) all become ``{key: value}``.

CONFIG_DB is ``TABLE -> key -> {field: "string"}`` (shared/cases/cli/sonic__config_db_json_roce_qos_tables.txt;
every value a string, multi-part keys joined by ``|``). Keys:

- ``port/<port>/<field>``: the ``PORT`` and ``PORT_QOS_MAP`` fields of a port (``mtu``,
  ``pfc_enable`` = ``"3"``, ``dscp_to_tc_map`` = the name of the map the port uses, ``speed``...);
- ``port/<port>/queue/<q>/<field>``: ``QUEUE|<port>|<q>`` (``wred_profile``, ``scheduler``);
- ``qos/dscp_to_tc/<map>/<dscp>``: ``DSCP_TO_TC_MAP|<map>`` entries (the traffic class);
- ``wred/<profile>/<field>``: ``WRED_PROFILE`` (``green_min_threshold`` in bytes, ``ecn``...);
- any other table: ``<TABLE>/<key>/<field>`` as CONFIG_DB spells them (``SCHEDULER/fabtune_cnp/type``).

A patch operation is on a field (``/TABLE/key/field``, a string value) or on a whole entry
(``/TABLE/key``: an ``add`` whose value is the entry's ``{field: "string"}``, a ``remove``): GCU
prints a new entry's change so (``{"op": "add", "path": "/ACL_TABLE/DATAACL", "value": {...}}``,
sonic-net/sonic-utilities tests/generic_config_updater/files/patch_sorter_test_success.json), and the
template creates the CNP queue's strict scheduler so (``SCHEDULER|fabtune_cnp`` = ``{"type": "STRICT"}``).

Generated entries are left out of every reading, the revision digest and the compare: the buffer
manager (buffermgrd) writes the lossless priority groups' ``BUFFER_PG`` entries and their
``pg_lossless_<speed>_<cable>[_mtu<N>]_profile`` ``BUFFER_PROFILE`` entries behind GCU, which itself
drops ``BUFFER_PG``/``BUFFER_PROFILE`` before it verifies a patch (generic_config_updater
change_applier.py ``remove_backend_tables_from_config``).

The switch's state is read here too: :func:`interfaces_status` (``show interfaces status`` rows) and
:func:`roce_state` (the RoCE QoS a CONFIG_DB holds).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re

from tuning.errors import CandidateError, ParseError
from tuning.switch.base import RoceState
from tuning.model.tags import lossless_tags, mtu_tags

#: PORT_QOS_MAP's fields (sonic-port-qos-map.yang), read under ``port/<port>/``
_PORT_QOS_FIELDS = ("dscp_to_tc_map", "dot1p_to_tc_map", "tc_to_queue_map", "tc_to_pg_map", "pfc_to_queue_map",
                    "pfc_to_pg_map", "pfc_enable", "pfcwd_sw_enable", "tc_to_dscp_map")
#: a profile buffermgrd makes (sonic-swss cfgmgr/buffermgr.cpp: ``pg_lossless_<speed>_<cable>_profile``)
GENERATED_PROFILE = re.compile(r"pg_lossless_\d+_\d+m(_mtu\d+)?(_th-?\d+)?_profile")
#: one change line of apply-patch (sonic-utilities#1934: ``  * [...]`` under ``Patch Applier:``)
CHANGE_LINE = re.compile(r"^Patch Applier:   \* (\[.*\])\s*$", re.M)
#: the MTU of a SONiC port whose PORT entry has no ``mtu`` (the 9100 of SONiC's generated port
#: configuration and of the ports of sonic__show_interfaces_status.txt; sonic-port.yang has no default)
DEFAULT_MTU = 9100
_OPS = ("add", "replace", "remove")


def without_generated(config: dict) -> dict:
    """``config`` without buffermgrd's lossless PG entries and their generated profiles."""
    out = {t: v for t, v in config.items() if t not in ("BUFFER_PG", "BUFFER_PROFILE")}
    pgs = {k: v for k, v in (config.get("BUFFER_PG") or {}).items() if not _generated_pg(v)}
    profiles = {k: v for k, v in (config.get("BUFFER_PROFILE") or {}).items() if not GENERATED_PROFILE.fullmatch(k)}
    out.update({"BUFFER_PG": pgs} if pgs else {}, **({"BUFFER_PROFILE": profiles} if profiles else {}))
    return out


def _generated_pg(entry: object) -> bool:
    return isinstance(entry, dict) and bool(GENERATED_PROFILE.fullmatch(str(entry.get("profile", ""))))


def key_of(table: str, key: str, field: str) -> str:
    """The flat key of one CONFIG_DB field (the module docstring's scheme)."""
    if table == "PORT" or (table == "PORT_QOS_MAP" and field in _PORT_QOS_FIELDS):
        return f"port/{key}/{field}"
    if table == "QUEUE" and "|" in key:
        port, queue = key.split("|", 1)
        return f"port/{port}/queue/{queue}/{field}"
    if table == "DSCP_TO_TC_MAP":
        return f"qos/dscp_to_tc/{key}/{field}"
    if table == "WRED_PROFILE":
        return f"wred/{key}/{field}"
    return f"{table}/{key}/{field}"


def config_settings(config: dict) -> dict[str, str]:
    """CONFIG_DB (without generated entries) as flat settings, in table, key and field order."""
    out: dict[str, str] = {}
    for table, entries in without_generated(config).items():
        for key, fields in (entries or {}).items():
            for field, value in (fields or {}).items():
                out[key_of(table, key, field)] = str(value)
    return out


def parse_ops(text: str, where: str = "JSON patch") -> list[dict]:
    """An RFC 6902 patch of CONFIG_DB fields and entries: ``[{"op": "add", "path": "/PORT/Ethernet0/mtu",
    "value": "9216"}, {"op": "add", "path": "/SCHEDULER/fabtune_cnp", "value": {"type": "STRICT"}}]``.

    Raises:
        ParseError: not a JSON array of add/replace/remove operations on ``/TABLE/key/field`` paths
            with string values, or of ``add`` (a ``{field: string}`` value) / ``remove`` of
            ``/TABLE/key`` (GCU's ConfigDb format: all values strings).
    """
    try:
        ops = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(where, exc.lineno, "a JSON array of patch operations", text.strip()[:120]) from exc
    if not isinstance(ops, list):
        raise ParseError(where, 1, "a JSON array of patch operations", text.strip()[:120])
    for op in ops:
        if not _well_formed(op):
            raise ParseError(where, 1, "add/replace/remove of /TABLE/key/field with a string value, or add "
                             "of /TABLE/key with {field: string} (remove: no value)", json.dumps(op)[:120])
    return ops


def _well_formed(op: object) -> bool:
    """A field op (``/TABLE/key/field``, a string value but for ``remove``) or an entry op
    (``/TABLE/key``: ``add`` of ``{field: string}``, or ``remove``)."""
    parts = split_path(op.get("path", "")) if isinstance(op, dict) else []
    if not isinstance(op, dict) or op.get("op") not in _OPS or len(parts) not in (2, 3) or not all(parts):
        return False
    value = op.get("value")
    if len(parts) == 2:
        return op["op"] == "remove" or (op["op"] == "add" and isinstance(value, dict)
                                        and all(isinstance(v, str) for v in value.values()))
    return op["op"] == "remove" or isinstance(value, str)


def split_path(path: str) -> list[str]:
    """A JSON pointer's parts (RFC 6901: ``~1`` is ``/``, ``~0`` is ``~``); ``[]`` for a bad pointer."""
    if not isinstance(path, str) or not path.startswith("/"):
        return []
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def patched(config: dict, ops: list[dict]) -> dict:
    """``config`` with ``ops`` (on fields or whole entries) applied as RFC 6902 does (a copy).

    Raises:
        CandidateError: an op on a table or key that is not there (RFC 6902: the parent must exist),
            or a remove or replace of a field or entry that is not there.
    """
    out = copy.deepcopy(config)
    for op in ops:
        table, key, *field_ = split_path(op["path"])
        if not field_:  # a whole entry: its table must be there; a remove, the entry too
            if table not in out or (op["op"] == "remove" and key not in out[table]):
                raise CandidateError(f"{op['op']} {op['path']}: the member is not there (RFC 6902)", phase="plan")
            if op["op"] == "remove":
                del out[table][key]
            else:
                out[table][key] = dict(op["value"])
            continue
        field = field_[0]
        entry = out.get(table, {}).get(key)
        if entry is None or (op["op"] != "add" and field not in entry):
            raise CandidateError(f"{op['op']} {op['path']}: the member is not there (RFC 6902)", phase="plan")
        if op["op"] == "remove":
            del entry[field]
        else:
            entry[field] = op["value"]
    return out


def ops_of_output(out: str) -> list[dict]:
    """The changes an apply-patch run prints (``Patch Applier:   * [...]`` lines), in order.

    Raises:
        ParseError: a change line that is not a JSON array of patch operations.
    """
    ops: list[dict] = []
    for m in CHANGE_LINE.finditer(out):
        ops += parse_ops(m.group(1), "config apply-patch change line")
    return ops


def patch_settings(ops: list[dict]) -> dict[str, str]:
    """The settings a candidate patch writes (``add``/``replace``), in patch order.

    Raises:
        CandidateError: a ``remove`` (a candidate states values; fabtune never removes a field).
    """
    out: dict[str, str] = {}
    for op in ops:
        if op["op"] == "remove":
            raise CandidateError(f"the candidate removes {op['path']}: a candidate only sets fields", phase="plan")
        table, key, *field = split_path(op["path"])
        fields = op["value"] if not field else {field[0]: op["value"]}
        out.update({key_of(table, key, f): v for f, v in fields.items()})
    return out


def settings(text: str) -> dict[str, str]:
    """Flat settings of a SONiC text: a candidate patch (a JSON array) or CONFIG_DB (a JSON object).

    Raises:
        ParseError: neither.  CandidateError: a patch that removes a field.
    """
    if text.lstrip().startswith("["):
        return patch_settings(parse_ops(text, "SONiC candidate patch"))
    return config_settings(load_config(text))


def load_config(text: str) -> dict:
    """CONFIG_DB from its JSON text. Raises ParseError: not a JSON object of tables."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError("show runningconfiguration all", exc.lineno, "CONFIG_DB as a JSON object", text.strip()[:120]) from exc
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ParseError("show runningconfiguration all", 1, "CONFIG_DB as a JSON object of tables", text.strip()[:120])
    return data


def changes_of_diff(diff: str, running: str) -> dict[str, tuple[str | None, str | None]]:
    """A dry run's changes as ``{key: (before, after)}``: before from ``running`` (None: not
    configured), after from ``running`` patched with the printed changes (None: removed)."""
    ops = ops_of_output(diff)
    if not ops:
        return {}
    config = load_config(running)
    before, after = config_settings(config), config_settings(patched(config, ops))
    keys = list(dict.fromkeys([*after, *before]))
    return {k: (before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)}


def digest(config: dict) -> str:
    """The revision id of CONFIG_DB: ``cfg-`` and 12 hex digits of the SHA-256 of its canonical
    JSON (sorted keys) without generated entries. SONiC numbers no revisions; the same
    configuration always has the same id."""
    text = json.dumps(without_generated(config), sort_keys=True, separators=(",", ":"))
    return "cfg-" + hashlib.sha256(text.encode()).hexdigest()[:12]


#: what GCU refuses, or fabtune must never change in a QoS transaction (issue 21; sonic-utilities
#: generic_config_updater/gcu_field_operation_validators.conf.json): (table, allowed fields or None)
_LIMITS: dict[str, tuple[str, ...] | None] = {
    "BUFFER_POOL": None,  # pool sizes: refused by GCU's rdma validator off its known platforms
    "BUFFER_PROFILE": ("dynamic_th", "xoff"),  # "Dynamic threshold tuning", "PG headroom modification"
    "BUFFER_PG": None,  # buffermgrd's (generated): never in a transaction
    "CABLE_LENGTH": None,  # drives buffermgrd's headroom: not a QoS transaction's
    "PFC_WD": None,  # refused on unknown HWSKUs (rdma_config_update_validator: asic "unknown")
}
#: PORT fields a QoS transaction never changes (a link flap): speed and admin state
_PORT_FIXED = ("speed", "admin_status", "lanes", "fec")


def check_limits(ops: list[dict]) -> None:
    """Refuse, before anything reaches the switch, an op GCU refuses or a QoS transaction must not do.

    Raises:
        CandidateError: naming the path and the rule.
    """
    for op in ops:
        table, _, *field_ = split_path(op["path"])
        field = field_[0] if field_ else None  # None: a whole entry, never one of a limited table
        allowed = _LIMITS.get(table, ())
        if table in _LIMITS and (allowed is None or field not in allowed):
            raise CandidateError(f"{op['op']} {op['path']}: {table} fields are not changed by fabtune's QoS "
                                 f"transaction (GCU refuses it or buffermgrd owns it); allowed: "
                                 f"{', '.join(allowed) if allowed else 'none'}", phase="plan")
        if table == "PORT" and (field is None or field in _PORT_FIXED):
            raise CandidateError(f"{op['op']} {op['path']}: a QoS transaction never changes PORT "
                                 f"{field or 'entries'} (the link would flap)", phase="plan")


def change_tags(key: str, before: str | None, after: str | None) -> tuple[str, ...]:
    """The tags of a SONiC change: a port MTU raised or lowered (no ``mtu``: SONiC's
    :data:`DEFAULT_MTU`); lossless turned on or off by a port's ``pfc_enable`` list."""
    parts = key.split("/")
    if len(parts) == 3 and parts[0] == "port" and parts[2] in ("mtu", "oper_mtu"):
        return mtu_tags(before or str(DEFAULT_MTU), after or str(DEFAULT_MTU))
    if len(parts) == 3 and parts[0] == "port" and parts[2] == "pfc_enable":
        return lossless_tags(bool(before), bool(after))
    return ()


def interfaces_status(out: str) -> list[dict[str, str]]:
    """The rows of ``show interfaces status`` (right-aligned tabulate columns, 9 or 11 of them:
    sonic__show_interfaces_status.txt) as ``{column: value}``, split on 2+ spaces (``Type`` holds
    single spaces). Raises ParseError without the header and its dash rule."""
    lines = [ln for ln in out.splitlines() if ln.strip()]
    head = next((i for i, ln in enumerate(lines) if ln.split()[:1] == ["Interface"]), None)
    if head is None or head + 1 >= len(lines) or not set(lines[head + 1]) <= {"-", " "}:
        raise ParseError("show interfaces status", 1, "the Interface header over a dash rule", out.strip()[:120])
    names = re.split(r"\s{2,}", lines[head].strip())
    rows = []
    for ln in lines[head + 2:]:
        cells = re.split(r"\s{2,}", ln.strip())
        if len(cells) != len(names):
            raise ParseError("show interfaces status", head + 3, f"{len(names)} columns", ln)
        rows.append(dict(zip(names, cells)))
    return rows


def roce_state(config: dict) -> RoceState:
    """RoceState of the first port's PORT_QOS_MAP and the DSCP_TO_TC_MAP it references (the
    effective map: SONiC's default AZURE puts DSCP 26 in lossy TC1) and its lossless queue's WRED."""
    qos = config.get("PORT_QOS_MAP") or {}
    port = next((p for p in sorted(qos) if p.startswith("Ethernet")), None)
    mine = qos.get(port, {}) if port else {}
    pfc = [int(p) for p in mine.get("pfc_enable", "").split(",") if p.strip().isdigit()]
    dmap = (config.get("DSCP_TO_TC_MAP") or {}).get(mine.get("dscp_to_tc_map", ""), {})
    prio = pfc[0] if len(pfc) == 1 else None
    wred = (config.get("WRED_PROFILE") or {}).get(
        (config.get("QUEUE") or {}).get(f"{port}|{prio}", {}).get("wred_profile", ""), {})
    ecn = wred.get("ecn", "") in ("ecn_all", "ecn_green", "ecn_green_yellow") and prio is not None
    return RoceState(enabled=bool(pfc), mode="lossless" if pfc else None, pfc_priority=prio,
                     trust="dscp" if dmap else None, ecn_tcs=(prio,) if ecn else (),
                     ecn_min_bytes=int(wred["green_min_threshold"]) if ecn and "green_min_threshold" in wred else None,
                     ecn_max_bytes=int(wred["green_max_threshold"]) if ecn and "green_max_threshold" in wred else None,
                     dscp_to_switch_priority={int(d): int(t) for d, t in dmap.items()})
