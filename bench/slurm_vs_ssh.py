"""Benchmark (issue 23): the controller's CPU for one rollout through Slurm against the same rollout
over its own SSH sessions, on the same N-node lab with the real Slurm (``fabtune lab up --slurm``).

Each engine rolls out the nodes' MTU (9000 on the untuned lab: one change per NIC netdev, verified
by the pairs on every rail, incast off, the pass marks out of the way so both keep it) from a
power-on lab (``lab reset`` between), as ``fabtune rollout --engine nornir|slurm``. CPU is user +
sys of the controller process and everything it waited for (salloc, srun, scontrol, sinfo for
Slurm; ``resource.getrusage(RUSAGE_CHILDREN)`` deltas, as bench/ansible_vs_fabtune.py); the lab's
node servers, slurmd and the tasks it runs are not the controller and are not counted. Prints per
size: wall and CPU seconds, CPU per node, the outcome, and the ratio slurm / ssh. Asserts nothing.

Usage (root: the Slurm lab runs the real slurmd)::

    .venv/bin/python bench/slurm_vs_ssh.py --nodes 4 16 64 --base-port 18000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.ansible_vs_fabtune import Sample, measure  # noqa: E402 - after the path


def _rollout(inv: Path, engine: str, journal: Path, env: dict[str, str]) -> tuple[Sample, str]:
    """One ``fabtune rollout --engine ENGINE`` of the MTU domain: (its cost, its outcome)."""
    out = journal / f"{engine}.json"
    journal.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "tuning", "rollout", "-i", str(inv), "--engine", engine, "--domain", "mtu",
           "--no-incast", "--min-bw", "1", "--max-lat", "1000", "--journal-dir", str(journal), "--report-json", str(out)]
    got = measure(cmd, env)
    doc = json.loads(out.read_text()) if out.exists() else {}
    outcome = doc.get("outcome", f"exit {got.rc}")
    if outcome != "kept":  # why, in the report's own words
        sys.stderr.write(f"{engine}: {outcome}: {json.dumps(doc.get('errors') or {})[:1500]} "
                         f"{json.dumps([b.get('halt') or b.get('why') for b in doc.get('batches') or []])[:600]}\n")
    return got, outcome


def bench_size(n: int, base_port: int) -> dict[str, tuple[Sample, str]]:
    """Start an ``n``-node lab with Slurm, roll out once per engine from power-on. Returns
    ``{engine: (sample, outcome)}``."""
    from tuning.lab import controller, power_on, slurm
    from tuning.lab.fabric import fabric_for_inventory
    from tuning.lab.scale import write_inventory
    from tuning.slurm_engine import NODE_COMMAND_ENV

    tmp = Path(tempfile.mkdtemp(prefix=f"fabtune-bench-slurm-{n}-"))
    inv = write_inventory(tmp / "lab", n, base_port)
    state = inv / ".state"
    fabric = fabric_for_inventory(inv)
    fabric.noise = {}  # the model's numbers: both engines verify the same fabric
    slurm.check(fabric)
    controller.up(state, fabric)
    # a task's PATH is its lab node shell's: the node command is this interpreter (as tests/slurm does)
    env = {**os.environ, "PYTHONPATH": str(REPO), NODE_COMMAND_ENV: f"{sys.executable} -m tuning"}
    try:
        slurm.up(state, fabric, inv)
        env.update(slurm.client_env(state))
        got = {}
        for engine in ("nornir", "slurm"):
            power_on.reset(state)
            got[engine] = _rollout(inv, engine, tmp / "journal", env)
        _row(n, got)  # before the clean-up: removing a 64-node lab's trees takes minutes on a loaded machine
        return got
    finally:
        slurm.down(state)
        controller.down(state)
        shutil.rmtree(tmp, ignore_errors=True)


def _row(n: int, got: dict[str, tuple[Sample, str]]) -> None:
    """Print one size's line: each engine's wall, CPU, CPU per node, outcome, and the CPU ratio."""
    (ssh, o1), (srun, o2) = got["nornir"], got["slurm"]
    print(f"{n:5d} | {ssh.wall_s:7.1f}s {ssh.cpu_s:6.2f}s {ssh.cpu_s / n:7.3f}s {o1:>8s} | "
          f"{srun.wall_s:9.1f}s {srun.cpu_s:6.2f}s {srun.cpu_s / n:7.3f}s {o2:>8s} | "
          f"{srun.cpu_s / max(ssh.cpu_s, 1e-9):5.2f}x", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[16, 64], help="lab sizes (nodes), default 16 64")
    ap.add_argument("--base-port", type=int, default=25000, help="the labs' base port (default 25000)")
    args = ap.parse_args()
    print(f"{'nodes':>5s} | {'ssh wall':>8s} {'cpu':>7s} {'cpu/node':>8s} {'outcome':>8s} | "
          f"{'slurm wall':>10s} {'cpu':>7s} {'cpu/node':>8s} {'outcome':>8s} | {'cpu x':>6s}", flush=True)
    for n in args.nodes:
        bench_size(n, args.base_port)
    print("rollout of the nodes' MTU from power-on; cpu = user+sys of the controller and what it waited for; "
          "x = slurm / ssh")
    return 0


if __name__ == "__main__":
    sys.exit(main())
