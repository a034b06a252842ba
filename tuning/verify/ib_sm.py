"""The InfiniBand verification of a subnet manager change (issue 22): what a job in a partition sees,
read from the fabric after the SM re-read its policy, without a data path.

For each partition the run's SM plan changes, and always the Default partition (0x7fff):

- **pkeys**: every member port's P_Key table holds the partition's pkey with the intended membership
  (full: top bit 0x8000 set; limited: clear), read with ``smpquery pkeys`` as the SM Target's read
  back does (:meth:`tuning.targets.sm.SmTarget.read_pkeys`; :mod:`tuning.targets.sm_verify` reads
  and builds the intents, this module judges, pure). The intent of a partition the inventory
  defines is what OpenSM programs from it (:func:`tuning.targets.sm_partitions.expected_tables`); the
  Default partition the inventory leaves to OpenSM keeps every port's membership of before the run
  (the journal's ``pkeys_before``): a port that was full and turned limited (the ``partitions.conf``
  without a Default rule) cannot talk to the other limited members any more, a regression.
- **path records** (a partition that asks an ``mtu`` or ``sl``): ``saquery PR --src-to-dst HUB:LID
  --pkey 0x8000|PKEY`` from its first full member (the hub) to every other member (a path needs one
  full end; all in one round trip); each must carry the partition's SL and its MTU capped by both ends' PortInfo
  ``MtuCap`` (``smpquery portinfo``; OpenSM takes the lowest MTU on the path: ibsim's ports cap at
  2048, so the lab's ``mtu=5`` paths carry 2048). A member with no path record cannot be reached.

Every verdict is a :class:`tuning.verify.pair_result.PairResult` (``pair`` ``ib PARTITION ...``) whose
``judged`` (pass) or ``reasons`` (fail) name the values read. A check that ran nothing fails as the
harness's error, never as a pass: a partition whose members give no port pair (``no_pairs``), an
infiniband-diags tool the SM host lacks (``tool_missing``). What it cannot prove: traffic. ibsim has no
data path, so perftest over the partition's pkey index and SL is left (docs/verify.md "InfiniBand").
"""

from __future__ import annotations

from dataclasses import dataclass

from tuning.model.ib_sm import SmSpec, pkey_word
from tuning.verify.pair_result import PairResult, error_class

#: member words that name no HCA port (OpenSM's partition-config.txt)
NO_CA = ("SELF", "ALL_SWITCHES")
#: :attr:`Intent.source` of a partition the plan removes: proven absent from every port
REMOVED = "removed by the plan"
#: how every IB verdict's ``pair`` starts (``ib tenant1 0x0001 pkeys``): a batch's ``results`` hold them
#: after its RoCE pairs (node pairs are named ``node01:mlx5_0->node02:mlx5_0``)
PREFIX = "ib "


@dataclass(frozen=True)
class Intent:
    """One partition to prove.

    Attributes:
        name: the partition's name (``Default`` when the inventory leaves it to OpenSM).
        pkey: its 15-bit pkey (``0x7fff``).  members: port GUID (``0x...``) -> ``full`` | ``limited``.
        mtu_bytes: the MTU it asks (``mtu=5``: 4096), None when not asked.  sl: the SL it asks or None.
        source: ``inventory``, ``before the run`` (the Default partition no rule of the inventory sets) or
            :data:`REMOVED`.
    """

    name: str
    pkey: int
    members: dict[str, str]
    mtu_bytes: int | None
    sl: int | None
    source: str


def unprovable(spec: SmSpec) -> list[str]:
    """Why partitions of ``spec`` cannot be proven, from the inventory alone (before anything is read):
    one without an HCA member (only ``SELF`` / ``ALL_SWITCHES``: no port to read), or one that asks an
    ``mtu`` / ``sl`` with no full member (two limited members have no path: no record to read)."""
    out = []
    for part in spec.partitions:
        ca = {who: how for who, how in part.members.items() if who not in NO_CA}
        if not ca:
            out.append(f"partition {part.name} has no HCA member (only {', '.join(part.members)}): no port to read")
        elif (part.mtu is not None or part.sl is not None) and "full" not in ca.values():
            out.append(f"partition {part.name} asks mtu/sl and has no full member: limited members have no path "
                       "record between them")
    return out


def _result(name: str, path: str, ok: bool, said: list[str], ends: tuple[str | None, str | None] = (None, None),
            **kw) -> PairResult:
    """A judged IB verdict: ``said`` is its evidence (``judged`` on a pass, ``reasons`` on a fail)."""
    status = "pass" if ok else "fail"
    return PairResult(f"{PREFIX}{name}", path, *ends, verdict=status, status=status, reasons=[] if ok else said,
                      judged=said if ok else [], **kw)


def harness(sm: str, name: str, kind: str, why: str) -> PairResult:
    """A check that ran nothing: ``status`` error, ``error_kind`` ``kind`` (``no_pairs`` |
    ``tool_missing``), ``error_class`` harness; the fabric was not tested."""
    return PairResult(f"{PREFIX}{name}", "ib verification", sm, None, verdict="fail", status="error", error=f"{sm}: {why}",
                      reasons=[why], error_kind=kind, error_class=error_class(kind))


def is_ib(result: dict) -> bool:
    """Whether ``result`` (a PairResult dict) is an IB verdict (named :data:`PREFIX` ...), not a RoCE pair."""
    return str(result.get("pair")).startswith(PREFIX)


def check_kind(result: dict) -> str:
    """What an IB verdict (a PairResult dict) checked: ``pkeys`` (:func:`judge_pkeys`), ``path``
    (:func:`judge_paths`) or ``harness`` (:func:`harness`: nothing could be read)."""
    if result.get("error_class") == "harness":
        return "harness"
    return "pkeys" if result.get("path") == "smpquery pkeys" else "path"


def failed_words(results: list[dict], shown: int = 3) -> str:
    """Up to ``shown`` failed IB verdicts of ``results`` (a batch's result dicts; RoCE pairs and the
    harness's errors left out), each with its first reason, the evidence read:
    ``; ib Default 0x7fff pkeys: node01 mlx5_0/1: 0x7fff limited, want full (...) (+15 more)``;
    ``""`` when none failed."""
    bad = [x for x in results if str(x.get("pair")).startswith(PREFIX) and x.get("status") != "pass"
           and x.get("error_class") != "harness"]
    return "".join(f"; {x['pair']}: {(x.get('reasons') or [x.get('status')])[0]}"
                   + (f" (+{len(x['reasons']) - 1} more)" if len(x.get("reasons") or []) > 1 else "")
                   for x in bad[:shown])


def summarise(results: list[dict]) -> str | None:
    """One line about the IB verdicts among a batch's ``results`` (dicts), for people, beside the RoCE
    pairs' ``N/N pairs passed``: ``17/17 checks passed``, or ``1/17 checks failed`` with
    :func:`failed_words` and how many the harness kept from running; None when the batch has none."""
    ib = [x for x in results if str(x.get("pair")).startswith(PREFIX)]
    if not ib:
        return None
    bad = [x for x in ib if x.get("status") != "pass"]
    if not bad:
        return f"{len(ib)}/{len(ib)} checks passed"
    harness_n = sum(1 for x in bad if x.get("error_class") == "harness")
    return (f"{len(bad)}/{len(ib)} checks failed" + failed_words(bad)
            + (f" ({harness_n} not run: the verification harness failed)" if harness_n else ""))


def lines(results: list[dict]) -> list[str]:
    """One line per IB verdict among ``results`` (dicts) with its evidence, then :func:`summarise`'s:
    ``ib tenant1 0x0001 pkeys: pass: smpquery pkeys: 16 member port(s) hold 0x0001 ...`` (the first
    judged value on a pass, every reason on a fail, the harness's error naming the SM); [] when there is none."""
    ib = [x for x in results if str(x.get("pair")).startswith(PREFIX)]
    said = [x.get("judged") if x.get("status") == "pass" else [x["error"]] if x.get("error") else x.get("reasons") or []
            for x in ib]
    out = [f"{x['pair']}: {x.get('status')}: {'; '.join(why)}" for x, why in zip(ib, said)]
    return out + [f"InfiniBand verification: {summarise(ib)}"] if ib else []


def judge_pkeys(sm: str, it: Intent, names: dict[str, str], tables: dict[str, dict[str, str]]) -> PairResult:
    """``it``'s members against the tables read (``tables``: GUID -> table; ``names``: GUID -> port
    name): pass naming how many full and limited members hold the pkey, else fail naming each port,
    what it holds and what it should."""
    word, bad = pkey_word(it.pkey), []
    if it.source == REMOVED:
        bad = [f"{names.get(g, g)}: holds {word} ({t[word]}), the partition was removed" for g, t in tables.items()
               if word in t]
        return _result(it.name, "smpquery pkeys", not bad, bad or [f"smpquery pkeys of {len(tables)} port(s): none "
                                                                  f"holds {word}"])
    if not it.members:
        return harness(sm, f"{it.name} {word} pkeys", "no_pairs", f"partition {it.name}: no member port in the fabric")
    for g, how in sorted(it.members.items(), key=lambda x: names.get(x[0], x[0])):
        read = tables[g].get(word) if g in tables else "no Active port (iblinkinfo)"
        if read != how:
            was = (" (full before the run: it cannot talk to other limited members)"
                   if it.source != "inventory" and how == "full" else "")
            bad.append(f"{names.get(g, g)}: {word} {read or 'absent'}, want {how}{was}")
    full = sum(1 for how in it.members.values() if how == "full")
    said = bad or [f"smpquery pkeys: {len(it.members)} member port(s) hold {word} as intended ({it.source}): {full} "
                   f"full ({0x8000 | it.pkey:#06x}), {len(it.members) - full} limited ({it.pkey:#06x})"]
    return _result(f"{it.name} {word} pkeys", "smpquery pkeys", not bad, said)


def path_plan(it: Intent, ports: dict) -> tuple | None:
    """``(hub, others)``: the first full member port (by name) and every other member port that is
    in the fabric (``ports``: GUID -> port); None when there is no such pair."""
    here = sorted((ports[g] for g in it.members if g in ports), key=lambda p: p.name)
    hub = next((p for p in here if it.members[f"{p.guid:#018x}"] == "full"), None)
    others = [p for p in here if p is not hub]
    return (hub, others) if hub is not None and others else None


def judge_paths(it: Intent, hub, others: list, records: list, caps: dict[str, int]) -> list[PairResult]:
    """One verdict per pair hub -> member from the hub's path records in the partition (``records``:
    :class:`~tuning.parsers.ib_sm.IbPathRecord`) and the ports' MtuCap (``caps``: GUID -> bytes)."""
    pk, out = 0x8000 | it.pkey, []
    by_dlid = {r.dlid: r for r in records if r.slid == hub.lid}
    for m in others:
        ev = f"saquery PR --src-to-dst {hub.lid}:{m.lid} --pkey {pk:#06x}"
        r = by_dlid.get(m.lid)
        ends = (hub.name, m.name)
        if r is None:
            out.append(_result(f"{it.name} {hub.name} -> {m.name}", ev, False, [f"{ev}: no path record (the pair "
                                                                                "cannot talk in the partition)"], ends))
            continue
        cap = min(caps[f"{hub.guid:#018x}"], caps[f"{m.guid:#018x}"])
        want = None if it.mtu_bytes is None else min(it.mtu_bytes, cap)
        bad = ([f"mtu {r.mtu_bytes}, want {want} (mtu {it.mtu_bytes} capped by the ends' MtuCap {cap})"]
               if want is not None and r.mtu_bytes != want else [])
        bad += [f"sl {r.sl}, want {it.sl}"] if it.sl is not None and r.sl != it.sl else []
        said = [f"{ev}: mtu {r.mtu_bytes} (MtuCap {cap}), sl {r.sl}" + (": " + "; ".join(bad) if bad else "")]
        out.append(_result(f"{it.name} {hub.name} -> {m.name}", ev, not bad, said, ends,
                           mtu_bytes=r.mtu_bytes, mtu_allowed=want))
    return out
