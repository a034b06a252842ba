"""InfiniBand link evidence for a burn-in: every cabled port's link and error counters, read on an SM host.

An inventory's subnet managers (``subnet_managers``, :class:`tuning.targets.sm.SmTarget`) are where
the IB diagnostics run, through the SM Target's public read :meth:`tuning.targets.sm.SmTarget.run_diag`
(privileged; a :class:`~tuning.errors.SetupError` when they cannot run there: not installed, no UMAD
port). One read (:func:`read_fabric`) is three round trips: ``iblinkinfo`` (every port's width, speed, state, far end
and ``Could be`` hint; :mod:`tuning.parsers.ib_links`), one shell line of what the SM serves
(:func:`served_command`: the master SM's LID, ``sminfo``; its port's subnet prefix, ``smpquery portinfo``;
for every CA port ``iblinkinfo`` shows, the SA's path record from the SM to the port's GID, ``saquery PR
--slid SM --dgid GID``, whose DLID is the LID peers are told to use; :mod:`tuning.parsers.ib_sm`; what
:mod:`tuning.burnin.ib_views` joins with each node's own view), then one shell line over every Active cabled
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
               "counters": {"SymbolErrorCounter": 0, ...}, "saturated": [], "guid": "0x0c42a10300000101"}, ...},
     "states": {"leaf01/5": {"type": "Switch", "state": "Down", "phys": "Polling", "remote": None}, ...},
     "sm": {"lid": 1, "guid": "0xb83fd20300000001", "state": "MASTER"},
     "sa": {"0x0c42a10300000101": 2, ...},
     "error": None}

``ports`` holds every Active cabled port (``guid`` on a CA port); ``states`` every other port ``iblinkinfo``
lists (Down, Initialize, Armed; cabled or not); ``sa`` the LID the SA serves for each CA port GUID in its
path records (the SM's own record, not the port's PortInfo; None: the SA gave no path). One ``saquery PR``
a CA port: a real SA answers a GetTable of every NodeRecord in one query, but ibsim cuts a multi-MAD (RMPP)
answer after its first MAD (measured: 1 NodeRecord of 18), so the lab would show a few ports only.

Port names: a CA port ``<host>:<hca>/<port>`` from its node description ``<host> <hca>`` (the
description as a whole when it has no space), a switch port ``<description>/<port>``.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from tuning.errors import SetupError, TuningError
from tuning.parsers.ib_counters import ERROR_COUNTERS, parse_perfquery
from tuning.parsers.ib_links import IbLinkInfo, IbLinkPort, parse_iblinkinfo
from tuning.parsers.ib_sm import parse_saquery_pr, parse_sminfo
from tuning.transport.base import q

__all__ = ["IbWindow", "has_sm", "open_sms", "port_name", "read_all", "read_fabric", "served_command"]

_PREFIX = "== GidPrefix 0x"


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
        The read (module docstring): ``ports`` holds every Active cabled port; ``counters`` is ``{}`` on a
        port no PMA query can reach (:func:`_countable`).

    Raises:
        SetupError: the SM host cannot run the IB diagnostics (the SM Target's words).
        CommandError / ParseError / TuningError: a tool failed, printed something else or left a port
            out (the caller's harness error).
    """
    links: IbLinkInfo = parse_iblinkinfo(sm.run_diag("iblinkinfo", "iblinkinfo"))
    types = {p.node: p.node_type for p in links.ports}
    live = [p for p in links.cabled() if p.state == "Active"]
    ports: dict[str, dict] = {}
    states = {port_name(p.node, p.node_type, p.port): {"type": p.node_type, "state": p.state, "phys": p.phys_state,
                                                       "remote": _remote_name(p, types), **_guid(p)}
              for p in links.ports if p.state != "Active"}
    guids = sorted({p.port_guid for p in links.ports if p.node_type == "CA" and p.port_guid})
    read = {"ports": ports, "states": states, **_served(sm, guids), "error": None}
    counted = _countable(live, set(states), read["sa"], types)
    if not live:
        return read
    blocks = {(b.lid, b.port, b.extended): b for b in parse_perfquery(
        sm.run_diag(_perfquery_command(counted), "perfquery")).blocks} if counted else {}
    for p in live:
        counters, saturated = _counters(blocks, p.lid, p.port) if p in counted else ({}, [])
        ports[port_name(p.node, p.node_type, p.port)] = {
            "type": p.node_type, "lid": p.lid, "port": p.port, "state": p.state, "phys": p.phys_state,
            "width": p.width, "speed": p.speed, "generation": p.generation,
            "could_be": [h for h in (p.could_be_width, p.could_be_speed) if h], "remote": _remote_name(p, types),
            "remote_type": types.get(p.remote.name) if p.remote else None, "counters": counters,
            "saturated": saturated, **_guid(p)}
    return read


def _countable(live: list[IbLinkPort], down: set[str], sa: dict, types: dict) -> list[IbLinkPort]:
    """The ports of ``live`` a PMA query (LID-routed) reaches: not a CA port whose far end is not Active
    (``down``: the names of such ports; an Armed or Initialize port passes only SMPs) or whose LID is not the
    one the SA serves (``sa``; no switch routes it): perfquery fails on them (measured), a fabric fault
    the views judge (:mod:`tuning.burnin.ib_views`), not the read's."""
    return [p for p in live if p.node_type != "CA" or (_remote_name(p, types) not in down
                                                        and sa.get(p.port_guid, p.lid) == p.lid)]


def _guid(p: IbLinkPort) -> dict[str, str]:
    """``{"guid": port GUID}`` of a CA port (iblinkinfo prints it), else ``{}``."""
    return {"guid": p.port_guid} if p.node_type == "CA" and p.port_guid else {}


def served_command(guids: list[str]) -> str:
    """The one shell line of what the SM serves (module docstring) for the CA port GUIDs ``guids``
    (``0x0c42a10300000101``, as ``iblinkinfo`` prints them): ``sminfo``'s line, ``== GidPrefix 0x<16 hex>``,
    then ``== <guid>`` and ``saquery PR --slid <SM LID> --dgid <prefix:guid>``'s output for each (none: the
    SA has no path). Stops at the first tool that fails. Raises ValueError: a GUID not ``0x`` + 16 hex digits."""
    bad = [g for g in guids if len(g) != 18 or not g.startswith("0x") or any(c not in "0123456789abcdef" for c in g[2:])]
    if bad:
        raise ValueError(f"not a port GUID: {bad[0]!r}")
    loop = " ".join(q(g[2:]) for g in guids)
    gid = "${p:0:4}:${p:4:4}:${p:8:4}:${p:12:4}:${g:0:4}:${g:4:4}:${g:8:4}:${g:12:4}"
    return ("s=$(sminfo) || exit; printf '%s\\n' \"$s\"; l=${s#*sm lid }; l=${l%% *}; "
            "[[ $l =~ ^[0-9]+$ ]] || { echo \"fabtune: no SM LID in: $s\" >&2; exit 1; }; "
            "p=$(smpquery portinfo \"$l\" 0 | sed -n 's/^GidPrefix:\\.*0x//p'); "
            "[[ $p =~ ^[0-9a-f]{16}$ ]] || { echo \"fabtune: smpquery portinfo $l 0 printed no GidPrefix\" >&2; exit 1; }; "
            f"echo \"{_PREFIX}$p\"; for g in {loop}; do echo \"== 0x$g\"; "
            f"saquery PR --slid \"$l\" --dgid \"{gid}\" || exit; done")


def _served(sm: Any, guids: list[str]) -> dict:
    """``{"sm": {"lid", "guid", "state"}, "sa": {CA port GUID: LID | None}}``: :func:`served_command`
    through ``sm``; a port's LID is the DLID of the SA's path record from the SM (None: no record).

    Raises:
        TuningError / ParseError: a tool failed, printed something else, or left a port unanswered.
    """
    out = sm.run_diag(served_command(guids), "sminfo / smpquery portinfo / saquery PR")
    head, sep, rest = out.partition(_PREFIX)
    if not sep:
        raise TuningError(f"the SM read printed no '{_PREFIX}' line (cut short?)")
    info = parse_sminfo(head)
    sa: dict[str, int | None] = {}
    for chunk in rest.split("\n== ")[1:]:
        guid, _, text = chunk.partition("\n")
        dlids = sorted({r.dlid for r in parse_saquery_pr(text).records if r.slid == info.sm_lid}) if text.strip() else []
        sa[guid.strip()] = dlids[0] if dlids else None
    if sorted(sa) != guids:
        raise TuningError(f"saquery PR answered for {len(sa)} of {len(guids)} CA ports")
    return {"sm": {"lid": info.sm_lid, "guid": info.sm_guid, "state": info.state_name}, "sa": sa}


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
