"""Benchmark: false rollbacks and missed regressions of verification on a noisy fabric (issue 20).

On a 4-node lab (18 pairs) with run-to-run noise (``fabtune lab noise``, default 3 %) and the
policy's 5 % mark, each iteration measures a baseline (as a rollout does before its first batch),
then verifies the unchanged fabric against it (a good change: any failing pair is a false
rollback) and then the fabric with one NIC degraded by 8 % (``lab inject node02:mlx5_0 degrade 8``:
a missed regression when every pair passes). Side by side: the sample-based judging
(:mod:`tuning.verify.samples`, the policy's ``noise_pct`` = the lab's noise) and one sample
compared exactly (``noise_pct`` 0, what verification did before), on the same lab, seed and pairs.

Prints per mode: iterations, false rollbacks (iterations with any pair failing the good change),
caught regressions, mean samples per pair and seconds per iteration.

Example: .venv/bin/python bench/noise_judging.py --iterations 20 --noise 3
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: the bench lab's base port (its own range, below the ephemeral ports)
BASE_PORT = 27400
DEGRADED = "node02:mlx5_0"


def _iteration(pairs, hosts, th, state: Path) -> tuple[bool, bool, float, float]:
    """(false rollback, regression caught, mean samples per pair, seconds) of one iteration."""
    from tuning.lab.inject import inject
    from tuning.verify.runner import as_baseline, verify

    t0 = time.monotonic()
    _, before = verify(pairs, hosts, th, None, absolute=False)
    base = as_baseline(before)
    good_ok, good = verify(pairs, hosts, th, base, absolute=False)
    inject(state, DEGRADED, "degrade", "8")
    try:
        bad_ok, bad = verify(pairs, hosts, th, base, absolute=False)
    finally:
        inject(state, DEGRADED, "clear")
    samples = statistics.fmean(len(r.bw_samples) for r in [*before, *good, *bad])
    return (not good_ok), (not bad_ok), samples, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--noise", type=float, default=3.0, help="the lab's noise, percent (default 3)")
    ap.add_argument("--seed", type=int, default=20)
    args = ap.parse_args()

    from tuning import inventory
    from tuning.lab import controller
    from tuning.lab.fabric import Fabric, fabric_for_inventory
    from tuning.lab.noise import check
    from tuning.lab.scale import write_inventory
    from tuning.transport.ssh import SshHost
    from tuning.verify.pairs import select_pairs
    from tuning.verify.runner import Thresholds

    tmp = Path(tempfile.mkdtemp(prefix="fabtune-bench-noise-"))
    inv = write_inventory(tmp / "lab", 4, BASE_PORT)
    state = inv / ".state"
    controller.up(state, fabric_for_inventory(inv))
    fabric = Fabric.load(state / "fabric.json")
    fabric.noise = check(args.noise, args.noise, args.seed)
    fabric.save(state / "fabric.json")
    nodes = inventory.load(inv).nodes
    hosts = {d.name: SshHost(d.name, d.connection) for d in nodes}
    pairs = select_pairs(nodes)
    modes = {"samples (noise_pct = lab)": Thresholds(noise_pct=args.noise, max_samples=12),
             "one sample, exact": Thresholds(noise_pct=0.0)}
    print(f"{len(pairs)} pairs, lab noise {args.noise:g} %, mark 5 %, degrade 8 % on {DEGRADED}, "
          f"{args.iterations} iterations per mode")
    print(f"{'mode':28} {'false rollbacks':>16} {'caught':>8} {'samples/pair':>13} {'s/iteration':>12}")
    try:
        for name, th in modes.items():
            rows = [_iteration(pairs, hosts, th, state) for _ in range(args.iterations)]
            print(f"{name:28} {sum(r[0] for r in rows):>10}/{len(rows):<5} {sum(r[1] for r in rows):>3}/{len(rows):<4}"
                  f" {statistics.fmean(r[2] for r in rows):>13.1f} {statistics.fmean(r[3] for r in rows):>12.1f}",
                  flush=True)
    finally:
        for h in hosts.values():
            h.close()
        controller.down(state)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
