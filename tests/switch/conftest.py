"""Fixtures of the switch tests: one lab per test module, its leaf01 opened through the engine's
own switch_ops (real SSH, the NVUE simulator of tuning.lab)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.conftest import running_lab
from tuning import inventory
from tuning.inventory import Device
from tuning.model.settings import SwitchSpec
from tuning.targets import switch as switch_ops


def leaf(inv_dir: Path, name: str = "leaf01", **changes: object) -> Device:
    """The switch ``name`` of the inventory in ``inv_dir``, its spec changed by ``changes``
    (``roce`` merged key by key) and validated again by the model."""
    dev = inventory.load(inv_dir).devices[name]
    if not changes:
        return dev
    data = dev.spec.model_dump()
    roce = changes.pop("roce", None)
    data.update(changes)
    if roce:
        data["roce"] = {**data["roce"], **roce}
    return dataclasses.replace(dev, spec=SwitchSpec.model_validate(data))


@pytest.fixture(scope="module")
def module_lab(tmp_path_factory: pytest.TempPathFactory):
    """A fresh lab for one test module (a copy of inventory/lab on its own ports); yields the
    inventory dir."""
    with running_lab(tmp_path_factory.mktemp("switch")) as inv:
        yield inv


@pytest.fixture()
def leaf01(module_lab: Path):
    """An open driver on the module lab's leaf01; yields (inventory dir, driver)."""
    drv = switch_ops.open_driver(leaf(module_lab))
    try:
        yield module_lab, drv
    finally:
        drv.close()
