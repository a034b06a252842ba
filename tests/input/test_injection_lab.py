"""No inventory string runs as a shell command on a node: shell payloads are refused at load
(exit 2, nothing contacted), and grammatical but hostile values that do reach the node (a sysctl
name with ``-``, a word value) are quoted there; no marker file appears anywhere in the lab and
every node file and switch config is unchanged (checked over real SSH against the lab)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import snapshot_fabric
from tests.input.gen import MARKER, all_cases
from tuning import cli

pytestmark = pytest.mark.lab

PAYLOAD_CASES = [c for c in all_cases() if MARKER in c.name][::20]


def _plan(inv: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuning", "plan", "-i", str(inv)], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def _markers(*roots: Path) -> list[Path]:
    return [p for root in roots for p in root.rglob(f"*{MARKER}*")]


def _plan_in_process(inv: Path, capsys, monkeypatch) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["fabtune", "plan", "-i", str(inv)])
    with pytest.raises(SystemExit) as e:
        cli.main()
    return e.value.code, capsys.readouterr().err


def test_no_inventory_string_runs_on_a_node(lab_inventory: Path, tmp_path: Path, capsys, monkeypatch):
    before = snapshot_fabric(lab_inventory)
    gv = lab_inventory / "group_vars" / "gpu_nodes.yml"
    pristine = {p: p.read_bytes() for p in lab_inventory.rglob("*.y*ml") if ".state" not in p.parts}
    assert len(PAYLOAD_CASES) >= 8
    for case in PAYLOAD_CASES:
        case.apply(lab_inventory)
        code, err = _plan_in_process(lab_inventory, capsys, monkeypatch)
        for path, data in pristine.items():
            path.write_bytes(data)
        assert code == 2 and err.count("\n") == 1, (case.name, err)
        assert f"{lab_inventory / case.file}: " in err, (case.name, err)
    assert gv.read_bytes() == pristine[gv]
    assert _markers(lab_inventory, tmp_path) == []
    assert snapshot_fabric(lab_inventory) == before
    _grammatical_hostile_values_are_quoted_on_the_node(lab_inventory, tmp_path, before)


def _grammatical_hostile_values_are_quoted_on_the_node(lab_inventory: Path, tmp_path: Path, before: dict) -> None:
    """``kernel.x-y`` and ``-1`` pass the grammar and reach the node's read script: the node reads
    them as data (the key does not exist there, so plan refuses it), nothing runs."""
    gv = lab_inventory / "group_vars" / "gpu_nodes.yml"
    data = yaml.safe_load(gv.read_text())
    data["sysctl"] = {"kernel.x-y": "-1", f"net.ipv4.conf.{MARKER}.x": "bbr"}
    gv.write_text(yaml.safe_dump(data, sort_keys=False))
    res = _plan(lab_inventory, tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "sysctl.kernel.x-y" in res.stderr and "no kernel parameter kernel.x-y" in res.stderr, res.stderr
    assert _markers(lab_inventory / ".state" / "nodes", tmp_path) == []
    assert snapshot_fabric(lab_inventory) == before
