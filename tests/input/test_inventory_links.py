"""An inventory's files are read only as the inventory's owner could read them (issue 19, new-user
finding 5): run as root on someone else's inventory, a ``group_vars/all.yml`` linked to
``/etc/shadow`` (or any file its owner may not read) is refused, naming the file, instead of being
parsed (and its keys echoed in errors). A link to a file the owner may read still works, as Ansible
follows links; an inventory root owns is read as before."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO
from tuning import inventory
from tuning.errors import InputError

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the case is root reading another user's "
                                "inventory (as a normal user, every file read is already the user's own right)")


def _inventory(tmp_path: Path, owner: int) -> Path:
    inv = tmp_path / "inv"
    shutil.copytree(REPO / "inventory" / "lab", inv, ignore=shutil.ignore_patterns(".state"))
    for folder, dirs, files in os.walk(inv):
        for name in [folder, *(os.path.join(folder, f) for f in dirs + files)]:
            os.lchown(name, owner, -1)
    return inv


def test_a_link_to_a_file_the_owner_may_not_read_is_refused(tmp_path: Path):
    secret = tmp_path / "secret.yml"
    secret.write_text("site_password: hunter2\n")
    secret.chmod(0o600)  # root's own file
    inv = _inventory(tmp_path, NOBODY)
    gv = inv / "group_vars" / "all.yml"
    gv.unlink()
    gv.symlink_to(secret)
    with pytest.raises(InputError) as e:
        inventory.load(inv)
    assert str(e.value) == (f"{gv}: -: uid {NOBODY}, who owns the inventory, may not read it (owner uid 0, mode "
                            "0600); fabtune reads an inventory's files only as its owner could (a link to another "
                            "user's file is refused)")
    assert "hunter2" not in str(e.value) and "site_password" not in str(e.value)
    secret.chmod(0o644)  # now anyone, the owner too, may read it: a shared vars file, as Ansible follows links
    assert inventory.load(inv).devices["node01"].spec.mtu == 9000
    hosts = inv / "hosts.yaml"  # the host list is read the same way
    shutil.copy(hosts, tmp_path / "hosts.yaml")
    (tmp_path / "hosts.yaml").chmod(0o600)
    hosts.unlink()
    hosts.symlink_to(tmp_path / "hosts.yaml")
    with pytest.raises(InputError, match="hosts.yaml: -: uid 65534, who owns the inventory, may not read it"):
        inventory.load(inv)


def test_an_inventory_root_owns_reads_any_link_as_before(tmp_path: Path):
    secret = tmp_path / "shared.yml"
    secret.write_text((REPO / "inventory" / "lab" / "group_vars" / "all.yml").read_text())
    secret.chmod(0o600)
    inv = _inventory(tmp_path, 0)
    gv = inv / "group_vars" / "all.yml"
    gv.unlink()
    gv.symlink_to(secret)
    assert inventory.load(inv).devices["node01"].spec.mtu == 9000
