"""InfiniBand link findings of a burn-in document: pure functions over its ``ib`` reads.

The reads (:mod:`tuning.burnin.ib_read`, one per SM): ``doc["ib"]["baseline"]`` before round 0,
``doc["rounds"][i]["ib"]`` after round ``i``, ``doc["ib"]["recovery"]`` after the recovery window
(``doc["ib"]["recovery_s"]`` seconds after the last round, no test traffic). The *window* is the
baseline to the last round's read; the *recovery window* the last round's read to the recovery read.

One finding per cable (both ends named, the HCA end first: ``node01:mlx5_0/1<->leaf01/1``), kind
``link`` (``switch`` for a switch-to-switch cable: no node to drain), its code the first of
:data:`IB_CODES` its evidence shows:

- ``ib-link-down``: a port Active at the baseline (after the last round) is not Active, or gone, at
  the window's end (after the recovery window);
- ``ib-link-flap``: ``LinkDownedCounter`` rose on an end;
- ``ib-width-degraded`` / ``ib-speed-degraded``: an end runs fewer lanes (a slower generation) than
  its node's ``ib_ports`` intent (``doc["ib"]["intent"]``, an HCA end), else than most cabled ports of
  the fabric in the same read, *and* ``iblinkinfo`` hints it could run more (``Could be 4X``): the
  hint alone is not enough, since ibsim 0.10 hints ``12X`` on every link;
- ``ib-link-errors``: a counter of :data:`LINK_ERRORS` rose on an end (IBA 1.3 PortCounters: each
  counts at the *receiving* port, so the end that counts is named in ``evidence.end`` when only
  one does, with every end's rises as ``evidence.counters``).

A counter whose value is unknown (None) in either read, or that went backwards (cleared by someone:
``perfquery -R``), gives no delta; one at its field's maximum gives a lower bound (``saturated``).
A read that failed, or a fabric where no port was read or no counter could be compared, is a
``harness-error`` finding (kind ``harness``: the fabric was not checked, never a pass).
"""

from __future__ import annotations

from collections import Counter

from tuning.parsers.ib_counters import ERROR_COUNTERS

__all__ = ["IB_CODES", "LINK_ERRORS", "findings", "rises"]

#: finding codes of a cable, the most specific cause first
IB_CODES = ("ib-link-down", "ib-link-flap", "ib-width-degraded", "ib-speed-degraded", "ib-link-errors")
#: PortCounters fields that rise on a bad cable, transceiver or port (IBA 1.3 PortCounters)
LINK_ERRORS = ("SymbolErrorCounter", "LinkErrorRecoveryCounter", "LocalLinkIntegrityErrors", "PortRcvErrors",
               "PortRcvRemotePhysicalErrors", "ExcessiveBufferOverrunErrors")
_GENERATIONS = ("SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR", "NDR", "XDR")


def rises(before: dict, after: dict) -> tuple[dict[str, int], list[str], list[str]]:
    """Counter rises of one port between two reads (its ``counters``/``saturated`` records).

    Returns:
        ``({"SymbolErrorCounter": 500}, unknown, saturated)``: the fields that rose (a rise of 0 is
        left out), the fields with no delta (None in a read, or a value that went backwards), and
        the rises that are lower bounds (the field at its maximum in ``after``).
    """
    got, unknown = {}, []
    for name in ERROR_COUNTERS:
        a, b = (before.get("counters") or {}).get(name), (after.get("counters") or {}).get(name)
        if name not in (after.get("counters") or {}):
            continue
        if a is None or b is None or b < a:
            unknown.append(name)
        elif b > a:
            got[name] = b - a
    return got, unknown, [n for n in after.get("saturated") or [] if n in got]


def _cable(name: str, port: dict) -> tuple[str, str] | None:
    """(first end, second end) of the cable at ``name``: the CA end first, else sorted."""
    remote = port.get("remote")
    if not remote:
        return None
    if port.get("type") == "CA":
        return name, remote
    if port.get("remote_type") == "CA":
        return remote, name
    return (name, remote) if name <= remote else (remote, name)


def _reads(doc: dict, sm: str) -> list[tuple[int | str, dict]]:
    """The reads of ``sm`` in order: ("baseline", r), (round index, r)..., ("recovery", r)."""
    ib = doc.get("ib") or {}
    out: list[tuple[int | str, dict]] = []
    if sm in (ib.get("baseline") or {}):
        out.append(("baseline", ib["baseline"][sm]))
    out += [(rnd.get("index", 0), rnd["ib"][sm]) for rnd in doc.get("rounds", []) if sm in (rnd.get("ib") or {})]
    if sm in (ib.get("recovery") or {}):
        out.append(("recovery", ib["recovery"][sm]))
    return out


def _usual(ports: dict, key: str) -> str | None:
    values = [p.get(key) for p in ports.values() if p.get(key)]
    return Counter(values).most_common(1)[0][0] if values else None


def _lanes(width: str | None) -> int:
    return int(width[:-1]) if width and width[:-1].isdigit() else 0


def _rank(gen: str | None) -> int:
    return _GENERATIONS.index(gen) if gen in _GENERATIONS else -1


def _rate_signals(sig: dict, idx, ports: dict, intent: dict) -> None:
    """Width and speed below the node's ``ib_ports`` intent (an HCA port of a node that has one), else
    below the read's usual ones, with the tool's hint (module docstring)."""
    usual = {"width": _usual(ports, "width"), "generation": _usual(ports, "generation")}
    for name, p in ports.items():
        want = intent.get(name.split(":")[0], {}) if p.get("type") == "CA" and ":" in name else {}
        width, gen = want.get("width") or usual["width"], want.get("generation") or usual["generation"]
        whose = "its node's ib_ports intent is" if want else "the fabric's links run"
        hints = p.get("could_be") or []
        said = f"{p.get('width')} {p.get('speed')}" + (f" (iblinkinfo: could be {', '.join(hints)})" if hints else "")
        if _lanes(p.get("width")) < _lanes(width) and any(h.endswith("X") for h in hints):
            _add(sig, name, p, "ib-width-degraded", idx, f"{name} runs {said}; {whose} {width}")
        if _rank(p.get("generation")) < _rank(gen) and any(h.endswith("Gbps") or "FDR10" in h for h in hints):
            _add(sig, name, p, "ib-speed-degraded", idx, f"{name} runs {said}; {whose} {gen}")


def _add(sig: dict, name: str, port: dict, code: str, idx, message: str) -> None:
    cable = _cable(name, port)
    if cable is None:
        return
    codes = sig.setdefault(cable, {"_ca": "CA" in (port.get("type"), port.get("remote_type"))})
    entry = codes.setdefault(code, {"message": message, "rounds": []})
    if idx not in entry["rounds"]:
        entry["rounds"].append(idx)


def _window(sig: dict, counters: dict, label: str, before: dict, after: dict, idx) -> tuple[int, list[str]]:
    """Rises of every port of ``before`` into ``counters[port][label]``; returns (ports compared, unknown)."""
    compared, unknown = 0, []
    for name, p in before.get("ports", {}).items():
        q = after.get("ports", {}).get(name)
        if q is None or q.get("state") != "Active":
            when = "at the baseline" if label == "window" else "after the last round"
            _add(sig, name, p, "ib-link-down", idx, f"{name} was Active {when} and is not in the {label} read")
            continue
        got, unk, sat = rises(p, q)
        read = [k for k in ERROR_COUNTERS if k in (q.get("counters") or {})]
        compared += len(unk) < len(read)
        unknown += [f"{name} {u}" for u in unk]
        if not got:
            continue
        counters.setdefault(name, {})[label] = got
        if sat:
            counters[name][f"{label}_saturated"] = sat
        if "LinkDownedCounter" in got:
            _add(sig, name, p, "ib-link-flap", idx, f"{name}: LinkDownedCounter rose by {got['LinkDownedCounter']}")
        if any(k in got for k in LINK_ERRORS):
            _add(sig, name, p, "ib-link-errors", idx, "")
    return compared, unknown


def _harness(target: str, message: str) -> dict:
    return {"code": "harness-error", "kind": "harness", "target": target, "message": message,
            "evidence": {"pairs": [], "counters": {}, "rounds": []}}


def _judge_sm(doc: dict, sm: str) -> tuple[dict, dict, list[dict]]:
    """(cable -> code -> signal, port -> counter rises, harness findings) of one SM's reads."""
    reads = _reads(doc, sm)
    failed = [(i, r["error"]) for i, r in reads if r.get("error")]
    if failed:
        return {}, {}, [_harness(sm, f"{sm}: the IB fabric could not be read in {len(failed)} read(s) "
                                     f"(first, {failed[0][0]}: {failed[0][1]}): no fault is read from it")]
    if not reads or not any(r.get("ports") for _, r in reads):
        return {}, {}, [_harness(sm, f"{sm}: iblinkinfo showed no Active cabled port in {len(reads)} read(s): "
                                     "nothing of the IB fabric was checked")]
    sig: dict = {}
    counters: dict = {}
    for i, r in reads:
        _rate_signals(sig, i, r.get("ports") or {}, (doc.get("ib") or {}).get("intent") or {})
    rounds = [(i, r) for i, r in reads if i != "recovery"]
    compared, unknown = _window(sig, counters, "window", rounds[0][1], rounds[-1][1], rounds[-1][0])
    if reads[-1][0] == "recovery" and len(rounds) > 0:
        _window(sig, counters, "recovery", rounds[-1][1], reads[-1][1], "recovery")
    if len(rounds) > 1 and not compared:
        return sig, counters, [_harness(sm, f"{sm}: no port's error counters could be compared over the window "
                                            f"(unknown: {', '.join(unknown[:4])}): nothing was checked")]
    return sig, counters, []


def _errors_message(cable: tuple[str, str], counters: dict, recovery_s, ca: bool) -> tuple[str, str | None]:
    """The ``ib-link-errors`` line of a cable (``ca``: its first end is an HCA port) and the end that
    counts (None: both ends)."""
    counting = [e for e in cable if any(k in LINK_ERRORS for k in (counters.get(e) or {}).get("window", {})) or
                any(k in LINK_ERRORS for k in (counters.get(e) or {}).get("recovery", {}))]
    end = counting[0] if len(counting) == 1 else None
    parts = []
    for e in counting:
        win = {k: v for k, v in (counters.get(e) or {}).get("window", {}).items() if k in LINK_ERRORS}
        rec = {k: v for k, v in (counters.get(e) or {}).get("recovery", {}).items() if k in LINK_ERRORS}
        text = ", ".join(f"{k} +{v}" for k, v in win.items()) or "none"
        parts.append(f"{e} counted {text} in the window" + (
            f", {', '.join(f'{k} +{v}' for k, v in rec.items())} in the {recovery_s:g} s recovery window after it"
            if rec else (f", none in the {recovery_s:g} s recovery window" if recovery_s is not None else "")))
    kind = "the node port" if ca and end == cable[0] else "the switch port"
    who = f"{kind} {end} counts errors" if end else "both ends count errors"
    return f"{who}: " + "; ".join(parts), end


def findings(doc: dict, skip_nodes: set[str] = frozenset()) -> list[dict]:
    """The IB findings of ``doc`` (module docstring), one per cable, then one ``harness-error`` per SM
    whose reads checked nothing; sorted by target. Empty for a document without ``ib``. A cable of a
    node in ``skip_nodes`` (one a node finding names already: it absorbs its link symptoms) is left out.

    Returns:
        ``[{"code": "ib-width-degraded", "kind": "link", "target": "node01:mlx5_0/1<->leaf01/1",
        "message": ..., "evidence": {"pairs": [], "counters": {"node01:mlx5_0/1": {"window":
        {"SymbolErrorCounter": 500}}}, "rounds": ["baseline", 0], "end": "node01:mlx5_0/1" | None,
        "sm": "sm01"}}, ...]``.
    """
    ib = doc.get("ib") or {}
    recovery_s = ib.get("recovery_s") if ib.get("recovery") else None
    out: dict[str, dict] = {}
    harness = []
    for sm in ib.get("sms") or []:
        sig, counters, bad = _judge_sm(doc, sm)
        harness += bad
        for cable, codes in sig.items():
            ca = codes.pop("_ca")
            code = next(c for c in IB_CODES if c in codes)
            errors, end = _errors_message(cable, counters, recovery_s, ca) if "ib-link-errors" in codes else ("", None)
            lines = [codes[c]["message"] for c in IB_CODES if c in codes and codes[c]["message"]] + [errors]
            target = "<->".join(cable)
            kind = "link" if ca else "switch"
            if kind == "link" and cable[0].split(":")[0] in skip_nodes:
                continue
            out.setdefault(target, {
                "code": code, "kind": kind, "target": target, "message": "; ".join(x for x in lines if x),
                "evidence": {"pairs": [], "counters": {e: counters[e] for e in cable if e in counters},
                             "rounds": [r for c in codes.values() for r in c["rounds"]], "end": end, "sm": sm}})
    return sorted(out.values(), key=lambda f: f["target"]) + harness
