"""Classification tags of a planned change (:attr:`tuning.node.base.Change.tags`): what it does to
the fabric's path. Set by the node domain or switch driver that knows the key; read by the safe
push order (:mod:`tuning.rollout.batches`) and every policy, never a key name or a vendor word.
"""

from __future__ import annotations

#: the classification tags a Change may carry (:attr:`Change.tags`): the MTU of a path raised or
#: lowered; lossless (PFC, ECN, a lossless RoCE mode) turned on or off
TAGS = ("mtu_up", "mtu_down", "lossless_on", "lossless_off")


def mtu_tags(before: str | None, after: str | None) -> tuple[str, ...]:
    """``("mtu_up",)`` / ``("mtu_down",)`` for an MTU (bytes) raised / lowered; () when either
    side is not a number (absent before) or it does not move."""
    try:
        b, a = int(str(before).strip()), int(str(after).strip())
    except (TypeError, ValueError):
        return ()
    return ("mtu_up",) if a > b else ("mtu_down",) if a < b else ()


def lossless_tags(on_before: bool, on_after: bool) -> tuple[str, ...]:
    """``("lossless_on",)`` / ``("lossless_off",)`` when a lossless setting flips, else ()."""
    return ("lossless_on",) if on_after and not on_before else ("lossless_off",) if on_before and not on_after else ()
