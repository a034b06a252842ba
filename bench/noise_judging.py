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

With ``--rollouts``: whole rollouts instead (``engine.run``, mode rollout, the nodes' MTU alone,
incast and NCCL off, every pair judged on regression with ``noise_pct`` = the lab's noise): after
one rollout to MTU 9000, each iteration rolls out a good change (9000 <-> 8000: a real push whose
RoCE MTU stays 4096, so the fabric's bandwidth does not move; a rollback is a false one) and then
the same kind of change with ``node02:mlx5_0`` degraded by 8 % as the run enters its verification
(caught when the rollout rolls back). Prints both counts and the seconds per rollout.

Example: .venv/bin/python bench/noise_judging.py --iterations 20 --noise 3
         .venv/bin/python bench/noise_judging.py --rollouts --iterations 20 --noise 3 --base-port 18000
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


def _rollout(inv: Path, journal: Path, mtu: int, th, degrade: bool) -> tuple[str, float]:
    """One rollout of the nodes' MTU to ``mtu`` (the inventory's gpu_nodes.yml edited), with
    ``DEGRADED`` degraded 8 % from the moment the run enters ``verify`` when ``degrade``:
    (outcome, seconds)."""
    import json
    import os
    import re
    import threading

    from tuning import inventory
    from tuning.lab.inject import inject
    from tuning.model.policy import IncastPolicy, NcclPolicy, RolloutPolicy
    from tuning.rollout import engine

    gv = inv / "group_vars" / "gpu_nodes.yml"
    gv.write_text(re.sub(r"(?m)^mtu: \d+", f"mtu: {mtu}", gv.read_text()))
    state, done = inv / ".state", threading.Event()

    def watch() -> None:  # as tests/engine/test_verify_rails.py: inject when the journal says verify
        while not done.is_set():
            for path in journal.glob("*.json"):
                try:
                    if json.loads(path.read_text()).get("stage") == "verify":
                        inject(state, DEGRADED, "degrade", "8")
                        return
                except ValueError:
                    pass
            time.sleep(0.01)

    t0, watcher = time.monotonic(), threading.Thread(target=watch, daemon=True)
    if degrade:
        os.environ["FABTUNE_TEST_PAUSE_AT"] = "verify:2"  # the run waits 2 s on entering verify
        watcher.start()
    try:
        policy = RolloutPolicy(incast=IncastPolicy(enabled=False), nccl=NcclPolicy(enabled=False))
        rep = engine.run(inventory.load(inv), engine.Options(mode="rollout", journal_dir=journal, domains={"mtu"},
                                                             policy=policy, thresholds=th))
    finally:
        done.set()
        os.environ.pop("FABTUNE_TEST_PAUSE_AT", None)
        inject(state, DEGRADED, "clear")
    return str(rep.outcome), time.monotonic() - t0


def _rollouts(inv: Path, iterations: int, noise: float) -> None:
    """The ``--rollouts`` mode (module docstring): prints one line per iteration and the totals."""
    from tuning.verify.runner import Thresholds

    th = Thresholds(min_bw_gbps=1.0, max_lat_us=1000.0, noise_pct=noise, max_samples=12)
    journal = inv.parent / "journal"
    first, _ = _rollout(inv, journal, 9000, th, False)
    print(f"setup rollout to MTU 9000: {first}", flush=True)
    false_rb = caught = 0
    secs = []
    for i in range(iterations):
        good, s1 = _rollout(inv, journal, 8000 if i % 2 == 0 else 9000, th, False)
        bad, s2 = _rollout(inv, journal, 9000 if i % 2 == 0 else 8000, th, True)
        false_rb += good != "kept"
        caught += bad == "rolled-back"
        secs += [s1, s2]
        print(f"iteration {i + 1}: good change {good} ({s1:.0f} s), 8 % degraded {bad} ({s2:.0f} s)", flush=True)
    print(f"rollouts: false rollbacks {false_rb}/{iterations}, degradation caught {caught}/{iterations}, "
          f"{statistics.fmean(secs):.1f} s per rollout")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--noise", type=float, default=3.0, help="the lab's noise, percent (default 3)")
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--rollouts", action="store_true", help="whole rollouts instead of verifications")
    ap.add_argument("--base-port", type=int, default=BASE_PORT, help=f"the bench lab's base port (default {BASE_PORT})")
    args = ap.parse_args()

    from tuning import inventory
    from tuning.lab import controller
    from tuning.lab.fabric import fabric_for_inventory
    from tuning.lab.noise import check
    from tuning.lab.scale import write_inventory
    from tuning.transport.ssh import SshHost
    from tuning.verify.pairs import select_pairs
    from tuning.verify.runner import Thresholds

    tmp = Path(tempfile.mkdtemp(prefix="fabtune-bench-noise-"))
    inv = write_inventory(tmp / "lab", 4, args.base_port)
    state = inv / ".state"
    fabric = fabric_for_inventory(inv)
    fabric.noise = check(args.noise, args.noise, args.seed)  # kept by `lab reset` too
    controller.up(state, fabric)
    if args.rollouts:
        try:
            _rollouts(inv, args.iterations, args.noise)
        finally:
            controller.down(state)
            shutil.rmtree(tmp, ignore_errors=True)
        return 0
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
