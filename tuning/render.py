"""Render desired state into device artefacts with Jinja2 (StrictUndefined).

Switches: the OS driver's template (:attr:`tuning.switch.base.SwitchDriver.template`; NVUE:
``tuning/templates/nvue/switch.j2`` -> ``nv set`` lines, Cumulus Linux 5.x).
Nodes: ``tuning/templates/node/*.j2`` -> files laid on the host so settings survive a reboot:
``/etc/sysctl.d/90-fabtune.conf``, ``/usr/local/sbin/fabtune-nic-setup`` and the systemd unit
``/etc/systemd/system/fabtune-nic.service`` that runs it at boot (MTU, NIC QoS, ECN, IRQ affinity).
The node files are filled from the computed plan values and the very commands apply runs
(:func:`tuning.node.files.boot_settings`); templates only lay them out, they compute nothing.
Rendering is pure: the same inventory gives the same bytes.
"""

from __future__ import annotations

from tuning.inventory import Device
from tuning.switch import driver_class
from tuning.node.files import NODE_FILES, node_files_from_plan  # noqa: F401 (re-exported)
from tuning.templating import render_template, templates_dir  # noqa: F401 (re-exported)


def switch_context(dev: Device) -> dict:
    """The ``switch`` context of every switch OS template (``tuning/templates/nvue/switch.j2``):
    name, role (``leaf`` / ``spine``), ports (name, mtu, description), roce (the model's fields)."""
    spec = dev.spec
    role = "spine" if "spines" in dev.groups else "leaf"
    ports = []
    for name in spec.port_names():
        ports.append({"name": name, "mtu": spec.port_mtu_overrides.get(name, spec.port_mtu), "description": ""})
    roce = spec.roce.model_dump() if spec.roce else None
    return {"name": dev.name, "role": role, "ports": ports, "roce": roce}


def render_switch(dev: Device) -> str:
    """One switch's configuration in its OS's language (its driver's template: NVUE ``nv set`` lines)."""
    return driver_class(dev.spec.platform).render_config(switch_context(dev))


def node_files(dev: Device) -> dict[str, str]:
    """Device path -> content of every boot-persistence file of one node, without contacting it.

    Settings that need discovery (IRQ numbers, the ECN files of the NIC's driver) are left out:
    the files a rollout lays are computed from the node's own facts.
    """
    from tuning.node import offline_settings
    from tuning.node.base import NodeFacts
    from tuning.node.files import boot_settings

    spec = dev.spec
    raw = {f"sysctl/{k}": "?" for k in spec.sysctl} | {f"mtu/{n.netdev}": "?" for n in spec.nics}
    facts = NodeFacts(raw=raw)
    settings, _ = offline_settings(spec, facts)  # domains that need the node's facts are left out
    commands, sysctls = boot_settings([d for d, _ in settings], spec, facts, [want for _, want in settings])
    return node_files_from_plan([OFFLINE_NOTE, *commands], sysctls)


#: the first line of an offline-rendered setup script: what it cannot hold without the node
OFFLINE_NOTE = ("# rendered offline: IRQ affinity (IRQ numbers) and ECN/DCQCN (the NIC driver's files) "
                "need the node's facts; `fabtune apply` lays the complete file")


def render_node(dev: Device) -> str:
    """All of a node's files as one document (``### <path>`` headers), the per-device render output."""
    parts = [f"### {path}\n{content}" for path, content in node_files(dev).items()]
    return "".join(parts)

