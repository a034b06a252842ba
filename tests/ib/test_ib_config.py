"""What the IB lab writes for ibsim and OpenSM, and the grammar every value passes first (no lab)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tuning.errors import InputError, SetupError, TuningError
from tuning.lab.fabric import default_fabric
from tuning.lab.ib import IbLab
from tuning.lab.ib_partitions import IbMember, IbPartition, partitions_conf
from tuning.lab.ib_tools import ib_env, program, sockname, umad2sim_library
from tuning.lab.ib_topology import net_file, topology_for

TOPO = topology_for(default_fabric())
#: ibnetdiscover's record lines as ibsim's parser reads them (``ibsim/sim_net.c``)
RECORD_LINE = re.compile(r'^(?:(?:Switch|Ca) \d+ "[\w.-]+" # "[\w. -]+"'
                         r'|\[\d+\] "[\w.-]+"\[\d+\] # (?:lid 0 lmc 0 )?"[\w. -]+" lid 0 4xHDR'
                         r"|(?:switchguid|caguid)=0x[0-9a-f]{16}|width=3|speed=7|extspeed=7|#.*|)$")


def test_net_file_has_every_hca_on_its_rail_leaf_with_set_guids():
    text = net_file(TOPO)
    assert all(RECORD_LINE.match(line) for line in text.splitlines()), \
        [x for x in text.splitlines() if not RECORD_LINE.match(x)]
    assert len(TOPO.hcas) == 32 and len({h.port_guid for h in TOPO.hcas} | {g for g, _ in TOPO.leaves.values()}) == 34
    h = TOPO.hca("node03-mlx5_5")
    assert (h.leaf, h.leaf_port, h.description, f"{h.port_guid:#018x}") == ("leaf02", 11, "node03 mlx5_5", "0x0c42a10300000351")
    assert f'caguid={h.node_guid:#018x}\nCa 1 "node03-mlx5_5" # "node03 mlx5_5"\n[1] "leaf02"[11]' in text
    assert '[31] "leaf02"[31] # "leaf02" lid 0 4xHDR' in text and 'Switch 40 "leaf01" # "leaf01"' in text


def test_a_node_name_outside_the_grammar_is_refused_before_anything_is_written():
    fabric = default_fabric(n_nodes=1)
    fabric.nodes[0].name = 'node"1'
    with pytest.raises(InputError, match="not an IB lab node id"):
        topology_for(fabric)


def test_partitions_conf_as_opensm_reads_it():
    tenant = IbPartition("tenant1", 0x0001, (IbMember("node01-mlx5_0"), IbMember("node02-mlx5_0", "limited"),
                                             IbMember("SELF")), ipoib=True, mtu=5, sl=3)
    text = partitions_conf([IbPartition("Default", 0x7FFF, (IbMember("ALL"),), ipoib=True), tenant], TOPO)
    assert text.splitlines()[1:] == [
        "Default=0x7fff,ipoib : ALL=full ;",
        "tenant1=0x0001,ipoib,mtu=5,sl=3 : 0x0c42a10300000101=full, 0x0c42a10300000201=limited, SELF=full ;"]


@pytest.mark.parametrize("bad, match", [
    (IbPartition("t", 0x8001, (IbMember("ALL"),)), "outside 0x1..0x7fff"),
    (IbPartition("t", 0, (IbMember("ALL"),)), "outside"),
    (IbPartition("t", True, (IbMember("ALL"),)), "outside"),
    (IbPartition("t x", 1, (IbMember("ALL"),)), "a letter"),
    (IbPartition("t;ALL", 1, (IbMember("ALL"),)), "a letter"),
    (IbPartition("t", 1, (IbMember("ALL"),), sl=16), "outside 0..15"),
    (IbPartition("t", 1, (IbMember("ALL"),), mtu=6), "outside 1..5"),
    (IbPartition("t", 1, (IbMember("node09-mlx5_0"),)), "no HCA"),
    (IbPartition("t", 1, (IbMember("ALL", "both"),)), "membership"),
    (IbPartition("t", 1, ()), "at least one member"),
])
def test_partition_values_outside_the_grammar_are_refused(bad, match):
    with pytest.raises(InputError, match=match):
        partitions_conf([bad], TOPO)


def test_a_pkey_or_name_given_twice_is_refused():
    a = IbPartition("a", 1, (IbMember("ALL"),))
    with pytest.raises(InputError, match="given twice"):
        partitions_conf([a, IbPartition("b", 1, (IbMember("ALL"),))], TOPO)
    with pytest.raises(InputError, match="given twice"):
        partitions_conf([a, IbPartition("a", 2, (IbMember("ALL"),))], TOPO)


def test_each_lab_has_its_own_ibsim_socket_and_no_inet_server(tmp_path, monkeypatch):
    monkeypatch.setenv("IBSIM_SERVER_NAME", "127.0.0.1")
    monkeypatch.setenv("SIM_HOST", "elsewhere")
    env = ib_env(tmp_path / "a" / "ib", host="leaf01")
    assert "IBSIM_SERVER_NAME" not in env and env["SIM_HOST"] == "leaf01"
    assert env["IBSIM_SOCKNAME"] == sockname(tmp_path / "a" / "ib") != sockname(tmp_path / "b" / "ib")
    assert env["LD_PRELOAD"] == umad2sim_library() and Path(env["LD_PRELOAD"]).name == "libumad2sim.so"


def test_a_missing_package_is_a_setup_error_naming_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SetupError, match="ibsim-utils"):
        program("ibsim")


def test_console_and_faults_refuse_what_ibsim_would_misread(tmp_path):
    lab = IbLab(tmp_path)
    with pytest.raises(TuningError, match="one console line"):
        lab.console('Unlink "leaf01"[1]\nquit')
    with pytest.raises(TuningError, match="no node"):
        lab.link_down('leaf01"[1] "leaf02')
    with pytest.raises(TuningError, match="counter"):
        lab.set_counter("node01-mlx5_0", "PortCounters.SymbolErrorCounter", 1)
    with pytest.raises(TuningError, match="width"):
        lab.set_width("node01-mlx5_0", "3X")
    with pytest.raises(TuningError, match="not running"):
        lab.console("Dump")
