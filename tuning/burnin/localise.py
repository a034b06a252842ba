"""Localisation: from a burn-in document, name each faulty thing once (a node, a link, a switch).

Input: the burn-in document (docs/burnin.md; ``tuning.burnin.run.run_burnin`` builds it): its
``topology`` (:func:`topology_of`) and ``rounds`` (the runner's pair result dicts, per-NIC
counter deltas, link and PCIe state, GPU health). Output: findings, JSON-ready dicts::

    {"code": "link-slow", "kind": "link", "target": "node03:mlx5_2<->leaf01:swp10",
     "message": "one line", "evidence": {"pairs": [["node03:mlx5_2", "node05:mlx5_2"]],
                                         "counters": {...}, "rounds": [0, 1]}}

Pair matrix (:func:`pair_stats`): a pair is slow in a round when its test gave no value
(``status == "error"``), its bandwidth is below :data:`SLOW_RATIO` of its rail's reference (the
75th percentile of the round's pairs on that rail: the rail's healthy rate even when a bad node
makes a quarter of them slow; the ratio to the rail's median is reported too), or below
:data:`MIN_LINE_SHARE` of its line rate (a whole rail or leaf slow). Slow overall: in at least
half of the rounds that measured it.

Explanation (:func:`explain_slow`), on the networkx graph NIC - leaf port - leaf - uplink - spine
(:func:`fabric_graph`), each pair placed on the vertices every shortest path shares (its
``route`` when the document gives one: ECMP picks among several otherwise):

1. node: a node whose NICs are bad (at least :data:`BAD_NIC_SHARE` of a NIC's pairs slow) on
   at least :data:`NODE_RAIL_SHARE` of its measured rails, and on 2 rails or more: ``node-slow``.
   Hardware state names nodes too (:mod:`tuning.burnin.signals`: GPU XID, ECC, remapped rows,
   throttle, NIC PCIe below capability). A node finding absorbs every link symptom of its NICs.
2. then greedily, the component explaining the most remaining slow pairs (at least
   :data:`BAD_NIC_SHARE` of its pairs slow, 2 pairs or more, or a NIC tested once): a NIC's cable
   (``link-*``, the code from its counters: flap, speed, lossy, else ``link-slow``), a leaf
   uplink, a leaf or a spine (``switch-congested``). Ties: fewer pairs through it first (the
   more specific), then NIC before uplink before switch.
3. links named only by their counters (flap, speed below capability, loss) are added.
4. on an InfiniBand fabric read through its subnet managers (the document's ``ib`` reads), each
   cable with a link signal (down, flap, width or speed below capability, error counters) is one
   more link finding, both ends named and the end that counts errors in its evidence
   (:mod:`tuning.burnin.ib_judge`);
5. where a node's own view of an HCA port (its sysfs) disagrees with the SM's (the LID its SA serves, the
   master SM's LID) or with the switch port at the far end of its cable (state, rate), each disagreement
   is its own link finding (:mod:`tuning.burnin.ib_views`), and a cable finding on that switch port gives
   way to it (a disagreement is not "link down").

A pair whose test failed in the verification harness itself (``error_class == "harness"``: a port
another process held, a tool that could not start; :data:`tuning.verify.pair_result.HARNESS_KINDS`)
tested nothing of the fabric: it is left out of the pair matrix, and each node where the harness
failed is one ``harness-error`` finding of kind ``harness``, which never drains
(:func:`tuning.burnin.drain.node_of` drains nodes and links only).
"""

from __future__ import annotations

import statistics
import networkx as nx

from tuning.burnin import ib_judge, ib_views, signals
from tuning.verify.pair_result import harness_node
from tuning.node import ib_ports

#: a pair is slow below this share of its rail's reference rate (75th percentile of the round)
SLOW_RATIO = 0.8
#: ... or below this share of its line rate (a whole rail or leaf slow)
MIN_LINE_SHARE = 0.5
#: a NIC (or a component) is bad when at least this share of its pairs is slow
BAD_NIC_SHARE = 0.6
#: a node is slow when its NICs are bad on at least this share of its measured rails
NODE_RAIL_SHARE = 0.75
#: node-level codes, most severe first: one finding per node takes the first that applies
NODE_CODES = ("gpu-xid", "gpu-ecc", "gpu-remapped-rows", *ib_ports.CODES, "pcie-degraded", "gpu-throttle",
              "node-unreachable", "node-nothing-read", "node-slow")
#: link-level codes, most specific cause first
LINK_CODES = ("link-flap", "link-speed-degraded", "link-lossy", "link-slow")


def topology_of(inv) -> dict:
    """The document's ``topology`` section for an inventory (``tuning.inventory.Inventory``).

    Uplinks: :func:`tuning.verify.schedule.topology_of`'s rule (a leaf's listed ports no NIC is
    cabled to, spread over the spines in inventory order); the spine port is not in the
    inventory and is written as None.

    Returns:
        ``{"nodes": {"node01": {"mlx5_0": {"netdev": "enp12s0np0", "rail": 0, "switch": "leaf01",
        "switch_port": "swp1"}, ...}}, "links": [["leaf01", "swp31", "spine01", None], ...]}``.
    """
    from tuning.verify.schedule import topology_of as verify_topology

    nodes = {d.name: {n.rdma_device: {"netdev": n.netdev, "rail": n.rail, "switch": n.switch,
                                      "switch_port": n.switch_port} for n in d.spec.nics} for d in inv.nodes}
    topo = verify_topology(inv.nodes, inv.switches)
    return {"nodes": nodes, "links": [[u.leaf, u.port, u.spine, None] for u in topo.uplinks()]}


def fabric_graph(topology: dict) -> nx.Graph:
    """The fabric as an undirected graph: vertices ``node01:mlx5_0`` (tier ``nic``),
    ``leaf01:swp1`` (``port``), ``leaf01`` (``leaf``), ``leaf01:swp31`` (``uplink``), ``spine01``
    (``spine``); edges NIC-port, port-leaf, leaf-uplink, uplink-spine."""
    g = nx.Graph()
    for node, nics in topology.get("nodes", {}).items():
        for dev, nic in nics.items():
            nic_v, port_v = f"{node}:{dev}", f"{nic['switch']}:{nic['switch_port']}"
            g.add_node(nic_v, tier="nic", node=node, rail=nic.get("rail"), link=port_v)
            g.add_node(port_v, tier="port")
            g.add_node(nic["switch"], tier="leaf")
            g.add_edge(nic_v, port_v)
            g.add_edge(port_v, nic["switch"])
    for leaf, port, spine, *_ in topology.get("links", []):
        g.add_node(f"{leaf}:{port}", tier="uplink", spine=spine)
        g.add_node(spine, tier="spine")
        g.add_edge(leaf, f"{leaf}:{port}")
        g.add_edge(f"{leaf}:{port}", spine)
    return g


def pair_path(g: nx.Graph, a: str, b: str, route: list | tuple | None = None) -> frozenset[str]:
    """Vertices a pair's traffic surely crosses: its ``route`` (``("leaf01:swp31", "spine01",
    "leaf02:swp31")``) with both ends' NIC, port and leaf, else what every shortest path
    between the two NICs' leaves shares (cached per leaf pair in ``g.graph``); empty when the
    ends are not in the graph."""
    if a not in g or b not in g:
        return frozenset()
    ends = {v for e in (a, b) for v in (e, g.nodes[e]["link"], g.nodes[e]["link"].split(":")[0])}
    if route:
        return frozenset(ends | set(route))
    cache = g.graph.setdefault("between_leaves", {})
    key = (g.nodes[a]["link"].split(":")[0], g.nodes[b]["link"].split(":")[0])
    if key not in cache:
        try:
            cache[key] = set.intersection(*(set(p) for p in nx.all_shortest_paths(g, *key)))
        except nx.NetworkXNoPath:
            cache[key] = set()
    return frozenset(ends | cache[key])


def _ends(p: dict) -> tuple[str, str]:
    """``(client NIC, server NIC)`` of a runner result dict (``client_nic`` or ``a`` / ``b``)."""
    a = p.get("client_nic") or p.get("a")
    b = p.get("server_nic") or p.get("b")
    if (not a or not b) and "->" in str(p.get("pair", "")):
        a, b = p["pair"].split("->", 1)
    return str(a), str(b)


def _line_rate(p: dict) -> float | None:
    """Gb/s: ``line_rate_gbps``, else the slower end's link speed (Mb/s / 1000); None unknown."""
    if p.get("line_rate_gbps"):
        return float(p["line_rate_gbps"])
    speeds = [s for s in (p.get("client_speed_mbps"), p.get("server_speed_mbps")) if s]
    return min(speeds) / 1000 if speeds else None


def _rail_key(p: dict, g: nx.Graph) -> str:
    a, b = _ends(p)
    ra = g.nodes[a].get("rail") if a in g else p.get("rail")
    rb = g.nodes[b].get("rail") if b in g else p.get("rail")
    return f"rail {ra}" if ra == rb else "cross-rail"


def _quantile(values: list[float], q: float) -> float:
    vals = sorted(values)
    return vals[min(len(vals) - 1, int(q * len(vals)))]


def pair_stats(doc: dict, g: nx.Graph) -> dict[tuple[str, str], dict]:
    """Per pair (client NIC, server NIC), over every round.

    Returns:
        ``{("node01:mlx5_0", "node02:mlx5_0"): {"rounds": [0, 1], "slow_rounds": [1],
        "ratio_median": [1.0, 0.41] (bandwidth / rail median; None for a test without value),
        "share_line": [0.93, 0.38] (bandwidth / line rate; None unknown), "bw_gbps": [...],
        "path": frozenset of graph vertices, "slow": bool}}``.
    """
    out: dict[tuple[str, str], dict] = {}
    for rnd in doc.get("rounds", []):
        by_rail: dict[str, list[float]] = {}
        for p in rnd.get("pairs", []):
            if p.get("bw_gbps"):
                by_rail.setdefault(_rail_key(p, g), []).append(float(p["bw_gbps"]))
        ref = {k: (statistics.median(v), _quantile(v, 0.75)) for k, v in by_rail.items()}
        for p in rnd.get("pairs", []):
            if p.get("error_class") == "harness":
                continue  # the harness failed: nothing of the fabric was measured
            key = _ends(p)
            if key not in out:
                out[key] = {"rounds": [], "slow_rounds": [], "ratio_median": [], "share_line": [], "bw_gbps": [],
                            "path": pair_path(g, *key, p.get("route"))}
            st = out[key]
            bw, (median, p75) = p.get("bw_gbps"), ref.get(_rail_key(p, g), (None, None))
            line = _line_rate(p)
            ratio = bw / median if bw and median else None
            share = bw / line if bw and line else None
            slow = (p.get("status") == "error" or not bw or bw < SLOW_RATIO * p75
                    or (share is not None and share < MIN_LINE_SHARE))
            st["rounds"].append(rnd.get("index", 0))
            st["ratio_median"].append(None if ratio is None else round(ratio, 3))
            st["share_line"].append(None if share is None else round(share, 3))
            st["bw_gbps"].append(bw)
            if slow:
                st["slow_rounds"].append(rnd.get("index", 0))
    for st in out.values():
        st["slow"] = 2 * len(st["slow_rounds"]) >= len(st["rounds"]) > 0
    return out


def _share(slow: list, total: list) -> float:
    return len(slow) / len(total) if total else 0.0


def slow_nodes(stats: dict, g: nx.Graph) -> dict[str, list[str]]:
    """Nodes whose NICs are bad on most rails (module docstring, step 1).

    Returns:
        ``{"node03": ["node03:mlx5_0", ...]}``: each slow node with its bad NICs.
    """
    per_nic: dict[str, list[bool]] = {}
    for (a, b), st in stats.items():
        for e in (a, b):
            per_nic.setdefault(e, []).append(st["slow"])
    bad: dict[str, list[str]] = {}
    rails: dict[str, set] = {}
    for nic, flags in per_nic.items():
        node = nic.split(":")[0]
        rails.setdefault(node, set()).add(nic)
        if sum(flags) >= 1 and sum(flags) / len(flags) >= BAD_NIC_SHARE:
            bad.setdefault(node, []).append(nic)
    return {n: sorted(nics) for n, nics in bad.items()
            if len(nics) >= 2 and len(nics) >= NODE_RAIL_SHARE * len(rails[n])}


_TIER_ORDER = {"nic": 0, "port": 0, "uplink": 1, "leaf": 2, "spine": 2}


def explain_slow(stats: dict, g: nx.Graph, skip_nodes: set[str], marked: set[str] = frozenset()) -> list[tuple]:
    """Greedy components for the slow pairs not touching ``skip_nodes`` (module docstring, step 2);
    between equal candidates a NIC in ``marked`` (its counters show a link signal) goes first.

    Returns:
        ``[("node03:mlx5_2", [pair keys], []), ("leaf01:swp31", [...], ["spine01"]), ...]``: a NIC
        vertex (its cable), an uplink vertex or a switch vertex, each with the slow pairs it
        explains and the vertices every pair of it crosses too (the tests cannot tell them apart).
    """
    left = {k for k, st in stats.items() if st["slow"] and not {k[0].split(":")[0], k[1].split(":")[0]} & skip_nodes}
    through: dict[str, list] = {}
    for k, st in stats.items():
        for v in st["path"] or {k[0], k[1]}:
            if g.nodes.get(v, {}).get("tier", "nic") != "port":
                through.setdefault(v, []).append(k)
    out = []
    while left:
        best = None
        for v, pairs in through.items():
            slow = [k for k in pairs if k in left]
            if not slow or _share([k for k in pairs if stats[k]["slow"]], pairs) < BAD_NIC_SHARE:
                continue
            if len(slow) < 2 and not (len(pairs) == 1 and g.nodes.get(v, {}).get("tier", "nic") == "nic"):
                continue
            tier = _TIER_ORDER.get(g.nodes.get(v, {}).get("tier", "nic"), 0)
            rank = (-len(slow), len(pairs), v not in marked, tier, v)
            best = min(best, (rank, v, slow)) if best else (rank, v, slow)
        if best is None:
            break
        _, v, slow = best
        twins = sorted(w for w, ps in through.items() if w != v and set(ps) == set(through[v]))
        out.append((v, sorted(slow), twins))
        left -= set(slow)
    return out


def _finding(code: str, kind: str, target: str, message: str, pairs=(), counters=None, rounds=()) -> dict:
    return {"code": code, "kind": kind, "target": target, "message": message,
            "evidence": {"pairs": [list(k) for k in pairs], "counters": counters or {}, "rounds": sorted(set(rounds))}}


def _slow_rounds(stats: dict, pairs) -> list[int]:
    return sorted({r for k in pairs for r in stats[k]["slow_rounds"]})


def link_target(g: nx.Graph, nic: str) -> str:
    """``node03:mlx5_2<->leaf01:swp10``: a NIC and the leaf port it is cabled to (the NIC alone
    when the topology does not know it)."""
    return f"{nic}<->{g.nodes[nic]['link']}" if nic in g and "link" in g.nodes[nic] else nic


def _node_findings(doc: dict, stats: dict, g: nx.Graph, slow: dict[str, list[str]],
                   absorbed: dict[str, list]) -> dict[str, dict]:
    """One finding per faulty node: the first of :data:`NODE_CODES` its evidence shows.

    Args:
        slow: :func:`slow_nodes`.  absorbed: per node, the slow pairs its own NICs' cables
            explain (link symptoms the node's finding takes as evidence).
    """
    hw = signals.node_signals(doc)
    for node, nics in slow.items():
        pairs = sorted(k for k in stats if stats[k]["slow"] and node in (k[0].split(":")[0], k[1].split(":")[0]))
        hw.setdefault(node, {})["node-slow"] = {
            "message": f"{node}: slow pairs on {len(nics)} of its NICs ({', '.join(n.split(':')[1] for n in nics)})",
            "pairs": pairs, "rounds": _slow_rounds(stats, pairs), "counters": {}}
    out = {}
    for node, codes in hw.items():
        code = next(c for c in NODE_CODES if c in codes)
        ev = codes[code]
        others = [c for c in NODE_CODES if c in codes and c != code]
        pairs = sorted(set(codes.get("node-slow", {}).get("pairs", [])) | set(absorbed.get(node, [])))
        counters = {c: codes[c].get("counters", {}) for c in codes}
        msg = ev["message"] + (f"; also {', '.join(others)}" if others else "")
        rounds = ev.get("rounds", []) + _slow_rounds(stats, pairs)
        out[node] = _finding(code, "node", node, msg, pairs, counters, rounds)
    return out


def localise(doc: dict) -> list[dict]:
    """Findings for one burn-in document (module docstring): one per faulty node, link or switch.

    Returns:
        Findings sorted by kind (node, link, switch) then target; empty for a healthy fabric.
        Codes: :data:`NODE_CODES`, :data:`LINK_CODES`, ``switch-congested``, ``ib_judge.IB_CODES``, ``ib_views.CODES``.

    Raises:
        KeyError / TypeError: a document without ``rounds`` or ``topology`` of the documented shape.
    """
    g = fabric_graph(doc["topology"])
    stats = pair_stats(doc, g)
    slow = slow_nodes(stats, g)
    nic_sig = signals.nic_signals(doc)
    links: dict[str, dict] = {}
    switches: list[dict] = []
    absorbed: dict[str, list] = {}
    for v, pairs, twins in explain_slow(stats, g, set(slow), set(nic_sig)):
        tier = g.nodes.get(v, {}).get("tier", "nic")
        if tier == "nic":
            links[v] = {"pairs": pairs}
            absorbed.setdefault(v.split(":")[0], []).extend(pairs)
            continue
        what = "uplink" if tier == "uplink" else tier
        same = f" (so do all pairs through {', '.join(twins)}: the tests cannot tell them apart)" if twins else ""
        f = _finding("switch-congested", "switch", v if tier != "uplink" else f"{v}->{g.nodes[v]['spine']}",
                     f"{what} {v}: {len(pairs)} slow pair(s) cross it{same}", pairs, rounds=_slow_rounds(stats, pairs))
        f["evidence"]["same_pairs"] = twins
        switches.append(f)
    for nic in nic_sig:
        links.setdefault(nic, {"pairs": []})
    nodes = _node_findings(doc, stats, g, slow, absorbed)
    out = list(nodes.values())
    for nic, entry in sorted(links.items()):
        if nic.split(":")[0] in nodes:
            continue  # absorbed by the node's finding
        out.append(_link_finding(nic, entry["pairs"], nic_sig.get(nic, {}), stats, g))
    order = {"node": 0, "link": 1, "switch": 2, "harness": 3}
    ib = ib_views.joined(doc, ib_judge.findings(doc, skip_nodes=set(nodes)))
    return sorted(out + switches + ib + harness_findings(doc), key=lambda f: (order[f["kind"]], f["target"]))


def harness_findings(doc: dict) -> list[dict]:
    """One ``harness-error`` finding (kind ``harness``) per node where the verification harness
    failed: the node is the first word of the pair's ``error`` (the runner's
    :func:`tuning.verify.runner.harness_fault` cause, ``node02 (server): ...``), else the client's."""
    by_node: dict[str, dict] = {}
    for rnd in doc.get("rounds", []):
        for p in rnd.get("pairs", []):
            if p.get("error_class") != "harness":
                continue
            node = harness_node({**p, "client_nic": _ends(p)[0], "server_nic": _ends(p)[1]})
            e = by_node.setdefault(node, {"kinds": set(), "pairs": [], "rounds": set(), "first": p.get("error")})
            e["kinds"].add(p.get("error_kind"))
            e["pairs"].append(_ends(p))
            e["rounds"].add(rnd.get("index", 0))
    return [_finding("harness-error", "harness", node,
                     f"{node}: the verification harness failed on {len(e['pairs'])} test(s) "
                     f"({', '.join(sorted(map(str, e['kinds'])))}): the fabric was not tested there, no fault "
                     f"is read from it; first: {e['first']}", sorted(set(e["pairs"])), rounds=sorted(e["rounds"]))
            for node, e in sorted(by_node.items())]


def _link_finding(nic: str, pairs: list, sig: dict, stats: dict, g: nx.Graph) -> dict:
    """The link finding of one NIC's cable: the first of :data:`LINK_CODES` its evidence shows."""
    code = next((c for c in LINK_CODES if c in sig), "link-slow")
    target = link_target(g, nic)
    if code == "link-slow":
        ratios = [r for k in pairs for r in stats[k]["ratio_median"] if r is not None]
        msg = f"{target}: {len(pairs)} slow pair(s)" + (f", at {min(ratios):.2f} of the rail median" if ratios else "")
    else:
        msg = sig[code]["message"] + (f"; {len(pairs)} slow pair(s)" if pairs else "")
    counters = {c: sig[c].get("counters", {}) for c in sig}
    rounds = [r for c in sig.values() for r in c.get("rounds", [])] + _slow_rounds(stats, pairs)
    return _finding(code, "link", target, msg, pairs, counters, rounds)

