"""Fault injection into the lab fabric (``fabtune lab inject``).

A fault sits on one end of a cable: a node NIC (``node01:mlx5_0``) or a switch port
(``leaf01:swp1``). It is persisted in ``<state_dir>/fabric.json`` under ``injections``
as ``{"target": "leaf01:swp1", "kind": "degrade"}`` (one entry per target, the latest
wins) and read by the fabric model (:mod:`tuning.lab.model`) on every test:
``degrade`` halves bandwidth and adds about 5 us, ``down`` makes the client fail to
connect and, on a node NIC, shows the link down in the node's files (``operstate`` ``down``,
``speed`` ``-1``, RDMA port ``state`` ``1: DOWN``; ``clear`` or another kind puts them back).
``clear`` removes the target's fault. The burn-in faults (``flap``, ``pcie-width W``,
``gpu-xid N``, ``lossy``) are :mod:`tuning.lab.hw_faults`'s; they sit beside a target's other fault.

A node as a whole (``node01``) takes an agent that undoes tuning (:mod:`tuning.lab.agents`):
``irqbalance`` puts IRQ affinities back within 0.1 s while ``systemctl is-active irqbalance``
says ``active``; ``dcbx`` makes every NIC firmware-DCBX controlled with an agent that resets PFC.
``clear`` on the node stops its agents (they exit by themselves). ``NODE slow-tools SECONDS``
makes every stand-in of the node wait SECONDS before it acts (:mod:`tuning.lab.hw_faults`); the
node's ``clear`` ends it too. ``NODE ssh-cut`` and ``SWITCH ssh-cut`` cut every SSH connection of the
node or switch open at that moment, once (:mod:`tuning.lab.nodeserver`); it stays listed, with its
time, beside the target's other faults until ``clear``.
"""

from __future__ import annotations

import time
from pathlib import Path

from tuning.errors import InputError
from tuning.lab import agents, hw_faults, nvue_faults, privileges
from tuning.lab.fabric import GPU_BDFS, Fabric

#: a node's or switch's one-off fault: its SSH connections open now are cut (:mod:`tuning.lab.nodeserver`)
SSH_CUT = "ssh-cut"
KINDS = ("degrade", "down", "clear", SSH_CUT) + hw_faults.KINDS
#: the only kinds that take a VALUE, and what it is
VALUE_KINDS = {"degrade": "PERCENT", "slow-apply": "SECONDS", "oper-mtu": "MTU", "hand-edit": "FILE[,FILE]",
               **hw_faults.VALUE_KINDS}


def degrade_pct(value: str | None) -> int | None:
    """A ``degrade`` VALUE: the bandwidth lost, 1..99 percent (``8`` or ``8%``); None: the default
    half. Raises InputError naming VALUE."""
    if value is None:
        return None
    text = value.strip().removesuffix("%")
    if not text.isdigit() or not 1 <= int(text) <= 99:
        raise InputError("VALUE", value[:40], "degrade takes the bandwidth lost in percent, a whole number 1..99 "
                         "(e.g. 8); without a value it halves the bandwidth")
    return int(text)


def _targets(fabric: Fabric) -> list[str]:
    nics = [f"{n.name}:{c.rdma_device}" for n in fabric.nodes for c in n.nics]
    return nics + [f"{s.name}:{p}" for s in fabric.switches for p in s.ports]


def _allowed(fabric: Fabric) -> str:
    """Short list of the allowed targets, e.g. ``node01:mlx5_0..mlx5_7, ..., leaf01:swp1..swp16,swp31``."""
    parts = [f"{n.name}:{n.nics[0].rdma_device}..{n.nics[-1].rdma_device}" for n in fabric.nodes if n.nics]
    parts += [f"{s.name}:{','.join(s.ports)}" for s in fabric.switches]
    return "; ".join(parts)


def inject(state_dir: Path | str, target: str, kind: str, value: str | None = None) -> list[dict]:
    """Add (``degrade`` / ``down``) or remove (``clear``) the fault on ``target``.

    Args:
        state_dir: the lab state directory holding ``fabric.json``.
        target: ``NODE:RDMA_DEVICE`` or ``SWITCH:PORT``, e.g. ``node01:mlx5_0`` / ``leaf01:swp1``.
        kind: ``degrade``, ``down`` or ``clear``.
        value: ``degrade``: the bandwidth lost in percent (1..99; default 50); the other kinds of
            :data:`VALUE_KINDS` their own value.

    Returns:
        The injections now in force (as :func:`list_injections`).

    Raises:
        InputError: unknown kind or target (the message lists the allowed values), a VALUE for a
            kind that takes none, or no lab running in ``state_dir``.
    """
    path = Path(state_dir) / "fabric.json"
    if not path.is_file():
        raise InputError("--state-dir", str(state_dir), f"the lab is not running in {state_dir}; "
                         "start it with `fabtune lab up -i INVENTORY`")
    if value is not None and kind not in VALUE_KINDS:
        raise InputError("VALUE", value[:40], f"{kind} takes no value; only "
                         f"{', '.join(f'{k} {v}' for k, v in VALUE_KINDS.items())} take one")
    fabric = Fabric.load(path)
    if kind in hw_faults.KINDS:  # burn-in faults: tuning.lab.hw_faults
        return _inject_hw(path, fabric, target, kind, value)
    if kind == "clear" and any(i.get("target") == target and i.get("kind") == "gpu-xid" for i in fabric.injections):
        _clear_hw(path, fabric, target)  # NODE:gpuI
        fabric.injections = [i for i in fabric.injections if i.get("target") != target]
        fabric.save(path)
        return list(fabric.injections)
    if kind == SSH_CUT:
        return _inject_cut(path, fabric, target)
    if nvue_faults.handles(fabric, target, kind):  # switch faults: tuning.lab.nvue_faults
        return nvue_faults.inject_switch(path, fabric, target, kind, value)
    if target in {n.name for n in fabric.nodes}:
        return _inject_node(path, fabric, target, kind)
    if kind not in KINDS:
        raise InputError("KIND", "kind", f"{kind!r} is not one of {', '.join(KINDS)}")
    if target not in _targets(fabric):
        raise InputError("TARGET", "target", f"{target!r} is not a NIC or switch port of the lab; "
                         f"allowed: {_allowed(fabric)}")
    nic = _node_nic(fabric, target)
    if nic is not None:  # the NIC's own files show the link (a switch port's far end is not followed)
        privileges.require_write_access(path.parent / "nodes" / target.split(":")[0] / "sysroot", "fabtune lab inject")
    if kind == "clear":
        _clear_hw(path, fabric, target)
    pct = degrade_pct(value) if kind == "degrade" else None
    fabric.injections = [i for i in fabric.injections if i.get("target") != target]
    if kind != "clear":
        fabric.injections.append({"target": target, "kind": kind, **({"value": pct} if pct else {})})
    fabric.save(path)
    if nic is not None:
        _show_link(path.parent / "nodes" / target.split(":")[0] / "sysroot", nic, up=kind != "down")
    return list(fabric.injections)


def _node_nic(fabric: Fabric, target: str):
    """The :class:`~tuning.lab.fabric.Nic` of a ``NODE:RDMA_DEVICE`` target; None for a switch port."""
    node, _, dev = target.partition(":")
    return next((c for n in fabric.nodes if n.name == node for c in n.nics if c.rdma_device == dev), None)


def _show_link(sysroot: Path, nic, up: bool) -> None:
    """What the kernel shows of a NIC whose link is up or down: ``sys/class/net/IF/operstate``
    (``up`` / ``down``), ``speed`` (Mb/s, ``-1`` when down: ethtool SPEED_UNKNOWN) and the RDMA
    ``ports/1/state`` (``4: ACTIVE`` / ``1: DOWN``). The files keep their mode (0444 ``speed``)."""
    net = sysroot / "sys/class/net" / nic.netdev
    port = sysroot / "sys/class/infiniband" / nic.rdma_device / "ports/1"
    for f, text in ((net / "operstate", "up" if up else "down"),
                    (net / "speed", str(nic.speed_gbps * 1000) if up else "-1"),
                    (port / "state", "4: ACTIVE" if up else "1: DOWN")):
        if f.parent.is_dir():
            f.write_text(text + "\n")


def _inject_hw(path: Path, fabric: Fabric, target: str, kind: str, value: str | None) -> list[dict]:
    """Add a burn-in fault (:mod:`tuning.lab.hw_faults`): kept in ``injections`` beside the target's
    other faults (one per target and kind) and, for ``pcie-width`` / ``gpu-xid``, shown in the
    node's files at once."""
    nics = {f"{n.name}:{c.rdma_device}" for n in fabric.nodes for c in n.nics}
    ports = {f"{s.name}:{p}" for s in fabric.switches for p in s.ports}
    try:
        norm = hw_faults.check(kind, target, value, nics, ports, {n.name for n in fabric.nodes})
    except ValueError as exc:
        raise InputError("TARGET", target[:40], f"{exc}; allowed: {_allowed(fabric)}") from None
    node = target.split(":")[0]
    sysroot = path.parent / "nodes" / node / "sysroot"
    if node in {n.name for n in fabric.nodes} and kind in ("pcie-width", "gpu-xid", *hw_faults.NODE_KINDS):
        privileges.require_write_access(sysroot, "fabtune lab inject")
        nic = _node_nic(fabric, target)
        hw_faults.apply(sysroot, nic.bdf if nic else None, kind, target, norm, GPU_BDFS)
    fabric.injections = [i for i in fabric.injections if (i.get("target"), i.get("kind")) != (target, kind)]
    fabric.injections.append({"target": target, "kind": kind, **({"value": norm} if norm else {})})
    fabric.save(path)
    return list(fabric.injections)


def _clear_hw(path: Path, fabric: Fabric, target: str) -> None:
    """``clear`` of a target's burn-in faults in the node's files (see :func:`hw_faults.clear`)."""
    mine = (target, *(f"{target}:gpu{k}" for k in range(8)))  # a node's clear covers its GPUs
    kinds = {i["kind"] for i in fabric.injections if i.get("target") in mine and i.get("kind") in hw_faults.KINDS}
    node = target.split(":")[0]
    if kinds and node in {n.name for n in fabric.nodes}:
        nic = _node_nic(fabric, target)
        hw_faults.clear(path.parent / "nodes" / node / "sysroot", nic.bdf if nic else None, kinds)


def _inject_cut(path: Path, fabric: Fabric, target: str) -> list[dict]:
    """Cut the SSH connections of a node or switch: listed with the time of the cut (``at``, ns) beside
    the target's other faults; the daemon acts on each new one once."""
    devices = [n.name for n in fabric.nodes] + [s.name for s in fabric.switches]
    if target not in devices:
        raise InputError("TARGET", "target", f"{target!r}: {SSH_CUT} takes a whole node or switch; "
                         f"allowed: {', '.join(devices)}")
    fabric.injections = [i for i in fabric.injections if (i.get("target"), i.get("kind")) != (target, SSH_CUT)]
    fabric.injections.append({"target": target, "kind": SSH_CUT, "at": time.time_ns()})
    fabric.save(path)
    return list(fabric.injections)


def _inject_node(path: Path, fabric: Fabric, node: str, kind: str) -> list[dict]:
    """Start (``irqbalance`` / ``dcbx``) or stop (``clear``) the agents of a whole node."""
    if kind not in (*agents.KINDS, "clear", SSH_CUT):
        raise InputError("KIND", "kind", f"{kind!r} is not one of {', '.join((*agents.KINDS, SSH_CUT, 'clear'))} "
                         f"(a whole node {node} takes agents; NIC faults target {node}:mlx5_N)")
    if kind != "clear":  # an agent writes the node's tree
        privileges.require_write_access(path.parent / "nodes" / node / "sysroot", "fabtune lab inject")
    else:
        _clear_hw(path, fabric, node)
    fabric.injections = [i for i in fabric.injections
                         if i.get("target") != node or (kind != "clear" and i.get("kind") != kind)]
    if kind == "clear":
        fabric.injections = [i for i in fabric.injections if not i.get("target", "").startswith(f"{node}:gpu")]
    if kind != "clear":
        fabric.injections.append({"target": node, "kind": kind})
    fabric.save(path)
    if kind != "clear":
        agents.arm(path.parent, node, kind)
    return list(fabric.injections)


def list_injections(state_dir: Path | str) -> list[dict]:
    """The faults in force: ``[{"target": "leaf01:swp1", "kind": "degrade"}, ...]`` in the order added."""
    return list(Fabric.load(Path(state_dir) / "fabric.json").injections)
