"""The verification schedule, computed (no lab): every NIC in a same-rail pair, every leaf uplink
and spine crossed, rounds of disjoint pairs limited per node, per-node perftest ports that never
pass 65535, round robin, and the time a verification is expected to take.

Fabrics: the lab inventory, ``inventory/example-su`` (32 nodes, 8 rail leaves, 4 spines), and the
in-memory layouts of ``bench/verify_schedule.py`` (described there): 256 nodes as 8 SuperPOD-style
scalable units under 32 spines (uplinks derived from the inventory), and 10,000 nodes as 8 rail
planes of 313 leaves and 32 spines each (uplinks given as cabling). Coverage is checked here
against the layout's own cabling, independently of the schedule's bookkeeping. ``pytest -s``
prints each schedule's size.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from bench.verify_schedule import SU_NODES, UPLINKS, rail_planes, superpod
from tests.conftest import REPO
from tuning import inventory
from tuning.errors import InputError
from tuning.lab.fabric import default_fabric
from tuning.rollout.engine import Options, confirm_window, verify_pairs
from tuning.verify.pairs import build_rounds, round_robin, rounds_upper_bound, select_pairs
from tuning.verify.runner import expected_seconds
from tuning.verify.schedule import PORT_BASE, PORT_SLOTS, Uplink, allocate_ports, plan_schedule, topology_of

LAB = REPO / "inventory" / "lab"


def check(s, nodes, cabling: set[tuple[str, str, str]], label: str) -> None:
    """Every invariant of a full-fabric schedule ``s``, against the fabric's own ``cabling``
    (leaf, leaf port, spine); prints the schedule's size."""
    nics = {f"{d.name}:{n.rdma_device}": n for d in nodes for n in d.spec.nics}
    same_rail = [p for p in s.pairs if p.client_nic.rail == p.server_nic.rail]
    assert {e for p in same_rail for e in p.nics} == set(nics), "a NIC in no same-rail pair"
    crossed = Counter()
    for p in s.pairs:
        assert p.client != p.server and set(p.nics) <= nics.keys(), p  # real NICs of two nodes
        if p.route:
            up_a, spine, up_b = p.route
            assert (p.client_nic.switch, up_a.split(":")[1], spine) in cabling, p
            assert (p.server_nic.switch, up_b.split(":")[1], spine) in cabling, p
            crossed.update(p.route)
        else:
            assert p.client_nic.switch == p.server_nic.switch, f"{p.name} crosses leaves without a route"
    assert {f"{leaf}:{port}" for leaf, port, _ in cabling} <= set(crossed), "an uplink no pair crosses"
    assert {spine for _, _, spine in cabling} <= set(crossed), "a spine no pair crosses"
    assert sorted(i for r in s.rounds for i in r) == list(range(len(s.pairs)))
    for r in s.rounds:
        ends = [e for i in r for e in s.pairs[i].nics]
        assert len(ends) == len(set(ends)), "a NIC twice in a round"
        per_node = Counter(n for i in r for n in {s.pairs[i].client, s.pairs[i].server})
        assert max(per_node.values()) <= s.per_node
        served = [(s.pairs[i].server, s.ports[i]) for i in r]
        assert len(served) == len(set(served)), "a server node's port twice in a round"
    assert PORT_BASE <= min(s.ports) and max(s.ports) + 1 <= 65535
    bound = rounds_upper_bound(s.pairs, s.per_node)
    print(f"\n{label}: {len(nodes)} nodes, {len(s.pairs)} pairs in {len(s.rounds)} rounds "
          f"{[len(r) for r in s.rounds]} (bound {bound}); {s.coverage.summary()}; "
          f"ports {min(s.ports)}..{max(s.ports)}; "
          f"expected {expected_seconds(s.pairs):.0f} s")
    assert len(s.rounds) <= bound
    assert s.coverage.missing == [] and s.coverage.uncoverable == []


@pytest.fixture(scope="module")
def lab():
    return inventory.load(LAB)


@pytest.fixture(scope="module")
def pod256():
    nodes, switches, _ = superpod(256)
    return nodes, switches, plan_schedule(nodes, switches)


@pytest.fixture(scope="module")
def planes10k():
    nodes, switches, links = rail_planes(10_000)
    return nodes, switches, links, plan_schedule(nodes, switches)  # the cabling from the leaves' uplinks


def test_lab_keeps_its_18_pairs_and_derives_the_lab_cabling(lab):
    topo = topology_of(lab.nodes, lab.switches)
    assert topo.derived and topo.leaves == ["leaf01", "leaf02"] and topo.spines == ["spine01"]
    assert {(u.leaf, u.port, u.spine) for u in topo.uplinks()} == {
        (k.a, k.a_port, k.b) for k in default_fabric().links}  # the lab's real cables
    s = plan_schedule(lab.nodes, lab.switches)
    assert [p.name for p in s.pairs] == [p.name for p in select_pairs(lab.nodes)]  # baselines stay comparable
    assert s.rounds == [list(range(16)), [16, 17]] and s.per_node == 8
    assert [p.route for p in s.pairs if p.route] == [("leaf01:swp31", "spine01", "leaf02:swp31"),
                                                     ("leaf02:swp31", "spine01", "leaf01:swp31")]
    check(s, lab.nodes, {(u.leaf, u.port, u.spine) for u in topo.uplinks()}, "lab")
    # ports are the server node's: node02 serves rails 0-7 in round 1, 18515.. one port pair each
    assert [s.ports[i] for i, p in enumerate(s.pairs) if p.server == "node02"] == list(range(18515, 18531, 2))
    assert expected_seconds(s.pairs) == 5 + 8 * 2


def test_256_nodes_cover_every_nic_uplink_and_spine(pod256):
    nodes, switches, s = pod256
    topo = s.topology
    assert len(topo.leaves) == 64 and len(topo.spines) == 32 and topo.derived
    cabling = {(f"su{su + 1:03d}-r{r}", f"swp{33 + j}", f"spine{j + 1:02d}")
               for su in range(256 // SU_NODES) for r in range(8) for j in range(UPLINKS)}
    assert {(u.leaf, u.port, u.spine) for u in topo.uplinks()} == cabling  # derived: uplink j -> spine j
    check(s, nodes, cabling, "256 nodes")
    # one same-rail pair per NIC across scalable units, plus the 2 cross-rail pairs: at most 2 pairs
    # per NIC, so first fit needs at most 2 x 2 - 1 = 3 rounds
    assert len(s.rounds) <= 3 and len(s.pairs) == 256 * 8 // 2 + 2
    assert all(p.path == "spine" for p in s.pairs)


def test_10000_nodes_cover_every_nic_uplink_and_spine(planes10k):
    nodes, switches, links, s = planes10k
    assert len(s.topology.leaves) == 2504 and len(s.topology.spines) == 256 and not s.topology.derived
    assert s.topology.assumption == "uplinks from the inventory's cabling (the leaves' uplinks: key), every leaf"
    check(s, nodes, set(links), "10,000 nodes")
    assert len(s.rounds) <= 3 <= 10  # issue 24: at most 10 rounds
    # rail planes are not connected to each other: no cross-rail pair, not even the lab's two
    assert all(p.client_nic.rail == p.server_nic.rail for p in s.pairs)
    assert max(s.ports) < PORT_BASE + 2 * 8 * len(s.rounds)  # a node serves <= 8 tests a round
    assert PORT_BASE + 2 * len(s.pairs) > 65535  # the old port of pair i (18515 + 2 i) would overflow
    secs = expected_seconds(s.pairs)
    assert secs < 20 * 60, secs  # rounds of 512 tests at a time: minutes, not hours


def test_round_robin_meets_every_pair_once(lab):
    nodes, _, _ = superpod(8)
    for n, want in ((8, 7), (7, 7), (2, 1)):
        rounds = round_robin(nodes[:n])
        assert len(rounds) == want
        met = Counter(frozenset((p.client, p.server)) for r in rounds for p in r)
        assert len(met) == n * (n - 1) // 2 and set(met.values()) == {8}  # every pair, on all 8 rails
        for r in rounds:
            ends = [e for p in r for e in p.nics]
            assert len(ends) == len(set(ends))
    # without spines in the inventory nothing above the leaves needs covering: exactly N - 1 rounds
    s = plan_schedule(nodes, [], all_pairs=True)
    assert len(s.rounds) == 7 and len(s.pairs) == 28 * 8
    assert [[s.pairs[i].nics for i in r] for r in s.rounds] == [[p.nics for p in r] for r in round_robin(nodes)]
    # the lab (4 nodes, each rail on one leaf): 3 rounds, then one pair through the spine
    s = plan_schedule(lab.nodes, lab.switches, all_pairs=True)
    assert [len(r) for r in s.rounds] == [16, 16, 16, 1] and s.coverage.missing == []


def test_per_node_limit_and_its_bound(lab):
    pairs = plan_schedule(lab.nodes, lab.switches).pairs
    for limit in (1, 2, 3, 8):
        rounds = build_rounds(pairs, limit)
        for r in rounds:
            assert max(Counter(n for i in r for n in (pairs[i].client, pairs[i].server)).values()) <= limit
        assert math.ceil(9 / limit) <= len(rounds) <= rounds_upper_bound(pairs, limit)  # node01 is in 9 pairs
    assert len(build_rounds(pairs, 2)) == 5
    with pytest.raises(ValueError, match="at least 1"):
        build_rounds(pairs, 0)


def test_ports_stay_below_the_ephemeral_range_whatever_a_node_serves(lab):
    pairs = plan_schedule(lab.nodes, lab.switches).pairs
    hub = [pairs[0]] * (2 * PORT_SLOTS + 5)  # one server node, 14,257 tests in a row
    ports = allocate_ports(hub, [[i] for i in range(len(hub))])
    assert ports[0] == PORT_BASE and max(ports) == PORT_BASE + 2 * (PORT_SLOTS - 1) == 32765
    assert ports[PORT_SLOTS] == PORT_BASE and len(set(ports[:PORT_SLOTS])) == PORT_SLOTS  # reused last


def test_limit_scopes_the_schedule(lab):
    only = plan_schedule(lab.nodes, lab.switches, scope=lab.select(["node01"]))
    assert set(only.coverage.nics) == {f"node01:mlx5_{i}" for i in range(8)} and only.coverage.missing == []
    assert set(only.coverage.uplinks) == {"leaf01:swp31", "leaf02:swp31"} and only.coverage.spines == {"spine01": 1}
    spine = plan_schedule(lab.nodes, lab.switches, scope=lab.select(["spine01"]))
    assert spine.coverage.nics == {} and len(spine.pairs) == 1 and spine.pairs[0].route
    leaf = plan_schedule(lab.nodes, lab.switches, scope=lab.select(["leaf02"]))
    assert {n.split(":")[1] for n in leaf.coverage.nics} == {"mlx5_1", "mlx5_3", "mlx5_5", "mlx5_7"}
    assert leaf.coverage.missing == []
    # --rail 0: rail 0 sits on leaf01 only, so no rail-0 pair can cross the spine; it says so
    rail0 = plan_schedule(lab.nodes, lab.switches, rails=(0,))
    assert [p.name for p in rail0.pairs] == ["node01:mlx5_0->node02:mlx5_0", "node03:mlx5_0->node04:mlx5_0"]
    assert rail0.coverage.uncoverable == [
        "uplink leaf01:swp31: no NIC (on the verified rails) behind another leaf of spine01",
        "uplink leaf02:swp31: no NIC (on the verified rails) behind another leaf of spine01"]
    assert len(verify_pairs(lab, None, ["node01"])) == len(only.pairs)
    with pytest.raises(InputError, match="no host or group called 'node09'"):
        verify_pairs(lab, None, ["node09"])


def test_example_su_reads_its_cabling_two_uplinks_per_spine_and_covers_them():
    inv = inventory.load(REPO / "inventory" / "example-su")
    s = plan_schedule(inv.nodes, inv.switches)
    per = Counter((u.leaf, u.spine) for u in s.topology.uplinks())
    assert len(per) == 8 * 4 and set(per.values()) == {2}  # "each spine takes two uplinks from every leaf"
    assert not s.topology.derived and s.topology.assumed == []
    ups = {u.name: (u.spine, u.spine_port) for u in s.topology.uplinks()}
    assert ups["su1-leaf-r3:swp33"] == ("su1-spine01", "swp7") and ups["su1-leaf-r3:swp34"] == ("su1-spine01", "swp8")
    check(s, inv.nodes, {(u.leaf, u.port, u.spine) for u in s.topology.uplinks()}, "example-su")


def test_explicit_cabling_must_join_a_leaf_to_a_spine(lab):
    with pytest.raises(ValueError, match="not a leaf"):
        topology_of(lab.nodes, lab.switches, [("spine01", "swp1", "leaf01")])
    topo = topology_of(lab.nodes, lab.switches, [("leaf01", "swp31", "spine01")])
    assert topo.uplinks() == [Uplink("leaf01", "swp31", "spine01")] and not topo.connected("leaf01", "leaf02")


def test_confirm_window_follows_the_rounds(lab):
    pairs = verify_pairs(lab, None)
    assert confirm_window(Options(mode="rollout", confirm_s=39), pairs, 7) == 39  # 21 + 3 + 15
    with pytest.raises(InputError, match=r"at least 39 s for 18 pair\(s\) in 2 wave\(s\)"):
        confirm_window(Options(mode="rollout", confirm_s=38), pairs, 7)

def test_confirm_window_of_256_nodes(pod256):
    nodes, switches, s = pod256
    big = verify_pairs(inventory.Inventory(LAB, {d.name: d for d in nodes + switches}), None)
    assert [p.name for p in big] == [p.name for p in s.pairs]
    # 1,024 pairs in round 1 (2 batches of 512 threads) and 2 in round 2: 5 + 8 x 3 = 29 s; + 3 + 15
    assert expected_seconds(big) == 29 and confirm_window(Options(mode="rollout", confirm_s=47), big, 7) == 47
    with pytest.raises(InputError, match=r"at least 47 s for 1026 pair\(s\) in 2 wave\(s\)"):
        confirm_window(Options(mode="rollout", confirm_s=46), big, 7)
