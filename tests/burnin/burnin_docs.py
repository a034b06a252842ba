"""Burn-in documents for the localisation, drain and report tests (not a test module).

Built in the documented shape (docs/burnin.md): pairs are real
:class:`tuning.verify.runner.PairResult` dicts, the topology is a lab-like rail-optimised
fabric (rail r on leaf ``r mod L``, NIC r of node k on ``swp{(r // L) * n + k}``, every leaf one
uplink to every spine) or :func:`tuning.burnin.localise.topology_of` of a real inventory.
"""

from __future__ import annotations

import random
from dataclasses import asdict

from tuning.verify.runner import PairResult

LINE_GBPS = 400
HEALTHY = 0.93


def fabric(n_nodes: int = 8, n_rails: int = 8, n_leaves: int = 2, n_spines: int = 1) -> dict:
    """The ``topology`` section of a lab-like fabric (module docstring)."""
    nodes = {f"node{k:02d}": {f"mlx5_{r}": {"netdev": f"ib{r}", "rail": r, "switch": f"leaf{r % n_leaves + 1:02d}",
                                            "switch_port": f"swp{(r // n_leaves) * n_nodes + k}"}
                              for r in range(n_rails)} for k in range(1, n_nodes + 1)}
    first_up = (n_rails // n_leaves + 1) * n_nodes + 1
    links = [[f"leaf{li:02d}", f"swp{first_up + s}", f"spine{s + 1:02d}", f"swp{li}"]
             for li in range(1, n_leaves + 1) for s in range(n_spines)]
    return {"nodes": nodes, "links": links}


def circle(names: list[str]) -> list[tuple[str, str]]:
    """Every pair of ``names`` once (the circle method, as tuning.verify.pairs.round_robin)."""
    ids = list(names) + ([None] if len(names) % 2 else [])
    out = []
    for r in range(len(ids) - 1):
        for i in range(len(ids) // 2):
            a, b = ids[i], ids[-1 - i]
            if a is not None and b is not None:
                out.append((a, b) if (r + i) % 2 == 0 else (b, a))
        ids = [ids[0], ids[-1], *ids[1:-1]]
    return out


def _route(topo: dict, a: str, b: str, salt: int) -> list[str]:
    """Client leaf uplink, spine, server leaf uplink of a cross-leaf pair (a fixed ECMP choice)."""
    la, lb = (topo["nodes"][x.split(":")[0]][x.split(":")[1]]["switch"] for x in (a, b))
    if la == lb:
        return []
    spines = sorted({s for _, _, s, _ in topo["links"]})
    if not spines:
        return []
    s = spines[salt % len(spines)]
    up = {(leaf, sp): f"{leaf}:{port}" for leaf, port, sp, _ in topo["links"]}
    return [up[(la, s)], s, up[(lb, s)]]


def pairs_of(topo: dict, cross: bool = True) -> list[tuple[str, str, list[str]]]:
    """All same-rail pairs of every rail (circle method) and, with ``cross``, each node pair's
    rail r -> rail r + 1 pair; each with its route."""
    nodes = sorted(topo["nodes"])
    rails = sorted({nic["rail"] for nics in topo["nodes"].values() for nic in nics.values()})
    devs = {nic["rail"]: dev for dev, nic in topo["nodes"][nodes[0]].items()}
    out = []
    for j, (x, y) in enumerate(circle(nodes)):
        for r in rails:
            pairs = [(f"{x}:{devs[r]}", f"{y}:{devs[r]}")]
            if cross and len(rails) > 1:
                pairs.append((f"{x}:{devs[r]}", f"{y}:{devs[rails[(rails.index(r) + 1) % len(rails)]]}"))
            out += [(a, b, _route(topo, a, b, j + r)) for a, b in pairs]
    return out


def result(topo: dict, a: str, b: str, bw: float | None, route: list[str], speeds=(400000, 400000)) -> dict:
    """A judged runner result dict for ``a -> b`` (``bw`` None: the test gave no value)."""
    (na, da), (nb, db) = a.split(":"), b.split(":")
    ea, eb = topo["nodes"][na][da], topo["nodes"][nb][db]
    r = PairResult(f"{a}->{b}", "leaf" if ea["switch"] == eb["switch"] else "spine", a, b,
                   f"{ea['switch']}:{ea['switch_port']}", f"{eb['switch']}:{eb['switch_port']}",
                   bw_gbps=None if bw is None else round(bw, 2), lat_us=None if bw is None else 3.1,
                   client_speed_mbps=speeds[0], server_speed_mbps=speeds[1])
    if bw is None:
        r.status, r.verdict, r.error_kind, r.error = "error", "fail", "timeout", "node did not answer"
    d = asdict(r)
    if route:
        d["route"] = route
    return d


def clean_nics(topo: dict) -> dict:
    """Per-NIC readings of a healthy round: no counter rises, links and PCIe at capability."""
    return {n: {d: {"counters": {"rx_discards_phy": 0, "out_of_sequence": 0, "rx_prio3_pause": 12},
                    "link": {"speed_mbps": 400000, "max_speed_mbps": 400000, "carrier_down_delta": 0},
                    "pcie": {"width": 16, "max_width": 16, "speed_gts": 32.0, "max_speed_gts": 32.0}}
                for d in nics} for n, nics in topo["nodes"].items()}


def clean_gpus(topo: dict) -> dict:
    """GPU readings of a healthy round: 8 GPUs per node, nothing wrong."""
    return {n: [{"index": i, "bdf": f"0000:{0x1b + i:02x}:00.0", "xid": [], "ecc_uncorrected": 0,
                 "remapped_rows_pending": 0, "remapped_rows_failed": 0, "throttle_reasons": ["gpu_idle"],
                 "pcie_replays_delta": 0} for i in range(8)] for n in topo["nodes"]}


def make_doc(topo: dict, rounds: int = 3, seed: int = 0, noise: float = 0.05, slow: dict | None = None,
             run_id: str = "20261130T160000-abcd", mutate=None) -> dict:
    """A burn-in document: ``rounds`` rounds of every pair at ``HEALTHY`` x line rate x
    (1 +- ``noise``). ``slow`` maps a graph vertex (NIC ``node01:mlx5_0``, node ``node03``,
    uplink ``leaf01:swp40``, switch) to a factor applied to every pair through it;
    ``mutate(round_dict, index)`` edits each round (counters, GPUs, links)."""
    rng = random.Random(seed)
    slow = slow or {}
    out_rounds = []
    for i in range(rounds):
        pairs = []
        for a, b, route in pairs_of(topo):
            ea, eb = (topo["nodes"][x.split(":")[0]][x.split(":")[1]] for x in (a, b))
            through = {a, b, a.split(":")[0], b.split(":")[0], ea["switch"], eb["switch"], *route}
            f = 1.0
            for v, factor in slow.items():
                if v in through:
                    f = min(f, factor)
            bw = LINE_GBPS * HEALTHY * (1 + rng.uniform(-noise, noise)) * f
            pairs.append(result(topo, a, b, None if f == 0 else bw, route))
        rnd = {"index": i, "t": 1000.0 + 60 * i, "pairs": pairs, "nics": clean_nics(topo), "gpus": clean_gpus(topo),
               "errors": {}}
        if mutate:
            mutate(rnd, i)
        out_rounds.append(rnd)
    return {"run_id": run_id, "inventory": "inventory/lab8", "started": 1000.0, "seconds": 60.0 * rounds,
            "kind": "burnin", "topology": topo, "rounds": out_rounds}
