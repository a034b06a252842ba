"""Issue 19, read-only switches without a device: ``manage`` takes a YAML boolean only, and an offline
plan of an inventory whose leaf02 has ``manage: false`` plans nothing for it (the live side:
tests/switch/test_read_only_switch.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import copy_lab_inventory_files
from tuning import inventory
from tuning.errors import InputError
from tuning.rollout.offline import offline_plan


def _with(inv: Path, line: str) -> Path:
    path = inv / "host_vars" / "leaf02.yml"
    path.write_text(path.read_text() + line)
    return inv


def test_an_offline_plan_leaves_a_read_only_switch_out(tmp_path: Path):
    full = offline_plan(inventory.load(copy_lab_inventory_files(tmp_path / "a")), None, None)
    inv = inventory.load(_with(copy_lab_inventory_files(tmp_path / "b"), "manage: false\n"))
    assert inv.devices["leaf02"].spec.manage is False and inv.devices["leaf01"].spec.manage is True
    ro = offline_plan(inv, None, None)
    assert len(full.changes["leaf02"]) > 20 and not ro.changes.get("leaf02")
    assert ro.changes["leaf01"] == full.changes["leaf01"]


@pytest.mark.parametrize("value", ["'no'", "0", "maybe", "null"])
def test_manage_takes_a_boolean_only(tmp_path: Path, value: str):
    inv = _with(copy_lab_inventory_files(tmp_path / "lab"), f"manage: {value}\n")
    with pytest.raises(InputError) as err:
        inventory.load(inv)
    assert "leaf02" in str(err.value) and "manage" in str(err.value), str(err.value)
