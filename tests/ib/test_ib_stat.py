"""``fabtune parse ibstat`` (tuning.parsers.ib_stat) on real ibstat outputs:

- ``ibstat__8_hcas_mlx5_3_down_mlx5_5_1x.txt``: the real ibstat (infiniband-diags, rdma-core 44) reading
  an IB lab node's sysfs trees (mlx5_3 unlinked, mlx5_5 retrained at 1X through the lab), captured by
  ``python -m tests.ib.capture_node_cases``: libibumad parsed every file the lab wrote;
- ``ibstat__cx6_one_port_down_disabled.txt``: two ConnectX-6 CAs of a real host as NVIDIA/nccl-tests
  issue 128 ("nccl-tests on different GPUs") quotes ibstat (its indent as pasted there: spaces).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tuning.errors import InputError, ParseError
from tuning.parsers import parse
from tuning.parsers.ib_stat import parse_ibstat

CASES = Path(__file__).parent / "cases"
LAB = (CASES / "ibstat__8_hcas_mlx5_3_down_mlx5_5_1x.txt").read_text()
CX6 = (CASES / "ibstat__cx6_one_port_down_disabled.txt").read_text()


def test_the_lab_node_reads_as_ibstat_prints_it():
    res = parse_ibstat(LAB)
    assert [c.name for c in res.cas] == [f"mlx5_{i}" for i in range(8)]
    ca = res.cas[3]
    assert (ca.ca_type, ca.fw_ver, ca.hw_ver, ca.node_guid) == ("MT4129", "28.39.2048", "0", "0x0c42a10300000130")
    p = res.port("mlx5_3", 1)
    assert (p.state, p.phys_state, p.rate, p.base_lid, p.sm_lid, p.port_guid, p.link_layer) == \
        ("Down", "Polling", 200.0, 6, 1, "0x0c42a10300000131", "InfiniBand")
    assert res.port("mlx5_5", 1).rate == 50.0 and res.port("mlx5_0", 1).rate == 200.0
    assert [(f.code, f.subject) for f in res.findings] == [("ib_port_down", "mlx5_3 port 1")]


def test_a_real_host_with_a_disabled_port():
    res = parse_ibstat(CX6)
    down = res.port("mlx5_1", 1)
    assert (down.state, down.phys_state, down.rate, down.base_lid, down.sm_lid) == ("Down", "Disabled", 10.0, 65535, 0)
    assert (res.port("mlx5_0", 1).sm_lid, res.cas[0].ca_type) == (393, "MT4123")
    assert [(f.code, f.message) for f in res.findings] == [("ib_port_down", "mlx5_1 port 1: Down/Disabled, not Active/LinkUp")]


def test_the_rate_context_names_the_slow_port():
    res = parse("ibstat", LAB, {"rate": "200"})
    assert [(f.code, f.message) for f in res.findings] == [
        ("ib_port_down", "mlx5_3 port 1: Down/Polling, not Active/LinkUp"),
        ("ib_rate_low", "mlx5_5 port 1: Rate 50 Gb/s, below 200")]
    with pytest.raises(InputError, match="like 200 or 2.5"):
        parse("ibstat", LAB, {"rate": "fast"})


@pytest.mark.parametrize("text, expected", [
    ("\tPort 1:\n", "a 'CA '<name>'' line first"),
    (LAB.replace("Rate: 50\n", "Rate: 104x\n"), "'Rate: <Gb/s>' (200, 2.5)"),
    (LAB.replace("\t\tSM lid: 1\n", "\t\tSM lid: one\n", 1), "a number after 'SM lid:'"),
    (LAB.split("\t\tPhysical state: LinkUp")[0], "State, Physical state and Rate of mlx5_0 port 1"),
    ("CA 'mlx5_0'\n\tWhat: x\n", "'Port N:' or a 'Key: value' line of ibstat"),
])
def test_output_that_is_not_ibstats_is_refused(text, expected):
    with pytest.raises(ParseError) as e:
        parse_ibstat(text)
    assert expected in str(e.value)


def test_fabtune_parse_ibstat_prints_json():
    r = subprocess.run([sys.executable, "-m", "tuning", "parse", "ibstat", str(CASES / "ibstat__cx6_one_port_down_disabled.txt")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["tool"], doc["cas"][1]["ports"][0]["state"], doc["findings"][0]["code"]) == ("ibstat", "Down", "ib_port_down")
