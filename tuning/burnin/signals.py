"""Hardware signals of a burn-in document: what its per-NIC and per-GPU readings say, per thing.

Pure functions over ``doc["rounds"][*]["nics"]`` and ``["gpus"]`` (docs/burnin.md); the pair
matrix is :mod:`tuning.burnin.localise`'s. Each signal is ``{"message": one line, "counters":
{...}, "rounds": [int...]}`` under its finding code.

Counter names are mlx5's (Linux ``Documentation/networking/device_drivers/ethernet/mellanox/mlx5/
counters.rst`` for ``ethtool -S``; ``Documentation/ABI/stable/sysfs-class-infiniband`` and the
mlx5 RDMA ``hw_counters`` for the transport ones, as :data:`tuning.lab.counters.HW_COUNTERS`).
Throttle reasons are nvidia-smi's ``clocks_event_reasons.*`` / ``clocks_throttle_reasons.*``
fields (``nvidia-smi --help-query-gpu``); the last dotted word is compared.
"""

from __future__ import annotations

#: physical-port counters that rise only on a bad cable, transceiver or port (ethtool -S, mlx5)
PHY_LOSS = ("rx_symbol_err_phy", "rx_pcs_symbol_err_phy", "rx_crc_errors_phy", "rx_discards_phy",
            "tx_discards_phy", "rx_undersize_pkts_phy", "rx_fragments_phy", "rx_jabbers_phy")
#: RDMA transport counters that rise when packets of a connection are lost somewhere on its path
#: (hw_counters): the receiver sees a sequence gap, the sender times out or is NAKed
TRANSPORT_LOSS = ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "implied_nak_seq_err",
                  "duplicate_request")
#: link-down counters: the mlx5 physical one (ethtool -S)
LINK_DOWN = ("link_down_events_phy",)
#: throttle reasons that are not a fault (idle, clocks set by the admin, power cap, sync boost)
BENIGN_THROTTLE = {"gpu_idle", "applications_clocks_setting", "sw_power_cap", "sync_boost", "none", "active", ""}


def _sig(out: dict, key: str, code: str, message: str, rnd: int, counters: dict | None = None) -> None:
    """Add round ``rnd``'s evidence to ``out[key][code]`` (first message kept, counters summed)."""
    s = out.setdefault(key, {}).setdefault(code, {"message": message, "counters": {}, "rounds": []})
    for name, v in (counters or {}).items():
        s["counters"][name] = s["counters"].get(name, 0) + v
    if rnd not in s["rounds"]:
        s["rounds"].append(rnd)


def _rises(counters: dict, names: tuple[str, ...]) -> dict[str, int]:
    return {n: int(counters[n]) for n in names if isinstance(counters.get(n), (int, float)) and counters[n] > 0}


def pcie_short(pcie: dict) -> str | None:
    """``"x8 of x16"`` / ``"16.0 of 32.0 GT/s"`` when a NIC's PCIe link runs below capability, else None."""
    bits = []
    if pcie.get("width") and pcie.get("max_width") and pcie["width"] < pcie["max_width"]:
        bits.append(f"x{pcie['width']} of x{pcie['max_width']}")
    if pcie.get("speed_gts") and pcie.get("max_speed_gts") and pcie["speed_gts"] < pcie["max_speed_gts"]:
        bits.append(f"{pcie['speed_gts']:g} of {pcie['max_speed_gts']:g} GT/s")
    return ", ".join(bits) or None


def nic_signals(doc: dict) -> dict[str, dict[str, dict]]:
    """Link signals per NIC (``node03:mlx5_2``) over every round.

    Codes: ``link-flap`` (``carrier_down_delta`` > 0 or ``link_down_events_phy`` rose),
    ``link-speed-degraded`` (``speed_mbps`` below ``max_speed_mbps``), ``link-lossy`` (loss
    counters rose on the NIC; peers that saw rises only with it are its evidence, not findings:
    see :func:`lossy_cover`).

    Returns:
        ``{"node03:mlx5_2": {"link-flap": {"message": ..., "counters": {"carrier_down": 3},
        "rounds": [0, 1]}}}``; NICs without a signal are absent.
    """
    out: dict[str, dict] = {}
    for rnd in doc.get("rounds", []):
        i = rnd.get("index", 0)
        for node, nics in (rnd.get("nics") or {}).items():
            for dev, st in nics.items():
                nic, link, cnt = f"{node}:{dev}", st.get("link") or {}, st.get("counters") or {}
                downs = _rises(cnt, LINK_DOWN)
                if (link.get("carrier_down_delta") or 0) > 0 or downs:
                    _sig(out, nic, "link-flap", f"{nic}: link went down during the burn-in",
                         i, {"carrier_down": int(link.get("carrier_down_delta") or 0), **downs})
                speed, top = link.get("speed_mbps"), link.get("max_speed_mbps")
                if speed and top and speed < top:
                    _sig(out, nic, "link-speed-degraded", f"{nic}: link at {link['speed_mbps'] // 1000} Gb/s of "
                         f"{link['max_speed_mbps'] // 1000}", i)
    for nic, (rounds, counters, peers) in lossy_cover(doc).items():
        also = f" and on {len(peers)} NIC(s) tested with it" if peers else ""
        for r in rounds:
            _sig(out, nic, "link-lossy", f"{nic}: loss counters rose on it{also}", r)
        out[nic]["link-lossy"]["counters"] = counters
    return out


def _paired(rnd: dict) -> dict[str, set[str]]:
    peers: dict[str, set[str]] = {}
    for p in rnd.get("pairs", []):
        a = p.get("client_nic") or p.get("a")
        b = p.get("server_nic") or p.get("b")
        if a and b:
            peers.setdefault(a, set()).add(b)
            peers.setdefault(b, set()).add(a)
    return peers


def lossy_cover(doc: dict) -> dict[str, tuple[list[int], dict[str, int], list[str]]]:
    """Which NICs' cables lose packets, from :data:`PHY_LOSS` and :data:`TRANSPORT_LOSS` rises.
    Both ends of a lossy connection may count them (the receiver sees the sequence gap, the
    sender times out), so each (NIC, round) with a rise is explained by the NIC itself or by a
    peer it was tested with that round. Greedily, the NIC with the largest rise over the run (the
    lossy end sees it on every connection, a peer on one) is named with the rises it explains,
    until every rise is explained. Limit: two lossy NICs tested with each other in every round
    are named as one.

    Returns:
        ``{"node03:mlx5_2": ([0, 1, 2], {"out_of_sequence": 120, ...}, ["node01:mlx5_2", ...])}``:
        rounds, the NIC's own summed rises, and the peers whose rises it explains.
    """
    items: dict[tuple[str, int], dict[str, int]] = {}
    peers: dict[int, dict[str, set[str]]] = {}
    for rnd in doc.get("rounds", []):
        i = rnd.get("index", 0)
        peers[i] = _paired(rnd)
        for node, nics in (rnd.get("nics") or {}).items():
            for dev, st in nics.items():
                if r := _rises(st.get("counters") or {}, PHY_LOSS + TRANSPORT_LOSS):
                    items[(f"{node}:{dev}", i)] = r
    total: dict[str, int] = {}
    for (nic, _), r in items.items():
        total[nic] = total.get(nic, 0) + sum(r.values())
    out: dict[str, tuple[list[int], dict[str, int], list[str]]] = {}
    left = set(items)
    while left:
        best = max({y for y, _ in left}, key=lambda x: (total[x], x))
        got = {(y, r) for (y, r) in left if y == best or best in peers[r].get(y, set())}
        own: dict[str, int] = {}
        for (y, r) in got:
            if y == best:
                for n, v in items[(y, r)].items():
                    own[n] = own.get(n, 0) + v
        out[best] = (sorted({r for y, r in got if y == best}), own, sorted({y for y, _ in got} - {best}))
        left -= got
    return out


def node_signals(doc: dict) -> dict[str, dict[str, dict]]:
    """Node signals: GPU health, NIC PCIe below capability, rounds the node could not be read.

    Codes: ``gpu-xid`` (any XID), ``gpu-ecc`` (``ecc_uncorrected`` > 0), the InfiniBand port codes of
    :data:`tuning.node.ib_ports.CODES` (a round's ``ib_ports``: an ``ib_ports`` node's every HCA port),
    ``gpu-remapped-rows`` (pending or failed > 0), ``gpu-throttle`` (a reason outside
    :data:`BENIGN_THROTTLE`), ``pcie-degraded`` (a NIC's PCIe width or speed below its
    capability), ``node-unreachable`` (``errors`` names it in half the rounds or more),
    ``node-nothing-read`` (answered every round, yet no round read one RDMA NIC or one GPU of it: a
    check that reads nothing fails, never passes a node whose devices are hidden or gone).

    Returns:
        ``{"node05": {"gpu-xid": {"message": "node05: GPU 3 (0000:61:00.0) XID 79", "counters":
        {"gpu3_xid": [79]}, "rounds": [1]}}}``.
    """
    out: dict[str, dict] = {}
    unreachable: dict[str, list[int]] = {}
    rounds = doc.get("rounds", [])
    answered, read = set(), set()
    for rnd in rounds:
        i = rnd.get("index", 0)
        answered |= set(rnd.get("nics") or {}) | set(rnd.get("gpus") or {})
        read |= {n for part in ("nics", "gpus") for n, v in (rnd.get(part) or {}).items() if v}
        for node, gpus in (rnd.get("gpus") or {}).items():
            for gpu in gpus or []:
                _gpu(out, node, gpu, i)
        for node, nics in (rnd.get("nics") or {}).items():
            for dev, st in nics.items():
                if short := pcie_short(st.get("pcie") or {}):
                    _sig(out, node, "pcie-degraded", f"{node}: {dev} PCIe link at {short}", i,
                         {f"{dev}_pcie": 1})
        for node, ib in (rnd.get("ib_ports") or {}).items():
            answered.add(node)
            if ib.get("ports"):
                read.add(node)  # an InfiniBand node's HCA ports were read: it is not a node that read nothing
            _ib_ports(out, node, ib.get("findings") or [], i)
        for node in rnd.get("errors") or {}:
            unreachable.setdefault(node, []).append(i)
    for node, idx in unreachable.items():
        if 2 * len(idx) >= len(rounds):
            msg = f"{node}: not read in {len(idx)} of {len(rounds)} round(s): " + str(
                next(r["errors"][node] for r in rounds if node in (r.get("errors") or {})))[:200]
            for i in idx:
                _sig(out, node, "node-unreachable", msg, i)
    _nothing_read(out, sorted(answered - read - set(unreachable)), len(rounds))
    return out


def _ib_ports(out: dict, node: str, findings: list[dict], rnd: int) -> None:
    """A round's InfiniBand port findings of ``node`` (:func:`tuning.burnin.collect.ib_round`), one signal per
    code naming every port it holds (``node01: mlx5_3 port 1: state 1: DOWN, not ACTIVE``), each port's
    evidence counted once a round (``{"mlx5_3 port 1 state=1: DOWN": 1}``)."""
    by_code: dict[str, list[dict]] = {}
    for f in findings:
        by_code.setdefault(f["code"], []).append(f)
    for code, fs in by_code.items():
        _sig(out, node, code, f"{node}: " + "; ".join(f["message"] for f in fs), rnd,
             {f"{f['message'].split(':', 1)[0]} {f['evidence']}": 1 for f in fs})


def _nothing_read(out: dict, nodes: list[str], n_rounds: int) -> None:
    """``node-nothing-read`` for ``nodes``: they answered, yet no round read a NIC or a GPU of them."""
    for node in nodes:
        _sig(out, node, "node-nothing-read", f"{node}: no RDMA NIC and no GPU could be read in {n_rounds} "
             "round(s) (none present, hidden, or not visible to this user): nothing was checked", 0)


def _gpu(out: dict, node: str, gpu: dict, i: int) -> None:
    """One GPU's readings of round ``i`` into ``out``."""
    idx = gpu.get("index")
    name = ("GPU" if idx is None else f"GPU {idx}") + (f" ({gpu['bdf']})" if gpu.get("bdf") else "")
    if gpu.get("lost"):
        name += ", fallen off the bus"
    key = f"gpu{idx}" if idx is not None else f"gpu_{gpu.get('bdf') or 'unknown'}"
    if gpu.get("xid"):
        _sig(out, node, "gpu-xid", f"{node}: {name} XID {', '.join(map(str, gpu['xid']))}", i)
        s = out[node]["gpu-xid"]
        s["counters"][f"{key}_xid"] = sorted(set(s["counters"].get(f"{key}_xid", [])) | set(gpu["xid"]))
    if (gpu.get("ecc_uncorrected") or 0) > 0:
        _sig(out, node, "gpu-ecc", f"{node}: {name} {gpu['ecc_uncorrected']} uncorrected ECC error(s)", i,
             {f"{key}_ecc_uncorrected": int(gpu["ecc_uncorrected"])})
    pend, fail = gpu.get("remapped_rows_pending") or 0, gpu.get("remapped_rows_failed") or 0
    if pend > 0 or fail > 0:
        _sig(out, node, "gpu-remapped-rows", f"{node}: {name} row remapping pending {pend}, failed {fail}", i,
             {f"{key}_remapped_rows_pending": int(pend), f"{key}_remapped_rows_failed": int(fail)})
    bad = sorted({str(t).rsplit(".", 1)[-1] for t in gpu.get("throttle_reasons") or []} - BENIGN_THROTTLE)
    if bad:
        _sig(out, node, "gpu-throttle", f"{node}: {name} throttled: {', '.join(bad)}", i, {f"{key}_throttle": 1})
