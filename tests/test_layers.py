"""The import layers of ``pyproject.toml`` ([tool.importlinter], docs/architecture.md "Layers"):
front ends over the rollout over the device kinds over inventory, transport, parsers and model;
the lab never imports the engine, a report or a front end; nothing under ``rollout/`` imports the
NVUE driver. Checked with import-linter (``lint-imports``), as every change runs the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_every_import_contract_is_kept():
    res = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "Contracts: 3 kept, 0 broken." in res.stdout, res.stdout[-4000:] + res.stderr[-2000:]
    assert res.returncode == 0
