"""Targets: the device contract (:mod:`tuning.targets.base`) and its registry.

The registry maps ``(role, platform)`` to the Target class that serves it; classes are named by
import path and imported when first resolved, so a node-only run never imports a switch OS's SSH
library. Built in: ``("node", "linux")`` -> :class:`tuning.targets.node.NodeTarget` and, for every
switch platform of :data:`tuning.model.platforms.SWITCH_DRIVERS`, ``("switch", platform)`` ->
:class:`tuning.targets.switch.SwitchTarget`. A new device kind registers itself with
:func:`register`, a new switch OS with :func:`register_switch_os`; nothing under
``tuning/rollout`` changes.
"""

from __future__ import annotations

import dataclasses
import importlib

from tuning.errors import InputError
from tuning.model.platforms import NODE_PLATFORMS, SWITCH_DRIVERS, SWITCH_PORTS, PortForm
from tuning.targets.base import DeviceJournal, Target, journaled_connection, pause_for_test  # noqa: F401

#: (role, platform) -> Target class, or its ``module:Class`` path until first resolved; a switch
#: platform of SWITCH_DRIVERS that is not listed here is served by the SwitchTarget
_REGISTRY: dict[tuple[str, str], type | str] = {("node", p): "tuning.targets.node:NodeTarget" for p in NODE_PLATFORMS}
_REGISTRY[("sm", "opensm")] = "tuning.targets.sm:SmTarget"  # the InfiniBand subnet manager (issue 22)
_SWITCH_TARGET = "tuning.targets.switch:SwitchTarget"
#: a node's platform when its inventory names none (every node is a Linux host today)
NODE_PLATFORM = NODE_PLATFORMS[0]


def register(role: str, platform: str, cls: type | str) -> None:
    """Serve devices of ``role`` and ``platform`` with ``cls`` (a Target class or ``module:Class``)."""
    _REGISTRY[(role, platform)] = cls


def register_switch_os(platform: str, driver: type | str, ports: "PortForm | None" = None) -> None:
    """A new switch OS: its driver (a :class:`tuning.switch.base.SwitchDriver` class or its
    ``module:Class``), served by the SwitchTarget, and how it names ports
    (:class:`tuning.model.platforms.PortForm`; default NVUE's); the inventory then accepts ``platform``."""
    SWITCH_DRIVERS[platform] = driver
    if ports is not None:
        SWITCH_PORTS[platform] = ports


def _entries() -> dict[tuple[str, str], type | str]:
    return {**{("switch", p): _SWITCH_TARGET for p in SWITCH_DRIVERS}, **_REGISTRY}


def roles() -> tuple[str, ...]:
    """Every role some target serves (``node``, ``switch``)."""
    return tuple(dict.fromkeys(r for r, _ in _entries()))


#: the domain of every switch's settings and of a subnet manager's files (``tuning.targets.sm_partitions.DOMAIN``)
SWITCH_DOMAIN, SM_DOMAIN = "switch", "sm"


def domains() -> tuple[str, ...]:
    """Every domain a run can be limited to (``--domain``, the playbooks' tags and task files): the
    node domains in apply order (:func:`tuning.node.domains`), then ``switch``, then ``sm``."""
    from tuning.node import domains as node_domains

    return (*(d.name for d in node_domains()), SWITCH_DOMAIN, SM_DOMAIN)


def platforms(role: str) -> tuple[str, ...]:
    """The platforms registered for ``role``."""
    return tuple(p for r, p in _entries() if r == role)


def platform_of(dev) -> str:
    """An inventory device's platform (its spec's ``platform``; a node without one: ``linux``)."""
    return getattr(dev.spec, "platform", None) or NODE_PLATFORM


def target_class(role: str, platform: str) -> type:
    """The Target class of ``(role, platform)``.

    Raises:
        InputError: no target serves it (names the allowed platforms of the role).
    """
    entry = _entries().get((role, platform))
    if entry is None:
        raise InputError("platform", f"{role}/{platform}"[:60],
                         f"no target serves it; allowed for a {role}: {', '.join(platforms(role)) or 'none'}")
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module), attr)
    return entry


def target_for(dev) -> Target:
    """The (unopened) Target of an inventory :class:`~tuning.inventory.Device`. Raises InputError."""
    platform = platform_of(dev)
    return target_class(dev.role, platform)(dev.name, dev.connection, platform, device=dev)


def local_target_for(dev, sysroot: str | None = None) -> Target:
    """The (unopened) Target of an inventory device driven from the device itself (node-local
    mode: ``fabtune node``, run on the node by a scheduler): its class's ``local`` constructor;
    ``sysroot``: where this process sees the node's filesystem (None: the inventory's).

    Raises:
        InputError: no target serves the device, or its kind cannot be driven from itself (a switch).
    """
    cls = target_class(dev.role, platform_of(dev))
    local = getattr(cls, "local", None)
    if local is None:
        raise InputError("--node", dev.name, f"a {dev.role} is not driven from itself; only nodes run "
                         "`fabtune node` (its controller drives it)")
    return local(dev, sysroot)


def local_target_from_record(name: str, record: dict, sysroot: str | None = None) -> Target:
    """:func:`target_from_record` driven from the device itself (``fabtune node restore``).

    Raises:
        InputError: the record's kind cannot be driven from itself (a switch).
        RollbackError: as :func:`target_from_record`.
    """
    t = target_from_record(name, record)
    local = getattr(type(t), "local_from", None)
    if sysroot is not None and local is not None:
        t.connection = dataclasses.replace(t.connection, sysroot=sysroot)
    if local is None:
        raise InputError("--node", name, f"a {record.get('role')} is not restored from itself; use "
                         "`fabtune rollback RUN_ID` on the controller")
    return local(t)


def target_from_record(name: str, record: dict) -> Target:
    """The (unopened) Target of a device from its journal record alone (rollback).

    Raises:
        RollbackError: the record lacks its connection facts or, for a switch, its platform
            (a journal of an older fabtune: restore it by hand).
        InputError: no target serves the record's role and platform.
    """
    from tuning.errors import RollbackError

    conn = journaled_connection(name, record)
    platform = record.get("platform")
    if not isinstance(platform, str):
        if record.get("role") != "node":
            raise RollbackError(f"the journal names no platform for this {record.get('role')} (journal of an older "
                                "fabtune): restore it by hand", host=name, phase="restore")
        platform = NODE_PLATFORM
    return target_class(str(record.get("role")), platform)(name, conn, platform)
