"""`fabtune health --local` (this machine's sysfs, no SSH) and the command line's exit codes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from tests.adversarial._cli import cli
from tests.conftest import REPO, TEST_BASE_PORT
from tuning.burnin.health import local_document
from tuning.burnin.run import BurninOptions
from tuning.lab import hw_pci
from tuning.lab.fabric import default_fabric
from tuning.lab.scale import write_inventory
from tuning.lab.sysroot import build_sysroot


def test_local_health_reads_sysfs_and_names_a_narrow_pcie_link(tmp_path: Path):
    root = tmp_path / "sysroot"
    node = default_fabric().node("node01")
    build_sysroot(root, node)
    hw_pci.inject(root, "pcie-link", node.nics[5].bdf, "32.0 GT/s PCIe", 4)
    doc = local_document(root, BurninOptions(kind="health", report_json=tmp_path / "h.json"))
    me = socket.gethostname().split(".")[0]
    nics = doc["rounds"][0]["nics"][me]
    assert sorted(nics) == [f"mlx5_{i}" for i in range(8)]
    assert nics["mlx5_5"]["pcie"] == {"width": 4, "max_width": 16, "speed_gts": 32.0, "max_speed_gts": 32.0}
    assert nics["mlx5_0"]["link"]["speed_mbps"] == 400000 and nics["mlx5_0"]["counters"]["lifespan"] == 10
    assert [(f["code"], f["kind"], f["target"]) for f in doc["findings"]] == [("pcie-degraded", "node", me)]
    assert json.loads((tmp_path / "h.json").read_text())["kind"] == "health"


def test_health_of_an_unreachable_fabric_exits_4_and_names_the_nodes(tmp_path: Path):
    inv = write_inventory(tmp_path / "inv", 2, base_port=TEST_BASE_PORT + 200)  # nothing listens there
    r = subprocess.run([sys.executable, "-m", "tuning", "health", "-i", str(inv), "--json"],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 4, r.stderr[-1500:]
    doc = json.loads(r.stdout)
    assert sorted(doc["unreachable"]) == ["node01", "node02"] and doc["rounds"][0]["pairs"] == []


def test_burnin_refuses_bad_input_with_one_line_and_exit_2(tmp_path: Path):
    for argv, text in ((["--iterations", "0"], "--iterations"), (["--duration", "2 weeks"], "--duration"),
                       (["--iterations", "1", "--drain-adapter", "pbs"], "--drain-adapter"), ([], "--iterations")):
        code, _, err = cli("burnin", "-i", str(REPO / "inventory/lab"), *argv, cwd=REPO)  # in process
        assert code == 2 and len(err.strip().splitlines()) == 1 and text in err, (argv, err)


def test_local_health_that_reads_no_nic_and_no_gpu_fails(tmp_path: Path):
    """NICs hidden (no /sys/class/infiniband entries under the root) and no GPU: the check read
    nothing, so it names that and fails (a Slurm HealthCheckProgram must not pass such a node)."""
    import shutil

    root = tmp_path / "sysroot"
    build_sysroot(root, default_fabric().node("node01"))
    shutil.rmtree(root / "sys/class/infiniband")
    doc = local_document(root, BurninOptions(kind="health"))
    me = socket.gethostname().split(".")[0]
    assert doc["rounds"][0]["nics"][me] == {}
    found = [(f["code"], f["kind"], f["target"]) for f in doc["findings"]]
    if doc["rounds"][0]["gpus"][me]:  # this machine's own GPUs (NVML) were read: the node is not empty
        assert ("node-nothing-read", "node", me) not in found, found
    else:
        assert found == [("node-nothing-read", "node", me)]
        assert "no RDMA NIC and no GPU could be read in 1 round(s)" in doc["findings"][0]["message"]
