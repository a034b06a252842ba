"""``fabtune health`` joins what a node reads of its HCA ports with what the subnet manager serves and what
the switch port at the far end of each cable reads (issue 22): over real SSH to a lab node whose sysroot is
the IB lab's node01 (its ``/sys/class/infiniband`` as its 8 HCAs hold it in ibsim) and the real OpenSM and
infiniband-diags on the SM host. Faults injected the way an operator would (``ibportstate``, IBA-allowed
PortState steps only): node01 mlx5_1's LID set to 0x50, mlx5_2's SM LID to 0x9, mlx5_3's link left half up
(the HCA Active, its switch port Armed). Each is its own finding with every side's value, none "port down",
and the fix the findings name (a heavy sweep of OpenSM, SIGHUP) puts the fabric back: health passes.
"""

from __future__ import annotations

import os

import pytest
import yaml

from tuning import inventory
from tuning.burnin.health import run_health
from tuning.burnin.run import BurninOptions
from tuning.lab.fabric import default_fabric
from tuning.lab.ib import SM_PATHS, IbLab

pytestmark = pytest.mark.lab

DEFAULT = {"name": "Default", "pkey": 0x7FFF, "ipoib": True, "members": {"ALL": "full"}}
HCAS = [f"mlx5_{i}" for i in range(8)]


@pytest.fixture
def ib(lab_inventory, tmp_path):
    """The 1-node IB lab with node trees, up; the RoCE lab's inventory rewritten to node01 alone, reached over
    the RoCE lab's SSH endpoint with the IB lab's node tree as its sysroot and ``ib_ports`` as its intent,
    and the IB lab's SM (the SM host is this controller, the lab's IB tools on PATH)."""
    lab = IbLab(tmp_path / "ib", default_fabric(n_nodes=1), node_trees=True)
    hosts = yaml.safe_load((lab_inventory / "hosts.yaml").read_text())["all"]["children"]["gpu_nodes"]["hosts"]
    node = {**hosts["node01"], "fabtune_sysroot": str(lab.node_sysroot("node01"))}
    sm = {"ansible_host": "127.0.0.1", "fabtune_sysroot": str(lab.dir), "fabtune_local": True}
    (lab_inventory / "hosts.yaml").write_text(yaml.safe_dump({"all": {"children": {
        "gpu_nodes": {"hosts": {"node01": node}}, "subnet_managers": {"hosts": {"sm01": sm}}}}}))
    for other in [lab_inventory / "group_vars" / "switches.yml", *(lab_inventory / "host_vars").glob("*.yml")]:
        other.unlink()
    (lab_inventory / "host_vars" / "node01.yml").write_text(yaml.safe_dump(
        {"ib_ports": {"hcas": HCAS, "width": "4X", "speed": "HDR"}}))
    (lab_inventory / "host_vars" / "sm01.yml").write_text(yaml.safe_dump({**SM_PATHS, "partitions": [DEFAULT]}))
    with pytest.MonkeyPatch.context() as mp:
        lab.up()
        mp.setenv("PATH", f"{lab.tools_dir}{os.pathsep}{os.environ['PATH']}")
        try:
            yield lab, lab_inventory
        finally:
            assert lab.down()


def health(inv, **reports) -> dict:
    return run_health(inventory.load(inv), BurninOptions(kind="health", **reports))


def test_each_view_disagreement_is_its_own_finding_and_a_heavy_sweep_puts_them_back(ib, tmp_path):
    lab, inv = ib
    lid_file = lab.node_sysroot("node01") / "sys/class/infiniband/mlx5_1/ports/1/lid"
    assigned = int(lid_file.read_text(), 16)  # what OpenSM gave the port
    lab.set_lids("node01-mlx5_1", lid=0x50)
    lab.set_lids("node01-mlx5_2", sm_lid=0x9)
    lab.half_activate("node01-mlx5_3")
    doc = health(inv, html=tmp_path / "h.html", prom_file=tmp_path / "h.prom")
    assert [(f["code"], f["kind"], f["target"], f["severity"]) for f in doc["findings"]] == [
        ("ib-view-lid", "link", "node01:mlx5_1/1", "error"),
        ("ib-view-sm-lid", "link", "node01:mlx5_2/1", "error"),
        ("ib-view-state", "link", "node01:mlx5_3/1<->leaf02/2", "error")], doc["findings"]
    lid, sm_lid, state = doc["findings"]
    assert (lid["evidence"]["host"]["lid"], lid["evidence"]["sm"]["fabric"]["lid"], lid["evidence"]["sm"]["sa_lid"]) \
        == ("0x50", 0x50, assigned) and assigned != 0x50
    assert (sm_lid["evidence"]["host"]["sm_lid"], sm_lid["evidence"]["sm"]["sm_lid"]) == ("0x9", 1)
    assert (state["evidence"]["host"]["state"], state["evidence"]["switch"]["state"]) == ("4: ACTIVE", "Armed")
    assert 'code="ib-view-sm-lid",finding_kind="link"' in (tmp_path / "h.prom").read_text()
    assert "node01:mlx5_3/1&lt;-&gt;leaf02/2" in (tmp_path / "h.html").read_text()
    lab.resweep()  # the findings' fix: OpenSM's heavy sweep
    assert health(inv)["findings"] == [] and int(lid_file.read_text(), 16) == assigned
