"""``make demo``'s wrong variant must pass the inventory checks (issue 6's QoS rules once made the
demo refuse its own variant before anything ran), and differ from the lab inventory exactly where
it says: leaf01's spine uplink at MTU 1500."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import REPO


def test_demo_wrong_variant_loads_and_changes_only_the_uplink_mtu(tmp_path: Path):
    from tuning import inventory
    from tuning.demo import wrong_variant

    src = tmp_path / "lab"
    shutil.copytree(REPO / "inventory" / "lab", src, ignore=shutil.ignore_patterns(".state", ".fabtune*"))
    good = inventory.load(src)
    bad = inventory.load(wrong_variant(src, tmp_path / "lab-wrong"))  # raises InputError if a rule refuses it
    assert bad.devices["leaf01"].spec.port_mtu_overrides == {"swp31": 1500}
    for name, dev in good.devices.items():
        if name != "leaf01":
            assert bad.devices[name].spec == dev.spec, name
