"""A front end's run takes no node push once it has ended (issue 23 tryout, helper-46): the
Kubernetes agents acted on a plan ConfigMap's request after the API server came back, when the
controller had already given up, and changed nodes nobody verified. A push (``fabtune node apply``,
an Ansible host task: :func:`tuning.rollout.steps.push`) takes the run's journal through
:func:`tuning.rollout.journal.refuse_ended`, which refuses a run whose controller recorded an outcome
or that a rollback began putting back; the other stages still open it (the playbooks' end stage
reads a halted run's journal to release its lock)."""

from __future__ import annotations

import time

import pytest

from tuning.errors import InputError
from tuning.rollout import steps
from tuning.rollout.journal import ROLLBACK_NOTE, Journal, refuse_ended


@pytest.mark.parametrize("engine", ["slurm", "k8s"])
def test_a_live_run_takes_pushes_and_an_ended_or_rolled_back_one_refuses_them(tmp_path, engine):
    j = Journal.create(tmp_path, "inventory/lab", "rollout")
    j.data["engine"] = engine
    j.save()
    assert refuse_ended(steps.open_journal(tmp_path, j.run_id)).shared  # live: the node may push into it
    j.data["outcome"] = "failed"
    j.save()
    ended = steps.open_journal(tmp_path, j.run_id)  # still opened: the end stage reads it
    with pytest.raises(InputError) as e:
        refuse_ended(ended)
    assert e.value.key == j.run_id and e.value.problem == "its controller ended it (failed): it takes no more pushes; nothing written"
    j.data["outcome"] = None  # killed: no outcome, then `fabtune rollback` began putting it back
    j.data.setdefault("events", []).append(["restore", ROLLBACK_NOTE, time.time()])
    j.save()
    with pytest.raises(InputError, match="^fabtune_run_id: .*: it was rolled back: it takes no more pushes; nothing written$"):
        refuse_ended(steps.open_journal(tmp_path, j.run_id))
