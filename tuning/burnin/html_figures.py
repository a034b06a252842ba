"""The burn-in report's figures: the pairwise bandwidth heatmap and the counter trends.

matplotlib ``Figure`` objects (no pyplot state, the Agg canvas), each also as a PNG ``data:`` URI
(:func:`png`) for :mod:`tuning.burnin.html_report`. The ``*_figure`` functions return the Figure
itself, so a test can count its lines or read its tick labels.

Sizes: figures are drawn at :data:`DPI` and laid out so that every text is at least
:data:`MIN_FONT_PT` points at the PNG's native size (a point is ``DPI / 72`` pixels): the page shows
the heatmap unscaled. Heatmap rows and columns:

- up to :data:`NIC_LABEL_MAX` NICs: NIC by NIC, rail by rail (each rail a block, a bad cable a
  red cross), one label per NIC, values printed up to :data:`VALUE_MAX` NICs;
- up to :data:`NIC_HEATMAP_MAX` NICs: NIC by NIC, node by node (each node a block between thin
  gridlines), one label per node at its block (64 nodes of 8 NICs: 64 labels, not 512);
- above: node by node, at most :data:`LABEL_MAX` labels (every k-th node).

Cell colours: the share of line rate 0..1 on ``RdYlGn``, yellow at the slow threshold (red below,
green above; the thresholds are black lines on the colour bar); :data:`NOT_RUN` (hatched where the
cells are large enough) where pairs were scheduled but none gave a value; :data:`NOT_SCHEDULED`
where no pair was scheduled.
"""

from __future__ import annotations

import base64
import io
import math
import statistics
from dataclasses import dataclass, field

#: pixels per inch of every PNG
DPI = 100
#: the smallest text, in points at the PNG's native size
MIN_FONT_PT = 7
#: inches per tick label (7 pt text and 5 pt of air)
LABEL_PITCH_IN = 12 / 72
#: the most NICs labelled one by one (8 nodes of 8 NICs); above, one label per node
NIC_LABEL_MAX = 64
#: the most NICs drawn as cells (128 nodes of 8 NICs); above, one cell per node pair
NIC_HEATMAP_MAX = 1024
#: the most tick labels per axis (above, every k-th)
LABEL_MAX = 120
#: the most cells per axis with their value printed in them
VALUE_MAX = 16
#: colour of a cell whose pairs were scheduled but gave no value; of a cell no pair was scheduled in
NOT_RUN = "#5e3c99"
NOT_SCHEDULED = "#e6e6e6"
#: the most counters drawn as lines (the largest rises); the page's table lists them all
TREND_LINES = 12


def png(fig) -> str:
    """A ``data:image/png;base64,...`` URI of ``fig`` at :data:`DPI` (no metadata: nothing but pixels)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _node(nic: str) -> str:
    return nic.split(":")[0]


@dataclass
class Grid:
    """The heatmap's cells.

    Attributes:
        keys: a row's (and column's) NIC (``node01:mlx5_0``) or node (``node01``), in order.
        by: ``nic`` (rail by rail, a label per NIC), ``nic-by-node`` (node by node, a label per
            node) or ``node`` (a cell per node pair).
        share: ``share[i][j]``: median share of line rate (0..1, both directions folded together)
            over every round of every pair between ``keys[i]`` and ``keys[j]``; None: no value.
        not_run: ``not_run[i][j]``: pairs were scheduled there and none gave a value in any round.
        blocks: the block of each key (``rail 0`` by NIC, the node grouped by node; empty by node):
            the gridlines go between blocks.
    """

    keys: list[str]
    by: str
    share: list[list[float | None]]
    not_run: list[list[bool]]
    blocks: list[str] = field(default_factory=list)


def grid(doc: dict, stats: dict, never: set[tuple[str, str]] = frozenset()) -> Grid:
    """The heatmap cells of ``doc`` (module docstring): only the NICs of the rails that ran (a rail
    with a measured or scheduled pair; every rail when none ran), so ``--rail 0`` draws rail 0.

    Args:
        stats: :func:`tuning.burnin.localise.pair_stats` of ``doc``.
        never: (client NIC, server NIC) pairs scheduled that gave no value in any round.
    """
    topo = doc["topology"].get("nodes", {})
    nics = [(nic.get("rail", 0), node, dev) for node, devs in topo.items() for dev, nic in devs.items()]
    ends = {nic for pair in (*stats, *never) for nic in pair}
    ran = {r for r, node, dev in nics if f"{node}:{dev}" in ends}
    nics = [n for n in nics if n[0] in ran] if ran else nics
    if len(nics) <= NIC_LABEL_MAX:
        by, nics = "nic", sorted(nics)
        keys, blocks = [f"{node}:{dev}" for _, node, dev in nics], [f"rail {r}" for r, _, _ in nics]
    elif len(nics) <= NIC_HEATMAP_MAX:
        by, nics = "nic-by-node", sorted(nics, key=lambda n: (n[1], n[0], n[2]))
        keys, blocks = [f"{node}:{dev}" for _, node, dev in nics], [node for _, node, _ in nics]
    else:
        by, keys, blocks = "node", sorted({node for _, node, _ in nics}), []
    key = _node if by == "node" else (lambda x: x)
    cells: dict[tuple[str, str], list[float]] = {}
    for (a, b), st in stats.items():
        vals = [s for s in st["share_line"] if s is not None]
        for k in ((key(a), key(b)), (key(b), key(a))):
            cells.setdefault(k, []).extend(vals)
    missing = {k for a, b in never for k in ((key(a), key(b)), (key(b), key(a)))}
    share = [[statistics.median(cells[(x, y)]) if cells.get((x, y)) else None for y in keys] for x in keys]
    not_run = [[(x, y) in missing and not cells.get((x, y)) for y in keys] for x in keys]
    return Grid(keys, by, share, not_run, blocks)


def share_matrix(doc: dict, stats: dict) -> tuple[list[str], list[list[float | None]]]:
    """:func:`grid`'s keys and shares: ``(["node01:mlx5_0", ...], [[0.93, None, ...], ...])``."""
    g = grid(doc, stats)
    return g.keys, g.share


def ticks(g: Grid) -> tuple[list[str], list[float], list[float]]:
    """Tick labels, their positions (cell units) and the gridlines between blocks.

    Returns:
        ``(["node01", "node02"], [3.5, 11.5], [7.5])`` for two nodes of 8 NICs (``nic-by-node``);
        per NIC (``nic``) a label at each cell and a line between rails; per node (``node``) every
        k-th node, no lines.
    """
    n = len(g.keys)
    starts = [i for i in range(len(g.blocks)) if i == 0 or g.blocks[i] != g.blocks[i - 1]]
    lines = [s - 0.5 for s in starts[1:]]
    if g.by == "nic":
        return list(g.keys), [float(i) for i in range(n)], lines
    if g.by == "nic-by-node":
        ends = starts[1:] + [n]
        return [g.blocks[s] for s in starts], [(s + e - 1) / 2 for s, e in zip(starts, ends)], lines
    step = max(1, math.ceil(n / LABEL_MAX))
    return [g.keys[i] for i in range(0, n, step)], [float(i) for i in range(0, n, step)], []


def _norm(thresholds: list[float]):
    """Colour norm: 0..1 with the centre (yellow) at the highest slow threshold."""
    from matplotlib.colors import TwoSlopeNorm

    return TwoSlopeNorm(vmin=0.0, vcenter=min(0.95, max(0.05, max(thresholds, default=0.5))), vmax=1.0)


def heatmap_figure(g: Grid, thresholds: dict[str, float]):
    """The heatmap (module docstring) as a Figure.

    Args:
        g: :func:`grid`.  thresholds: label -> share of line rate (0..1) under which a pair is slow
            (``{"0.5 x line rate": 0.5, "0.8 x rail reference": 0.74}``); each is a black line
            on the colour bar, the highest is the colour scale's yellow.

    Cells smaller than 8 px (many NICs) get a mark besides their colour: a red ring below the
    highest threshold, a purple cross where nothing ran, so one bad NIC stays visible.
    """
    import numpy as np
    from matplotlib.figure import Figure

    n = max(1, len(g.keys))
    labels, pos, bounds = ticks(g)
    side = max(5.0, len(labels) * LABEL_PITCH_IN, n * 1.5 / DPI)  # axes inches: a label pitch, >= 1.5 px a cell
    below = max(len(x) for x in labels or [""]) * 0.6 * MIN_FONT_PT / 72 + 0.7  # rotated labels and the legend
    width, height = side + 2.2, side + below + 0.7
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((1.2 / width, below / height, side / width, side / height))
    data = np.array([[np.nan if v is None else v for v in row] for row in g.share] or [[np.nan]], dtype=float)
    miss = np.array(g.not_run or [[False]], dtype=bool)
    ax.set_facecolor(NOT_SCHEDULED)
    norm = _norm(list(thresholds.values()))
    im = ax.imshow(data, norm=norm, cmap="RdYlGn", interpolation="nearest")
    marked = _mark_cells(ax, data, miss, side * DPI / n, norm.vcenter)
    ax.set_xticks(pos, labels, rotation=90, fontsize=MIN_FONT_PT)
    ax.set_yticks(pos, labels, fontsize=MIN_FONT_PT)
    for b in bounds:
        ax.axhline(b, color="#555555", lw=0.4)
        ax.axvline(b, color="#555555", lw=0.4)
    what = {"nic": "NIC by NIC, rail by rail", "nic-by-node": "NIC by NIC, grouped by node", "node": "node by node"}
    ax.set_title(f"Pairwise bandwidth, share of line rate (median over rounds; {what[g.by]})", fontsize=10)
    if n <= VALUE_MAX:
        for i, j in zip(*np.nonzero(~np.isnan(data))):
            ax.text(j, i, f"{data[i, j]:.2f}", ha="center", va="center", fontsize=MIN_FONT_PT)
    _colour_bar(fig, ax, im, thresholds)
    _legend(fig, thresholds, marked)
    return fig


def _mark_cells(ax, data, miss, cell_px: float, slow_below: float) -> bool:
    """Not-run cells in :data:`NOT_RUN` (hatched from 8 px a cell); below 8 px a cell, rings
    round the cells under ``slow_below`` and crosses on the not-run ones. Returns whether it marked."""
    import numpy as np
    from matplotlib.colors import to_rgba
    from matplotlib.patches import Rectangle

    if miss.any():
        over = np.zeros((*miss.shape, 4))
        over[miss] = to_rgba(NOT_RUN)
        ax.imshow(over, interpolation="nearest")
    if cell_px >= 8:
        for i, j in zip(*np.nonzero(miss)):
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="xx", edgecolor="white", lw=0))
        return False
    size = (9 * 72 / DPI) ** 2  # a 9 px mark, in points squared
    low = np.nonzero(np.nan_to_num(data, nan=1.0) < slow_below)
    ax.scatter(low[1], low[0], s=size, marker="o", facecolors="none", edgecolors="#c00000", linewidths=0.8)
    ax.scatter(*np.nonzero(miss)[::-1], s=size, marker="x", color=NOT_RUN, linewidths=1.2)
    return True


def _colour_bar(fig, ax, im, thresholds: dict[str, float]) -> None:
    """The colour bar: a black line and a tick at each threshold (the legend names them)."""
    cb = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
    marks = sorted(set(thresholds.values()))
    at: list[float] = []
    for t in sorted(marks, reverse=True) + [0.0, 0.25, 0.5, 0.75, 1.0]:  # no two tick labels closer than 0.06
        if all(abs(t - a) > 0.06 for a in at):
            at.append(t)
    at.sort()
    cb.set_ticks(at, labels=[f"{t:.2f}" for t in at])
    cb.ax.tick_params(labelsize=MIN_FONT_PT)
    cb.ax.set_title("share of\nline rate", fontsize=MIN_FONT_PT + 1, loc="left")
    for v in marks:
        cb.ax.axhline(v, color="black", lw=1.5)


def _legend(fig, thresholds: dict[str, float], marked: bool) -> None:
    """Below the heatmap: not run, not scheduled, the thresholds' lines and the rings (when drawn)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=NOT_RUN, hatch="xx", edgecolor="white", label="not run (scheduled, no value)"),
               Patch(facecolor=NOT_SCHEDULED, edgecolor="#999999", label="not scheduled")]
    if marked:
        handles.append(Line2D([], [], ls="", marker="o", mfc="none", mec="#c00000", label="below the slow threshold"))
    handles += [Line2D([], [], color="black", lw=1.5, label=f"{v:.2f}: {label}")
                for label, v in sorted(thresholds.items(), key=lambda kv: -kv[1])]
    fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 0.0), ncol=min(3, len(handles)),
               fontsize=MIN_FONT_PT + 1, frameon=False)


def heatmap(g: Grid, thresholds: dict[str, float]) -> str:
    """:func:`heatmap_figure` as a PNG data URI."""
    return png(heatmap_figure(g, thresholds))


def trend_figure(doc: dict, series: dict[str, list[int]]):
    """Counter trends as a Figure, or None when no counter rose.

    Args:
        doc: the burn-in document (its rounds' ``index`` place the points).
        series: counter -> its rise in each round, summed over every NIC (one value per round,
            :func:`tuning.burnin.html_report.counter_trends`).

    One line per counter (the :data:`TREND_LINES` largest total rises): the rise since the baseline
    read, cumulative (x 0 is the baseline read, x k the end of round k), so a counter rising in
    one round is a line up from 0 and a steady fault a rising slope; a log scale (linear near 0)
    when the counters span more than two decades.
    """
    from matplotlib.figure import Figure

    if not series:
        return None
    top = sorted(series, key=lambda k: (-sum(series[k]), k))[:TREND_LINES]
    rounds = doc.get("rounds") or []
    xs = [0] + [int(r.get("index", k)) + 1 for k, r in enumerate(rounds)]
    fig = Figure(figsize=(10, 4.2))
    ax = fig.add_subplot()
    styles = ("-", "--", "-.", ":")
    for k, name in enumerate(top):
        ys = [0]
        for v in series[name]:
            ys.append(ys[-1] + v)
        ax.plot(xs[:len(ys)], ys, marker="osD^v"[k % 5] if len(ys) <= 40 else None, ls=styles[k // 5 % 4],
                label=f"{name} ({ys[-1]:,})")
    ax.set_xlabel("after round (0: the baseline read before the first round)", fontsize=9)
    ax.set_ylabel("rise since the baseline read\n(sum over NICs)", fontsize=9)
    ax.set_title("Counter trends", fontsize=10)
    ax.tick_params(labelsize=MIN_FONT_PT + 1)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=MIN_FONT_PT + 1, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    totals = [sum(series[k]) for k in top]
    if max(totals) > 100 * max(1, min(totals)):
        ax.set_yscale("symlog", linthresh=1)
    ax.grid(alpha=0.3)
    return fig


def trend_chart(doc: dict, series: dict[str, list[int]]) -> str | None:
    """:func:`trend_figure` as a PNG data URI (None when no counter rose)."""
    fig = trend_figure(doc, series)
    return None if fig is None else png(fig)
