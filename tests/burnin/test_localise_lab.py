"""Localisation on real measurements: an 8-node lab (real SSH, the real perftest runner), every
node pair on two rails, a leaf port degraded by the lab; the document is built from the
runner's own result dicts and :func:`tuning.burnin.localise.topology_of` of the inventory."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from tests.conftest import TEST_BASE_PORT, lab_up
from tuning import inventory
from tuning.burnin.localise import localise, topology_of
from tuning.verify.pairs import round_robin
from tuning.verify.runner import Thresholds, verify

pytestmark = pytest.mark.lab


def test_degraded_leaf_port_in_an_8_node_lab_is_the_one_link_finding(tmp_path: Path):
    from tuning.lab.inject import inject
    from tuning.lab.scale import write_inventory
    from tuning.transport.ssh import SshHost

    hosts = {}
    with lab_up(write_inventory(tmp_path / "lab8", 8, base_port=TEST_BASE_PORT)) as inv_dir:
        inv = inventory.load(inv_dir)
        port = {n.rdma_device: n for n in inv.devices["node05"].spec.nics}["mlx5_3"]
        inject(inv_dir / ".state", f"{port.switch}:{port.switch_port}", "degrade")
        hosts = {d.name: SshHost(d.name, d.connection) for d in inv.nodes}
        pairs = [p for rnd in round_robin(inv.nodes, rails=(2, 3)) for p in rnd]
        # generous per-test time: other lab tests may share this machine's cores
        _, results = verify(pairs, hosts, Thresholds(min_bw_gbps=0, max_lat_us=1000), timeout_s=180)
        for h in hosts.values():
            h.close()
    assert len(results) == 56 and all(r.bw_gbps for r in results), [r.error for r in results if not r.bw_gbps]
    doc = {"run_id": "lab", "inventory": str(inv_dir), "started": 0.0, "seconds": 0.0, "kind": "burnin",
           "topology": topology_of(inv),
           "rounds": [{"index": 0, "t": 0.0, "pairs": [asdict(r) for r in results], "nics": {}, "gpus": {},
                       "errors": {}}]}
    found = localise(doc)
    assert [(f["code"], f["kind"], f["target"]) for f in found] == [
        ("link-slow", "link", f"node05:mlx5_3<->{port.switch}:{port.switch_port}")], (found, [
            (r.pair, r.bw_gbps, r.error) for r in results])
    assert len(found[0]["evidence"]["pairs"]) == 7
