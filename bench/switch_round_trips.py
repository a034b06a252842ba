"""Benchmark (issue 24): SSH round trips of a switch change, per network OS, counted on the switch.

A round trip is what the switch receives between two waits: the client sent, the switch answered
everything and waited on an empty channel before the next bytes came
(:class:`tuning.lab.switches.CommandLog`, read on the lab switch's side of the channel; nothing of
fabtune's own is replaced or wrapped). For each OS one lab leaf (``leaf01`` of a 9-node lab
inventory, :func:`tuning.lab.scale.write_inventory`, only that switch started, in this process)
is driven by the engine's own switch code (:mod:`tuning.targets.switch`) and the bench prints:

- load: ``load_candidate`` of a 51-line change (the first 51 lines of the leaf's rendered
  candidate: NVUE ``nv set`` lines, EOS configuration lines, SONiC patch operations) after the
  state read every plan and push begins with (``get_state``), then the same
  lines sent one per command for the ratio (NVUE ``nv set`` per ``send_command``; EOS the lines
  typed one by one into the session; SONiC has no per-line form: its candidate is one file);
- push: the whole push of the rendered candidate as a rollout does it (:func:`tuning.targets.switch.apply`:
  stage, diff against the plan, commit with a 300 s confirm window, read back; then
  :func:`tuning.targets.switch.confirm`), after a plan (:func:`tuning.targets.switch.collect`).

Seconds are wall seconds on loopback with the switch in the same process (a real switch adds its
network and CLI latency to every round trip: that is what the counts multiply). Asserts nothing.

Usage (from the repository root; the labs take base-port + 101, + 211, + 321)::

    .venv/bin/python bench/switch_round_trips.py [--lines 51] [--base-port 19500]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: the lab switch OSes, each on leaf01 of its own lab
OSES = ("nvue", "eos", "sonic")
#: nodes of each lab: leaf01's NVUE candidate then has 53 lines (51 are loaded)
N_NODES = 9
#: the ports one lab takes from its base (leaf01 listens on base + 101)
SLOT = 110


@dataclass
class Count:
    """What one operation cost: round trips the switch received, the lines they carried, seconds."""

    trips: int
    lines: int
    seconds: float


def first_lines(platform: str, text: str, n: int) -> str:
    """The first ``n`` lines of a rendered candidate in its OS's unit: a configuration line (NVUE,
    EOS; comments skipped) or a patch operation (SONiC, written back as the template writes it).

    Raises:
        ValueError: the candidate has fewer than ``n``.
    """
    if platform == "sonic":
        from tuning.switch.sonic_keys import parse_ops

        ops = parse_ops(text)
        if len(ops) < n:
            raise ValueError(f"the candidate has {len(ops)} patch operations, not {n}")
        return json.dumps(ops[:n], indent=4) + "\n"
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(("!", "#"))]
    if len(lines) < n:
        raise ValueError(f"the candidate has {len(lines)} lines, not {n}")
    return "\n".join(lines[:n]) + "\n"


@contextmanager
def leaf_lab(dest: Path, os_: str, base_port: int) -> Iterator[tuple[object, object]]:
    """A 9-node lab inventory in ``dest`` whose leaf01 runs ``os_``, with only leaf01 started (in this
    process, keeping its :class:`~tuning.lab.switches.CommandLog`); yields ``(leaf01's Device, the
    SwitchLab)`` and stops the switch after."""
    from tuning import inventory
    from tuning.lab.fabric import fabric_for_inventory
    from tuning.lab.scale import write_inventory
    from tuning.lab.switches import start_switches

    inv = write_inventory(dest, N_NODES, base_port, switch_os={} if os_ == "nvue" else {"leaf01": os_})
    fabric = fabric_for_inventory(inv)
    lab = start_switches(inv / ".state", replace(fabric, switches=[fabric.switch("leaf01")]), command_log=True)
    try:
        yield inventory.load(inv).devices["leaf01"], lab
    finally:
        lab.stop()


def counted(lab, name: str, action: Callable[[], object]) -> tuple[Count, object]:
    """Run ``action``; returns (the round trips switch ``name`` received meanwhile, its result)."""
    before = len(lab.round_trips(name))
    t0 = time.perf_counter()
    result = action()
    seconds = time.perf_counter() - t0
    trips = lab.round_trips(name)[before:]
    return Count(len(trips), sum(map(len, trips)), seconds), result


def line_by_line(drv, platform: str, candidate: str) -> Callable[[], object] | None:
    """The candidate's lines sent one command each (None for SONiC, whose candidate is one file)."""
    lines = [ln.strip() for ln in candidate.splitlines() if ln.strip()]
    if platform == "nvue":
        return lambda: [drv._send(ln, phase="apply") for ln in lines]
    if platform == "eos":
        session = "fabtune-bench"
        return lambda: [drv._send(ln, phase="apply") for ln in [f"configure session {session}", *lines, "end"]]
    return None


def push(drv, dev, state) -> str | None:
    """A rollout's push of ``dev``'s rendered candidate on the open driver ``drv`` after its plan
    read ``state`` (:func:`~tuning.targets.switch.collect`): :func:`~tuning.targets.switch.apply`
    (300 s confirm window) then :func:`~tuning.targets.switch.confirm`. Returns the committed
    revision. Raises what they raise."""
    from tuning.targets import switch as switch_ops

    rev = switch_ops.apply(drv, dev, switch_ops.plan(dev, state), 300, state.revision)
    switch_ops.confirm(drv, rev)
    return rev


def bench_os(os_: str, dest: Path, base_port: int, n_lines: int) -> dict[str, Count | int | None]:
    """One OS's figures: ``open``, ``load``, ``load_by_line``, ``plan``, ``push`` (Counts), and
    ``lines`` (of the loaded change) and ``pushed`` (lines of the rendered candidate pushed)."""
    from tuning.render import render_switch
    from tuning.targets import switch as switch_ops

    with leaf_lab(dest, os_, base_port) as (dev, lab):
        candidate = render_switch(dev)
        change = first_lines(os_, candidate, n_lines)
        out: dict[str, Count | int | None] = {"lines": n_lines, "pushed": len(_units(os_, candidate))}
        out["open"], drv = counted(lab, "leaf01", lambda: switch_ops.open_driver(dev))
        try:
            drv.get_state()  # every plan and push reads the switch first (EOS names its session after it)
            out["load"], _ = counted(lab, "leaf01", lambda: drv.load_candidate(change))
            drv.discard()
            slow = line_by_line(drv, os_, change)
            out["load_by_line"] = counted(lab, "leaf01", slow)[0] if slow else None
            drv.discard()
            out["plan"], state = counted(lab, "leaf01", lambda: switch_ops.collect(drv, dev))
            out["push"], _ = counted(lab, "leaf01", lambda: push(drv, dev, state))
        finally:
            drv.close()
    return out


def _units(platform: str, text: str) -> list:
    if platform == "sonic":
        from tuning.switch.sonic_keys import parse_ops

        return parse_ops(text)
    return [ln for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(("!", "#"))]


def table(results: dict[str, dict]) -> str:
    """The figures side by side, one row per measure, one column per OS."""
    def cell(c: Count | None) -> str:
        return "n/a (one file)" if c is None else f"{c.trips} ({c.lines} lines, {c.seconds:.2f} s)"

    rows = [("lines in the loaded change", lambda r: str(r["lines"])),
            ("round trips to load it", lambda r: cell(r["load"])),
            ("  the same lines one per command", lambda r: cell(r["load_by_line"])),
            ("  ratio (round trips)", lambda r: "n/a" if r["load_by_line"] is None
             else f"{r['load_by_line'].trips / r['load'].trips:.0f}x"),
            ("open the session", lambda r: cell(r["open"])),
            ("plan (collect: stage, diff, discard)", lambda r: cell(r["plan"])),
            ("lines in the pushed candidate", lambda r: str(r["pushed"])),
            ("whole push (stage .. confirm)", lambda r: cell(r["push"]))]
    width = max(len(name) for name, _ in rows)
    head = f"{'':{width}}  " + "  ".join(f"{os_:<30}" for os_ in results)
    return "\n".join([head] + [f"{name:{width}}  " + "  ".join(f"{get(r):<30}" for r in results.values())
                               for name, get in rows])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=51, help="lines of the loaded change (default 51)")
    ap.add_argument("--base-port", type=int, default=19500, help="first port; each OS's lab takes base + k*110 + 101")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="fabtune-bench-rt-"))
    try:
        results = {os_: bench_os(os_, tmp / os_, args.base_port + k * SLOT, args.lines) for k, os_ in enumerate(OSES)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the lab inventories and their keys
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
