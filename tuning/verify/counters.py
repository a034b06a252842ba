"""NIC counters an incast is judged on: which ones (:func:`reported_counters`), reading them on a
node in one round trip (:func:`read_counters`: ``ethtool -S IF`` and ``grep ""
/sys/class/infiniband/DEV/ports/1/hw_counters/*``, parsed by :func:`tuning.parsers.nic.parse_ethtool_s`
and :func:`tuning.parsers.rdma_counters.parse_hw_counters`), every node at once (:func:`snapshot`)
and their rises between two reads (:func:`deltas`).

Counter names: Linux ``Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst``;
samples ``shared/cases/ethtool_S__*.txt``, ``hw_counters__*.txt``.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

from tuning.errors import TuningError
from tuning.parsers.nic import parse_ethtool_s
from tuning.parsers.rdma_counters import parse_hw_counters
from tuning.transport.base import Host, q, sysroot_path

#: hw_counters whose rise means packets were lost (retransmission / out of sequence)
LOSS_COUNTERS = ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err")
#: hw_counters of DCQCN: CNPs sent by the notification point (receiver), handled by the reaction point (sender)
CNP_COUNTERS = ("np_cnp_sent", "rp_cnp_handled")


def prio_counters(prio: int) -> tuple[str, ...]:
    """The ``ethtool -S`` counters an incast reports for the RoCE priority ``prio`` (0..7):
    ``rx_prio3_pause``, ``tx_prio3_pause``, ``rx_prio3_discards`` for 3."""
    return (f"rx_prio{prio}_pause", f"tx_prio{prio}_pause", f"rx_prio{prio}_discards")


def reported_counters(prio: int) -> tuple[str, ...]:
    """Every counter an :class:`IncastResult` carries per end, for priority ``prio``."""
    return (*LOSS_COUNTERS, *CNP_COUNTERS, *prio_counters(prio), "rx_discards_phy")


def _counter_command(sysroot: str, ends: list[tuple[str, str]]) -> str:
    """One command reading every ``(netdev, rdma_device)`` end of a node: for each, ``@@ eth IF``,
    ``ethtool -S IF``, ``@@ hw DEV``, the hw_counters as ``path:value``, ``@@ speed DEV Mb/s``."""
    parts = []
    for netdev, dev in ends:
        hw = sysroot_path(sysroot, f"/sys/class/infiniband/{dev}/ports/1/hw_counters")
        speed = sysroot_path(sysroot, f"/sys/class/net/{netdev}/speed")
        # ethtool lives in /usr/sbin, which a user's PATH over SSH may lack (Debian's sshd default)
        parts.append(f"echo @@ eth {q(netdev)}; PATH=\"$PATH:/usr/sbin:/sbin\" ethtool -S {q(netdev)}; "
                     f"echo \"@@ rc $?\"; echo @@ hw {q(dev)}; grep '' {q(hw)}/*; echo \"@@ rc $?\"; "
                     f"echo @@ speed {q(dev)} \"$(cat {q(speed)} 2>/dev/null)\"")
    return "; ".join(parts)



def read_counters(host: Host, ends: list[tuple[str, str]]) -> dict[str, dict[str, int] | TuningError]:
    """Every end's counters (``ethtool -S`` and hw_counters merged, plus ``speed_mbps``) by RDMA
    device, one round trip; ``ends``: ``[(netdev, rdma_device), ...]``.

    Returns:
        ``{"mlx5_0": {"rx_prio3_pause": 0, "np_cnp_sent": 12, ..., "speed_mbps": 400000}}``; an end
        whose read failed (or read nothing but its speed) maps to the TuningError saying why.
    """
    try:
        res = host.run(_counter_command(host.sysroot, ends), privileged=False)  # both are world-readable
    except TuningError as e:
        return {dev: e for _, dev in ends}
    out = _parse_counters(res, host, dict(ends))
    for _, dev in ends:
        if dev not in out or (isinstance(out[dev], dict) and len(out[dev]) <= 1):
            out[dev] = out.get(dev) if isinstance(out.get(dev), TuningError) else TuningError(
                f"no counters read for {dev} (exit {res.rc}): {res.stderr.strip()[-200:]}", host=host.name,
                phase="verify")
    return out


def _parse_counters(res, host: Host, by_if: dict[str, str]) -> dict[str, dict[str, int] | TuningError]:
    """The output of :func:`_counter_command` (``res``: its result) by RDMA device; ``by_if``:
    netdev -> RDMA device. A block whose read failed or does not parse maps its end to the error."""
    hw_base = sysroot_path(host.sysroot, "/sys/class/infiniband")
    out: dict[str, dict[str, int] | TuningError] = {}
    block: list[str] = []
    cur: tuple[str, str] | None = None
    for line in res.stdout.splitlines():
        if not line.startswith("@@ "):
            block.append(line[len(hw_base) - len("/sys/class/infiniband"):] if cur and cur[0] == "hw"
                         and line.startswith(hw_base) else line)
            continue
        word = line.split()
        if word[1] in ("eth", "hw"):
            cur, block = (word[1], word[2]), []
        elif word[1] == "rc" and cur is not None:
            dev = by_if.get(cur[1], cur[1]) if cur[0] == "eth" else cur[1]
            if isinstance(out.get(dev), TuningError):
                continue
            try:
                counters = _block_counters(*cur, word[2], block, res.stderr, host)
                out.setdefault(dev, {}).update(counters)
            except TuningError as e:
                out[dev] = e
            cur = None
        elif word[1] == "speed" and not isinstance(out.get(word[2]), TuningError):
            if len(word) > 3 and word[3].isdigit():
                out.setdefault(word[2], {})["speed_mbps"] = int(word[3])
    return out


def _block_counters(kind: str, name: str, rc: str, block: list[str], stderr: str, host: Host) -> dict[str, int]:
    """The counters of one block: ``kind`` ``eth`` (``ethtool -S`` of netdev ``name``) or ``hw``
    (hw_counters of RDMA device ``name``, every port's merged), read with exit status ``rc``.

    Raises:
        TuningError: the read failed (``rc`` not ``0``; names the block's or stderr's tail), or
            ParseError: the block does not parse.
    """
    if rc != "0":
        raise TuningError(f"reading {kind == 'eth' and 'ethtool -S ' or 'hw_counters of '}{name} "
                          f"failed (exit {rc}): {' '.join(block)[-200:] or stderr.strip()[-200:]}",
                          host=host.name, phase="verify")
    parsed = (parse_ethtool_s if kind == "eth" else parse_hw_counters)("\n".join(block))
    return parsed.counters if kind == "eth" else {k: v for p in parsed.ports for k, v in p.counters.items()}


def snapshot(by_node: dict[str, list[tuple[str, str]]],
             hosts: dict[str, Host]) -> dict[str, dict[str, int] | TuningError]:
    """Counters of every end of ``by_node`` (node -> ``[(netdev, rdma_device), ...]``), keyed
    ``node:dev``: one round trip per node (:func:`read_counters`), nodes in parallel."""

    def one(node: str) -> dict[str, dict[str, int] | TuningError]:
        return {f"{node}:{dev}": v for dev, v in read_counters(hosts[node], by_node[node]).items()}

    with ThreadPoolExecutor(max_workers=max(1, min(32, len(by_node)))) as ex:
        return {k: v for part in ex.map(one, sorted(by_node)) for k, v in part.items()}


#: ``ethtool -S`` priority counters reported whenever they rose, whatever the priority
_ANY_PRIO = re.compile(r"(rx_prio\d_discards|[rt]x_prio\d_pause)")


def deltas(before: dict, after: dict, end: str, prio: int) -> dict[str, int] | TuningError:
    """Counter rises of one end: :func:`reported_counters` of ``prio`` always, the discards and
    pauses of any other priority when they rose (RoCE on priority 0 under trust pcp)."""
    b, a = before.get(end), after.get(end)
    for v in (b, a):
        if isinstance(v, TuningError) or v is None:
            return v if v is not None else TuningError(f"{end}: no counters", phase="verify")
    fixed = set(reported_counters(prio))
    return {k: a.get(k, 0) - b.get(k, 0) for k in sorted(a.keys() | b.keys())
            if k in fixed or (_ANY_PRIO.fullmatch(k) and a.get(k, 0) != b.get(k, 0))}
