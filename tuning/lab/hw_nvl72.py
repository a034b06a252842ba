"""The lab's second node shape: a GB200 NVL72 compute tray, and racks of them.

What a tray is (NVIDIA's published reference):

- NVIDIA GB200 NVL Multi-Node Tuning Guide, "Understanding Your Grace-Blackwell Systems"
  (docs.nvidia.com/multi-node-nvlink-systems/multi-node-tuning-guide/system.html): the 72x1
  configuration is one rack of 18 1RU compute trays with 4 GPUs each (72 GPUs) and 9 NVLink
  Switch trays, so the 72 GPUs of a rack share one NVLink domain; the tray's BlueField-3 NICs
  carry the north-south and in-band management networks, not the GPU fabric.
- NVIDIA GB300 NVL72 Enterprise Reference Architecture, "System Hardware & Components"
  (docs.nvidia.com/enterprise-reference-architectures/nvl72-ai-factory/latest/components.html):
  4 GPUs and 2 Grace CPUs per compute tray, and for the compute (east-west) network 2 mezzanine
  boards of 2 ConnectX chips, 4 scale-out NICs per tray (ConnectX-7 on GB200, ConnectX-8 on
  GB300), one per GPU: rails 0-3.
- NVIDIA Grace Performance Tuning Guide (docs.nvidia.com/grace-perf-tuning-guide): a Grace CPU
  is 72 Arm Neoverse V2 cores, one thread each (no SMT); each Grace with its LPDDR5X is one NUMA
  node, so a tray has CPU NUMA nodes 0 (CPUs 0-71) and 1 (72-143). A GB200 superchip joins one
  Grace to two Blackwell GPUs over NVLink-C2C: GPUs 0-1 and the NICs beside them belong to
  Grace 0, GPUs 2-3 and theirs to Grace 1.

Modelled here (:func:`tray_fabric`): nodes of 4 GPUs, 4 NICs (rail r = NIC r = GPU r; NICs 0-1 on
NUMA node 0, 2-3 on 1), CPU lists ``0-71`` / ``72-143`` with one thread per core, and each GPU
not behind its NIC's PCIe switch (it hangs off its Grace by NVLink-C2C; the lab's ``nvidia-smi
topo -m`` prints NODE between a GPU and the NICs of its own Grace: a GB200 tray has no PIX/PXB
between a GPU and a ConnectX, Mellanox/ngc_multinode_perf PR 129, which accepts NODE there for
that reason), so IRQ plans spread a NIC's completion IRQs over its own Grace's 72 cores
and the verification pairs 4 NICs per tray (``per_node`` 4). :func:`write_tray_inventory` writes
the inventory of such a lab (``fabtune lab init DIR --shape nvl72``); ``fabtune lab up -i DIR``
sizes it from there (4 NICs per node: :func:`tuning.lab.fabric.fabric_for_inventory`).
The lab keeps the DGX lab's switches (leaf01: even rails, leaf02: odd rails, spine01), node
names, ports, PCI addresses and netdev names (fabtune reads a node's addresses from sysfs,
never assumes them), so every lab tool serves a tray as it serves a DGX-class node.

Not modelled (the lab stays no more lenient for it, only less specific): the GPUs' HBM as
CPU-less NUMA nodes, Grace's cpufreq/cpuidle drivers (the lab's CPUs keep intel_pstate and
intel_idle), the GPU's PCI device id (the H100's), the LPDDR5X sizes, the NVLink domain
itself (a rack is an inventory group, ``nvl72_rack1``: perftest pairs measure the NICs whatever
the NVLink domain).
"""

from __future__ import annotations

from tuning.lab.fabric import DEFAULT_BASE_PORT, NIC_BDFS, Fabric, Nic, Node, netdev_for, switch_layer, with_switch_os

#: GPUs and scale-out NICs per compute tray, trays per NVL72 rack (one NVLink domain of 72 GPUs)
TRAY_GPUS, TRAY_NICS, TRAYS_PER_RACK = 4, 4, 18
#: cores of one Grace CPU (72 Arm Neoverse V2, no SMT); a tray has two
GRACE_CORES = 72
#: CPU lists of the tray's two NUMA nodes (one per Grace)
TRAY_NUMA_CPULISTS = [f"0-{GRACE_CORES - 1}", f"{GRACE_CORES}-{2 * GRACE_CORES - 1}"]
#: the Grace (NUMA node) of NIC / GPU r: two per Grace
TRAY_NUMA_OF_RAIL = (0, 0, 1, 1)
#: the GPU's name as the driver and nvidia-smi print it on a tray (nccl-tests' rank lines on GB200
#: trays print ``NVIDIA GB200``)
TRAY_GPU_MODEL = "NVIDIA GB200"


def tray(k: int, port: int, n_nodes: int) -> Node:
    """Compute tray ``node<k>`` (1-based) of an ``n_nodes`` lab: NIC r is ``mlx5_<r>`` on rail r,
    IPv4 ``10.<r>.0.<k>/24``, on leaf01 (even r) or leaf02 (odd r) port
    ``swp<(r // 2) n_nodes + k>`` (the DGX lab's cabling for rails 0-3)."""
    nics = [Nic(rdma_device=f"mlx5_{r}", netdev=netdev_for(NIC_BDFS[r]), bdf=NIC_BDFS[r], rail=r,
                numa_node=TRAY_NUMA_OF_RAIL[r], ipv4=f"10.{r}.0.{k}/24", switch="leaf01" if r % 2 == 0 else "leaf02",
                switch_port=f"swp{(r // 2) * n_nodes + k}", first_irq=100 + r * 20) for r in range(TRAY_NICS)]
    return Node(name=f"node{k:02d}", port=port, driver="ofed", nics=nics, numa_cpulists=list(TRAY_NUMA_CPULISTS),
                gpus=TRAY_GPUS, gpu_misplaced={str(r): "NODE" for r in range(TRAY_GPUS)}, threads_per_core=1,
                gpu_model=TRAY_GPU_MODEL)


def tray_fabric(base_port: int = DEFAULT_BASE_PORT, n_nodes: int = 4,
                switch_os: dict[str, str] | None = None) -> Fabric:
    """A lab of ``n_nodes`` GB200 NVL72 compute trays (:func:`tray`; up to 18: one rack) on the DGX
    lab's switches: leaf01/leaf02 with ports ``swp1..swp{2 n_nodes}`` and the uplink
    :func:`tuning.lab.fabric.uplink_port` to spine01 ``swp1``/``swp2``. Ports as
    :func:`tuning.lab.fabric.default_fabric`: tray k on ``base_port + k``, the switches on
    ``base_port + 101..103``.

    Raises:
        InputError: ``n_nodes`` outside 1..18 (:data:`TRAYS_PER_RACK`): a lab inventory of more
            4-NIC nodes (``fabtune lab up -i``) is refused naming the count.
    """
    if not 1 <= n_nodes <= TRAYS_PER_RACK:
        from tuning.errors import InputError

        raise InputError("hosts.yaml", "gpu_nodes", f"{n_nodes} nodes of 4 NICs: a lab rack of GB200 NVL72 compute "
                         f"trays holds 1..{TRAYS_PER_RACK}")
    nodes = [tray(k, base_port + k, n_nodes) for k in range(1, n_nodes + 1)]
    switches, links = switch_layer(nodes, base_port, n_nodes)
    return with_switch_os(Fabric(nodes=nodes, switches=switches, links=links), switch_os or {})


def write_tray_inventory(dest, n_trays: int, base_port: int = DEFAULT_BASE_PORT, switch_os: dict[str, str] | None = None):
    """Write the inventory of an ``n_trays`` tray lab into ``dest`` as
    :func:`tuning.lab.scale.write_inventory` writes a DGX-class one (the same group_vars, SSH
    settings and switch files; host_vars with 4 NICs per node). Returns ``dest``.

    Raises:
        InputError: ``n_trays`` outside 1..18, a base port whose ports reach the ephemeral range
            or fall below 1024, a switch or OS the lab lacks (``switch_os``), or ``dest`` not empty.
    """
    from tuning.errors import InputError
    from tuning.lab import scale

    if not isinstance(n_trays, int) or not 1 <= n_trays <= TRAYS_PER_RACK:
        raise InputError("--nodes", str(n_trays), f"an NVL72 lab rack has 1..{TRAYS_PER_RACK} compute trays")
    dest = scale.write_inventory(dest, 1, base_port, switch_os)  # checks ports, OSes and folder; copies group_vars
    for old in (dest / "host_vars").glob("node*.yml"):
        old.unlink()
    fabric = tray_fabric(base_port=base_port, n_nodes=n_trays, switch_os=switch_os)
    head = (f"# A lab rack of {n_trays} GB200 NVL72 compute trays (tuning/lab/hw_nvl72.py tray_fabric): 4 GPUs, "
            f"4 NICs, 2 Grace CPUs each;\n# 2 rail leaves, 1 spine, all SSH endpoints on 127.0.0.1. "
            f"Start it with `fabtune lab up -i DIR`.\n")
    (dest / "hosts.yaml").write_text(head + scale._hosts_yaml(fabric).split("\n", 2)[2])
    for node in fabric.nodes:
        (dest / "host_vars" / f"{node.name}.yml").write_text(scale._node_vars(node))
    for sw in fabric.switches:
        (dest / "host_vars" / f"{sw.name}.yml").write_text(scale._switch_vars(sw, fabric))
    return dest
