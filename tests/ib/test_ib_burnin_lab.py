"""``fabtune burnin`` on an InfiniBand fabric (issue 22, must-show 2), over the real OpenSM 3.3.23 and
infiniband-diags on ibsim: an inventory whose subnet manager is the IB lab's (``fabtune_local``, the
lab's IB tools on PATH) is burned in; with a 1X link and a symbol-error burst injected during the
window, the run names exactly that cable and that node port, with the counters as evidence, and
nothing else; a clean run names nothing and exits 0.

One 2-node lab (16 HCA ports on 2 leaves) for the module; the faulty test puts the lab back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from tuning import inventory
from tuning.burnin.run import BurninOptions, run_burnin
from tuning.cli_burnin import _exit_code
from tuning.lab.fabric import default_fabric
from tuning.lab.ib import SM_PATHS, IbLab

pytestmark = pytest.mark.lab

DEFAULT = {"name": "Default", "pkey": 0x7FFF, "ipoib": True, "members": {"ALL": "full"}}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The 2-node IB lab, up, and an inventory of its SM alone (the SM host is this controller, the lab's
    IB tools on PATH: ``IbLab.tools_dir``); the lab is down after the module."""
    root = tmp_path_factory.mktemp("ibburnin")
    lab = IbLab(root, default_fabric(n_nodes=2))
    hosts = {"sm01": {"ansible_host": "127.0.0.1", "fabtune_sysroot": str(lab.dir), "fabtune_local": True}}
    (root / "inv" / "host_vars").mkdir(parents=True)
    (root / "inv" / "hosts.yaml").write_text(yaml.safe_dump({"all": {"children": {"subnet_managers": {"hosts": hosts}}}}))
    (root / "inv" / "host_vars" / "sm01.yml").write_text(yaml.safe_dump({**SM_PATHS, "partitions": [DEFAULT]}))
    with pytest.MonkeyPatch.context() as mp:
        lab.up()
        mp.setenv("PATH", f"{lab.tools_dir}{os.pathsep}{os.environ['PATH']}")
        try:
            yield lab
        finally:
            assert lab.down()


@pytest.fixture
def inv(lab):
    return lab.dir.parent / "inv"


def test_a_clean_fabric_burns_in_with_no_finding_exit_0(inv):
    done = subprocess.run([sys.executable, "-m", "tuning", "burnin", "-i", str(inv), "--iterations", "1",
                           "--ib-recovery", "1s", "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert doc["findings"] == [] and doc["ib"]["sms"] == ["sm01"]
    reads = [doc["ib"]["baseline"]["sm01"], doc["rounds"][0]["ib"]["sm01"], doc["ib"]["recovery"]["sm01"]]
    assert [len(r["ports"]) for r in reads] == [34, 34, 34]  # 16 HCA ports, 16 leaf ports, the uplink's 2 ends
    assert {r["ports"]["node02:mlx5_3/1"]["counters"]["SymbolErrorCounter"] for r in reads} == {0}


def test_injected_1x_link_and_symbol_burst_name_that_cable_and_that_node_port_and_nothing_else(lab, inv, tmp_path):
    def inject(line: str) -> None:
        if line.startswith("round 1/1:"):  # after the baseline read, before the round's read: in the window
            lab.set_width("node01-mlx5_0", "1X")
            lab.set_counter("node02-mlx5_3", "SymbolErrorCounter", 500)

    try:
        opts = BurninOptions(iterations=1, ib_recovery_s=1.0, html=tmp_path / "b.html", prom_file=tmp_path / "b.prom")
        doc = run_burnin(inventory.load(inv), opts, inject)
    finally:
        lab.set_width("node01-mlx5_0", "4X")
        lab.set_counter("node02-mlx5_3", "SymbolErrorCounter", 0)
    assert [(f["code"], f["kind"], f["target"], f["evidence"]["end"]) for f in doc["findings"]] == [
        ("ib-width-degraded", "link", "node01:mlx5_0/1<->leaf01/1", None),
        ("ib-link-errors", "link", "node02:mlx5_3/1<->leaf02/4", "node02:mlx5_3/1")]
    width, errors = doc["findings"]
    assert width["evidence"]["rounds"] == [0, "recovery"]  # not at the baseline: injected in the window
    assert "runs 1X 53.125 Gbps (iblinkinfo: could be 12X); the fabric's links run 4X" in width["message"]
    assert errors["evidence"]["counters"] == {"node02:mlx5_3/1": {"window": {"SymbolErrorCounter": 500}}}
    assert "none in the 1 s recovery window" in errors["message"]
    assert _exit_code(doc) == 1
    prom = (tmp_path / "b.prom").read_text()
    assert 'code="ib-link-errors",finding_kind="link",inventory=' in prom and 'target="node02:mlx5_3/1<->leaf02/4"' in prom
    assert "node01:mlx5_0/1&lt;-&gt;leaf01/1" in (tmp_path / "b.html").read_text()
