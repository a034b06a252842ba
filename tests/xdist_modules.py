"""pytest-xdist's work stealing (``--dist worksteal``, pyproject's addopts) that never splits a lab
test module between workers.

Why: many lab modules share one lab per module (a module-scoped fixture) and some of their tests
start from the state an earlier test of the module left (a reboot, an apply). xdist's own work
stealing cuts the queue anywhere: a stolen test then ran on the other worker, in a fresh lab of its
own, without the tests before it (stop 32's CI: two tests of ``tests/node/test_power.py`` failed
so). Here every hand-out and every steal ends at a module boundary, so a module runs whole, in
order, on one worker; whole modules still move to an idle worker. A worker answers a steal with the
requested tests it has not started yet; when it ran on meanwhile into the first stolen module, the
tail of that module it gave up is sent back to it (``remove_pending_tests_from_node``).

Only lab modules (a test marked ``lab``) are kept whole: the others share no lab and their tests
move one by one, as xdist's own (keeping every module whole cost the fast tier ~15 %). The
controlling process knows test ids only, so the first worker writes the lab modules it collected
into the file ``$FABTUNE_TEST_LAB_MODULES`` names (before it reports its collection); without that
file every module is kept whole.

Used through ``pytest_xdist_make_scheduler`` in ``tests/conftest.py``; xdist 3.5+ (its
``WorkStealingScheduling``: ``pending`` lists, ``_send_tests``, ``send_steal``).
"""

from __future__ import annotations

from pathlib import Path

from xdist.scheduler.worksteal import MIN_PENDING, NodePending, WorkStealingScheduling

#: the file the first worker lists the lab modules in (set by the controlling process)
LAB_MODULES_ENV = "FABTUNE_TEST_LAB_MODULES"


def write_lab_modules(path: Path, items) -> None:
    """List the modules of ``items`` that hold a test marked ``lab``, one per line (then rename)."""
    mods = sorted({i.nodeid.split("::", 1)[0] for i in items if i.get_closest_marker("lab") is not None})
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(f"{m}\n" for m in mods))
    tmp.replace(path)


class ModuleWorkSteal(WorkStealingScheduling):
    """:class:`WorkStealingScheduling` whose hand-outs and steals cut only between test modules."""

    _lab: set[str] | None = None

    def _module(self, index: int) -> str:
        """The unit kept on one worker of collection item ``index``: its module
        (``tests/node/test_power.py``) when that is a lab module, else the test itself."""
        if self._lab is None:
            import os

            try:
                self._lab = set(Path(os.environ[LAB_MODULES_ENV]).read_text().split())
            except (KeyError, OSError):
                self._lab = {"*"}  # not known: every module is kept whole
        test = self.collection[index]
        module = test.split("::", 1)[0]
        return module if module in self._lab or "*" in self._lab else test

    def _starts(self, items: list[int], low: int = 1) -> list[int]:
        """Positions ``i >= low`` in ``items`` where a module starts (item ``i - 1`` is of another)."""
        return [i for i in range(max(1, low), len(items)) if self._module(items[i - 1]) != self._module(items[i])]

    def _send_tests(self, node, num: int) -> None:
        """Send ``num`` tests and the rest of the module the last one belongs to."""
        if num:
            num = next((i for i in self._starts(self.pending, num)), len(self.pending))
        super()._send_tests(node, num)

    def _steal_start(self, pending: list[int], cut: int) -> int | None:
        """Where a steal from a worker holding ``pending`` begins: the first module start at or
        after ``cut``, else the last one before it; the worker keeps ``MIN_PENDING`` tests. None:
        no module starts there (one module left: it runs where it is)."""
        starts = self._starts(pending, MIN_PENDING)
        return next((i for i in starts if i >= cut), starts[-1] if starts else None)

    def remove_pending_tests_from_node(self, node, indices) -> None:
        """The victim's answer to a steal (:class:`WorkStealingScheduling`'s), except that when the
        victim had already started the module the steal began with (the race of one message: stop
        38's CI ran the last Slurm rollout test on the other worker, in a second Slurm lab), that
        module's tail goes back to the victim, after its head; only whole modules move."""
        kept = [i for i in self.node2pending[node] if i not in set(indices)]
        started = {self._module(i) for i in kept}
        tail = []
        for i in indices:
            if self._module(i) not in started:
                break
            tail.append(i)
        if tail:
            node.send_runtest_some(tail)  # queued after the head it is running
        super().remove_pending_tests_from_node(node, indices[len(tail):])  # the tail stays the victim's

    def check_schedule(self) -> None:
        """Hand out and rebalance as :class:`WorkStealingScheduling` does, cutting between modules."""
        nodes_up = [NodePending(node, pending) for node, pending in self.node2pending.items() if not node.shutting_down]

        def idle() -> list:
            return [node for node, pending in nodes_up if len(pending) < MIN_PENDING]

        if not idle():
            return
        if self.pending:
            waiting = idle()
            for i, node in enumerate(waiting):
                self._send_tests(node, len(self.pending) // (len(waiting) - i))
            if not idle():
                return
        if self.steal_requested_from_node is not None:
            return
        victim = max(nodes_up, key=lambda n: len(n.pending), default=None)
        start = None
        if victim is not None and len(victim.pending) > MIN_PENDING:  # about half, cut between modules
            start = self._steal_start(victim.pending, len(victim.pending) - len(victim.pending) // 2)
        if start is None:
            for node in idle():  # nothing to steal: idle workers end (they run their last test now)
                node.shutdown()
            return
        victim.node.send_steal(victim.pending[start:])
        self.steal_requested_from_node = victim.node
