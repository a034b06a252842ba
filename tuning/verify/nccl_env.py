"""The NCCL environment a job should run with on a tuned node (``fabtune topology --nccl-env``).

A job's RDMA traffic rides the lossless class only when NCCL sets it: NCCL's own default traffic
class is 0 (DSCP 0, priority 0: lossy when PFC protects priority 3). Variables (NVIDIA NCCL
documentation, "Environment Variables"):

- ``NCCL_IB_HCA``: the node's RDMA devices in rail order, port 1, ``=`` first for an exact match
  (``=mlx5_0:1,mlx5_1:1``: a prefix match would also take ``mlx5_10``);
- ``NCCL_IB_GID_INDEX``: the RoCE v2 GID of each NIC's IPv4 address, read from the node's sysfs
  GID table (:mod:`tuning.verify.gid`), never assumed 3; one value for every NIC, so NICs that
  differ are named instead;
- ``NCCL_IB_TC``: the node's RoCE ToS (``nic_qos.roce_tos``, DSCP << 2 | ECT(0): 106 for DSCP 26),
  what ``cma_roce_tos`` sets for RDMA-CM and fabtune's own tests use (perftest ``--tclass``).

``NCCL_SOCKET_IFNAME`` (the bootstrap interface) is the site's management network, which the
inventory does not describe: it is named in a note, not guessed.
"""

from __future__ import annotations

import shlex

from tuning.errors import TuningError


def nccl_env(dev, gid_index: dict[str, int | TuningError]) -> tuple[dict[str, str], list[str]]:
    """The variables for node ``dev`` and the notes on what could not be set.

    Args:
        dev: the inventory Device of a node (its ``spec.nics`` and ``spec.nic_qos``).
        gid_index: RDMA device -> its RoCE v2 IPv4 GID index as read from the node, or the error
            that kept it from being read.

    Returns:
        ``({"NCCL_IB_HCA": "=mlx5_0:1,...", "NCCL_IB_GID_INDEX": "3", "NCCL_IB_TC": "106"}, notes)``;
        a variable that cannot be given one value is left out and a note says why.
    """
    nics = sorted(dev.spec.nics, key=lambda n: n.rail)
    env: dict[str, str] = {}
    notes: list[str] = []
    if nics:
        env["NCCL_IB_HCA"] = "=" + ",".join(f"{n.rdma_device}:1" for n in nics)
    else:
        notes.append(f"{dev.name} lists no NIC in its inventory: NCCL_IB_HCA not set")
    bad = {d: e for d, e in gid_index.items() if isinstance(e, TuningError)}
    found = {d: i for d, i in gid_index.items() if not isinstance(i, TuningError)}
    if bad:
        notes.append("NCCL_IB_GID_INDEX not set: " + "; ".join(f"{d}: {getattr(e, 'message', e)}"
                                                              for d, e in sorted(bad.items())))
    elif len(set(found.values())) > 1:
        notes.append("NCCL_IB_GID_INDEX not set: the NICs' RoCE v2 IPv4 GIDs differ (" +
                     ", ".join(f"{d} {i}" for d, i in sorted(found.items())) + "); NCCL takes one index")
    elif found:
        env["NCCL_IB_GID_INDEX"] = str(next(iter(found.values())))
    qos = dev.spec.nic_qos
    if qos is None:
        notes.append(f"NCCL_IB_TC not set: {dev.name} leaves its RoCE QoS alone (no nic_qos); NCCL then "
                     "sends traffic class 0")
    else:
        env["NCCL_IB_TC"] = str(qos.roce_tos)
    notes.append("NCCL_SOCKET_IFNAME: set it to the management interface NCCL bootstraps over (the "
                 "inventory does not describe it)")
    return env, notes


def as_shell(env: dict[str, str], notes: list[str]) -> str:
    """``export NAME='VALUE'`` lines (single-quoted), the notes as ``#`` comments: a file a job
    script can ``source``."""
    lines = [f"# {n}" for n in notes] + [f"export {k}='{v}'" if shlex.quote(v) == v else f"export {k}={shlex.quote(v)}"
                                          for k, v in env.items()]
    return "\n".join(lines) + "\n"
