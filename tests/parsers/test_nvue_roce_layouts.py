"""``nv show qos roce`` in the layouts real releases print (issue 21), copied to the character from
CumulusNetworks/docs into tests/parsers/nvue/:

- CL 5.0 (``content/cumulus-linux-50/Layer-1-and-Switch-Ports/Quality-of-Service/
  RDMA-over-Converged-Ethernet-RoCE.md``): a ``description`` column, ``cable-length`` at the top,
  lines holding one space between the tables, an ``Exception List`` of a header and a ruler only;
- CL 5.15 (``content/cumulus-linux-515/.../RDMA-over-Converged-Ethernet-RoCE.md``, the
  ``lossy-multi-tc`` example): a DSCP column 89 characters wide, ``-`` cells, blank lines between the
  tables, an ``Extended Features`` table whose first column is named (no row index).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tuning.errors import ParseError
from tuning.parsers import parse

HERE = Path(__file__).parent / "nvue"


def _read(name: str) -> str:
    return (HERE / name).read_text()


def test_cl515_lossy_multi_tc_long_dscp_row() -> None:
    r = parse("nv-show-qos-roce", _read("nv_show_qos_roce__cl515_lossy_multi_tc_long_dscp.txt"))
    op = r.operational
    assert (op.enable, op.mode, op.pfc_priorities, op.ecn_enabled_tcs, op.probability) == (
        "on", "lossy-multi-tc", None, [1, 2, 3], 5)
    assert op.min_threshold.value == 163 * 1024 and op.max_threshold.value == 234 * 1024
    assert sorted(d for d, sp in r.dscp2sp.items() if sp == 4) == list(range(11, 41))  # the 89-character cell
    assert sorted(d for d, sp in r.dscp2sp.items() if sp == 0) == [0, 7, 8, 9, 10] + list(range(41, 64))
    assert len(r.dscp2sp) == 64 and not {5, 6, 7} & set(r.dscp2sp.values())  # '-' rows map nothing
    assert r.sp2tc == {i: i for i in range(8)} and r.sp_scheduler[7] == "DWRR-0%"
    assert r.tables["RoCE pool config"][1]["traffic-class"] == "0,1,2,3,4,5,6,7"
    assert r.tables["Extended Features"] == [{"Feature": "packet-trim", "Status": "enabled"}]
    assert r.tables["Exception List"] == []


def test_cl50_description_column_and_empty_exception_table() -> None:
    r = parse("nv-show-qos-roce", _read("nv_show_qos_roce__cl50_description_column_empty_exception_table.txt"))
    assert (r.applied.enable, r.operational.enable, r.operational.mode) == ("on", None, "lossless")
    assert r.tree["enable"].description == "Turn the feature 'on' or 'off'.  The default is 'off'."
    assert r.tree["cable-length"].operational == "100" and r.operational.pfc_priorities == [3]
    assert {d for d, sp in r.dscp2sp.items() if sp == 3} == set(range(24, 32)) and r.sp2tc[6] == 6
    assert [p["size"] for p in r.tables["RoCE pool config"]] == ["50.0%", "50.0%", "50.0%", "inf"]
    assert r.tables["Exception List"] == []


def test_a_table_cut_inside_its_ruler_is_refused() -> None:
    text = _read("nv_show_qos_roce__cl50_description_column_empty_exception_table.txt")
    with pytest.raises(ParseError, match="a ruler as wide as its header"):
        parse("nv-show-qos-roce", text.replace("    --  -----------\n", "    --  ----\n"))
