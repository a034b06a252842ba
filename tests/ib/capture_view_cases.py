"""Capture the host, SM and switch views of ``tests/ib/cases/views/`` from the real tools over a fresh 2-node IB lab.

``.venv/bin/python -m tests.ib.capture_view_cases [tests/ib/cases/views]``: starts an IB lab of 2 nodes
(16 HCAs, 2 leaves, node trees on) in a temporary folder and writes, before and after the faults
:mod:`tuning.lab.ib_port_faults` injects (node01 mlx5_1's LID set to 0x50, node01 mlx5_2's SM LID to 0x9,
node01 mlx5_3's link left half up: the HCA Active, its leaf port Armed):

- ``iblinkinfo__*.txt``, ``served__*.txt`` (:func:`tuning.burnin.ib_read.served_command` over the CA ports
  iblinkinfo shows: ``sminfo``, the SM port's subnet prefix, one ``saquery PR`` a port) and
  ``perfquery_x__*.txt`` (the perfquery line over every port a PMA query reaches): the three commands of
  one :func:`tuning.burnin.ib_read.read_fabric`, recorded as it sent them to the lab's SM shell;
- ``node01_ports__*.txt``: node01's read of its HCA ports (:func:`tuning.node.ib_ports.ports_command` run
  by bash on its sysroot, with the node tree's ``bin/`` first on PATH: the lab's ``ibv_devinfo``).

Outputs are stdout only, as the tools print them. Not a test: the tests read the files it wrote.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from tuning.burnin.ib_read import read_fabric
from tuning.lab.fabric import default_fabric
from tuning.lab.ib import IbLab
from tuning.node.ib_ports import ports_command
from tuning.targets.sm import SmTarget


class _Recorder:
    """The lab's SM shell, keeping each command's output: what :func:`read_fabric` sent, in order."""

    def __init__(self, lab: IbLab):
        self.shell, self.outputs = lab.sm_shell(), []

    def run(self, command: str, *, timeout: float = 60.0, privileged: bool = True):
        res = self.shell.run(command, timeout=timeout, privileged=False)
        self.outputs.append(res.stdout)
        return res


def _read(lab: IbLab) -> dict[str, str]:
    rec = _Recorder(lab)
    read_fabric(SmTarget("sm01", None, host=rec))
    root = lab.node_sysroot("node01")
    node = subprocess.run(["bash", "-c", ports_command(str(root))], capture_output=True, text=True,
                          env={"PATH": f"{root / 'bin'}:/usr/bin:/bin"})
    assert node.returncode == 0 and len(rec.outputs) == 3, node.stderr
    return {"iblinkinfo": rec.outputs[0], "served": rec.outputs[1], "perfquery_x": rec.outputs[2],
            "node01_ports": node.stdout}


def main(argv: list[str]) -> None:
    out = Path(argv[0] if argv else Path(__file__).parent / "cases" / "views")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fabtune-ib-views-capture-") as tmp:
        lab = IbLab(Path(tmp), default_fabric(n_nodes=2), node_trees=True)
        lab.up()
        try:
            for kind, text in _read(lab).items():
                (out / f"{kind}__2_nodes_clean.txt").write_text(text)
            lab.set_lids("node01-mlx5_1", lid=0x50)
            lab.set_lids("node01-mlx5_2", sm_lid=0x9)
            lab.half_activate("node01-mlx5_3")
            for kind, text in _read(lab).items():
                (out / f"{kind}__2_nodes_lid_smlid_half_up.txt").write_text(text)
        finally:
            lab.down()


if __name__ == "__main__":
    main(sys.argv[1:])
