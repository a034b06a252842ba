"""A lab rack of GB200 NVL72 compute trays (issue 24, :mod:`tuning.lab.hw_nvl72`): 2 trays of 4
GPUs, 4 NICs and 2 Grace CPUs roll out and verify, and what the tray shape changes is read back
from the nodes over SSH: each NIC's completion IRQs on its own Grace's 72 cores, one thread per
core, 4 pairs per tray per round, each GPU's rail NIC NODE from it (through its Grace) and not
flagged, a CPU plan of 36 whole cores per GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, TEST_BASE_PORT
from tuning import inventory
from tuning.lab import controller
from tuning.lab.fabric import fabric_for_inventory
from tuning.lab.hw_nvl72 import write_tray_inventory
from tuning.rollout import engine
from tuning.rollout.engine import Options
from tuning.transport.base import sysroot_path
from tuning.transport.ssh import SshHost
from tuning.verify.schedule import plan_schedule

pytestmark = pytest.mark.lab

#: NIC 2 of a tray (rail 2, the first NIC of Grace 1)
NIC2_BDF = "0000:4c:00.0"


def _read(inv: Path, node: str, command: str) -> str:
    """``command`` run on lab node ``node`` (unprivileged), with ``{root}`` its sysroot."""
    host = SshHost(node, inventory.load(inv).devices[node].connection)
    try:
        return host.run(command.format(root=sysroot_path(host.sysroot, "/").rstrip("/")), privileged=False).stdout
    finally:
        host.close()


def test_two_nvl72_trays_roll_out_and_verify_with_grace_numa_plans(tmp_path: Path):
    inv = write_tray_inventory(tmp_path / "inv", 2, base_port=TEST_BASE_PORT)
    fabric = fabric_for_inventory(inv)  # 4 NICs a node: the tray shape
    assert [(n.gpus, n.numa_cpulists, n.threads_per_core) for n in fabric.nodes] == [(4, ["0-71", "72-143"], 1)] * 2
    controller.up(inv / ".state", fabric)
    try:
        loaded = inventory.load(inv)
        s = plan_schedule(loaded.nodes, loaded.switches)
        assert s.per_node == 4 and len(s.rounds) == 2 and s.coverage.missing == []
        rep = engine.run(loaded, Options(mode="rollout", journal_dir=tmp_path / "journal"))
        assert rep.outcome == "kept", (rep.outcome, rep.errors)
        got = sorted((r["pair"], r["verdict"]) for r in rep.verify_after)
        assert got == sorted((p.name, "pass") for p in s.pairs) and len(got) == 5  # 4 rails + 1 through the spine
        irqs = _read(inv, "node02", "cd {root}/proc && for i in $(grep 'mlx5_comp[0-9]*@pci:" + NIC2_BDF +
                     "' interrupts | cut -d: -f1); do cat irq/$i/smp_affinity_list; done")
        cpus = [int(c) for c in irqs.split()]
        assert len(cpus) == 16 and len(set(cpus)) == 16 and all(72 <= c <= 143 for c in cpus), cpus  # Grace 1
        topo = _read(inv, "node01", "cat {root}/sys/devices/system/cpu/cpu80/topology/thread_siblings_list "
                                    "{root}/sys/devices/system/node/node1/cpulist "
                                    "{root}/sys/bus/pci/devices/" + NIC2_BDF + "/numa_node")
        assert topo.split() == ["80", "72-143", "1"]  # no SMT; NIC 2 on Grace 1's NUMA node
        res = subprocess.run([sys.executable, "-m", "tuning", "topology", "-i", str(inv), "node02", "--json"],
                             capture_output=True, text=True, cwd=REPO)
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        # GPU r reaches NIC r through its Grace (NODE, C2C): not flagged; per GPU 36 whole cores of its Grace
        assert [(k["rail_nic"], k["rail_link"], k["flag"]) for k in doc["topology"]["links"]] == [
            (f"mlx5_{r}", "NODE", None) for r in range(4)]
        assert [g["cpus"] for g in doc["cpu_plan"]["gpus"]] == ["0-35", "36-71", "72-107", "108-143"]
        assert doc["gres"][0] == "Name=gpu Type=gb200 File=/dev/nvidia0 Cores=0-35"
    finally:
        controller.down(inv / ".state")
