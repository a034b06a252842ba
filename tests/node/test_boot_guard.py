"""The boot script pins an IRQ only while its number still names the same NIC's completion IRQ
(IRQ numbers can change between boots), and a moved IRQ never stops the later lines."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tuning.model import NodeSpec
from tuning.node.base import NodeFacts
from tuning.node.files import boot_settings
from tuning.node.irq import IrqDomain

BDF = "0000:0c:00.0"
SPEC = NodeSpec.model_validate({"mtu": 9000, "irq_affinity": "numa-local", "nics": [
    {"netdev": "enp12s0np0", "rdma_device": "mlx5_0", "switch": "leaf01", "switch_port": "swp1",
     "ipv4": "10.0.0.1/24", "rail": 0}]})
FACTS = NodeFacts(online_cpus="0-7", nics={"enp12s0np0": {
    "bdf": BDF, "numa_node": 0, "local_cpulist": "0-3", "comp_irqs": [101, 102], "driver": "ofed"}})


def _boot(root: Path, interrupts: str) -> subprocess.CompletedProcess:
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "interrupts").write_text(interrupts)
    for irq in (101, 102):
        (root / f"proc/irq/{irq}").mkdir(parents=True)
        (root / f"proc/irq/{irq}/smp_affinity_list").write_text("0-7\n")
    cmds, _ = boot_settings([IrqDomain()], SPEC, FACTS)
    return subprocess.run(["bash", "-c", "set -eu\n" + "\n".join(cmds)], cwd=root, capture_output=True, text=True)


def test_irqs_still_the_nics_are_pinned(tmp_path: Path):
    res = _boot(tmp_path, f" 101:  5  0  IR-PCI-MSIX-{BDF}  1-edge  mlx5_comp0@pci:{BDF}\n"
                          f" 102:  5  0  IR-PCI-MSIX-{BDF}  2-edge  mlx5_comp1@pci:{BDF}\n")
    assert res.returncode == 0, res.stderr
    assert [(tmp_path / f"proc/irq/{n}/smp_affinity_list").read_text() for n in (101, 102)] == ["0\n", "1\n"]


def test_an_irq_that_moved_to_another_device_is_skipped_and_said(tmp_path: Path):
    res = _boot(tmp_path, " 101:  5  0  IR-PCI-MSIX-0000:3b:00.0  1-edge  nvme0q1\n"
                          f" 102:  5  0  IR-PCI-MSIX-{BDF}  2-edge  mlx5_comp1@pci:{BDF}\n")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "proc/irq/101/smp_affinity_list").read_text() == "0-7\n"  # nvme's IRQ untouched
    assert (tmp_path / "proc/irq/102/smp_affinity_list").read_text() == "1\n"  # the later line still ran
    assert f"IRQ 101 is no longer a completion IRQ of enp12s0np0 ({BDF}); not pinned" in res.stderr
