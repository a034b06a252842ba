"""Render desired state into device artefacts with Jinja2 (StrictUndefined).

Switches: ``tuning/templates/nvue/switch.j2`` -> ``nv set`` lines (Cumulus Linux 5.x NVUE).
Nodes: ``tuning/templates/node/*.j2`` -> files laid on the host so settings survive a reboot:
``/etc/sysctl.d/90-fabtune.conf``, ``/usr/local/sbin/fabtune-nic-setup`` and the systemd unit
``/etc/systemd/system/fabtune-nic.service`` that runs it at boot (MTU, NIC QoS, ECN, IRQ affinity).
The node files are filled from the computed plan values and the very commands apply runs
(:func:`tuning.node.files.boot_settings`); templates only lay them out, they compute nothing.
Rendering is pure: the same inventory gives the same bytes.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import jinja2

from tuning.inventory import Device, Inventory
from tuning.model.settings import expand_ports

#: device path -> template of the files laid on every node
NODE_FILES = {
    "/etc/sysctl.d/90-fabtune.conf": "node/sysctl.conf.j2",
    "/usr/local/sbin/fabtune-nic-setup": "node/fabtune-nic-setup.sh.j2",
    "/etc/systemd/system/fabtune-nic.service": "node/fabtune-nic.service.j2",
}


def templates_dir() -> Path:
    """The package's ``tuning/templates/`` folder (``FABTUNE_TEMPLATES`` overrides); inside the
    package so that an installed wheel renders too."""
    env = os.environ.get("FABTUNE_TEMPLATES")
    return Path(env) if env else Path(__file__).resolve().parent / "templates"


@lru_cache(maxsize=4)
def _env(root: str) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(root), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def render_template(template: str, **context: object) -> str:
    """Render one template from :func:`templates_dir`."""
    return _env(str(templates_dir())).get_template(template).render(**context)


def switch_context(dev: Device) -> dict:
    """The ``switch`` context of ``tuning/templates/nvue/switch.j2``: name, role, ports (name, mtu, description), roce."""
    spec = dev.spec
    role = "spine" if "spines" in dev.groups else "leaf"
    ports = []
    for name in expand_ports(spec.ports):
        ports.append({"name": name, "mtu": spec.port_mtu_overrides.get(name, spec.port_mtu), "description": ""})
    roce = spec.roce.model_dump() if spec.roce else None
    return {"name": dev.name, "role": role, "ports": ports, "roce": roce}


def render_switch(dev: Device) -> str:
    """NVUE ``nv set`` lines for one switch."""
    return render_template("nvue/switch.j2", switch=switch_context(dev))


def node_files_from_plan(commands: list[str], sysctls: dict[str, str]) -> dict[str, str]:
    """Device path -> content of every boot-persistence file, from the plan's values.

    Args:
        commands: the setup script's commands (the apply commands of the MTU, NIC QoS and IRQ
            values, addressing files relative to ``/``).
        sysctls: kernel parameter -> value for the sysctl.d drop-in.

    Raises:
        ValueError: a command or value holding a new line (it would add a line to a file).
    """
    for text in [*commands, *sysctls, *sysctls.values()]:
        if "\n" in text or "\r" in text:
            raise ValueError(f"{text!r}: a new line cannot go into a node file")
    ctx = {"commands": commands, "sysctls": sysctls}
    return {path: render_template(tpl, **ctx) for path, tpl in NODE_FILES.items()}


def node_files(dev: Device) -> dict[str, str]:
    """Device path -> content of every boot-persistence file of one node, without contacting it.

    Settings that need discovery (IRQ numbers, the ECN files of the NIC's driver) are left out:
    the files a rollout lays are computed from the node's own facts.
    """
    from tuning.node import offline_desired
    from tuning.node.base import NodeFacts
    from tuning.node.files import FilesDomain, boot_settings

    spec = dev.spec
    raw = {f"sysctl/{k}": "?" for k in spec.sysctl} | {f"mtu/{n.netdev}": "?" for n in spec.nics}
    facts = NodeFacts(raw=raw)
    wanted, _ = offline_desired(spec, facts)  # domains that need the node's facts are left out
    files = next(d for d, _ in wanted if isinstance(d, FilesDomain))
    commands, sysctls = boot_settings(files.settings, spec, facts)
    return node_files_from_plan([OFFLINE_NOTE, *commands], sysctls)


#: the first line of an offline-rendered setup script: what it cannot hold without the node
OFFLINE_NOTE = ("# rendered offline: IRQ affinity (IRQ numbers) and ECN/DCQCN (the NIC driver's files) "
                "need the node's facts; `fabtune apply` lays the complete file")


def render_node(dev: Device) -> str:
    """All of a node's files as one document (``### <path>`` headers), the per-device render output."""
    parts = [f"### {path}\n{content}" for path, content in node_files(dev).items()]
    return "".join(parts)


def render_inventory(inv: Inventory, out_dir: Path) -> list[Path]:
    """Write one file per device: ``<switch>.nvue`` (nv set lines), ``<node>.files`` (node files).

    Returns:
        The written paths, in inventory order.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for dev in inv.devices.values():
        if dev.role == "switch":
            path, text = out_dir / f"{dev.name}.nvue", render_switch(dev)
        else:
            path, text = out_dir / f"{dev.name}.files", render_node(dev)
        path.write_text(text)
        written.append(path)
    return written
