"""A push never overwrites files edited by hand on an NVUE switch unless told to (issue 21): real SSH
to the lab's NVUE switch, the hand edit injected as an operator does (``fabtune lab inject leaf01
hand-edit FILES``); the lab prints NVUE's own warning (CumulusNetworks/docs FIPS.md, see
tests/switch/data/nvue_config_apply__files_changed_warning.txt)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tests.switch.conftest import leaf
from tests.switch.test_nvue_faults import lab_inject, sw  # noqa: F401 (the fixture)
from tuning.cli import app
from tuning.errors import CommitError
from tuning.switch import nvue_text as text
from tuning.targets import switch as switch_ops

pytestmark = pytest.mark.lab
FILES = "/etc/network/interfaces,/etc/frr/frr.conf"


def test_the_switch_asks_with_the_real_warning(sw) -> None:  # noqa: F811
    inv_dir, drv = sw
    lab_inject(inv_dir, "leaf01", "hand-edit", FILES)
    before = drv.current_revision()
    drv.load_candidate("nv set interface swp5 link mtu 4200\n")
    asked = drv._send("nv config apply", phase="test", until=text.ASK.pattern)
    assert ("Warning: The following files have been changed since the last save, and they WILL be overwritten.\n"
            "\t- /etc/network/interfaces\n\t- /etc/frr/frr.conf\nAre you sure? [y/N]") in asked
    drv._send("N", phase="test")
    assert drv.current_revision() == before and "mtu: 4200" in drv.compare()  # N: nothing applied, still pending


def test_a_commit_refuses_to_overwrite_hand_edits(sw) -> None:  # noqa: F811
    inv_dir, drv = sw
    lab_inject(inv_dir, "leaf01", "hand-edit", FILES)
    before = drv.current_revision()
    drv.load_candidate("nv set interface swp5 link mtu 4300\n")
    with pytest.raises(CommitError, match=r"leaf01 WILL overwrite 2 file\(s\) edited by hand since the last save "
                                          r"\(/etc/network/interfaces, /etc/frr/frr.conf\); answered N, nothing "
                                          rf"applied \(revision {before}\); pass --allow-overwrite-files") as err:
        drv.commit(confirm_within_s=60)
    assert err.value.overwrite_files == FILES.split(",")
    assert drv.current_revision() == before and not drv.has_pending_commit() and drv.compare() == ""


def test_allowed_the_commit_overwrites_them_once(sw) -> None:  # noqa: F811
    inv_dir, drv = sw
    lab_inject(inv_dir, "leaf01", "hand-edit", "/etc/frr/frr.conf")
    before = drv.current_revision()
    drv.allow_overwrite_files = True
    drv.load_candidate("nv set interface swp5 link mtu 4400\n")
    rev = drv.commit()
    assert rev != before and drv.current_revision() == rev
    assert "nv set interface swp5 link mtu 4400" in drv.running_config()
    drv.allow_overwrite_files = False  # the files are NVUE's again: the next apply warns of nothing
    drv.load_candidate("nv set interface swp5 link mtu 4500\n")
    assert drv.commit() not in (before, rev)
    drv.rollback_to(before)


def test_fabtune_apply_refuses_then_overwrites_when_allowed(sw, tmp_path) -> None:  # noqa: F811
    """The operator's view: ``fabtune apply`` names the switch and the files and applies nothing on it;
    with ``--allow-overwrite-files`` the same apply goes through and is read back."""
    inv_dir, drv = sw
    lab_inject(inv_dir, "leaf01", "hand-edit", "/etc/cumulus/switchd.d/qos.conf")
    before = drv.current_revision()
    args = ["apply", "-i", str(inv_dir), "--limit", "leaf01", "--journal-dir", str(tmp_path), "--json"]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 1, refused.output
    assert ("leaf01 WILL overwrite 1 file(s) edited by hand since the last save (/etc/cumulus/switchd.d/qos.conf); "
            f"answered N, nothing applied (revision {before})") in refused.output
    assert drv.current_revision() == before and not drv.has_pending_commit()
    allowed = CliRunner().invoke(app, [*args, "--allow-overwrite-files"])
    assert allowed.exit_code == 0, allowed.output
    after = drv.current_revision()
    assert after != before and '"outcome": "applied"' in allowed.output
    dev = leaf(inv_dir)
    assert switch_ops.plan(dev, switch_ops.collect(drv, dev)) == []  # the switch holds every line now
    drv.rollback_to(before)
