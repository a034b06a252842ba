"""The verification schedule reads the leaf-spine cabling the inventory gives (a leaf's
``uplinks``, :mod:`tuning.model.cabling`) instead of assuming ``uplink j -> spine j mod S``.

Fixture: a copy of ``inventory/example-su`` (32 nodes, 8 rail leaves, 4 spines) whose leaves are
cabled unevenly: each leaf has 3 uplinks (swp33-35; swp36-40 listed and dark), the first to
spine04, the other two both to one spine of spine01..03 (leaf r: spine0<r mod 3 + 1>), so the
spines take 6, 6, 4 and 8 cables and a leaf reaches 2 of the 4. The rule ``j mod 4`` over a
leaf's 3 uplink ports would never reach spine04.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.verify.test_schedule import check
from tuning import inventory
from tuning.errors import InputError
from tuning.verify.pairs import rounds_upper_bound
from tuning.verify.schedule import plan_schedule

SU = REPO / "inventory" / "example-su"


def uneven(rail: int) -> dict[str, str]:
    """The rail-``rail`` leaf's uplinks of the fixture (module docstring)."""
    mid = f"su1-spine0{rail % 3 + 1}"
    return {"swp33": f"su1-spine04:swp{rail + 1}", "swp34": f"{mid}:swp{2 * rail + 1}",
            "swp35": f"{mid}:swp{2 * rail + 2}"}


def write_uplinks(inv: Path, rail: int, ups: dict[str, str]) -> None:
    """Replace the ``uplinks:`` block of leaf ``su1-leaf-r<rail>`` with ``ups``."""
    path = inv / "host_vars" / f"su1-leaf-r{rail}.yml"
    head = path.read_text().split("uplinks:")[0]
    path.write_text(head + "uplinks:\n" + "".join(f"  {k}: {v}\n" for k, v in ups.items()))


@pytest.fixture
def su(tmp_path: Path) -> Path:
    inv = tmp_path / "su"
    shutil.copytree(SU, inv)
    for r in range(8):
        write_uplinks(inv, r, uneven(r))
    return inv


def test_unevenly_cabled_leaves_get_every_spine_and_uplink_covered(su: Path):
    inv = inventory.load(su)
    s = plan_schedule(inv.nodes, inv.switches)
    cabling = {(f"su1-leaf-r{r}", port, far.split(":")[0]) for r in range(8) for port, far in uneven(r).items()}
    assert {(u.leaf, u.port, u.spine) for u in s.topology.uplinks()} == cabling and not s.topology.derived
    assert Counter(u.spine for u in s.topology.uplinks()) == {"su1-spine04": 8, "su1-spine01": 6,
                                                             "su1-spine02": 6, "su1-spine03": 4}
    check(s, inv.nodes, cabling, "uneven SU")  # every NIC, uplink and spine; rounds within the bound
    assert len(s.rounds) <= rounds_upper_bound(s.pairs, s.per_node) <= 10
    assert s.coverage.summary() == "256/256 NICs, 24/24 uplinks, 4/4 spines covered"


def test_without_cabling_the_assumption_is_said_and_would_miss_what_is_cabled(su: Path):
    for r in range(8):
        write_uplinks(su, r, {})
        path = su / "host_vars" / f"su1-leaf-r{r}.yml"
        path.write_text(path.read_text().replace("uplinks:\n", "").replace("swp33-40", "swp33-35"))
    inv = inventory.load(su)
    s = plan_schedule(inv.nodes, inv.switches)
    assert s.topology.derived and len(s.topology.assumed) == 8
    assert s.topology.assumption.startswith("no uplink cabling in the inventory (a leaf's uplinks: key); "
                                            "assumed for 8 leaves: ")
    assert "spine j mod 4" in s.topology.assumption
    assert {u.spine for u in s.topology.uplinks()} == {"su1-spine01", "su1-spine02", "su1-spine03"}  # no spine04
    assert s.coverage.uncoverable == ["spine su1-spine04: no uplink reaches it"]


def test_some_leaves_cabled_others_assumed_names_both(su: Path):
    write_uplinks(su, 7, {})
    path = su / "host_vars" / "su1-leaf-r7.yml"
    path.write_text(path.read_text().replace("uplinks:\n", ""))
    s = plan_schedule(*(lambda i: (i.nodes, i.switches))(inventory.load(su)))
    assert s.topology.assumed == ["su1-leaf-r7"]
    assert s.topology.assumption.startswith("uplinks from the inventory's cabling (the leaves' uplinks: key), 7 of "
                                            "8 leaves; assumed for 1 leaves: ")


@pytest.mark.parametrize("ups, key, text", [
    ({"swp41": "su1-spine01:swp1"}, "uplinks.swp41", "su1-leaf-r0:swp41 is not in su1-leaf-r0's ports"),
    ({"swp5": "su1-spine01:swp1"}, "uplinks.swp5", "is cabled to a NIC"),
    ({"swp33": "su1-leaf-r1:swp33"}, "uplinks.swp33", "'su1-leaf-r1' is not a spine of this inventory"),
    ({"swp33": "spine9:swp1"}, "uplinks.swp33", "allowed: su1-spine01, su1-spine02, su1-spine03, su1-spine04"),
    ({"swp33": "su1-spine01:swp17"}, "uplinks.swp33", "su1-spine01:swp17 is not in su1-spine01's ports"),
    # the second leaf to claim the port is named (r3's swp34 is read after r0's swp33)
    ({"swp33": "su1-spine01:swp7"}, "r3.yml: uplinks.swp34", "su1-spine01:swp7 is already cabled to su1-leaf-r0:swp33"),
    ({"swp33": "su1-spine01"}, "uplinks.swp33", "is not SWITCH:PORT"),
    ({"swp33": "su1-spine01:swp1;reboot"}, "uplinks.swp33", "is not a port"),
])
def test_bad_cabling_is_refused_naming_file_and_key(su: Path, ups: dict, key: str, text: str):
    write_uplinks(su, 0, ups)
    with pytest.raises(InputError) as err:
        inventory.load(su)
    msg = str(err.value)
    assert msg.startswith(str(su / "host_vars" / "su1-leaf-r")) and key in msg and text in msg, msg
    assert "r3.yml" in key or f"su1-leaf-r0.yml: {key}: " in msg
