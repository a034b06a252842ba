"""The desired state of an InfiniBand subnet manager (OpenSM), validated: issue 22.

An inventory's ``subnet_managers`` group holds the SM hosts; each one's settings (host_vars or
group_vars, one source each, as for nodes and switches) are a :class:`SmSpec`::

    platform: opensm
    sm_priority: 15                 # 0..15, OpenSM's sm_priority (opensm.conf)
    routing_engine: minhop          # OpenSM's routing_engine; checked, not changed by fabtune
    partitions:
      - name: Default
        pkey: 0x7fff                # 0x0001..0x7fff: the membership bit is the member's
        ipoib: true
        members: {ALL: full}
      - name: tenant1
        pkey: 0x0001
        ipoib: true
        mtu: 5                      # IBA MTU code 1..5 = 256..4096 bytes
        sl: 3
        members: {node01: full, node02: limited}
    qos_policy:                     # qos-policy.conf's qos-ulps (read with opensm.conf's qos TRUE)
      default_sl: 0
      ulps: [{pkey: 0x0001, sl: 3}]
      ca_sl2vl: [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7]   # opensm.conf's qos_ca_sl2vl: VL of SL 0..15

A member is a node by its inventory name (every HCA port of that node, as the fabric's node
descriptions ``<node> <hca>`` name them: the port GUIDs are read from the fabric, never written
here) or one of OpenSM's group words (``ALL``, ``ALL_CAS``, ``ALL_SWITCHES``, ``SELF``), each
``full`` or ``limited``. Source of the grammar: OpenSM 3.3.23 ``opensm-partitions.conf(5)`` /
``opensm/osm_prtn_config.c`` (pkey 15 bits, 0 invalid; flags ``ipoib``, ``mtu``, ``rate``, ``sl``;
``both`` membership only with ``allow_both_pkeys``, which fabtune leaves off) and ``opensm --help``
(priority 0..15; the routing engines).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from tuning.model import grammar

_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)
#: OpenSM's member group words (``osm_prtn_config.c``: ``ALL``, ``ALL_CAS``, ``ALL_SWITCHES``, ``SELF``)
GROUPS = ("ALL", "ALL_CAS", "ALL_SWITCHES", "SELF")
MEMBERSHIPS = ("full", "limited")
#: the Default partition's pkey (IBA 10.9.1.2): without a rule giving a port full membership, the SM
#: gives it only limited membership
DEFAULT_PKEY = 0x7FFF
#: OpenSM 3.3.23's routing engines (``opensm --help``, ``-R``), plus its default ``minhop``
ROUTING_ENGINES = ("minhop", "updn", "dnup", "file", "ftree", "lash", "dor", "torus-2QoS", "nue", "dfsssp", "sssp")
#: PathRecord rate codes a partition's ``rate=`` takes (IBA 1.3 Table 225: 2 = 2.5 Gb/s .. 22 = 600 Gb/s)
RATE_CODES = tuple(range(2, 23))
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")
_HEX_PKEY = re.compile(r"0x[0-9a-fA-F]{1,4}")
NAME_ALLOWED = "a letter, then up to 31 of [A-Za-z0-9_-]"
PKEY_ALLOWED = "0x0001..0x7fff (an integer or a 0x hex string; the membership bit 0x8000 is the member's)"


def pkey_word(pkey: int) -> str:
    """``0x7fff``: a 15-bit pkey as plans, the journal, ``partitions.conf`` and verdicts write it."""
    return f"{pkey & 0x7FFF:#06x}"


def check_pkey(value: object) -> int:
    """A partition key: 0x0001..0x7fff as an int (YAML ``0x7fff``) or a ``0x`` hex string; never a bool."""
    if isinstance(value, str) and _HEX_PKEY.fullmatch(value):
        value = int(value, 16)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r:.40} is not a pkey; allowed: {PKEY_ALLOWED}")
    if not 0x0001 <= value <= 0x7FFF:
        raise ValueError(f"{value:#06x} is outside 0x0001..0x7fff; allowed: {PKEY_ALLOWED}")
    return value


def check_partition_name(value: object) -> str:
    """A partition name as OpenSM's parser reads it up to ``=`` (no blank, ``=``, ``:``, ``,`` or ``;``)."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ValueError(f"{value!r:.40} is not a partition name; allowed: {NAME_ALLOWED}")
    return value


def check_member(value: object) -> str:
    """A member: one of :data:`GROUPS` or an inventory node name (:func:`grammar.check_host_name`)."""
    if isinstance(value, str) and value in GROUPS:
        return value
    try:
        return grammar.check_host_name(value)
    except ValueError:
        raise ValueError(f"{value!r:.40} is not a member; allowed: a node name like node01 or one of "
                         f"{', '.join(GROUPS)}") from None


def check_membership(value: object) -> str:
    """``full`` or ``limited``."""
    if value not in MEMBERSHIPS or not isinstance(value, str):
        raise ValueError(f"{value!r:.40} is not a membership; allowed: {', '.join(MEMBERSHIPS)}")
    return value


Pkey = Annotated[int, BeforeValidator(check_pkey)]
Member = Annotated[str, BeforeValidator(check_member)]
Membership = Annotated[str, BeforeValidator(check_membership)]


class IbPartitionSpec(BaseModel):
    """One partition (one ``partitions.conf`` line).

    Attributes:
        name: the partition's name.  pkey: its 15-bit key.
        members: member (node name or OpenSM group word) -> ``full`` | ``limited``; at least one.
        ipoib: OpenSM creates the IPoIB broadcast group of the partition.
        mtu: the broadcast group's MTU code (1..5 = 256..4096 bytes), None: OpenSM's default.
        rate: its rate code (2..22, IBA's PathRecord rate table), None: OpenSM's default.
        sl: its service level 0..15 (reaches path records only with OpenSM's ``qos`` on), None: 0.
    """

    model_config = _STRICT
    name: Annotated[str, BeforeValidator(check_partition_name)]
    pkey: Pkey
    members: dict[Member, Membership] = Field(min_length=1)
    ipoib: bool = False
    mtu: Optional[int] = Field(None, ge=1, le=5)
    rate: Optional[int] = Field(None, ge=2, le=22)
    sl: Optional[int] = Field(None, ge=0, le=15)


class IbQosUlp(BaseModel):
    """One rule of the QoS policy's ``qos-ulps`` section: every path in partition ``pkey`` gets ``sl``
    (``any, pkey 0x0001 : 3``)."""

    model_config = _STRICT
    pkey: Pkey
    sl: int = Field(ge=0, le=15)


class IbQosSpec(BaseModel):
    """OpenSM's QoS policy file (``qos-policy.conf``), its ``qos-ulps`` section: the SL of a path by
    its partition. Grammar: OpenSM 3.3.23 ``osm_qos_parser_y.y`` (``default : N``, ``any, pkey P : N``,
    SL 0..15). Measured on the IB lab's OpenSM (qos TRUE): a rule's SL reaches the partition's path
    records and wins over the partition's own ``sl=``; the ``default`` line is required (without it:
    ``ERR AC10: Default qos-level (default) not defined``, the file refused), so ``default_sl`` has one.

    Attributes:
        default_sl: the SL of every path no rule matches (the Default partition's among them).
        ulps: the pkey rules, each pkey once.
        ca_sl2vl: the VL of each SL 0..15 on every HCA port (opensm.conf's ``qos_ca_sl2vl``, which OpenSM
            programs into each CA port's SL2VL table with ``qos TRUE`` and re-reads on SIGHUP: measured),
            16 VLs 0..15 (15: the management VL, a data SL there is dropped); None: fabtune leaves the
            option alone.
    """

    model_config = _STRICT
    default_sl: int = Field(0, ge=0, le=15)
    ulps: list[IbQosUlp] = Field(default_factory=list)
    ca_sl2vl: Optional[list[Annotated[int, Field(ge=0, le=15)]]] = Field(None, min_length=16, max_length=16)

    @field_validator("ulps")
    @classmethod
    def _once(cls, v: list[IbQosUlp]) -> list[IbQosUlp]:
        seen = [u.pkey for u in v]
        dup = sorted({f"{x:#06x}" for x in seen if seen.count(x) > 1})
        if dup:
            raise ValueError(f"pkey {', '.join(dup)} given twice; allowed: each pkey once")
        return v


class SmSpec(BaseModel):
    """Desired state of a subnet manager.

    Attributes:
        platform: the SM kind: ``opensm`` (OpenSM 3.3.x).
        sm_priority: OpenSM's ``sm_priority`` 0..15 (opensm.conf; re-read on SIGHUP), None: left alone.
        routing_engine: the routing engine the SM must run (:data:`ROUTING_ENGINES`), None: not checked.
            A routing change reroutes the whole subnet: fabtune reports a difference, never changes it.
        partitions: the partition policy, in file order; empty: fabtune leaves ``partitions.conf`` alone.
        qos_policy: the QoS policy file's SLs (:class:`IbQosSpec`; OpenSM reads it only with ``qos TRUE``),
            None: fabtune leaves ``opensm_qos_policy_file`` alone.
        opensm_partitions_file / opensm_conf_file / opensm_log_file / opensm_pid_file: where OpenSM's
            files are on the SM host. Defaults: OpenSM's built-in ``/etc/opensm/partitions.conf``,
            ``/etc/opensm/opensm.conf`` and ``/var/log/opensm.log``, and ``/var/run/opensm.pid``;
            ``opensm_qos_policy_file``: OpenSM's ``qos_policy_file`` (``/etc/opensm/qos-policy.conf``).
            OpenSM writes no pid file itself: Debian's init script makes ``/var/run/opensm-<port>``,
            its systemd unit ``opensm@<guid>.service`` none and logs to ``/var/log/opensm.<guid>.log``
            (``/lib/systemd/system/opensm@.service``), so a site names its log and a pid file its
            service writes (systemd ``PIDFile=``); the push sends SIGHUP to that pid.
        opensm_subnet_list_file: ``opensm-subnet.lst`` in OpenSM's ``dump_files_dir`` (default
            ``/var/log/``), rewritten at the end of every heavy sweep: how a push sees that OpenSM
            swept when its log's INFO lines are still buffered (``force_log_flush FALSE``).
    """

    model_config = _STRICT
    role: Literal["sm"] = "sm"
    platform: Literal["opensm"] = "opensm"
    sm_priority: Optional[int] = Field(None, ge=0, le=15)
    routing_engine: Optional[str] = None
    partitions: list[IbPartitionSpec] = Field(default_factory=list)
    qos_policy: Optional[IbQosSpec] = None
    opensm_partitions_file: Annotated[str, BeforeValidator(grammar.check_path)] = "/etc/opensm/partitions.conf"
    opensm_conf_file: Annotated[str, BeforeValidator(grammar.check_path)] = "/etc/opensm/opensm.conf"
    opensm_log_file: Annotated[str, BeforeValidator(grammar.check_path)] = "/var/log/opensm.log"
    opensm_pid_file: Annotated[str, BeforeValidator(grammar.check_path)] = "/var/run/opensm.pid"
    opensm_subnet_list_file: Annotated[str, BeforeValidator(grammar.check_path)] = "/var/log/opensm-subnet.lst"
    opensm_qos_policy_file: Annotated[str, BeforeValidator(grammar.check_path)] = "/etc/opensm/qos-policy.conf"

    @field_validator("routing_engine")
    @classmethod
    def _engine(cls, v: str | None) -> str | None:
        if v is not None and v not in ROUTING_ENGINES:
            raise ValueError(f"{v!r:.40} is not an OpenSM routing engine; allowed: {', '.join(ROUTING_ENGINES)}")
        return v

    @field_validator("opensm_partitions_file", "opensm_conf_file", "opensm_log_file", "opensm_pid_file",
                     "opensm_subnet_list_file", "opensm_qos_policy_file")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/") or ".." in v.split("/"):
            raise ValueError(f"{v!r:.60} is not an absolute path; allowed: /[A-Za-z0-9_./+-] without '..'")
        return v

    @field_validator("partitions")
    @classmethod
    def _unique(cls, v: list[IbPartitionSpec]) -> list[IbPartitionSpec]:
        for attr, shown in (("pkey", lambda x: f"{x:#06x}"), ("name", str)):
            seen = [getattr(p, attr) for p in v]
            dup = sorted({shown(x) for x in seen if seen.count(x) > 1})
            if dup:
                raise ValueError(f"partition {attr} {', '.join(dup)} given twice; allowed: each {attr} once")
        return v
