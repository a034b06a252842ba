"""InfiniBand link evidence for a burn-in: every cabled port's link and error counters, read on an SM host.

An inventory's subnet managers (``subnet_managers``, :class:`tuning.targets.sm.SmTarget`) are where
the IB diagnostics run, through the SM Target's public read :meth:`tuning.targets.sm.SmTarget.run_diag`
(privileged; a :class:`~tuning.errors.SetupError` when they cannot run there: not installed, no UMAD
port). One read (:func:`read_fabric`) is two round trips: ``iblinkinfo`` (every port's width, speed, state, far end
and ``Could be`` hint; :mod:`tuning.parsers.ib_links`), then one shell line over every Active cabled
port, both ends of each cable: ``perfquery -x <lid> <port>`` and ``perfquery <lid> <port>`` for an HCA
port, ``perfquery -x -l <lid> 255`` and ``perfquery -l <lid> 255`` once per switch (every port of it:
255 is perfquery's "all ports"; :mod:`tuning.parsers.ib_counters`, infiniband-diags of rdma-core 44).
The error fields come from the extended block where the port prints them there (64-bit: a port whose
CapMask2 has IsAdditionalPortCountersExtendedSupported, IBA 1.3), else from the PortCounters block (4
to 16 bits, saturating; ibsim 0.10 prints only data counters under ``-x``, measured). An unknown value
(``-1``, ``0xfffffffffffffffe``) stays None.

A read, JSON-ready (the burn-in document's ``ib`` reads, docs/burnin.md)::

    {"ports": {"node01:mlx5_0/1": {"type": "CA", "lid": 2, "port": 1, "state": "Active",
               "phys": "LinkUp", "width": "1X", "speed": "53.125 Gbps", "generation": "HDR",
               "could_be": ["12X"], "remote": "leaf01/1", "remote_type": "Switch",
               "counters": {"SymbolErrorCounter": 0, ...}, "saturated": []}, ...},
     "error": None}

Port names: a CA port ``<host>:<hca>/<port>`` from its node description ``<host> <hca>`` (the
description as a whole when it has no space), a switch port ``<description>/<port>``.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from tuning.errors import SetupError, TuningError
from tuning.parsers.ib_counters import ERROR_COUNTERS, parse_perfquery
from tuning.parsers.ib_links import IbLinkInfo, IbLinkPort, parse_iblinkinfo

__all__ = ["IbWindow", "has_sm", "open_sms", "port_name", "read_all", "read_fabric"]


def port_name(node: str, node_type: str | None, port: int) -> str:
    """``node01:mlx5_0/1`` for CA ``node01 mlx5_0`` port 1; ``leaf01/31`` for a switch's port 31."""
    if node_type == "CA" and " " in node:
        host, hca = node.split(" ", 1)
        return f"{host}:{hca}/{port}"
    return f"{node}/{port}"


def _remote_name(p: IbLinkPort, types: dict[str, str | None]) -> str | None:
    return port_name(p.remote.name, types.get(p.remote.name), p.remote.port) if p.remote else None


def _counters(blocks: dict, lid: int, port: int) -> tuple[dict[str, int | None], list[str]]:
    """One port's error fields from its ``perfquery -x`` and ``perfquery`` blocks (``blocks``:
    (lid, port, extended) -> block) -> (error fields, saturated fields)."""
    basic, ext = blocks.get((lid, port, False)), blocks.get((lid, port, True))
    if basic is None:
        raise TuningError(f"perfquery printed no '# Port counters:' block for lid {lid} port {port}")
    out = {k: basic.counters[k] for k in ERROR_COUNTERS if k in basic.counters}
    from_ext = {k: ext.counters[k] for k in ERROR_COUNTERS if ext is not None and k in ext.counters}
    return {**out, **from_ext}, [k for k in basic.saturated if k not in from_ext]


def _perfquery_command(live: list[IbLinkPort]) -> str:
    """One shell line reading every port of ``live``: a CA port by LID and port, a switch's ports in
    one run each (``-l <lid> 255``: perfquery loops over every port of the node)."""
    cmds = []
    for p in live:
        if p.node_type == "Switch":
            cmd = f"perfquery -x -l {p.lid} 255 && perfquery -l {p.lid} 255"
        else:
            cmd = f"perfquery -x {p.lid} {p.port} && perfquery {p.lid} {p.port}"
        if cmd not in cmds:
            cmds.append(cmd)
    return " && ".join(cmds)


def read_fabric(sm: Any) -> dict:
    """One read of the fabric through the open SM Target ``sm`` (module docstring), by its
    :meth:`~tuning.targets.sm.SmTarget.run_diag`.

    Returns:
        ``{"ports": {name: {...}}, "error": None}``; ``ports`` holds every Active cabled port.

    Raises:
        SetupError: the SM host cannot run the IB diagnostics (the SM Target's words).
        CommandError / ParseError / TuningError: a tool failed, printed something else or left a port
            out (the caller's harness error).
    """
    links: IbLinkInfo = parse_iblinkinfo(sm.run_diag("iblinkinfo", "iblinkinfo"))
    types = {p.node: p.node_type for p in links.ports}
    live = [p for p in links.cabled() if p.state == "Active"]
    ports: dict[str, dict] = {}
    if not live:
        return {"ports": ports, "error": None}
    blocks = {(b.lid, b.port, b.extended): b for b in parse_perfquery(sm.run_diag(_perfquery_command(live), "perfquery")).blocks}
    for p in live:
        counters, saturated = _counters(blocks, p.lid, p.port)
        ports[port_name(p.node, p.node_type, p.port)] = {
            "type": p.node_type, "lid": p.lid, "port": p.port, "state": p.state, "phys": p.phys_state,
            "width": p.width, "speed": p.speed, "generation": p.generation,
            "could_be": [h for h in (p.could_be_width, p.could_be_speed) if h], "remote": _remote_name(p, types),
            "remote_type": types.get(p.remote.name) if p.remote else None, "counters": counters,
            "saturated": saturated}
    return {"ports": ports, "error": None}


def _sm_devices(inv: Any) -> list[Any]:
    """The devices of ``inv`` that are subnet managers (an :class:`~tuning.model.ib_sm.SmSpec`)."""
    from tuning.model.ib_sm import SmSpec

    return [d for d in inv.devices.values() if isinstance(d.spec, SmSpec)]


def has_sm(inv: Any) -> bool:
    """Whether ``inv`` names a subnet manager (its burn-in reads the IB fabric through it)."""
    return bool(_sm_devices(inv))


def open_sms(inv: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Open the SM Target of every device of ``inv``'s ``subnet_managers`` group: (name -> open
    target, name -> one-line error of those that could not be reached)."""
    from tuning.targets import target_for

    sms, errors = {}, {}
    for dev in _sm_devices(inv):
        target = target_for(dev)
        try:
            target.open()
        except TuningError as e:
            errors[dev.name] = " ".join(str(e).split())[:300]
            continue
        sms[dev.name] = target
    return sms, errors


def read_all(sms: dict[str, Any]) -> dict[str, dict]:
    """:func:`read_fabric` through each SM: name -> a read, or ``{"ports": {}, "error": one line}``
    when it failed (a harness error: the fabric was not read there, never a pass).

    Raises:
        SetupError: an SM host cannot run the IB diagnostics at all (exit 2, its own words).
    """
    out = {}
    for name, sm in sms.items():
        try:
            out[name] = read_fabric(sm)
        except SetupError:
            raise
        except TuningError as e:
            out[name] = {"ports": {}, "error": " ".join(str(e).split())[:300]}
    return out


class IbWindow:
    """The IB side of one burn-in run (docs/burnin.md "InfiniBand"): the SMs' sessions and their reads
    into the document, judged by :mod:`tuning.burnin.ib_judge`.

    ``IbWindow(inv, doc)`` opens every SM (one that cannot be reached goes to ``doc["unreachable"]``) and
    reads the baseline into ``doc["ib"]``, beside ``intent``: each ``ib_ports`` node's width and speed
    (:class:`tuning.model.ib_ports.IbPortsSpec`, ``{"node01": {"width": "4X", "generation": "HDR"}}``); :meth:`read` is a round's read; :meth:`recover` waits the
    recovery window and reads once more; :meth:`close` ends the sessions.

    Raises:
        SetupError: an SM host cannot run the IB diagnostics (from the baseline read).
    """

    def __init__(self, inv: Any, doc: dict, recovery_s: float):
        self.sms, errors = open_sms(inv)
        doc.setdefault("unreachable", {}).update(errors)
        intent = {d.name: {"width": d.spec.ib_ports.width, "generation": d.spec.ib_ports.speed}
                  for d in inv.nodes if getattr(d.spec, "ib_ports", None)}
        try:
            doc["ib"] = {"sms": sorted(self.sms), "baseline": read_all(self.sms), "recovery_s": recovery_s,
                         "intent": intent}
        except BaseException:
            self.close()
            raise
        self.recovery_s = recovery_s

    def read(self) -> dict[str, dict]:
        """One read through every SM (:func:`read_all`)."""
        return read_all(self.sms)

    def recover(self, doc: dict, say: Callable[[str], None]) -> None:
        """Wait ``recovery_s`` (no test traffic), then read into ``doc["ib"]["recovery"]``; no read for 0 s."""
        if not self.sms or self.recovery_s <= 0:
            return
        say(f"IB recovery window: {self.recovery_s:g} s, then the last read")
        time.sleep(self.recovery_s)
        doc["ib"]["recovery"] = self.read()

    def close(self) -> None:
        """Close every SM session."""
        for sm in self.sms.values():
            sm.close()
