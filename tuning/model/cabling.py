"""Leaf-to-spine cabling as the inventory gives it: a leaf's ``uplinks`` key.

A leaf's host_vars name each uplink once, at its leaf end, as a NIC names its leaf port
(``switch`` / ``switch_port``)::

    # host_vars/su1-leaf-r0.yml
    ports: [swp1-32, swp33-40]
    uplinks:
      swp33: su1-spine01:swp1     # leaf port: spine:spine port
      swp34: su1-spine01:swp2

The far end's text is ``SWITCH:PORT``: a host name (:func:`tuning.model.grammar.check_host_name`,
which has no ``:``) and one port (:func:`tuning.model.grammar.check_port_name`, whose names have
no ``:`` either), so the split is unambiguous. :func:`check_uplinks` checks the cabling against
the whole inventory at load; :func:`inventory_links` hands it to the verification schedule
(:func:`tuning.verify.fabric_topology.topology_of`). A leaf without the key has no cabling in the
inventory: the schedule then assumes one (and says so).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator

from tuning.errors import InputError
from tuning.model import grammar


def check_uplink_end(value: object) -> str:
    """The far end of an uplink, ``SWITCH:PORT`` (``su1-spine01:swp1``, ``spine2:Ethernet3/1``).

    Raises:
        ValueError: not a string, no ``:``, or a part that fails its grammar (the message names it).
    """
    if not isinstance(value, str) or value.count(":") != 1:
        raise ValueError(f"{value!r} is not SWITCH:PORT; allowed: a switch of the inventory and one of its "
                         "ports, like spine01:swp1")
    switch, port = value.split(":")
    _host_name(switch)
    _port_name(port)
    return value


#: the grammars, once per distinct text (a fleet's 20,000 uplinks name a few hundred spines and ports)
_host_name = grammar.once_per_text(grammar.check_host_name)
_port_name = grammar.once_per_text(grammar.check_port_name)


#: a validated ``SWITCH:PORT`` (the type of ``SwitchSpec.uplinks``' values)
UplinkEnd = Annotated[str, BeforeValidator(check_uplink_end)]


def _ports(dev, cache: dict[str, set[str]]) -> set[str]:
    if dev.name not in cache:
        cache[dev.name] = set(dev.spec.port_names())
    return cache[dev.name]


def check_uplinks(devices: dict, hosts_file: Path) -> None:
    """Every ``uplinks`` entry of every switch: its leaf port is one of the switch's ``ports`` and no
    NIC is cabled to it; the far end is another switch of the inventory that no NIC is cabled to
    (a spine), with that port among its ``ports``; no spine port is cabled twice.

    Args:
        devices: name -> ``tuning.inventory.Device`` (every device of the inventory).
        hosts_file: named in an error when a device has no source file for the key.

    Raises:
        InputError: names the file, ``uplinks.<port>`` and what is allowed.
    """
    nic_ports: dict[str, set[str]] = {}
    for dev in (d for d in devices.values() if d.kind.endpoint):
        for nic in dev.spec.nics:
            nic_ports.setdefault(nic.switch, set()).add(nic.switch_port)
    cache: dict[str, set[str]] = {}
    taken: dict[str, str] = {}
    for leaf in (d for d in devices.values() if d.kind.fabric and getattr(d.spec, "uplinks", None)):
        src = leaf.sources.get("uplinks", str(hosts_file))
        for port, far in leaf.spec.uplinks.items():
            key, spine_name, spine_port = f"uplinks.{port}", *far.split(":")
            if port not in _ports(leaf, cache):
                raise InputError(src, key, f"{leaf.name}:{port} is not in {leaf.name}'s ports "
                                 f"({', '.join(leaf.spec.ports)})")
            if port in nic_ports.get(leaf.name, ()):
                raise InputError(src, key, f"{leaf.name}:{port} is cabled to a NIC; an uplink is a port no NIC uses")
            spine = devices.get(spine_name)
            if spine is None or not spine.kind.fabric or spine_name in nic_ports or spine_name == leaf.name:
                spines = sorted(n for n, d in devices.items() if d.kind.fabric and n not in nic_ports)
                raise InputError(src, key, f"{spine_name!r} is not a spine of this inventory (a switch no NIC is "
                                 f"cabled to); allowed: {', '.join(spines) or 'none'}")
            if spine_port not in _ports(spine, cache):
                raise InputError(src, key, f"{far} is not in {spine_name}'s ports ({', '.join(spine.spec.ports)})")
            other = taken.setdefault(far, f"{leaf.name}:{port}")
            if other != f"{leaf.name}:{port}":
                raise InputError(src, key, f"{far} is already cabled to {other}; one cable per port")


def inventory_links(switches: list) -> list[tuple[str, str, str, str]]:
    """The cabling the inventory gives: ``(leaf, leaf port, spine, spine port)`` for every
    ``uplinks`` entry, switch by switch in inventory order, in each one's key order."""
    return [(sw.name, port, *far.split(":")) for sw in switches
            for port, far in (getattr(sw.spec, "uplinks", None) or {}).items()]
