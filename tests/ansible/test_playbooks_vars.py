"""The Ansible front end takes each host's variables from Ansible (issue 9): ``-e`` JSON and
``group_vars/<group>/`` folders change the plan as they would for any role; ``-e mtu=4200`` (a
string) is one clear line with the JSON hint; a vault-encrypted become password works through
Ansible's own decryption and is never printed; a host that does not answer is reported
unreachable, not failed. Check mode against the lab over real SSH (nothing pushed). Plus: the
whole-inventory validation from hostvars equals :func:`tuning.inventory.load`, and the journal's
updates from several processes at once are never lost.
"""

from __future__ import annotations

import multiprocessing
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ansible.playbook_run import REPO, play
from tests.conftest import snapshot_fabric
from tuning import inventory, inventory_vars
from tuning.errors import InputError
from tuning.node.base import Change
from tuning.model.layout import parse_tree
from tuning.rollout.journal import Journal

pytestmark = pytest.mark.ansible
ONE = ("--check", "--diff", "--tags", "mtu", "--limit", "node01,node02,leaf01")
CANARY = "Canary-S3cret-9f2e"


def _mtu_after(out: str) -> set[str]:
    return {line.split(" = ")[1] for line in out.splitlines() if line.startswith("+mtu/")}


def test_extra_vars_group_vars_folders_vault_and_unreachable(lab_inventory: Path, tmp_path: Path) -> None:
    inv = lab_inventory
    untuned = snapshot_fabric(inv)
    base = play(inv, "tune.yml", *ONE)
    assert base.rc == 0, base.out[-3000:]
    assert _mtu_after(base.out) == {"9000"}

    json_e = play(inv, "tune.yml", *ONE, "-e", '{"mtu": 4200}')
    assert json_e.rc == 0, json_e.out[-3000:]
    assert _mtu_after(json_e.out) == {"4200"}  # extra vars win, as for any role

    text_e = play(inv, "tune.yml", *ONE, "-e", "mtu=4200")
    assert text_e.rc == 2
    assert ("ansible hostvars of node01: mtu: '4200' is a str; allowed: an integer in 68..9216 (host node01); "
            "an -e KEY=VALUE extra var is always a string: pass JSON instead, e.g. -e '{\"mtu\": 4200}'") in text_e.out

    gv = inv / "group_vars"
    (gv / "gpu_nodes").mkdir()
    shutil.move(gv / "gpu_nodes.yml", gv / "gpu_nodes" / "10-profile.yml")
    (gv / "gpu_nodes" / "20-site.yml").write_text("mtu: 4000\n")  # a later file of the folder wins
    folder = play(inv, "tune.yml", *ONE)
    assert folder.rc == 0, folder.out[-3000:]
    assert _mtu_after(folder.out) == {"4000"}

    secret = tmp_path / "vault-pass"
    secret.write_text("vault-pw\n")
    enc = subprocess.run([str(Path(sys.executable).parent / "ansible-vault"), "encrypt_string", "--vault-password-file",
                          str(secret), CANARY, "--name", "ansible_become_password"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    node01 = inv / "host_vars" / "node01.yml"
    node01.write_text(node01.read_text() + enc)
    (inv / "host_vars" / "node02.yml").write_text((inv / "host_vars" / "node02.yml").read_text() + "ansible_port: 1\n")
    mixed = play(inv, "tune.yml", *ONE, "-vvv", "--vault-password-file", str(secret))
    assert CANARY not in mixed.out
    assert mixed.recap["node01"]["failed"] == 0 and mixed.recap["node01"]["changed"] == 1, mixed.out[-3000:]
    assert (mixed.recap["node02"]["unreachable"], mixed.recap["node02"]["failed"]) == (1, 0), mixed.recap
    assert snapshot_fabric(inv) == untuned  # check mode all along


def test_from_hostvars_validates_as_load() -> None:
    """The same devices, connections and policy from Ansible-resolved variables as from the files."""
    for path in (REPO / "inventory" / "lab",):
        hv = inventory.resolved_vars(path)
        tree = parse_tree(path / "hosts.yaml")
        groups = {h: [g for g in tree.groups_of(h) if g != "all"] for h in hv}
        a, b = inventory.load(path), inventory_vars.from_hostvars(path, hv, groups)
        assert list(a.devices) == list(b.devices) and a.policy == b.policy
        for n, dev in a.devices.items():
            assert (dev.spec, dev.connection, dev.groups) == (b.devices[n].spec, b.devices[n].connection,
                                                              b.devices[n].groups)
        hv["node03"]["nic_qos"] = {**hv["node03"]["nic_qos"], "pfc_priorty": 3}
        with pytest.raises(InputError, match=r"^ansible hostvars of node03: nic_qos\.pfc_priorty: "):
            inventory_vars.from_hostvars(path, hv, groups)


def _writer(path: str, name: str, n: int) -> None:
    j = Journal.load(Path(path).parent, Path(path).stem)
    j.shared = True
    for i in range(n):
        change = Change(name, "mtu", "mtu/enp12s0np0", "1500", str(9000 + i)).as_dict()
        j.update(name, role="node", applied=[change], state="applied")
        j.stage("apply", f"{name} {i}")  # a whole-document save too


def test_shared_journal_keeps_every_process_update(tmp_path: Path) -> None:
    j = Journal.create(tmp_path / "j", "inventory/lab", "rollout", shared=True)
    names = [f"node{i:02d}" for i in range(1, 7)]
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(j.path), n, 20)) for n in names]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * len(names)
    doc = Journal.load(tmp_path / "j", j.run_id).data
    assert {n: doc["devices"][n]["applied"][0]["after"] for n in names} == {n: "9019" for n in names}
    assert len(doc["events"]) >= 20  # the document stays whole (each stage saved by some process)


def test_shared_journal_keeps_the_owners_new_records(tmp_path: Path) -> None:
    """A stage owner's records not yet on disk (begin's snapshot of every selected device) survive
    the merge with the file, as the file's own records do."""
    j = Journal.create(tmp_path / "j", "inventory/lab", "rollout", shared=True)
    j.update("node01", role="node", state="applied")
    j.device("node02").update(role="node", batch=2)  # in memory only, as begin writes its snapshot
    j.device("node01")["batch"] = 1
    j.stage("snapshot")
    doc = Journal.load(tmp_path / "j", j.run_id).data["devices"]
    assert doc == {"node01": {"role": "node", "state": "applied", "batch": 1}, "node02": {"role": "node", "batch": 2}}
