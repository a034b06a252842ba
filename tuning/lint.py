"""Fabric lint: the rules that must hold across devices for RoCE to be lossless end to end, each a
finding with a rule id, a severity, the devices, the evidence and the fix.

The inventory rules (:func:`inventory_findings`) read the inventory alone: ``fabtune lint
--offline``, and every load (:func:`tuning.checks.check_qos` refuses the first error, naming the
file and key, so nothing is pushed). The live rules (:func:`live_findings`) read what the switches
report (their effective RoCE QoS and port MTUs, :class:`tuning.switch.base.SwitchState`).

Rules (id, severity: what it checks):

- ``mtu-headroom`` error: a leaf port carries its node's largest frame (port MTU >= node MTU +
  :data:`MTU_HEADER_BYTES`).
- ``spine-mtu`` error: every port of a switch no NIC is cabled to (a spine) carries the largest
  node frame.
- ``cnp-dscp`` error: a node's CNP DSCP differs from its RoCE DSCP.
- ``cnp-lossless`` error: CNPs travel outside the lossless priority (CNP priority != PFC priority).
- ``pfc-priority`` error: a node and every switch on its paths use one lossless priority.
- ``trust`` error: a node and every switch trust the same field (DSCP or PCP).
- ``dscp-map`` error: every switch maps the node's RoCE DSCP to the PFC priority and its CNP DSCP
  to the CNP priority.
- ``cnp-priority`` error: a node and every switch use one CNP priority.
- ``qos-unmanaged`` error: no switch between nodes that run PFC has ``roce: null``.
- ``lossy-hop`` error: every switch between nodes that run PFC is in lossless mode.
- ``rail-cabling`` warning: a NIC of rail k sits alone on a leaf while rail k's other NICs share
  another leaf (two cables swapped).
- ``uplink-mtu`` warning: a leaf port no NIC is cabled to (an uplink, as far as the inventory
  says: it names no uplinks) carries the largest node frame.
- ``switch-unmanaged`` warning: a switch NICs are cabled to is not in the inventory (a node-only
  site: another team owns the switches), so the rules between the nodes and it (port MTU headroom,
  PFC priority, trust, DSCP map, lossless mode) were not checked; fabtune never connects to it.
- ``ecn-off`` error (live): a switch marks ECN on the lossless queue wherever nodes run DCQCN.
- ``live-pfc`` / ``live-dscp-map`` / ``live-trust`` error (live): the switch's effective PFC
  priority, DSCP map and trust agree with the nodes' (a switch's defaults count: SONiC maps DSCP 26
  to a lossy class unless told otherwise).
- ``live-mtu`` error (live): a port's operational MTU carries its node's largest frame.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from tuning.errors import InputError

if TYPE_CHECKING:
    from tuning.inventory import Device

#: bytes a switch port needs above a node's netdev MTU: Ethernet header 14 + one 802.1Q tag 4 +
#: FCS 4 (IEEE 802.3 clause 3, IEEE 802.1Q). The node MTU counts the IP packet only; a switch
#: port whose MTU leaves no room for the frame around it drops the node's largest packets. NVIDIA's
#: RoCE guides keep the switch at 9216 over the host's 9000 for this reason.
MTU_HEADER_BYTES = 22

#: rule id -> severity (the module docstring says what each checks)
RULES: dict[str, str] = {
    "mtu-headroom": "error", "spine-mtu": "error", "cnp-dscp": "error", "cnp-lossless": "error",
    "pfc-priority": "error", "trust": "error", "dscp-map": "error", "cnp-priority": "error",
    "qos-unmanaged": "error", "lossy-hop": "error", "rail-cabling": "warning", "uplink-mtu": "warning",
    "switch-unmanaged": "warning",
    "ecn-off": "error", "live-pfc": "error", "live-dscp-map": "error", "live-trust": "error", "live-mtu": "error",
}


@dataclass(frozen=True)
class LintFinding:
    """One broken rule.

    Attributes:
        rule: the rule id (:data:`RULES`).  severity: ``error`` or ``warning``.
        devices: the devices it is about, e.g. ``("node01", "leaf01")``.
        message: one line for people, naming the values.  fix: what to change.
        source / key: the inventory file and key to change; for a live finding the switch it was read
            from (``leaf01 (read from the switch)``) and the setting.
    """

    rule: str
    devices: tuple[str, ...]
    message: str
    fix: str
    source: str = "inventory"
    key: str = "-"

    @property
    def severity(self) -> str:
        """``error`` or ``warning`` (:data:`RULES`)."""
        return RULES[self.rule]

    def as_dict(self) -> dict:
        """Plain data for JSON (with ``severity``)."""
        return {**asdict(self), "devices": list(self.devices), "severity": self.severity}

    def as_input_error(self) -> InputError:
        """The error a load raises for it: file, key, message, rule and fix."""
        return InputError(self.source, self.key, f"{self.message}; rule: {self.fix} [{self.rule}]")


def _src(dev: Device, key: str, fallback: Device) -> str:
    """The file that set ``key`` on ``dev`` (or on ``fallback``, when ``dev`` uses the default)."""
    return dev.sources.get(key) or fallback.sources.get("roce") or "inventory"


def _node_rules(dev: Device) -> Iterator[LintFinding]:
    q = dev.spec.nic_qos
    if q is None:  # the node's QoS is not fabtune's
        return
    src = dev.sources.get("nic_qos", "inventory")
    if q.roce_dscp == q.cnp_dscp:
        yield LintFinding("cnp-dscp", (dev.name,), f"{dev.name}: roce_dscp and cnp_dscp are both {q.roce_dscp}",
                          "CNPs need their own DSCP (allowed: cnp_dscp != roce_dscp)", src, "nic_qos.cnp_dscp")
    if q.pfc_priority == q.cnp_priority:
        yield LintFinding("cnp-lossless", (dev.name,), f"{dev.name}: pfc_priority and cnp_priority are both "
                          f"{q.pfc_priority}", "CNPs travel outside the lossless priority (allowed: cnp_priority "
                          "!= pfc_priority)", src, "nic_qos.cnp_priority")


def _pair_rules(node: Device, sw: Device, port: str) -> Iterator[LintFinding]:
    """``node`` and the switch port its NIC is cabled to."""
    q, r = node.spec.nic_qos, sw.spec.roce
    pair, devs = f"{node.name} and {sw.name}", (node.name, sw.name)
    if r is not None and q is not None:
        if q.pfc_priority != r.pfc_priority:
            yield LintFinding("pfc-priority", devs, f"{pair}: node PFC priority {q.pfc_priority}, switch "
                              f"roce.pfc_priority {r.pfc_priority}", "one lossless priority",
                              _src(node, "nic_qos", sw), "nic_qos.pfc_priority")
        if q.trust != r.trust:
            yield LintFinding("trust", devs, f"{pair}: node trust {q.trust}, switch roce.trust {r.trust}",
                              "both trust the same field", _src(node, "nic_qos", sw), "nic_qos.trust")
        got = r.dscp_to_switch_priority.get(q.roce_dscp)
        if got != r.pfc_priority:
            to = f"maps the RoCE DSCP {q.roce_dscp} of {node.name} to priority {got}" if got is not None else \
                f"leaves the RoCE DSCP {q.roce_dscp} of {node.name} unmapped"
            yield LintFinding("dscp-map", devs, f"{pair}: {sw.name} {to}", f"the RoCE DSCP maps to the lossless "
                              f"priority {r.pfc_priority}", sw.sources.get("roce", "inventory"),
                              "roce.dscp_to_switch_priority")
    port_mtu = sw.spec.port_mtu_overrides.get(port, sw.spec.port_mtu)
    if node.spec.mtu is not None and port_mtu < node.spec.mtu + MTU_HEADER_BYTES:
        key = "port_mtu_overrides" if port in sw.spec.port_mtu_overrides else "port_mtu"
        yield LintFinding("mtu-headroom", devs, f"{pair}: {sw.name}:{port} MTU {port_mtu} < node MTU "
                          f"{node.spec.mtu} + {MTU_HEADER_BYTES} header bytes", "the port carries the node's largest "
                          f"frame (allowed: >= {node.spec.mtu + MTU_HEADER_BYTES})", sw.sources.get(key, "inventory"), key)


def _fabric_rules(node: Device, sw: Device) -> Iterator[LintFinding]:
    """``node`` and a switch anywhere on its paths: ``roce`` managed, lossless mode, the same PFC
    priority, trust and CNP priority, the node's RoCE DSCP to the lossless priority and its CNP
    DSCP to its CNP priority. The switch's file is named."""
    q, r = node.spec.nic_qos, sw.spec.roce
    pair, src, devs = f"{node.name} and {sw.name}", sw.sources.get("roce", "inventory"), (node.name, sw.name)
    if q is None:  # the node's QoS is not fabtune's: nothing to agree with
        return
    if r is None:
        yield LintFinding("qos-unmanaged", devs, f"{pair}: {sw.name} has roce: null (QoS left alone) while "
                          f"{node.name} runs PFC on priority {q.pfc_priority}", "every switch between the nodes is "
                          "lossless on the nodes' priority (allowed: a roce mapping; a switch fabtune must not manage "
                          "stays out of the switches group)", src, "roce")
        return
    cnp_apart = q.cnp_priority != q.pfc_priority  # else cnp-lossless names the node, not every switch
    for rule, key, have, want, why in (
            ("lossy-hop", "mode", r.mode, "lossless", "PFC needs every hop lossless"),
            ("pfc-priority", "pfc_priority", r.pfc_priority, q.pfc_priority, "one lossless priority"),
            ("trust", "trust", r.trust, q.trust, "both trust the same field"),
            ("cnp-priority", "cnp_priority", r.cnp_priority, q.cnp_priority if cnp_apart else r.cnp_priority,
             "one CNP priority")):
        if have != want:
            yield LintFinding(rule, devs, f"{pair}: {sw.name} roce.{key} {have}, {node.name} needs {want}",
                              f"{why} (allowed: {want})", src, f"roce.{key}")
    # against the switch's own priorities: a priority that differs is the rule above, not the map
    for dscp, want, what in ((q.roce_dscp, r.pfc_priority, "RoCE DSCP"), (q.cnp_dscp, r.cnp_priority, "CNP DSCP")):
        got = r.dscp_to_switch_priority.get(dscp)
        if got != want and not (what == "CNP DSCP" and q.cnp_dscp == q.roce_dscp):  # cnp-dscp says it
            have = f"{dscp} -> {got}" if got is not None else f"leaves {dscp} unmapped"
            prio = "pfc_priority" if what == "RoCE DSCP" else "cnp_priority"
            yield LintFinding("dscp-map", devs, f"{pair}: {sw.name} roce.dscp_to_switch_priority {have}, "
                              f"{node.name}'s {what} needs {dscp} -> {want}", f"the {what} maps to the switch's "
                              f"roce.{prio} {want} (allowed: {dscp} -> {want})", src, "roce.dscp_to_switch_priority")


def _spine_mtu(big: Device | None, sw: Device, cabled: set[str]) -> Iterator[LintFinding]:
    """A switch no NIC is cabled to (a spine) carries every node's frames: its ``port_mtu`` (even
    with no ports listed yet) and each override must hold the largest node frame (``big``: the
    first node with the largest managed MTU; None when no node manages its MTU)."""
    if cabled or big is None:
        return
    need = big.spec.mtu + MTU_HEADER_BYTES
    mtus = [("port_mtu", f"{sw.name} ports", sw.spec.port_mtu)]
    mtus += [("port_mtu_overrides", f"{sw.name}:{port}", mtu) for port, mtu in sorted(sw.spec.port_mtu_overrides.items())]
    for key, port, mtu in mtus:
        if mtu < need:
            yield LintFinding("spine-mtu", (big.name, sw.name), f"{big.name} and {sw.name}: {port} MTU {mtu} < node "
                              f"MTU {big.spec.mtu} + {MTU_HEADER_BYTES} header bytes", "a spine port carries the "
                              f"nodes' largest frame (allowed: >= {need})", sw.sources.get(key, "inventory"), key)


def _uplink_mtu(big: Device | None, sw: Device, cabled: set[str]) -> Iterator[LintFinding]:
    """A port a leaf lists that no NIC is cabled to may be its uplink to a spine (the inventory does
    not say which ports are uplinks): a warning when it could not carry the largest node frame."""
    if not cabled or big is None:
        return
    need = big.spec.mtu + MTU_HEADER_BYTES
    for port in sw.spec.port_names():
        mtu = sw.spec.port_mtu_overrides.get(port, sw.spec.port_mtu)
        if port not in cabled and mtu < need:
            key = "port_mtu_overrides" if port in sw.spec.port_mtu_overrides else "port_mtu"
            yield LintFinding("uplink-mtu", (big.name, sw.name), f"{sw.name}:{port} (no NIC cabled: an uplink?) MTU "
                              f"{mtu} < node MTU {big.spec.mtu} + {MTU_HEADER_BYTES} header bytes", "a port on the "
                              f"nodes' paths carries their largest frame (allowed: >= {need}); leave a port that "
                              "carries no RoCE out of the switch's ports", sw.sources.get(key, "inventory"), key)


def _rail_cabling(nodes: list[Device]) -> Iterator[LintFinding]:
    """A NIC of rail k alone on its leaf while rail k's other NICs share another leaf."""
    leaves: dict[int, Counter] = {}
    for dev in nodes:
        for nic in dev.spec.nics:
            leaves.setdefault(nic.rail, Counter())[nic.switch] += 1
    top = {rail: counts.most_common(1)[0] for rail, counts in leaves.items()}  # once a rail: linear in NICs
    for dev in nodes:
        for i, nic in enumerate(dev.spec.nics):
            home, most = top[nic.rail]
            if leaves[nic.rail][nic.switch] == 1 and home != nic.switch and most >= 2:
                yield LintFinding("rail-cabling", (dev.name, nic.switch, home), f"{dev.name}:{nic.netdev} (rail "
                                  f"{nic.rail}) is cabled to {nic.switch}:{nic.switch_port}, while {most} other NICs "
                                  f"of rail {nic.rail} are on {home}", f"check the cable; if it is right, set "
                                  f"nics.{i}.rail to the rail {nic.switch} serves", dev.sources.get("nics", "inventory"),
                                  f"nics.{i}.switch")


def inventory_findings(devices: dict[str, Device]) -> Iterator[LintFinding]:
    """Every inventory rule's findings, each once (:func:`_inventory_findings`; a rule a node breaks
    with each of its NICs on one switch is one finding)."""
    seen: set[tuple] = set()
    for f in _inventory_findings(devices):
        if (f.rule, f.devices, f.message) not in seen:
            seen.add((f.rule, f.devices, f.message))
            yield f


def _inventory_findings(devices: dict[str, Device]) -> Iterator[LintFinding]:
    """Every inventory rule's findings, node by node, then every switch against the nodes (linear
    in the fleet: the switch-wide rules depend on a node's ``nic_qos`` only, so the first node of
    each distinct ``nic_qos`` stands for the others). A node that leaves a setting alone
    (``nic_qos`` or ``mtu`` unset) is not checked for it. Lazy: a load stops at the first error."""
    nodes = [d for d in devices.values() if d.kind.endpoint]
    for dev in nodes:
        yield from _node_rules(dev)
        for nic in dev.spec.nics:
            sw = devices.get(nic.switch)
            if sw is not None and sw.kind.fabric:
                yield from _pair_rules(dev, sw, nic.switch_port)
    by_qos: dict[str, Device] = {}
    for dev in nodes:
        if dev.spec.nic_qos is not None:
            by_qos.setdefault(dev.spec.nic_qos.model_dump_json(), dev)
    cabled: dict[str, set[str]] = {}
    for dev in nodes:
        for nic in dev.spec.nics:
            cabled.setdefault(nic.switch, set()).add(nic.switch_port)
    sized = [d for d in nodes if d.spec.mtu is not None]  # an unmanaged MTU is not known here
    big = max(sized, key=lambda d: d.spec.mtu) if sized else None
    for sw in (d for d in devices.values() if d.kind.fabric):
        for dev in by_qos.values():
            yield from _fabric_rules(dev, sw)
        yield from _spine_mtu(big, sw, cabled.get(sw.name, set()))
        yield from _uplink_mtu(big, sw, cabled.get(sw.name, set()))
    yield from _unmanaged(nodes, devices)
    yield from _rail_cabling(nodes)


def _unmanaged(nodes: list[Device], devices: dict[str, Device]) -> Iterator[LintFinding]:
    """One warning per switch the NICs name that the inventory leaves out: what was not checked."""
    left: dict[str, list[Device]] = {}
    for dev in nodes:
        for nic in dev.spec.nics:
            if nic.switch not in devices and dev not in left.setdefault(nic.switch, []):
                left[nic.switch].append(dev)
    for sw, devs in sorted(left.items()):
        names = ", ".join(d.name for d in devs[:3]) + (f" (+{len(devs) - 3} more)" if len(devs) > 3 else "")
        yield LintFinding("switch-unmanaged", (sw, *(d.name for d in devs[:3])), f"{sw}: not in the inventory "
                          f"(cabled to {names}): its port MTU headroom, PFC priority, trust, DSCP map and lossless "
                          f"mode were not checked against the nodes", f"add {sw} to the inventory (fabtune then checks "
                          "and tunes it), or have its owners check these against the nodes' nic_qos and mtu", devs[0].sources.get("nics", "inventory"), "nics.switch")


def live_findings(devices: dict[str, Device], states: dict) -> Iterator[LintFinding]:
    """The live rules over ``states`` (switch name -> its :class:`tuning.switch.base.SwitchState`):
    each switch's effective RoCE QoS (``states[name].roce``, as the device reports
    it, defaults included) and its ports' operational MTU against the nodes cabled to it and, for
    QoS, every node (any switch may be on a path)."""
    nodes = [d for d in devices.values() if d.kind.endpoint and d.spec.nic_qos is not None]
    by_qos = {d.spec.nic_qos.model_dump_json(): d for d in reversed(nodes)}
    for name, state in states.items():
        roce = getattr(devices[name].spec, "roce", None) if name in devices else None
        for node in by_qos.values():
            # the lossless queue: the inventory's lossless_tc where it manages the switch, else the priority's
            tc = roce.lossless_tc if roce is not None else node.spec.nic_qos.pfc_priority
            yield from _live_qos(node, name, state, tc, _owned(devices.get(name)))
    for dev in (d for d in devices.values() if d.kind.endpoint and d.spec.mtu is not None):
        for nic in dev.spec.nics:
            oper = states[nic.switch].ports.get(nic.switch_port) if nic.switch in states else None
            if oper is not None and oper < dev.spec.mtu + MTU_HEADER_BYTES:
                yield LintFinding("live-mtu", (dev.name, nic.switch), f"{nic.switch}:{nic.switch_port} runs MTU {oper} "
                                  f"(read from the switch) < {dev.name} MTU {dev.spec.mtu} + {MTU_HEADER_BYTES}",
                                  "apply the inventory (fabtune apply) or fix the port's operational MTU"
                                  if _owned(devices.get(nic.switch)) else _NOT_OURS,
                                  f"{nic.switch} (read from the switch)", f"port {nic.switch_port}")


#: the fix of a live finding on a ``manage: false`` switch: fabtune never writes it
_NOT_OURS = ("the switch is manage: false (fabtune never writes it): have its owners set it, or make its host_vars "
             "say what it runs")


def _owned(dev: Device | None) -> bool:
    """Whether fabtune may write ``dev`` (in the inventory, not ``manage: false``)."""
    return dev is not None and getattr(dev.spec, "manage", True)


def _live_qos(node: Device, name: str, state, lossless_tc: int, owned: bool = True) -> Iterable[LintFinding]:
    q, r, devs = node.spec.nic_qos, state.roce, (node.name, name)
    fix = "apply the inventory's roce to the switch (fabtune apply), then lint again" if owned else _NOT_OURS
    src = f"{name} (read from the switch)"
    if r.pfc_priority != q.pfc_priority:
        runs = f"runs PFC on priority {r.pfc_priority}" if r.pfc_priority is not None else "runs no PFC"
        yield LintFinding("live-pfc", devs, f"{name} {runs} (read from the switch), {node.name} on {q.pfc_priority}",
                          fix, src, "roce.pfc_priority")
    if r.trust is not None and q.trust not in r.trust.split(","):
        yield LintFinding("live-trust", devs, f"{name} trusts {r.trust} (read from the switch), {node.name} {q.trust}",
                          fix, src, "roce.trust")
    got = r.dscp_to_switch_priority.get(q.roce_dscp)
    if got != q.pfc_priority:
        on = f"on priority {got}" if got is not None else "in no mapped class"
        yield LintFinding("live-dscp-map", devs, f"{name} puts {node.name}'s RoCE DSCP {q.roce_dscp} {on} (read from "
                          f"the switch, defaults included), not the lossless {q.pfc_priority}", fix, src,
                          "roce.dscp_to_switch_priority")
    if q.ecn and lossless_tc not in r.ecn_tcs:
        yield LintFinding("ecn-off", devs, f"{name} marks ECN on traffic classes {list(r.ecn_tcs) or 'none'} (read from "
                          f"the switch), not on the lossless class of {node.name}, which runs DCQCN", fix, src, "roce")
