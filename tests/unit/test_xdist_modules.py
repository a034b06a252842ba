"""The suite's scheduler (tests/xdist_modules.py) hands out and steals whole lab modules only: a
lab module's tests never land on two workers, while other modules' tests move one by one. Two
recording workers stand in for xdist's (the scheduler only calls ``send_runtest_some``,
``send_steal`` and ``shutdown`` on them)."""

from __future__ import annotations

import pytest

from tests.xdist_modules import LAB_MODULES_ENV, ModuleWorkSteal


class Worker:
    """Records what the scheduler sends; ``shutting_down`` as xdist's WorkerController has it."""

    def __init__(self, name: str):
        self.name, self.sent, self.steals, self.shutting_down = name, [], [], False
        self.gateway = type("Gateway", (), {"id": name})()

    def send_runtest_some(self, indices):
        self.sent += list(indices)

    def send_steal(self, indices):
        self.steals.append(list(indices))

    def shutdown(self):
        self.shutting_down = True


class Config:
    def getvalue(self, name):
        return ["2*popen"] if name == "tx" else None


COLLECTION = ([f"tests/a/test_lab1.py::t{i}" for i in range(5)] + [f"tests/b/test_fast.py::t{i}" for i in range(6)]
              + [f"tests/c/test_lab2.py::t{i}" for i in range(7)])


def _modules(sched, indices) -> set[str]:
    return {sched.collection[i].split("::")[0] for i in indices}


@pytest.fixture()
def sched(tmp_path, monkeypatch):
    (tmp_path / "lab.txt").write_text("tests/a/test_lab1.py\ntests/c/test_lab2.py\n")
    monkeypatch.setenv(LAB_MODULES_ENV, str(tmp_path / "lab.txt"))
    s = ModuleWorkSteal(Config())
    workers = [Worker("gw0"), Worker("gw1")]
    for w in workers:
        s.add_node(w)
        s.add_node_collection(w, COLLECTION)
    s.schedule()
    return s, workers


def test_the_first_hand_out_ends_between_lab_modules_and_splits_fast_ones(sched):
    s, (gw0, gw1) = sched
    assert gw0.sent + gw1.sent == list(range(len(COLLECTION))) and not s.pending
    # half is 9: item 9 is inside the fast module, which may be cut there
    assert (len(gw0.sent), len(gw1.sent)) == (9, 9)
    assert _modules(s, gw0.sent) & _modules(s, gw1.sent) == {"tests/b/test_fast.py"}


def test_a_steal_takes_whole_lab_modules_only(sched):
    s, (gw0, gw1) = sched
    for i in list(s.node2pending[gw0]):  # gw0 runs all of its share
        s.mark_test_complete(gw0, i)
    assert gw1.steals == [[11, 12, 13, 14, 15, 16, 17]]  # test_lab2.py whole: not from its t3
    s.remove_pending_tests_from_node(gw1, gw1.steals[0])
    s.check_schedule()
    assert s.node2pending[gw0] == list(range(11, 18)) and s.node2pending[gw1] == [9, 10]


def test_one_lab_module_left_is_never_split(sched):
    s, (gw0, gw1) = sched
    for i in list(s.node2pending[gw1]):
        s.mark_test_complete(gw1, i)
    assert gw0.steals == [[5, 6, 7, 8]]  # the fast module, cut where test_lab1.py ends
    s.remove_pending_tests_from_node(gw0, [5, 6, 7, 8])
    for i in [5, 6, 7, 8]:
        s.mark_test_complete(gw1, i)
    # gw0 holds test_lab1.py t0..t4 only: never split, so gw1 ends instead of stealing t2..t4
    assert gw0.steals == [[5, 6, 7, 8]] and gw1.shutting_down and s.node2pending[gw0] == [0, 1, 2, 3, 4]


def test_a_steal_answered_after_the_victim_began_the_module_leaves_its_tail_with_the_victim(sched):
    s, (gw0, gw1) = sched
    for i in list(s.node2pending[gw0]):
        s.mark_test_complete(gw0, i)
    assert gw1.steals == [[11, 12, 13, 14, 15, 16, 17]]
    for i in (9, 10):  # meanwhile gw1 finished the fast tests and began test_lab2.py (t0 and t1 are its)
        s.mark_test_complete(gw1, i)
    sent_before = len(gw1.sent)
    s.remove_pending_tests_from_node(gw1, [13, 14, 15, 16, 17])  # what it had not started
    # the tail is sent back to gw1, after its head; gw0 gets none of test_lab2.py
    assert gw1.sent[sent_before:] == [13, 14, 15, 16, 17]
    assert not _modules(s, s.node2pending[gw0]) & {"tests/c/test_lab2.py"} and not s.pending
    assert sorted(s.node2pending[gw1]) == list(range(11, 18))
