"""Capture ``tests/ib/cases/ibstat__*.txt``: the real ``ibstat`` (infiniband-diags) reading an IB lab node's
sysfs trees (:mod:`tuning.lab.ib_nodes`), as it reads a real node's.

``.venv/bin/python -m tests.ib.capture_node_cases [tests/ib/cases]`` (as root: ``unshare -m`` and a bind
mount): starts a one-node IB lab with ``node_trees``, unlinks node01's mlx5_3 and retrains mlx5_5 at 1X
through the lab, then runs ``ibstat`` in a mount namespace where the node's ``sys/class`` is bind-mounted
over ``/sys/class`` (libibumad reads ``/sys/class/infiniband`` and nothing else). Not a test.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from tuning.lab.fabric import default_fabric
from tuning.lab.ib import IbLab
from tuning.lab.ib_tools import program


def ibstat(sysroot: Path, *args: str) -> str:
    """``ibstat ARGS`` with ``sysroot``'s ``/sys/class`` as the machine's (a private mount namespace)."""
    script = 'mount --bind "$1/sys/class" /sys/class && shift && exec "$@"'
    done = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(sysroot), program("ibstat"), *args],
                          capture_output=True, text=True, check=True)
    return done.stdout


def main(argv: list[str]) -> None:
    out = Path(argv[0] if argv else Path(__file__).parent / "cases")
    with tempfile.TemporaryDirectory(prefix="fabtune-ibstat-capture-") as tmp:
        lab = IbLab(Path(tmp), default_fabric(n_nodes=1), node_trees=True)
        lab.up()
        try:
            lab.link_down("node01-mlx5_3")
            lab.set_width("node01-mlx5_5", "1X")
            text = ibstat(lab.node_sysroot("node01"))
        finally:
            lab.down()
    (out / "ibstat__8_hcas_mlx5_3_down_mlx5_5_1x.txt").write_text(text)


if __name__ == "__main__":
    main(sys.argv[1:])
