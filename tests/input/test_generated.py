"""Over 500 generated malformed inventories (tests/input/gen.py): the loader refuses each with one
line naming the file and the key, and no traceback; ``fabtune plan`` and ``fabtune render -o`` exit 2
with that one line on stderr, contact nothing and write nothing (no lab needed: refusal comes first)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.input.gen import Case, all_cases
from tuning import cli, inventory
from tuning.errors import InputError

REPO = Path(__file__).resolve().parents[2]
CASES = all_cases()


class Base:
    """A pristine copy of inventory/lab that each case breaks; ``reset`` puts it back (fast)."""

    def __init__(self, root: Path):
        self.inv = root / "inv"
        self.files = {p.relative_to(REPO / "inventory/lab"): p.read_bytes()
                      for p in (REPO / "inventory/lab").rglob("*") if p.is_file() and ".state" not in p.parts}

    def reset(self) -> Path:
        """Remove what a case added, rewrite what it changed."""
        for path in sorted(self.inv.rglob("*"), reverse=True) if self.inv.exists() else []:
            rel = path.relative_to(self.inv)
            if rel not in self.files and not any(k.is_relative_to(rel) for k in self.files):
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        for rel, data in self.files.items():
            path = self.inv / rel
            if not path.is_file() or path.read_bytes() != data:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        return self.inv


def problem(case: Case, inv: Path, message: str) -> str | None:
    """Why ``message`` is not one line naming the case's file and key (None: it is)."""
    if len(message.splitlines()) != 1:
        return f"not one line: {message!r}"
    prefix = f"{inv / case.file}: "
    if not message.startswith(prefix):
        return f"does not start with {prefix!r}: {message!r}"
    key, sep, rest = message[len(prefix):].partition(": ")
    if not sep or not key or not rest.strip():
        return f"no key or no problem: {message!r}"
    if case.key is not None and not key.startswith(case.key):
        return f"key {key!r} is not {case.key!r}: {message!r}"
    return None


def test_generator_makes_over_500_distinct_cases():
    assert len(CASES) >= 500
    assert len({c.name for c in CASES}) == len(CASES)


def test_loader_refuses_every_case_with_one_line(tmp_path: Path):
    base = Base(tmp_path)
    inventory.load(base.reset())  # the pristine copy loads
    bad = []
    for case in CASES:
        case.apply(base.reset())
        try:
            inventory.load(base.inv)
            bad.append(f"{case.name}: loaded")
        except InputError as e:
            why = problem(case, base.inv, str(e))
            if why:
                bad.append(f"{case.name}: {why}")
        except Exception as e:  # noqa: BLE001 - a traceback is the failure this test looks for
            bad.append(f"{case.name}: traceback {type(e).__name__}: {e}")
    assert not bad, f"{len(bad)} of {len(CASES)}:\n" + "\n".join(bad[:30])


def _cli(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str]:
    """Run the real console entry point in-process: (exit code, stderr)."""
    monkeypatch.setattr(sys, "argv", ["fabtune", *args])
    with pytest.raises(SystemExit) as e:
        cli.main()
    return e.value.code, capsys.readouterr().err


def _tree(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def test_plan_and_render_exit_2_with_one_line_and_write_nothing(tmp_path: Path, capsys, monkeypatch):
    base = Base(tmp_path)
    out = tmp_path / "render-out" / "sub"
    bad = []
    for case in CASES[::6]:
        case.apply(base.reset())
        before = _tree(tmp_path)
        for args in (("plan", "-i", str(base.inv)), ("render", "-i", str(base.inv), "-o", str(out))):
            code, err = _cli(capsys, monkeypatch, *args)
            line = err.removeprefix("fabtune: error: ").rstrip("\n")
            why = None if code == 2 and err.startswith("fabtune: error: ") else f"exit {code}, stderr {err!r}"
            why = why or problem(case, base.inv, line)
            if why:
                bad.append(f"{args[0]} {case.name}: {why}")
        if _tree(tmp_path) != before:
            bad.append(f"{case.name}: wrote {sorted(map(str, _tree(tmp_path) - before))}")
    assert not bad, "\n".join(bad[:30])


def test_render_writes_only_inside_output(tmp_path: Path, capsys, monkeypatch):
    base = Base(tmp_path)
    out = tmp_path / "out"
    code, _ = (0, "")
    monkeypatch.setattr(sys, "argv", ["fabtune", "render", "-i", str(base.reset()), "-o", str(out)])
    try:
        cli.main()
    except SystemExit as e:
        code = e.code or 0
    assert code == 0
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file() and base.inv not in p.parents)
    assert written == sorted(Path("out") / f"{n}.{ext}" for n, ext in (
        ("node01", "files"), ("node02", "files"), ("node03", "files"), ("node04", "files"),
        ("leaf01", "nvue"), ("leaf02", "nvue"), ("spine01", "nvue")))


@pytest.mark.parametrize("index", [0, 97, 301, len(CASES) - 1])
def test_the_installed_entry_point_says_one_line(index: int, tmp_path: Path):
    """The same through a real process (``python -m tuning``), on a few cases."""
    case = CASES[index]
    base = Base(tmp_path)
    case.apply(base.reset())
    res = subprocess.run([sys.executable, "-m", "tuning", "plan", "-i", str(base.inv)], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("fabtune: error: ") and res.stderr.count("\n") == 1, res.stderr
    assert problem(case, base.inv, res.stderr.removeprefix("fabtune: error: ").rstrip("\n")) is None
