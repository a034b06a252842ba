"""Checks across an inventory that no single host's model can make: every vars file belongs
to a group or host, every NIC is cabled to a port its switch lists, no port carries two NICs,
connection values are usable, and QoS agrees between each node, its leaf and every other switch
(:func:`check_qos`, the fabric lint's inventory rules: :mod:`tuning.lint`). Each raises :class:`tuning.errors.InputError` naming the
file and key, before any device is contacted.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tuning.errors import InputError
from tuning.model.layout import VARS_EXTENSIONS
from tuning.model.cabling import check_uplinks

if TYPE_CHECKING:
    from tuning.inventory import Device


def check_vars_files(inv: Path, groups: set[str], hosts: set[str]) -> None:
    """A ``group_vars``/``host_vars`` entry (``NAME``, ``NAME/``, ``NAME.yml``, ``.yaml``, ``.json``, the
    names Ansible reads) that matches no group/host is a typo that would silently drop its settings
    (``gpu-nodes.yml`` for ``gpu_nodes``): refuse it. Hidden and ``~`` files are skipped, as Ansible does."""
    for folder, names, what in (("group_vars", groups, "group"), ("host_vars", hosts, "host")):
        if not (inv / folder).is_dir():
            continue
        for path in sorted((inv / folder).iterdir(), key=lambda p: p.name):  # one folder: its names' order
            if path.name.startswith(".") or path.name.endswith("~"):
                continue
            stem = path.stem if path.suffix in VARS_EXTENSIONS else path.name
            if path.suffix and path.suffix not in VARS_EXTENSIONS or stem in names:
                continue
            raise InputError(str(path), "-", f"no {what} called {stem!r} in hosts.yaml; "
                                              f"{what}s: {', '.join(sorted(names))}")


def check_cabling(devices: dict[str, Device], hosts_file: Path) -> None:
    """Every NIC names a switch of the inventory and a port that switch lists, once. A node-only
    inventory (no switch at all: the network team owns them) names its switches by the NICs alone:
    fabtune never connects to them, and the fabric lint says which cross-device rules it could not
    check there (``switch-unmanaged``). With switches in the inventory, a name it lacks is a typo."""
    seen: dict[tuple[str, str], str] = {}
    names: dict[str, set[str]] = {}  # switch -> its ports, expanded once
    switches = ", ".join(d.name for d in devices.values() if d.kind.fabric)
    for dev in (d for d in devices.values() if d.kind.endpoint):
        src = dev.sources.get("nics", str(hosts_file))
        for i, nic in enumerate(dev.spec.nics):
            sw = devices.get(nic.switch)
            if (sw is None and switches) or (sw is not None and not sw.kind.fabric):
                raise InputError(src, f"nics.{i}.switch", f"{nic.switch!r} is not a switch of this inventory; "
                                                          f"allowed: {switches} (or no switch at all: a node-only "
                                                          "inventory)")
            if sw is not None and nic.switch_port not in (names.get(sw.name) or
                                                           names.setdefault(sw.name, set(sw.spec.port_names()))):
                raise InputError(src, f"nics.{i}.switch_port", f"{nic.switch}:{nic.switch_port} is not in "
                                 f"{nic.switch}'s ports ({', '.join(sw.spec.ports)})")
            other = seen.setdefault((nic.switch, nic.switch_port), f"{dev.name}:{nic.netdev}")
            if other != f"{dev.name}:{nic.netdev}":
                raise InputError(src, f"nics.{i}.switch_port", f"{nic.switch}:{nic.switch_port} is already "
                                 f"cabled to {other}; one NIC per port")
    check_uplinks(devices, hosts_file)  # the leaf-spine cabling, where the inventory gives it


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


def check_qos(devices: dict[str, Device]) -> None:
    """QoS that must agree across devices before anything is pushed: the inventory rules of the
    fabric lint (:func:`tuning.lint.inventory_findings`: MTU headroom on leaf and spine ports, CNP
    DSCP and priority apart from RoCE's, one PFC priority, trust and CNP priority on every node and
    switch, the DSCP maps, every switch lossless and managed), the first error refused.

    Raises:
        InputError: naming the file, the key, both devices, the rule and its id.
    """
    from tuning.lint import inventory_findings

    first = next((f for f in inventory_findings(devices) if f.severity == "error"), None)
    if first is not None:
        raise first.as_input_error()
