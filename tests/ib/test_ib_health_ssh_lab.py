"""``fabtune health`` over SSH judges an ``ib_ports`` node's HCA ports (issue 22): on the RoCE lab, a node
whose inventory says its first two HCAs must be InfiniBand ports at 4X HDR is read over SSH (sudo, the
lab's sysroot) in its one round trip and fails health naming each port with the value read (the lab's
ConnectX ports run Ethernet), exit 1; the other node, without ``ib_ports``, is healthy."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.lab


def test_health_over_ssh_names_every_port_of_an_ib_ports_node_that_is_not_as_intended(lab_inventory):
    host_vars = lab_inventory / "host_vars" / "node01.yml"
    doc = yaml.safe_load(host_vars.read_text()) or {}
    doc["ib_ports"] = {"hcas": ["mlx5_0", "mlx5_1"], "width": "4X", "speed": "HDR"}
    host_vars.write_text(yaml.safe_dump(doc, sort_keys=False))
    r = subprocess.run([sys.executable, "-m", "tuning", "health", "-i", str(lab_inventory), "--limit", "node01",
                        "--limit", "node02", "--rail", "0", "--json"], capture_output=True, text=True, cwd=REPO,
                       timeout=300)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    found = json.loads(r.stdout)["findings"]
    assert [(f["kind"], f["target"], f["code"]) for f in found] == [("node", "node01", "ib-not-infiniband")], found
    assert found[0]["message"] == ("node01: mlx5_0 port 1: link_layer Ethernet, not InfiniBand; "
                                   "mlx5_1 port 1: link_layer Ethernet, not InfiniBand")
    assert found[0]["evidence"]["counters"]["ib-not-infiniband"] == {
        "mlx5_0 port 1 link_layer=Ethernet": 1, "mlx5_1 port 1 link_layer=Ethernet": 1}
