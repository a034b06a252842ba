"""Print the verification schedule of large rail-optimised fabrics: rounds, pairs, coverage,
the highest perftest port and the predicted verification time (computed, no lab needed).

Layouts (in-memory inventories, the same ones ``tests/verify/test_schedule.py`` checks):

- :func:`superpod` (256 nodes): DGX SuperPOD-style scalable units (SU) of 32 nodes with 8
  ConnectX-7 400G NICs each, one leaf per rail per SU (``su001-r0``: rail 0 of SU 1's 32 nodes on
  swp1-32, uplinks swp33-64: 64-port 400G leaves, non-blocking), 32 spines. Every leaf has one
  uplink to every spine, a two-tier Clos at its 64-radix limit (64 leaves x 32 nodes = 2,048 NICs =
  256 nodes). The inventory lists no uplink cabling: the schedule derives it (uplink j -> spine j).
- :func:`rail_planes` (10,000 nodes): past the two-tier limit of fixed 64-port switches, so each
  rail is its own plane: SUs of 32 nodes (313, the last with 16 nodes), rail r of every SU on the
  SU's rail-r leaf (2,504 leaves), each leaf with one uplink to each of its plane's 32 spines (256
  spines, modular chassis of up to 576 x 400G ports taking one link from each of the plane's 313
  leaves). A leaf reaches only its own plane's spines, so the cabling is in each leaf's ``uplinks``
  (as an inventory gives it, :mod:`tuning.model.cabling`; ``uplink j -> spine j mod S`` would
  send rail 0's leaves to 32 of the 256 spines only).
- ``fleet-N``: ``N/32`` copies of ``inventory/example-su`` written by
  ``bench/gen_example_su.py write_fleet`` into a temporary folder and loaded as any inventory
  (each SU's leaves cabled to its own 4 spines in their ``uplinks``): the cabling read from files.

Each schedule prints where its uplinks come from (the cabling, or the assumption used where the
inventory has none) and the estimated wall time of the whole verification
(:func:`tuning.verify.runner.expected_seconds`: GID discovery, then each round's batches of up to
512 pairs at once).

Usage (from the repository root)::

    python bench/verify_schedule.py [N_NODES | fleet-N | example-NAME ...]
    # default: 4 (the lab) 256 10000 fleet-10016 example-nvl72
"""

from __future__ import annotations

import math
from ipaddress import IPv4Interface
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuning.inventory import Connection, Device  # noqa: E402
from tuning.lab.fabric import NIC_BDFS, netdev_for  # noqa: E402
from tuning.model.ipv4 import shared_interface  # noqa: E402
from tuning.model.settings import NicSpec, NodeSpec, SwitchSpec  # noqa: E402

SU_NODES, RAILS, UPLINKS = 32, 8, 32
CONN = Connection("192.0.2.1", 22, "fabtune", None, None)


def _nodes(n_nodes: int, leaf: callable) -> list[Device]:
    """``n_nodes`` DGX-class nodes ``gpu00001..``; NIC r of node k on ``leaf(su, r)`` port
    ``swp<k mod 32 + 1>``, IPv4 ``10.r.<k div 250>.<k mod 250 + 1>/16``."""
    # the model's own checks are tested elsewhere (tests/input); validating 10,000 nodes' 80,000 NICs
    # took ~7 s of a test worker's time, so each is built as the model holds it (a NIC template copied
    # with its own values; the node's defaults shared, as a frozen model's may be)
    nic0 = NicSpec.model_construct(netdev="", rdma_device="", rail=0, ipv4=IPv4Interface("10.0.0.1/16"), switch="",
                                   switch_port="")
    node0 = NodeSpec.model_construct(nics=[])
    netdevs = [netdev_for(NIC_BDFS[r]) for r in range(RAILS)]
    out = []
    for k in range(n_nodes):
        nics = [nic0.model_copy(update={
            "netdev": netdevs[r], "rdma_device": f"mlx5_{r}", "rail": r,
            "ipv4": shared_interface((10 << 24) + (r << 16) + ((k // 250) << 8) + k % 250 + 1, 16),  # 10.r.k/250.k%250+1/16
            "switch": leaf(k // SU_NODES, r), "switch_port": f"swp{k % SU_NODES + 1}"}) for r in range(RAILS)]
        out.append(Device(f"gpu{k + 1:05d}", ["gpu_nodes"], CONN, node0.model_copy(update={"nics": nics})))
    return out


def _switch(name: str, ports: list[str], uplinks: dict[str, str] | None = None) -> Device:
    """A switch; its ``uplinks`` set as the model holds them after validation (80,128 entries at
    10,000 nodes: validating each took 3 s; the inventory path's checks are tested in
    tests/verify/test_cabling.py)."""
    spec = SwitchSpec.model_validate({"ports": ports})
    return Device(name, ["switches"], CONN, spec.model_copy(update={"uplinks": uplinks}) if uplinks else spec)


def _leaves(n_nodes: int, leaf: callable, cabling: callable = lambda s, r, j: None) -> list[Device]:
    """One leaf per SU and rail: its cabled node ports, then swp33-64 (uplinks); ``cabling(s, r, j)``:
    where uplink j of SU s's rail-r leaf goes (``SPINE:PORT``), None: not given."""
    sus = math.ceil(n_nodes / SU_NODES)
    out = []
    for s in range(sus):
        for r in range(RAILS):
            ups = {f"swp{33 + j}": cabling(s, r, j) for j in range(UPLINKS)}
            out.append(_switch(leaf(s, r), [f"swp1-{min(SU_NODES, n_nodes - s * SU_NODES)}", f"swp33-{32 + UPLINKS}"],
                               {k: v for k, v in ups.items() if v}))
    return out


def superpod(n_nodes: int = 256) -> tuple[list[Device], list[Device], None]:
    """(nodes, switches, links=None) of the SuperPOD-style two-tier layout (module docstring)."""
    leaf = lambda su, r: f"su{su + 1:03d}-r{r}"  # noqa: E731
    spines = [_switch(f"spine{j + 1:02d}", [f"swp1-{math.ceil(n_nodes / SU_NODES) * RAILS}"]) for j in range(UPLINKS)]
    return _nodes(n_nodes, leaf), _leaves(n_nodes, leaf) + spines, None


def rail_planes(n_nodes: int = 10_000) -> tuple[list[Device], list[Device], list[tuple[str, str, str]]]:
    """(nodes, switches, links) of the rail-plane layout (module docstring): leaf ``su<s>-r<r>``
    uplink ``swp<33 + j>`` -> ``plane<r>-spine<j + 1>`` port ``swp<s>``, in the leaves' ``uplinks``;
    ``links`` lists the same cables as (leaf, port, spine) for a test to check against."""
    leaf = lambda su, r: f"su{su + 1:03d}-r{r}"  # noqa: E731
    sus = math.ceil(n_nodes / SU_NODES)
    spines = [_switch(f"plane{r}-spine{j + 1:02d}", [f"swp1-{sus}"]) for r in range(RAILS) for j in range(UPLINKS)]
    links = [(leaf(s, r), f"swp{33 + j}", f"plane{r}-spine{j + 1:02d}")
             for s in range(sus) for r in range(RAILS) for j in range(UPLINKS)]
    cabling = lambda s, r, j: f"plane{r}-spine{j + 1:02d}:swp{s + 1}"  # noqa: E731
    return _nodes(n_nodes, leaf), _leaves(n_nodes, leaf, cabling) + spines, links


def example(name: str) -> tuple[list[Device], list[Device], None]:
    """A repository inventory, ``inventory/<name>`` (``example-nvl72``: one GB200 NVL72 rack)."""
    from tuning import inventory

    inv = inventory.load(Path(__file__).resolve().parents[1] / "inventory" / name)
    return inv.nodes, inv.switches, None


def lab() -> tuple[list[Device], list[Device], None]:
    """The embedded lab's inventory (4 nodes, leaf01/leaf02, spine01)."""
    from tuning import inventory

    inv = inventory.load(Path(__file__).resolve().parents[1] / "inventory" / "lab")
    return inv.nodes, inv.switches, None


def fleet(n_nodes: int) -> tuple[list[Device], list[Device], None]:
    """``ceil(n_nodes / 32)`` copies of ``inventory/example-su`` written to a temporary folder and
    loaded (:func:`tuning.inventory.load`): their cabling comes from the leaves' host_vars."""
    import tempfile

    from bench.gen_example_su import write_fleet
    from tuning import inventory

    with tempfile.TemporaryDirectory() as tmp:
        write_fleet(Path(tmp), math.ceil(n_nodes / SU_NODES))
        inv = inventory.load(Path(tmp))
    return inv.nodes, inv.switches, None


def report(name: str, nodes: list[Device], switches: list[Device], links) -> None:
    """Print one layout's schedule: pairs, rounds (sizes), coverage, ports, where its uplinks come
    from, the predicted wall time of the whole verification."""
    from tuning.verify.runner import GID_S, PAIR_S, expected_seconds
    from tuning.verify.pairs import rounds_upper_bound
    from tuning.verify.schedule import plan_schedule

    t = time.perf_counter()
    s = plan_schedule(nodes, switches)  # the cabling the switches' uplinks give, never ``links``
    took = time.perf_counter() - t
    deg = Counter(e for p in s.pairs for e in p.nics)
    print(f"{name}: {len(nodes)} nodes, {len(s.topology.leaves)} leaves, {len(s.topology.spines)} spines, "
          f"{len(s.topology.uplinks())} uplinks")
    print(f"  {s.topology.assumption}")
    print(f"  {len(s.pairs)} pairs ({sum(p.path == 'spine' for p in s.pairs)} through a spine) in {len(s.rounds)} "
          f"round(s) of {[len(r) for r in s.rounds]}; bound {rounds_upper_bound(s.pairs, s.per_node)}; "
          f"per node {s.per_node}; most pairs per NIC {max(deg.values())}")
    print(f"  {s.coverage.summary()}; uncoverable: {s.coverage.uncoverable or 'none'}")
    print(f"  ports {min(s.ports)}..{max(s.ports)}; old scheme (18515 + 2 i): up to {18515 + 2 * len(s.pairs) + 1}")
    new = expected_seconds(s.pairs)
    old = GID_S + PAIR_S * sum(math.ceil(len(r) / 4) for r in s.rounds)
    print(f"  estimated wall time of the whole verification {new:.0f} s ({new / 60:.1f} min); four at a time: {old:.0f} s "
          f"({old / 3600:.1f} h); schedule computed in {took:.2f} s")


def main(argv: list[str]) -> None:
    """Print the schedule of each size in ``argv`` (4 = the lab, up to 256 SuperPOD, beyond: rail
    planes; ``fleet-N``: N nodes of example-su copies, loaded from files; ``example-NAME``:
    ``inventory/example-NAME``)."""
    for arg in argv or ["4", "256", "10000", "fleet-10016", "example-nvl72"]:
        if arg.startswith("fleet-"):
            report(arg, *fleet(int(arg[6:])))
            continue
        if arg.startswith("example-"):
            report(arg, *example(arg))
            continue
        n = int(arg)
        if n == 4:
            report("lab", *lab())
        elif n <= 256:
            report(f"superpod-{n}", *superpod(n))
        else:
            report(f"rail-planes-{n}", *rail_planes(n))


if __name__ == "__main__":
    main(sys.argv[1:])
