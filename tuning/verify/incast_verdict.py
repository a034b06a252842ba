"""What an incast must show and whether it did: :class:`Expectation` (derived from the inventory's
``nic_qos`` and switch ``roce``), :class:`IncastResult` (one incast's numbers, counter deltas and
verdict) and :func:`judge_incast`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tuning.inventory import Inventory
from tuning.verify.counters import CNP_COUNTERS, LOSS_COUNTERS

#: a sender below this fraction of its fair share (line rate / k) fails the incast
MIN_SHARE = 0.5


@dataclass(frozen=True)
class Expectation:
    """What the profile asks of the fabric under incast.

    Attributes:
        lossless: PFC on the RoCE priority (every node's ``nic_qos`` with trust dscp and every
            switch's ``roce`` mode lossless): a PFC pause must be seen.
        ecn: ECN (DCQCN) on as well (``nic_qos.ecn``): a CNP must be seen.
        priority: the RoCE priority whose ``prio`` counters are read (``nic_qos.pfc_priority``).
    """

    lossless: bool
    ecn: bool
    priority: int = 3

    @classmethod
    def from_inventory(cls, inv: Inventory) -> "Expectation":
        """Derive the expectation from the nodes' ``nic_qos`` and the switches' ``roce``.

        lossless: at least one node, every node with ``nic_qos`` set trusting ``dscp`` (a node that
        leaves its QoS alone is not known lossless) and every switch's ``roce`` set
        with mode ``lossless``; ecn: lossless and every node's ``nic_qos.ecn``; priority: the first
        node's ``nic_qos.pfc_priority`` (3 when not lossless).
        """
        nodes, switches = inv.nodes, inv.switches
        qos = [d.spec.nic_qos for d in nodes]
        lossless = bool(nodes) and all(q is not None and q.trust == "dscp" for q in qos) and all(
            d.spec.roce is not None and d.spec.roce.mode == "lossless" for d in switches)
        ecn = lossless and all(q.ecn for q in qos)
        prio = qos[0].pfc_priority if lossless else 3
        return cls(lossless=lossless, ecn=ecn, priority=prio)


@dataclass
class IncastResult:
    """One incast's measurement and verdict.

    Attributes:
        incast: :attr:`Incast.name`.  leaf: the leaf proved.  receiver: ``node01:mlx5_0``.
        senders: ``["node02:mlx5_0", ...]``.
        sender_gbps: per sender its ``ib_write_bw`` average, Gb/s (None: it produced no value).
        line_gbps: the receiver's link speed (``/sys/class/net/IF/speed`` / 1000; None unknown).
        fair_gbps: line_gbps / k.  share_min: the slowest sender / fair share (0..1+).
        total_gbps: the senders' sum, Gb/s.
        counters: counter deltas over the incast, by end then name:
            ``{"node01:mlx5_0": {"np_cnp_sent": 5210, "rx_prio3_pause": 0, ...}, ...}``.
        verdict: ``pass`` | ``fail``.  reasons: one line per failure.
        evidence: the counters and numbers the reasons rest on, one line each.
        error: why the incast did not run (then the verdict is ``fail``), else None.
        tos: the ToS byte every flow set (perftest ``--tclass``), None: traffic class 0.
    """

    incast: str
    leaf: str
    receiver: str
    senders: list[str]
    sender_gbps: dict[str, float | None] = field(default_factory=dict)
    line_gbps: float | None = None
    fair_gbps: float | None = None
    share_min: float | None = None
    total_gbps: float | None = None
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    verdict: str = "pass"
    reasons: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    error: str | None = None
    tos: int | None = None


def judge_incast(r: IncastResult, expect: Expectation) -> bool:
    """Set ``r.verdict``, ``reasons`` and ``evidence`` from its numbers and counter deltas
    (also ``fair_gbps``, ``share_min`` and ``total_gbps`` from ``sender_gbps`` and ``line_gbps``).

    Fails: it did not run (``error``); a counter went backwards between the reads (a driver
    reload, a reboot, a hand edit: ``counters reset between reads``, judged as did not run, since
    the delta says nothing about loss); any loss counter, ``rx_prioN_discards`` (any N) or
    ``rx_discards_phy`` rose (``lossy under incast: ...``); ``expect.lossless`` and no PFC pause on
    any end; ``expect.ecn`` and no CNP; a sender below :data:`MIN_SHARE` of its fair share (line
    rate / k) or without a value; the receiver's line rate unknown (``speed`` -1, EINVAL or
    unreadable: the share check could not run, so it fails, naming the receiver).

    Returns:
        True when the incast passes.
    """
    r.reasons, r.evidence = [], []
    back = [f"{end} {n} {v:+d}" for end, c in r.counters.items() for n, v in c.items() if v < 0]
    if back and not r.error:
        r.error = "counters reset between reads: " + ", ".join(back)
    if r.error:
        r.reasons.append(f"incast did not run: {r.error}")
    _judge_shares(r)
    _judge_counters(r, expect)
    r.verdict = "fail" if r.reasons else "pass"
    return not r.reasons


def _judge_shares(r: IncastResult) -> None:
    """Set ``total_gbps``, ``fair_gbps`` and ``share_min`` from the senders' Gb/s and the line rate,
    with their evidence line; a reason when no sender has a value, the line rate is unknown or the
    slowest sender is below :data:`MIN_SHARE` of its fair share (those two only when it ran)."""
    vals = [v for v in r.sender_gbps.values() if v is not None]
    k = len(r.senders)
    if vals and k:
        r.total_gbps = round(sum(vals), 2)
        r.fair_gbps = round(r.line_gbps / k, 2) if r.line_gbps and r.line_gbps > 0 else None
        slowest = min(r.senders, key=lambda s: r.sender_gbps.get(s) or 0.0)
        r.share_min = round((r.sender_gbps.get(slowest) or 0.0) / r.fair_gbps, 3) if r.fair_gbps else None
        r.evidence.append(f"total {r.total_gbps:.1f} Gb/s" + (f" of line {r.line_gbps:g}" if r.fair_gbps else "")
                          + (f"; fair share {r.fair_gbps:.1f} Gb/s" if r.fair_gbps else "; line rate unknown")
                          + "; senders " + ", ".join(f"{s} {r.sender_gbps.get(s) or 0:.1f}" for s in r.senders))
        if not r.error and r.share_min is None:
            r.reasons.append(f"fair-share check could not run: link speed of the receiver {r.receiver} unknown "
                             f"(its /sys/class/net/*/speed read -1, EINVAL or nothing: link down?)")
        elif not r.error and r.share_min < MIN_SHARE:
            r.reasons.append(f"sender {slowest} got {r.sender_gbps.get(slowest) or 0:.1f} Gb/s, {r.share_min:.2f} "
                             f"of its fair share {r.fair_gbps:.1f} Gb/s (below {MIN_SHARE})")
    elif not r.error:
        r.reasons.append("incast did not run: no sender produced a value")


def _judge_counters(r: IncastResult, expect: Expectation) -> None:
    """Evidence per end (every counter that rose), then, when it ran: a reason for any loss, for no
    PFC pause when lossless is expected and for no CNP when ECN is."""
    p = expect.priority
    for end, c in r.counters.items():
        risen = [f"{n} +{v}" for n, v in c.items() if v]
        if risen:
            r.evidence.append(f"{end}: " + ", ".join(risen))
    loss = [f"{end} {n} +{v}" for end, c in r.counters.items() for n, v in c.items() if v > 0 and (
        n in LOSS_COUNTERS or n == "rx_discards_phy" or re.fullmatch(r"rx_prio\d_discards", n))]
    if r.counters and not r.error:
        if loss:
            r.reasons.append("lossy under incast: " + ", ".join(loss))
        pauses = sum(c.get(f"{d}x_prio{p}_pause", 0) for c in r.counters.values() for d in "rt")
        if expect.lossless and not pauses:
            r.reasons.append(f"lossless expected but no PFC pause on priority {p} at any end "
                             f"(rx_prio{p}_pause and tx_prio{p}_pause did not rise: PFC off or on another priority)")
        cnps = sum(c.get(n, 0) for c in r.counters.values() for n in CNP_COUNTERS)
        if expect.ecn and not cnps:
            r.reasons.append("ECN expected but no CNP sent or handled (np_cnp_sent and rp_cnp_handled did not rise)")
