"""Capture the burn-in's IB reads of ``tests/ib/cases/`` from the real tools over a fresh 2-node IB lab.

``.venv/bin/python -m tests.ib.capture_burnin_cases [tests/ib/cases]``: starts an IB lab of 2 nodes
(16 HCAs, 2 leaves) in a temporary folder and writes the two commands of one burn-in read
(:func:`tuning.burnin.ib_read.read_fabric`: ``iblinkinfo``, then its perfquery line over every Active
cabled port) before and after the faults the file names say: node01 mlx5_0 retrained at 1X, 500 symbol
errors on node02 mlx5_3's port. Outputs are stdout only, as the tools print them. Not a test: the tests
read the files it wrote.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tuning.burnin.ib_read import _perfquery_command
from tuning.lab.fabric import default_fabric
from tuning.lab.ib import IbLab
from tuning.parsers.ib_links import parse_iblinkinfo


def _read(lab: IbLab) -> tuple[str, str]:
    links = lab.sm_shell().run("iblinkinfo", privileged=False)
    live = [p for p in parse_iblinkinfo(links.stdout).cabled() if p.state == "Active"]
    counters = lab.sm_shell().run(_perfquery_command(live), privileged=False)
    assert links.rc == 0 and counters.rc == 0, links.stderr + counters.stderr
    return links.stdout, counters.stdout


def main(argv: list[str]) -> None:
    out = Path(argv[0] if argv else Path(__file__).parent / "cases")
    with tempfile.TemporaryDirectory(prefix="fabtune-ib-burnin-capture-") as tmp:
        lab = IbLab(Path(tmp), default_fabric(n_nodes=2))
        lab.up()
        try:
            links, counters = _read(lab)
            (out / "iblinkinfo__2_nodes_all_4x.txt").write_text(links)
            (out / "perfquery_x__2_nodes_every_port_clean.txt").write_text(counters)
            lab.set_width("node01-mlx5_0", "1X")
            lab.set_counter("node02-mlx5_3", "SymbolErrorCounter", 500)
            links, counters = _read(lab)
            (out / "iblinkinfo__2_nodes_node01_mlx5_0_1x.txt").write_text(links)
            (out / "perfquery_x__2_nodes_node02_mlx5_3_symbol_errors_500.txt").write_text(counters)
        finally:
            lab.down()


if __name__ == "__main__":
    main(sys.argv[1:])
