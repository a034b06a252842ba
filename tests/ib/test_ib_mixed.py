"""A mixed fabric (issue 22, must-show 4), no lab. Its report for people: a batch holding RoCE pairs and
an SM's IB checks says both, ``1/1 pairs passed`` and ``InfiniBand verification, batch 1: 17/17 checks
passed`` (the console counted the RoCE pairs only). Its gate in the Ansible front end's stages: the
engine's pairs (:func:`tuning.rollout.gate.rollout_pairs`, ``batch_pairs``), none for a subnet manager
(the stages asked every selection for node pairs, so an SM alone was refused). Its RoCE lab: the
nodes' and switches' ports, the SM left to the IB lab. The verdicts are the IB verification's own
(:mod:`tuning.verify.ib_sm`) over the fixture fabric of ``tests/ib/test_sm_model.py``; the lab test is
``test_ib_mixed_lab.py``."""

from __future__ import annotations

from pathlib import Path

import yaml

from tuning import inventory
from tuning.lab.fabric import default_fabric, fabric_for_inventory, retarget_inventory
from tuning.lab.ib import SM_PATHS
from tuning.lab.scale import write_inventory
from tuning.rollout import steps
from tuning.rollout.batches import batch_line, plan_batches
from tuning.rollout.options import Options, Run

from tuning.model.ib_sm import pkey_word
from tuning.verify import ib_sm
from tuning.verify.pair_result import PairResult

from tests.ib.test_ib_verify import ALL_FULL, GUIDS, NAMES, PORTS, plan, spec
from tests.ib.test_sm_model import TENANT
from tuning.targets.sm_verify import intents

ROCE = dict(PairResult("node01:mlx5_0->node02:mlx5_0", "leaf01", "node01:mlx5_0", "node02:mlx5_0", bw_gbps=390.2,
                       verdict="pass", status="pass").__dict__)


def verdicts(tables: dict | None = None) -> list[dict]:
    """The pkey verdicts of a rollout of tenant1 without a Default rule against ``tables`` read (None:
    every port holds what the intents say)."""
    s = spec(TENANT)
    its = intents(s, PORTS, plan(s), ALL_FULL)
    if tables is None:
        tables = {g: {pkey_word(it.pkey): it.members[g] for it in its if g in it.members} for g in GUIDS}
    return [dict(ib_sm.judge_pkeys("sm01", it, NAMES, tables).__dict__) for it in its]


def test_a_batch_of_roce_pairs_and_ib_checks_says_how_many_ib_checks_passed():
    assert ib_sm.summarise([ROCE, *verdicts()]) == "2/2 checks passed"
    assert ib_sm.summarise([ROCE]) is None  # a RoCE-only batch: no IB line


def test_a_failed_ib_check_is_named_with_its_evidence_and_the_harness_apart():
    bad = verdicts({g: {"0x7fff": "limited"} for g in GUIDS})
    lone = dict(ib_sm.harness("sm01", "solo paths", "no_pairs", "partition solo: no full member").__dict__)
    said = ib_sm.summarise([ROCE, *bad, lone])
    assert said == ("3/3 checks failed; ib tenant1 0x0001 pkeys: node01 mlx5_0/1: 0x0001 absent, want full (+15 more); "
                    "ib Default 0x7fff pkeys: node01 mlx5_0/1: 0x7fff limited, want full (full before the run: it "
                    "cannot talk to other limited members) (+15 more) (1 not run: the verification harness failed)")
    assert ib_sm.failed_words([ROCE, lone]) == ""  # neither a RoCE pair nor the harness's error is an IB failure


def mixed_inventory(inv: Path, sysroot: Path, partitions: list[dict]) -> Path:
    """``inv`` (a lab inventory of RoCE nodes and switches) with a subnet manager ``sm01`` (``fabtune_local``:
    this controller; OpenSM's files under ``sysroot``, the IB lab's layout) serving ``partitions``."""
    hosts = yaml.safe_load((inv / "hosts.yaml").read_text())
    hosts["all"]["children"]["subnet_managers"] = {"hosts": {"sm01": {
        "ansible_host": "127.0.0.1", "fabtune_local": True, "fabtune_sysroot": str(sysroot)}}}
    (inv / "hosts.yaml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    (inv / "host_vars" / "sm01.yml").write_text(yaml.safe_dump({**SM_PATHS, "partitions": partitions},
                                                                 sort_keys=False))
    return inv


def test_the_ansible_stages_gate_a_mixed_selection_and_an_sm_alone_as_the_engine_does(tmp_path):
    inv = inventory.load(mixed_inventory(write_inventory(tmp_path / "inv", 2), tmp_path / "ib", [TENANT]))
    opts = Options(mode="rollout", rails=(0,), policy=inv.policy)
    every, sm = list(inv.devices.values()), [inv.devices["sm01"]]
    mixed = Run("r1", None, None, inv.policy, plan_batches(inv, every, inv.policy))
    assert steps._gate(mixed, inv, opts, every) == 600  # NVUE's default window: well above what 1 pair needs
    assert [p.name for p in mixed.pairs] == [p.name for p in mixed.batch_pairs[1]] == ["node01:mlx5_0->node02:mlx5_0"]
    alone = Run("r2", None, None, inv.policy, plan_batches(inv, sm, inv.policy))
    assert steps._gate(alone, inv, opts, sm) == 600 and (alone.pairs, alone.batch_pairs) == ([], {1: []})


def test_the_roce_lab_serves_a_mixed_inventory_and_leaves_its_subnet_manager_alone(tmp_path):
    inv = mixed_inventory(write_inventory(tmp_path / "inv", 2, base_port=18000), tmp_path / "ib", [TENANT])
    fabric = fabric_for_inventory(inv)
    assert [n.name for n in fabric.nodes] == ["node01", "node02"] and fabric.nodes[1].port == 18002
    retarget_inventory(inv / "hosts.yaml", default_fabric(base_port=18100, n_nodes=2))
    hosts = yaml.safe_load((inv / "hosts.yaml").read_text())["all"]["children"]
    assert hosts["gpu_nodes"]["hosts"]["node02"]["ansible_port"] == 18102
    assert hosts["subnet_managers"]["hosts"]["sm01"] == {"ansible_host": "127.0.0.1", "fabtune_local": True,
                                                        "fabtune_sysroot": str(tmp_path / "ib")}


def test_the_batch_line_words_a_subnet_manager_by_its_kind_not_as_a_switch(tmp_path):
    """The console's batch line of a mixed rollout (:func:`tuning.rollout.batches.batch_line`): the SM
    joins batch 1 as a subnet manager, not as a switch no node is cabled to, and a batch whose only
    changed device beside the nodes is the SM has no switch confirm window (the SM commits nothing)."""
    inv = inventory.load(mixed_inventory(write_inventory(tmp_path / "inv", 2), tmp_path / "ib", [TENANT]))
    [b] = plan_batches(inv, list(inv.devices.values()), inv.policy)
    assert b.why == ("all nodes: 2 node(s) of leaf01 (serial 100%); with leaf01, leaf02 (cabled to its nodes); "
                     "with spine01 (no selected node cabled: batch 1); with sm01 (subnet_managers: no cabling, batch 1)")
    assert batch_line(inv, b, 1, {"node01", "sm01"}, 600) == f"batch 1/1: {b.why}; {b.order}"
    assert batch_line(inv, b, 1, {"leaf01", "sm01"}, 600) == f"batch 1/1: {b.why}; {b.order}; switch confirm window 600 s"


def test_rail_on_a_selection_of_subnet_managers_only_is_refused_before_anything_runs(tmp_path):
    """``--rail`` picks the RoCE NICs whose node pairs are measured; a selection of subnet managers only has
    none (the IB checks go by partition): refused, one line, exit 2, before any device is reached."""
    from tests.adversarial._cli import assert_one_line, cli

    inv = mixed_inventory(write_inventory(tmp_path / "inv", 2), tmp_path / "ib", [TENANT])
    for command in ("verify", "rollout"):
        code, _, err = cli(command, "-i", str(inv), "--journal-dir", str(tmp_path / "j"), "--limit", "sm01",
                           "--rail", "0")
        assert_one_line(code, err, "--rail", "sm01", "subnet managers only")
        assert not (tmp_path / "j").exists() or not any((tmp_path / "j").iterdir())
