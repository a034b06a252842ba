"""A node's completion IRQs are read from ``/proc/interrupts`` once per node and picked per NIC in
Python (:func:`tuning.node.facts.comp_irqs`); they must be exactly what the former per-NIC pipeline
``grep -E "mlx5_comp[0-9]+@pci:$bdf$" | cut -d: -f1 | tr -d ' ' | tr '\\n' ' '`` gave, on a real
``/proc/interrupts`` (shared/cases), the lab's rendering and generated lines."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from tuning.lab.fabric import default_fabric
from tuning.lab.sysroot import render_interrupts
from tuning.node.facts import comp_irqs

CASE = "proc_interrupts__32cpu_mlx5_msix_irqs_on_remote_numa.txt"


def _pipeline(path: Path, bdf: str) -> list[int]:
    """The former read: its output as ``from_raw`` took it (digits between blanks)."""
    out = subprocess.run(["bash", "-c", f"grep -E \"mlx5_comp[0-9]+@pci:$1\\$\" \"$2\" 2>/dev/null | cut -d: -f1 "
                                        "| tr -d ' ' | tr '\\n' ' '", "_", bdf, str(path)],
                         capture_output=True, text=True).stdout
    return [int(x) for x in out.split() if x.isdigit()]


def _lines(path: Path) -> str:
    """What the read script's one grep keeps (``b`` drops the last newline, as ``$(...)``)."""
    out = subprocess.run(["grep", "-E", "mlx5_comp[0-9]+@pci:", str(path)], capture_output=True, text=True).stdout
    return out.rstrip("\n")


def _texts(cases_dir: Path) -> list[tuple[str, str]]:
    node = default_fabric().node("node01")
    rng = random.Random(20261203)
    bdfs = [n.bdf for n in node.nics] + ["0000:c1:00.0", "0000:c1:00.1"]
    rows = []
    for i in range(60):  # generated rows: right-aligned numbers, other chips and names, near-miss names
        bdf, k = rng.choice(bdfs), rng.randint(0, 70)
        name = rng.choice([f"mlx5_comp{k}@pci:{bdf}", f"mlx5_async{k}@pci:{bdf}", f"mlx5_comp{k}@pci:{bdf}x",
                           f"nvme0q{k}", f"mlx5_comp{k}@pci:{bdf[:-1]}", "mlx5_comp@pci:" + bdf])
        rows.append(f"{rng.randint(24, 1023):>4}:{' ' * rng.randint(1, 6)}{rng.randint(0, 9)}  IR-PCI-MSIX  edge  {name}")
    return [("case", (cases_dir / CASE).read_text()), ("lab", render_interrupts(node)), ("generated", "\n".join(rows) + "\n")]


@pytest.mark.parametrize("which", ["case", "lab", "generated"])
def test_comp_irqs_equal_the_former_per_nic_pipeline(which: str, cases_dir: Path, tmp_path: Path) -> None:
    text = dict(_texts(cases_dir))[which]
    path = tmp_path / "interrupts"
    path.write_text(text)
    bdfs = {w.rsplit("@pci:", 1)[1] for w in text.split() if "@pci:" in w} | {"", "device", "0000:0c:00.9"}
    got = {bdf: comp_irqs(_lines(path), bdf) for bdf in sorted(bdfs)}
    want = {bdf: _pipeline(path, bdf) for bdf in sorted(bdfs)}
    assert got == want
    assert sum(map(len, got.values())) >= (16 if which == "case" else 1)
