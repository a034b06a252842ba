"""ansible-lint at the ``production`` profile over the Ansible content (playbooks/, tasks/,
molecule/), configured by the repository's ``.ansible-lint``: zero failures, zero warnings, every
file linted. A second test proves the gate bites: a playbook with known violations fails it.

ansible-lint runs offline (``offline: true`` in ``.ansible-lint``; ansible-lint 26.x
``ansiblelint/config.py``): no collection install, no schema refresh, no version check.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ansible

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LINT = BIN / "ansible-lint"
TARGETS = ("playbooks", "tasks", "molecule")
#: the summary line ansible-lint 26.x prints on stderr (ansiblelint/app.py ``report_summary``)
SUMMARY = re.compile(r"(Passed|Failed): (\d+) failure\(s\), (\d+) warning\(s\) in (\d+) files processed")


def ansible_lint(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the venv's ansible-lint (``pep8`` output: ``path:line:col: rule: message``, no colour) with the venv's Ansible first on PATH."""
    env = os.environ | {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "NO_COLOR": "1"}
    return subprocess.run([str(LINT), "--offline", "--format=pep8", "--nocolor", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def ansible_yaml_files() -> list[Path]:
    """The YAML files ansible-lint must process under :data:`TARGETS` (molecule.yml included)."""
    return sorted(p for t in TARGETS for p in (REPO / t).rglob("*.yml"))


def test_production_profile_passes_with_zero_violations() -> None:
    res = ansible_lint(*TARGETS, cwd=REPO)
    out = res.stdout + res.stderr
    summary = SUMMARY.search(out)
    assert summary, out
    assert res.returncode == 0, out
    assert summary.group(1, 2, 3) == ("Passed", "0", "0"), out
    assert "Profile 'production' was required, and it passed" in out, out
    assert res.stdout.strip() == "", out  # parseable violations would be printed here, one per line
    assert int(summary.group(4)) >= len(ansible_yaml_files()), out  # every file was linted, none skipped


def test_a_playbook_with_violations_fails_the_gate(tmp_path: Path) -> None:
    (tmp_path / ".ansible-lint").write_bytes((REPO / ".ansible-lint").read_bytes())  # the same gate
    bad = tmp_path / "playbooks" / "bad.yml"
    bad.parent.mkdir()
    bad.write_text("---\n- hosts: localhost\n  tasks:\n    - command: echo hi\n")
    res = ansible_lint("playbooks", cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 2, out
    # ``name[play][/]``: ansible-lint 26.10 leaves a console markup tag after a rule id with a tag
    rules = set(re.findall(r"^playbooks/bad\.yml:\d+(?::\d+)?: ([\w-]+(?:\[[\w-]+\])?)", res.stdout, re.M))
    assert {"name[play]", "name[missing]", "fqcn[action-core]", "no-changed-when"} <= rules, out
