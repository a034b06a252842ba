"""Journals given to ``rollback`` (from the fuzz tester's test_fuzz_lab.py). A rollback replays the
journal's commands as root, so, as sshd's StrictModes: a journal (or journal directory) that another
user owns or that group/others may write is refused; a journal of the wrong shape is refused with
one line naming the file and the key path, before any device is contacted; new journals are 0600
in 0700 directories. A journal its owner edited by hand stays the owner's business."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.adversarial._cli import adv_lab, assert_one_line, cli  # noqa: F401 - adv_lab is a fixture
from tests.conftest import snapshot_fabric

RID = "20261130T000000-f00f00"


def _journal(lab: Path, jdir: Path, mutate) -> Path:
    """A journal of a run that changed node01's MTU on enp12s0np0 (1500 -> 9000) and left leaf01 alone."""
    from tuning import inventory
    from tuning.targets.base import connection_facts

    inv = inventory.load(lab)
    ch = {"device": "node01", "domain": "mtu", "key": "mtu/enp12s0np0", "before": "1500", "after": "9000",
          "apply_cmd": "ip link set dev enp12s0np0 mtu 9000", "restore_cmd": "ip link set dev enp12s0np0 mtu 1500",
          "read_cmd": "cat sysroot/sys/class/net/enp12s0np0/mtu", "reversible": True}
    doc = {"run_id": RID, "inventory": str(lab), "mode": "apply", "stage": "done", "outcome": "applied",
           "started": 1.0, "events": [], "verify": {}, "devices": {
               "node01": {"role": "node", "platform": "linux", "state": "applied", "changes": [dict(ch)], "applied": [dict(ch)],
                          "connection": connection_facts(inv.devices["node01"].connection)},
               "leaf01": {"role": "switch", "platform": "nvue", "state": "unchanged", "revision_before": "1",
                          "revision": None, "connection": connection_facts(inv.devices["leaf01"].connection)}}}
    mutate(doc)
    jdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = jdir / f"{RID}.json"
    path.write_text(json.dumps(doc))
    path.chmod(0o600)
    return path


def _n(doc: dict) -> dict:
    return doc["devices"]["node01"]


def _conn(doc: dict) -> dict:
    return _n(doc)["connection"]


TAMPERED = [
    ("node01 null", "devices.node01", lambda d: d["devices"].__setitem__("node01", None)),
    ("node01 a list", "devices.node01", lambda d: d["devices"].__setitem__("node01", [1])),
    ("applied a string", "devices.node01.applied", lambda d: _n(d).__setitem__("applied", "x")),
    ("applied [null]", "devices.node01.applied.0", lambda d: _n(d).__setitem__("applied", [None])),
    ("applied [1]", "devices.node01.applied.0", lambda d: _n(d).__setitem__("applied", [1])),
    ("change key an int", "devices.node01.applied.0.key", lambda d: _n(d)["applied"][0].update(key=1)),
    ("change before an int", "devices.node01.applied.0.before", lambda d: _n(d)["applied"][0].update(before=1500)),
    ("restore_cmd a list", "devices.node01.applied.0.restore_cmd",
     lambda d: _n(d)["applied"][0].update(restore_cmd=["touch", "x"])),
    ("change missing fields", "devices.node01.applied.0", lambda d: _n(d).__setitem__("applied", [{"key": "mtu/x"}])),
    ("change extra field", "devices.node01.changes.0",
     lambda d: _n(d).__setitem__("changes", [{**_n(d)["changes"][0], "sudo": True}])),
    ("platform unknown", "devices.leaf01.platform", lambda d: d["devices"]["leaf01"].__setitem__("platform", "nosuch")),
    ("role unknown", "devices.node01.role", lambda d: _n(d).__setitem__("role", "nosuch")),
    ("state a list", "devices.node01.state", lambda d: _n(d).__setitem__("state", ["applied"])),
    ("state unknown", "devices.node01.state", lambda d: _n(d).__setitem__("state", "done")),
    ("restored a string", "devices.node01.restored", lambda d: _n(d).__setitem__("restored", "no")),
    ("revision an int", "devices.leaf01.revision", lambda d: d["devices"]["leaf01"].__setitem__("revision", 4)),
    ("connection port a string", "devices.node01.connection.port", lambda d: _conn(d).__setitem__("port", "x")),
    ("connection port 0", "devices.node01.connection.port", lambda d: _conn(d).__setitem__("port", 0)),
    ("connection port 70000", "devices.node01.connection.port", lambda d: _conn(d).__setitem__("port", 70000)),
    ("connection port a bool", "devices.node01.connection.port", lambda d: _conn(d).__setitem__("port", True)),
    ("connection missing host", "devices.node01.connection.hostname", lambda d: _conn(d).pop("hostname")),
    ("connection unknown key", "devices.node01.connection.password", lambda d: _conn(d).__setitem__("password", "x")),
    ("sysroot with a shell", "devices.node01.connection.sysroot",
     lambda d: _conn(d).__setitem__("sysroot", "/;touch /tmp/x")),
    ("sysroot with a newline", "devices.node01.connection.sysroot", lambda d: _conn(d).__setitem__("sysroot", "/x\ny")),
    ("key file relative", "devices.node01.connection.key_file", lambda d: _conn(d).__setitem__("key_file", "k")),
    ("become_method su", "devices.node01.connection.become_method",
     lambda d: _conn(d).__setitem__("become_method", "su")),
    ("device name a path", "devices.../x", lambda d: d["devices"].__setitem__("../x", d["devices"].pop("node01"))),
    ("started a string", "started", lambda d: d.__setitem__("started", "yesterday")),
    ("inventory a list", "inventory", lambda d: d.__setitem__("inventory", ["x"])),
]


@pytest.mark.parametrize("name,key,mutate", TAMPERED, ids=[t[0] for t in TAMPERED])
def test_tampered_journal_refused_with_one_line(adv_lab: Path, tmp_path: Path, name, key, mutate):
    path = _journal(adv_lab, tmp_path / "j", mutate)
    code, _, err = cli("rollback", "--journal-dir", str(tmp_path / "j"), RID, cwd=tmp_path)
    assert_one_line(code, err, f"{path}: {key}: ")


def test_tampered_journal_listed_as_unreadable_by_runs(adv_lab: Path, tmp_path: Path):
    _journal(adv_lab, tmp_path / "j", lambda d: _n(d).__setitem__("state", ["applied"]))
    code, out, err = cli("runs", "--journal-dir", str(tmp_path / "j"), "--json", cwd=tmp_path)
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["stage"] == "unreadable" and "devices.node01.state" in row["outcome"]


def _edited(lab: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A journal whose restore_cmd was hand-edited to leave a marker (the attack the tester found)."""
    marker = tmp_path / "PWNED-restore"
    path = _journal(lab, tmp_path / "j", lambda d: _n(d)["applied"][0].update(
        restore_cmd=f"touch {marker}; ip link set dev enp12s0np0 mtu 1500"))
    return path, marker


@pytest.mark.parametrize("what", ["file 0660", "file 0606", "dir 0770", "dir 0777", "file foreign", "dir foreign"])
def test_journal_others_could_write_is_not_run_as_root(adv_lab: Path, tmp_path: Path, monkeypatch, what):
    """rollback replays restore_cmd as root: a journal or journal directory another user owns, or that
    group/others may write, is refused (StrictModes), one line, before anything is contacted."""
    path, marker = _edited(adv_lab, tmp_path)
    target = path if what.startswith("file") else path.parent
    if what.endswith("foreign"):
        if os.geteuid() == 0:
            os.chown(target, 65534, 65534)
        else:  # an unprivileged tester cannot give a file away: become someone else instead
            monkeypatch.setattr(os, "geteuid", lambda: target.stat().st_uid + 1)
    else:
        target.chmod(int(what.split()[1], 8))
    before = snapshot_fabric(adv_lab)
    code, _, err = cli("rollback", "--journal-dir", str(path.parent), RID, cwd=tmp_path)
    assert not marker.exists(), f"rollback ran a command from a journal others could write (exit {code})"
    assert_one_line(code, err, str(target), "owner" if what.endswith("foreign") else "group/world-writable")
    assert snapshot_fabric(adv_lab) == before


def test_journal_edited_by_its_owner_is_the_owners_business(adv_lab: Path, tmp_path: Path):
    """A 0600 journal in a 0700 directory of the invoking user is trusted like the user's own root
    script: its (well-formed) commands run."""
    path, marker = _edited(adv_lab, tmp_path)
    code, out, err = cli("rollback", "--journal-dir", str(path.parent), RID, cwd=tmp_path)
    assert code == 0, err[-500:]
    assert marker.exists() and "rolled back" in out


def test_new_journals_are_private(tmp_path: Path):
    """Journals and baselines are written 0600 in 0700 directories whatever the umask."""
    from tuning.rollout.journal import Journal
    from tuning.rollout.baseline import save_baseline

    old = os.umask(0o002)
    try:
        j = Journal.create(tmp_path / "j" / "deep", str(tmp_path), "apply", "20261130T000000-aaaaaa")
        j.save()
        save_baseline(tmp_path / "j" / "deep", tmp_path, {"p": {}})
    finally:
        os.umask(old)
    assert (j.path.stat().st_mode & 0o777, j.path.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    (b,) = (tmp_path / "j" / "deep" / "baselines").iterdir()
    assert b.stat().st_mode & 0o777 == 0o600
    assert Journal.load(j.path.parent, j.run_id).run_id == j.run_id


def test_a_run_not_in_the_journal_folder_names_the_recent_runs_and_the_flag(tmp_path: Path):
    """issue 21's tryout: a run id typed against the default folder said only 'no journal'."""
    from tuning.errors import InputError
    from tuning.rollout.journal import Journal

    j = Journal.create(tmp_path, str(tmp_path), "apply", "20261130T000000-aaaaaa", started=1764460800.0)
    assert j.data["started"] == 1764460800.0
    with pytest.raises(InputError) as e:
        Journal.load(tmp_path, "20261130T000000-bbbbbb")
    assert str(e.value).endswith("recent runs: 20261130T000000-aaaaaa (a run that wrote its journal elsewhere: "
                                 "pass its --journal-dir)")
