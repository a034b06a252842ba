"""``fabtune node collect`` (node-local mode, issue 23) against the controller's own collect, on a
lab node's sysroot in this process's machine: the node command runs as a Slurm task of the lab runs
it (its node's environment, ``FABTUNE_SYSROOT`` the node's sysroot), the reference read as the
lab's SSH server runs the engine's collect (:func:`tuning.lab.localnode.lab_node`). The state the
controller rebuilds from the document must be the very NodeState, so the plan and findings are
identical. The Slurm lab tests prove the same through the real srun and SSH."""

from __future__ import annotations

import base64
import json
import os
import subprocess

import pytest

from tests.conftest import REPO
from tests.node.conftest import on_node
from tuning import node
from tuning.lab.localnode import lab_node
from tuning.errors import TuningError
from tuning.node_local_state import state_from_doc

NODE = "node01"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the stand-ins refuse privileged reads to a non-root "
                                "user, as the kernel does (the lab tests cover sudo)")


def _node_collect(state, *args: str) -> subprocess.CompletedProcess:
    """``fabtune node collect`` as a Slurm task of the lab runs it on node01."""
    return on_node(state, NODE, "node", "collect", "-i", str(REPO / "inventory" / "lab"), *args)


def test_node_collect_document_gives_the_controllers_state_plan_and_findings(laid):
    state, dev = laid
    host = lab_node(state, NODE)  # the controller's collect, as the lab's SSH server runs it
    ssh = node.collect(host, dev)
    # at the sysroot the controller sees (a real node: / both ways): the very NodeState
    r = _node_collect(state, "--json", "--sysroot", dev.connection.sysroot)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["node"] == NODE and doc["domains"] is None
    assert state_from_doc(doc, NODE, dev.connection.sysroot) == ssh  # raw lines, NICs, CPUs, every domain's values
    # as srun starts it in the lab (a pod: /host): the files seen elsewhere, the same plan and findings
    r = _node_collect(state, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    seen = str(state / "nodes" / NODE / "sysroot")
    assert doc["state"]["sysroot"] == seen
    mine = state_from_doc(doc, NODE, dev.connection.sysroot)
    assert (mine.current, mine.facts.nics, mine.facts.online_cpus) == (ssh.current, ssh.facts.nics, ssh.facts.online_cpus)
    moved = {k for k, v in mine.facts.raw.items() if ssh.facts.raw.get(k) != v}
    assert set(mine.facts.raw) == set(ssh.facts.raw) and moved  # only lines that print the paths they read:
    for k in moved:
        assert _text(mine.facts.raw[k]).replace(seen, "sysroot") == _text(ssh.facts.raw[k]), k
    planned = [c.as_dict() for c in node.plan(dev, mine)]
    assert planned == [c.as_dict() for c in node.plan(dev, ssh)]
    assert len(planned) > 10 and all(c["apply_cmd"] and c["read_cmd"] for c in planned)  # the untuned lab
    assert [f.as_dict() for f in node.findings(dev, mine)] == [f.as_dict() for f in node.findings(dev, ssh)]


def _text(value: str) -> str:
    """A raw line's value as text (the read script base64-encodes command outputs)."""
    return base64.b64decode(value).decode()


def test_node_collect_of_some_domains_reads_what_they_need_and_a_bad_document_is_refused(laid):
    state, dev = laid
    r = _node_collect(state, "--json", "-d", "mtu")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["domains"] == ["mtu"] and set(doc["state"]["current"]) == {"mtu"}
    assert state_from_doc(doc, NODE, "sysroot") == node.collect(lab_node(state, NODE), dev, {"mtu"})
    with pytest.raises(TuningError, match="node collect` of node02: not this node's state document"):
        state_from_doc(doc, "node02", "sysroot")
    doc["state"]["current"]["mtu"]["mtu/enp12s0np0"] = 9000  # not a string: never planned on
    with pytest.raises(TuningError, match="state.current must map each domain to strings"):
        state_from_doc(doc, NODE, "sysroot")
