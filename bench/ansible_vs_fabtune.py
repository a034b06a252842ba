"""Benchmark: the same check-mode work on the same N-node lab, ``fabtune plan`` (Nornir fan-out, one
round trip per device) against ``ansible-playbook playbooks/tune.yml --check`` (the Ansible front
end: every node domain and the switch play, nothing pushed).

For each lab size it prints, side by side: wall seconds, CPU seconds (user + sys of the child
process and everything it waited for: ``resource.getrusage(RUSAGE_CHILDREN)`` deltas, so the lab's
own servers, which keep running, are not counted), the per-host cost of each (CPU and wall divided
by the number of hosts the run covers: nodes + switches) and the ratio ansible / fabtune. Asserts
nothing (timing lives here, never in tests).

Usage::

    .venv/bin/python bench/ansible_vs_fabtune.py                    # 16 and 64 nodes
    .venv/bin/python bench/ansible_vs_fabtune.py --nodes 4 16 --runs 3
    .venv/bin/python bench/ansible_vs_fabtune.py --inventory /tmp/lab256    # a running lab, left running

Each size starts its own lab (:func:`tuning.lab.scale.write_inventory` + its fabric) in a temporary
folder on its own ports (16 nodes: 25000, 64 nodes: 26000, others: 25000) and stops it after.
Replaces the former ``bench/plan_vs_ansible.py`` (4 nodes, mtu + sysctl, wall only): ``--nodes 4``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: the lab's base port per size (CONTRACT: B's ports), below the kernel's ephemeral range
PORTS = {64: 26000}
DEFAULT_PORT = 25000


@dataclass
class Sample:
    """One command's cost: wall and CPU (user + sys of children) seconds, and its exit status."""

    wall_s: float
    cpu_s: float
    rc: int


def measure(cmd: list[str], env: dict[str, str]) -> Sample:
    """Run ``cmd`` (from the repository root) and return its wall time and its children's CPU time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if res.returncode not in (0, 2):  # 2: ansible-playbook's "a host failed" / fabtune's bad input
        sys.stderr.write(f"{' '.join(cmd[:3])} ... exited {res.returncode}:\n{res.stdout[-2000:]}{res.stderr[-2000:]}\n")
    return Sample(wall, cpu, res.returncode)


def median(samples: list[Sample]) -> Sample:
    """The median wall and CPU of ``samples`` (the worst exit status)."""
    return Sample(statistics.median(s.wall_s for s in samples), statistics.median(s.cpu_s for s in samples),
                  max(s.rc for s in samples))


def bench_size(n: int, runs: int, running: Path | None = None) -> tuple[int, Sample, Sample]:
    """Start an ``n``-node lab (or use the running lab of the inventory ``running``, left running),
    time both commands ``runs`` times each. Returns (hosts, fabtune, ansible)."""
    from tuning import inventory
    from tuning.lab import controller
    from tuning.lab.fabric import fabric_for_inventory
    from tuning.lab.scale import write_inventory

    tmp = Path(tempfile.mkdtemp(prefix=f"fabtune-bench-{n}-"))
    if running is None:
        inv = write_inventory(tmp / "lab", n, PORTS.get(n, DEFAULT_PORT))
        state = inv / ".state"
        controller.up(state, fabric_for_inventory(inv))
    else:
        inv, state = running, None
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(REPO), "ANSIBLE_FORCE_COLOR": "0"}
    journal = tmp / "journal"
    try:
        hosts = len(inventory.load(inv).devices)
        fab_cmd = [sys.executable, "-m", "tuning", "plan", "-i", str(inv), "--json"]
        ans_cmd = [str(bin_dir / "ansible-playbook"), "-i", str(inv), "playbooks/tune.yml", "--check",
                   "-e", f'{{"fabtune_journal_dir": "{journal}"}}']
        fab = median([measure(fab_cmd, env) for _ in range(runs)])
        ans = median([measure(ans_cmd, env) for _ in range(runs)])
    finally:
        if state is not None:
            controller.down(state)
        shutil.rmtree(tmp, ignore_errors=True)
    return hosts, fab, ans


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[16, 64], help="lab sizes (nodes), default 16 64")
    ap.add_argument("--runs", type=int, default=1, help="runs per command (median), default 1")
    ap.add_argument("--inventory", type=Path, default=None, metavar="INV",
                    help="time against the running lab of INV (`fabtune lab init INV --nodes N` and `lab up -i INV` "
                         "first; a 256-node lab takes minutes to build), instead of starting one per size")
    args = ap.parse_args()
    if args.inventory is not None:
        from tuning import inventory

        args.nodes = [len(inventory.load(args.inventory).nodes)]
    head = (f"{'nodes':>5s} {'hosts':>5s} | {'fabtune wall':>12s} {'cpu':>7s} {'cpu/host':>8s} | "
            f"{'ansible wall':>12s} {'cpu':>7s} {'cpu/host':>8s} | {'wall x':>6s} {'cpu x':>6s}")
    rows = []
    for n in args.nodes:
        hosts, fab, ans = bench_size(n, args.runs, args.inventory)
        rows.append(f"{n:5d} {hosts:5d} | {fab.wall_s:11.2f}s {fab.cpu_s:6.2f}s {fab.cpu_s / hosts:7.3f}s | "
                    f"{ans.wall_s:11.2f}s {ans.cpu_s:6.2f}s {ans.cpu_s / hosts:7.3f}s | "
                    f"{ans.wall_s / fab.wall_s:5.1f}x {ans.cpu_s / max(fab.cpu_s, 1e-9):5.1f}x"
                    + ("" if fab.rc == 0 and ans.rc == 0 else f"  (exit fabtune {fab.rc}, ansible {ans.rc})"))
        print(rows[-1] if len(rows) > 1 else head + "\n" + rows[-1], flush=True)
    print("check-mode plan of every domain (fabtune plan vs ansible-playbook playbooks/tune.yml --check); "
          f"median of {args.runs}; cpu = user+sys of the child processes; x = ansible / fabtune")
    return 0


if __name__ == "__main__":
    sys.exit(main())
