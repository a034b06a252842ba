"""The package as a user installs it: a wheel built from the project, installed in a fresh virtual
environment with no checkout on ``sys.path``, renders and plans offline exactly as the checkout
does, and its core dependencies leave out the lab, Ansible and Kubernetes extras."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "inventory" / "example-su"
#: core dependencies a wheel must not pull: they belong to an extra (pyproject.toml)
EXTRAS_ONLY = ("fakenos", "asyncssh", "ansible-core", "ansible-runner", "kubernetes", "molecule", "pytest")


def _run(argv: list, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the project's files (the build leaves nothing in the checkout)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "tuning", src / "tuning", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    res = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                "-w", tmp / "dist", src])
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    (whl,) = (tmp / "dist").glob("fabtune-*.whl")
    return whl


def test_the_wheel_carries_the_templates_and_only_core_dependencies(wheel: Path):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = next(z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    assert {"tuning/templates/nvue/switch.j2", "tuning/templates/eos/switch.j2", "tuning/templates/node/sysctl.conf.j2",
            "tuning/templates/node/fabtune-nic-setup.sh.j2", "tuning/templates/node/fabtune-nic.service.j2",
            "tuning/dashboards/fabtune-grafana.json", "tuning/reports/report.schema.json"} <= names
    core = [line.split(":", 1)[1].strip() for line in meta.splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert core and not [d for d in core if d.lower().startswith(EXTRAS_ONLY)], core
    extras = {line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Provides-Extra:")}
    assert {"lab", "ansible", "kubernetes", "gpu", "test"} <= extras


def test_the_installed_wheel_renders_and_plans_offline_as_the_checkout(wheel: Path, tmp_path: Path):
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", venv]).returncode == 0
    site = Path(_run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
                     ).stdout.strip())
    # the core dependencies, linked from this environment; never the project itself (its editable
    # hook) nor the lab extra's packages (the core must work without them)
    for entry in Path(sysconfig.get_path("purelib")).iterdir():
        if not entry.name.lower().startswith(("fabtune", "__editable__", "tuning", "fakenos", "asyncssh")):
            (site / entry.name).symlink_to(entry)
    res = _run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-deps",
                "--no-index", wheel])
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "COLUMNS": "200"}
    where = _run([venv / "bin" / "python", "-c", "import tuning; print(tuning.__file__)"], env=env, cwd=tmp_path)
    assert where.stdout.startswith(str(site)), where.stdout + where.stderr
    rendered = _run([venv / "bin" / "fabtune", "render", "-i", EXAMPLE, "-o", tmp_path / "wheel-out"],
                    env=env, cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    checkout = _run([sys.executable, "-m", "tuning", "render", "-i", EXAMPLE, "-o", tmp_path / "checkout-out"],
                    env={**env, "PATH": os.environ["PATH"]}, cwd=REPO)
    assert checkout.returncode == 0, checkout.stderr
    ours = {p.name: p.read_text() for p in (tmp_path / "wheel-out").iterdir()}
    theirs = {p.name: p.read_text() for p in (tmp_path / "checkout-out").iterdir()}
    assert len(ours) == 44 and ours == theirs
    assert "nv set interface swp1 link mtu 9216\n" in ours["su1-leaf-r0.nvue"]
    plan = _run([venv / "bin" / "fabtune", "plan", "-i", EXAMPLE, "--offline"], env=env, cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert "2752 setting(s) wanted; offline" in plan.stdout + plan.stderr
    # the lab without its extra: one line that says what to install, nothing started
    shutil.copytree(REPO / "inventory" / "lab", tmp_path / "lab", ignore=shutil.ignore_patterns(".*"))
    up = _run([venv / "bin" / "fabtune", "lab", "up", "-i", tmp_path / "lab"], env=env, cwd=tmp_path)
    assert (up.returncode, up.stdout) == (2, "") and up.stderr.startswith("fabtune: error: the lab needs "), up.stderr
    assert "pip install 'fabtune[lab]'" in up.stderr and not (tmp_path / "lab" / ".state" / "lab.pid").exists()
