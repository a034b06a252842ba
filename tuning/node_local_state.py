"""The node state document of ``fabtune node collect`` (node-local mode, issue 23): one node's
:class:`~tuning.node.base.NodeState`, read on the node itself by :func:`tuning.node.collect` (the
very reads the controller's SSH collect makes), as JSON the controller turns back into that state.

Shape (``fabtune node collect --json``)::

    {"command": "node collect", "node": "node01", "domains": ["mtu"] | null,
     "state": {"facts": {"online_cpus": "0-7", "nics": {NETDEV: {...}}, "raw": {KEY: VALUE}},
               "current": {DOMAIN: {KEY: VALUE}}, "sysroot": "/"}}

``nics`` holds :func:`tuning.node.facts.from_raw`'s per-NIC dict as it made it (strings, and
``comp_irqs`` a list of IRQ numbers); values absent on the node are :data:`tuning.node.base.ABSENT`
(``"\\u0001absent"`` in JSON). The state's ``sysroot`` is where the node's process saw the files
(its ``--sysroot``); the controller plans with its own view of the node (:func:`state_from_doc`'s
``sysroot``: the inventory's ``fabtune_sysroot``, the one its SSH collect gives), so the journaled
commands are those ``fabtune rollback`` runs over SSH.
"""

from __future__ import annotations

from tuning.errors import TuningError
from tuning.node.base import NodeFacts, NodeState

COMMAND = "node collect"


def state_doc(node: str, state: NodeState, domains: set[str] | None) -> dict:
    """The document of ``node``'s ``state`` (module docstring), read for ``domains`` (None: all)."""
    f = state.facts
    return {"command": COMMAND, "node": node, "domains": None if domains is None else sorted(domains),
            "state": {"facts": {"online_cpus": f.online_cpus, "nics": f.nics, "raw": f.raw},
                      "current": state.current, "sysroot": state.sysroot}}


def state_from_doc(doc: object, node: str, sysroot: str) -> NodeState:
    """The NodeState of ``node`` from its document ``doc`` (parsed JSON), addressed at ``sysroot``.

    Raises:
        TuningError: ``doc`` is not a collect document of ``node`` (names what is wrong; phase
            ``collect``): a node's garbled answer is never planned on.
    """
    def bad(what: str) -> TuningError:
        return TuningError(f"`fabtune node collect` of {node}: {what}", host=node, phase="collect")

    if not isinstance(doc, dict) or doc.get("command") != COMMAND or doc.get("node") != node:
        raise bad("not this node's state document")
    st = doc.get("state")
    facts = st.get("facts") if isinstance(st, dict) else None
    if not isinstance(facts, dict):
        raise bad("no state.facts")
    raw, nics, cpus, current = facts.get("raw"), facts.get("nics"), facts.get("online_cpus"), st.get("current")
    if not _str_map(raw) or not isinstance(cpus, str):
        raise bad("state.facts.raw must map strings to strings, online_cpus be a string")
    if not isinstance(nics, dict) or not all(isinstance(v, dict) for v in nics.values()):
        raise bad("state.facts.nics must map each netdev to an object")
    if not isinstance(current, dict) or not all(_str_map(v) for v in current.values()):
        raise bad("state.current must map each domain to strings")
    return NodeState(NodeFacts(online_cpus=cpus, nics=nics, raw=raw), current, sysroot)


def _str_map(value: object) -> bool:
    """Whether ``value`` is a dict of strings to strings."""
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
