"""Capture the sample outputs of ``tests/ib/cases/`` from the real tools over a fresh IB lab.

``.venv/bin/python -m tests.ib.capture_cases [tests/ib/cases]``: starts an IB lab in a temporary
folder (the module's partitions: Default plus tenant1 = node01 mlx5_0 full, node02 mlx5_0 limited),
runs each tool as a test reads it, injects the faults the file names say, and writes the outputs
(stdout only, as the tools print them). Not a test: the tests read the files it wrote.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from tuning.lab.ib import DEFAULT_PARTITIONS, IbLab
from tuning.lab.ib_partitions import IbMember, IbPartition

TENANT = IbPartition("tenant1", 0x0001, (IbMember("node01-mlx5_0", "full"), IbMember("node02-mlx5_0", "limited")),
                     ipoib=True, mtu=5, sl=3)


def _lid(linkinfo: str, description: str) -> str:
    lines = linkinfo.splitlines()
    return lines[lines.index(f"CA: {description}:") + 1].split()[1]


def capture(lab: IbLab, out: Path) -> None:
    """Run the tools over the running ``lab`` and write their outputs into ``out``."""
    def save(name: str, text: str) -> None:
        (out / name).write_text(text)

    h1, h2 = lab.topology.hca("node01-mlx5_0"), lab.topology.hca("node02-mlx5_0")
    save("sminfo__master_on_leaf01.txt", lab.run("sminfo"))
    links = lab.run("iblinkinfo")
    save("iblinkinfo__hdr_4x_all_active.txt", links)
    save("smpquery_pkeys__full_member_0x8001.txt", lab.run("smpquery", "pkeys", "-G", hex(h1.port_guid), "1"))
    save("smpquery_pkeys__limited_member_0x0001.txt", lab.run("smpquery", "pkeys", "-G", hex(h2.port_guid), "1"))
    save("smpquery_portinfo__hca_mtucap_2048.txt", lab.run("smpquery", "portinfo", "-G", hex(h1.port_guid), "1"))
    pair = f"{_lid(links, h1.description)}:{_lid(links, h2.description)}"
    save("saquery_pr__no_pkey_asked_sa_picks_0x8001.txt", lab.run("saquery", "PR", "--src-to-dst", pair))
    save("saquery_pr__tenant_pkey_0x8001_mtu2048_sl0.txt", lab.run("saquery", "PR", "--src-to-dst", pair, "--pkey", "0x8001"))
    lab.set_width(h1.node_id, "1X")
    save("iblinkinfo__one_hca_1x_could_be.txt", lab.run("iblinkinfo"))
    lab.set_counter(h1.node_id, "SymbolErrorCounter", 1234)
    lab.set_counter(h1.node_id, "LinkDownedCounter", 3)
    lab.set_counter("leaf01", "PortRcvErrors", 17, port=1)
    save("perfquery__hca_symbol_errors_1234.txt", lab.run("perfquery", "-G", hex(h1.port_guid), "1"))
    save("perfquery_x__hca_extended.txt", lab.run("perfquery", "-x", "-G", hex(h1.port_guid), "1"))
    save("ibqueryerrors__symbol_linkdowned_rcverrors.txt", lab.run("ibqueryerrors", ok_codes=(1,)))
    lab.link_down("node03-mlx5_1")
    time.sleep(1)
    save("iblinkinfo__hca_link_down.txt", lab.run("iblinkinfo"))
    save("iblinkinfo_l__line_mode.txt", lab.run("iblinkinfo", "-l"))


def main(argv: list[str]) -> None:
    out = Path(argv[0] if argv else Path(__file__).parent / "cases")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fabtune-ib-capture-") as tmp:
        lab = IbLab(Path(tmp), partitions=DEFAULT_PARTITIONS + (TENANT,))
        lab.up()
        try:
            capture(lab, out)
        finally:
            lab.down()


if __name__ == "__main__":
    main(sys.argv[1:])
