"""Localisation over generated burn-in documents (tests/burnin/burnin_docs.py): an injected bad
node, bad link or congested uplink is named with the right kind and nothing else; noise alone
names nothing; hardware signals name one finding per faulty thing."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.burnin.burnin_docs import fabric, make_doc
from tuning.burnin.localise import fabric_graph, localise, topology_of

REPO = Path(__file__).resolve().parents[2]
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

shapes = st.tuples(st.integers(4, 8), st.sampled_from([2, 4, 6]))  # nodes, rails (2 leaves, 1 spine)


def names(findings: list[dict]) -> list[tuple[str, str, str]]:
    return [(f["code"], f["kind"], f["target"]) for f in findings]


@SETTINGS
@given(shapes, st.integers(1, 3), st.integers(0, 10**6), st.floats(0.0, 0.05))
def test_clean_matrix_with_noise_names_nothing(shape, rounds, seed, noise):
    doc = make_doc(fabric(*shape), rounds=rounds, seed=seed, noise=noise)
    assert localise(doc) == []


@SETTINGS
@given(shapes, st.integers(1, 3), st.integers(0, 10**6), st.data(), st.floats(0.0, 0.6))
def test_bad_node_is_one_node_finding(shape, rounds, seed, data, factor):
    topo = fabric(*shape)
    node = data.draw(st.sampled_from(sorted(topo["nodes"])))
    found = localise(make_doc(topo, rounds=rounds, seed=seed, slow={node: factor}))
    assert names(found) == [("node-slow", "node", node)]
    assert all(node in a + b for a, b in found[0]["evidence"]["pairs"])
    assert found[0]["evidence"]["rounds"] == list(range(rounds))


@SETTINGS
@given(shapes, st.integers(1, 3), st.integers(0, 10**6), st.data(), st.floats(0.0, 0.6))
def test_bad_link_is_one_link_finding(shape, rounds, seed, data, factor):
    topo = fabric(*shape)
    node = data.draw(st.sampled_from(sorted(topo["nodes"])))
    dev = data.draw(st.sampled_from(sorted(topo["nodes"][node])))
    nic = topo["nodes"][node][dev]
    found = localise(make_doc(topo, rounds=rounds, seed=seed, slow={f"{node}:{dev}": factor}))
    assert names(found) == [("link-slow", "link", f"{node}:{dev}<->{nic['switch']}:{nic['switch_port']}")]
    assert all(f"{node}:{dev}" in pair for pair in found[0]["evidence"]["pairs"])


@SETTINGS
@given(st.integers(4, 7), st.integers(0, 10**6), st.data(), st.floats(0.0, 0.6))
def test_congested_uplink_is_one_switch_finding(n_nodes, seed, data, factor):
    topo = fabric(n_nodes, 6, 3, 2)  # 3 leaves, 2 spines: an uplink's pairs differ from its spine's
    leaf, port, spine, _ = data.draw(st.sampled_from(topo["links"]))
    found = localise(make_doc(topo, rounds=2, seed=seed, slow={f"{leaf}:{port}": factor}))
    assert names(found) == [("switch-congested", "switch", f"{leaf}:{port}->{spine}")]
    assert found[0]["evidence"]["same_pairs"] == []


def test_congested_leaf_is_the_leaf():
    found = localise(make_doc(fabric(8, 8, 2, 1), slow={"leaf02": 0.5}))
    assert names(found) == [("switch-congested", "switch", "leaf02")]


def test_single_spine_uplinks_cannot_be_told_apart_and_say_so():
    """Lab cabling (2 leaves, 1 spine): every cross-leaf pair crosses both uplinks and the spine."""
    found = localise(make_doc(fabric(8, 8, 2, 1), slow={"spine01": 0.5}))
    assert [f["kind"] for f in found] == ["switch"]
    assert set(found[0]["evidence"]["same_pairs"]) | {found[0]["target"].split("->")[0]} == {
        "leaf01:swp41", "leaf02:swp41", "spine01"}
    assert "cannot tell them apart" in found[0]["message"]


def _xid(node: str, gpu: int = 3, code: int = 79):
    def mutate(rnd, i):
        if i >= 1:
            rnd["gpus"][node][gpu]["xid"] = [code]
    return mutate


def _degrade(nic: str, mbps: int = 200000):
    node, dev = nic.split(":")

    def mutate(rnd, i):
        rnd["nics"][node][dev]["link"]["speed_mbps"] = mbps
        for p in rnd["pairs"]:
            if nic in (p["client_nic"], p["server_nic"]):
                p["client_speed_mbps" if p["client_nic"] == nic else "server_speed_mbps"] = mbps
    return mutate


@settings(max_examples=3, deadline=None)
@given(st.integers(0, 10**6))
def test_two_faults_in_8_nodes_named_exactly(seed):
    """The issue's case: a GPU XID on one node and a slow (degraded) link on another, 8 nodes."""
    topo = fabric(8, 8, 2, 1)
    xid, deg = _xid("node02"), _degrade("node06:mlx5_3")
    for run in range(3):
        doc = make_doc(topo, rounds=2, seed=seed + run, slow={"node06:mlx5_3": 0.5},
                       mutate=lambda r, i: (xid(r, i), deg(r, i)))
        found = localise(doc)
        assert names(found) == [("gpu-xid", "node", "node02"),
                                ("link-speed-degraded", "link", "node06:mlx5_3<->leaf02:swp14")]
        assert found[0]["evidence"]["counters"]["gpu-xid"] == {"gpu3_xid": [79]}
        assert found[0]["evidence"]["rounds"] == [1]
        assert "GPU 3 (0000:1e:00.0) XID 79" in found[0]["message"]
        assert len(found[1]["evidence"]["pairs"]) == 14 and "200 Gb/s of 400" in found[1]["message"]


def test_node_fault_absorbs_its_link_symptoms():
    """XID on node03 and a slow NIC on node03: one node finding, the slow pairs as its evidence."""
    doc = make_doc(fabric(6, 4, 2, 1), slow={"node03:mlx5_1": 0.4}, mutate=_xid("node03"))
    found = localise(doc)
    assert names(found) == [("gpu-xid", "node", "node03")]
    assert found[0]["evidence"]["pairs"] and all("node03:mlx5_1" in p for p in found[0]["evidence"]["pairs"])


def test_flap_and_phy_loss_and_pcie_and_gpu_codes():
    def mutate(rnd, i):
        nics, gpus = rnd["nics"], rnd["gpus"]
        nics["node01"]["mlx5_0"]["link"]["carrier_down_delta"] = 2 if i == 1 else 0
        nics["node02"]["mlx5_1"]["counters"]["rx_symbol_err_phy"] = 40
        nics["node03"]["mlx5_2"]["pcie"]["width"] = 8
        gpus["node04"][0]["ecc_uncorrected"] = 1
        gpus["node05"][1]["remapped_rows_pending"] = 1
        gpus["node06"][2]["throttle_reasons"] = ["clocks_event_reasons.hw_thermal_slowdown", "gpu_idle"]
    found = localise(make_doc(fabric(6, 4, 2, 1), rounds=2, mutate=mutate))
    assert names(found) == [
        ("pcie-degraded", "node", "node03"), ("gpu-ecc", "node", "node04"), ("gpu-remapped-rows", "node", "node05"),
        ("gpu-throttle", "node", "node06"), ("link-flap", "link", "node01:mlx5_0<->leaf01:swp1"),
        ("link-lossy", "link", "node02:mlx5_1<->leaf02:swp2")]
    assert found[0]["message"] == "node03: mlx5_2 PCIe link at x8 of x16"
    assert found[3]["message"] == "node06: GPU 2 (0000:1d:00.0) throttled: hw_thermal_slowdown"
    assert found[4]["evidence"]["counters"]["link-flap"] == {"carrier_down": 2}
    assert found[4]["evidence"]["rounds"] == [1]
    assert found[5]["evidence"]["counters"]["link-lossy"] == {"rx_symbol_err_phy": 80}
    assert found[5]["message"] == "node02:mlx5_1: loss counters rose on it"


def test_transport_loss_names_the_nic_all_its_peers_saw():
    """out_of_sequence rises on the lossy NIC (on each of its connections) and on every peer it
    was tested with (on the one connection with it); each round tests every pair."""
    topo = fabric(6, 2, 2, 1)
    bad = "node04:mlx5_0"

    def mutate(rnd, i):
        peers = {p["server_nic"] if p["client_nic"] == bad else p["client_nic"] for p in rnd["pairs"]
                 if bad in (p["client_nic"], p["server_nic"])}
        for nic in peers | {bad}:
            n, d = nic.split(":")
            rnd["nics"][n][d]["counters"]["out_of_sequence"] = 7 * (len(peers) if nic == bad else 1)
    found = localise(make_doc(topo, rounds=2, mutate=mutate))
    assert names(found) == [("link-lossy", "link", "node04:mlx5_0<->leaf01:swp4")]
    assert found[0]["evidence"]["counters"]["link-lossy"] == {"out_of_sequence": 7 * 10 * 2}  # 5 same-rail + 5 cross-rail peers
    assert found[0]["message"] == "node04:mlx5_0: loss counters rose on it and on 10 NIC(s) tested with it"


def test_unreachable_node_and_error_pairs():
    def mutate(rnd, i):
        rnd["errors"]["node02"] = "ssh: connect to host 127.0.0.1 port 22102: Connection refused"
    doc = make_doc(fabric(4, 2, 2, 1), rounds=2, slow={"node02": 0.0}, mutate=mutate)
    found = localise(doc)
    assert names(found) == [("node-unreachable", "node", "node02")]
    assert "also node-slow" in found[0]["message"] and "Connection refused" in found[0]["message"]


def test_topology_of_the_lab_inventory_matches_its_cabling():
    from tuning import inventory

    topo = topology_of(inventory.load(REPO / "inventory" / "lab"))
    assert topo["links"] == [["leaf01", "swp31", "spine01", None], ["leaf02", "swp31", "spine01", None]]
    assert topo["nodes"]["node03"]["mlx5_5"] == {"netdev": "enp157s0np0", "rail": 5, "switch": "leaf02",
                                                  "switch_port": "swp11"}
    g = fabric_graph(topo)
    assert g.nodes["leaf01:swp31"]["tier"] == "uplink" and len(g) == 32 + 32 + 2 + 2 + 1
    # a localisation on the real lab topology (4 nodes): one bad NIC
    doc = make_doc(topo, slow={"node02:mlx5_4": 0.5})
    assert names(localise(doc)) == [("link-slow", "link", "node02:mlx5_4<->leaf01:swp10")]


def test_a_gpu_lost_from_the_bus_is_named_by_its_bus_id():
    """collect.py's entry for a GPU nvidia-smi no longer lists: no index, ``lost``, its XID codes."""
    def mutate(rnd, i):
        rnd["gpus"]["node04"][2] = {"index": None, "bdf": "0000:52:00.0", "lost": True, "xid": [79],
                                    "ecc_uncorrected": None, "throttle_reasons": [], "remapped_rows_pending": None,
                                    "remapped_rows_failed": None, "pcie_replays_delta": None}
    found = localise(make_doc(fabric(4, 2, 2, 1), rounds=1, mutate=mutate))
    assert names(found) == [("gpu-xid", "node", "node04")]
    assert found[0]["message"] == "node04: GPU (0000:52:00.0), fallen off the bus XID 79"
    assert found[0]["evidence"]["counters"]["gpu-xid"] == {"gpu_0000:52:00.0_xid": [79]}
