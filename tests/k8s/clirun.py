"""``fabtune`` run in the test's process for the Kubernetes tests."""

from __future__ import annotations

import os
import subprocess
import sys

from typer.testing import CliRunner

from tests.conftest import REPO
from tuning import cli


def fabtune(*args: str) -> subprocess.CompletedProcess:
    """``fabtune ARGS`` through :func:`tuning.cli.main` in this process (as tests/input's fuzz runs it),
    from the repository root: its exit code, stdout and stderr."""
    old_argv, old_cwd = sys.argv, os.getcwd()
    with CliRunner().isolation() as (out, err, _):
        try:
            os.chdir(REPO)
            sys.argv = ["fabtune", *args]
            cli.main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            sys.argv = old_argv
            os.chdir(old_cwd)
            sys.stdout.flush()
            sys.stderr.flush()
        return subprocess.CompletedProcess(args, code, out.getvalue().decode(), err.getvalue().decode())
