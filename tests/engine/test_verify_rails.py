"""Verification covers every rail: a fault on a rail-2 leaf port (leaf01 swp5, node01's mlx5_2)
that appears with a change to that port is caught by the rail-2 pair alone and the change rolled
back, over real SSH against the lab. (A port MTU under the node MTU, the fault this test first
used, is now refused at input: issue 6 item 13. The lab's link fault stands for it, injected
while the run verifies.)"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import snapshot_fabric
from tuning import inventory
from tuning.report import verify_table
from tuning.rollout import engine
from tuning.rollout.engine import Options
from tuning.verify.runner import summarise

pytestmark = pytest.mark.lab


def _port_mtu_variant(src: Path, dst: Path, switch: str, overrides: dict[str, int]) -> Path:
    """Copy ``src`` to ``dst`` with ``port_mtu_overrides`` on ``switch`` (lab state shared by a
    symlink, as tuning.demo.wrong_variant does)."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    (dst / ".state").symlink_to((src / ".state").resolve())
    hv = dst / "host_vars" / f"{switch}.yml"
    data = yaml.safe_load(hv.read_text()) or {}
    data["port_mtu_overrides"] = overrides
    hv.write_text(yaml.safe_dump(data, sort_keys=False))
    return dst


def _inject_when_verifying(journal: Path, state: Path, target: str) -> threading.Thread:
    """Inject ``degrade`` on ``target`` as soon as a run's journal enters stage ``verify``."""
    from tuning.lab.inject import inject

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for path in journal.glob("*.json"):
                try:
                    if json.loads(path.read_text()).get("stage") == "verify":
                        inject(state, target, "degrade")
                        return
                except ValueError:
                    pass
            time.sleep(0.01)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def test_rail2_leaf_port_fault_is_caught_and_rolled_back(lab_inventory: Path, tmp_path: Path, monkeypatch):
    from tuning.lab.inject import inject

    journal = tmp_path / "j"
    tuned = engine.run(inventory.load(lab_inventory), Options(mode="apply", journal_dir=journal))
    assert tuned.outcome == "applied"
    before = snapshot_fabric(lab_inventory)

    wrong = _port_mtu_variant(lab_inventory, tmp_path / "lab-rail2", "leaf01", {"swp5": 9100})
    monkeypatch.setenv("FABTUNE_TEST_PAUSE_AT", "verify:2")  # time for the watcher to inject
    watcher = _inject_when_verifying(journal, lab_inventory / ".state", "leaf01:swp5")
    try:
        said: list[str] = []
        rep = engine.run(inventory.load(wrong), Options(mode="rollout", journal_dir=journal, limit=["leaf01"]),
                         said.append)
    finally:
        watcher.join(timeout=5)
        inject(lab_inventory / ".state", "leaf01:swp5", "clear")
    # the fault outlives the restore: the restored pairs are not back, and the run names which
    assert rep.restored_verified is False
    assert [m.split(": ", 2)[1] for m in said if m.startswith("restored, NOT back to the baseline")] == \
        ["node01:mlx5_2->node02:mlx5_2"], said[-6:]

    assert rep.changes == {"leaf01": [c for c in rep.changes["leaf01"] if c["key"].endswith("swp5/mtu")]}, rep.changes
    assert rep.outcome == "rolled-back" and rep.restored == ["leaf01"]
    assert len(rep.verify_after) == 18
    assert [r["reasons"] for r in rep.verify_before if r["verdict"] != "pass"] == []
    failed = {r["pair"]: r for r in rep.verify_after if r["verdict"] == "fail"}
    assert list(failed) == ["node01:mlx5_2->node02:mlx5_2"], failed
    bad = failed["node01:mlx5_2->node02:mlx5_2"]
    assert bad["client_link"] == "leaf01:swp5" and bad["reasons"], bad
    assert summarise(rep.verify_after) == "1/18 pairs failed: node01:mlx5_2->node02:mlx5_2"
    assert "1/18 pairs failed" in str(verify_table(rep.verify_after, "after").caption)

    after = snapshot_fabric(lab_inventory)
    diff = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k) and not k.endswith(":revision"))
    assert diff == []


def test_gid_indexes_resolved_per_nic_and_errors_stay_with_their_pair(lab_inventory: Path):
    from tuning.transport.ssh import SshHost
    from tuning.verify.pairs import Pair, select_pairs
    from tuning.verify.runner import measure, resolve_gids

    nodes = inventory.load(lab_inventory).nodes
    hosts = {d.name: SshHost(d.name, d.connection) for d in nodes}
    try:
        pairs = select_pairs(nodes)
        gids = resolve_gids(pairs, hosts)
        assert len(gids) == 32
        assert gids[("node03", "mlx5_0")] == 5  # an extra link-local address shifts the RoCEv2 entry
        assert {v for k, v in gids.items() if k != ("node03", "mlx5_0")} == {3}
        ghost = pairs[0].server_nic.model_copy(update={"rdma_device": "mlx5_9"})
        bad = Pair(pairs[0].client, pairs[0].client_nic, pairs[0].server, ghost, "leaf")
        gids = resolve_gids([bad, pairs[1]], hosts)
        assert gids[("node01", "mlx5_0")] == 3 and gids[("node04", "mlx5_0")] == 3
        res = measure(bad, hosts, gids=gids)
        assert res.error and "mlx5_9" in res.error and res.bw_gbps is None
    finally:
        for h in hosts.values():
            h.close()
