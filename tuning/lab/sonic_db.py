"""CONFIG_DB of a lab community SONiC switch and its generic config updater (GCU): the power-on
tables, the buffer manager's generated entries, the checks apply-patch makes and the order it
prints its changes in, and the lab contract's fabric state.

Sources (sonic-net/sonic-utilities at the fetched HEAD, and shared/cases/cli/sonic__*.txt):

- power-on tables: sonic__config_db_json_roce_qos_tables.txt (its shape and values), with the
  default AZURE DSCP_TO_TC_MAP of tests/qos_config_input/config_qos.json (from sonic-buildimage
  qos_config.j2): DSCP 3 -> TC3, 4 -> TC4, 8 -> TC0, 5 -> TC2, 46 -> TC5, 48 -> TC6, every other
  DSCP (26 too) -> TC1, lossy: an untuned SONiC leaf does not carry RoCE's DSCP 26 lossless;
- field validators: generic_config_updater/gu_common.py ``validate_field_operation`` (the
  illegal ``remove`` of ``/PFC_WD/GLOBAL/POLL_INTERVAL``) and field_operation_validators.py
  ``rdma_config_update_validator`` with gcu_field_operation_validators.conf.json (an unknown HWSKU
  is asic ``unknown``: refused; a branch older than the platform's: refused; WRED_PROFILE's ECN
  tuning fields as in the older conf that lists them). The lab refuses every BUFFER_POOL field
  edit (issue 21; HEAD allows pool sizes on some ASICs: the lab is the stricter);
- empty tables: generic_updater.py ``EmptyTableError`` text; YANG: sonic-port.yang PORT ``mtu``
  (the range text of sonic__apply_patch_failure_yang_invalid_value.txt, ``1..9216``); sonic-queue.yang's
  leafrefs (QUEUE ``scheduler`` -> SCHEDULER, ``wred_profile`` -> WRED_PROFILE) and sonic-scheduler.yang's
  ``type`` (DWRR, WRR, STRICT), with libyang 1's texts (resources.c ``LYE_NOLEAFREF`` ``Leafref "%s" of value
  "%s" points to a non-existing leaf.``, ``LYE_INVAL`` ``Invalid value "%s" in "%s" element.``; the leafref
  path with module names for prefixes is inferred from sonic-mgmt-common's CVL example, L);
- a new or removed entry is one change of the whole entry (``{"op": "add", "path": "/TABLE/key", "value":
  {...}}``, ``remove`` of ``/TABLE/key``), as GCU prints it (tests/generic_config_updater/files/
  patch_sorter_test_success.json); an existing entry's changes are per field;
- the order of changes (patch_sorter's own order is not reproduced, L): definitions first, then
  removals, then PORT, then the tables that reference definitions, as both transcripts show;
- generated entries: buffermgrd (traditional model) writes ``BUFFER_PG|<port>|<pfc_enable as a
  range>`` -> ``pg_lossless_<speed>_<cable>_profile`` after every change (the profile's numbers are
  the transcript's); GCU leaves BUFFER_PG/BUFFER_PROFILE out of its verification (change_applier.py).
"""

from __future__ import annotations

import copy
import json
import re

from tuning.lab.fabric import Fabric, Switch
from tuning.lab.nvue_show import Roce

#: a profile buffermgrd makes (sonic-swss cfgmgr/buffermgr.cpp: ``pg_lossless_<speed>_<cable>_profile``)
GENERATED_PROFILE = re.compile(r"pg_lossless_\d+_\d+m_profile")

#: DEVICE_METADATA of the lab's switches: a Spectrum-3 SKU GCU knows (asic spc3)
HWSKU, PLATFORM = "Mellanox-SN4700-O32", "x86_64-mlnx_msn4700-r0"
#: the 8-digit branch of the image (build_version ``SONiC.20231110.19``: field_operation_validators.py)
BRANCH = "20231110"
#: asic -> the branch from which GCU's rdma validator allows a table's fields (conf.json: spc3)
_SINCE = {"PFC_WD": "20220500", "BUFFER_PROFILE": "20220500", "WRED_PROFILE": "20220500"}
_FIELDS = {"PFC_WD": ("restoration_time", "detection_time", "action", "global/poll_interval", ""),
           "BUFFER_PROFILE": ("dynamic_th", "xoff"),
           "WRED_PROFILE": ("azure_lossless/green_min_threshold", "azure_lossless/green_max_threshold",
                            "azure_lossless/green_drop_probability")}
_KNOWN_SKUS = ("Mellanox-SN4700-O32", "Mellanox-SN4600C-C64", "ACS-MSN4700", "Mellanox-SN5600-O128")
VALIDATOR = "generic_config_updater.field_operation_validators.{}"
_DEFINITIONS = ("WRED_PROFILE", "DSCP_TO_TC_MAP", "TC_TO_QUEUE_MAP", "TC_TO_PRIORITY_GROUP_MAP",
                "MAP_PFC_PRIORITY_TO_QUEUE", "SCHEDULER", "BUFFER_POOL", "BUFFER_PROFILE")
MTU_RANGE = (1, 9216)


class GcuError(Exception):
    """A GCU refusal: ``stage`` is the last progress line printed before it (``fields``,
    ``empty`` or ``sort``), ``str()`` the reason as GCU words it."""

    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(reason)
        self.stage = stage


def azure_dscp_map() -> dict[str, str]:
    """SONiC's default AZURE DSCP_TO_TC_MAP (every DSCP but 3, 4, 5, 8, 46, 48 in TC1)."""
    special = {"3": "3", "4": "4", "5": "2", "8": "0", "46": "5", "48": "6"}
    return {str(d): special.get(str(d), "1") for d in range(64)}


def initial_config(switch: Switch, fabric: Fabric | None, hwsku: str = HWSKU) -> dict:
    """The power-on CONFIG_DB of ``switch`` (its ports 400G, MTU 9100, PFC on priorities 3 and 4,
    the default AZURE maps, AZURE_LOSSLESS WRED on queues 3-4), buffermgrd's entries made."""
    ident = [s.name for s in fabric.switches].index(switch.name) if fabric and switch in fabric.switches else 0
    cfg: dict = {"DEVICE_METADATA": {"localhost": {
        "buffer_model": "traditional", "default_pfcwd_status": "enable", "hostname": switch.name, "hwsku": hwsku,
        "mac": f"02:00:5e:10:20:{0x30 + ident:02x}", "platform": PLATFORM, "type": "ToRRouter"}}}
    identity = {str(i): str(i) for i in range(8)}
    cfg.update({"PORT": {}, "PORT_QOS_MAP": {}, "QUEUE": {}, "BUFFER_QUEUE": {}, "CABLE_LENGTH": {"AZURE": {}},
                "PFC_WD": {"GLOBAL": {"POLL_INTERVAL": "200"}}, "DSCP_TO_TC_MAP": {"AZURE": azure_dscp_map()},
                "TC_TO_QUEUE_MAP": {"AZURE": dict(identity)}, "MAP_PFC_PRIORITY_TO_QUEUE": {"AZURE": dict(identity)},
                "TC_TO_PRIORITY_GROUP_MAP": {"AZURE": {**{str(i): "0" for i in range(8)}, "3": "3", "4": "4", "7": "7"}},
                "WRED_PROFILE": {"AZURE_LOSSLESS": _wred()},
                "SCHEDULER": {"scheduler.0": {"type": "DWRR", "weight": "14"}, "scheduler.1": {"type": "DWRR", "weight": "15"}},
                "BUFFER_POOL": {"egress_lossless_pool": {"mode": "static", "size": "12766208", "type": "egress"},
                                "egress_lossy_pool": {"mode": "dynamic", "size": "7326924", "type": "egress"},
                                "ingress_lossless_pool": {"mode": "dynamic", "size": "12766208", "type": "ingress"}},
                "BUFFER_PROFILE": {"egress_lossless_profile": {"pool": "egress_lossless_pool", "size": "0", "static_th": "12766208"},
                                   "egress_lossy_profile": {"dynamic_th": "3", "pool": "egress_lossy_pool", "size": "1518"},
                                   "ingress_lossy_profile": {"dynamic_th": "3", "pool": "ingress_lossless_pool", "size": "0"}}})
    for k, port in enumerate(switch.ports, 1):
        _add_port(cfg, port, k)
    return buffermgr(cfg)


def _wred() -> dict[str, str]:
    colors = {f"{c}_{f}": v for c in ("green", "yellow", "red")
              for f, v in (("drop_probability", "5"), ("max_threshold", "2097152"), ("min_threshold", "1048576"))}
    return {"ecn": "ecn_all", **colors, "wred_green_enable": "true", "wred_red_enable": "true", "wred_yellow_enable": "true"}


def _add_port(cfg: dict, port: str, index: int) -> None:
    first = int(port[len("Ethernet"):]) + 1
    cfg["PORT"][port] = {"admin_status": "up", "alias": f"etp{index}", "fec": "rs", "index": str(index),
                         "lanes": ",".join(str(first + i) for i in range(8)), "mtu": "9100", "pfc_asym": "off",
                         "speed": "400000"}
    cfg["PORT_QOS_MAP"][port] = {m: "AZURE" for m in ("dscp_to_tc_map", "pfc_to_queue_map", "tc_to_pg_map", "tc_to_queue_map")}
    cfg["PORT_QOS_MAP"][port]["pfc_enable"] = "3,4"
    for q in range(7):
        lossless = q in (3, 4)
        cfg["QUEUE"][f"{port}|{q}"] = {"scheduler": "scheduler.1" if lossless else "scheduler.0",
                                       **({"wred_profile": "AZURE_LOSSLESS"} if lossless else {})}
    cfg["BUFFER_QUEUE"].update({f"{port}|0-2": {"profile": "egress_lossy_profile"},
                                f"{port}|3-4": {"profile": "egress_lossless_profile"},
                                f"{port}|5-6": {"profile": "egress_lossy_profile"}})
    cfg["CABLE_LENGTH"]["AZURE"][port] = "5m"
    cfg["PFC_WD"][port] = {"action": "drop", "detection_time": "200", "restoration_time": "200"}


def buffermgr(cfg: dict) -> dict:
    """buffermgrd's pass: each port's lossless PGs (its ``pfc_enable``) point at the generated
    profile of its speed and cable length; stale generated entries go. Returns ``cfg`` (changed)."""
    pgs = {k: v for k, v in cfg.get("BUFFER_PG", {}).items() if not GENERATED_PROFILE.fullmatch(v.get("profile", ""))}
    profiles = {k: v for k, v in cfg.get("BUFFER_PROFILE", {}).items() if not GENERATED_PROFILE.fullmatch(k)}
    for port, qos in sorted(cfg.get("PORT_QOS_MAP", {}).items()):
        prios = sorted(int(p) for p in qos.get("pfc_enable", "").split(",") if p.strip().isdigit())
        if not prios or port not in cfg.get("PORT", {}):
            continue
        name = f"pg_lossless_{cfg['PORT'][port].get('speed', '400000')}_" \
               f"{cfg.get('CABLE_LENGTH', {}).get('AZURE', {}).get(port, '5m')}_profile"
        profiles[name] = {"dynamic_th": "0", "pool": "ingress_lossless_pool", "size": "19456", "xoff": "23552", "xon": "19456"}
        span = str(prios[0]) if len(prios) == 1 else f"{prios[0]}-{prios[-1]}"
        pgs[f"{port}|{span}"] = {"profile": name}
    cfg["BUFFER_PG"], cfg["BUFFER_PROFILE"] = pgs, profiles
    return cfg


def split_path(path: str) -> list[str]:
    """The parts of a JSON pointer (RFC 6901 escapes ``~1`` and ``~0`` undone)."""
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")] if path.startswith("/") else []


def simulate(cfg: dict, ops: list[dict]) -> dict:
    """``cfg`` with ``ops`` applied (RFC 6902; jsonpatch's error text for a missing member, L).
    Raises GcuError (stage ``simulate``)."""
    out = copy.deepcopy(cfg)
    for op in ops:
        parts = split_path(op.get("path", ""))
        node = out
        for part in parts[:-1]:
            if not isinstance(node, dict) or part not in node:
                raise GcuError("simulate", f"member '{part}' not found in {op['path']}")
            node = node[part]
        last = parts[-1] if parts else ""
        if op.get("op") in ("remove", "replace") and last not in node:
            raise GcuError("simulate", f"can't {op['op']} a non-existent object '{last}'")
        if op.get("op") == "remove":
            del node[last]
        else:
            node[last] = copy.deepcopy(op.get("value"))
    return out


def field_changes(old: dict, new: dict) -> list[dict]:
    """Ops from ``old`` to ``new``: a whole entry where it is new (``add`` of its fields) or gone
    (``remove``), else per field (``replace`` where the field was there); in table, key, field order
    (GCU's own generate_patch order is reversed table order, as
    sonic__checkpoint_list_rollback_delete.txt shows: :func:`replace_patch`)."""
    out: list[dict] = []
    for table in sorted(set(old) | set(new)):
        o, n = old.get(table, {}), new.get(table, {})
        for key in sorted(set(o) | set(n)):
            of, nf = o.get(key, {}), n.get(key, {})
            entry = f"/{table}/{key.replace('~', '~0').replace('/', '~1')}"
            if (key in o) != (key in n) and table in old and table in new:
                out.append({"op": "add", "path": entry, "value": dict(nf)} if key in n else {"op": "remove", "path": entry})
                continue
            for f in sorted(set(of) | set(nf)):
                path = f"{entry}/{f}"
                if f not in nf:
                    out.append({"op": "remove", "path": path})
                elif of.get(f) != nf[f]:
                    out.append({"op": "replace" if f in of else "add", "path": path, "value": nf[f]})
    return out


def ordered(changes: list[dict]) -> list[dict]:
    """The order the lab applies and prints changes in (module docstring)."""
    def rank(op: dict) -> int:
        table = split_path(op["path"])[0]
        if table in _DEFINITIONS and op["op"] != "remove":
            return 0
        return 1 if op["op"] == "remove" else 2 if table == "PORT" else 3
    return sorted(changes, key=rank)


def replace_patch(old: dict, target: dict) -> list[dict]:
    """The patch Config Replacer generates (tables in reverse order, as the rollback transcript)."""
    ops = field_changes(backend_free(old), backend_free(target))
    order = sorted({split_path(o["path"])[0] for o in ops}, reverse=True)
    return sorted(ops, key=lambda o: order.index(split_path(o["path"])[0]))


def backend_free(cfg: dict) -> dict:
    """``cfg`` without BUFFER_PG and BUFFER_PROFILE (change_applier.py backend_tables)."""
    return {t: v for t, v in cfg.items() if t not in ("BUFFER_PG", "BUFFER_PROFILE")}


def validate_fields(old: dict, new: dict, branch: str = BRANCH) -> None:
    """gu_common.py ``validate_field_operation``. Raises GcuError (stage ``fields``)."""
    for op in field_changes(old, new):
        if op["op"] == "remove" and op["path"] in ("/PFC_WD/GLOBAL/POLL_INTERVAL", "/PFC_WD/GLOBAL"):
            raise GcuError("fields", f"Given patch operation is invalid. Operation: remove is illegal on field: {op['path']}")
        table = split_path(op["path"])[0]
        name = {"BUFFER_PROFILE": "buffer_profile_config_update_validator"}.get(table, "rdma_config_update_validator")
        if table in ("PFC_WD", "BUFFER_POOL", "BUFFER_PROFILE", "WRED_PROFILE") and not _rdma_ok(old, op, branch):
            raise GcuError("fields", f"Modification of {table} table is illegal- validating function "
                                     f"{VALIDATOR.format(name)} returned False")


def _rdma_ok(old: dict, op: dict, branch: str) -> bool:
    """rdma_config_update_validator_common: a known ASIC, a listed field, a listed op, a new enough branch."""
    table, *rest = split_path(op["path"])
    if table == "BUFFER_POOL":
        return False
    sku = old.get("DEVICE_METADATA", {}).get("localhost", {}).get("hwsku", "")
    if sku not in _KNOWN_SKUS:
        return False
    field = "/".join(p for p in rest if not any(c.isdigit() for c in p)).lower()
    if table == "BUFFER_PROFILE":
        field = field.split("/")[-1]
    return field in _FIELDS[table] and op["op"] == "replace" and branch >= _SINCE[table]


def empty_tables(cfg: dict) -> None:
    """Raises GcuError (stage ``empty``) naming the tables a patch would leave empty."""
    empty = [t for t, v in cfg.items() if not v]
    if empty:
        pad = " " * 32
        raise GcuError("empty", f"localhost: given patch is not valid because it will result in empty tables {pad}"
                                f"which is not allowed in ConfigDb. {pad}Table{'s' if len(empty) != 1 else ''}: "
                                f"{', '.join(empty)}")


def _loading_failed(message: str) -> str:
    """patch_sorter.py's YANG failure around a libyang message (sonic__apply_patch_failure_yang_invalid_value.txt)."""
    return f"Given patch will produce invalid config. Error: Data Loading Failed\n{message}"


def yang_text(value: str, constraint: str = f"{MTU_RANGE[0]}..{MTU_RANGE[1]}") -> str:
    """patch_sorter.py's YANG failure with libyang's range message (sonic__apply_patch_failure_yang_invalid_value.txt)."""
    return _loading_failed(f"Value \"{value}\" does not satisfy the constraint \"{constraint}\" (range, length, or pattern).")


#: sonic-queue.yang's leafrefs: QUEUE field -> (the table it names, its path as libyang names it, L)
_QUEUE_REFS = {"scheduler": ("SCHEDULER", "/sonic-scheduler:sonic-scheduler/sonic-scheduler:SCHEDULER/"
                                          "sonic-scheduler:SCHEDULER_LIST/sonic-scheduler:name"),
               "wred_profile": ("WRED_PROFILE", "/sonic-wred-profile:sonic-wred-profile/sonic-wred-profile:WRED_PROFILE/"
                                                "sonic-wred-profile:WRED_PROFILE_LIST/sonic-wred-profile:name")}
SCHEDULER_TYPES = ("DWRR", "WRR", "STRICT")  # sonic-scheduler.yang


def yang(cfg: dict) -> None:
    """The YANG constraints the lab checks (PORT ``mtu``, ``pfc_enable``; QUEUE's leafrefs, SCHEDULER
    ``type``). Raises GcuError (``sort``)."""
    for name, fields in sorted(cfg.get("SCHEDULER", {}).items()):
        if fields.get("type", "WRR") not in SCHEDULER_TYPES:
            raise GcuError("sort", _loading_failed(f'Invalid value "{fields["type"]}" in "type" element.'))
    for key, fields in sorted(cfg.get("QUEUE", {}).items()):
        for field, (table, path) in _QUEUE_REFS.items():
            if field in fields and fields[field] not in cfg.get(table, {}):
                raise GcuError("sort", _loading_failed(f'Leafref "{path}" of value "{fields[field]}" points to a '
                                                       "non-existing leaf."))
    for port, fields in sorted(cfg.get("PORT", {}).items()):
        mtu = fields.get("mtu", "9100")
        if not mtu.isdigit() or not MTU_RANGE[0] <= int(mtu) <= MTU_RANGE[1]:
            raise GcuError("sort", yang_text(mtu))
    for port, fields in sorted(cfg.get("PORT_QOS_MAP", {}).items()):
        pfc = fields.get("pfc_enable")
        if pfc is not None and not re.fullmatch(r"[0-7](,[0-7])*", pfc):
            raise GcuError("sort", yang_text(pfc, "[0-7](,[0-7])*"))  # L: the pattern text


def fabric_state(cfg: dict, ports: list[str], oper: dict[str, int]) -> dict:
    """``{"ports": {name: {"mtu": N}}, "roce": Roce.as_json()}`` (lab contract, docs/lab.md)."""
    mtus = {p: oper.get(p, int(cfg.get("PORT", {}).get(p, {}).get("mtu", "9100"))) for p in ports}
    return {"ports": {p: {"mtu": m} for p, m in mtus.items()}, "roce": roce_state(cfg, ports).as_json()}


def roce_state(cfg: dict, ports: list[str]) -> Roce:
    """The effective RoCE state of ``ports``, never more lenient than the weakest port: the PFC
    priority every port enables (the lowest), the DSCP_TO_TC_MAP the ports reference (TC T taken as
    priority T: the AZURE TC/PFC maps are the identity; ports on different maps: not enabled), ECN
    on the queues whose every port's WRED profile marks (``ecn_all``/``ecn_green``)."""
    qos = [cfg.get("PORT_QOS_MAP", {}).get(p, {}) for p in ports]
    if not qos:
        return Roce()
    sets = [{int(x) for x in q.get("pfc_enable", "").split(",") if x.strip().isdigit()} for q in qos]
    common = set.intersection(*sets)
    maps = {q.get("dscp_to_tc_map") for q in qos}
    dmap = cfg.get("DSCP_TO_TC_MAP", {}).get(next(iter(maps)) or "", {}) if len(maps) == 1 else {}
    r = Roce(enabled=bool(common) and bool(dmap), dscp_to_switch_priority={int(d): int(t) for d, t in dmap.items()})
    r.pfc_priority = min(common) if r.enabled else None
    r.mode = "lossless" if r.enabled else None
    r.lossless_tc = r.pfc_priority
    r.trust = "dscp" if dmap else None
    r.ecn_tcs = [q for q in range(8) if all(_marks(cfg, p, q) for p in ports)]
    queue = r.lossless_tc if r.lossless_tc in r.ecn_tcs else (r.ecn_tcs[0] if r.ecn_tcs else None)
    profiles = {cfg["QUEUE"][f"{p}|{queue}"]["wred_profile"] for p in ports} if queue is not None else set()
    if len(profiles) == 1:
        w = cfg["WRED_PROFILE"][profiles.pop()]
        r.ecn_min_bytes, r.ecn_max_bytes = int(w["green_min_threshold"]), int(w["green_max_threshold"])
    return r


def _marks(cfg: dict, port: str, queue: int) -> bool:
    name = cfg.get("QUEUE", {}).get(f"{port}|{queue}", {}).get("wred_profile")
    w = cfg.get("WRED_PROFILE", {}).get(name or "", {})
    return w.get("ecn") in ("ecn_all", "ecn_green", "ecn_green_yellow", "ecn_green_red") and "green_min_threshold" in w


def dump(cfg: dict) -> str:
    """CONFIG_DB as ``show runningconfiguration all`` / ``sonic-cfggen -d --print-data`` prints it
    (indent 4, sorted keys: the layout of sonic__config_db_json_roce_qos_tables.txt)."""
    return json.dumps(cfg, indent=4, sort_keys=True)
