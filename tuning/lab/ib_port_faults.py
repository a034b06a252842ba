"""IB lab faults on one HCA port's PortInfo, where the host's, the SM's and the switch's views part
(issue 22; :mod:`tuning.burnin.ib_views` judges them).

Sent as an operator would, with the real ``ibportstate`` (infiniband-diags) over ibsim, and read back with
``smpquery portinfo`` before the fault counts as in:

- :func:`set_lids`: ``ibportstate -D 0 1 lid L`` / ``smlid S`` attached AT the HCA (a PortInfo Set by the
  direct route to itself, which a real HCA's SMA takes when no M_Key protects it). The port answers at the
  new LID while the SM's SA keeps serving the one it assigned (``saquery NR``), and the SM LID moves away
  from the master's, until OpenSM's next heavy sweep writes its own back (measured: light sweeps every
  10 s leave them; SIGHUP restores them).
- :func:`half_activate`: a link left half up, as an SM that stopped mid-activation leaves it: the leaf's
  port ``down`` (both ends retrain to Initialize), the HCA ``arm``, the leaf's port ``arm``, the HCA
  ``active``: the HCA Active, its switch port Armed. Every step is a PortState change IBA allows (Armed
  only from Initialize, Active only from Armed with the neighbour Armed or Active) and is checked before
  it is sent: ibsim takes any (it even arms an Active port), a real port refuses the others, so the lab
  refuses them too. OpenSM's light sweeps leave the switch port Armed; a heavy sweep activates it.
"""

from __future__ import annotations

import re
import time

from tuning.errors import TuningError

__all__ = ["half_activate", "port_state", "set_lids"]

_FIELD = re.compile(r"^(LinkState|Lid|SMLid):\.*(\S+)$", re.M)


def port_state(lab, node_id: str | None = None, leaf_port: tuple[str, int] | None = None) -> dict[str, str]:
    """``{"LinkState": "Active", "Lid": "2", "SMLid": "1"}`` of the HCA ``node_id`` (by the direct route to
    itself) or of a leaf's port ``(leaf GUID, port)``, read with ``smpquery portinfo``."""
    if node_id is not None:
        text = lab.run("smpquery", "-D", "portinfo", "0", "1", host=node_id)
    else:
        text = lab.run("smpquery", "portinfo", "-G", leaf_port[0], str(leaf_port[1]))
    return dict(_FIELD.findall(text))


def _until(read, field: str, want: str, what: str, timeout_s: float = 10.0) -> None:
    """Wait until ``read()[field]`` is ``want``. Raises TuningError naming ``what`` and the value read."""
    deadline = time.monotonic() + timeout_s
    while (got := read().get(field)) != want:
        if time.monotonic() > deadline:
            raise TuningError(f"{what}: {field} reads {got}, want {want}")
        time.sleep(0.1)


def set_lids(lab, node_id: str, lid: int | None = None, sm_lid: int | None = None) -> None:
    """Write the LID and / or SM LID into HCA ``node_id``'s PortInfo (module docstring), each read back.

    Raises:
        TuningError: a LID outside the unicast range 0x1..0xbfff (``sm_lid`` may be 0: no SM), or one the
            port does not read back.
    """
    for op, value, low in (("lid", lid, 1), ("smlid", sm_lid, 0)):
        if value is None:
            continue
        if type(value) is not int or not low <= value <= 0xBFFF:
            raise TuningError(f"{op} {value!r}: a unicast LID {low:#x}..0xbfff")
        lab.run("ibportstate", "-D", "0", "1", op, str(value), host=node_id)
        field = "Lid" if op == "lid" else "SMLid"
        _until(lambda: port_state(lab, node_id), field, str(value), f"{node_id} after ibportstate {op} {value}")


def half_activate(lab, node_id: str, leaf_port: tuple[str, int]) -> None:
    """Leave HCA ``node_id``'s link half up: the HCA Active, its leaf port ``leaf_port`` (GUID, port) Armed
    (module docstring), each step's PortState checked before it is sent and read back after.

    Raises:
        TuningError: a step IBA does not allow from the state read (the link was not Active to start
            with, or the SM moved a port between two steps), or a state not read back.
    """
    hca = lambda: port_state(lab, node_id)  # noqa: E731
    leaf = lambda: port_state(lab, leaf_port=leaf_port)  # noqa: E731
    steps = (("leaf", "down", {"hca": "Active", "leaf": "Active"}, {"hca": "Initialize", "leaf": "Initialize"}),
             ("hca", "arm", {"hca": "Initialize"}, {"hca": "Armed"}),
             ("leaf", "arm", {"leaf": "Initialize"}, {"leaf": "Armed"}),
             ("hca", "active", {"hca": "Armed", "leaf": "Armed"}, {"hca": "Active", "leaf": "Armed"}))
    reads = {"hca": hca, "leaf": leaf}
    for who, op, before, after in steps:
        for end, want in before.items():
            got = reads[end]().get("LinkState")
            if got != want:
                raise TuningError(f"{node_id}: {op} on the {who} port needs the {end} port {want} (IBA PortState "
                                  f"transitions), it reads {got}")
        if who == "hca":
            lab.run("ibportstate", "-D", "0", "1", op, host=node_id)
        else:
            lab.run("ibportstate", "-G", leaf_port[0], str(leaf_port[1]), op)
        for end, want in after.items():
            _until(reads[end], "LinkState", want, f"{node_id}: the {end} port after {op} on the {who} port")
