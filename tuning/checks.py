"""Checks across an inventory that no single host's model can make: every vars file belongs
to a group or host, every NIC is cabled to a port its switch lists, no port carries two NICs,
and connection values are usable. Each raises :class:`tuning.errors.InputError` naming the
file and key, before any device is contacted.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tuning.errors import InputError
from tuning.model.settings import expand_ports

if TYPE_CHECKING:
    from tuning.inventory import Device


def check_vars_files(inv: Path, groups: set[str], hosts: set[str]) -> None:
    """A ``group_vars``/``host_vars`` file whose name matches no group/host is a typo that would
    silently drop its settings (``gpu-nodes.yml`` for ``gpu_nodes``): refuse it."""
    for folder, names, what in (("group_vars", groups, "group"), ("host_vars", hosts, "host")):
        for path in sorted((inv / folder).glob("*")):
            if path.suffix not in (".yml", ".yaml") or path.stem in names:
                continue
            raise InputError(str(path), "-", f"no {what} called {path.stem!r} in hosts.yaml; "
                                              f"{what}s: {', '.join(sorted(names))}")


def check_cabling(devices: dict[str, Device], hosts_file: Path) -> None:
    """Every NIC names a switch of the inventory and a port that switch lists, once."""
    seen: dict[tuple[str, str], str] = {}
    switches = ", ".join(d.name for d in devices.values() if d.role == "switch")
    for dev in devices.values():
        if dev.role != "node":
            continue
        src = dev.sources.get("nics", str(hosts_file))
        for i, nic in enumerate(dev.spec.nics):
            sw = devices.get(nic.switch)
            if sw is None or sw.role != "switch":
                raise InputError(src, f"nics.{i}.switch", f"{nic.switch!r} is not a switch of this inventory; "
                                                          f"allowed: {switches}")
            if nic.switch_port not in expand_ports(sw.spec.ports):
                raise InputError(src, f"nics.{i}.switch_port", f"{nic.switch}:{nic.switch_port} is not in "
                                 f"{nic.switch}'s ports ({', '.join(sw.spec.ports)})")
            other = seen.setdefault((nic.switch, nic.switch_port), f"{dev.name}:{nic.netdev}")
            if other != f"{dev.name}:{nic.netdev}":
                raise InputError(src, f"nics.{i}.switch_port", f"{nic.switch}:{nic.switch_port} is already "
                                 f"cabled to {other}; one NIC per port")


def check_port(vars_: dict, sources: dict, host: str) -> int:
    """``ansible_port`` as an int in 1..65535 (default 22)."""
    raw = vars_.get("ansible_port", 22)
    try:
        port = int(raw)
    except (TypeError, ValueError):
        port = -1
    if not 1 <= port <= 65535:
        raise InputError(sources.get("ansible_port", "inventory"), "ansible_port",
                         f"{raw!r} is not a TCP port; allowed: 1..65535 (host {host})")
    return port
