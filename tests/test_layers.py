"""The import layers of ``pyproject.toml`` ([tool.importlinter], docs/architecture.md "Layers"):
front ends over the rollout over the targets over the device kinds over inventory, transport,
parsers and model; the lab never imports the engine, a report or a front end; nothing under
``rollout/`` imports a switch OS, a node domain module or the SSH transport; no import circles.
Checked with import-linter (``lint-imports``) and its graph library, as every change runs the suite."""

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


def _cycles(graph, modules: set[str]) -> list[list[str]]:
    """The import circles among ``modules`` (strongly connected components of two or more, Tarjan)."""
    adj = {m: {i for i in graph.find_modules_directly_imported_by(m) if i in modules} for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in adj[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for m in sorted(modules):
        if m not in index:
            visit(m)
    return out


def test_no_import_circles_outside_the_lab():
    """No module imports (directly or through others, lazily too) one that imports it back; imports
    made only for type checkers are not imports. The lab is its own process tree."""
    import grimp

    graph = grimp.build_graph("tuning", cache_dir=None, exclude_type_checking_imports=True)
    assert _cycles(graph, {m for m in graph.modules if not m.startswith("tuning.lab")}) == []


def test_the_code_keeps_its_shape():
    """Issue 17's targets hold (``bench/code_shape.py`` prints the same counts): no line outside the
    device packages branches on node vs switch, at most 5 functions over 40 lines and 3 modules over
    400 lines outside the lab."""
    import importlib.util

    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location("code_shape", REPO / "bench" / "code_shape.py")
    shape = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shape)
    assert shape.role_branches() == {}
    assert len(shape.long_functions()) <= 5, shape.long_functions()
    assert len(shape.long_modules()) <= 3, shape.long_modules()
