"""Operational view of the NVUE switch simulator: effective RoCE settings and the
``nv show interface`` / ``nv show qos roce`` / ``nv config revision`` tables.

Layouts, to the character: shared/cases/nv_show_interface__summary_with_continuation_rows.txt,
shared/cases/nv_show_qos_roce__lossless_single_ipool_enable_on.txt and
shared/cases/cli/nvue_config_revision__table.txt. RoCE defaults (Cumulus Linux 5.x
"RDMA over Converged Ethernet - RoCE"): trust pcp,dscp, PFC on switch priority 3
(lossless only), DSCP 26 -> SP 3 (RoCE), DSCP 48 -> SP 6 (CNP), SP 3 -> TC 3 DWRR 50 %,
SP 6 -> TC 6 strict, ECN on TC 3 with min 150000 / max 1500000 bytes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tuning.lab.fabric import Fabric, Switch
from tuning.lab.nvue_config import Tree, natural_key

_TRUST = {"l2": "pcp", "l3": "dscp", "both": "pcp,dscp", "port": "port"}
_ROCE_DSCP = {26: 3, 48: 6}
_CNP_SP = 6


@dataclass
class Roce:
    """Effective RoCE/QoS state of a switch (the ``roce`` object of ``switches/<name>.fabric.json``).

    Attributes:
        enabled: ``qos roce`` configured (``enable on``).  mode: lossless, lossy or None.
        pfc_priority: switch priority with PFC, None when no PFC.  trust: pcp, dscp, pcp,dscp or None.
        dscp_to_switch_priority: configured/RoCE DSCP -> switch priority entries (not the identity blocks).
        lossless_tc: traffic class of the PFC priority.  ecn_tcs: TCs with ECN marking.
        ecn_min_bytes / ecn_max_bytes: ECN thresholds of the lossless (or first ECN) TC, bytes.
    """

    enabled: bool = False
    mode: str | None = None
    pfc_priority: int | None = None
    trust: str | None = None
    dscp_to_switch_priority: dict[int, int] = field(default_factory=dict)
    lossless_tc: int | None = None
    ecn_tcs: list[int] = field(default_factory=list)
    ecn_min_bytes: int | None = None
    ecn_max_bytes: int | None = None

    def as_json(self) -> dict[str, Any]:
        """JSON shape of the lab contract (DSCP keys as strings)."""
        d = asdict(self)
        d["dscp_to_switch_priority"] = {str(k): v for k, v in sorted(self.dscp_to_switch_priority.items())}
        return d


def _profile(tree: Tree, section: str) -> dict:
    return tree.get("qos", {}).get(section, {}).get("default-global", {})


def effective_roce(tree: Tree) -> Roce:
    """The RoCE state an applied config gives: explicit ``qos`` keys over the RoCE defaults."""
    roce_cfg = tree.get("qos", {}).get("roce", {})
    on = roce_cfg.get("enable") == "on"
    r = Roce(enabled=on, mode=roce_cfg.get("mode", "lossless") if on else None)
    pfc = _profile(tree, "pfc").get("switch-priority")
    if pfc is not None:
        r.pfc_priority = int(str(pfc).split(",")[0])
    elif r.mode == "lossless":
        r.pfc_priority = 3
    mapping = _profile(tree, "mapping")
    r.trust = _TRUST.get(mapping.get("trust", ""), "pcp,dscp" if on else None)
    r.dscp_to_switch_priority = dict(_ROCE_DSCP) if on else {}
    for dscp, entry in mapping.get("dscp", {}).items():
        r.dscp_to_switch_priority[int(dscp)] = int(entry["switch-priority"])
    if r.pfc_priority is not None and r.mode != "lossy":
        queue = _profile(tree, "egress-queue-mapping").get("switch-priority", {}).get(str(r.pfc_priority), {})
        r.lossless_tc = int(queue.get("traffic-class", r.pfc_priority))
    _apply_ecn(r, _profile(tree, "congestion-control").get("traffic-class", {}), on)
    return r


def _apply_ecn(r: Roce, tcs: dict, on: bool) -> None:
    ecn = {int(tc) for tc, cfg in tcs.items() if str(cfg.get("ecn", "")).startswith("enable")}
    if on:
        ecn.add(3)
    r.ecn_tcs = sorted(ecn)
    if not r.ecn_tcs:
        return
    tc = r.lossless_tc if r.lossless_tc in ecn else r.ecn_tcs[0]
    cfg = tcs.get(str(tc), {})
    r.ecn_min_bytes = cfg.get("min-threshold", 150000 if on else None)
    r.ecn_max_bytes = cfg.get("max-threshold", 1500000 if on else None)


def _table(headers: list[str], rows: list[list[str]], indent: str = "") -> list[str]:
    """NVUE/tabulate-style table: width = widest cell, 2-space gaps, dashes, rows right-stripped."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    fmt = lambda cells: (indent + "  ".join(c.ljust(w) for c, w in zip(cells, widths))).rstrip()  # noqa: E731
    return [fmt(headers), indent + "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows]


def _fixed(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths))


def show_interface(ports: dict[str, dict[str, Any]]) -> str:
    """``nv show interface``; ``ports`` maps name -> {mtu, speed, state, remote_host, remote_port, type}."""
    widths = [16, 5, 5, 5, 15, 17, 8, 29]
    head = ["Interface", "MTU", "Speed", "State", "Remote Host", "Remote Port", "Type", "Summary"]
    lines = [_fixed(head, widths).rstrip(), "  ".join("-" * w for w in widths)]
    for name in sorted(ports, key=natural_key):
        p = ports[name]
        cells = [f"+ {name}", str(p["mtu"]), p.get("speed", ""), p.get("state", "up"),
                 p.get("remote_host", ""), p.get("remote_port", ""), p["type"], p.get("summary", "")]
        lines.append(_fixed(cells, widths).rstrip())
    return "\n".join(lines) + "\n"


def _kib(n: int | None) -> str:
    if n is None:
        return ""
    return f"{n / 2**20:.2f} MB" if n >= 2**20 else f"{n / 1024:.2f} KB"


def show_qos_roce(tree: Tree) -> str:
    """``nv show qos roce`` for an applied config (lossy/disabled values when RoCE is off)."""
    r = effective_roce(tree)
    cfg = tree.get("qos", {}).get("roce", {})
    pfc_on = "enabled" if r.pfc_priority is not None else "disabled"
    keys = [
        ("enable", "", cfg.get("enable", "off")),
        ("mode", r.mode or "lossy", cfg.get("mode", "")),
        ("pfc", "", ""), ("  pfc-priority", "" if r.pfc_priority is None else str(r.pfc_priority), ""),
        ("  rx-enabled", pfc_on, ""), ("  tx-enabled", pfc_on, ""), ("  cable-length", "100", ""),
        ("congestion-control", "", ""), ("  congestion-mode", "ECN" if r.ecn_tcs else "", ""),
        ("  enabled-tc", ",".join(map(str, r.ecn_tcs)), ""), ("  min-threshold", _kib(r.ecn_min_bytes), ""),
        ("  max-threshold", _kib(r.ecn_max_bytes), ""), ("  probability", "100" if r.ecn_tcs else "", ""),
        ("trust", "", ""), ("  trust-mode", r.trust or "pcp", ""),
        ("lldp-app-tlv", "", ""), ("  priority", "3" if r.enabled else "", ""),
        ("  protocol-id", "4791" if r.enabled else "", ""), ("  selector", "UDP" if r.enabled else "", ""),
    ]
    lines = _table(["", "operational", "applied"], [list(k) for k in keys])
    lines[0] = " " * 20 + lines[0].lstrip()
    lines += _section("RoCE PCP/DSCP->SP mapping configurations", ["", "pcp", "dscp", "switch-prio"], _sp_rows(r))
    lines += _section("RoCE SP->TC mapping and ETS configurations",
                      ["", "switch-prio", "traffic-class", "scheduler-weight"], _tc_rows(r))
    lines += _section("RoCE pool config", ["", "name", "mode", "size", "switch-priorities", "traffic-class"],
                      _pool_rows(r))
    return "\n".join(lines + ["Exception List", "=" * 17, "No Data"]) + "\n"


def _section(title: str, headers: list[str], rows: list[list[str]]) -> list[str]:
    return [title, "=" * (len(title) + 3)] + _table(headers, rows, indent="    ")


def _sp_rows(r: Roce) -> list[list[str]]:
    dscp_sp = {d: d // 8 for d in range(64)}
    dscp_sp.update(r.dscp_to_switch_priority)
    return [[str(sp), str(sp), ",".join(str(d) for d in range(64) if dscp_sp[d] == sp), str(sp)] for sp in range(8)]


def _tc_rows(r: Roce) -> list[list[str]]:
    rows = []
    for sp in range(8):
        if r.enabled and sp == _CNP_SP:
            rows.append([str(sp), str(sp), str(sp), "strict-priority"])
        elif r.enabled and sp == (r.lossless_tc if r.lossless_tc is not None else 3):
            rows.append([str(sp), str(sp), str(sp), "DWRR-50%"])
        else:
            rows.append([str(sp), str(sp), "0", "DWRR-50%" if r.enabled else "DWRR-100%"])
    return rows


def _pool_rows(r: Roce) -> list[list[str]]:
    if not r.enabled:
        return [["0", "lossy-default-ingress", "Dynamic", "100%", "0,1,2,3,4,5,6,7", "-"],
                ["2", "lossy-default-egress", "Dynamic", "100%", "-", "0,1,2,3,4,5,6,7"]]
    sp = r.pfc_priority if r.pfc_priority is not None else 3
    tc = r.lossless_tc if r.lossless_tc is not None else 3
    lossy_sp = ",".join(str(i) for i in range(8) if i != sp or r.mode == "lossy")
    rows = [["0", "lossy-default-ingress", "Dynamic", "50%" if r.mode == "lossless" else "100%", lossy_sp, "-"]]
    if r.mode == "lossless":
        rows.append(["1", "roce-reserved-ingress", "Dynamic", "50%", str(sp), "-"])
    rows += [["2", "lossy-default-egress", "Dynamic", "100%", "-", f"0,{_CNP_SP}"],
             ["3", "roce-reserved-egress", "Dynamic", "inf", "-", str(tc)]]
    return rows


REVISION_WIDTHS = [20, 17, 32, 19, 8, 7, 13, 31]


def revision_table(rows: list[list[str]]) -> str:
    """``nv config revision``: fixed widths; every row padded to the last column except the last row."""
    head = ["Rev ID", "State", "Apply ID", "Apply Date", "Type", "User", "Reason", "Message"]
    lines = [_fixed(head, REVISION_WIDTHS), "  ".join("-" * w for w in REVISION_WIDTHS)]
    lines += [_fixed(r, REVISION_WIDTHS) for r in rows]
    if rows:
        lines[-1] = lines[-1].rstrip()
    return "\n".join(lines) + "\n"


def port_table(switch: Switch, fabric: Fabric | None) -> dict[str, dict]:
    """Rows of ``nv show interface``: eth0, lo and each swp with its LLDP neighbour."""
    neighbours: dict[str, tuple[str, str]] = {}
    if fabric is not None:
        for node in fabric.nodes:
            for nic in node.nics:
                if nic.switch == switch.name:
                    neighbours[nic.switch_port] = (node.name, nic.netdev)
        for link in fabric.links:
            if link.a == switch.name:
                neighbours[link.a_port] = (link.b, link.b_port)
            if link.b == switch.name:
                neighbours[link.b_port] = (link.a, link.a_port)
    ports = {"eth0": {"mtu": 1500, "speed": "1G", "type": "eth", "summary": "IP Address: 192.168.200.11/24"},
             "lo": {"mtu": 65536, "speed": "", "type": "loopback", "summary": "IP Address:       127.0.0.1/8"}}
    for port in switch.ports:
        host, rport = neighbours.get(port, ("", ""))
        ports[port] = {"mtu": 9216, "speed": "400G", "type": "swp", "remote_host": host, "remote_port": rport}
    return ports
