"""``fabtune topology``: a node's GPU <-> NIC <-> NUMA <-> CPU map and its per-GPU CPU plan.

Registered in :mod:`tuning.cli` as ``app.command("topology")(topology)``. Reads only (one SSH round
trip, or NVML on this host with ``--local``); changes nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import typer

from tuning.cli_args import checked_path, inventory_arg, load_inventory, quoted
from tuning.errors import InputError
from tuning.model.node_tuning import CpuSpec
from tuning.node import cpuplan
from tuning.node.base import Unfit
from tuning.node.topology import Topology


def _load(inventory: Path, host: str):
    dev = load_inventory(inventory).devices.get(host)
    if dev is None or not dev.kind.endpoint:
        raise InputError("HOST", "host", f"{host!r} is not a node of {inventory}")
    return dev


def _discover(inventory: Path, host: Optional[str], local: bool, root: str):
    """(topology, spec-like with ``cpu``, the file that set ``cpu``) for the command's options."""
    if local:
        from tuning import nvml

        dev = _load(inventory, host) if host else None
        rails = {n.rdma_device: n.rail for n in dev.spec.nics} if dev else None
        topo = nvml.discover(root, rails)
        return topo, (dev.spec if dev else SimpleNamespace(cpu=CpuSpec())), dev
    if not host:
        raise InputError("HOST", "host", "missing; name a node of the inventory (or use --local on the node)")
    from tuning.node.topology import discover
    from tuning.transport.ssh import SshHost

    dev = _load(inventory, host)
    ssh = SshHost(dev.name, dev.connection)
    try:
        return discover(ssh, dev), dev.spec, dev
    finally:
        ssh.close()


def _tables(host: str, topo: Topology, doc: dict):
    from rich.table import Table

    links = {link.gpu: link for link in topo.links}
    t = Table(title=f"{host}: GPU <-> NIC <-> NUMA (links: {topo.sources.get('links', '?')})", title_justify="left")
    for col in ("GPU", "BDF", "NUMA", "CPUs", "nearest NIC", "link", "rail NIC", "rail link", "flag"):
        t.add_column(col)
    for g in sorted(topo.gpus, key=lambda g: g.index):
        lk = links.get(g.index)
        t.add_row(f"GPU{g.index}", g.bdf or "-", str(g.numa_node), g.cpus or "-", (lk and lk.nearest_nic) or "-",
                  (lk and lk.link) or "?", (lk and lk.rail_nic) or "-", (lk and lk.rail_link) or "?",
                  f"[red]{lk.flag}[/red]" if lk and lk.flag else "")
    p = Table(title="CPU plan (per GPU: whole cores; gres Cores = Slurm logical core indices)", title_justify="left")
    for col in ("GPU", "NUMA", "CPUs", "gres Cores"):
        p.add_column(col)
    for g in doc["gpus"]:
        p.add_row(f"GPU{g['index']}", str(g["numa_node"]), g["cpus"] or "-", g["slurm_cores"] or "-")
    n = Table(title="per NUMA node", title_justify="left")
    for col in ("NUMA", "CPUs", "reserved", "NIC IRQ CPUs", "spare (OS)"):
        n.add_column(col)
    for row in doc["numa_nodes"]:
        n.add_row(str(row["node"]), row["cpus"], row["reserved"] or "-", row["irq_cpus"] or "-", row["spare"] or "-")
    return t, p, n


def _nccl(inventory: Path, host: Optional[str], local: bool, root: str, as_json: bool) -> None:
    """``--nccl-env``: the node's GID indexes read (over SSH, or this host's sysfs under ``root``
    with ``--local``), then :func:`tuning.verify.nccl_env.nccl_env`."""
    from tuning.verify.ends import node_gid_indexes
    from tuning.verify.nccl_env import as_shell, nccl_env

    if not host:
        raise InputError("HOST", "host", "missing; --nccl-env needs the node's inventory entry (its NICs and nic_qos)")
    dev = _load(inventory, host)
    if local:
        from tuning.transport.local import LocalHost
        node = LocalHost(dev.name, root)
    else:
        from tuning.transport.ssh import SshHost
        node = SshHost(dev.name, dev.connection)
    try:
        env, notes = nccl_env(dev, node_gid_indexes(node, dev.spec.nics))
    finally:
        node.close()
    print(json.dumps({"host": host, "env": env, "notes": notes}, indent=2) + "\n" if as_json else as_shell(env, notes),
          end="")


def _gpu_type_arg(value: object) -> str:
    """``--gpu-type``: a Slurm GRES type: 1..64 ASCII letters, digits, '_' and '-', a letter or digit
    first, at least one letter (``h100``, ``a100_80gb``).

    Raises:
        InputError: naming ``--gpu-type`` and the allowed form.
    """
    v = str(value)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", v, re.ASCII) or not re.search(r"[A-Za-z]", v):
        raise InputError("--gpu-type", quoted(value), "a Slurm GRES type: 1..64 letters, digits, '_' or '-', a "
                         "letter or digit first, at least one letter (e.g. h100)")
    return v


def _root_arg(value: object) -> str:
    """``--root``: an existing directory (:func:`tuning.cli_args.checked_path`). Raises InputError naming it."""
    path = checked_path("--root", "the sysfs/procfs root directory", is_dir=True)(value)
    if not path.is_dir():
        raise InputError("--root", quoted(value), "no such directory; give the sysfs/procfs root directory")
    return str(value)


GPU_TYPE = typer.Option(None, "--gpu-type", parser=_gpu_type_arg,
                        help="gres Type= (default: from the GPU model, NVIDIA H100 80GB HBM3 -> h100).")
ROOT = typer.Option("/", "--root", parser=_root_arg, help="With --local: the sysfs/procfs root (an existing directory).")
LOCAL = typer.Option(False, "--local", help="Discover THIS host with NVML and sysfs instead of over SSH (HOST then "
                     "only supplies the profile).")
NCCL_ENV = typer.Option(False, "--nccl-env", help="Print only the NCCL environment a job should use on HOST "
                        "(NCCL_IB_HCA, NCCL_IB_GID_INDEX read from the node, NCCL_IB_TC: the tuned class), as "
                        "export lines (--json: JSON).")


def topology(host: Optional[str] = typer.Argument(None, help="A node of the inventory (e.g. node01)."),
             inventory: Path = typer.Option(Path("inventory/lab"), "-i", "--inventory", parser=inventory_arg,
                                            help="Ansible-format inventory directory."),
             as_json: bool = typer.Option(False, "--json", help="Print map, CPU plan and gres lines as JSON."),
             gres: bool = typer.Option(False, "--gres", help="Print only the Slurm gres.conf lines."),
             gpu_type: Optional[str] = GPU_TYPE,
             local: bool = LOCAL, root: str = ROOT, nccl: bool = NCCL_ENV) -> None:
    """Print a node's GPU <-> NIC <-> NUMA <-> CPU map (nearest NIC per GPU, its link class
    PIX/PXB/PHB/NODE/SYS from `nvidia-smi topo -m`, a flag for a rail whose NIC sits behind another
    PCIe switch or NUMA node than its GPU) and the per-GPU CPU plan of the profile's `cpu:` section.
    Reads only; exit 2 when the profile's CPU plan leaves a GPU without a core.

    Example: fabtune topology -i inventory/lab node01 --gres > /etc/slurm/gres.conf
    Example: fabtune topology -i inventory/lab node01 --nccl-env > nccl.env  (then: source nccl.env)
    """
    if nccl:
        return _nccl(inventory, host, local, root, as_json)
    topo, spec, dev = _discover(inventory, host, local, root)
    try:
        plan = cpuplan.plan(spec, topo)
    except Unfit as e:
        where = dev.sources.get("cpu", str(inventory)) if dev else "--local"
        raise InputError(where, e.key, f"{e.problem} (host {host or 'local'})") from None
    lines = cpuplan.gres_lines(plan, topo, gpu_type)
    doc = cpuplan.json_map(plan, topo)
    if gres:
        print("\n".join(lines))
        return
    if as_json:
        print(json.dumps({"host": host or "local", "topology": topo.as_dict(), "cpu_plan": doc, "gres": lines},
                         indent=2))
        return
    from tuning.report import console

    out = console()
    for table in _tables(host or "local", topo, doc):
        out.print(table)
    flagged = topo.flagged()
    out.print(f"{len(flagged)} rail(s) flagged" + (": " + "; ".join(f.flag or "" for f in flagged) if flagged else ""),
              markup=False, highlight=False)
