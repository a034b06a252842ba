"""The InfiniBand verification of an OpenSM change (:mod:`tuning.verify.ib_sm` judges, this module
reads): which partitions a run's plan makes it prove and what each must hold (from the SM's policy,
:mod:`tuning.targets.sm_partitions`), read through the :class:`~tuning.targets.sm.SmTarget`'s own
readers (``iblinkinfo``, ``smpquery pkeys`` as its read back, ``smpquery portinfo``, ``saquery PR``).
The rollout gate calls :func:`prove` for each subnet manager a batch changed
(:func:`tuning.rollout.gate.verify_sm`), with the SM's plan and journal record; the stand-alone
``fabtune verify`` calls the same :func:`prove` without them (:func:`verify_sms`): every partition the
inventory defines, against what OpenSM programs from it.
"""

from __future__ import annotations

from tuning.errors import SetupError
from tuning.model.ib_sm import DEFAULT_PKEY, SmSpec
from tuning.parsers.ib_sm import MTUS
from tuning.targets import sm_partitions as sp
from tuning.targets import sm_qos as sq
from tuning.targets.sm import SmTarget
from tuning.verify import ib_sm as ib


def _changed(spec: SmSpec, ports: list[sp.CaPort], changes: list) -> set[int]:
    """The pkeys the plan ``changes``: a port's membership moves, its definition in the file differs, or
    a new QoS policy file gives it an SL."""
    pkeys = {int(c.key.rpartition("/")[2], 16) for c in changes if c.key.startswith("pkey/")}
    if any(c.key == sq.FILE_KEY for c in changes):  # a new QoS policy: the SLs of its pkeys' paths
        pkeys |= set(sq.sls(spec)) & {p.pkey for p in spec.partitions}
    before = next((c.before or "" for c in changes if c.key == sp.FILE_KEY), None)
    if before is not None:
        for part in spec.partitions:
            body = sp.render(spec.model_copy(update={"partitions": [part]}), ports).split("\n", 1)[1]
            if body not in before:
                pkeys.add(part.pkey)
    return pkeys


def intents(spec: SmSpec, ports: list[sp.CaPort], changes: list | None,
            before: dict[str, sp.Table] | None) -> list[ib.Intent]:
    """The partitions to prove (:mod:`tuning.verify.ib_sm`), in pkey order: those ``changes`` touches and the
    Default one. ``before``: port GUID -> pkey table before the run (the journal's ``pkeys_before``).
    A partition the plan removes is proven absent (no member). A partition's SL is the QoS policy's
    for its pkey when the inventory has one (:func:`tuning.targets.sm_qos.sls`), else its own. ``changes`` None (a stand-alone
    verification, no run): every partition the inventory defines, the Default one only when it does
    ([] for an inventory that defines none). Raises InputError (as
    :func:`tuning.targets.sm_partitions.render`)."""
    want = sp.expected_tables(spec, ports)
    by_pkey = {p.pkey: p for p in spec.partitions}
    out = []
    todo = set(by_pkey) if changes is None else _changed(spec, ports, changes) | {DEFAULT_PKEY}
    for pkey in sorted(todo):
        word, part = sp.pkey_word(pkey), by_pkey.get(pkey)
        if part is not None:
            members = {g: t[word] for g, t in want.items() if word in t}
            sl = sq.sls(spec).get(pkey, part.sl)  # the QoS policy's SL wins over the partition's (measured)
            out.append(ib.Intent(part.name, pkey, members, MTUS.get(part.mtu), sl, "inventory"))
        elif pkey == DEFAULT_PKEY:
            members = {g: t[word] for g, t in before.items() if word in t}
            out.append(ib.Intent("Default", pkey, members, None, None, "before the run"))
        else:
            out.append(ib.Intent(f"removed {word}", pkey, {}, None, None, ib.REMOVED))
    return out


def prove(target: SmTarget, spec: SmSpec, record: dict | None = None, changes: list | None = None) -> list:
    """The IB verification of one SM (``target``: an open :class:`tuning.targets.sm.SmTarget`) after
    its push: ``record`` its journal record (the snapshot's ``pkeys_before``), ``changes`` its plan;
    both None: a stand-alone verification of the inventory's partitions (:func:`intents`).
    One round trip per kind of read: ``iblinkinfo``, ``smpquery pkeys`` of the member ports,
    ``smpquery portinfo`` and ``saquery PR`` (one per member pair of a partition asking an mtu or sl).

    Returns:
        verdicts: one ``pkeys`` result per partition, one per hub -> member path, harness errors
        (``no_pairs``, ``tool_missing``) for a check that ran nothing (an inventory that defines no
        partition, in a stand-alone verification: nothing to prove, ``no_pairs``).

    Raises:
        TuningError: a read failed on the SM host (CommandError, ParseError): the run restores.
    """
    sm = target.name
    try:
        ports = {f"{p.guid:#018x}": p for p in target.read_ports()}
        wanted = intents(spec, list(ports.values()), changes, record["snapshot"]["pkeys_before"] if record else None)
        if not wanted:
            return [ib.harness(sm, "verification", "no_pairs", "the inventory defines no partition for it: nothing "
                               "to verify (a check that ran nothing fails)")]
        names = {g: p.name for g, p in ports.items()}
        removed = any(it.source == ib.REMOVED for it in wanted)
        read = sorted(ports) if removed else sorted({g for it in wanted for g in it.members} & set(ports))
        tables = target.read_pkeys(read)
        out = [ib.judge_pkeys(sm, it, names, tables) for it in wanted]
        return out + _paths(target, [it for it in wanted if it.mtu_bytes is not None or it.sl is not None], ports)
    except SetupError as e:
        return [ib.harness(sm, "verification", "tool_missing", e.message)]


def _paths(target: SmTarget, wanted: list[ib.Intent], ports: dict[str, sp.CaPort]) -> list:
    """The path verdicts of the partitions asking an mtu or sl (:func:`tuning.verify.ib_sm.judge_paths`); a partition
    without a member pair is a ``no_pairs`` harness error."""
    plans = {it.name: ib.path_plan(it, ports) for it in wanted}
    out = [ib.harness(target.name, f"{it.name} paths", "no_pairs", f"partition {it.name}: no full member with "
                      "another member in the fabric: no path record to read") for it in wanted if plans[it.name] is None]
    todo = [it for it in wanted if plans[it.name] is not None]
    if not todo:
        return out
    ends = sorted({f"{p.guid:#018x}" for it in todo for hub, others in [plans[it.name]] for p in [hub, *others]})
    caps = target.read_mtu_caps(ends)
    # one query a pair: a GetTable from the hub alone (``--slid``) answers a few paths only (measured)
    records = target.read_path_records({f"{it.pkey}:{m.lid}": f"--src-to-dst {plans[it.name][0].lid}:{m.lid} "
                                        f"--pkey {0x8000 | it.pkey:#06x}" for it in todo for m in plans[it.name][1]})
    for it in todo:
        hub, others = plans[it.name]
        out += ib.judge_paths(it, hub, others, [r for m in others for r in records[f"{it.pkey}:{m.lid}"]], caps)
    return out


def prove_said(target: SmTarget, spec: SmSpec, progress, record: dict | None = None,
               changes: list | None = None) -> list:
    """:func:`prove`, saying through ``progress`` what it reads and how many checks passed (a rollout's
    gate and a stand-alone verification print the same two lines)."""
    progress(f"verify: {target.name}: partitions' pkey tables (smpquery) and path records (saquery PR)")
    got = prove(target, spec, record, changes)
    progress(f"verify: {target.name}: {sum(x.status == 'pass' for x in got)}/{len(got)} IB check(s) passed")
    return got


def verify_sms(devices: list, progress) -> list:
    """The stand-alone IB verification (``fabtune verify``) of the subnet managers ``devices``
    (inventory Devices with an :class:`~tuning.model.ib_sm.SmSpec`): each SM Target opened, proven
    with :func:`prove` (no plan: every partition its inventory defines), closed.

    Returns:
        The verdicts (:class:`~tuning.verify.pair_result.PairResult`) of every SM, in ``devices`` order.

    Raises:
        ConnectError: an SM host did not answer; TuningError: a read failed there (as :func:`prove`).
    """
    from tuning.targets import target_for

    out = []
    for dev in devices:
        t = target_for(dev)
        t.open()
        try:
            out += prove_said(t, dev.spec, progress)
        finally:
            t.close()
    return out
