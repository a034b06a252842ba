"""Issue 6 item 7 through the engine: a rewriter that puts an IRQ back within 0.1 s fails the
device (the error names key, wanted and read value) and the node is restored byte for byte."""

from __future__ import annotations

from tests.node.conftest import node_files
from tuning import inventory
from tuning.lab.inject import inject
from tuning.rollout import engine
from tuning.rollout.engine import Options


def test_rollout_apply_fails_and_restores_a_node_whose_irqs_are_put_back(node_lab, tmp_path):
    with (node_lab / "host_vars" / "node03.yml").open("a") as f:
        f.write("irqbalance: leave\n")
    inject(node_lab / ".state", "node03", "irqbalance")
    sysroot = node_lab / ".state" / "nodes" / "node03" / "sysroot"
    try:
        before = node_files(sysroot)
        rep = engine.run(inventory.load(node_lab), Options(mode="apply", journal_dir=tmp_path / "j", limit=["node03"]))
        assert rep.outcome == "rolled-back"
        assert "irq/enp12s0np0/101: wanted '0', read '0-15'" in rep.errors["node03"], rep.errors
        assert "node03" in rep.restored
        after = node_files(sysroot)
        changed = [k for k in before.keys() | after.keys() if before.get(k) != after.get(k)]
        assert [k for k in changed if not k.startswith("run/lab/services/")] == []  # the agent's own pid file
    finally:
        inject(node_lab / ".state", "node03", "clear")
