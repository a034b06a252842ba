"""Where a node, its subnet manager and the switch at the far end of a cable disagree about one HCA port
(issue 22): each disagreement is a finding of its own, with every side's value, never "port down".

Three views of one port, read in the same burn-in / health round (pure functions over the document):

- the **host**'s, its sysfs (``rounds[i]["ib_ports"][node]["views"]``, :meth:`tuning.node.ib_ports.IbPort.view`):
  the port GUID (``gids/0``), ``state``, ``phys_state``, ``rate``, ``lid``, ``sm_lid`` as the kernel prints them;
- the **SM**'s, read on the SM host (``rounds[i]["ib"][sm]``, :func:`tuning.burnin.ib_read.read_fabric`):
  the LID its SA serves for the port GUID (the DLID of its path record from the SM, ``saquery PR``: what
  peers are told) and the master SM's LID (``sminfo``);
- the **switch**'s: the switch port at the far end of the port's cable as ``iblinkinfo`` reads it there
  (state, physical state, width, speed). A port the round's fabric read does not show at all is placed on
  its cable by the run's earlier reads (the baseline first).

Joined on the port GUID. One finding per rule and port (kind ``link``: it drains the port's node, as a
cable's finding does), its ``rounds`` the rounds that showed it:

=================  =========  =======================================================================
``ib-view-state``  error      the host reads its port ``4: ACTIVE`` and the switch port at the far end
                              of its cable is not Active (Armed, Initialize, Down), or the SM's fabric
                              read does not show the port; or the host reads it not ACTIVE while the
                              switch port is Active. No data crosses a link until both ends are Active.
``ib-view-lid``    error      the host's ``lid`` is not the LID the SA serves for its GUID (or the SA
                              serves no path to it): peers address a LID the port does not answer, and
                              no switch routes the port's own (its PMA counters cannot be read either).
``ib-view-sm-lid`` error      the host's ``sm_lid`` is not the master SM's LID: its SA queries and traps
                              go to another port (``0x0``: it never learnt the SM that serves the fabric).
``ib-view-rate``   warning    the host's ``rate`` is not the width and speed the switch port reads on the
                              same cable (both ends of a link train to one rate: one side's read is stale
                              or misreported, e.g. a kernel that predates the link's speed).
=================  =========  =======================================================================

Target: ``node01:mlx5_0/1`` (host, HCA, port: the inventory's node name), with ``<->leaf01/1`` (the switch
port) for ``ib-view-state`` and ``ib-view-rate``. A finding::

    {"code": "ib-view-lid", "kind": "link", "target": "node01:mlx5_1/1", "severity": "error",
     "message": "node01:mlx5_1/1: port GUID 0x0c42a10300000111: the host reads lid 0x50 (iblinkinfo: 0x50,
                 the port's PortInfo); the SM's SA (sm01) serves LID 0x5 for it in path records (saquery PR
                 from the SM)", "fix": "...",
     "evidence": {"guid": "0x0c42a10300000111", "host": {"lid": "0x50", ...}, "sm": {"sa_lid": 5, ...},
                  "switch": {...}, "sm_host": "sm01", "pairs": [], "counters": {}, "rounds": [0]}}

Nothing is judged for a node port no SM read joins (a round whose SM reads all failed is the IB reads'
``harness-error``, :mod:`tuning.burnin.ib_judge`) or a port down on every side (the node's own
``ib-port-not-active``); LIDs and rate only on a port the host reads ACTIVE (one still INIT has no LID
of the SM's yet: its state against the switch's is the finding). Units: LIDs as integers (the host's as
read, ``0x..``), widths ``4X``, speeds the kernel's words (``HDR``).
"""

from __future__ import annotations

from tuning.parsers.ib_sysfs import parse_hex, parse_numbered, parse_rate

__all__ = ["CODES", "FIXES", "findings", "joined"]

#: rule -> severity, the order findings of one port are listed in
CODES = {"ib-view-state": "error", "ib-view-lid": "error", "ib-view-sm-lid": "error", "ib-view-rate": "warning"}
#: rule -> what to do (measured on the lab's OpenSM 3.3.23: a heavy sweep, SIGHUP, puts back a port's LID,
#: SM LID and an Armed switch port; docs/burnin.md)
FIXES = {
    "ib-view-state": "make the SM sweep (OpenSM: kill -HUP, a heavy sweep activates Armed ports); a switch port "
                     "that stays Armed, Initialize or Down: reset it (ibportstate SWITCH PORT reset) and check the "
                     "cable lands where the fabric says; a port the SM does not see: check its cable and subnet",
    "ib-view-lid": "make the SM sweep (OpenSM: kill -HUP; its heavy sweep writes the LID it serves back into the "
                   "port), then find what else writes port LIDs (a second SM, ibportstate)",
    "ib-view-sm-lid": "make the SM sweep (OpenSM: kill -HUP; its heavy sweep writes its LID into every port), then "
                      "check that no other SM claims the port (sminfo, its priority and state)",
    "ib-view-rate": "read both ends again (sysfs rate, iblinkinfo); a host that keeps reading another rate: update "
                    "its kernel / driver to one that knows the link's speed, then reseat the cable",
}


def _ca_ports(read: dict) -> dict[str, tuple[str, dict]]:
    """Port GUID -> (its name, its entry) of every CA port of one SM read (Active or not)."""
    out = {}
    for part in ("states", "ports"):  # an Active entry wins
        for name, p in (read.get(part) or {}).items():
            if p.get("guid"):
                out[p["guid"]] = (name, p)
    return out


def _switch_end(read: dict, name: str | None) -> dict | None:
    """The entry of port ``name`` in ``read`` (Active or not), None when it lists no such port."""
    if name is None:
        return None
    return (read.get("ports") or {}).get(name) or (read.get("states") or {}).get(name)


def _remote_before(doc: dict, sm: str, guid: str) -> str | None:
    """The switch port the CA port ``guid`` was cabled to in an earlier read of ``sm`` (the baseline first)."""
    reads = [(doc.get("ib") or {}).get("baseline", {}).get(sm)]
    reads += [(r.get("ib") or {}).get(sm) for r in doc.get("rounds", [])]
    for read in reads:
        hit = _ca_ports(read or {}).get(guid)
        if hit and hit[1].get("remote"):
            return hit[1]["remote"]
    return None


def _said(entry: dict | None) -> str:
    """``Armed/LinkUp 4X 53.125 Gbps`` of an iblinkinfo entry; ``not listed`` for None."""
    if entry is None:
        return "not listed"
    rate = " ".join(x for x in (entry.get("width"), entry.get("speed")) if x)
    return f"{entry.get('state')}/{entry.get('phys')}" + (f" {rate}" if rate else "")


def _finding(code: str, target: str, message: str, ev: dict) -> dict:
    return {"code": code, "kind": "link", "target": target, "severity": CODES[code], "message": message,
            "fix": FIXES[code], "evidence": {**ev, "pairs": [], "counters": {}}}


def _state(host: str, view: dict, ev: dict, switch_name: str | None, switch: dict | None, seen: bool) -> list[dict]:
    """``ib-view-state`` of one port: the host's state against the switch end's (``seen``: the SM's read shows
    the CA port)."""
    active = parse_numbered(view["state"], "state")[1] == "ACTIVE"
    far = switch is not None and switch.get("state") == "Active"
    if active == far and (seen or not active):
        return []
    where = f"the switch port {switch_name} at the far end of its cable reads {_said(switch)}" if switch_name else \
        "no switch port is known for its cable"
    lost = "" if seen else f"; the SM's fabric read (iblinkinfo on {ev['sm_host']}) does not show the port"
    target = f"{host}<->{switch_name}" if switch_name else host
    return [_finding("ib-view-state", target, f"{host}: port GUID {ev['guid']}: the host reads {view['state']} "
                     f"({view['phys_state']}); {where}{lost}", ev)]


def _rate(host: str, view: dict, ev: dict, switch_name: str | None, switch: dict | None) -> list[dict]:
    """``ib-view-rate`` of one port: the host's ``rate`` against the width and speed its switch port reads."""
    if switch is None or switch.get("state") != "Active" or not switch.get("width") or not switch.get("generation"):
        return []
    rate = parse_rate(view["rate"])
    if (rate.width, rate.speed) == (switch["width"], switch["generation"]):
        return []
    return [_finding("ib-view-rate", f"{host}<->{switch_name}", f"{host}: port GUID {ev['guid']}: the host reads "
                     f"rate {view['rate']}; the switch port {switch_name} reads {switch['width']} {switch.get('speed')} "
                     f"({switch['generation']}) on the same cable", ev)]


def _lids(host: str, view: dict, ev: dict, read: dict, sm: str) -> list[dict]:
    """``ib-view-lid`` and ``ib-view-sm-lid`` of one port: the host's LIDs against what the SM serves."""
    out, guid = [], ev["guid"]
    if guid in (read.get("sa") or {}):
        sa, fabric = read["sa"][guid], (ev["sm"]["fabric"] or {}).get("lid")
        said = "no path record to it" if sa is None else f"LID {sa:#x} for it in path records"
        if parse_hex(view["lid"], "lid") != sa:
            out.append(_finding("ib-view-lid", host, f"{host}: port GUID {guid}: the host reads lid {view['lid']}"
                                + (f" (iblinkinfo: {fabric:#x}, the port's PortInfo)" if fabric is not None else "")
                                + f"; the SM's SA ({sm}) serves {said} (saquery PR from the SM)", ev))
    master = (read.get("sm") or {}).get("lid")
    if master is not None and parse_hex(view["sm_lid"], "sm_lid") != master:
        out.append(_finding("ib-view-sm-lid", host, f"{host}: port GUID {guid}: the host reads sm_lid "
                            f"{view['sm_lid']}; the master SM answers at LID {master:#x} (sminfo on {sm})", ev))
    return out


def _port(doc: dict, host: str, view: dict, reads: dict[str, dict]) -> list[dict]:
    """The findings of one host port (``view``) against the round's SM ``reads`` (SM -> read)."""
    guid = view["guid"]
    sm = next((s for s, r in reads.items() if guid in (r.get("sa") or {}) or guid in _ca_ports(r)), None)
    if sm is None:  # no SM of this round serves or sees the port: another fabric's, or down everywhere
        sm = next(iter(reads), None)
        if sm is None or parse_numbered(view["state"], "state")[1] != "ACTIVE":
            return []
    read = reads[sm]
    name, ca = _ca_ports(read).get(guid, (None, None))
    switch_name = ca.get("remote") if ca else _remote_before(doc, sm, guid)
    switch = _switch_end(read, switch_name)
    ev = {"guid": guid, "sm_host": sm, "host": dict(view),
          "sm": {"sa_lid": (read.get("sa") or {}).get(guid), "sm_lid": (read.get("sm") or {}).get("lid"),
                 "fabric": {"name": name, "lid": ca.get("lid"), "state": ca.get("state")} if ca else None},
          "switch": {"port": switch_name, **({k: switch.get(k) for k in ("state", "phys", "width", "speed")}
                                             if switch else {"state": None})}}
    active = parse_numbered(view["state"], "state")[1] == "ACTIVE"  # a port not up has no LID of the SM's yet
    return (_state(host, view, ev, switch_name, switch, ca is not None)
            + (_lids(host, view, ev, read, sm) + _rate(host, view, ev, switch_name, switch) if active else []))


def findings(doc: dict) -> list[dict]:
    """The view disagreements of ``doc`` (module docstring), one per rule and port, sorted by target then
    rule; [] for a document without node views or SM reads.

    Raises:
        ParseError: a host value not in the kernel's format (the reader checks them: a document edited by hand).
    """
    out: dict[tuple[str, str], dict] = {}
    for rnd in doc.get("rounds", []):
        reads = {sm: r for sm, r in (rnd.get("ib") or {}).items() if not r.get("error")}
        if not reads:
            continue
        for node, entry in sorted((rnd.get("ib_ports") or {}).items()):
            for key, view in sorted((entry.get("views") or {}).items()):
                for f in _port(doc, f"{node}:{key}", view, reads):
                    rounds = out.get((f["code"], view["guid"]), {}).get("evidence", {}).get("rounds", [])
                    f["evidence"]["rounds"] = rounds + [rnd.get("index", 0)]
                    out[(f["code"], view["guid"])] = f
    order = list(CODES)
    return sorted(out.values(), key=lambda f: (f["target"].split("<->")[0], order.index(f["code"])))


def joined(doc: dict, cables: list[dict]) -> list[dict]:
    """:func:`findings` of ``doc`` after the cable findings ``cables`` (:func:`tuning.burnin.ib_judge.findings`)
    that name no switch port a view finding names: a switch port the host's view disagrees with is that
    finding, not "link down"."""
    views = findings(doc)
    named = {f["target"].split("<->")[1] for f in views if "<->" in f["target"]}
    return [f for f in cables if not ("<->" in f["target"] and f["target"].split("<->")[1] in named)] + views
