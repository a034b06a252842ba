"""Benchmark: the same check-mode work on the same lab, fabtune (Nornir fan-out, one SSH round
trip per node) vs ansible-playbook (playbooks/tune.yml --check: mtu and sysctl on gpu_nodes).

Prints wall-clock seconds side by side and their ratio; asserts nothing (timing lives here, not
in tests). Usage: ``.venv/bin/python bench/plan_vs_ansible.py [--runs 3]``. Starts and stops its
own lab in a temporary copy of inventory/lab, on ports 46001-46103.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tuning import inventory  # noqa: E402
from tuning.lab import controller  # noqa: E402
from tuning.lab.fabric import default_fabric, retarget_inventory  # noqa: E402
from tuning.rollout import engine  # noqa: E402


def _time(fn, runs: int) -> float:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fabtune-bench-"))
    inv_dir = tmp / "lab"
    shutil.copytree(REPO / "inventory" / "lab", inv_dir, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    fabric = default_fabric(base_port=21500)  # beside an operator's lab (22101+), below the ephemeral range
    retarget_inventory(inv_dir / "hosts.yaml", fabric)
    controller.up(inv_dir / ".state", fabric)
    try:
        inv = inventory.load(inv_dir)
        opts = engine.Options(mode="plan", limit=["gpu_nodes"], domains={"mtu", "sysctl"})
        fab = _time(lambda: engine.run(inv, opts), args.runs)
        fab_all = _time(lambda: engine.run(inv, engine.Options(mode="plan")), args.runs)
        cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv_dir),
               str(REPO / "playbooks" / "tune.yml"), "--check"]
        env = {**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "True"}
        ans = _time(lambda: subprocess.run(cmd, env=env, check=True, capture_output=True, cwd=REPO), args.runs)
    finally:
        controller.down(inv_dir / ".state")
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'check-mode plan, 4 nodes, mtu+sysctl':44s} {'fabtune':>9s} {'ansible':>9s} {'ratio':>7s}")
    print(f"{'wall seconds (median of ' + str(args.runs) + ')':44s} {fab:9.2f} {ans:9.2f} {ans / fab:6.1f}x")
    print(f"{'fabtune, every domain, 4 nodes + 3 switches':44s} {fab_all:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
