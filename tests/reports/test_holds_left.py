"""What ``fabtune runs`` says a killed run still holds outside its devices
(:func:`tuning.reports.history.holds_left`), from its journal: Slurm jobs, an allocation asked for
and not answered yet (issue 23 tryout: it was not shown, and the next rollout waited on it), and
NodeMaintenances each in its own object's namespace (a hold joined on another requestor's object
lives in that owner's namespace: the tryout saw the run's namespace printed instead)."""

from __future__ import annotations

from tuning.reports.history import holds_left


def test_every_kind_of_hold_is_named_where_it_lives():
    doc = {"slurm_holds": {"42": {"nodes": ["node01", "node02"], "drained": {}}},
           "slurm_request": ["node03", "node04"],
           "k8s": {"namespace": "fabtune",
                   "holds": {"node01": {"name": "fabtune-node01", "created": True, "namespace": "fabtune"},
                             "node03": {"name": "upgrade-node03", "created": False, "namespace": "ops"},
                             "node04": {"name": "fabtune-node04", "created": True}},
                   "configmaps": ["fabtune-plan"]}}
    assert holds_left(doc) == [
        "Slurm job 42 (node01, node02)", "a Slurm allocation asked for (node03, node04)",
        "NodeMaintenance fabtune/fabtune-node01 (node01)", "NodeMaintenance ops/upgrade-node03 (node03)",
        "NodeMaintenance fabtune/fabtune-node04 (node04)", "ConfigMap fabtune/fabtune-plan"]
    assert holds_left({"run_id": "x", "slurm_holds": "not a mapping", "k8s": []}) == []
