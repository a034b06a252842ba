"""Shared pytest fixtures."""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


def shared_cases() -> Path:
    """Folder of the reference tool outputs: ``shared/cases`` next to the repository,
    else ``$FABTUNE_CASES_DIR``."""
    beside = Path(__file__).resolve().parents[1].parent / "shared" / "cases"
    env = os.environ.get("FABTUNE_CASES_DIR")
    return Path(env) if env and not beside.is_dir() else beside


@pytest.fixture(scope="session")
def cases_dir() -> Path:
    """:func:`shared_cases` as a fixture."""
    return shared_cases()


REPO = Path(__file__).resolve().parents[1]
#: the test labs' port range: away from inventory/lab's 22101-22203, different per pytest process,
#: below the kernel's ephemeral range (32768-60999) so a client socket never holds a lab port
TEST_BASE_PORT = 23000 + (os.getpid() % 36) * 250


@contextmanager
def running_lab(parent: Path, base_port: int = TEST_BASE_PORT) -> Iterator[Path]:
    """A fresh lab (untuned) for a copy of ``inventory/lab`` in ``parent/lab`` on ``base_port``;
    yields the inventory dir and stops the lab after. Starting one takes seconds on 2 cores."""
    import shutil

    from tuning.lab import controller
    from tuning.lab.fabric import default_fabric, retarget_inventory

    inv = parent / "lab"
    shutil.copytree(REPO / "inventory" / "lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    fabric = default_fabric(base_port=base_port)
    retarget_inventory(inv / "hosts.yaml", fabric)
    controller.up(inv / ".state", fabric)
    try:
        yield inv
    finally:
        controller.down(inv / ".state")


@pytest.fixture()
def lab_inventory(tmp_path: Path):
    """A fresh lab (untuned) for a copy of ``inventory/lab`` in tmp_path; yields the inventory dir.

    The lab listens on its own port range (``TEST_BASE_PORT``, per pytest process), so tests never
    collide with a lab an operator runs on inventory/lab's ports.
    """
    with running_lab(tmp_path) as inv:
        yield inv


@pytest.fixture()
def lab(lab_inventory: Path) -> Path:
    """The state dir of a running fresh lab (see ``lab_inventory``)."""
    return lab_inventory / ".state"


#: NIC traffic counters in a lab sysroot (RDMA ``hw_counters``, the ``ethtool -S`` state): an incast
#: moves them, and they are no configuration a restore puts back
COUNTER_FILES = re.compile(r"sys/class/infiniband/[^/]+/ports/\d+/hw_counters/|run/lab/ethtool/")


def snapshot_fabric(inv_dir: Path) -> dict[str, bytes | str]:
    """Every node sysroot file (bytes) but the traffic counters (:data:`COUNTER_FILES`), and every
    switch's running config (``nv config show -o commands``).

    Keys: ``node01:sys/class/net/enp12s0np0/mtu`` ... and ``leaf01:running-config``.
    """
    from tuning import inventory
    from tuning.rollout.switch_ops import open_driver

    state = inv_dir / ".state"
    out: dict[str, bytes | str] = {}
    for node_dir in sorted((state / "nodes").iterdir()):
        root = node_dir / "sysroot"
        for f in sorted(root.rglob("*")):
            rel = str(f.relative_to(root))
            if f.is_file() and not f.is_symlink() and not COUNTER_FILES.match(rel):
                out[f"{node_dir.name}:{rel}"] = f.read_bytes()
    inv = inventory.load(inv_dir)
    for dev in inv.switches:
        drv = open_driver(dev)
        try:
            out[f"{dev.name}:running-config"] = drv.running_config()
            out[f"{dev.name}:revision"] = drv.current_revision()
        finally:
            drv.close()
    return out
