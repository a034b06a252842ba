"""One loader for the Ansible-format YAML inventory, used by both front ends.

Layout (as Ansible reads it): ``INV/hosts.yaml`` (``all`` -> ``children`` -> groups -> ``hosts``),
``INV/group_vars/<group>.yml`` and ``INV/host_vars/<host>.yml``. Variables layer as in Ansible:
``all`` < parent group < child group < host vars < inline host vars.

Every host must belong (directly or through a child group) to exactly one role group:
``gpu_nodes`` (a :class:`~tuning.model.NodeSpec`) or ``switches`` (a :class:`~tuning.model.SwitchSpec`).
Keys other than the model's, the ``ansible_*`` connection keys and the ``fabtune_*`` keys below are
refused, naming the file that holds them. Paths in ``fabtune_*_file`` keys are relative to INV.

Raises :class:`tuning.errors.InputError` (exit 2) with file, key and allowed values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tuning.checks import check_cabling, check_port, check_vars_files
from tuning.errors import InputError
from tuning.model import NodeSpec, SwitchSpec
from tuning.model.messages import validation_error

ROLE_GROUPS = {"gpu_nodes": NodeSpec, "switches": SwitchSpec}
CONNECTION_KEYS = {
    "ansible_host", "ansible_port", "ansible_user", "ansible_connection",
    "ansible_python_interpreter", "ansible_network_os",
}
FABTUNE_KEYS = {"fabtune_sysroot", "fabtune_ssh_key_file", "fabtune_known_hosts_file"}
#: fabtune_* keys that mean something for each role (a switch has no sysroot)
ROLE_FABTUNE_KEYS = {"node": FABTUNE_KEYS, "switch": FABTUNE_KEYS - {"fabtune_sysroot"}}


@dataclass(frozen=True)
class Connection:
    """How to reach a device. ``sysroot`` prefixes every file path on nodes (``/`` on a real host)."""

    hostname: str
    port: int
    username: str
    key_file: str | None
    known_hosts: str | None
    sysroot: str = "/"


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


@dataclass
class Inventory:
    """All devices of an inventory, nodes then switches, in file order."""

    path: Path
    devices: dict[str, Device]

    @property
    def nodes(self) -> list[Device]:
        """GPU nodes."""
        return [d for d in self.devices.values() if d.role == "node"]

    @property
    def switches(self) -> list[Device]:
        """Switches."""
        return [d for d in self.devices.values() if d.role == "switch"]

    def select(self, limit: list[str] | None) -> list[Device]:
        """Devices named in ``limit`` (names or group names), all if None.

        Raises:
            InputError: a name matches no host or group.
        """
        if not limit:
            return list(self.devices.values())
        out = []
        for name in limit:
            hit = [d for d in self.devices.values() if d.name == name or name in d.groups]
            if not hit:
                raise InputError("--limit", name, f"no host or group called {name!r}; hosts: {', '.join(self.devices)}")
            out += [d for d in hit if d not in out]
        return out


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "yaml"
        raise InputError(str(path), where, f"not valid YAML: {getattr(e, 'problem', e)}") from None
    except OSError as e:
        raise InputError(str(path), "-", f"cannot read: {e.strerror}") from None


def _walk_groups(path: Path, name: str, node: dict, parents: list[str], out: dict[str, dict]) -> None:
    """Collect host -> {groups: [...], inline: {...}} from the ``all`` tree (depth first)."""
    if not isinstance(node, dict):
        raise InputError(str(path), name, "a group must be a mapping with hosts/children/vars")
    for key in node:
        if key not in {"hosts", "children", "vars"}:
            raise InputError(str(path), f"{name}.{key}", "unknown key; allowed: hosts, children, vars")
    chain = parents + [name]
    for host, inline in (node.get("hosts") or {}).items():
        entry = out.setdefault(host, {"groups": [], "inline": {}})
        entry["groups"] += [g for g in chain if g not in entry["groups"]]
        entry["inline"].update(inline or {})
    for child, sub in (node.get("children") or {}).items():
        _walk_groups(path, child, sub or {}, chain, out)


def _vars_file(inv: Path, folder: str, name: str) -> tuple[dict, str | None]:
    """``INV/<folder>/<name>.yml`` (or ``.yaml``) and its path; ``({}, None)`` if absent."""
    for ext in (".yml", ".yaml"):
        p = inv / folder / f"{name}{ext}"
        if p.exists():
            return _read_yaml(p), str(p)
    return {}, None


def _layer(inv: Path, hosts_file: Path, host: str, groups: list[str], inline: dict) -> tuple[dict, dict]:
    """Merge vars in Ansible precedence; return (vars, key -> file that set it)."""
    merged: dict = {}
    sources: dict = {}
    layers = ([_vars_file(inv, "group_vars", g) for g in groups]
              + [_vars_file(inv, "host_vars", host), (inline, str(hosts_file))])
    for data, src in layers:
        if not isinstance(data, dict):
            raise InputError(str(src), "-", "must be a mapping of variables")
        for k, v in data.items():
            merged[k] = v
            sources[k] = src
    return merged, sources


def _role_of(hosts_file: Path, host: str, groups: list[str]) -> type[NodeSpec] | type[SwitchSpec]:
    roles = {g for g in groups if g in ROLE_GROUPS}
    if len(roles) != 1:
        have = ", ".join(g for g in groups if g != "all") or "no group"
        raise InputError(str(hosts_file), f"all.*.hosts.{host}",
                         f"host must be in exactly one of the groups {', '.join(ROLE_GROUPS)} (it is in {have})")
    return ROLE_GROUPS[roles.pop()]


def _check_keys(model: type, vars_: dict, sources: dict, host: str) -> None:
    role = model.model_fields["role"].default
    allowed = (set(model.model_fields) - {"role"}) | ROLE_FABTUNE_KEYS[role]
    for key in vars_:
        if key in CONNECTION_KEYS or key.startswith("__"):
            continue
        if key not in allowed:
            if key in FABTUNE_KEYS and sources[key].endswith(("all.yml", "all.yaml")):
                continue  # set for every host in group_vars/all; meaningless for this role, harmless
            raise InputError(sources[key], key, f"unknown key for {role} {host}; allowed: {', '.join(sorted(allowed))}")


def _connection(inv: Path, host: str, vars_: dict, sources: dict) -> Connection:
    def rel(key: str) -> str | None:
        v = vars_.get(key)
        return None if v is None else str((inv / v) if not Path(v).is_absolute() else Path(v))

    return Connection(
        hostname=str(vars_.get("ansible_host", host)),
        port=check_port(vars_, sources, host),
        username=str(vars_.get("ansible_user", "root")),
        key_file=rel("fabtune_ssh_key_file"),
        known_hosts=rel("fabtune_known_hosts_file"),
        sysroot=str(vars_.get("fabtune_sysroot", "/")),
    )


def load(path: str | Path) -> Inventory:
    """Load and validate an inventory directory (or its ``hosts.yaml``).

    Returns:
        Inventory with one validated :class:`Device` per host.

    Raises:
        InputError: missing file, bad YAML, unknown key, host without a role group, value out of range.
    """
    inv = Path(path)
    hosts_file = inv if inv.is_file() else next((inv / n for n in ("hosts.yaml", "hosts.yml") if (inv / n).exists()), inv / "hosts.yaml")
    inv = hosts_file.parent
    if not hosts_file.exists():
        raise InputError(str(hosts_file), "-", "inventory not found (expected hosts.yaml with an 'all' group)")
    data = _read_yaml(hosts_file)
    if not isinstance(data, dict) or set(data) != {"all"}:
        raise InputError(str(hosts_file), "-", "top level must be exactly one key: all")
    hosts: dict[str, dict] = {}
    _walk_groups(hosts_file, "all", data["all"] or {}, [], hosts)
    devices = {}
    for host, entry in hosts.items():
        model = _role_of(hosts_file, host, entry["groups"])
        vars_, sources = _layer(inv, hosts_file, host, entry["groups"], entry["inline"])
        _check_keys(model, vars_, sources, host)
        fields = {k: v for k, v in vars_.items() if k in model.model_fields}
        try:
            spec = model.model_validate(fields)
        except ValidationError as e:
            raise validation_error(e, model, sources, host) from None
        devices[host] = Device(host, entry["groups"], _connection(inv, host, vars_, sources), spec, sources)
    check_vars_files(inv, {g for e in hosts.values() for g in e["groups"]}, set(hosts))
    check_cabling(devices, hosts_file)
    return Inventory(inv, devices)
