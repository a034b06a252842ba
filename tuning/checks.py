"""Checks across an inventory that no single host's model can make: every vars file belongs
to a group or host, every NIC is cabled to a port its switch lists, no port carries two NICs,
connection values are usable, and QoS agrees between each node, its leaf and every other switch
(:func:`check_qos`). Each raises :class:`tuning.errors.InputError` naming the
file and key, before any device is contacted.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tuning.errors import InputError
from tuning.model.layout import VARS_EXTENSIONS

if TYPE_CHECKING:
    from tuning.inventory import Device


def check_vars_files(inv: Path, groups: set[str], hosts: set[str]) -> None:
    """A ``group_vars``/``host_vars`` entry (``NAME``, ``NAME/``, ``NAME.yml``, ``.yaml``, ``.json``, the
    names Ansible reads) that matches no group/host is a typo that would silently drop its settings
    (``gpu-nodes.yml`` for ``gpu_nodes``): refuse it. Hidden and ``~`` files are skipped, as Ansible does."""
    for folder, names, what in (("group_vars", groups, "group"), ("host_vars", hosts, "host")):
        if not (inv / folder).is_dir():
            continue
        for path in sorted((inv / folder).iterdir()):
            if path.name.startswith(".") or path.name.endswith("~"):
                continue
            stem = path.stem if path.suffix in VARS_EXTENSIONS else path.name
            if path.suffix and path.suffix not in VARS_EXTENSIONS or stem in names:
                continue
            raise InputError(str(path), "-", f"no {what} called {stem!r} in hosts.yaml; "
                                              f"{what}s: {', '.join(sorted(names))}")


def check_cabling(devices: dict[str, Device], hosts_file: Path) -> None:
    """Every NIC names a switch of the inventory and a port that switch lists, once."""
    seen: dict[tuple[str, str], str] = {}
    switches = ", ".join(d.name for d in devices.values() if d.kind.fabric)
    for dev in (d for d in devices.values() if d.kind.endpoint):
        src = dev.sources.get("nics", str(hosts_file))
        for i, nic in enumerate(dev.spec.nics):
            sw = devices.get(nic.switch)
            if sw is None or not sw.kind.fabric:
                raise InputError(src, f"nics.{i}.switch", f"{nic.switch!r} is not a switch of this inventory; "
                                                          f"allowed: {switches}")
            if nic.switch_port not in sw.spec.port_names():
                raise InputError(src, f"nics.{i}.switch_port", f"{nic.switch}:{nic.switch_port} is not in "
                                 f"{nic.switch}'s ports ({', '.join(sw.spec.ports)})")
            other = seen.setdefault((nic.switch, nic.switch_port), f"{dev.name}:{nic.netdev}")
            if other != f"{dev.name}:{nic.netdev}":
                raise InputError(src, f"nics.{i}.switch_port", f"{nic.switch}:{nic.switch_port} is already "
                                 f"cabled to {other}; one NIC per port")


def check_addresses(devices: dict[str, Device], hosts_file: Path) -> None:
    """No two devices share one SSH endpoint (address:port), no two NICs one IPv4 address."""
    endpoints: dict[tuple[str, int], str] = {}
    addresses: dict[str, str] = {}
    for dev in devices.values():
        c = dev.connection
        other = endpoints.setdefault((c.hostname, c.port), dev.name)
        if other != dev.name:
            raise InputError(dev.sources.get("ansible_port", dev.sources.get("ansible_host", str(hosts_file))),
                             "ansible_host", f"{dev.name} and {other} both use {c.hostname}:{c.port}; "
                             "allowed: one device per address and port")
        if not dev.kind.endpoint:
            continue
        for i, nic in enumerate(dev.spec.nics):
            ip = str(nic.ipv4.ip)
            other = addresses.setdefault(ip, f"{dev.name}:{nic.netdev}")
            if other != f"{dev.name}:{nic.netdev}":
                raise InputError(dev.sources.get("nics", str(hosts_file)), f"nics.{i}.ipv4",
                                 f"{dev.name}:{nic.netdev} and {other} both have {ip}; allowed: one NIC per address")


#: bytes a switch port needs above a node's netdev MTU: Ethernet header 14 + one 802.1Q tag 4 +
#: FCS 4 (IEEE 802.3 clause 3, IEEE 802.1Q). The node MTU counts the IP packet only; a switch
#: port whose MTU leaves no room for the frame around it drops the node's largest packets. NVIDIA's
#: RoCE guides keep the switch at 9216 over the host's 9000 for this reason.
MTU_HEADER_BYTES = 22


def _src(dev: Device, key: str, fallback: Device) -> str:
    """The file that set ``key`` on ``dev`` (or on ``fallback``, when ``dev`` uses the default)."""
    return dev.sources.get(key) or fallback.sources.get("roce") or "inventory"


def _node_rules(dev: Device) -> None:
    q = dev.spec.nic_qos
    if q is None:  # the node's QoS is not fabtune's
        return
    src = dev.sources.get("nic_qos", "inventory")
    if q.roce_dscp == q.cnp_dscp:
        raise InputError(src, "nic_qos.cnp_dscp", f"{dev.name}: roce_dscp and cnp_dscp are both {q.roce_dscp}; "
                         "rule: CNPs need their own DSCP (allowed: cnp_dscp != roce_dscp)")
    if q.pfc_priority == q.cnp_priority:
        raise InputError(src, "nic_qos.cnp_priority", f"{dev.name}: pfc_priority and cnp_priority are both "
                         f"{q.pfc_priority}; rule: CNPs travel outside the lossless priority "
                         "(allowed: cnp_priority != pfc_priority)")


def _pair_rules(node: Device, sw: Device, port: str) -> None:
    q, r = node.spec.nic_qos, sw.spec.roce
    pair = f"{node.name} and {sw.name}"
    if r is not None and q is not None:
        if q.pfc_priority != r.pfc_priority:
            raise InputError(_src(node, "nic_qos", sw), "nic_qos.pfc_priority", f"{pair}: node PFC priority "
                             f"{q.pfc_priority}, switch roce.pfc_priority {r.pfc_priority}; rule: one lossless priority")
        if q.trust != r.trust:
            raise InputError(_src(node, "nic_qos", sw), "nic_qos.trust", f"{pair}: node trust {q.trust}, "
                             f"switch roce.trust {r.trust}; rule: both trust the same field")
        got = r.dscp_to_switch_priority.get(q.roce_dscp)
        if got != r.pfc_priority:
            to = f"maps the RoCE DSCP {q.roce_dscp} of {node.name} to priority {got}" if got is not None else \
                f"leaves the RoCE DSCP {q.roce_dscp} of {node.name} unmapped"
            raise InputError(sw.sources.get("roce", "inventory"), "roce.dscp_to_switch_priority", f"{pair}: "
                             f"{sw.name} {to}; rule: the RoCE DSCP maps to the lossless priority {r.pfc_priority}")
    port_mtu = sw.spec.port_mtu_overrides.get(port, sw.spec.port_mtu)
    if node.spec.mtu is not None and port_mtu < node.spec.mtu + MTU_HEADER_BYTES:
        key = "port_mtu_overrides" if port in sw.spec.port_mtu_overrides else "port_mtu"
        raise InputError(sw.sources.get(key, "inventory"), key, f"{pair}: {sw.name}:{port} MTU {port_mtu} < node "
                         f"MTU {node.spec.mtu} + {MTU_HEADER_BYTES} header bytes; rule: the port carries the "
                         f"node's largest frame (allowed: >= {node.spec.mtu + MTU_HEADER_BYTES})")


def _fabric_rules(node: Device, sw: Device) -> None:
    """``node`` and a switch anywhere on its paths: PFC on the same priority in lossless mode, the
    same trust, the node's RoCE DSCP to the lossless priority and its CNP DSCP to its CNP priority.
    The switch's file is named: each node already agrees with its own leaf (:func:`_pair_rules`)."""
    q, r = node.spec.nic_qos, sw.spec.roce
    pair, src = f"{node.name} and {sw.name}", sw.sources.get("roce", "inventory")
    if q is None:  # the node's QoS is not fabtune's: nothing to agree with
        return
    if r is None:
        raise InputError(src, "roce", f"{pair}: {sw.name} has roce: null (QoS left alone) while {node.name} runs "
                         f"PFC on priority {q.pfc_priority}; rule: every switch between the nodes is lossless on "
                         "the nodes' priority (allowed: a roce mapping; a switch fabtune must not manage stays "
                         "out of the switches group)")
    wrong = [(f"roce.{k}", have, want, why) for k, have, want, why in (
        ("mode", r.mode, "lossless", "PFC needs every hop lossless"),
        ("pfc_priority", r.pfc_priority, q.pfc_priority, "one lossless priority"),
        ("trust", r.trust, q.trust, "both trust the same field"),
        ("cnp_priority", r.cnp_priority, q.cnp_priority, "one CNP priority")) if have != want]
    for dscp, want, what in ((q.roce_dscp, q.pfc_priority, "nic_qos.roce_dscp"),
                             (q.cnp_dscp, q.cnp_priority, "nic_qos.cnp_dscp")):
        got = r.dscp_to_switch_priority.get(dscp)
        if got != want:
            prio = "pfc_priority" if what.endswith("roce_dscp") else "cnp_priority"
            have = f"{dscp} -> {got}" if got is not None else f"leaves {dscp} unmapped,"
            wrong.append(("roce.dscp_to_switch_priority", have, f"{dscp} -> {want}",
                          f"{node.name}'s {what} {dscp} maps to its nic_qos.{prio} {want}"))
    if wrong:
        key, have, want, why = wrong[0]
        raise InputError(src, key, f"{pair}: {sw.name} {key} {have}, {node.name} needs {want}; rule: {why} "
                         f"(allowed: {want})")


def _spine_mtu(big: Device | None, sw: Device, cabled: set[str]) -> None:
    """A switch no NIC is cabled to (a spine) carries every node's frames: its ``port_mtu`` (even
    with no ports listed yet) and each override must hold the largest node frame (``big``: the
    first node with the largest managed MTU; None when no node manages its MTU)."""
    if cabled or big is None:
        return
    need = big.spec.mtu + MTU_HEADER_BYTES
    mtus = [("port_mtu", f"{sw.name} ports", sw.spec.port_mtu)]
    mtus += [("port_mtu_overrides", f"{sw.name}:{port}", mtu)
             for port, mtu in sorted(sw.spec.port_mtu_overrides.items())]
    for key, port, mtu in mtus:
        if mtu < need:
            raise InputError(sw.sources.get(key, "inventory"), key, f"{big.name} and {sw.name}: {port} MTU {mtu}"
                             f" < node MTU {big.spec.mtu} + {MTU_HEADER_BYTES} header bytes; rule: a spine "
                             f"port carries the nodes' largest frame (allowed: >= {need})")


def check_qos(devices: dict[str, Device]) -> None:
    """QoS that must agree across devices before anything is pushed (the first rules of a fabric lint).

    A node that leaves a setting alone (``nic_qos`` or ``mtu`` unset) is not checked for it.
    Per node: RoCE DSCP != CNP DSCP, PFC priority != CNP priority. Per node and the switch at the
    other end of each NIC: one PFC priority, one trust mode, the switch maps the node's RoCE DSCP to
    the lossless priority, and the port MTU >= node MTU + :data:`MTU_HEADER_BYTES`.

    Then per node and every switch of the inventory (the inventory does not model leaf-spine
    uplinks, so any switch may be on a path between two nodes): ``roce`` set (``roce: null``,
    "leave QoS alone", is refused once a node runs fabtune's ``nic_qos``, since its PFC needs every
    hop lossless), ``mode: lossless``, the same PFC priority, trust and CNP priority, and the DSCP map
    sending the RoCE DSCP to the PFC priority and the CNP DSCP to the CNP priority. Every port of a
    switch no NIC is cabled to (a spine) is >= the largest node MTU + :data:`MTU_HEADER_BYTES`; a
    leaf port no NIC is cabled to is not known to be an uplink and is not checked.

    Raises:
        InputError: naming the file, the key, both devices and the rule.
    """
    nodes = [d for d in devices.values() if d.kind.endpoint]
    for dev in nodes:
        _node_rules(dev)
        for nic in dev.spec.nics:
            sw = devices.get(nic.switch)
            if sw is not None and sw.kind.fabric:
                _pair_rules(dev, sw, nic.switch_port)
    _switch_wide_rules(nodes, [d for d in devices.values() if d.kind.fabric])


def _switch_wide_rules(nodes: list[Device], switches: list[Device]) -> None:
    """Every switch against every node (:func:`_fabric_rules`, :func:`_spine_mtu`), in time linear in
    the fleet. Raises InputError as :func:`check_qos`."""
    # linear in the fleet: the switch-wide rules depend on a node's nic_qos only, so the first node of
    # each distinct nic_qos stands for the others (the one the node-by-node loop would name first)
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
    for sw in switches:
        for dev in by_qos.values():
            _fabric_rules(dev, sw)
        _spine_mtu(big, sw, cabled.get(sw.name, set()))
