"""The subnet manager's partition policy, pure: ``partitions.conf`` rendered from the inventory
(:class:`tuning.model.ib_sm.SmSpec`) and the fabric's HCA ports, the pkey tables OpenSM will program
from it, and the plan (the diff against what the ports hold now). No I/O: :mod:`tuning.targets.sm`
reads and writes.

The file, as OpenSM 3.3.23 reads it (OpenSM's ``doc/partition-config.txt``): one definition per
partition, ``<name>=<pkey>[,ipoib][,mtu=N][,rate=N][,sl=N] : <member>=full|limited, ... ;``, a
member a port GUID or a group word; a line holds at most 4096 characters (NVIDIA's UFM manual,
"SM Partitions.conf File Format"), so a definition longer than that puts one member on each line
(the parser reads up to the ``;``: tried on the lab's OpenSM). A node member is every CA port whose
node description (rdma-ndd's ``%h %d``: ``node01 mlx5_0``, ``node01.cluster.local mlx5_0``) starts with
the node's name (a FQDN's first label) and a blank, by the GUID the fabric reports (``iblinkinfo``),
sorted by description; an HCA whose description is still the firmware's (``MT4129 ConnectX7 ...``:
no rdma-ndd) is no node's.

What OpenSM programs: a member port holds the partition's pkey with the top bit set when full
(``0x8001``), clear when limited (``0x0001``); a port listed twice in one partition takes its last
listing (measured on the IB lab: ``guid=full, guid=limited`` gives ``0x0002``, the reverse
``0x8003``; ``guid=limited, ALL_CAS=full`` gives ``0x8001``); every CA port holds the Default pkey
0x7fff, and with a file that has no rule for the Default partition OpenSM acts as if it said
``Default=0x7fff : ALL=limited, SELF=full ;`` (partition-config.txt): every HCA a limited member,
and two limited members cannot talk.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuning.errors import InputError
from tuning.model.ib_sm import DEFAULT_PKEY, IbPartitionSpec, SmSpec, pkey_word
from tuning.parsers.ib_sm import MTUS
from tuning.node.base import Change, Finding
from tuning.targets import SM_DOMAIN
from tuning.targets.sm_qos import FILE_KEY as QOS_FILE_KEY, SL2VL_KEY, set_conf_line

DOMAIN = SM_DOMAIN
FILE_KEY = "file/partitions.conf"
PRIORITY_KEY = "sm_priority"
#: OpenSM's longest line (characters); a longer definition gets one member a line
MAX_LINE = 4096
HEADER = "# fabtune: OpenSM partition policy, rendered from the inventory (do not edit: fabtune plan shows the diff)"


@dataclass(frozen=True)
class CaPort:
    """One HCA port of the fabric as the SM's side reads it (``iblinkinfo``).

    Attributes:
        description: the node description (``node01 mlx5_0``).  port: its number (1).
        guid: the port GUID (an int; ``0x0c42a10300000101``).  lid: the LID the SM gave it.
    """

    description: str
    port: int
    guid: int
    lid: int

    @property
    def node(self) -> str:
        """The host part of the description without its domain (``node01``; rdma-ndd writes the host
        name, which may be a FQDN: ``node01.cluster.local mlx5_0`` -> ``node01``)."""
        return self.description.split(" ", 1)[0].split(".", 1)[0]

    @property
    def name(self) -> str:
        """``node01 mlx5_0/1``: how plans and findings name the port."""
        return f"{self.description}/{self.port}"


#: a port's pkey table as plans compare it: ``0x7fff`` -> ``full`` | ``limited``
Table = dict[str, str]


def _members(part: IbPartitionSpec, i: int, ports: list[CaPort], src: str) -> list[tuple[str, str, list[CaPort]]]:
    """(file word, membership, CA ports it covers) per member of ``part``."""
    out = []
    nodes = sorted({p.node for p in ports})
    for who, how in part.members.items():
        if who in ("ALL", "ALL_CAS"):
            out.append((who, how, ports))
        elif who in ("ALL_SWITCHES", "SELF"):
            out.append((who, how, []))
        else:
            mine = [p for p in ports if p.node == who]
            if not mine:
                raise InputError(src, f"partitions.{i}.members.{who}",
                                 f"no active HCA port of node {who!r} in the fabric (iblinkinfo node descriptions "
                                 f"'<node> <hca>'); nodes there: {', '.join(nodes) or 'none'}")
            out += [(f"{p.guid:#018x}", how, [p]) for p in mine]
    return out


def render(spec: SmSpec, ports: list[CaPort], src: str = "inventory") -> str:
    """The ``partitions.conf`` text of ``spec`` over the fabric's CA ``ports`` (one line a partition).

    Raises:
        InputError: a node member with no HCA port in the fabric (names ``src`` and the key).
    """
    ports = sorted(ports, key=lambda p: (p.description, p.port))
    lines = [HEADER]
    for i, part in enumerate(spec.partitions):
        head = [f"{part.name}={pkey_word(part.pkey)}"] + (["ipoib"] if part.ipoib else [])
        head += [f"{k}={v}" for k, v in (("mtu", part.mtu), ("rate", part.rate), ("sl", part.sl)) if v is not None]
        members = [f"{word}={how}" for word, how, _ in _members(part, i, ports, src)]
        line = f"{','.join(head)} : {', '.join(members)} ;"
        lines.append(line if len(line) <= MAX_LINE else f"{','.join(head)} :\n  " + ",\n  ".join(members) + " ;")
    return "\n".join(lines) + "\n"


def expected_tables(spec: SmSpec, ports: list[CaPort], src: str = "inventory") -> dict[str, Table]:
    """Port GUID (``0x...``) -> the pkey table OpenSM programs from ``spec`` (see the module's rules).

    Raises:
        InputError: as :func:`render`.
    """
    tables: dict[str, Table] = {f"{p.guid:#018x}": {pkey_word(DEFAULT_PKEY): "limited"} for p in ports}
    for i, part in enumerate(spec.partitions):
        for _, how, covered in _members(part, i, ports, src):
            for p in covered:
                t = tables[f"{p.guid:#018x}"]
                key = pkey_word(part.pkey)
                t[key] = how  # the last listing wins (module docstring)
    return tables


def plan(name: str, spec: SmSpec, state: dict, src: str = "inventory") -> list[Change]:
    """The changes from the collected ``state`` (:meth:`tuning.targets.sm.SmTarget.collect`) to
    ``spec``: the file (whole text), the SM priority, and each port pkey whose membership moves
    (``pkey/node01 mlx5_0/1/0x7fff``: ``full`` -> ``limited``; None = not in the table). Pure.

    Raises:
        InputError: as :func:`render`.
    """
    ports: list[CaPort] = state["ports"]
    out: list[Change] = []
    if spec.partitions:
        text = render(spec, ports, src)
        if text != state["partitions"]:
            out.append(Change(name, DOMAIN, FILE_KEY, state["partitions"], text))
        want = expected_tables(spec, ports, src)
        for p in ports:
            g = f"{p.guid:#018x}"
            have, new = state["pkeys"].get(g, {}), want[g]
            for pk in sorted(set(have) | set(new)):
                if have.get(pk) != new.get(pk):
                    out.append(Change(name, DOMAIN, f"pkey/{p.name}/{pk}", have.get(pk), new.get(pk)))
    if spec.sm_priority is not None and state.get("sm_priority") != str(spec.sm_priority):
        out.append(Change(name, DOMAIN, PRIORITY_KEY, state.get("sm_priority"), str(spec.sm_priority)))
    return out


def findings(name: str, spec: SmSpec, state: dict, changes: list[Change]) -> list[Finding]:
    """What an operator must see before the push: HCA ports the plan leaves limited members of the
    Default partition (they were full: the classic ``partitions.conf`` without a Default rule), ports
    given more pkeys than their table holds (:func:`_table_overflow`), a routing engine other than the
    inventory's (never changed by fabtune: it reroutes the subnet)."""
    out = []
    dropped = [c.key.split("/")[1] + "/" + c.key.split("/")[2] for c in changes
               if c.key.startswith("pkey/") and c.key.endswith(pkey_word(DEFAULT_PKEY))
               and c.before == "full" and c.after == "limited"]
    if dropped:
        out.append(Finding(name, DOMAIN, "ib-default-limited",
                           f"{len(dropped)} HCA port(s) would become limited members of the Default partition "
                           f"{pkey_word(DEFAULT_PKEY)} (no rule makes them full): limited members cannot talk to each "
                           "other (a partitions.conf needs a rule like 'Default=0x7fff,ipoib : ALL=full ;')",
                           "smpquery pkeys now full: " + ", ".join(dropped[:4]) + (" ..." if len(dropped) > 4 else "")))
    out += _table_overflow(name, spec, state)
    engine = state.get("routing_engine")
    if spec.routing_engine is not None and engine is not None and engine != spec.routing_engine:
        out.append(Finding(name, DOMAIN, "ib-routing-engine",
                           f"OpenSM runs routing engine {engine}, the inventory asks {spec.routing_engine}: not "
                           "changed by fabtune (a routing change reroutes the subnet: a maintenance window)",
                           f"OpenSM log: {engine} tables configured on all switches"))
    return out


def _table_overflow(name: str, spec: SmSpec, state: dict) -> list[Finding]:
    """``ib-pkey-table-full``: HCA ports that the inventory's partitions give more pkeys (the Default
    one included) than their P_Key table holds (``smpquery pkeys``: ``64 pkeys capacity for this
    port``, the HCA's NodeInfo PartitionCap). OpenSM programs what fits and drops the rest, logging
    ``pkey_mgr_update_port: ERR 0512: Failed to set PKey 0x8141 because Pkey table is full for node
    0x... port 1 (node01 mlx5_0)`` (OpenSM 3.3.23 on the lab, 70 partitions over ibsim's 64-entry
    tables; a push then fails on that log and is restored). A state without ``pkey_caps`` (an older
    journal's) judges nothing."""
    caps = state.get("pkey_caps") or {}
    if not spec.partitions or not caps:
        return []
    want = expected_tables(spec, state["ports"])
    over = sorted((p.name, len(want[g]), caps[g]) for p in state["ports"]
                  if (g := f"{p.guid:#018x}") in caps and len(want[g]) > caps[g])
    if not over:
        return []
    shown = ", ".join(f"{n} ({k} pkeys, holds {c})" for n, k, c in over[:4]) + (" ..." if len(over) > 4 else "")
    return [Finding(name, DOMAIN, "ib-pkey-table-full",
                    f"{len(over)} HCA port(s) would be members of more partitions than their P_Key table holds: "
                    f"{shown}; OpenSM would program the first ones and drop the rest (ERR 0512: Pkey table is full). "
                    "Fix: fewer partitions on those ports, or split the tenants over other HCAs",
                    "smpquery pkeys: " + ", ".join(f"{n}: {c} pkeys capacity for this port" for n, _, c in over[:4]))]


def path_pairs(spec: SmSpec, state: dict) -> dict[str, tuple[int, int, int]]:
    """Partition name -> ``(slid, dlid, pkey with the full bit)``: one path to read with ``saquery PR``
    for each partition that asks an ``mtu`` or ``sl``, between the first port holding its pkey as a
    full member and the next port holding it at all (a path needs one full end); none when fewer
    than two ports hold it."""
    out = {}
    for part in spec.partitions:
        if part.mtu is None and part.sl is None:
            continue
        key = pkey_word(part.pkey)
        holders = [p for p in state["ports"] if key in state["pkeys"].get(f"{p.guid:#018x}", {})]
        full = next((p for p in holders if state["pkeys"][f"{p.guid:#018x}"][key] == "full"), None)
        other = next((p for p in holders if p is not full), None)
        if full is not None and other is not None:
            out[part.name] = (full.lid, other.lid, 0x8000 | part.pkey)
    return out


def path_findings(name: str, spec: SmSpec, state: dict) -> list[Finding]:
    """The partitions' ``mtu`` and ``sl`` against the path records read (``state["path_records"]``:
    partition -> ``{"mtu_bytes", "sl", "slid", "dlid"}``): ``ib-path-mtu`` when a path's MTU is
    below the partition's (a port's MtuCap caps it: ibsim's ports cap at 2048), ``ib-path-sl`` when
    its SL is another (OpenSM puts a partition's SL in path records only with its ``qos`` on),
    ``ib-path-unread`` when fewer than two ports hold the partition's pkey (nothing to read)."""
    out, read = [], state.get("path_records", {})
    for part in spec.partitions:
        if part.mtu is None and part.sl is None:
            continue
        pr = read.get(part.name)
        if pr is None:
            out.append(Finding(name, DOMAIN, "ib-path-unread", f"partition {part.name}: no two ports hold "
                               f"{pkey_word(part.pkey)} (one full): its mtu/sl cannot be read from a path record",
                               "smpquery pkeys of every HCA port"))
            continue
        ev = f"saquery PR {pr['slid']}:{pr['dlid']} pkey {0x8000 | part.pkey:#06x}: mtu {pr['mtu_bytes']}, sl {pr['sl']}"
        if part.mtu is not None and (pr["mtu_bytes"] or 0) < MTUS[part.mtu]:
            out.append(Finding(name, DOMAIN, "ib-path-mtu", f"partition {part.name}: path MTU {pr['mtu_bytes']} "
                               f"below its mtu={part.mtu} ({MTUS[part.mtu]} bytes): a port on the path caps it", ev))
        if part.sl is not None and pr["sl"] != part.sl:
            out.append(Finding(name, DOMAIN, "ib-path-sl", f"partition {part.name}: path records carry SL {pr['sl']}, "
                               f"not its sl={part.sl} (OpenSM puts it there only with qos TRUE)", ev))
    return out


def files_after(rec: dict, changes: list[Change]) -> dict[str, str | None]:
    """Path -> text of the files the push writes (the partitions file; the QoS policy file,
    :mod:`tuning.targets.sm_qos`; opensm.conf for a priority and a ``qos_ca_sl2vl``, each line set in turn)."""
    paths, before = rec["paths"], rec["files_before"]
    conf = paths["opensm_conf_file"]
    out: dict[str, str | None] = {}
    for c in changes:
        if c.key == FILE_KEY:
            out[paths["opensm_partitions_file"]] = c.after
        elif c.key == QOS_FILE_KEY:
            out[paths["opensm_qos_policy_file"]] = c.after
        elif c.key in (PRIORITY_KEY, SL2VL_KEY):
            value = str(int(c.after)) if c.key == PRIORITY_KEY else c.after
            out[conf] = set_conf_line(out.get(conf) or before.get(conf) or "", c.key, value)
    return out


def tables_after(rec: dict, changes: list[Change]) -> dict[str, Table]:
    """Port GUID -> the pkey table after the push: the journaled tables with each planned move."""
    by_name = {name: g for g, name in rec["ports"].items()}
    want = {g: dict(t) for g, t in rec["pkeys_before"].items()}
    for c in changes:
        if c.key.startswith("pkey/"):
            port, _, pk = c.key[len("pkey/"):].rpartition("/")
            table = want.setdefault(by_name[port], {})
            if c.after is None:
                table.pop(pk, None)
            else:
                table[pk] = c.after
    return want
