"""``playbooks/tune.yml`` against the lab over real SSH (issue 9): ``--check --diff`` of every domain
changes no byte on any lab device and reads no inventory file (per-host cost flat: each task builds
only its own host from Ansible's variables); the real run (unverified: the verified gate has its own
modules, test_playbooks_gate*.py) changes the devices under ONE run id and journal; a second run
reports changed=0; ``rollback.yml -e run_id=...`` restores every device.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.ansible.playbook_run import journals, play
from tests.conftest import snapshot_fabric
from tuning import node

pytestmark = pytest.mark.ansible

#: wraps (and calls through) the inventory functions in every Python process of a playbook run and
#: writes one line per call: how many times the inventory files are read, and per host how many
#: devices are built
COUNTER = '''
import functools, os
import tuning.inventory, tuning.inventory_vars

_inside = []  # from_hostvars builds every device itself: only calls from outside it are counted

def _wrap(mod, name):
    f = getattr(mod, name)
    @functools.wraps(f)
    def call(*a, **k):
        host = a[1] if name == "device_from_vars" else "-"
        if not (name == "device_from_vars" and "from_hostvars" in _inside):
            with open(os.environ["FABTUNE_TEST_CALLS"], "a") as fh:
                fh.write(f"{name} {host}\\n")
        _inside.append(name)
        try:
            return f(*a, **k)
        finally:
            _inside.pop()
    setattr(mod, name, call)

for _n in ("load", "parse_tree", "resolved_vars"):
    _wrap(tuning.inventory, _n)
for _n in ("device_from_vars", "from_hostvars"):
    _wrap(tuning.inventory_vars, _n)
'''
MTU = "sys/class/net/enp12s0np0/mtu"
TAGS = "mtu,sysctl,switch"


def _changed(before: dict, after: dict) -> list[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def test_check_diff_every_domain_then_run_then_idempotent_then_rollback(lab_inventory: Path, tmp_path: Path) -> None:
    inv, journal = lab_inventory, tmp_path / "journal"
    untuned = snapshot_fabric(inv)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(COUNTER)
    calls = tmp_path / "calls.txt"

    check = play(inv, "tune.yml", "--check", "--diff", journal=journal,
                 env={"PYTHONPATH": str(hook), "FABTUNE_TEST_CALLS": str(calls)})
    assert check.rc == 0, check.out[-3000:]
    assert _changed(untuned, snapshot_fabric(inv)) == []  # check mode: no byte on any device
    assert not journal.exists() or journals(journal) == []
    for line in (f"+{'mtu/enp12s0np0'} = 9000", "+net.core.rmem_max = 268435456", "+roce/mode = lossless"):
        assert line in check.out, line
    assert all(check.recap[h]["changed"] > 0 for h in ("node01", "leaf01", "spine01")), check.recap
    seen = Counter(tuple(line.split()) for line in calls.read_text().splitlines())
    assert seen[("load", "-")] == seen[("parse_tree", "-")] == seen[("resolved_vars", "-")] == 0, seen
    assert seen[("from_hostvars", "-")] == 3  # begin, the batch gate, end (the switch play's gate is skipped)
    # each host's task builds that host alone, once: the cost per host is flat in the fleet size
    assert seen[("device_from_vars", "node01")] == len(node.domains()), seen
    assert seen[("device_from_vars", "leaf01")] == 1, seen

    run = play(inv, "tune.yml", "--tags", TAGS, "-e", '{"fabtune_verify": false}', journal=journal)
    assert run.rc == 0, run.out[-3000:]
    docs = journals(journal)
    assert len(docs) == 1, [d["run_id"] for d in docs]  # one run id for every host and task
    doc = docs[0]
    assert (doc["engine"], doc["outcome"], doc["mode"]) == ("ansible", "applied", "apply")
    assert [b["outcome"] for b in doc["batches"]] == ["kept"]
    assert all(doc["devices"][s].get("confirmed") for s in ("leaf01", "leaf02", "spine01"))
    tuned = snapshot_fabric(inv)
    assert all(tuned[f"node0{i}:{MTU}"] == b"9000\n" for i in range(1, 5))
    assert tuned["leaf01:running-config"] != untuned["leaf01:running-config"]
    assert not (inv / ".fabtune.lock").exists()  # end released the lock
    rep = subprocess.run([sys.executable, "-m", "tuning", "report", doc["run_id"], "--journal-dir", str(journal),
                          "--json"], capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr
    assert json.loads(rep.stdout)["outcome"] == "applied"

    again = play(inv, "tune.yml", "--tags", TAGS, "-e", '{"fabtune_verify": false}', journal=journal)
    assert again.rc == 0, again.out[-3000:]
    assert set(again.changed().values()) == {0}, again.recap

    back = play(inv, "rollback.yml", "-e", f"run_id={doc['run_id']}", journal=journal)
    assert back.rc == 0, back.out[-3000:]
    now = snapshot_fabric(inv)
    assert [k for k in _changed(untuned, now) if not k.endswith(":revision")] == []  # every byte back
    assert journals(journal)[0]["outcome"].startswith("rolled-back")
