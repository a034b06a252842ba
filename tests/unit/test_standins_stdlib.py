"""The lab's stand-ins run as ``python -S`` (no site-packages: tuning/lab/controller.py WRAPPER),
so every module a stand-in, its wrapper or the lab's tool server imports must need the standard
library only. A stand-in that pulls in pydantic through an engine module answers every call with a
traceback (a perftest client that crashed instead of saying "Couldn't connect"), which the suite
only saw as 18 of 18 verify pairs failing. Each module is imported here, every function body
that imports lazily included, in ``python -S``."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO
from tuning.lab.tools import TOOLS

#: what a stand-in call loads: the wrapper's client, the server, the dispatcher and each tool's module
MODULES = ["tuning.lab.toolclient", "tuning.lab.toolserver", "tuning.lab.sudo", "tuning.lab.tools"]


def _tool_modules() -> set[str]:
    """The modules of :data:`tuning.lab.tools.TOOLS` (``"module:function"`` values)."""
    return {target.partition(":")[0] for target in TOOLS.values()}


def _lazy_imports(module: str) -> list[str]:
    """The ``from X import``/``import X`` statements inside function bodies of ``module``."""
    import ast
    import importlib.util

    path = importlib.util.find_spec(module).origin
    tree = ast.parse(open(path).read())
    found = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    found.append(node.module)
                elif isinstance(node, ast.Import):
                    found += [a.name for a in node.names]
    return found


def test_every_stand_in_module_imports_with_the_standard_library_only():
    modules = sorted(set(MODULES) | _tool_modules())
    lazy = sorted({m for mod in modules for m in _lazy_imports(mod)})
    assert "json" in lazy  # the scan sees function-level imports (the stand-ins import lazily)
    code = (f"import sys; sys.path.insert(0, {str(REPO)!r}); import importlib\n"
            f"for m in {modules + lazy!r}: importlib.import_module(m)\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'yaml', 'jinja2', 'paramiko'))\n"
            "print(' '.join(bad))")
    res = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "", f"stand-in modules load site-packages: {res.stdout}"
