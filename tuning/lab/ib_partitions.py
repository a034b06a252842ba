"""The IB lab's ``partitions.conf``: OpenSM 3.3.23's partition policy, written from a checked model.

The file, as OpenSM's ``opensm-partitions.conf(5)`` describes it: one definition per partition,
``<name>=<pkey>[,ipoib][,mtu=N][,rate=N][,sl=N] : <member>[=full|=limited], ... ;``.
A member is a port GUID (``0x0c42a10300000101``) or a group word (``ALL``, ``ALL_CAS``,
``ALL_SWITCHES``, ``SELF``: the SM's own port). A full member of a partition holds its pkey with the
top bit set in its pkey table (``0x8001``), a limited one without it (``0x0001``): two limited
members cannot talk. The partition of pkey 0x7fff is the Default one; without a rule giving the
ports full membership of it, a port is only a limited member (the SM port excepted).

Every value that reaches the file passes a grammar: a name of letters, digits, ``_`` and ``-``; a
pkey 0x0001..0x7fff (the membership bit is the member's, not the partition's; 0 is invalid);
mtu 1..5 (256..4096 bytes), sl 0..15, rate one of the PathRecord rate codes 2..22.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tuning.errors import InputError
from tuning.lab.ib_topology import IbTopology

__all__ = ["GROUPS", "IbMember", "IbPartition", "partitions_conf"]

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")
#: the group words OpenSM takes for a member, besides port GUIDs
GROUPS = ("ALL", "ALL_CAS", "ALL_SWITCHES", "SELF")
#: ``both`` (full and limited entries at once) needs OpenSM's allow_both_pkeys, which the lab leaves off
MEMBERSHIPS = ("full", "limited")
_FILE = "partitions.conf"


@dataclass(frozen=True)
class IbMember:
    """A partition member: an HCA of the lab by node id (``node01-mlx5_0``) or a group word."""

    who: str
    membership: str = "full"


@dataclass(frozen=True)
class IbPartition:
    """One partition: name, pkey (15 bits), members, and the IPoIB broadcast group's flags."""

    name: str
    pkey: int
    members: tuple[IbMember, ...]
    ipoib: bool = False
    mtu: int | None = None
    rate: int | None = None
    sl: int | None = None


def _need_int(key: str, value: object, lo: int, hi: int) -> int:
    if type(value) is not int or not lo <= value <= hi:
        raise InputError(_FILE, key, f"{value!r} is outside {lo:#x}..{hi:#x}" if key.endswith("pkey")
                         else f"{value!r} is outside {lo}..{hi}")
    return value


def _member(part: IbPartition, m: IbMember, topo: IbTopology) -> str:
    key = f"{part.name}.members"
    if m.membership not in MEMBERSHIPS:
        raise InputError(_FILE, key, f"membership {m.membership!r}: one of {', '.join(MEMBERSHIPS)}")
    if m.who in GROUPS:
        return f"{m.who}={m.membership}"
    try:
        guid = topo.hca(m.who).port_guid
    except KeyError as e:
        raise InputError(_FILE, key, str(e.args[0])) from e
    return f"{guid:#018x}={m.membership}"


def _line(part: IbPartition, topo: IbTopology) -> str:
    if not isinstance(part.name, str) or not _NAME.fullmatch(part.name):
        raise InputError(_FILE, "name", f"{part.name!r}: a letter, then up to 31 of [A-Za-z0-9_-]")
    head = [f"{part.name}={_need_int(f'{part.name}.pkey', part.pkey, 0x0001, 0x7FFF):#06x}"]
    if part.ipoib:
        head.append("ipoib")
    for key, value, lo, hi in (("mtu", part.mtu, 1, 5), ("rate", part.rate, 2, 22), ("sl", part.sl, 0, 15)):
        if value is not None:
            head.append(f"{key}={_need_int(f'{part.name}.{key}', value, lo, hi)}")
    if not part.members:
        raise InputError(_FILE, f"{part.name}.members", "a partition needs at least one member")
    return f"{','.join(head)} : {', '.join(_member(part, m, topo) for m in part.members)} ;"


def partitions_conf(partitions: list[IbPartition], topo: IbTopology) -> str:
    """The ``partitions.conf`` text of ``partitions`` (one line each, in order).

    Raises:
        InputError: a value outside its grammar, an unknown member, or a pkey or name given twice.
    """
    for attr in ("pkey", "name"):
        seen = [getattr(p, attr) for p in partitions]
        dup = sorted({str(v) for v in seen if seen.count(v) > 1})
        if dup:
            raise InputError(_FILE, attr, f"{', '.join(dup)} given twice")
    lines = ["# fabtune IB lab (tuning/lab/ib_partitions.py): OpenSM partition policy"]
    return "\n".join(lines + [_line(p, topo) for p in partitions]) + "\n"
