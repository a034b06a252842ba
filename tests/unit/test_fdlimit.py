"""Issue 24: a run that would pass the file-descriptor limit is refused before it connects, and a
soft limit below the run's need is raised toward the hard one (tuning.rollout.fdlimit)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO, copy_lab_inventory_files


def test_a_hard_limit_below_the_run_is_one_line_exit_2_before_any_connect(tmp_path):
    inv = copy_lab_inventory_files(tmp_path / "lab")  # no lab runs: a connect would fail with exit 4
    res = subprocess.run(["bash", "-c", f'ulimit -n 40 && exec "$0" -m tuning plan -i {inv}', sys.executable],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    errors = [ln for ln in res.stderr.splitlines() if not ln.startswith("...")]
    assert res.returncode == 2 and len(errors) == 1, res.stderr
    assert "holds one connection per device (7)" in errors[0] and "limit is 40 (hard limit 40)" in errors[0]
    assert errors[0].endswith("nothing was contacted") and "ulimit -n" in errors[0]


def test_a_low_soft_limit_is_raised_to_what_the_run_needs():
    code = ("import resource; from tuning.rollout.fdlimit import MARGIN, ensure_fds, open_fds\n"
            "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (50, hard))\n"
            "got = ensure_fds(500)\n"
            "print(got, resource.getrlimit(resource.RLIMIT_NOFILE)[0], open_fds() + 500 + MARGIN)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    got, soft, need = map(int, res.stdout.split())
    assert got == soft and need - 2 <= got <= need + 2 and got > 500, res.stdout + res.stderr
