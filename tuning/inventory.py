"""One loader for the Ansible-format YAML inventory, used by both front ends.

It sees exactly the variables ``ansible-inventory --list`` gives (``tuning.model.layout``):
``hosts.yaml`` groups with inline ``vars:``, ``group_vars/<group>.yml`` or ``group_vars/<group>/*.yml``,
``host_vars/<host>.yml`` (or a folder), in Ansible's precedence. Each file is read by
``tuning.model.yamlfile`` (a regular file, UTF-8, no duplicate keys, bounded nesting, no recursive
aliases). An inventory folder holds no other file Ansible would read as an inventory source
(``tuning.model.sources``).

fabtune's devices are the hosts of the role groups ``gpu_nodes`` (a :class:`~tuning.model.NodeSpec`)
and ``switches`` (a :class:`~tuning.model.SwitchSpec`), one role each; hosts only in other groups
(a site's login nodes) are left alone; a host in no group, or in a group named like a role group
(``gpu-nodes``), is refused.
fabtune's own keys (the models' fields, ``fabtune_*``) are validated strictly (no coercion, a
grammar for every string that reaches a shell or a file, bounded ranges); a key of the other role is
refused unless it is set for a group holding both roles (``all``); an unknown key close to a known
one is refused ("did you mean nic_qos.pfc_priority?"); other keys (``ntp_servers``, other
``ansible_*``) are left alone. Paths in ``fabtune_*_file`` keys are relative to INV. Cross-host
checks (cabling, endpoints, QoS) run last (:mod:`tuning.checks`). The ``all`` group's
``fabtune_rollout`` is the run's rollout policy (:mod:`tuning.model.policy`; on any other group or
a host it is refused).

Raises :class:`tuning.errors.InputError` (exit 2) with file, key and allowed values, in one line.
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import gc
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from pydantic import ValidationError

from tuning.checks import check_addresses, check_cabling, check_qos, check_vars_files
from tuning.errors import InputError
from tuning.model import NodeSpec, SwitchSpec
from tuning.model.node_tuning import overlaps
from tuning.model.layout import VarsCache, host_vars, parse_tree
from tuning.model.messages import validation_error
from tuning.model.policy import POLICY_KEY, RolloutPolicy
from tuning.model.policy import explain as explain_policy
from tuning.model.roles import FABTUNE_KEYS, ROLE_GROUPS, ROLES, Role, other_keys
from tuning.model.settings import ConnectionVars
from tuning.model.sources import check_single_source
from tuning.transport import become as _become
from tuning.transport.connection import Connection  # noqa: F401 (re-exported: tuning.inventory.Connection)

#: the Ansible variables fabtune reads (validated); other ``ansible_*`` keys are Ansible's business
CONNECTION_KEYS = {"ansible_host", "ansible_port", "ansible_user", *_become.KEYS}
#: Ansible's old aliases of the keys above: fabtune would not see them, so they are refused
LEGACY_KEYS = {"ansible_ssh_host": "ansible_host", "ansible_ssh_port": "ansible_port",
               "ansible_ssh_user": "ansible_user"}


@dataclass
class Device:
    """One inventory host: its name, groups, connection and validated desired state."""

    name: str
    groups: list[str]
    connection: Connection
    spec: NodeSpec | SwitchSpec
    sources: dict[str, str] = field(default_factory=dict)  # top-level key -> file that set it

    @property
    def role(self) -> str:
        """``node`` or ``switch``."""
        return self.spec.role

    @property
    def kind(self) -> Role:
        """Its :class:`~tuning.model.roles.Role`: whether it is an endpoint or a fabric device."""
        return ROLES[self.spec.role]


@dataclass
class Inventory:
    """All devices of an inventory, nodes then switches, in file order."""

    path: Path
    devices: dict[str, Device]
    #: the run's rollout policy (``fabtune_rollout`` of the ``all`` group; defaults when unset)
    policy: RolloutPolicy = field(default_factory=RolloutPolicy)

    @property
    def nodes(self) -> list[Device]:
        """The endpoints (GPU nodes): devices whose NICs are cabled to fabric ports."""
        return [d for d in self.devices.values() if d.kind.endpoint]

    @property
    def switches(self) -> list[Device]:
        """The fabric devices (switches): devices whose ports the endpoints are cabled to."""
        return [d for d in self.devices.values() if d.kind.fabric]

    def select(self, limit: list[str] | None) -> list[Device]:
        """Devices ``limit`` selects (in the order its terms name them; all if None, in inventory order). Ansible's ``--limit`` patterns:
        each item a list split at ``,`` or ``:``; a term is a host or group name or a shell-style
        wildcard over both (``node0*``, ``leaf0[12]``); ``&TERM`` keeps only what it also matches,
        ``!TERM`` removes what it matches; with only ``&``/``!`` terms the selection starts from
        every device (``--limit '!spine01'``).

        Raises:
            InputError: a term matches no host or group (a typo in an exclusion must never widen
                a run), naming the term and the hosts.
        """
        if not limit:
            return list(self.devices.values())
        terms = [t for item in limit for t in re.split(r"[,:]", item)]
        if "" in terms or not terms:  # '' would select every device: refused as before
            raise InputError("--limit", ",".join(limit)[:80] or "''", "an empty pattern; give hosts, groups or "
                             f"wildcards (node0*, leaves:!leaf02); hosts: {', '.join(self.devices)}")
        plus = [t for t in terms if t[0] not in "!&"]
        order = list(self.devices) if not plus else list(dict.fromkeys(
            n for t in plus for n in self.devices if n in self._matching(t)))  # the terms' order, as before
        keep = set(order)
        for t in terms:
            if t[0] == "&":
                keep &= self._matching(t[1:])
            elif t[0] == "!":
                keep -= self._matching(t[1:])
        return [self.devices[n] for n in order if n in keep]

    def _matching(self, term: str) -> set[str]:
        """The names of the devices ``term`` (a name, a group, or a wildcard over both) matches.
        Raises InputError when none."""
        hit = {d.name for d in self.devices.values()
               if fnmatch.fnmatchcase(d.name, term) or any(fnmatch.fnmatchcase(g, term) for g in d.groups)}
        if not hit:
            raise InputError("--limit", term, f"no host or group called {term!r}; hosts: {', '.join(self.devices)}")
        return hit


def _role_of(hosts_file: Path, host: str, groups: list[str]) -> str | None:
    """The role group of ``host`` (``gpu_nodes`` / ``switches``), or None for a site host that is in
    other groups only (a login node: not fabtune's, left alone).

    Raises:
        InputError: in both role groups, in no group at all, or in a group whose name is close to a
            role group's (``gpu-nodes``: a typo that would drop the host silently).
    """
    roles = [g for g in groups if g in ROLE_GROUPS]
    others = [g for g in groups if g not in ("all", "ungrouped") and g not in ROLE_GROUPS]
    close = next((m for g in others for m in difflib.get_close_matches(g, list(ROLE_GROUPS), 1, 0.75)), None)
    if len(roles) == 1:
        return roles[0]
    if roles or not others or close:
        have = ", ".join(roles + others) or "no group"
        hint = f"; did you mean {close}?" if close and not roles else ""
        raise InputError(str(hosts_file), f"all.*.hosts.{host}", f"host must be in exactly one of the groups "
                         f"{', '.join(ROLE_GROUPS)} (it is in {have}){hint}")
    return None


def _nested_keys(role: Role) -> dict[str, str]:
    """Distinctive nested setting names -> their dotted place (``pfc_priority`` -> ``nic_qos.pfc_priority``),
    so a nested key written at the top level is caught; short common words (``mode``) are left out."""
    out: dict[str, str] = {}
    others = [s for r in ROLES.values() if r is not role for s in r.sections]
    for parent, model in (*others, *role.sections):  # the role's own wins
        out.update({k: f"{parent}.{k}" for k in model.model_fields if "_" in k and len(k) >= 6})
    return out


@functools.cache
def _key_sets(role: Role) -> tuple[frozenset[str], frozenset[str], dict[str, str], list[str]]:
    """(own keys, other roles' keys, nested names -> dotted place, every known key sorted) of ``role``:
    built once per role, read for every host."""
    own, other, nested = frozenset(role.own_keys()), frozenset(other_keys(role)), _nested_keys(role)
    return own, other, nested, sorted(own | other | CONNECTION_KEYS | FABTUNE_KEYS | set(nested) | {POLICY_KEY})


def _check_keys(role: Role, vars_: dict, where: tuple[dict, dict], host: str, mixed: set[str]) -> None:
    """Refuse fabtune's own keys in the wrong place and near-misses of them; leave other keys alone.

    ``mixed`` holds the groups whose hosts have both roles (``all``): a key of the other role set
    there is meant for those hosts and is ignored here.
    """
    sources, scopes = where
    own, other, nested, known = _key_sets(role)
    for key in vars_:
        if key == POLICY_KEY:  # the run's policy: checked once, by _policy
            continue
        if key in LEGACY_KEYS:
            raise InputError(sources[key], key, f"an old Ansible alias fabtune does not read (host {host}); "
                                                f"allowed: {LEGACY_KEYS[key]}")
        if key in own or key in CONNECTION_KEYS or key.startswith(("__", "ansible_")):
            continue
        if key in other or key in FABTUNE_KEYS:
            if scopes[key] in mixed:
                continue
            raise InputError(sources[key], key, f"not a {role.name} setting (host {host}); allowed for a {role.name}: "
                                                f"{', '.join(sorted(own))}")
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.8) or [k for k in known if _swapped(key, k)]
        if not close and (same := [k for k in known if k.lower() == key.lower()]):  # FABTUNE_ROLLOUT, MTU
            close = same  # Ansible's variables are case-sensitive: a case variant is never read
        if key.lower().startswith("fabtune_") or close:
            hint = f"did you mean {nested.get(close[0], close[0])}? " if close else ""
            raise InputError(sources[key], key, f"unknown key (host {host}); {hint}allowed: {', '.join(sorted(own))}")


def _swapped(key: str, known: str) -> bool:
    """Whether ``key`` is ``known`` with two adjacent letters swapped (``mut`` for ``mtu``): a typo
    too short for difflib's ratio (0.67 for three letters) that would leave the setting unread."""
    if len(key) != len(known) or len(key) < 3 or key == known:
        return False
    diff = [i for i, (a, b) in enumerate(zip(key, known)) if a != b]
    return len(diff) == 2 and diff[1] == diff[0] + 1 and key[diff[0]] == known[diff[1]] and key[diff[1]] == known[diff[0]]


def _connection(inv: Path, host: str, vars_: dict, sources: dict) -> Connection:
    try:
        known = ConnectionVars.model_fields  # once: pydantic builds the class attribute on each read
        cv = ConnectionVars.model_validate({k: v for k, v in vars_.items() if k in known})
    except ValidationError as e:
        raise validation_error(e, ConnectionVars, sources, host) from None

    def rel(v: str | None) -> str | None:
        return None if v is None else _beside(str(inv), v, os.getcwd())

    become = _become.parse(vars_, sources, host)
    return Connection(hostname=cv.ansible_host or host, port=cv.ansible_port, username=cv.ansible_user,
                      key_file=rel(cv.fabtune_ssh_key_file), known_hosts=rel(cv.fabtune_known_hosts_file),
                      sysroot=cv.fabtune_sysroot, become=become.enabled, become_user=become.user,
                      become_method=become.method, become_password_vault=become.password_vault,
                      local=cv.fabtune_local)


@functools.lru_cache(maxsize=256)
def _beside(inv: str, v: str, cwd: str) -> str:
    """``v`` (a key or known_hosts file an inventory names) as an absolute path: as given when
    absolute, else under the inventory folder ``inv`` (relative to ``cwd``); worked out once per
    distinct value (every host of a fleet names the same few files)."""
    return str(Path(v) if Path(v).is_absolute() else Path(cwd, inv) / v)


def _hosts_file(path: str | Path) -> Path:
    """The inventory file: ``path`` itself, or a folder's ``hosts.yaml`` (``hosts.yml``), the only
    inventory source in it (:mod:`tuning.model.sources`).

    Raises:
        InputError: no inventory file, or a folder holding another file Ansible would read as one.
    """
    inv = Path(path)
    given_file = inv.exists() and not inv.is_dir()  # a FIFO given as -i is refused when read
    hosts_file = inv if given_file else next(
        (inv / n for n in ("hosts.yaml", "hosts.yml") if (inv / n).exists()), inv / "hosts.yaml")
    if not hosts_file.exists():
        raise InputError(str(hosts_file), "-", "inventory not found (expected hosts.yaml with an 'all' group)")
    if not given_file:
        check_single_source(inv, hosts_file)
    return hosts_file




def _build(inv: Path, host: str, groups: list[str], role_group: str, layered: tuple[dict, dict, dict],
           mixed: set[str]) -> Device:
    """One validated Device from a host's merged variables: the ONE validation path of :func:`load`
    (files on disk) and :func:`device_from_vars` (Ansible's resolved hostvars).

    Args:
        layered: (vars, key -> file that set it, key -> group that set it or None for the host).
        mixed: groups whose hosts have both roles (a key of the other role set there is ignored).
    """
    vars_, sources, scopes = layered
    role = ROLE_GROUPS[role_group]
    model = role.spec
    _check_keys(role, vars_, (sources, scopes), host, mixed)
    known = model.model_fields  # once per host, not per key (a class attribute read costs a call)
    fields = {k: v for k, v in vars_.items() if k in known and k != "role"}
    try:
        spec = model.model_validate(fields)
    except ValidationError as e:
        raise validation_error(e, model, sources, host) from None
    if isinstance(spec, NodeSpec):  # a setting the profile gives twice, named with the file that set it
        for key, problem in overlaps(spec.kernel, spec.cpu, spec.sysctl):
            raise InputError(sources.get(key.split(".")[0], "inventory"), key, f"{problem} (host {host})")
    return Device(host, groups, _connection(inv, host, vars_, sources), spec, sources)


def load(path: str | Path, *, lint: bool = True) -> Inventory:
    """Load and validate an inventory directory (or its ``hosts.yaml``), as Ansible reads it;
    with ``lint`` (default) the fabric lint's inventory rules refuse the first error
    (:func:`tuning.checks.check_qos`); ``fabtune lint`` loads without them to report them all.

    Returns:
        Inventory with one validated :class:`Device` per host.

    Raises:
        InputError: missing file, bad YAML, a duplicate or misplaced key, a value outside its
            grammar or range, a host without a role group, inconsistent QoS across devices.
    """
    with collector_paused():
        hosts_file = _hosts_file(path)
        inv = hosts_file.parent
        cache = VarsCache(inv)
        tree = parse_tree(hosts_file, cache.parsed.read_yaml)
        groups = {h: tree.groups_of(h) for h in tree.inline}
        check_vars_files(inv, set(tree.groups) | {"ungrouped"}, set(groups))
        role_of = {h: r for h, g in groups.items() if (r := _role_of(hosts_file, h, g)) is not None}
        mixed = {g for g in tree.groups if len({role_of[h] for h in role_of if g in groups[h]}) > 1}
        layered, devices = {}, {}  # each host's merged vars, read once (the policy reads them too)
        for h in role_of:
            layered[h] = host_vars(tree, cache, h)
            devices[h] = _build(inv, h, groups[h], role_of[h], layered[h], mixed)
        cache.parsed.save()
        check_cabling(devices, hosts_file)
        check_addresses(devices, hosts_file)
        if lint:
            check_qos(devices)
        return Inventory(inv, devices, _policy(layered))


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a bulk step builds data that lives on (a load,
    a render, an offline plan), as it was after. Each of its passes walks the growing heap: at
    10,000 nodes they were a quarter of a load's CPU, for nothing (what a load builds is
    acyclic; reference counting still frees what it drops). Nested use keeps it off until the
    outermost ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            _to_oldest_generation()
            gc.enable()


def _to_oldest_generation() -> None:
    """Move every object the collector tracks into its oldest generation, unexamined.

    What a bulk step built is still counted as young: the first collection after it walked all of
    it (0.5 s of a 10,016-node load, for 670,000 objects that all live on). Objects that live on
    end in the oldest generation anyway; there they are examined by the full collections only, which
    still free any cycle among them. ``gc.freeze`` puts every tracked object in the permanent
    generation and ``gc.unfreeze`` puts that back into the oldest one: two list splices, no walk.
    """
    gc.freeze()
    gc.unfreeze()


def _policy(layered: dict[str, tuple[dict, dict, dict]]) -> RolloutPolicy:
    """The run's :class:`~tuning.model.policy.RolloutPolicy` from ``fabtune_rollout``, which only the
    ``all`` group may set (``group_vars/all.yml`` or the ``all:`` vars of hosts.yaml): one policy per
    run. Defaults when no host sees the key.

    Raises:
        InputError: the key set on another group or a host (names the file and where), or a value
            the policy refuses (unknown key, with the allowed ones; a value outside its range).
    """
    found: tuple[object, str] | None = None
    for host in sorted(layered):
        vars_, sources, scopes = layered[host]
        if POLICY_KEY not in vars_:
            continue
        if scopes[POLICY_KEY] != "all":
            where = f"group {scopes[POLICY_KEY]}" if scopes[POLICY_KEY] else f"host {host}"
            raise InputError(sources[POLICY_KEY], POLICY_KEY, f"set for {where}; a run has one rollout policy: "
                             "set it for the all group (group_vars/all.yml or the all: vars of hosts.yaml)")
        found = found or (vars_[POLICY_KEY], sources[POLICY_KEY])
    if found is None:
        return RolloutPolicy()
    return _validate_policy(*found)


def _validate_policy(value: object, src: str) -> RolloutPolicy:
    """``fabtune_rollout``'s value as a RolloutPolicy. Raises InputError naming ``src`` and the key."""
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise InputError(src, POLICY_KEY, f"{value!r:.60} is not a mapping of policy keys; allowed keys: "
                         f"{', '.join(RolloutPolicy.model_fields)}")
    try:
        return RolloutPolicy.model_validate(value)
    except ValidationError as e:
        key, problem = explain_policy(e)
        raise InputError(src, f"{POLICY_KEY}.{key}", problem) from None


def resolved_vars(path: str | Path) -> dict[str, dict]:
    """Each host's variables as Ansible resolves them (``ansible-inventory --list``'s
    ``_meta.hostvars``), before fabtune validates them; :func:`load` builds devices from the same.

    Raises:
        InputError: the files cannot be read as an Ansible inventory.
    """
    hosts_file = _hosts_file(path)
    tree = parse_tree(hosts_file)
    cache = VarsCache(hosts_file.parent)
    return {host: host_vars(tree, cache, host)[0] for host in tree.inline}
