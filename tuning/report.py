"""Human output: rich tables of plans, verification results and run outcomes.

Machines get ``--json`` (the same data, see :meth:`tuning.rollout.run_report.RunReport.as_dict`).
"""

from __future__ import annotations

import difflib
import sys
from collections import Counter

from rich.console import Console
from rich.table import Table

from tuning.cpulist import format_cpulist, parse_cpulist
from tuning.model.outcomes import BatchOutcome
from tuning.verify.runner import summarise

MAX_CELL = 60


def _short(v: str | None, absent: str = "(absent)") -> str:
    if v is None:
        return absent
    v = str(v)
    if "\n" in v:
        return f"<file, {len(v.splitlines())} lines>"
    return v if len(v) <= MAX_CELL else v[: MAX_CELL - 3] + "..."


def changes_table(changes: dict[str, list[dict]], title: str, offline: bool = False,
                  headings: tuple[str, str] = ("before", "after")) -> Table:
    """One row per setting (device, domain, key, before -> after); one row per NIC for its IRQs.

    Args:
        changes: device -> change dicts (``domain``, ``key``, ``before``, ``after``), as in
            :attr:`tuning.rollout.run_report.RunReport.changes`.
        offline: the devices were not read (a render without connecting): a missing ``before``
            prints ``(not read)`` rather than ``(absent)``.
        headings: the two value columns (a rollback shows ``now`` -> ``restored to``).

    ``--json`` keeps every IRQ as its own change (keys ``irq/<netdev>/<N>``).
    """
    absent = "(not read)" if offline else "(absent)"
    t = Table(title=title, title_justify="left")
    noted = any(_effect(c) for items in changes.values() for c in items)
    for col in ("device", "domain", "setting", *headings, *(("takes effect",) if noted else ())):
        t.add_column(col, overflow="fold")
    for dev, items in changes.items():
        for c in items:
            if c["domain"] != "irq":
                t.add_row(dev, c["domain"], c["key"], _short(c["before"], absent), _short(c["after"]),
                          *((_effect(c),) if noted else ()))
        for netdev, irqs in _irqs_by_nic(items).items():
            t.add_row(dev, "irq", f"irq {netdev} ({len(irqs)} completion IRQs)",
                      _short(_cpus(c["before"] for c in irqs), absent), _short(_cpus(c["after"] for c in irqs)),
                      *(("",) if noted else ()))
    return t


#: a ``--limit`` selection of at most this many changed devices prints a row per setting
#: (``--detail`` asks for every row of any plan): 10,000 nodes are 500,000 rows
DETAIL_DEVICES = 32
#: a plan of at most this many changes prints a row per setting without being asked: it fits one screen
DETAIL_ROWS = 40


def per_setting(changes: dict[str, list[dict]], detail: bool = False, limited: bool = False) -> bool:
    """Whether people get a row per setting rather than :func:`changes_summary`: on ``--detail``, for a
    plan of at most :data:`DETAIL_ROWS` changes, or for a ``--limit`` selection (and a ``rollback`` or
    ``report`` of one run: what it did, setting by setting) of at most :data:`DETAIL_DEVICES` changed
    devices (issue 19: the 4-node lab's 441-row plan is a summary that fits one screen; every change
    stays in ``--detail`` and ``--json``)."""
    if detail or sum(len(items) for items in changes.values()) <= DETAIL_ROWS:
        return True
    return limited and sum(1 for items in changes.values() if items) <= DETAIL_DEVICES


def changes_summary(changes: dict[str, list[dict]], title: str) -> Table:
    """One row per domain: how many devices and settings change and the most common wanted values
    with their counts (``9000 x80128``), for a plan too large to read row by row.

    Args:
        changes: device -> change dicts, as :func:`changes_table` takes.  title: the table's title.
    """
    by: dict[str, dict] = {}
    for dev, items in changes.items():
        for c in items:
            d = by.setdefault(c["domain"], {"devices": set(), "n": 0, "wanted": Counter()})
            d["devices"].add(dev)
            d["n"] += 1
            d["wanted"][_short(c["after"])] += 1
    n_dev = sum(1 for items in changes.values() if items)
    t = Table(title=f"{title}: summary of {sum(d['n'] for d in by.values())} change(s) on {n_dev} device(s), "
                    "one row per domain", title_justify="left",
              caption="every setting: --detail, or --limit to fewer devices; --json has each change",
              caption_justify="left")
    for col in ("domain", "devices", "settings", "most wanted values (x count)"):
        t.add_column(col, overflow="fold")
    for domain, d in by.items():
        top = d["wanted"].most_common(3)
        more = len(d["wanted"]) - len(top)
        t.add_row(domain, str(len(d["devices"])), str(d["n"]),
                  ", ".join(f"{v} x{k}" for v, k in top) + (f", +{more} more" if more > 0 else ""))
    return t


#: how a change's effect reads after its value in the changes table
EFFECT_WORDS = {"reboot_required": "reboot required", "pending_reset": "pending reset (reboot or mlxfwreset)",
                "not_persistent": "lost at reboot"}


def _effect(c: dict) -> str:
    """``reboot required`` etc. for a change that is not simply live (Change.effect), and whether
    an automatic rollback leaves it in place; ``""`` for a plain live change."""
    words = [EFFECT_WORDS[e]] if (e := c.get("effect", "live")) in EFFECT_WORDS else []
    if c.get("reversible", True) is False:
        words.append("not undone by automatic rollback")
    return "; ".join(words)


def findings_table(findings: list[dict], title: str = "findings (reported, not changed)", compact: bool = False) -> Table:
    """One row per kind of finding (see tuning.node.base.Finding): findings of one domain and code
    whose messages differ only in their subject, the text before the first ``": "``
    (``enp12s0np0: 802.3x pause RX on ...``, ``0000:0b:00.0 (between GPU ...): ACS ReqRedir ...``),
    are one row naming the devices and subjects (the subject's first word) it covers: the 129
    findings of an untuned 4-node lab plan are 4 rows, and the table grows with the kinds of
    problem, not with the fleet. ``--json`` keeps every finding. ``compact`` (a narrow terminal) leaves
    out the domain and evidence columns, so a row folds into fewer lines."""
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for f in findings:
        subject, sep, rest = f["message"].partition(": ")
        groups.setdefault((f["domain"], f["code"], rest if sep else f["message"]), []).append(f)
    t = Table(title=title, title_justify="left", caption="evidence: --json, or a wider terminal" if compact else None,
              caption_justify="left")
    cols = ("device", "code", "finding") if compact else ("device", "domain", "code", "finding", "evidence")
    for col in cols:
        t.add_column(col, overflow="fold")
    for (domain, code, text), items in groups.items():
        first = items[0]
        if len(items) == 1:
            row = (first["device"], domain, code, first["message"], _short(first.get("evidence") or ""))
        else:
            subjects = sorted({f["message"].partition(": ")[0].split()[0] for f in items}) if text != first["message"] else []
            evidence = {f.get("evidence") or "" for f in items}
            row = (_names(sorted({f["device"] for f in items})), domain, code,
                   text + (f" ({len(subjects)}: {_names(subjects)})" if subjects else f" (x{len(items)})"),
                   _short(first.get("evidence") or "") + (f" (+{len(evidence) - 1} other)" if len(evidence) > 1 else ""))
        t.add_row(*((row[0], row[2], row[3]) if compact else row))
    return t


def _names(names: list[str], shown: int = 4) -> str:
    """``a, b, c, d`` or ``a, b, c, d, +6 more``."""
    return ", ".join(names[:shown]) + (f", +{len(names) - shown} more" if len(names) > shown else "")


def _irqs_by_nic(items: list[dict]) -> dict[str, list[dict]]:
    """IRQ changes grouped by the netdev in their key (``irq/<netdev>/<N>``), in first-seen order."""
    out: dict[str, list[dict]] = {}
    for c in items:
        if c["domain"] == "irq":
            out.setdefault(c["key"].split("/")[1], []).append(c)
    return out


def _cpus(values) -> str | None:
    """The CPU lists of one NIC's completion IRQs in one cell: the list when every IRQ has the same
    (``0-15``), else their union and how they spread (``0-15, 1 CPU each`` / ``0-27,56-83, mixed``),
    so that IRQs moved from all of 0-15 to one CPU each never read ``0-15 -> 0-15``; None when none is
    known."""
    lists = [frozenset(parse_cpulist(v)) for v in values if v]
    if not lists:
        return None
    union = format_cpulist(sorted(frozenset().union(*lists)))
    if len(set(lists)) == 1:
        return union
    return f"{union}, 1 CPU each" if all(len(c) == 1 for c in lists) else f"{union}, mixed"


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


def verify_table(results: list[dict], title: str, before: list[dict] | None = None, judged: bool = True) -> Table:
    """Per pair: path, bandwidth (Gb/s) and typical latency (us), before -> after when given;
    the caption is :func:`tuning.verify.runner.summarise` (how many failed, what they share).
    ``judged`` False (a rollout's baseline, measured before a change and judged by nothing: an
    untuned fabric may miss the marks, that is why it is tuned): a ``note`` column (why a pair gave
    no value) instead of the verdict, and the caption says how many pairs were measured."""
    prev = {r["pair"]: r for r in before or []}
    caption = (summarise(results) if judged else f"{len(results)} pair(s) measured: the baseline the change is "
               "compared with (not judged)") if results else None
    if caption:
        caption += f"; {flow_classes(results)}"
    t = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    for col in ("pair", "path", "bw Gb/s", "lat us", "p99 us", "verdict" if judged else "note"):
        t.add_column(col)
    for r in results:
        b = prev.get(r["pair"])
        bw = _num(r.get("bw_gbps"), 1)
        lat = _num(r.get("lat_us"), 2)
        if b:
            bw = f"{_num(b.get('bw_gbps'), 1)} -> {bw}"
            lat = f"{_num(b.get('lat_us'), 2)} -> {lat}"
        verdict = r["verdict"] if not r.get("reasons") else f"{r['verdict']}: {'; '.join(r['reasons'])}"
        note = verdict if judged else (r.get("error") or "")[:120]
        t.add_row(r["pair"], r["path"], bw, lat, _num(r.get("lat_p99_us"), 2), note)
    return t


def batches_text(batches: list[dict]) -> str:
    """The batches of a rollout (:class:`tuning.rollout.batches.Batch` dicts plus outcome), one
    block per batch, for people: how it was formed, its push phases and why, and (after a run)
    its outcome with its failed and unreachable devices. Lines are not wrapped (print with
    ``soft_wrap=True``)."""
    lines = [f"batches (push order): {len(batches)}"]
    for b in batches:
        lines.append(f"  {b['index']}. {b.get('why') or ''}")
        phases = " -> ".join("[" + ", ".join(ph) + "]" for ph in b.get("phases") or []) or "nothing to push"
        lines.append(f"     push: {phases}")
        lines.append(f"     order: {b.get('order') or '-'}")
        if b.get("outcome") not in (None, BatchOutcome.NOT_RUN) or b.get("halt"):
            extra = [f"failed {', '.join(b['failed'])}" if b.get("failed") else "",
                     f"unreachable {', '.join(b['unreachable'])}" if b.get("unreachable") else "",
                     f"halted: {b['halt']}" if b.get("halt") else ""]
            lines.append("     outcome: " + "; ".join([b.get("outcome") or "-", *[e for e in extra if e]]))
    return "\n".join(lines)


def flow_classes(results: list[dict]) -> str:
    """The traffic classes the pairs' flows used, from each result's ``params`` (the ``--tclass``
    fabtune gave perftest): ``flows in ToS 106 (DSCP 26)``; ``traffic class 0`` for flows given
    none (the nodes leave their QoS alone)."""
    tos = sorted({(r.get("params") or {}).get("bw", {}).get("tos", -1) for r in results})
    words = [f"ToS {t} (DSCP {t >> 2})" if t >= 0 else "traffic class 0 (no nic_qos)" for t in tos]
    return "flows in " + ", ".join(words)


def _num(v: float | None, digits: int) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def console(stderr: bool = False) -> Console:
    """A console; progress goes to stderr so stdout stays clean for ``--json``. A terminal gets its own
    width, so a table folds to fit the screen; a pipe or a file 160 columns (logs read the same on every
    machine, whatever ``COLUMNS`` a parent process left behind)."""
    stream = sys.stderr if stderr else sys.stdout
    tty = hasattr(stream, "isatty") and stream.isatty()
    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=None if tty else 160)


def parsed_table(doc: dict) -> Table:
    """A parsed tool output for people (``fabtune parse --format table``).

    Top-level fields one per row; a list of flat dicts (perftest ``bw_rows`` / ``lat_rows``,
    a parser's per-item rows) as its own small table, one row per item, None fields skipped and
    Quantity dicts shown as value + unit; then the tool failure and findings, if any.

    Args:
        doc: ``Parsed.model_dump(mode="json")`` of any parser in :mod:`tuning.parsers`.
    """
    t = Table(title=f"{doc.get('tool')} (parsed)", title_justify="left")
    t.add_column("field")
    t.add_column("value", overflow="fold")
    for k, v in doc.items():
        if k in ("findings", "failure", "tool") or v is None or v == [] or v == {}:
            continue
        if _is_row_list(v):
            t.add_row(k, rows_table(v))
            continue
        text = ", ".join(f"{a}: {b}" for a, b in v.items()) if _is_flat_dict(v) else str(v)
        t.add_row(k, text if len(text) < 400 else text[:397] + "...")
    if doc.get("failure"):
        f = doc["failure"]
        t.add_row("[red]TOOL ERROR[/red]", f"{f['kind']}: {f['message']} (likely: {f['likely_cause']})")
    for f in doc.get("findings", []):
        t.add_row(f"finding ({f['severity']})", f"{f['code']}: {f['message']}")
    return t


#: column headings of well-known row fields (perftest BwRow / LatRow); others print their key.
ROW_HEADINGS = {"size_bytes": "size B", "iterations": "iterations", "bw_avg": "bw avg", "bw_peak": "peak",
                "msg_rate_mpps": "msg rate Mpps", "t_min": "t_min us", "t_max": "t_max us",
                "t_typical": "t_typical us", "t_avg": "t_avg us", "stdev": "stdev us", "p99": "p99 us",
                "p999": "p99.9 us"}


def _is_quantity(v: object) -> bool:
    return isinstance(v, dict) and "value" in v and "raw" in v


def _is_flat_dict(v: object) -> bool:
    return isinstance(v, dict) and not _is_quantity(v) and all(not isinstance(x, (list, dict)) for x in v.values())


def _is_row_list(v: object) -> bool:
    """A non-empty list of dicts whose values are scalars, Quantity dicts or flat ``extra`` dicts."""
    def flat(x: object) -> bool:
        return not isinstance(x, (list, dict)) or _is_quantity(x) or _is_flat_dict(x)
    return (isinstance(v, list) and bool(v) and all(isinstance(r, dict) for r in v)
            and all(flat(x) for r in v for x in r.values()))


def _flatten(row: dict) -> dict[str, object]:
    """A row with nested ``extra``-like dicts spread into their own columns (Quantity kept whole)."""
    out: dict[str, object] = {}
    for k, v in row.items():
        if isinstance(v, dict) and not _is_quantity(v):
            out.update(v)
        else:
            out[k] = v
    return out


def rows_table(rows: list[dict]) -> Table:
    """One row per item; a column per field that is set in at least one item. A Quantity
    (``{"value", "raw", "unit", "unit_norm"}``) prints its value, its unit in the heading."""
    flat = [_flatten(r) for r in rows]
    cols = [k for k in dict.fromkeys(k for r in flat for k in r) if any(r.get(k) is not None for r in flat)]
    t = Table(box=None, pad_edge=False, show_edge=False)
    for k in cols:
        unit = next((r[k].get("unit_norm") or r[k].get("unit") for r in flat if _is_quantity(r.get(k))), None)
        t.add_column(ROW_HEADINGS.get(k, k) + (f" {unit}" if unit else ""), justify="right")
    for r in flat:
        t.add_row(*(_cell(r.get(k)) for k in cols))
    return t


def _cell(v: object) -> str:
    if v is None:
        return "-"
    if _is_quantity(v):
        return "-" if v["value"] is None else f"{v['value']:g}"
    return f"{v:g}" if isinstance(v, float) else str(v)
