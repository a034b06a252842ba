"""The shape of the code that issue 17 ("one device contract") tracks, printed side by side:

- functions longer than 40 lines and modules longer than 400 lines, outside the lab
  (``tuning/lab/`` is a simulator, not product code);
- the places outside the device packages that branch on the kind of device (``role == "node"``,
  ``role == "switch"``, ``role != ...``, ``role in (...)``), by file.

    .venv/bin/python bench/code_shape.py          # the counts and the lists
    .venv/bin/python bench/code_shape.py --json   # the same as JSON

Lines are counted as Python's ``ast`` spans them (a function from its ``def`` to its last line,
docstring included).
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "tuning"
FUNCTION_LINES, MODULE_LINES = 40, 400
#: where a branch on the kind of device belongs (the device packages and their registry)
DEVICE_PACKAGES = ("node/", "switch/", "targets/", "lab/")
ROLE_BRANCH = re.compile(r"""\brole\s*(==|!=|in|not in)\s*[\("'\[]""")


def _sources() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if "lab" not in p.relative_to(ROOT).parts[:1])


def long_functions() -> list[tuple[str, int]]:
    """``(module:function, lines)`` of every function over :data:`FUNCTION_LINES` lines, longest first."""
    out = []
    for path in _sources():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > FUNCTION_LINES:
                    out.append((f"{path.relative_to(ROOT.parent)}:{node.name}", n))
    return sorted(out, key=lambda x: -x[1])


def long_modules() -> list[tuple[str, int]]:
    """``(module, lines)`` of every module over :data:`MODULE_LINES` lines, longest first."""
    out = [(str(p.relative_to(ROOT.parent)), len(p.read_text().splitlines())) for p in _sources()]
    return sorted([m for m in out if m[1] > MODULE_LINES], key=lambda x: -x[1])


def role_branches() -> dict[str, int]:
    """File -> number of lines branching on a device's role, outside :data:`DEVICE_PACKAGES`."""
    out: dict[str, int] = {}
    for path in _sources():
        rel = str(path.relative_to(ROOT))
        if rel.startswith(DEVICE_PACKAGES):
            continue
        n = sum(1 for line in path.read_text().splitlines() if ROLE_BRANCH.search(line))
        if n:
            out[f"tuning/{rel}"] = n
    return out


def main() -> int:
    funcs, mods, branches = long_functions(), long_modules(), role_branches()
    if "--json" in sys.argv[1:]:
        print(json.dumps({"functions_over_40": funcs, "modules_over_400": mods, "role_branches": branches}, indent=2))
        return 0
    print(f"functions over {FUNCTION_LINES} lines (lab excluded): {len(funcs)}   (issue 17 target: <= 5)")
    for name, n in funcs:
        print(f"  {n:4d}  {name}")
    print(f"modules over {MODULE_LINES} lines (lab excluded): {len(mods)}   (issue 17 target: <= 3)")
    for name, n in mods:
        print(f"  {n:4d}  {name}")
    print(f"lines branching on node vs switch outside node/, switch/, targets/, lab/: {sum(branches.values())} "
          f"in {len(branches)} files   (issue 17 target: 0 outside the targets and registry)")
    for name, n in sorted(branches.items(), key=lambda kv: -kv[1]):
        print(f"  {n:4d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
