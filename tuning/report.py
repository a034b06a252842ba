"""Human output: rich tables of plans, verification results and run outcomes.

Machines get ``--json`` (the same data, see :meth:`tuning.rollout.engine.RunReport.as_dict`).
"""

from __future__ import annotations

import difflib

from rich.console import Console
from rich.table import Table

MAX_CELL = 60


def _short(v: str | None) -> str:
    if v is None:
        return "(absent)"
    v = str(v)
    if "\n" in v:
        return f"<file, {len(v.splitlines())} lines>"
    return v if len(v) <= MAX_CELL else v[: MAX_CELL - 3] + "..."


def changes_table(changes: dict[str, list[dict]], title: str) -> Table:
    """One row per setting (device, domain, key, before -> after); a node's IRQ moves in one row.

    ``--json`` keeps every IRQ as its own change.
    """
    t = Table(title=title, title_justify="left")
    for col in ("device", "domain", "setting", "before", "after"):
        t.add_column(col, overflow="fold")
    for dev, items in changes.items():
        irqs = [c for c in items if c["domain"] == "irq"]
        for c in items:
            if c["domain"] != "irq":
                t.add_row(dev, c["domain"], c["key"], _short(c["before"]), _short(c["after"]))
        if irqs:
            t.add_row(dev, "irq", f"{len(irqs)} completion IRQs ({_irq_range(irqs)})",
                      _short(_cpus(c["before"] for c in irqs)), _short(_cpus(c["after"] for c in irqs)))
    return t


def _irq_range(irqs: list[dict]) -> str:
    nums = sorted(int(c["key"].split("/")[1]) for c in irqs)
    return f"irq/{nums[0]}..{nums[-1]}"


def _cpus(values) -> str:
    """Union of CPU lists as one CPU list (``0-15`` / ``0-27,56-83``), for a one-row IRQ summary."""
    from tuning.cpulist import format_cpulist, parse_cpulist

    cpus: set[int] = set()
    for v in values:
        if v:
            cpus.update(parse_cpulist(v))
    return format_cpulist(sorted(cpus)) if cpus else "(absent)"


def file_diffs(changes: dict[str, list[dict]]) -> str:
    """Unified diffs of every file-valued change (``file/...`` keys), for ``--diff``."""
    out = []
    for dev, items in changes.items():
        for c in items:
            if c["domain"] == "files" or "\n" in str(c.get("after") or ""):
                before = (c["before"] or "").splitlines(keepends=True)
                after = (c["after"] or "").splitlines(keepends=True)
                out += difflib.unified_diff(before, after, f"{dev}:{c['key']} (now)", f"{dev}:{c['key']} (wanted)")
    return "".join(out)


def verify_table(results: list[dict], title: str, before: list[dict] | None = None) -> Table:
    """Per pair: path, bandwidth (Gb/s) and typical latency (us), before -> after when given."""
    prev = {r["pair"]: r for r in before or []}
    t = Table(title=title, title_justify="left")
    for col in ("pair", "path", "bw Gb/s", "lat us", "p99 us", "verdict"):
        t.add_column(col)
    for r in results:
        b = prev.get(r["pair"])
        bw = _num(r.get("bw_gbps"), 1)
        lat = _num(r.get("lat_us"), 2)
        if b:
            bw = f"{_num(b.get('bw_gbps'), 1)} -> {bw}"
            lat = f"{_num(b.get('lat_us'), 2)} -> {lat}"
        verdict = r["verdict"] if not r.get("reasons") else f"{r['verdict']}: {'; '.join(r['reasons'])}"
        t.add_row(r["pair"], r["path"], bw, lat, _num(r.get("lat_p99_us"), 2), verdict)
    return t


def _num(v: float | None, digits: int) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def console(stderr: bool = False) -> Console:
    """A console; progress goes to stderr so stdout stays clean for ``--json``."""
    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=160)


def parsed_table(doc: dict) -> Table:
    """A parsed tool output for people: top-level fields, then findings and a failure if any."""
    t = Table(title=f"{doc.get('tool')} (parsed)", title_justify="left")
    t.add_column("field")
    t.add_column("value", overflow="fold")
    for k, v in doc.items():
        if k in ("findings", "failure", "tool"):
            continue
        text = str(v)
        t.add_row(k, text if len(text) < 400 else text[:397] + "...")
    if doc.get("failure"):
        f = doc["failure"]
        t.add_row("[red]TOOL ERROR[/red]", f"{f['kind']}: {f['message']} (likely: {f['likely_cause']})")
    for f in doc.get("findings", []):
        t.add_row(f"finding ({f['severity']})", f"{f['code']}: {f['message']}")
    return t
