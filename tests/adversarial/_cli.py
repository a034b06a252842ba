"""Helpers of the adversarial tests: fabtune's entry point run in-process, the one-line check, and a
module-scoped lab (import ``adv_lab`` into a test module to use it)."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import traceback
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, lab_up, running_lab  # noqa: F401 (lab_up: the tests import it from here)


def cli(*args: str, cwd: Path | None = None, stdin: bytes = b"") -> tuple[int, str, str]:
    """Run ``fabtune ARGS`` through :func:`tuning.cli.main` in this process: (exit code, stdout, stderr);
    ``stdin``: what the command reads as its standard input (UTF-8 text over those bytes).

    A traceback (any exception escaping main) is printed into stderr and returns -1.
    """
    from tuning import cli as _cli

    out, err = io.StringIO(), io.StringIO()
    old_argv, old_cwd, old_stdin = sys.argv, os.getcwd(), sys.stdin
    sys.argv = ["fabtune", *args]
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    if cwd:
        os.chdir(cwd)
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                _cli.main()
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:  # noqa: BLE001 - a traceback is what these tests look for
                traceback.print_exc(file=err)
                code = -1
    finally:
        sys.argv, sys.stdin = old_argv, old_stdin
        os.chdir(old_cwd)
    return code, out.getvalue(), err.getvalue()


def assert_one_line(code: int, err: str, *needles: str) -> None:
    """(code, err) is exit 2 with ONE line ``fabtune: error: ...`` holding every needle."""
    assert "Traceback" not in err, err[-800:]
    assert code == 2, f"exit {code}: {err[-400:]}"
    assert err.startswith("fabtune: error: ") and err.count("\n") == 1, f"not one line: {err!r}"
    for n in needles:
        assert n in err, (n, err)


@pytest.fixture(scope="module")
def adv_lab(tmp_path_factory) -> Path:
    """One running lab for this module (this process's TEST_BASE_PORT); yields its inventory dir."""
    with running_lab(tmp_path_factory.mktemp("advlab")) as inv:
        yield inv


def copy_lab_inventory(dest: Path, ports: dict[str, int]) -> Path:
    """A copy of ``inventory/lab`` in ``dest`` (no ``.state``, no lock) whose hosts listen on
    ``ports`` (``{"node01": 23001, ...}``, every host of the inventory); returns ``dest``."""
    shutil.copytree(REPO / "inventory" / "lab", dest, ignore=shutil.ignore_patterns(".state", ".fabtune*"))
    hosts = dest / "hosts.yaml"
    data = yaml.safe_load(hosts.read_text())

    def walk(group: dict) -> None:
        for name, host in (group.get("hosts") or {}).items():
            host["ansible_port"] = ports[name]
        for child in (group.get("children") or {}).values():
            walk(child)

    walk(data["all"])
    hosts.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest
