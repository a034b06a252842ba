"""Each NIC end of a pair as read right before its test: RoCE v2 GID index and type (sysfs GID
table, never assumed 3) and the netdev's link speed, one round trip per node (:func:`resolve_ends`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tuning.errors import CommandError, TuningError, VerifyError
from tuning.transport.base import Host, q, sysroot_path
from tuning.verify.gid import gid_table_command, pick_roce_v2_ipv4
from tuning.verify.pairs import Pair
from tuning.verify.timeouts import PAIR_TIMEOUT_S, finish

GidKey = tuple[str, str]  # (node, rdma_device)


@dataclass(frozen=True)
class End:
    """One NIC end as read right before its test (one round trip per node).

    Attributes:
        gid_index: the RoCE v2 GID index holding the NIC's IPv4 address (sysfs GID table).
        gid_type: that entry's ``gid_attrs/types`` text (``RoCE v2``).
        speed_mbps: the netdev's ``/sys/class/net/<if>/speed`` (Mb/s); None when unreadable or
            not positive (the kernel gives -1 or EINVAL for a link that is down).
        port_state: the RDMA port's ``/sys/class/infiniband/<dev>/ports/1/state`` (``4: ACTIVE``,
            ``1: DOWN``); None when unreadable.
    """

    gid_index: int
    gid_type: str | None = None
    speed_mbps: int | None = None
    port_state: str | None = None


def _nic_ipv4(nic) -> str:
    return str(nic.ipv4.ip)


def resolve_ends(pairs: list[Pair], hosts: dict[str, Host], workers: int = 4,
                 timeout_s: float = PAIR_TIMEOUT_S) -> dict[GidKey, End | TuningError]:
    """Every NIC end the pairs use, read in one command per node (each NIC's
    :func:`tuning.verify.gid.gid_table_command` and its netdev's link speed), nodes in parallel.

    Returns:
        ``{("node01", "mlx5_0"): End(3, "RoCE v2", 400000), ...}``; a NIC that cannot be resolved
        maps to the error (VerifyError: no RoCE v2 GID; CommandError / ConnectError; DeviceTimeout
        when the node did not answer within ``timeout_s``), which the pairs using it report.
    """
    wanted: dict[str, dict[str, tuple[str, str]]] = {}
    for p in pairs:
        for node, nic in ((p.client, p.client_nic), (p.server, p.server_nic)):
            wanted.setdefault(node, {})[nic.rdma_device] = (_nic_ipv4(nic), nic.netdev)

    def one_node(node: str) -> dict[GidKey, End | TuningError]:
        host, devs = hosts[node], wanted[node]
        try:
            return {(node, d): e for d, e in _read_ends(host, devs, timeout_s).items()}
        except TuningError as e:
            return {(node, d): e for d in devs}

    with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
        return {k: v for part in ex.map(one_node, sorted(wanted)) for k, v in part.items()}


def node_gid_indexes(host: Host, nics, timeout_s: float = PAIR_TIMEOUT_S) -> dict[str, int | TuningError]:
    """Each NIC's RoCE v2 IPv4 GID index on one node, read in one round trip (:func:`resolve_ends`
    for one node): ``{"mlx5_0": 3, ...}``; a NIC that cannot be resolved maps to the error."""
    return {d: e if isinstance(e, TuningError) else e.gid_index for d, e in node_ends(host, nics, timeout_s).items()}


def node_ends(host: Host, nics, timeout_s: float = PAIR_TIMEOUT_S) -> dict[str, End | TuningError]:
    """Each NIC's :class:`End` on one node (GID index, link speed, RDMA port state), one round trip:
    ``{"mlx5_0": End(3, "RoCE v2", 400000, "4: ACTIVE"), ...}``; a NIC that cannot be resolved (no
    RoCE v2 GID for its IPv4 address, the read failed) maps to the error (VerifyError / CommandError /
    ConnectError / DeviceTimeout)."""
    devs = {n.rdma_device: (_nic_ipv4(n), n.netdev) for n in nics}
    try:
        return _read_ends(host, devs, timeout_s)
    except TuningError as e:
        return {d: e for d in devs}


def resolve_gids(pairs: list[Pair], hosts: dict[str, Host], workers: int = 4) -> dict[GidKey, int | TuningError]:
    """The RoCEv2 IPv4 GID index of every NIC the pairs use (:func:`resolve_ends`, indexes only).

    Returns:
        ``{("node01", "mlx5_0"): 3, ...}``; a NIC that cannot be resolved maps to the error
        (VerifyError / CommandError / ConnectError / DeviceTimeout), which the pairs using it report.
    """
    return {k: v if isinstance(v, TuningError) else v.gid_index for k, v in resolve_ends(pairs, hosts, workers).items()}


def _read_ends(host: Host, devs: dict[str, tuple[str, str]], timeout_s: float) -> dict[str, End | TuningError]:
    """Several GID tables and link speeds in one round trip; each table is followed by
    ``@@ <dev> <rc> <speed or -> <port state or ->`` (the state last: it holds a space, ``4: ACTIVE``)."""
    parts = []
    for d, (_, netdev) in devs.items():
        speed = q(sysroot_path(host.sysroot, f"/sys/class/net/{netdev}/speed"))
        port = q(sysroot_path(host.sysroot, f"/sys/class/infiniband/{d}/ports/1/state"))
        parts.append(f"( {gid_table_command(host.sysroot, d)} ); rc=$?; s=$(cat {speed} 2>/dev/null) || s=-; "
                     f"p=$(cat {port} 2>/dev/null) || p=-; echo \"@@ {d} $rc ${{s:--}} ${{p:--}}\"")
    cmd = "; ".join(parts)
    res = finish(host.start(cmd, privileged=False), host, timeout_s)  # sysfs GID tables are world-readable
    out: dict[str, End | TuningError] = {}
    table: list[str] = []
    for line in res.stdout.splitlines():
        if not line.startswith("@@ "):
            table.append(line)
            continue
        _, dev, rc, speed, *state = line.split()
        ipv4 = devs[dev][0]
        idx = pick_roce_v2_ipv4("\n".join(table), ipv4) if rc == "0" else None
        mbps = int(speed) if speed.lstrip("-").isdigit() and int(speed) > 0 else None
        port = " ".join(state) if state and state != ["-"] else None
        out[dev] = End(idx, "RoCE v2", mbps, port) if idx is not None else VerifyError(
            f"{dev}: no RoCE v2 GID for {ipv4} in the GID table" + ("" if rc == "0" else
            f" (reading it failed, exit {rc}: {res.stderr.strip()[-200:]})"), host=host.name, phase="verify")
        table = []
    for dev in devs.keys() - out.keys():
        out[dev] = CommandError(cmd, res.rc, res.stderr, host=host.name, phase="verify")
    return out


def end_of(ends: dict[GidKey, End | int | TuningError], node: str, dev: str) -> End:
    """The :class:`End` of ``node``'s ``dev`` in ``ends`` (:func:`resolve_ends`' shape, or a bare GID
    index from :func:`resolve_gids`).

    Raises:
        TuningError: the error that end was resolved to; KeyError: no such end.
    """
    v = ends[(node, dev)]
    if isinstance(v, TuningError):
        raise v
    return v if isinstance(v, End) else End(v)

