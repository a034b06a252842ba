"""Fleet scale (issue 24): inventory load, ``fabtune render`` and ``fabtune plan --offline`` of
generated fleets, CPU seconds and peak memory per size, side by side, and how each grows.

Each fleet is ``SUS`` scalable units of ``inventory/example-su`` (32 nodes, 8 leaves, 4 spines
each; :func:`bench.gen_example_su.write_fleet`). Each command runs in its own process; CPU is its
user + system time and memory its peak resident set (``os.wait4``). Prints one row per command and
size and, for each command, the CPU ratio largest / smallest beside the node ratio (linear growth:
the two about equal). The parse cache (``$XDG_CACHE_HOME``, set to the bench's own folder) starts
empty: the first load of each fleet parses every file, the later commands find the parses there. Targets (issue 24): load of 10,000 nodes under 5 s, render under 10 s,
plan --offline under 20 s, each under 1 GiB; 10x the nodes at most 11x the CPU.

Usage (from the repository root)::

    python bench/fleet_scale.py [NODES ...]      # default: 1000 10000
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.gen_example_su import N_NODES, write_fleet  # noqa: E402

PY = sys.executable
LOAD = [PY, "-c", "import sys; from tuning import inventory; inventory.load(sys.argv[1])"]
#: in this order per fleet: the first load parses every file (an empty parse cache), the rest find
#: the parses in the cache (tuning.model.parsecache), as a second run on the same inventory does
COMMANDS = {
    "inventory load (parse)": lambda inv, out: LOAD + [str(inv)],
    "inventory load": lambda inv, out: LOAD + [str(inv)],
    "render": lambda inv, out: [PY, "-m", "tuning", "render", "-i", str(inv), "-o", str(out / "render")],
    "plan --offline": lambda inv, out: [PY, "-m", "tuning", "plan", "--offline", "-i", str(inv)],
    "plan --offline --json": lambda inv, out: [PY, "-m", "tuning", "plan", "--offline", "--json", "-i", str(inv)],
}


def measure(argv: list[str]) -> tuple[float, float, int]:
    """Run ``argv`` (stdout discarded); returns (CPU s, peak RSS MiB, exit status)."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode not in (0, 2):
        print(f"  {' '.join(argv[:5])}: exit {proc.returncode}: {err.strip()[-300:]}", file=sys.stderr)
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode


def main(sizes: list[int]) -> int:
    rows: dict[str, dict[int, tuple[float, float]]] = {c: {} for c in COMMANDS}
    real: dict[int, int] = {}
    with tempfile.TemporaryDirectory(prefix="fleet-") as tmp:
        os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")  # the parse cache starts empty, in here
        for n in sizes:
            sus = -(-n // N_NODES)
            inv = Path(tmp) / f"fleet{n}"
            devices = write_fleet(inv, sus)
            real[n] = sus * N_NODES
            print(f"fleet of {sus * N_NODES} nodes ({devices} devices, {sus} SUs)", flush=True)
            for name, argv in COMMANDS.items():
                cpu, rss, rc = measure(argv(inv, Path(tmp) / f"out{n}"))
                rows[name][n] = (cpu, rss)
                print(f"  {name:<24} {cpu:8.2f} s CPU  {rss:8.0f} MiB peak  exit {rc}", flush=True)
    if len(sizes) > 1:
        lo, hi = min(sizes), max(sizes)
        print(f"\ngrowth {real[lo]} -> {real[hi]} nodes ({real[hi] / real[lo]:.1f}x the nodes):")
        for name, by in rows.items():
            print(f"  {name:<24} {by[hi][0] / max(by[lo][0], 1e-9):6.1f}x the CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main([int(a) for a in sys.argv[1:]] or [1000, 10000]))
