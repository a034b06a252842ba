"""Capture ``tests/ib/cases/sl2vl/`` from the real ``smpquery sl2vl`` over a fresh 1-node IB lab.

``.venv/bin/python -m tests.ib.capture_sl2vl_cases [tests/ib/cases/sl2vl]``: starts an IB lab of 1 node (8 HCAs,
2 leaves) with OpenSM's ``qos`` on in a temporary folder and writes what ``smpquery sl2vl`` prints for
node01 mlx5_0's port (a CA: one row) and for leaf01 (a switch: one row per input port, output port 1), as
OpenSM's default programs them, and for the CA port after opensm.conf's ``qos_ca_sl2vl`` was set to
``0,1,2,3,4,5,6,7,7,6,5,4,3,2,1,15`` and OpenSM re-read it (SIGHUP). With ``qos`` off, ibsim's own table of
the CA port. Stdout only, as the tool prints it. Not a test: the tests read the files it wrote.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tuning.lab.fabric import default_fabric
from tuning.lab.ib import IbLab

CA = "0x0c42a10300000101"


def main(argv: list[str]) -> None:
    out = Path(argv[0] if argv else Path(__file__).parent / "cases" / "sl2vl")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fabtune-ib-sl2vl-capture-") as tmp:
        for qos in (False, True):
            lab = IbLab(Path(tmp) / f"qos{int(qos)}", default_fabric(n_nodes=1), qos=qos)
            lab.up()
            try:
                ca = lab.run("smpquery", "sl2vl", "-G", CA, "1")
                if not qos:
                    (out / "smpquery_sl2vl__ca_qos_off_ibsim_table.txt").write_text(ca)
                    continue
                (out / "smpquery_sl2vl__ca_opensm_default.txt").write_text(ca)
                (out / "smpquery_sl2vl__switch_leaf01_out_port_1.txt").write_text(lab.run("smpquery", "sl2vl", "1", "1"))
                conf = lab.dir / "opensm.conf"
                conf.write_text(conf.read_text().replace("qos_ca_sl2vl (null)", "qos_ca_sl2vl 0,1,2,3,4,5,6,7,7,6,5,4,3,2,1,15"))
                lab.set_partitions(lab.partitions)  # rewrites partitions.conf as it is and SIGHUPs OpenSM
                (out / "smpquery_sl2vl__ca_qos_ca_sl2vl_set.txt").write_text(lab.run("smpquery", "sl2vl", "-G", CA, "1"))
            finally:
                lab.down()


if __name__ == "__main__":
    main(sys.argv[1:])
