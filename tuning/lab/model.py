"""The lab's fabric model: RDMA test results computed from every setting on the path.

:func:`compute` reads both ends' node state from their sysroots, the switch ports'
and switch RoCE state from ``switches/<name>.fabric.json`` and the injected faults
from ``fabric.json``, then applies the rules below. The numbers are the lab's
contract with the tests (``tests/lab/test_fabric_model.py``); change them together.

Inputs (paths relative to ``<state_dir>/nodes/<node>/sysroot``):
    netdev MTU        ``sys/class/net/<if>/mtu``
    trust / PFC       ``run/lab/dcb/<if>.json`` ``{"trust": "pcp"|"dscp", "pfc": [0/1 x 8],
                      "dscp2prio": {dscp: prio} or [64 prios]}``; absent: trust pcp, PFC all off,
                      dscp2prio the mlx5 default ``dscp >> 3`` (DSCP 26 -> priority 3)
    ECN (ofed)        ``sys/class/net/<if>/ecn/roce_rp|roce_np/enable/<prio>`` (``1`` = on);
                      the inbox driver has no per-priority enable: ECN is on (firmware default)
    RoCE ToS          ``sys/kernel/config/rdma_cm/<dev>/ports/1/default_roce_tos``, else (no
                      configfs group now) the value kept in ``run/lab/rdma_cm/<dev>.json``
                      ``{"default_roce_tos": N}``; absent = 0; DSCP = ToS >> 2 (106 -> 26).
                      It is the ToS of RDMA-CM connections only (perftest ``-R`` without ``-T``);
                      a flow's ToS is what its tool sets, as on a real host (``flow_tos``:
                      perftest ``--tclass=N`` the GRH traffic class of a verbs QP, ``-R -T N``
                      an RDMA-CM QP's ToS; a verbs QP without ``--tclass`` sends traffic class 0,
                      DSCP 0, which the mlx5 default map puts on priority 0: lossy when PFC is on 3)
    GID table         ``sys/class/infiniband/<dev>/ports/1/gids/<N>``, ``gid_attrs/types/<N>``
Switches: ``{"ports": {"swp1": {"mtu": 9216}}, "roce": {...}}`` (lab contract; an admin-down port adds
``"state": "down"`` and fails a path through it as a ``down`` injection does); a missing
file or port means the Cumulus defaults: port MTU 9216, RoCE off.

Rules:
    Path: the shortest path NIC -> leaf port -> leaf [-> uplink -> spine -> uplink ->
        leaf] -> leaf port -> NIC (:func:`shortest_path`, a breadth-first search over the cabling;
        the lab's cabling is a tree, so the path is the one ``networkx.shortest_path`` gives, which
        a test checks); every switch on it is one hop.
    Line rate: the slower NIC (``Nic.speed_gbps``, 400 Gb/s).
    RoCE active MTU: the largest of 4096/2048/1024/512/256 <= min(netdev MTU both ends) - 88
        (``iboe_get_mtu``: GRH 40 + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4), so netdev 1500 ->
        1024, >= 4184 -> 4096.
    Wire efficiency: every packet of ``ceil(size / active MTU)`` carries 78 bytes of RoCEv2
        headers (Eth 14 + IPv4 20 + UDP 8 + BTH 12 + RETH 16 + ICRC 4 + FCS 4) plus 20 bytes
        preamble/IFG: 4096 -> 97.7 % of line rate, 1024 -> 91.3 %.
    Message rate: at most 8 Mpps per QP (small messages are rate bound).
    MTU drop: a switch port with MTU < active MTU + 78 (the RoCEv2 frame) drops the frame:
        bandwidth x 0.03, latency +40 us, p99 +250 us, p99.9 +900 us.
    Lossless: both NICs trust dscp with PFC on the priority their dscp2prio gives each end's
        RoCE DSCP, and every switch on the path RoCE enabled, mode lossless, trust holding
        ``dscp``, that DSCP mapped to its PFC priority, PFC priority equal to the NICs'.
        Otherwise lossy: bandwidth x 0.70, latency +2.5 us, p99 +6 us, p99.9 +15 us.
    ECN (judged on a lossless path only): RP and NP enabled for the lossless priority on both
        NICs, and every switch's ``ecn_tcs`` holding its lossless TC (``lossless_tc``, else
        the PFC priority). Off: bandwidth x 0.90, latency +1.0 us, p99 +1.5 us.
    Latency: 1.6 us NIC to NIC + 0.6 us per switch hop + serialisation of the message.
    Injections (``fabric.json`` ``injections``, per node NIC or switch port on the path):
        ``degrade`` bandwidth x 0.5, latency +5 us, p99 +5 us each (``degrade P``: P percent,
        bandwidth x (1 - P/100), the latency adds x P/50, :func:`penalty`); ``down``: error
        ``connect_failed`` (no numbers); ``flap`` bandwidth x 0.6, latency +3 us each; ``lossy``
        the lossy penalty (once); ``pcie-width`` (read back from the NIC's sysfs
        ``current_link_*``): the line rate capped at :func:`tuning.lab.hw_faults.pcie_gbps`
        (:mod:`tuning.lab.hw_faults` has the counters these faults move).
    Noise (``fabric.json`` ``noise``, :mod:`tuning.lab.noise`): each run's numbers times its draw,
        ``1 + N(0, pct/100)`` (bandwidth and latency apart); none by default.
    GIDs: both ends' GID (client ``gid_index``, server ``server_gid_index``; None = the
        first RoCE v2 IPv4 entry, as perftest picks) must be a RoCE v2 entry holding that
        end's IPv4 address, else error ``qp_rtr_failed`` (perftest's "Failed to modify QP
        to RTR").
    Jitter: a deterministic factor from a SHA-256 of the inputs: bandwidth +-0.3 %,
        latency +-1 %; the same inputs give the same numbers on every run.
    Latency spread: min 0.97 T, avg 1.004 T, stdev 0.015 T (+8 % of the p99 tail),
        p99 1.04 T + tail, p99.9 1.25 T + tail, max 1.3 p99.9 (T = typical).

Incast (:func:`incast`; ``ib_write_bw`` only): k senders writing to one receiver NIC at once
    (k = the ``ib_write_bw`` servers listening on the receiver's IPv4, counted by the client at
    its start; sender i = the rank of its server's TCP port among them). k = 1 is a pair test:
    the numbers above, unchanged. For k >= 2, with line = the slower NIC of the sender's path
    and fair share = line / k, the mode of the sender's path gives (total, spread):
        lossy (the Lossless rule fails)       total 0.45 line, spread 0.30
        pfc (lossless, the ECN rule fails)    total 0.96 line, spread 0.02
        ecn (lossless and ECN)                total 0.97 line, spread 0.01
    Sender i gets fair x total/line x w_i, w_i = 1 + spread u_i, the u_i evenly spaced over
    [-1, 1] (mean 0) and dealt to the senders in an order from a SHA-256 of (receiver, k, i):
    the weights average 1, so the shares sum to the total; lossy shares are uneven (0.7 .. 1.3
    of 0.45 fair: the slowest below 0.5 fair); pfc within 0.96 fair +- 2 % (inside +-10 %); ecn
    within 0.97 fair +- 1 % (inside +-5 %). A sender never exceeds its pair
    bandwidth (degrade, MTU drop still apply). A degrade on the receiver's own link (its NIC or
    its leaf port) scales line by 0.5: it is every sender's bottleneck, so the total halves, as a
    real port would carry no more. Bandwidth peak = average x 1.0012.
    Counters per sender per run (D = the ``-D`` seconds, else bytes / bandwidth; P = the
    priority each end sees the RoCE DSCP on, 0 under trust pcp; n = bytes / active MTU packets):
        every k:   sender ``tx_prio{P}_bytes/_packets`` and ``tx_bytes_phy/_packets_phy``, receiver
                   ``rx_prio{P}_bytes/_packets`` and ``rx_bytes_phy/_packets_phy`` (the physical port counts
                   every frame, RoCE included)
                   (the perftest stand-in applies counters for k >= 2 only: a pair test moves none)
        lossy:     drops d = max(1, n x 0.02 x (k-1)/k): receiver ``rx_prio{P}_discards`` and
                   ``rx_discards_phy`` + d, ``out_of_sequence`` + 3d, ``packet_seq_err`` + d/2 (>= 1);
                   sender ``local_ack_timeout_err`` + max(1, d / 400)
        pfc:       pauses p = 1500 x D x (k-1) (thousands): sender ``rx_prio{P}_pause`` + p,
                   receiver ``tx_prio{P}_pause`` + p, ``_pause_duration`` + 8p each,
                   ``rx_prio{P}_pause_transition`` + p/2 (sender); no CNP
        ecn:       CNPs c = 2600 x D x (k-1): receiver ``np_cnp_sent`` + c,
                   ``np_ecn_marked_roce_packets`` + 3c/2, sender ``rp_cnp_handled`` + c; pauses
                   p / 200 (0.5 % of the pfc count) as pfc
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from tuning.errors import InputError
from tuning.lab import hw_faults, noise
from tuning.lab.fabric import Fabric, Nic, Node

ROCE_MTUS = (4096, 2048, 1024, 512, 256)
IBOE_OVERHEAD_BYTES = 88
ROCE_HEADER_BYTES = 78
WIRE_GAP_BYTES = 20
SWITCH_DEFAULT_MTU = 9216
MSG_RATE_MPPS_PER_QP = 8.0
BASE_LAT_US = 1.6
HOP_LAT_US = 0.6
#: penalty name -> (bandwidth factor, latency add us, p99 tail us, p99.9 tail us)
PENALTIES = {
    "mtu_drop": (0.03, 40.0, 250.0, 900.0),
    "lossy": (0.70, 2.5, 6.0, 15.0),
    "ecn_off": (0.90, 1.0, 1.5, 3.0),
    "degrade": (0.50, 5.0, 5.0, 10.0),
    "flap": (0.60, 3.0, 20.0, 50.0),
}
TESTS = ("write_bw", "read_lat")


@dataclass
class End:
    """One end's node settings as the model needs them (read by :func:`read_end`).

    Attributes:
        name: ``node01:mlx5_0``.  ipv4: the NIC address without prefix.  mtu: netdev MTU (bytes).
        trust: ``pcp`` or ``dscp``.  pfc: 8 booleans.  dscp2prio: 64 priorities.
        ecn_rp / ecn_np: 8 booleans each.  dscp: RoCE DSCP from the ToS.
        gids: index -> (GID as in sysfs, type ``RoCE v2`` / ``IB/RoCE v1``).  speed_gbps: line rate.
    """

    name: str
    ipv4: str
    mtu: int
    trust: str
    pfc: list[bool]
    dscp2prio: list[int]
    ecn_rp: list[bool]
    ecn_np: list[bool]
    dscp: int
    gids: dict[int, tuple[str, str]]
    speed_gbps: int
    pcie_gbps: float | None = None

    @property
    def prio(self) -> int:
        """The priority this end's RoCE traffic leaves on (0 under trust pcp: untagged)."""
        return self.dscp2prio[self.dscp] if self.trust == "dscp" else 0


@dataclass
class Outcome:
    """One RDMA test's result as the fabric model computes it.

    Attributes:
        bw_avg_gbps / bw_peak_gbps: bandwidth in Gb/s (10^9 bit/s).
        lat_*_us: latency statistics in microseconds (min, typical, avg, max, stdev, p99, p99.9).
        active_mtu: RoCE active MTU (bytes).  lossless / ecn: as judged by the rules.
        path: hops, e.g. ``["node01:mlx5_0", "leaf01:swp1", "leaf01", "leaf01:swp2", "node02:mlx5_0"]``.
        reasons: one line per degradation.  error: ``connect_failed``, ``qp_rtr_failed`` or None.
        client_gid_index / server_gid_index: the GID indexes used (None when not resolvable).
        client_gid / server_gid: the GIDs as in sysfs (``0000:...:ffff:0a00:0001``).
    """

    bw_avg_gbps: float = 0.0
    bw_peak_gbps: float = 0.0
    lat_min_us: float = 0.0
    lat_typical_us: float = 0.0
    lat_avg_us: float = 0.0
    lat_max_us: float = 0.0
    lat_stdev_us: float = 0.0
    lat_p99_us: float = 0.0
    lat_p999_us: float = 0.0
    active_mtu: int = 1024
    lossless: bool = False
    ecn: bool = False
    path: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    error: str | None = None
    client_gid_index: int | None = None
    server_gid_index: int | None = None
    client_gid: str = ""
    server_gid: str = ""
    line_gbps: float = 0.0
    #: the share of ``line_gbps`` the receiver's own link carries (a degrade injected on the receiver
    #: NIC or its leaf port: 0.5): every incast sender crosses it, so it caps their total
    receiver_link_factor: float = 1.0
    sender_prio: int = 0
    receiver_prio: int = 0
    #: the DSCP the data travels with (the flow's ToS >> 2)
    dscp: int = 0


def _read(path: Path, default: str | None = None) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return default


def _dscp2prio(raw: object) -> list[int]:
    table = [d >> 3 for d in range(64)]
    if isinstance(raw, dict):
        for k, v in raw.items():
            table[int(k)] = int(v)
    elif isinstance(raw, list) and len(raw) == 64:
        table = [int(v) for v in raw]
    return table


def _gids(ib_port: Path) -> dict[int, tuple[str, str]]:
    """``{index: (gid, type)}`` of the port's GID table entries that have a type (index 0-255).

    Only the populated entries are read (an empty entry's type reads EINVAL, on a real node and in
    the lab: :func:`populated_gid_indices` skips them without an open): 4
    entries, not 512 failed reads per NIC, per test.
    """
    out = {}
    for n in sorted(int(name) for name in populated_gid_indices(ib_port) if name.isdigit() and int(name) < 256):
        kind = _read(ib_port / "gid_attrs" / "types" / str(n))
        gid = _read(ib_port / "gids" / str(n))
        if kind and gid:
            out[n] = (gid, kind)
    return out


def read_end(state_dir: Path, node: Node, nic: Nic) -> End:
    """Read one NIC's settings from its node's sysroot (defaults per the module docstring)."""
    root = state_dir / "nodes" / node.name / "sysroot"
    net = root / "sys/class/net" / nic.netdev
    dcb = json.loads(_read(root / "run/lab/dcb" / f"{nic.netdev}.json", "{}") or "{}")
    pfc = [bool(int(x)) for x in dcb.get("pfc", [0] * 8)]
    if node.driver == "ofed":
        rp = [_read(net / f"ecn/roce_rp/enable/{p}", "0") == "1" for p in range(8)]
        np_ = [_read(net / f"ecn/roce_np/enable/{p}", "0") == "1" for p in range(8)]
    else:
        rp = np_ = [True] * 8
    tos = _read(root / "sys/kernel/config/rdma_cm" / nic.rdma_device / "ports/1/default_roce_tos")
    if tos is None:  # no configfs group now: the value the kernel kept (the lab's cma_roce_tos state)
        tos = json.loads(_read(root / "run/lab/rdma_cm" / f"{nic.rdma_device}.json", "{}") or "{}").get(
            "default_roce_tos", 0)
    return End(
        name=f"{node.name}:{nic.rdma_device}", ipv4=nic.ipv4.split("/")[0],
        mtu=int(_read(net / "mtu", "1500") or 1500), trust=dcb.get("trust", "pcp"), pfc=pfc,
        dscp2prio=_dscp2prio(dcb.get("dscp2prio")), ecn_rp=rp, ecn_np=np_, dscp=int(tos or 0) >> 2,
        gids=_gids(root / "sys/class/infiniband" / nic.rdma_device / "ports/1"), speed_gbps=nic.speed_gbps,
        pcie_gbps=(lambda link: hw_faults.pcie_gbps(*link) if link else None)(hw_faults.read_pcie(root, nic.bdf)),
    )


def cabling(fabric: Fabric) -> list[tuple[str, str]]:
    """The cabling as edges between NIC ``node:dev``, switch port ``sw:swpN`` and switch ``sw``
    vertices."""
    edges = [(sw.name, f"{sw.name}:{port}") for sw in fabric.switches for port in sw.ports]
    edges += [(f"{node.name}:{nic.rdma_device}", f"{nic.switch}:{nic.switch_port}")
              for node in fabric.nodes for nic in node.nics]
    edges += [(f"{link.a}:{link.a_port}", f"{link.b}:{link.b_port}") for link in fabric.links]
    return edges


def fabric_graph(fabric: Fabric):
    """:func:`cabling` as a ``networkx.Graph`` (imported here: a stand-in never pays for it)."""
    import networkx as nx

    return nx.Graph(cabling(fabric))


def shortest_path(fabric: Fabric, source: str, target: str) -> list[str]:
    """The vertices from ``source`` to ``target`` over :func:`cabling` (breadth-first).

    A stand-in runs this per call, so it stays in the stdlib: importing networkx costs ~0.4 s of
    CPU per perftest process (measured on 2 cores), the whole rest of a pair test ~0.03 s.

    Raises:
        ValueError: no path (as ``networkx.NetworkXNoPath``'s meaning).
    """
    adjacent: dict[str, list[str]] = {}
    for a, b in cabling(fabric):
        adjacent.setdefault(a, []).append(b)
        adjacent.setdefault(b, []).append(a)
    came_from: dict[str, str | None] = {source: None}
    frontier = [source]
    while frontier and target not in came_from:
        nxt = []
        for vertex in frontier:
            for other in adjacent.get(vertex, ()):
                if other not in came_from:
                    came_from[other] = vertex
                    nxt.append(other)
        frontier = nxt
    if target not in came_from:
        raise ValueError(f"no path between {source} and {target} in the lab's cabling")
    path = [target]
    while path[-1] != source:
        path.append(came_from[path[-1]])  # type: ignore[arg-type]
    return path[::-1]


def write_switch_state(state_dir: Path, name: str, state: dict) -> None:
    """Write a lab switch's applied state as ``switches/<name>.fabric.json`` (the lab contract that
    :func:`switch_state` reads): sorted keys, indent 2, replaced atomically, so the fabric model in
    another process never reads half a file. Every switch OS's stand-in writes through it."""
    import threading

    path = Path(state_dir) / "switches" / f"{name}.fabric.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def switch_state(state_dir: Path, name: str) -> dict:
    """A switch's applied state (``switches/<name>.fabric.json``); missing = defaults."""
    raw = _read(state_dir / "switches" / f"{name}.fabric.json")
    state = json.loads(raw) if raw else {}
    return {"ports": state.get("ports") or {}, "roce": state.get("roce") or {"enabled": False}}


def _admin_down(state_dir: Path, hop: str) -> bool:
    """A switch port of the path set ``link state down`` (``"state": "down"`` in its switch's
    ``switches/<name>.fabric.json``, written by :mod:`tuning.lab.nvue`); a NIC hop is never."""
    switch, _, port = hop.partition(":")
    if not port or not (state_dir / "switches" / f"{switch}.fabric.json").is_file():
        return False
    return switch_state(state_dir, switch)["ports"].get(port, {}).get("state") == "down"


def active_mtu(netdev_mtu: int) -> int:
    """RoCE active MTU for a netdev MTU: 1500 -> 1024, 9000 -> 4096 (``iboe_get_mtu``)."""
    return next((m for m in ROCE_MTUS if m <= netdev_mtu - IBOE_OVERHEAD_BYTES), 256)


def pick_gid(end: End, index: int | None) -> tuple[int | None, str, str | None]:
    """Resolve a GID index (None = first RoCE v2 IPv4 entry) and check it.

    Returns:
        (index, GID string, problem or None).
    """
    want = "0000:0000:0000:0000:0000:ffff:" + "{:02x}{:02x}:{:02x}{:02x}".format(*map(int, end.ipv4.split(".")))
    if index is None:
        index = next((i for i, (g, t) in sorted(end.gids.items()) if t == "RoCE v2" and g == want), None)
        if index is None:
            return None, "", f"{end.name} has no RoCE v2 GID for {end.ipv4}"
    gid, kind = end.gids.get(index, ("0000:0000:0000:0000:0000:0000:0000:0000", "none"))
    if kind != "RoCE v2" or gid != want:
        return index, gid, f"{end.name} GID index {index} is {kind} {gid}, not RoCE v2 {end.ipv4}"
    return index, gid, None


def _lossless_problems(ends: list[End], switches: dict[str, dict]) -> list[str]:
    problems = []
    for src in ends:
        prio = src.dscp2prio[src.dscp]
        for e in ends:
            p = e.dscp2prio[src.dscp]
            if e.trust != "dscp":
                problems.append(f"{e.name} trust {e.trust} (lossless needs trust dscp)")
            elif not e.pfc[p]:
                problems.append(f"{e.name} PFC off on priority {p} (DSCP {src.dscp})")
        for name, st in switches.items():
            r = st["roce"]
            if not r.get("enabled") or r.get("mode") != "lossless":
                problems.append(f"{name} RoCE not lossless (mode {r.get('mode')})")
                continue
            mapped = (r.get("dscp_to_switch_priority") or {}).get(str(src.dscp), src.dscp >> 3)
            if "dscp" not in str(r.get("trust") or ""):
                problems.append(f"{name} trust {r.get('trust')} lacks dscp")
            if r.get("pfc_priority") != prio or int(mapped) != prio:
                problems.append(f"{name} PFC priority {r.get('pfc_priority')}, DSCP {src.dscp} -> "
                                f"priority {mapped}, NIC priority {prio}")
    return list(dict.fromkeys(problems))


def _ecn_problems(ends: list[End], switches: dict[str, dict], prio: int) -> list[str]:
    problems = [f"{e.name} ECN {k} off on priority {prio}" for e in ends
                for k, on in (("RP", e.ecn_rp[prio]), ("NP", e.ecn_np[prio])) if not on]
    for name, st in switches.items():
        r = st["roce"]
        tc = r.get("lossless_tc") if r.get("lossless_tc") is not None else r.get("pfc_priority")
        if tc not in (r.get("ecn_tcs") or []):
            problems.append(f"{name} ECN not on lossless TC {tc}")
    return problems


def _jitter(*parts: object) -> float:
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**63 - 1.0


def populated_gid_indices(port: Path) -> list[str]:
    """The indices (``ls`` order) of a lab port's GID entries that have a type: its ``gid_attrs/types``
    files that are no link (an empty entry's attribute is a link that reads EINVAL,
    :data:`tuning.lab.sysroot.GID_EMPTY_ATTR`; one ``scandir``, no open per empty entry). Here, not in
    :mod:`tuning.lab.sysroot`, so a perftest stand-in imports only the stdlib and this module."""
    try:
        with os.scandir(port / "gid_attrs" / "types") as entries:
            return sorted(e.name for e in entries if not e.is_symlink())
    except OSError:
        return []


def _find(fabric: Fabric, node: str, dev: str) -> tuple[Node, Nic]:
    found = [(n, c) for n in fabric.nodes if n.name == node for c in n.nics if c.rdma_device == dev]
    if not found:
        raise InputError("fabric.json", "nodes", f"no NIC {node}:{dev} in the lab fabric")
    return found[0]


def _penalties(state_dir: Path, fabric: Fabric, path: list[str], ends: list[End],
               mtu: int) -> tuple[list[str], list[str], bool, bool]:
    """Judge the path: (penalty names, reasons, lossless, ecn)."""
    sws = {h: switch_state(state_dir, h) for h in path if ":" not in h}
    names, reasons = [], []
    for hop in path:
        sw, _, port = hop.partition(":")
        if sw in sws and port:
            pmtu = int(sws[sw]["ports"].get(port, {}).get("mtu", SWITCH_DEFAULT_MTU))
            if pmtu < mtu + ROCE_HEADER_BYTES:
                names.append("mtu_drop")
                reasons.append(f"{hop} MTU {pmtu} < RoCEv2 frame {mtu + ROCE_HEADER_BYTES} bytes: drops")
    problems = _lossless_problems(ends, sws)
    lossless = not problems
    prio = ends[0].dscp2prio[ends[0].dscp] if ends[0].trust == "dscp" else ends[0].prio
    ecn_problems = _ecn_problems(ends, sws, prio)
    if problems:
        names.append("lossy")
        reasons += [f"lossy: {p}" for p in problems]
    elif ecn_problems:
        names.append("ecn_off")
        reasons += [f"ECN off: {p}" for p in ecn_problems]
    for inj in fabric.injections:
        if inj.get("kind") == "degrade" and inj.get("target") in path:
            names.append(f"degrade:{inj['value']}" if inj.get("value") else "degrade")
            reasons.append(f"{inj['target']} degraded" + (f" by {inj['value']} %" if inj.get("value") else "")
                           + " (injected)")
    for t in hw_faults.on_path(fabric.injections, path, "flap"):
        names.append("flap")
        reasons.append(f"{t} link flapped during the test (injected)")
    lossy_at = hw_faults.on_path(fabric.injections, path, "lossy")
    if lossy_at and "lossy" not in names:
        names.append("lossy")
    reasons += [f"{t} drops frames: lossy path (injected)" for t in lossy_at]
    return names, reasons, lossless, not ecn_problems


def penalty(name: str) -> tuple[float, float, float, float]:
    """(bandwidth factor, latency add us, p99 add us, p99.9 add us) of a penalty name:
    :data:`PENALTIES`, or ``degrade:P`` (a degrade of P percent, 1..99: bandwidth x (1 - P/100),
    the latency adds of ``degrade`` scaled by P/50)."""
    kind, _, pct = name.partition(":")
    if not pct:
        return PENALTIES[name]
    p = int(pct) / 100
    _, add, t99, t999 = PENALTIES[kind]
    return 1 - p, add * p * 2, t99 * p * 2, t999 * p * 2


def _numbers(out: Outcome, penalties: list[str], line_gbps: float, hops: int, size: int, qps: int, j: float) -> None:
    """Fill the bandwidth and latency fields of ``out`` from the rules."""
    packets = max(1, math.ceil(size / out.active_mtu))
    eff = size / (size + packets * (ROCE_HEADER_BYTES + WIRE_GAP_BYTES))
    bw = min(line_gbps * eff, size * 8 * MSG_RATE_MPPS_PER_QP * qps / 1e3)
    lat = BASE_LAT_US + HOP_LAT_US * hops + size * 8 / (line_gbps * 1e3)
    tail99 = tail999 = 0.0
    for name in penalties:
        factor, add, t99, t999 = penalty(name)
        bw, lat, tail99, tail999 = bw * factor, lat + add, tail99 + t99, tail999 + t999
    bw *= 1 + 0.003 * j
    t = lat * (1 + 0.01 * j)
    out.bw_avg_gbps = round(bw, 4)
    out.bw_peak_gbps = round(bw * (1.0012 + 0.0004 * abs(j)), 4)
    out.lat_typical_us = round(t, 4)
    out.lat_min_us = round(t * 0.97, 4)
    out.lat_avg_us = round(t * 1.004 + 0.02 * tail99, 4)
    out.lat_stdev_us = round(t * 0.015 + 0.08 * tail99, 4)
    out.lat_p99_us = round(t * 1.04 + tail99, 4)
    out.lat_p999_us = round(t * 1.25 + tail999, 4)
    out.lat_max_us = round(out.lat_p999_us * 1.3, 4)


def compute(state_dir: Path | str, client_node: str, client_dev: str, server_node: str, server_dev: str,
            gid_index: int | None, test: str, *, server_gid_index: int | None = None,
            size: int = 65536, qps: int = 1, flow_tos: int | None = None) -> Outcome:
    """Compute one RDMA test between two NICs from the lab's state.

    Args:
        state_dir: the lab state directory (``fabric.json``, ``nodes/``, ``switches/``).
        client_node / client_dev: ``node01`` / ``mlx5_0``; server_node / server_dev likewise.
        gid_index: the client's ``-x`` (None = first RoCE v2 IPv4 GID).
        test: ``write_bw`` (data client -> server) or ``read_lat`` (data server -> client).
        server_gid_index: the server's ``-x`` (None = automatic).
        size: message size in bytes.  qps: number of QPs.
        flow_tos: the ToS byte the data sender's QP sets (0..255: perftest ``--tclass`` or
            ``-R -T``; 0 for a verbs QP given none); None: an RDMA-CM QP without ``-T``, which
            carries the sender's ``default_roce_tos``.

    Returns:
        The :class:`Outcome`; a failed test has ``error`` set and zero numbers.

    Raises:
        ValueError: unknown test.  InputError: unknown node or device.
    """
    return compute_sizes(state_dir, client_node, client_dev, server_node, server_dev, gid_index, test,
                         server_gid_index=server_gid_index, sizes=[size], qps=qps, flow_tos=flow_tos)[0]


def compute_sizes(state_dir: Path | str, client_node: str, client_dev: str, server_node: str, server_dev: str,
                  gid_index: int | None, test: str, *, server_gid_index: int | None = None,
                  sizes: list[int], qps: int = 1, flow_tos: int | None = None) -> list[Outcome]:
    """:func:`compute` for several message sizes (perftest ``-a``), reading the state once.

    Returns:
        One :class:`Outcome` per size, in the order of ``sizes``.
    """
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}; allowed: {', '.join(TESTS)}")
    state_dir = Path(state_dir)
    fabric = Fabric.load(state_dir / "fabric.json")
    cli = read_end(state_dir, *_find(fabric, client_node, client_dev))
    srv = read_end(state_dir, *_find(fabric, server_node, server_dev))
    ends = [cli, srv] if test == "write_bw" else [srv, cli]  # [data sender, receiver]
    if flow_tos is not None:  # the tool set the class itself: the RDMA-CM default does not apply
        ends[0] = dataclasses.replace(ends[0], dscp=(flow_tos & 0xFF) >> 2)
    path = shortest_path(fabric, f"{client_node}:{client_dev}", f"{server_node}:{server_dev}")
    out = Outcome(path=list(path), active_mtu=active_mtu(min(e.mtu for e in ends)))
    out.client_gid_index, out.client_gid, bad_c = pick_gid(cli, gid_index)
    out.server_gid_index, out.server_gid, bad_s = pick_gid(srv, server_gid_index)
    down = [i["target"] for i in fabric.injections if i.get("kind") == "down" and i.get("target") in path]
    down += [h for h in path if _admin_down(state_dir, h)]
    if down:
        out.error, out.reasons = "connect_failed", [f"{t} link down (injected or admin down)" for t in down]
    elif bad_c or bad_s:
        out.error, out.reasons = "qp_rtr_failed", [p for p in (bad_c, bad_s) if p]
    if out.error:
        return [dataclasses.replace(out) for _ in sizes]
    names, out.reasons, out.lossless, out.ecn = _penalties(state_dir, fabric, out.path, ends, out.active_mtu)
    out.line_gbps = float(min(e.speed_gbps for e in ends))
    receiving = path[-2:] if test == "write_bw" else path[:2]  # the data receiver's NIC and leaf port
    for i in fabric.injections:
        if i.get("kind") == "degrade" and i.get("target") in receiving:
            out.receiver_link_factor = penalty(f"degrade:{i['value']}" if i.get("value") else "degrade")[0]
    out.sender_prio = ends[0].prio
    out.dscp = ends[0].dscp
    out.receiver_prio = ends[1].dscp2prio[ends[0].dscp] if ends[1].trust == "dscp" else 0
    hops = sum(1 for h in path if ":" not in h)
    line = float(min(e.speed_gbps for e in ends))
    for e in ends:  # a NIC whose PCIe link is narrower than its port moves no more than PCIe carries
        if e.pcie_gbps is not None and e.pcie_gbps < line:
            line = e.pcie_gbps
            out.reasons.append(f"{e.name} PCIe link carries {e.pcie_gbps:.1f} Gb/s < port {e.speed_gbps} Gb/s")
    results = []
    bw_noise, lat_noise = noise.draw(state_dir, fabric.noise, (client_node, client_dev, server_node, server_dev, test))
    for size in sizes:
        j = _jitter(client_node, client_dev, server_node, server_dev, test, size, qps, out.active_mtu, names)
        one = dataclasses.replace(out, path=list(out.path), reasons=list(out.reasons))
        _numbers(one, names, line, hops, size, qps, j)
        _noisy(one, bw_noise, lat_noise)
        results.append(one)
    return results


def _noisy(out: Outcome, bw: float, lat: float) -> None:
    """Scale a run's numbers by its noise draw (:func:`tuning.lab.noise.draw`; 1.0: none)."""
    if bw != 1.0:
        out.bw_avg_gbps, out.bw_peak_gbps = round(out.bw_avg_gbps * bw, 4), round(out.bw_peak_gbps * bw, 4)
    if lat != 1.0:
        for f in ("lat_min_us", "lat_typical_us", "lat_avg_us", "lat_max_us", "lat_stdev_us", "lat_p99_us",
                  "lat_p999_us"):
            setattr(out, f, round(getattr(out, f) * lat, 4))


# ---- incast (k senders into one receiver NIC) ------------------------------------------------

#: incast mode -> (total goodput as a fraction of line rate, share spread); see the module docstring
INCAST_MODES = {"lossy": (0.45, 0.30), "pfc": (0.96, 0.02), "ecn": (0.97, 0.01)}
#: lossy drop rate of an incast's packets (x (k-1)/k); pauses and CNPs per second per extra sender
INCAST_DROP_RATE = 0.02
INCAST_PAUSES_PER_S = 1500
INCAST_CNPS_PER_S = 2600
#: pause frames under ECN: this fraction of the PFC-only count (1/200 = 0.5 %)
ECN_PAUSE_DIVISOR = 200
#: microseconds of pause (``_pause_duration`` units) per pause frame
PAUSE_DURATION_PER_FRAME = 8


def incast_mode(out: Outcome) -> str:
    """``lossy``, ``pfc`` or ``ecn`` from a computed path (:attr:`Outcome.lossless` / :attr:`Outcome.ecn`)."""
    return "lossy" if not out.lossless else ("ecn" if out.ecn else "pfc")


def incast_weights(receiver: str, k: int, mode: str) -> list[float]:
    """The k senders' weights (mean exactly 1): ``1 + spread u_i``, the u_i evenly spaced over
    [-1, 1] and dealt in the order of a SHA-256 of (receiver, k, i); ``[1.0]`` for k = 1.

    Raises:
        ValueError: k < 1 or an unknown mode.
    """
    if k < 1 or mode not in INCAST_MODES:
        raise ValueError(f"incast k={k} mode={mode!r}: k >= 1, mode one of {', '.join(INCAST_MODES)}")
    if k == 1:
        return [1.0]
    spread = INCAST_MODES[mode][1]
    order = sorted(range(k), key=lambda i: _jitter("incast", receiver, k, i))
    u = [0.0] * k
    for rank, i in enumerate(order):
        u[i] = -1 + 2 * rank / (k - 1)
    return [1 + spread * x for x in u]


@dataclass
class IncastCounters:
    """Counter increments of one incast sender's run: ``sender`` on its own NIC, ``receiver`` on
    the receiver's (``ethtool -S`` and hw_counters names mixed: ``{"rx_prio3_pause": 9000}``)."""

    sender: dict[str, int] = field(default_factory=dict)
    receiver: dict[str, int] = field(default_factory=dict)


def incast(out: Outcome, receiver: str, k: int, index: int) -> Outcome:
    """Sender ``index`` (0..k-1) of a k-to-1 incast: the pair outcome ``out`` with its bandwidth
    replaced by the sender's share (module docstring, Incast). k = 1 returns ``out`` unchanged.

    Raises:
        ValueError: index outside 0..k-1.
    """
    if not 0 <= index < k:
        raise ValueError(f"incast sender {index} of {k}")
    if k == 1 or out.error:
        return out
    mode = incast_mode(out)
    total, _ = INCAST_MODES[mode]
    # the receiver's link is every sender's bottleneck: a degraded one caps the total, not each flow
    share = out.line_gbps * out.receiver_link_factor / k * total * incast_weights(receiver, k, mode)[index]
    bw = min(share, out.bw_avg_gbps)
    return dataclasses.replace(out, path=list(out.path), reasons=list(out.reasons), bw_avg_gbps=round(bw, 4),
                               bw_peak_gbps=round(bw * 1.0012, 4))


def incast_counters(out: Outcome, k: int, seconds: float) -> IncastCounters:
    """What one sender's ``seconds`` of writing at ``out.bw_avg_gbps`` adds to both ends'
    counters in a k-to-1 incast (module docstring, Incast); k = 1 adds traffic counters only."""
    c = IncastCounters()
    if out.error:
        return c
    nbytes = int(out.bw_avg_gbps * 1e9 / 8 * seconds)
    pkts = math.ceil(nbytes / out.active_mtu)
    ps, pr = out.sender_prio, out.receiver_prio
    # the physical port counts every frame it sends or receives, RoCE included (counters.rst)
    c.sender.update({f"tx_prio{ps}_bytes": nbytes, f"tx_prio{ps}_packets": pkts,
                     "tx_bytes_phy": nbytes, "tx_packets_phy": pkts})
    c.receiver.update({f"rx_prio{pr}_bytes": nbytes, f"rx_prio{pr}_packets": pkts,
                       "rx_bytes_phy": nbytes, "rx_packets_phy": pkts})
    if k < 2:
        return c
    mode = incast_mode(out)
    if mode == "lossy":
        d = max(1, int(pkts * INCAST_DROP_RATE * (k - 1) / k))
        c.receiver.update({f"rx_prio{pr}_discards": d, "rx_discards_phy": d, "out_of_sequence": 3 * d,
                           "packet_seq_err": max(1, d // 2)})
        c.sender["local_ack_timeout_err"] = max(1, d // 400)
        return c
    pauses = int(INCAST_PAUSES_PER_S * seconds * (k - 1))
    if mode == "ecn":
        cnps = int(INCAST_CNPS_PER_S * seconds * (k - 1))
        c.receiver.update({"np_cnp_sent": cnps, "np_ecn_marked_roce_packets": cnps * 3 // 2})
        c.sender["rp_cnp_handled"] = cnps
        pauses = max(1, pauses // ECN_PAUSE_DIVISOR)
    c.sender.update({f"rx_prio{ps}_pause": pauses, f"rx_prio{ps}_pause_duration": pauses * PAUSE_DURATION_PER_FRAME,
                     f"rx_prio{ps}_pause_transition": max(1, pauses // 2)})
    c.receiver.update({f"tx_prio{pr}_pause": pauses, f"tx_prio{pr}_pause_duration": pauses * PAUSE_DURATION_PER_FRAME})
    return c
