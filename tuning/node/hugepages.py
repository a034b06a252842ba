"""Hugepage pools of every NUMA node: 2 MiB and 1 GiB pages, live in sysfs and re-applied at boot.

Source: kernel ``Documentation/admin-guide/mm/hugetlbpage.rst``: the per-node pool is
``/sys/devices/system/node/node<N>/hugepages/hugepages-<size>kB/nr_hugepages`` (read / written as a
decimal page count). The kernel allocates what it can: asking for more pages than the node has
free memory for is not an error, the pool just ends smaller (``nr_hugepages`` reads back lower), so
every write is read back (a short pool fails the apply, naming the key, wanted and read counts). A
pool larger than the NUMA node's memory (``MemTotal`` of ``node<N>/meminfo``, ``Node 0 MemTotal:
1056466084 kB``) is refused at plan, before anything is pushed.

Keys: ``hugepages/node<N>/1048576kB`` and ``hugepages/node<N>/2048kB`` -> page count, for every NUMA
node the node shows (1 GiB pools first: they need contiguous memory). ``boot_script``: the boot
script re-applies the pools with these very commands (1 GiB pages asked for late in boot may come
up short on a fragmented node; the read-back of the next apply says so).

Example profile::

    kernel:
      hugepages_2m_per_numa: 4096     # 8 GiB per NUMA node
      hugepages_1g_per_numa: 16
"""

from __future__ import annotations

import re

from tuning.model import NodeSpec
from tuning.node.base import ABSENT, FileDomain, NodeFacts, Unfit
from tuning.transport.base import q, sysroot_path

NODES = "/sys/devices/system/node"
#: page size kB -> (profile field, name for people), in apply order
SIZES = {1048576: ("kernel.hugepages_1g_per_numa", "1 GiB"), 2048: ("kernel.hugepages_2m_per_numa", "2 MiB")}
_MEMTOTAL = re.compile(r"^Node \d+ MemTotal:\s+(\d+) kB$")


def pool_path(node: str, size_kb: int) -> str:
    """``node0``, 2048 -> ``/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages``."""
    return f"{NODES}/{node}/hugepages/hugepages-{size_kb}kB/nr_hugepages"


def _counts(spec: NodeSpec) -> dict[int, int]:
    """Page size kB -> pages per NUMA node the profile asks for (1 GiB first)."""
    per = {1048576: spec.kernel.hugepages_1g_per_numa, 2048: spec.kernel.hugepages_2m_per_numa}
    return {size: n for size, n in per.items() if n is not None}


def numa_nodes(facts: NodeFacts) -> list[str]:
    """The NUMA nodes the read script saw (``node0``, ``node1``), in number order."""
    names = {k.split("/")[1] for k in facts.raw if k.startswith("hugepages/node") and k.endswith("/memtotal")}
    return sorted(names, key=lambda n: int(n[4:]))


def memtotal_kb(facts: NodeFacts, node: str) -> int | None:
    """``MemTotal`` of a NUMA node in kB, or None when unreadable."""
    m = _MEMTOTAL.match(facts.raw.get(f"hugepages/{node}/memtotal", ""))
    return int(m[1]) if m else None


#: keep 1/HEADROOM_DIVISOR of a NUMA node's memory free when sizing pools (2%): a pool that takes
#: nearly all free memory can wake the OOM killer before a read-back or a restore runs
HEADROOM_DIVISOR = 50
_MEMFREE = re.compile(r"^Node \d+ MemFree:\s+(\d+) kB$")


def memfree_kb(facts: NodeFacts, node: str) -> int | None:
    """``MemFree`` of a NUMA node in kB, or None when unreadable."""
    m = _MEMFREE.match(facts.raw.get(f"hugepages/{node}/memfree", ""))
    return int(m[1]) if m else None


class HugepagesDomain(FileDomain):
    """``hugepages/node<N>/<size>kB`` -> pages (see the module doc)."""

    name = "hugepages"
    boot_script = True

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        nodes = q(sysroot_path(sysroot, NODES))
        return [
            "printf 'hugepages/read\\tyes\\n'",
            f'for _hp_d in {nodes}/node[0-9]*; do [ -d "$_hp_d" ] || continue; _hp_n=${{_hp_d##*/}}; '
            'r "hugepages/$_hp_n/memtotal" "$_hp_d/meminfo"; '
            'printf "hugepages/%s/memfree\\t%s\\n" "$_hp_n" "$(grep -m1 "MemFree:" "$_hp_d/meminfo")"; '
            'for _hp_s in "$_hp_d"/hugepages/hugepages-*kB; do [ -d "$_hp_s" ] || continue; '
            '_hp_z=${_hp_s##*/hugepages-}; r "hugepages/$_hp_n/$_hp_z" "$_hp_s/nr_hugepages"; done; done',
        ]

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        return {f"hugepages/{n}/{size}kB": facts.raw.get(f"hugepages/{n}/{size}kB", ABSENT)
                for n in numa_nodes(facts) for size in _counts(spec)}

    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        counts = _counts(spec)
        if not counts or "hugepages/read" not in facts.raw:
            return {}  # nothing asked, or an offline plan: the NUMA nodes are not known
        nodes = numa_nodes(facts)
        field = SIZES[next(iter(counts))][0]
        if not nodes:
            raise Unfit(field, "the node shows no NUMA node (/sys/devices/system/node/node*): no pool to size")
        out = {}
        for node in nodes:
            total = memtotal_kb(facts, node)
            for size, n in counts.items():
                if facts.raw.get(f"hugepages/{node}/{size}kB", ABSENT) == ABSENT:
                    raise Unfit(SIZES[size][0], f"the node has no {SIZES[size][1]} pages ({pool_path(node, size)} "
                                                "is missing); allowed: leave it unset")
            need = sum(size * n for size, n in counts.items())
            if total is not None and need > total:
                raise Unfit(field, f"{self._asked(counts)} per NUMA node is {need / 2**20:.1f} GiB, more than "
                                   f"{node}'s memory ({total / 2**20:.1f} GiB MemTotal); allowed: "
                                   f"{self._allowed(counts, total)}")
            free = memfree_kb(facts, node)
            if total is not None and free is not None:
                pooled = sum(size * int(v) for size in SIZES
                             if (v := facts.raw.get(f"hugepages/{node}/{size}kB", "")).isdigit())
                room = free + pooled - total // HEADROOM_DIVISOR
                if need > room:
                    raise Unfit(field, f"{self._asked(counts)} per NUMA node is {need / 2**20:.1f} GiB, more than "
                                       f"{node} can give ({free / 2**20:.1f} GiB MemFree + {pooled / 2**20:.1f} GiB "
                                       f"already in pools, keeping {100 // HEADROOM_DIVISOR}% of its memory free); "
                                       f"allowed: {self._allowed(counts, max(room, 0))}")
            out.update({f"hugepages/{node}/{size}kB": str(n) for size, n in counts.items()})
        return out

    @staticmethod
    def _asked(counts: dict[int, int]) -> str:
        return " + ".join(f"{n} x {SIZES[size][1]}" for size, n in counts.items())

    @staticmethod
    def _allowed(counts: dict[int, int], total_kb: int) -> str:
        """The largest count of the first pool that fits beside the others."""
        size, _ = next(iter(counts.items()))
        rest = sum(s * n for s, n in counts.items() if s != size)
        return f"at most {max(total_kb - rest, 0) // size} x {SIZES[size][1]} with the other pool as asked"

    def path(self, key: str) -> str:
        return _path(key)


def _path(key: str) -> str:
    """``hugepages/node0/2048kB`` -> the pool's ``nr_hugepages`` path (numbers re-checked)."""
    _, node, size = key.split("/")
    if not re.fullmatch(r"node\d{1,4}", node) or not re.fullmatch(r"\d{1,8}kB", size):
        raise ValueError(f"{key!r} is not a hugepages key")
    return pool_path(node, int(size[:-2]))
