"""``fabtune node apply --plan FILE`` and ``fabtune node verify`` (node-local mode, issue 23) on a
lab node's sysroot in this process's machine, each command run as a Slurm task of the lab runs it
(node01's environment, ``FABTUNE_SYSROOT`` its sysroot). The plan file is the controller's plan of
node01 (read as the lab's SSH server runs the engine's collect). A node whose settings moved after
the plan writes nothing and names the setting; a node as planned pushes exactly the file's changes;
verify reads each planned value back and names one a person undid; restore puts every byte back.
The Slurm and Kubernetes lab tests run the same through the real srun and the agents."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.adversarial._cli import cli
from tests.conftest import REPO
from tests.node.conftest import node_files, on_node
from tuning import node
from tuning.lab.localnode import lab_node
from tuning.rollout import plan_file
from tuning.rollout.journal import Journal

NODE = "node01"
LAB = REPO / "inventory" / "lab"
RUN = "20261204T2200-abcdef"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the stand-ins refuse privileged writes to a non-root "
                                "user, as the kernel does (the lab tests cover sudo)")


def _on_node(state, *args: str) -> subprocess.CompletedProcess:
    """``fabtune ARGS`` as a Slurm task of the lab runs it on node01."""
    return on_node(state, NODE, *args)


def _run(jdir, batches: tuple[list[str], ...] = (["node01", "node02"],)) -> Journal:
    """A run a Slurm front end began (its journal, as the controller writes it before any push):
    ``batches`` of nodes, none pushed yet."""
    j = Journal.create(jdir, str(LAB), "rollout", run_id=RUN)
    j.data["engine"] = "slurm"
    j.data["batches"] = [{"index": i, "nodes": b, "switches": [], "outcome": "not-run"}
                         for i, b in enumerate(batches, 1)]
    for i, b in enumerate(batches, 1):
        for n in b:
            j.device(n).update(role="node", batch=i)  # as the controller's snapshot record has them
    j.save()
    return j


def test_a_scheduler_run_takes_a_push_only_for_the_batch_being_pushed(tmp_path):
    from tuning.errors import InputError
    from tuning.rollout.journal_check import refuse_push

    j = _run(tmp_path, (["node01"], ["node02"]))
    refuse_push(j, "node01")  # batch 1 is the one being pushed
    for node, words in (("node02", "node02 is in batch 2 of this run, and batch 1 is the one being pushed"),
                        ("node03", "node03 is in no batch of this run")):
        with pytest.raises(InputError, match=words + ": it takes no push now; nothing written"):
            refuse_push(j, node)
    j.data["batches"][0]["outcome"] = "kept"
    refuse_push(j, "node02")
    j.device("node02")["restored"] = True
    with pytest.raises(InputError, match="node02 was restored in this run"):
        refuse_push(j, "node02")
    j.data["batches"][1]["outcome"] = "restored"
    with pytest.raises(InputError, match="node01 is in batch 1 of this run, and no batch is being pushed"):
        refuse_push(j, "node01")
    j.data["engine"] = None  # the Ansible front end's hosts push per task, batch order kept by Ansible itself
    refuse_push(j, "node01")


def test_a_node_pushes_exactly_its_plan_file_or_nothing_and_verify_reads_it_back(laid, tmp_path):
    state, dev = laid
    sysroot = state / "nodes" / NODE / "sysroot"
    untuned = node_files(sysroot)
    planned = [c.as_dict() for c in node.plan(dev, node.collect(lab_node(state, NODE), dev, only={"mtu"}))
               if c.domain == "mtu"]
    assert len(planned) == 8 and all(c["before"] == "1500" and c["after"] == "9000" for c in planned)
    jdir = tmp_path / "journal"
    _run(jdir)
    plan = plan_file.write(plan_file.path_for(jdir, RUN, "apply-b1"), RUN, {NODE: planned, "node02": planned})
    apply = ("node", "apply", "-i", str(LAB), "--run-id", RUN, "--journal-dir", str(jdir), "--plan", str(plan),
             "-d", "mtu", "--json")

    # someone set one NIC's MTU after the plan was made: the node's plan is not the file's
    moved = sysroot / "sys/class/net/enp12s0np0/mtu"
    moved.write_text("4200\n")
    r = _on_node(state, *apply)
    assert r.returncode == 1, (r.stdout, r.stderr[-2000:])
    assert "not as planned, nothing written" in r.stderr and \
        "mtu/enp12s0np0: planned '1500' -> '9000', '4200' -> '9000' now" in r.stderr, r.stderr[-2000:]
    assert node_files(sysroot) == {**untuned, "sys/class/net/enp12s0np0/mtu": b"4200\n"}  # nothing else written
    assert "state" not in Journal.load(jdir, RUN).data["devices"][NODE]  # not even a `pushing` record

    # as planned again: exactly the file's changes pushed, each read back
    moved.write_text("1500\n")
    r = _on_node(state, *apply)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["pushed"] is True and [(c["key"], c["before"], c["after"]) for c in doc["changes"]] == \
        [(c["key"], c["before"], c["after"]) for c in planned]
    assert moved.read_text() == "9000\n"

    verify = ("node", "verify", "-i", str(LAB), "--plan", str(plan))
    r = _on_node(state, *verify)
    assert r.returncode == 0 and r.stdout.strip() == f"{NODE}: 8 planned change(s) in force", (r.stdout, r.stderr)
    moved.write_text("1500\n")  # a person undid one
    r = _on_node(state, *verify, "--json")
    assert r.returncode == 1, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["in_force"] is False and doc["checked"] == 8 and doc["drift"] == [
        {"domain": "mtu", "key": "mtu/enp12s0np0", "want": "9000", "have": "1500"}]
    r = _on_node(state, *verify[:-2], "-d", "mtu")  # against the inventory: the same NIC left to change
    assert r.returncode == 1 and "1 of " in r.stdout and "mtu/enp12s0np0 reads '1500', want '9000'" in r.stdout, r.stdout
    r = _on_node(state, *verify[:-2], "-d", "sm")  # a node has no subnet manager setting: a check of nothing fails
    assert r.returncode == 2 and "--domain: sm: no setting read: nothing to check" in r.stderr, (r.stdout, r.stderr)

    r = _on_node(state, "node", "restore", "--run-id", RUN, "--journal-dir", str(jdir))
    assert r.returncode == 0, r.stderr[-2000:]
    assert node_files(sysroot) == untuned  # byte for byte
    # restored in this run: a second push would be one no rollback undoes (the journal says restored)
    r = _on_node(state, *apply)
    assert r.returncode == 2 and "node01 was restored in this run: it takes no push now" in r.stderr, r.stderr
    assert node_files(sysroot) == untuned
    r = _on_node(state, *verify[:-2], "--plan", str(plan_file.write(tmp_path / "other.json", RUN, {"node02": planned})))
    assert r.returncode == 2 and "changes.node01: no change planned for node01: nothing to check" in r.stderr, r.stderr


def test_a_difference_names_what_moved():
    mtu = {"domain": "mtu", "key": "mtu/enp12s0np0", "before": "1500", "after": "9000"}
    assert plan_file.differences([mtu], [mtu]) == []
    assert plan_file.differences([mtu], [{**mtu, "domain": "sysctl"}]) == [
        "mtu/enp12s0np0: planned in domain 'mtu', in 'sysctl' now"]
    assert plan_file.differences([mtu], [{**mtu, "before": "4200"}]) == [
        "mtu/enp12s0np0: planned '1500' -> '9000', '4200' -> '9000' now"]
    assert plan_file.differences([], [mtu]) == ["mtu/enp12s0np0: not planned, '1500' -> '9000' now"]


def test_a_failed_script_is_named_by_its_first_line():
    from tuning.errors import CommandError

    e = CommandError("r() { read -r x < \"$2\"; }\nr mtu/a /sys/a\nr mtu/b /sys/b", 1, "sudo: no\n")
    assert str(e) == "`r() { read -r x < \"$2\"; } ... (3 lines)` exited 1: sudo: no" and "\n" in e.command


BAD = {
    "not JSON": (b"{changes:", ["not JSON"]),
    "a list": (b"[]", ["changes", "missing or not an object"]),
    "changes a list": (b'{"changes": []}', ["changes", "missing or not an object"]),
    "node not a list": (b'{"changes": {"node01": {}}}', ["changes.node01", "not a list"]),
    "change not an object": (b'{"changes": {"node01": ["mtu/x"]}}', ["changes.node01[0]", "not a change object"]),
    "key a number": (b'{"changes": {"node01": [{"domain": "mtu", "key": 7, "before": "1", "after": "2"}]}}',
                     ["changes.node01[0].key", "int, want a string"]),
    "after a list": (b'{"changes": {"node01": [{"domain": "mtu", "key": "k", "before": "1", "after": []}]}}',
                     ["changes.node01[0].after", "list, want a string or null"]),
    "another device's change": (b'{"changes": {"node01": [{"device": "node02", "domain": "mtu", "key": "k", '
                                b'"before": "1", "after": "2"}]}}', ["changes.node01[0].device", "want 'node01'"]),
    "another run": (b'{"run_id": "20261101T0000-aaaaaa", "changes": {}}', ["run_id", "not of --run-id"]),
    "an offline plan": (b'{"mode": "offline-plan", "changes": {}}', ["mode", "an offline plan"]),
    "a device no host name": (b'{"changes": {"node02 ;id": []}}', ["changes.'node02 ;id'", "host name"]),
    "a key twice": (b'{"changes": {"node01": [' + b','.join([b'{"domain": "mtu", "key": "mtu/x", "before": "1", '
                                                            b'"after": "2"}'] * 2) + b']}}',
                    ["changes.node01[1].key", "'mtu/x' is planned twice (also [0])"]),
    "a key with a newline": (b'{"changes": {"node01": [{"domain": "mtu", "key": "mtu/x\\nX", "before": "1", '
                             b'"after": "2"}]}}', ["changes.node01[0].key", "printable characters without spaces"]),
    "an unknown domain": (b'{"changes": {"node01": [{"domain": "bios", "key": "k", "before": "1", "after": "2"}]}}',
                          ["changes.node01[0].domain", "'bios', want one of services, "]),
}


@pytest.mark.parametrize("name", list(BAD))
def test_a_bad_plan_file_is_one_line_exit_2_before_anything(name, tmp_path):
    text, words = BAD[name]
    plan = tmp_path / "plan.json"
    plan.write_bytes(text)
    code, out, err = cli("node", "apply", "-i", str(LAB), "--node", NODE, "--run-id", RUN, "--journal-dir",
                         str(tmp_path / "nowhere"), "--plan", str(plan))
    assert code == 2, (out, err)
    line = err.strip()
    assert len(line.splitlines()) == 1 and line.startswith("fabtune: error:") and "Traceback" not in line, line
    assert all(w in line for w in words), line
    assert not (tmp_path / "nowhere").exists()
    code, _, err = cli("node", "apply", "-i", str(LAB), "--node", NODE, "--check", "--plan", str(tmp_path / "none"))
    assert code == 2 and "--plan" in err and "cannot read it" in err, err
