"""The burn-in report as one self-contained HTML file.

Drawn with matplotlib (``Figure`` objects, no pyplot state; the Agg canvas) into PNGs that sit in
the page as ``data:image/png;base64,...`` URIs; no script, stylesheet, font or image is fetched
from anywhere, and every text from the document or the findings is HTML-escaped. Sections:

- the run (id, inventory, kind, rounds, duration) and the findings (code, kind, target, message,
  evidence pairs and rounds);
- a heatmap of pairwise bandwidth as a share of line rate (``id="heatmap"``, :func:`share_matrix`:
  NIC by NIC, the median over every round; empty cells: not tested);
- per-node and per-link (NIC to leaf port) tables: pairs, median and lowest share, slow pairs;
- counter trends: per round, the sum over all NICs of each counter that rose (a line each), and
  the NICs with rises as a table.

Shares and slowness are :func:`tuning.burnin.localise.pair_stats`'s (docs/burnin.md).
"""

from __future__ import annotations

import base64
import html
import io
import statistics
import time
from pathlib import Path

from tuning.burnin.localise import fabric_graph, link_target, pair_stats
from tuning.outfile import write_atomic

STYLE = ("body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}"
         "td,th{border:1px solid #bbb;padding:.2em .5em;font-size:90%;text-align:left}th{background:#eee}"
         ".bad{background:#fdd}.ok{background:#dfd}img{max-width:100%}")


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _png(fig) -> str:
    """A data URI of ``fig`` as PNG (no metadata: nothing but pixels)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _node(nic: str) -> str:
    return nic.split(":")[0]


#: above this many NICs the heatmap is drawn node by node instead of NIC by NIC
NIC_HEATMAP_MAX = 256


def share_matrix(doc: dict, stats: dict) -> tuple[list[str], list[list[float | None]]]:
    """Labels and the matrix of median bandwidth share of line rate (both directions folded
    together; None: no measured pair between the two). NIC by NIC, ordered rail by rail then by
    node (each rail a block, a bad cable a red cross), or node by node above
    :data:`NIC_HEATMAP_MAX` NICs. Only the NICs of the rails that ran (a rail with a measured pair;
    every rail when none ran): ``--rail 0`` draws rail 0's block, not seven empty ones."""
    topo = doc["topology"].get("nodes", {})
    nics = sorted((nic.get("rail", 0), node, dev) for node, devs in topo.items() for dev, nic in devs.items())
    ends = {nic for pair in stats for nic in pair}
    ran = {r for r, node, dev in nics if f"{node}:{dev}" in ends}
    nics = [n for n in nics if n[0] in ran] if ran else nics
    by_nic = len(nics) <= NIC_HEATMAP_MAX
    labels = [f"{node}:{dev}" for _, node, dev in nics] if by_nic else sorted(topo)
    key = (lambda x: x) if by_nic else _node
    cells: dict[tuple[str, str], list[float]] = {}
    for (a, b), st in stats.items():
        vals = [s for s in st["share_line"] if s is not None]
        for k in ((key(a), key(b)), (key(b), key(a))):
            cells.setdefault(k, []).extend(vals)
    return labels, [[statistics.median(cells[(x, y)]) if cells.get((x, y)) else None for y in labels] for x in labels]


def heatmap(nodes: list[str], matrix: list[list[float | None]]) -> str:
    """The heatmap PNG (data URI): share of line rate 0..1, red low, green high, values printed."""
    import numpy as np
    from matplotlib.figure import Figure

    data = np.array([[np.nan if v is None else v for v in row] for row in matrix], dtype=float)
    size = min(14.0, max(4.0, 0.5 * len(nodes) + 2))
    fig = Figure(figsize=(size + 1, size))
    ax = fig.add_subplot()
    im = ax.imshow(data, vmin=0.0, vmax=1.0, cmap="RdYlGn")
    font = 7 if len(nodes) <= 32 else max(2, int(7 * 32 / len(nodes)))
    ax.set_xticks(range(len(nodes)), nodes, rotation=90, fontsize=font)
    ax.set_yticks(range(len(nodes)), nodes, fontsize=font)
    ax.set_title("Pairwise bandwidth, share of line rate (median)")
    if len(nodes) <= 16:
        for i in range(len(nodes)):
            for j in range(len(nodes)):
                if not np.isnan(data[i, j]):
                    ax.text(j, i, f"{data[i, j]:.2f}", ha="center", va="center", fontsize=7)
    fig.colorbar(im, ax=ax, fraction=0.046)
    return _png(fig)


def counter_trends(doc: dict) -> tuple[dict[str, list[int]], dict[str, dict[str, int]]]:
    """Per counter that rose anywhere, its per-round sum over all NICs; and per NIC the totals of
    the counters that rose on it.

    Returns:
        ``({"rx_discards_phy": [0, 40, 40]}, {"node02:mlx5_1": {"rx_discards_phy": 80}})``.
    """
    rounds = doc.get("rounds", [])
    series: dict[str, list[int]] = {}
    per_nic: dict[str, dict[str, int]] = {}
    for k, rnd in enumerate(rounds):
        for node, nics in (rnd.get("nics") or {}).items():
            for dev, st in nics.items():
                for name, v in (st.get("counters") or {}).items():
                    if isinstance(v, (int, float)) and v > 0:
                        series.setdefault(name, [0] * len(rounds))[k] += int(v)
                        tot = per_nic.setdefault(f"{node}:{dev}", {})
                        tot[name] = tot.get(name, 0) + int(v)
    return dict(sorted(series.items())), dict(sorted(per_nic.items()))


def trend_chart(doc: dict, series: dict[str, list[int]]) -> str:
    """Counter sums per round (one line per counter, log scale when they span decades)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3.5))
    ax = fig.add_subplot()
    idx = [r.get("index", k) for k, r in enumerate(doc.get("rounds", []))]
    for name, vals in list(series.items())[:20]:
        ax.plot(idx, vals, marker="o", label=name)
    ax.set_xlabel("round")
    ax.set_ylabel("rise over the round (sum of NICs)")
    ax.set_title("Counter trends")
    if series:
        ax.legend(fontsize=7, ncol=2)
        top = max(max(v) for v in series.values())
        if top > 100 * max(1, min(max(v) for v in series.values())):
            ax.set_yscale("symlog")
    return _png(fig)


def _table(head: list[str], rows: list[list], bad: list[bool] | None = None) -> str:
    out = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for i, row in enumerate(rows):
        cls = "" if bad is None else (' class="bad"' if bad[i] else "")
        out.append(f"<tr{cls}>" + "".join(f"<td>{_e('' if c is None else c)}</td>" for c in row) + "</tr>")
    return "".join(out) + "</table>"


def _fmt(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}"


def _group_rows(stats: dict, key) -> dict[str, list]:
    """Pair stats grouped by ``key(nic)`` for both ends: group -> [pairs, median share, min share, slow]."""
    groups: dict[str, dict] = {}
    for (a, b), st in stats.items():
        shares = [s for s in st["share_line"] if s is not None]
        for grp in {key(a), key(b)}:
            e = groups.setdefault(grp, {"pairs": 0, "shares": [], "slow": 0})
            e["pairs"] += 1
            e["shares"] += shares
            e["slow"] += st["slow"]
    return {grp: [e["pairs"], _fmt(statistics.median(e["shares"]) if e["shares"] else None),
                  _fmt(min(e["shares"]) if e["shares"] else None), e["slow"]] for grp, e in sorted(groups.items())}


def node_table(doc: dict, stats: dict, named: set[str]) -> str:
    """The "Nodes" table: one row per inventory node (the topology's, sorted), its pairs (each
    NIC pair it is an end of, counted once), median and lowest share, slow pairs, GPUs of the last
    round and whether a round could not read it; a row is highlighted when a finding names the node
    (a node finding, or the NIC end of a link finding)."""
    names = sorted(doc["topology"].get("nodes", {}))
    rows = _group_rows(stats, _node)
    gpus = (doc.get("rounds") or [{}])[-1].get("gpus") or {}
    errors = {n for r in doc.get("rounds", []) for n in (r.get("errors") or {})}
    bad = [n in named or n in {t.split(":")[0] for t in named} for n in names]
    return _table(["node", "pairs", "median share", "lowest share", "slow pairs", "GPUs", "not read in a round"],
                  [[n, *rows.get(n, [0, "", "", 0]), len(gpus.get(n, [])), "yes" if n in errors else ""]
                   for n in names], bad)


def render(doc: dict, findings: list[dict]) -> str:
    """The report page (module docstring) as one HTML string."""
    g = fabric_graph(doc["topology"])
    stats = pair_stats(doc, g)
    nodes, matrix = share_matrix(doc, stats)
    series, per_nic = counter_trends(doc)
    named = {f["target"].split("<->")[0] for f in findings} | {f["target"] for f in findings}
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(doc.get("started") or 0))
    parts = [f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>fabtune burn-in {_e(doc.get('run_id'))}"
             f"</title><style>{STYLE}</style></head><body>",
             f"<h1>fabtune {_e(doc.get('kind', 'burnin'))} {_e(doc.get('run_id'))}</h1>",
             _table(["inventory", "started", "seconds", "rounds", "pairs", "findings"],
                    [[doc.get("inventory"), started, f"{doc.get('seconds') or 0:.0f}", len(doc.get("rounds", [])),
                      len(stats), len(findings)]]),
             "<h2>Findings</h2>"]
    parts.append(_table(["code", "kind", "target", "message", "pairs", "rounds"],
                        [[f["code"], f["kind"], f["target"], f["message"], len(f["evidence"].get("pairs", [])),
                          " ".join(map(str, f["evidence"].get("rounds", [])))] for f in findings],
                        [True] * len(findings)) if findings else "<p class=\"ok\">No findings: every node, link "
                 "and switch looked healthy.</p>")
    parts += ["<h2>Pairwise bandwidth</h2>",
              f'<img id="heatmap" alt="pairwise bandwidth heatmap" src="{heatmap(nodes, matrix)}">',
              "<h2>Nodes</h2>"]
    parts.append(node_table(doc, stats, named))
    parts.append("<h2>Links</h2>")
    links = _group_rows(stats, lambda nic: link_target(g, nic))
    parts.append(_table(["link", "pairs", "median share", "lowest share", "slow pairs"],
                        [[k, *v] for k, v in links.items()], [k in named or k.split("<->")[0] in named for k in links]))
    parts += ["<h2>Counter trends</h2>",
              f'<img id="counters" alt="counter trends" src="{trend_chart(doc, series)}">',
              _table(["NIC", "counters that rose (total over the run)"],
                     [[nic, ", ".join(f"{k} {v}" for k, v in c.items())] for nic, c in per_nic.items()])
              if per_nic else "<p>No counter rose.</p>",
              "</body></html>"]
    return "\n".join(parts)


def write(doc: dict, findings: list[dict], path: Path) -> None:
    """Write the report of ``doc`` and ``findings`` to ``path`` (one self-contained HTML file).

    Raises:
        OSError: the file could not be written.  KeyError: ``doc`` has no ``topology``.
    """
    write_atomic(Path(path), render(doc, findings).encode("utf-8"))  # never through a link or onto a device
