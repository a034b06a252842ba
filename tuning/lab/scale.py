"""Lab inventories of any size: ``fabtune lab init DIR --nodes N`` (issue 10, burn-in at scale).

:func:`write_inventory` writes the Ansible-format inventory of ``default_fabric(base_port, n_nodes)``
(``tuning.lab.fabric``): ``hosts.yaml`` (every node and switch on ``127.0.0.1`` at the fabric's port),
``group_vars/`` copied from the repository's ``inventory/lab/`` (the profile and the SSH settings
are the same at every size) and one ``host_vars/<host>.yml`` per node (its 8 NICs and their leaf
ports) and switch (its ports, NVUE ranges). For 4 nodes on the default base port (22100) every file
is byte-identical to ``inventory/lab/`` (``tests/lab/test_scale.py`` checks it), so the 4-node
lab is the embedded one. ``fabtune lab up -i DIR`` then sizes the fabric from the inventory
(:func:`tuning.lab.fabric.fabric_for_inventory`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tuning.errors import InputError
from tuning.lab.fabric import DEFAULT_BASE_PORT, MAX_NODES, SWITCH_OSES, Fabric, Node, Switch, default_fabric, port_span, short_list

#: where ``group_vars`` come from: the repository's embedded lab inventory
LAB_INVENTORY = Path(__file__).resolve().parents[2] / "inventory" / "lab"


def _hosts_yaml(fabric: Fabric) -> str:
    """``hosts.yaml`` in the layout of ``inventory/lab/hosts.yaml`` (groups gpu_nodes, switches:
    leaves, spines)."""
    def host(name: str, port: int, indent: str) -> str:
        return f"{indent}{name}:\n{indent}  ansible_host: 127.0.0.1\n{indent}  ansible_port: {port}\n"

    leaves = [s for s in fabric.switches if s.role == "leaf"]
    spines = [s for s in fabric.switches if s.role == "spine"]
    text = (f"# The embedded lab (tuning/lab/fabric.py default_fabric): {len(fabric.nodes)} GPU nodes, "
            f"{len(leaves)} rail leaves, {len(spines)} spine{'s' if len(spines) > 1 else ''},\n"
            "# all SSH endpoints on 127.0.0.1. Start it with `fabtune lab up`.\n"
            "all:\n  children:\n    gpu_nodes:\n      hosts:\n")
    text += "".join(host(n.name, n.port, " " * 8) for n in fabric.nodes)
    text += "    switches:\n      children:\n        leaves:\n          hosts:\n"
    text += "".join(host(s.name, s.port, " " * 12) for s in leaves)
    text += "        spines:\n          hosts:\n"
    return text + "".join(host(s.name, s.port, " " * 12) for s in spines)


def _node_vars(node: Node) -> str:
    """``host_vars/<node>.yml``: the NIC list as ``inventory/lab`` writes it."""
    numa = {z: [c.rdma_device for c in node.nics if c.numa_node == z] for z in (0, 1)}
    head = (f"# {node.name}: {len(node.nics)} ConnectX-7 NICs, one per rail; NUMA 0 holds "
            f"{numa[0][0]}-{numa[0][-1].split('_')[-1]}, NUMA 1 {numa[1][0]}-{numa[1][-1].split('_')[-1]}.\n")
    rows = "".join(f"- netdev: {c.netdev}\n  rdma_device: {c.rdma_device}\n  rail: {c.rail}\n  ipv4: {c.ipv4}\n"
                   f"  switch: {c.switch}\n  switch_port: {c.switch_port}\n" for c in node.nics)
    return head + "nics:\n" + rows


def _ranges(ports: list[str]) -> list[str]:
    """``swp1..swp16, swp31`` -> ``["swp1-16", "swp31"]`` (the range form host_vars write; EOS
    ``Ethernet1..Ethernet16`` -> ``["Ethernet1-16"]``)."""
    prefix = ports[0].rstrip("0123456789")
    nums = sorted(int(p[len(prefix):]) for p in ports)
    out: list[str] = []
    start = prev = nums[0]
    for n in nums[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(f"{prefix}{start}" if start == prev else f"{prefix}{start}-{prev}")
        if n is not None:
            start = prev = n
    return out


#: the inventory ``platform`` of each lab switch OS (NVUE is group_vars/switches.yml's: no key written)
_PLATFORM = {"eos": "eos", "sonic": "sonic"}


def _switch_vars(sw: Switch, fabric: Fabric) -> str:
    """``host_vars/<switch>.yml``: its ``platform`` and ``port_mtu`` (the OS's largest, over the
    group's NVUE 9216) when not NVUE, ``ports`` as ranges, and a leaf's ``uplinks`` (leaf port ->
    ``SPINE:PORT``) where the fabric has more than one spine (one spine: every uplink reaches it, as
    the verification schedule assumes; the embedded lab's files stay as they are)."""
    from tuning.model.platforms import port_form

    head = f"# {sw.name} ({sw.role})\n"
    if sw.os in _PLATFORM:
        head += f"platform: {_PLATFORM[sw.os]}\nport_mtu: {port_form(_PLATFORM[sw.os]).mtu_max}\n"
    text = head + "ports:\n" + "".join(f"- {r}\n" for r in _ranges(sw.ports))
    ups = [l for l in fabric.links if l.a == sw.name]
    if len({s.name for s in fabric.switches if s.role == "spine"}) > 1 and ups:
        text += "uplinks:\n" + "".join(f"  {l.a_port}: {l.b}:{l.b_port}\n" for l in ups)
    return text


def write_inventory(dest: Path, n_nodes: int, base_port: int = DEFAULT_BASE_PORT,
                    switch_os: dict[str, str] | None = None) -> Path:
    """Write the inventory of an ``n_nodes`` lab into ``dest`` (created; must be empty or absent).

    Args:
        dest: the inventory folder to create.
        n_nodes: 1..256 GPU nodes (``node01..nodeNN``), each with 8 rails, in SUs of up to 32
            nodes with 2 rail leaves each; 1 spine for one SU, else 2 (:func:`default_fabric`).
        base_port: node k listens on ``base_port + k``, the switches from
            :func:`tuning.lab.fabric.switch_port_base` on (``base_port + 101..103`` for one SU).
        switch_os: switch name -> its OS where not NVUE (``{"leaf02": "eos"}``,
            :data:`tuning.lab.fabric.SWITCH_OSES`).

    Returns:
        ``dest``.

    Raises:
        InputError: ``n_nodes`` outside 1..256, a base port whose ports would reach the kernel's
            ephemeral range (32768) or fall below 1024, a switch or OS the lab lacks, or ``dest``
            not empty.
    """
    if not isinstance(n_nodes, int) or isinstance(n_nodes, bool) or not 1 <= n_nodes <= MAX_NODES:
        raise InputError("--nodes", str(n_nodes), f"a lab has 1..{MAX_NODES} nodes")
    span = port_span(n_nodes)
    if not isinstance(base_port, int) or not 1024 <= base_port <= 32767 - span:
        raise InputError("--base-port", str(base_port), f"an integer 1024..{32767 - span}: the lab's ports "
                         f"(base + 1..{span}) stay below the kernel's ephemeral range (32768)")
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InputError(str(dest), "DIR", "exists and is not an empty folder; a lab inventory is written "
                         "into a new folder")
    switch_os = switch_os or {}
    names = [sw.name for sw in default_fabric(base_port=base_port, n_nodes=n_nodes).switches]
    for name, os_ in switch_os.items():
        if name not in names or os_ not in SWITCH_OSES:
            raise InputError("--switch-os", f"{name}={os_}"[:60], f"SWITCH=OS with SWITCH one of {short_list(names)} and OS "
                             f"one of {', '.join(SWITCH_OSES)}")
    fabric = default_fabric(base_port=base_port, n_nodes=n_nodes, switch_os=switch_os)
    try:
        (dest / "host_vars").mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a parent that is a file, or that does not exist on a read-only tree
        raise InputError(str(dest), "DIR", f"cannot be created ({e.strerror}); give a new folder in a writable "
                         "directory") from None
    shutil.copytree(LAB_INVENTORY / "group_vars", dest / "group_vars")
    (dest / "hosts.yaml").write_text(_hosts_yaml(fabric))
    for node in fabric.nodes:
        (dest / "host_vars" / f"{node.name}.yml").write_text(_node_vars(node))
    for sw in fabric.switches:
        (dest / "host_vars" / f"{sw.name}.yml").write_text(_switch_vars(sw, fabric))
    return dest
