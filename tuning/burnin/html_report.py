"""The burn-in report as one self-contained HTML file.

Figures (:mod:`tuning.burnin.html_figures`) sit in the page as ``data:image/png;base64,...`` URIs;
no script, stylesheet, font or image is fetched from anywhere, and every text from the document or
the findings is HTML-escaped. Sections:

- the run (id, inventory, kind, rounds, duration; a run that stopped, unreachable nodes) and the
  findings (code, kind, target, message, evidence pairs and rounds);
- drain and undrain (the document's ``drain`` / ``undrain``): per node the action (dry run: plan
  only, or acted), its result, the finding that named it and its calls; failures in red;
- the thresholds the pairs were judged with (:func:`thresholds`: localisation's, with what they
  came to on each rail of this run);
- the heatmap of pairwise bandwidth as a share of line rate (``id="heatmap"``, shown unscaled);
- the pairs that gave no value (:func:`not_run`): scheduled with no result, or a result with an
  error (the fabric's, or the harness's ``error_class``), with the reason;
- per-node and per-link (NIC to leaf port) tables: pairs, median and lowest share (class ``bad``
  below the threshold), slow pairs;
- counter trends (``id="counters"``): per counter that rose, its rise since the baseline read
  summed over the NICs, and the NICs with rises as a table.

Shares and slowness are :func:`tuning.burnin.localise.pair_stats`'s (docs/burnin.md).
"""

from __future__ import annotations

import html
import statistics
import time
from pathlib import Path

from tuning.burnin import html_figures
from tuning.burnin.localise import (MIN_LINE_SHARE, SLOW_RATIO, _ends, _line_rate, _quantile, _rail_key, fabric_graph,
                                    link_target, pair_stats)
from tuning.outfile import write_atomic

STYLE = ("body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}"
         "td,th{border:1px solid #bbb;padding:.2em .5em;font-size:90%;text-align:left}th{background:#eee}"
         ".bad{background:#fdd}.ok{background:#dfd}.fail{background:#fbb;color:#a00;font-weight:bold}"
         "img{max-width:100%}.wide{overflow-x:auto}.wide img{max-width:none}pre{white-space:pre-wrap}")
#: the most rows of the table of pairs without a value (the rest are counted)
NOT_RUN_ROWS = 200


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _node(nic: str) -> str:
    return nic.split(":")[0]


def _table(head: list[str], rows: list[list], bad: list[bool] | None = None) -> str:
    """A table; a cell is a value or ``(value, css class)``; ``bad[i]`` marks row i."""
    out = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for i, row in enumerate(rows):
        cls = ' class="bad"' if bad is not None and bad[i] else ""
        tds = []
        for c in row:
            c, css = c if isinstance(c, tuple) else (c, "")
            tds.append((f'<td class="{css}">' if css else "<td>") + _e("" if c is None else c) + "</td>")
        out.append(f"<tr{cls}>" + "".join(tds) + "</tr>")
    return "".join(out) + "</table>"


def _fmt(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}"


def thresholds(doc: dict, g) -> dict:
    """The thresholds the pairs were judged with (:mod:`tuning.burnin.localise`'s: the document
    records none of its own) and what they came to on each rail of this run.

    Returns:
        ``{"slow_ratio": 0.8, "min_line_share": 0.5, "rails": {"rail 0": {"reference": 0.93,
        "slow_below": 0.74}, "cross-rail": {...}}}``: per rail (``cross-rail`` for pairs between
        rails) its reference (the 75th percentile of a round's bandwidths, as a share of line rate,
        median over rounds) and the share under which a pair was slow there (the higher of
        ``slow_ratio`` x reference and ``min_line_share``).
    """
    refs: dict[str, list[float]] = {}
    for rnd in doc.get("rounds", []):
        by_rail: dict[str, list[tuple[float, float]]] = {}
        for p in rnd.get("pairs", []):
            line = _line_rate(p)
            if p.get("bw_gbps") and line:
                by_rail.setdefault(_rail_key(p, g), []).append((float(p["bw_gbps"]), line))
        for rail, vals in by_rail.items():
            refs.setdefault(rail, []).append(_quantile([b for b, _ in vals], 0.75) / statistics.median(
                [line for _, line in vals]))
    judged = doc.get("thresholds") or {}  # what the run wrote it judged with; an older document: today's
    ratio, floor = judged.get("slow_ratio", SLOW_RATIO), judged.get("min_line_share", MIN_LINE_SHARE)
    rails = {}
    for rail, vals in sorted(refs.items()):
        ref = statistics.median(vals)
        rails[rail] = {"reference": round(ref, 3), "slow_below": round(max(ratio * ref, floor), 3)}
    return {"slow_ratio": ratio, "min_line_share": floor, "rails": rails}


def _pair_threshold(thr: dict, g, pair: tuple[str, str]) -> float:
    rail = _rail_key({"client_nic": pair[0], "server_nic": pair[1]}, g)
    return thr["rails"].get(rail, {}).get("slow_below", thr["min_line_share"])


def not_run(doc: dict) -> list[dict]:
    """The pairs that gave no value in some round: scheduled (in any round of the run) with no
    result in that round, or a result without bandwidth (``status`` ``error``: the fabric's, or the
    verification harness's ``error_class``).

    Returns:
        ``[{"client": "node01:mlx5_0", "server": "node02:mlx5_0", "rounds": [0, 1], "of": 3,
        "never": False, "class": "harness", "kind": "port_in_use", "reason": "node02 (server): ..."}]``:
        the rounds without a value, of how many; ``never``: no value in any round; ``class`` and
        ``reason`` of the first such round (``no result`` for a pair missing from a round). Pairs that
        never ran first, then by name.
    """
    rounds = doc.get("rounds") or []
    ran = [{_ends(p): p for p in rnd.get("pairs") or []} for rnd in rounds]
    out = []
    for pair in sorted({k for r in ran for k in r}):
        missing = []
        for rnd, by in zip(rounds, ran):
            p = by.get(pair)
            if p is None or not p.get("bw_gbps"):
                missing.append((rnd.get("index", 0), p))
        if not missing:
            continue
        p = next((q for _, q in missing if q is not None), None)
        if p is None:
            cls, reason = "no result", "scheduled, no result in the round"
        else:
            cls = p.get("error_class") or ("fabric" if p.get("status") == "error" else "no value")
            reason = p.get("error") or p.get("error_kind") or "no value"
        out.append({"client": pair[0], "server": pair[1], "rounds": [i for i, _ in missing], "of": len(rounds),
                    "never": len(missing) == len(rounds), "class": cls,
                    "kind": (p or {}).get("error_kind") or "", "reason": " ".join(str(reason).split())})
    return sorted(out, key=lambda r: (not r["never"], r["client"], r["server"]))


def counter_trends(doc: dict) -> tuple[dict[str, list[int]], dict[str, dict[str, int]]]:
    """Per counter that rose anywhere, its per-round rise summed over all NICs; and per NIC the
    totals of the counters that rose on it. The counters are each round's ``counters`` deltas and
    the link's ``carrier_down_delta`` (as ``carrier_down_count``, the sysfs counter a flap moves).

    Returns:
        ``({"rx_discards_phy": [0, 40, 40]}, {"node02:mlx5_1": {"rx_discards_phy": 80}})``.
    """
    rounds = doc.get("rounds", [])
    series: dict[str, list[int]] = {}
    per_nic: dict[str, dict[str, int]] = {}
    for k, rnd in enumerate(rounds):
        for node, nics in (rnd.get("nics") or {}).items():
            for dev, st in nics.items():
                rises = dict(st.get("counters") or {})
                rises["carrier_down_count"] = (st.get("link") or {}).get("carrier_down_delta")
                for name, v in rises.items():
                    if isinstance(v, (int, float)) and v > 0:
                        series.setdefault(name, [0] * len(rounds))[k] += int(v)
                        tot = per_nic.setdefault(f"{node}:{dev}", {})
                        tot[name] = tot.get(name, 0) + int(v)
    return dict(sorted(series.items())), dict(sorted(per_nic.items()))


def _group_rows(stats: dict, key, thr: dict, g) -> dict[str, list]:
    """Pair stats grouped by ``key(nic)`` for both ends: group -> [pairs, median share, lowest share,
    slow pairs], the shares ``bad`` below the group's threshold (the highest of its pairs')."""
    groups: dict[str, dict] = {}
    for (a, b), st in stats.items():
        shares = [s for s in st["share_line"] if s is not None]
        for grp in {key(a), key(b)}:
            e = groups.setdefault(grp, {"pairs": 0, "shares": [], "slow": 0, "thr": 0.0})
            e["pairs"] += 1
            e["shares"] += shares
            e["slow"] += st["slow"]
            e["thr"] = max(e["thr"], _pair_threshold(thr, g, (a, b)))
    out = {}
    for grp, e in sorted(groups.items()):
        med, low = (statistics.median(e["shares"]), min(e["shares"])) if e["shares"] else (None, None)
        out[grp] = [e["pairs"], *((_fmt(v), "bad" if v is not None and v < e["thr"] else "") for v in (med, low)),
                    (e["slow"], "bad" if e["slow"] else "")]
    return out


def node_table(doc: dict, stats: dict, named: set[str], thr: dict, g) -> str:
    """The "Nodes" table: one row per inventory node (the topology's, sorted), its pairs (each
    NIC pair it is an end of, counted once), median and lowest share, slow pairs, GPUs of the last
    round and whether a round could not read it; a row is highlighted when a finding names the node
    (a node finding, or the NIC end of a link finding), a share cell below the threshold."""
    names = sorted(doc["topology"].get("nodes", {}))
    rows = _group_rows(stats, _node, thr, g)
    gpus = (doc.get("rounds") or [{}])[-1].get("gpus") or {}
    errors = {n for r in doc.get("rounds", []) for n in (r.get("errors") or {})}
    bad = [n in named or n in {t.split(":")[0] for t in named} for n in names]
    return _table(["node", "pairs", "median share", "lowest share", "slow pairs", "GPUs", "not read in a round"],
                  [[n, *rows.get(n, [0, "", "", 0]), len(gpus.get(n, [])), "yes" if n in errors else ""]
                   for n in names], bad)


def drain_section(doc: dict, findings: list[dict]) -> str:
    """The drain and undrain steps (docs/burnin.md's ``drain`` / ``undrain``): per node the action,
    whether it was a dry run (plan only) or acted, the result (failures ``fail``, red) and its calls."""
    from tuning.burnin.drain import node_of

    why = {}
    for f in findings:
        why.setdefault(node_of(f), f"{f['code']} ({f['target']})")
    parts = []
    for step, done, verb in (("drain", "drained", "drain"), ("undrain", "resumed", "resume")):
        d = doc.get(step)
        if not d:
            stopped = " (the run stopped: a run that tested nothing drains nothing)" if doc.get("stopped") else ""
            parts.append(f"<p>{step.capitalize()}: not done{stopped if step == 'drain' else ''}.</p>")
            continue
        mode = "dry run (plan only, nothing changed)" if d.get("dry_run") else "acted"
        rows = [[n, verb, mode, ("would " + verb if d.get("dry_run") else done, "ok"), why.get(n, "")]
                for n in d.get(done) or []]
        rows += [[n, verb, mode, ("over the cap: not drained", "bad"), why.get(n, "")]
                 for n in d.get("over_cap") or []]
        rows += [[n, verb, mode, ("left alone: " + str(r), ""), why.get(n, "")]
                 for n, r in (d.get("left") or {}).items()]
        rows += [[n, verb, mode, ("FAILED, not " + done + ": " + str(r), "fail"), why.get(n, "")]
                 for n, r in (d.get("failed") or {}).items()]
        parts.append(f"<h3>{_e(step.capitalize())} ({_e(d.get('adapter'))}, {_e(mode)})</h3>")
        parts.append(_table(["node", "action", "mode", "result", "finding"], rows) if rows else "<p>No node.</p>")
        if d.get("calls"):
            parts.append("<pre>" + _e("\n".join(map(str, d["calls"]))) + "</pre>")
    return "\n".join(parts)


def thresholds_section(thr: dict) -> str:
    """The thresholds, stated (localisation's rule) and per rail of this run."""
    return (f"<p>A pair is slow in a round when its test gave no value, its bandwidth is below "
            f"<b>{thr['slow_ratio']:g}</b> of its rail's reference (the 75th percentile of the round's pairs on "
            f"the rail) or below <b>{thr['min_line_share']:g}</b> of its line rate; slow over the run when slow in "
            f"at least half of the rounds that measured it (tuning.burnin.localise). Shares below are of line "
            f"rate; cells under their threshold are marked.</p>"
            + _table(["rail", "reference (share of line rate)", "slow below (share of line rate)"],
                     [[r, _fmt(v["reference"]), _fmt(v["slow_below"])] for r, v in thr["rails"].items()]))


def not_run_section(doc: dict, rows: list[dict]) -> str:
    """The table of :func:`not_run` (at most :data:`NOT_RUN_ROWS` rows) and the unreachable nodes."""
    out = []
    if doc.get("unreachable"):
        out.append("<p>Not scheduled (unreachable when the run started): " + ", ".join(
            f"{_e(n)} ({_e(r)})" for n, r in sorted(doc["unreachable"].items())) + "</p>")
    if not rows:
        return "\n".join(out + ["<p class=\"ok\">Every scheduled pair gave a value in every round.</p>"])
    out.append(_table(["client NIC", "server NIC", "rounds without a value", "class", "error kind", "reason"],
                      [[r["client"], r["server"], " ".join(map(str, r["rounds"])) + f" of {r['of']}" +
                        (" (never ran)" if r["never"] else ""), r["class"], r["kind"], r["reason"]]
                       for r in rows[:NOT_RUN_ROWS]], [r["never"] for r in rows[:NOT_RUN_ROWS]]))
    if len(rows) > NOT_RUN_ROWS:
        out.append(f"<p>... and {len(rows) - NOT_RUN_ROWS} more pair(s).</p>")
    return "\n".join(out)


def drawn_thresholds(thr: dict) -> dict[str, float]:
    """The heatmap's thresholds from :func:`thresholds`: label -> share of line rate, the line-rate
    floor and (when above it) the median of the rails' thresholds, the spread named
    (``{"slow < 0.5 x line rate": 0.5, "slow < 0.8 x rail reference (0.75..0.77 by rail)": 0.76}``)."""
    out = {f"slow < {thr['min_line_share']:g} x line rate": thr["min_line_share"]}
    rails = sorted(v["slow_below"] for v in thr["rails"].values())
    if rails and rails[-1] > thr["min_line_share"]:
        spread = f" ({rails[0]:.2f}..{rails[-1]:.2f} by rail)" if rails[-1] - rails[0] >= 0.005 else ""
        out[f"slow < {thr['slow_ratio']:g} x rail reference{spread}"] = round(statistics.median(rails), 2)
    return out


def head_section(doc: dict, findings: list[dict], n_pairs: int) -> str:
    """The page's start: title, the run (a run that stopped in red) and the findings."""
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(doc.get("started") or 0))
    parts = [f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>fabtune burn-in {_e(doc.get('run_id'))}"
             f"</title><style>{STYLE}</style></head><body>",
             f"<h1>fabtune {_e(doc.get('kind', 'burnin'))} {_e(doc.get('run_id'))}</h1>",
             _table(["inventory", "started", "seconds", "rounds", "pairs", "findings"],
                    [[doc.get("inventory"), started, f"{doc.get('seconds') or 0:.0f}", len(doc.get("rounds", [])),
                      n_pairs, len(findings)]])]
    if doc.get("stopped"):
        parts.append(f"<p class=\"fail\">{_e(doc['stopped'])}</p>")
    parts.append("<h2>Findings</h2>")
    parts.append(_table(["code", "kind", "target", "message", "pairs", "rounds"],
                        [[f["code"], f["kind"], f["target"], f["message"], len(f["evidence"].get("pairs", [])),
                          " ".join(map(str, f["evidence"].get("rounds", [])))] for f in findings],
                        [True] * len(findings)) if findings else "<p class=\"ok\">No findings: every node, link "
                 "and switch looked healthy.</p>")
    return "\n".join(parts)


def counters_section(doc: dict) -> str:
    """The counter trends chart (``id="counters"``; a sentence when no counter rose) and the NICs
    whose counters rose (:func:`counter_trends`)."""
    series, per_nic = counter_trends(doc)
    chart = html_figures.trend_chart(doc, series)
    return "\n".join([f'<img id="counters" alt="counter trends" src="{chart}">' if chart else
                      f"<p>No counter rose in {len(doc.get('rounds', []))} round(s).</p>",
                      _table(["NIC", "counters that rose (total over the run)"],
                             [[nic, ", ".join(f"{k} {v}" for k, v in c.items())] for nic, c in per_nic.items()])
                      if per_nic else ""])


def render(doc: dict, findings: list[dict]) -> str:
    """The report page (module docstring) as one HTML string."""
    g = fabric_graph(doc["topology"])
    stats = pair_stats(doc, g)
    thr = thresholds(doc, g)
    missing = not_run(doc)
    cells = html_figures.grid(doc, stats, {(r["client"], r["server"]) for r in missing if r["never"]})
    named = {f["target"].split("<->")[0] for f in findings} | {f["target"] for f in findings}
    links = _group_rows(stats, lambda nic: link_target(g, nic), thr, g)
    return "\n".join([
        head_section(doc, findings, len(stats)),
        "<h2 id=\"drain\">Drain</h2>", drain_section(doc, findings),
        "<h2 id=\"thresholds\">Thresholds</h2>", thresholds_section(thr),
        "<h2>Pairwise bandwidth</h2>",
        f'<div class="wide"><img id="heatmap" alt="pairwise bandwidth heatmap" '
        f'src="{html_figures.heatmap(cells, drawn_thresholds(thr))}"></div>',
        "<h2 id=\"not-run\">Pairs without a value</h2>", not_run_section(doc, missing),
        "<h2>Nodes</h2>", node_table(doc, stats, named, thr, g),
        "<h2>Links</h2>", _table(["link", "pairs", "median share", "lowest share", "slow pairs"],
                                 [[k, *v] for k, v in links.items()],
                                 [k in named or k.split("<->")[0] in named for k in links]),
        "<h2>Counter trends</h2>", counters_section(doc), "</body></html>"])


def write(doc: dict, findings: list[dict], path: Path) -> None:
    """Write the report of ``doc`` (the burn-in document, docs/burnin.md) and ``findings``
    (:func:`tuning.burnin.localise.localise`'s) to ``path``: one self-contained HTML file, UTF-8.

    Raises:
        OSError: the file could not be written.  KeyError: ``doc`` has no ``topology``.
    """
    write_atomic(Path(path), render(doc, findings).encode("utf-8"))  # never through a link or onto a device
