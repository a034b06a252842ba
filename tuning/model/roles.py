"""The device roles an inventory holds: the one table the inventory loader, its cross-host checks
and the engine read when they need a device's place in the fabric.

Code outside the device packages never asks "is this a node or a switch?"; it asks what the role
declares: is the device an *endpoint* (it carries RDMA NICs cabled to other devices' ports: it is
batched by rail, sends and receives the verification traffic) or a *fabric* device (it lists ports
that endpoints are cabled to and forwards between them)? A new role (an InfiniBand subnet manager:
neither) is one more row here and a Target in :mod:`tuning.targets`, with no edit to the loader,
the checks, the batch planner or the verification schedule.

Sources: the groups are the Ansible inventory groups fabtune reads (docs/architecture.md
"Inventory"); the ``fabtune_*`` keys are the connection keys of :class:`tuning.model.settings.ConnectionVars`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from tuning.model.ib_sm import SmSpec
from tuning.model.settings import NicQos, NodeSpec, SwitchRoce, SwitchSpec

#: fabtune's own connection keys (``fabtune_*``), validated like the models' fields
FABTUNE_KEYS = frozenset({"fabtune_sysroot", "fabtune_ssh_key_file", "fabtune_known_hosts_file"})


@dataclass(frozen=True)
class Role:
    """One kind of device.

    Attributes:
        name: the spec's ``role`` and the journal's (``node``, ``switch``).
        group: the inventory group whose hosts have this role (``gpu_nodes``, ``switches``).
        spec: the pydantic model of its desired state.
        endpoint: its spec's ``nics`` are cabled to fabric ports; it is batched and runs RDMA tests.
        fabric: its spec's ``ports`` are what endpoints are cabled to.
        sections: its nested setting sections (``nic_qos``), for "did you mean nic_qos.X?" hints.
        fabtune_keys: the ``fabtune_*`` keys that mean something for it (a switch has no sysroot).
    """

    name: str
    group: str
    spec: type[BaseModel]
    endpoint: bool
    fabric: bool
    sections: tuple[tuple[str, type[BaseModel]], ...]
    fabtune_keys: frozenset[str]

    def own_keys(self) -> set[str]:
        """The top-level keys a host of this role may set (its model's fields and ``fabtune_*`` keys)."""
        return (set(self.spec.model_fields) - {"role"}) | self.fabtune_keys


#: role name -> Role, in inventory order (endpoints first)
ROLES: dict[str, Role] = {r.name: r for r in (
    Role("node", "gpu_nodes", NodeSpec, endpoint=True, fabric=False, sections=(("nic_qos", NicQos),),
         fabtune_keys=FABTUNE_KEYS),
    Role("switch", "switches", SwitchSpec, endpoint=False, fabric=True, sections=(("roce", SwitchRoce),),
         fabtune_keys=FABTUNE_KEYS - {"fabtune_sysroot"}),
    # an InfiniBand subnet manager (issue 22): neither endpoint nor fabric; its files under its sysroot
    Role("sm", "subnet_managers", SmSpec, endpoint=False, fabric=False, sections=(),
         fabtune_keys=FABTUNE_KEYS | {"fabtune_local"}),
)}
#: inventory group -> Role
ROLE_GROUPS: dict[str, Role] = {r.group: r for r in ROLES.values()}


def other_keys(role: Role) -> set[str]:
    """The keys of every other role (a key one of them owns, set where ``role`` sees it, is theirs)."""
    return set().union(*(r.own_keys() for r in ROLES.values() if r is not role))
