"""Batches of a rollout and the safe order inside each (pure: no I/O).

:func:`plan_batches` cuts the selected devices into batches by the policy's ``serial`` (Ansible's
rolling-update batch sizes, :class:`tuning.model.policy.RolloutPolicy`): nodes ordered by their
first NIC's leaf (``batch_by: leaf``) or rail (``rail``), then name, so a batch fills one leaf
before the next; each switch joins the first batch that holds a node cabled to it; a switch no
selected node is cabled to (a spine, or a leaf whose nodes are not selected) joins batch 1; a
selection of switches only is cut by ``serial`` too, counting switches (the default is one batch).

:func:`phases` orders one batch's devices so no path is half changed while packets flow, from
the changes' tags alone (:mod:`tuning.model.tags`, set by the node domain or switch driver that
knows the key: a node ``mtu/IF``, an NVUE ``port/P/mtu``; node PFC priorities or ECN, NVUE
``roce/mode`` lossless, PFC or ECN):

- ``mtu_up``: switches first, then nodes (a host never sends frames a switch port would drop);
- ``mtu_down``: nodes first, then switches;
- ``lossless_on``: switches first (a node's PFC pauses are honoured before it relies on them);
- ``lossless_off``: nodes first;
- MTU raised and lowered in one run, or two rules asking opposite orders: refused (split the
  rollout), before anything is pushed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Iterable

from tuning.errors import InputError
from tuning.model.policy import RolloutPolicy
from tuning.model.tags import TAGS



@dataclass
class Batch:
    """One batch of a rollout.

    Attributes:
        index: 1-based.  nodes / switches: device names, in push order.
        phases: device names per phase, pushed phase after phase (one phase: all at once).
        why: how the batch was formed (``canary: 1 node of leaf01 (serial 1)``).
        order: why its phases are in this order (``MTU raised 1500 -> 9000: switches first``).
    """

    index: int
    nodes: list[str]
    switches: list[str]
    phases: list[list[str]] = field(default_factory=list)
    why: str = ""
    order: str = ""

    @property
    def devices(self) -> list[str]:
        """Nodes then switches."""
        return [*self.nodes, *self.switches]

    def as_dict(self) -> dict:
        """JSON-ready dict."""
        return asdict(self)


def _first_nic(dev):
    nics = getattr(dev.spec, "nics", None) or []
    return nics[0] if nics else None


def order_nodes(nodes: list, batch_by: str) -> list:
    """``nodes`` (inventory Devices) in batch order: by first NIC's leaf then name (``leaf``), by
    first NIC's rail, leaf, then name (``rail``), or as given (``none``). A node without a NIC
    sorts last."""
    if batch_by == "none":
        return list(nodes)

    def key(d):
        nic = _first_nic(d)
        if nic is None:
            return (1, 0, "", d.name)
        return (0, nic.rail if batch_by == "rail" else 0, nic.switch, d.name)
    return sorted(nodes, key=key)


def _label(nodes: list, batch_by: str) -> str:
    """``leaf01`` / ``leaf01..leaf02`` / ``rail 0`` of a batch's nodes (its first NICs)."""
    nics = [n for n in (_first_nic(d) for d in nodes) if n is not None]
    if not nics:
        return "no NIC"
    if batch_by == "rail":
        rails = sorted({n.rail for n in nics})
        return f"rail {rails[0]}" if len(rails) == 1 else f"rails {rails[0]}..{rails[-1]}"
    leaves = sorted({n.switch for n in nics})
    return leaves[0] if len(leaves) == 1 else f"{leaves[0]}..{leaves[-1]} ({len(leaves)} leaves)"


def plan_batches(inv, selected: list, policy: RolloutPolicy, changes: dict[str, Iterable] | None = None) -> list[Batch]:
    """The batches of a rollout of ``selected`` (inventory Devices) under ``policy``.

    Args:
        inv: the Inventory (cabling of every node, to place switches).
        changes: device -> planned changes (:class:`tuning.node.base.Change` or their dicts);
            given, each batch's :attr:`Batch.phases` follow :func:`phases`; None: one phase.

    Returns:
        Batches in push order, index 1..N; every selected device in exactly one.

    Raises:
        InputError: the batch order cannot be made safe (see :func:`phases`).
    """
    nodes = order_nodes([d for d in selected if d.kind.endpoint], policy.batch_by)
    switches = [d for d in selected if not d.kind.endpoint]
    batches: list[Batch] = []
    if nodes:
        at = 0
        for i, size in enumerate(policy.sizes(len(nodes))):
            chunk = nodes[at:at + size]
            at += size
            entry = policy.serial[min(i, len(policy.serial) - 1)]
            kind = "canary" if i == 0 and size < len(nodes) else ("all nodes" if size == len(nodes) else f"batch {i + 1}")
            batches.append(Batch(i + 1, [d.name for d in chunk], [],
                                 why=f"{kind}: {size} node(s) of {_label(chunk, policy.batch_by)} (serial {entry})"))
        _join(inv, batches, switches)
    elif switches:
        at = 0
        for i, size in enumerate(policy.sizes(len(switches))):
            chunk = switches[at:at + size]
            at += size
            batches.append(Batch(i + 1, [], [d.name for d in chunk],
                                 why=f"no node: {size} {_kinds(chunk)} (serial "
                                     f"{policy.serial[min(i, len(policy.serial) - 1)]})"))
    run_rules = _rules(changes or {})
    for b in batches:
        b.phases, b.order = phases(b, changes or {}, run_rules)
    return batches


def _join(inv, batches: list[Batch], others: list) -> None:
    """Put each device of ``others`` (no endpoint: switches, subnet managers) in the first batch with a
    node cabled to it, else batch 1, and say so in the batch's ``why`` in its kind's words
    (:func:`joined_words`)."""
    cabled = {}  # device -> first batch index with a node cabled to it
    for b in batches:
        for name in b.nodes:
            for nic in getattr(inv.devices[name].spec, "nics", None) or []:
                cabled.setdefault(nic.switch, b.index)
    joined: dict[tuple[int, str], list[str]] = {}
    for d in others:
        b = batches[cabled.get(d.name, 1) - 1]
        b.switches.append(d.name)
        joined.setdefault((b.index, joined_words(d, d.name in cabled)), []).append(d.name)
    for (idx, words), names in joined.items():
        batches[idx - 1].why += f"; with {_names(names)} ({words})"


def joined_words(dev, cabled: bool) -> str:
    """How a batch's ``why`` says where a device with no NIC joined it, from its kind (its inventory
    role, :data:`tuning.model.roles.ROLES`): a fabric device (a switch) ``cabled to its nodes`` or
    ``no selected node cabled: batch 1``; any other kind (a subnet manager) by its group:
    ``subnet_managers: no cabling, batch 1``."""
    if not dev.kind.fabric:
        return f"{dev.kind.group}: no cabling, batch 1"
    return "cabled to its nodes" if cabled else "no selected node cabled: batch 1"


def batch_line(inv, b: Batch, n_batches: int, todo: set[str], window: int | None) -> str:
    """The console's line as batch ``b`` (of ``n_batches``) starts: how it was formed, its order and,
    when it pushes a device that commits with a confirm window (a fabric device: a switch; a subnet
    manager has none, its files are read back), the window in seconds (``todo``: its devices with
    changes; ``window``: None when the run verifies nothing)."""
    confirms = any(inv.devices[n].kind.fabric for n in todo & set(b.switches))
    return f"batch {b.index}/{n_batches}: {b.why}; {b.order}" + (f"; switch confirm window {window} s"
                                                                 if window and confirms else "")


def _kinds(devices: list) -> str:
    """``device(s) (switches)``: what a batch without nodes holds, by the devices' inventory role
    groups (:data:`tuning.model.roles.ROLES`), e.g. ``device(s) (subnet_managers, switches)``."""
    return f"device(s) ({', '.join(sorted({d.kind.group for d in devices}))})"


def _names(names: list[str], shown: int = 3) -> str:
    """``leaf01, leaf02`` or ``su001-r0, su001-r1, su001-r2 (+5 more)``."""
    return ", ".join(names[:shown]) + (f" (+{len(names) - shown} more)" if len(names) > shown else "")


def _val(c, name: str):
    return c.get(name) if isinstance(c, dict) else getattr(c, name)


def _rules(changes: dict[str, Iterable]) -> dict[str, list[str]]:
    """What the whole run's changes ask, from their tags (:mod:`tuning.model.tags`):
    ``{"mtu_up": ["node01 mtu/enp12s0np0 1500 -> 9000"], "mtu_down": [...], "lossless_on": [...],
    "lossless_off": [...]}`` (every tagged change, in plan order)."""
    out: dict[str, list[str]] = {t: [] for t in TAGS}
    for dev, chs in changes.items():
        for c in chs:
            for tag in _val(c, "tags") or ():
                if tag in out:
                    out[tag].append(f"{dev} {_val(c, 'key')} {_val(c, 'before')} -> {_val(c, 'after')}")
    return out


def phases(batch: Batch, changes: dict[str, Iterable], rules: dict[str, list[str]] | None = None) -> tuple[list[list[str]], str]:
    """The push phases of ``batch`` and the reason, from the run's changes (``rules``: :func:`_rules`
    of the whole run, so every batch is pushed in the same order; None: of ``changes``). The
    reason quotes the first change of this batch that asks for the order, or no device when the
    batch has none (a batch of nodes whose MTU rule comes from another batch's switches).

    Returns:
        ``([[switches...], [nodes...]], "MTU raised (node01 mtu/... 1500 -> 9000): switches first, then nodes")``;
        devices without changes are left out; ``([[all]], "no MTU or lossless change: all at once")``.

    Raises:
        InputError: MTU raised and lowered in one run, or lossless turned on and off, or an MTU
            rule and a lossless rule asking opposite orders: split the rollout.
    """
    r = rules if rules is not None else _rules(changes)
    if r["mtu_up"] and r["mtu_down"]:
        raise InputError("inventory", "mtu", f"the MTU goes up ({r['mtu_up'][0]}) and down ({r['mtu_down'][0]}) in one "
                         "run: no push order is safe for both; split the rollout (one direction per run, --limit or "
                         "--domain)")
    if r["lossless_on"] and r["lossless_off"]:
        raise InputError("inventory", "nic_qos", f"lossless is turned on ({r['lossless_on'][0]}) and off "
                         f"({r['lossless_off'][0]}) in one run; split the rollout")
    def said(ex: dict[str, list[str]]) -> tuple[list[str], list[str]]:
        """The rules' reasons, each with its first example of ``ex`` (none when ``ex`` has none)."""
        def one(kind: str, what: str) -> list[str]:
            return [f"{what} ({ex[kind][0]})" if ex[kind] else what] if r[kind] else []
        return (one("mtu_up", "MTU raised") + one("lossless_on", "lossless turned on"),
                one("mtu_down", "MTU lowered") + one("lossless_off", "lossless turned off"))

    switches_first, nodes_first = said(r)
    if switches_first and nodes_first:
        raise InputError("inventory", "mtu", f"{switches_first[0]} needs switches first but {nodes_first[0]} needs "
                         "nodes first; split the rollout")
    # the reason quotes a change of THIS batch (the run's rule orders every batch alike), or none
    own = set(batch.devices)
    switches_first, nodes_first = said(_rules({n: c for n, c in changes.items() if n in own}))
    todo = [n for n in batch.devices if changes.get(n) or not changes]
    nodes = [n for n in batch.nodes if n in todo]
    sws = [n for n in batch.switches if n in todo]
    if not (switches_first or nodes_first) or not nodes or not sws:
        why = "; ".join(switches_first + nodes_first) or "no MTU or lossless change"
        return ([todo] if todo else []), f"{why}: all at once"
    if switches_first:
        return [sws, nodes], f"{'; '.join(switches_first)}: switches first, then nodes"
    return [nodes, sws], f"{'; '.join(nodes_first)}: nodes first, then switches"
