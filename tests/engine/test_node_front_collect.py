"""A front end's collect step (tuning/rollout/node_front.py, ``--engine slurm`` / ``k8s``): one
step per round reads every node it can on the nodes; a node the step leaves out is read by the
controller as the engine reads it, and never starts a second step that would read again the
nodes whose states are waiting to be taken (a tryout of issue 23 saw ``collecting 2 node(s)``,
then ``srun --nodelist=node03``). In-process on inventory/lab, through the documented extension
point (a subclass's ``collect_nodes``); no device is contacted."""

from __future__ import annotations

from tests.conftest import REPO
from tuning import inventory
from tuning.rollout.node_front import NodeFront


class _Front(NodeFront):
    """``collect_nodes`` reads every node asked for but node03 (left out, as a node Slurm cannot start a task on)."""

    engine_name = "test"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.steps: list[list[str]] = []

    def collect_nodes(self, nodes, domains):
        self.steps.append(list(nodes))
        return {n: f"state of {n} from step {len(self.steps)}" for n in nodes if n != "node03"}


def test_a_node_left_out_of_the_step_is_read_by_the_controller_and_starts_no_second_step():
    inv = inventory.load(REPO / "inventory" / "lab")
    front = _Front(inv, list(inv.devices.values()), 4)
    front.targets = dict.fromkeys(inv.devices)  # what open() fills; only the names are read here
    own = []
    collects = {n: front._collect_of(n, lambda domains, n=n: own.append(n) or f"{n} over SSH")
                for n in sorted(front.nodes)}
    # the engine collects its nodes in any order: node03 (left out) before node04 has taken its state
    got = {n: collects[n]() for n in ("node01", "node03", "node04", "node02")}
    assert front.steps == [["node01", "node02", "node03", "node04"]]
    assert got == {"node01": "state of node01 from step 1", "node03": "node03 over SSH",
                   "node04": "state of node04 from step 1", "node02": "state of node02 from step 1"}
    assert own == ["node03"]
    # the report's read after the run: only the pushed nodes, in one step again
    front.pushed = {"node01", "node02"}
    again = {n: collects[n]() for n in ("node02", "node01", "node03")}
    assert front.steps[1:] == [["node01", "node02"]]
    assert again == {"node02": "state of node02 from step 2", "node01": "state of node01 from step 2",
                     "node03": "node03 over SSH"}
