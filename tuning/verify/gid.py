"""Resolve the GID index a RoCE test must use from the NIC's sysfs GID table.

Never assume index 3: an extra link-local or IPv6 address shifts the RoCEv2 IPv4 entry
(5 and 7 are seen; shared/cases show_gids samples). The table is
``/sys/class/infiniband/<dev>/ports/<p>/gids/<N>`` (8 groups of 4 hex digits, all zeros when
empty) with ``gid_attrs/types/<N>`` = ``RoCE v2`` / ``IB/RoCE v1`` (linux
``Documentation/ABI/stable/sysfs-class-infiniband``); reading the type of an empty index fails.
"""

from __future__ import annotations

import ipaddress

from tuning.errors import VerifyError
from tuning.transport.base import Host, q, sysroot_path

ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def gid_table_command(sysroot: str, rdma_device: str, port: int = 1) -> str:
    """One command listing populated GID entries as ``<index> <gid> <type>`` lines."""
    base = q(sysroot_path(sysroot, f"/sys/class/infiniband/{rdma_device}/ports/{port}"))
    # grep -L skips the (up to 255) all-zero entries in one process instead of two forks each
    return (f"cd {base} && for f in $(grep -L -x {ZERO_GID} gids/*); do i=${{f#gids/}}; "
            f"echo \"$i $(cat \"$f\") $(cat gid_attrs/types/$i 2>/dev/null)\"; done")


def ipv4_gid(ipv4: str) -> str:
    """The IPv4-mapped GID of an address: ``10.0.0.1`` -> ``0000:...:ffff:0a00:0001``."""
    b = ipaddress.IPv4Address(ipv4).packed
    return f"0000:0000:0000:0000:0000:ffff:{b[0]:02x}{b[1]:02x}:{b[2]:02x}{b[3]:02x}"


def pick_roce_v2_ipv4(table: str, ipv4: str) -> int | None:
    """The index of the ``RoCE v2`` entry holding ``ipv4`` in a :func:`gid_table_command` listing."""
    want = ipv4_gid(ipv4)
    for line in table.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[1].lower() == want and parts[2].strip() == "RoCE v2":
            return int(parts[0])
    return None


def resolve_gid_index(host: Host, rdma_device: str, ipv4: str) -> int:
    """Read the GID table over the host and return the RoCEv2 IPv4 GID index.

    Raises:
        VerifyError: no RoCE v2 entry carries ``ipv4`` (address missing, or RoCE v1 only).
    """
    res = host.run(gid_table_command(host.sysroot, rdma_device), privileged=False).check(host.name, "verify")
    idx = pick_roce_v2_ipv4(res.stdout, ipv4)
    if idx is None:
        raise VerifyError(f"{rdma_device}: no RoCE v2 GID for {ipv4} in the GID table", host=host.name, phase="verify")
    return idx
