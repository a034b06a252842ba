"""OpenSM's QoS policy file (``qos-policy.conf``) from the inventory's :class:`tuning.model.ib_sm.IbQosSpec`,
pure, and what a push of it must read back (issue 22).

The file, as OpenSM 3.3.23 parses it (``osm_qos_parser_y.y``; every form below measured on the IB
lab's OpenSM with ``qos TRUE``)::

    # fabtune: OpenSM QoS policy, rendered from the inventory (...)
    qos-ulps
        default : 0
        any, pkey 0x0001 : 3
    end-qos-ulps

One ``qos-ulps`` section: ``default : N`` (required: without it OpenSM logs ``ERR AC10: Default
qos-level (default) not defined`` and refuses the file) and one ``any, pkey P : N`` per rule. OpenSM
reads the file at every heavy sweep (SIGHUP starts one, as for ``partitions.conf``); a rule's SL
reaches the path records of its partition (``saquery PR --pkey``) and wins over the partition's own
``sl=`` (measured: ``sl=5`` with a rule ``: 3`` gives SL 3); a path no rule matches carries the
default. A file OpenSM refuses (``yyerror: ERR AC05: Syntax error ...``, ``osm_qos_parse_policy_file:
ERR AC03`` / ``AC04``) leaves every path at SL 0: :data:`ERRORS` are always the push's own.

The policy's ``ca_sl2vl`` (the VL of each SL on an HCA port) is opensm.conf's ``qos_ca_sl2vl`` line
(``qos_ca_sl2vl 0,1,2,3,4,5,6,7,0,1,2,3,4,5,6,7``; the installed template says ``(null)``: OpenSM's own
default), planned as that line's change (:data:`SL2VL_KEY`), written in opensm.conf with the push's other
files, and read back on every HCA port's SL2VL table (``smpquery sl2vl``, :func:`read_back_sl2vl`).
Measured on the lab's OpenSM (``qos TRUE``): a SIGHUP's heavy sweep re-reads the line and programs it
into each CA port (``qos_sl2vl`` into the switches' and, without ``qos_ca_sl2vl``, the CAs'); with ``qos
FALSE`` OpenSM programs none (ibsim's ports keep ``0..14, 7``).
"""

from __future__ import annotations

import time

from tuning.errors import VerifyError
from tuning.model.ib_sm import DEFAULT_PKEY, SmSpec, pkey_word
from tuning.node.base import Change, Finding

FILE_KEY = "file/qos-policy.conf"
#: the plan key of opensm.conf's ``qos_ca_sl2vl`` line (its value: 16 comma-separated VLs)
SL2VL_KEY = "qos_ca_sl2vl"
HEADER = "# fabtune: OpenSM QoS policy, rendered from the inventory (do not edit: fabtune plan shows the diff)"
#: OpenSM's QoS parser's ERROR lines (the log's ``0x01 -> `` messages): a refused policy file
ERRORS = ("yyerror", "osm_qos_policy_validate", "osm_qos_parse_policy_file: ERR AC03",
          "osm_qos_parse_policy_file: ERR AC04")


def render(spec: SmSpec) -> str:
    """The ``qos-policy.conf`` text of ``spec.qos_policy`` (module docstring); the spec must have one."""
    pol = spec.qos_policy
    rules = [f"    any, pkey {pkey_word(u.pkey)} : {u.sl}" for u in pol.ulps]
    return "\n".join([HEADER, "qos-ulps", f"    default : {pol.default_sl}", *rules, "end-qos-ulps"]) + "\n"


def plan(name: str, spec: SmSpec, files: dict[str, str | None], domain: str) -> list[Change]:
    """The file's change (whole text; ``before`` None when absent) and opensm.conf's ``qos_ca_sl2vl``
    line's (:data:`SL2VL_KEY`: ``before`` the line's value, ``(null)`` as the template has it, None when
    absent) from ``files`` (path -> text, as :meth:`tuning.targets.sm.SmTarget.collect` read them); [] without
    a ``qos_policy`` or when both are as the policy says."""
    if spec.qos_policy is None:
        return []
    text, have = render(spec), files.get(spec.opensm_qos_policy_file)
    out = [] if text == have else [Change(name, domain, FILE_KEY, have, text)]
    if spec.qos_policy.ca_sl2vl is not None:
        want, now = ",".join(map(str, spec.qos_policy.ca_sl2vl)), conf_value(files.get(spec.opensm_conf_file), SL2VL_KEY)
        out += [] if now == want else [Change(name, domain, SL2VL_KEY, now, want)]
    return out


def conf_value(conf: str | None, key: str) -> str | None:
    """The value of opensm.conf's ``key`` line (``qos_ca_sl2vl 0,1,...`` -> ``0,1,...``; ``conf``: the
    file's text), None when the file or the line is absent."""
    return next((x.split(None, 1)[1].strip() for x in (conf or "").splitlines()
                 if x.split()[:1] == [key] and len(x.split()) > 1), None)


def set_conf_line(conf: str, key: str, value: str) -> str:
    """opensm.conf's text with its ``key`` line set to ``key value`` (appended when it has none)."""
    lines, line = conf.splitlines(), f"{key} {value}"
    at = next((i for i, x in enumerate(lines) if x.split()[:1] == [key]), None)
    return "\n".join(lines + [line] if at is None else lines[:at] + [line] + lines[at + 1:]) + "\n"


def findings(name: str, spec: SmSpec, conf: str, domain: str) -> list[Finding]:
    """``ib-qos-off`` when the inventory has a QoS policy and opensm.conf (``conf``, its text) does not
    say ``qos TRUE`` (OpenSM's default is FALSE, ``opensm(8)``): OpenSM then ignores the policy file,
    and a push of it fails its read back (its SLs never reach the path records); ``ib-sl-vl15`` when the
    policy's ``ca_sl2vl`` maps an SL it uses (:func:`used_sls`) to VL 15, the management VL (IBA: a data
    packet whose SL maps to VL 15 is dropped), so jobs on that SL send nothing; mapping unused SLs there is fine."""
    if spec.qos_policy is None:
        return []
    out, pol = [], spec.qos_policy
    dropped = [sl for sl in used_sls(spec) if pol.ca_sl2vl is not None and pol.ca_sl2vl[sl] == 15]
    if dropped:
        out.append(Finding(name, domain, "ib-sl-vl15", f"the QoS policy's ca_sl2vl maps SL {', '.join(map(str, dropped))} "
                           "(used by its rules, its default or a partition) to VL 15, the management VL: the HCAs drop "
                           "data sent on it", f"qos_ca_sl2vl {','.join(map(str, pol.ca_sl2vl))}"))
    line = next((x.strip() for x in conf.splitlines() if x.split()[:1] == ["qos"]), None)
    if line is not None and line.split()[1:] == ["TRUE"]:
        return out
    return out + [Finding(name, domain, "ib-qos-off", "the inventory gives a QoS policy (qos_policy) but OpenSM runs with "
                          "qos off: it ignores the policy file, its SLs reach no path record (opensm.conf needs 'qos TRUE')",
                          f"opensm.conf: {line or 'no qos line (OpenSM defaults to FALSE)'}")]


def used_sls(spec: SmSpec) -> list[int]:
    """The SLs ``spec`` puts traffic on, sorted: its QoS policy's default and rules, and the partitions' ``sl``."""
    pol = spec.qos_policy
    sls = ({pol.default_sl, *(u.sl for u in pol.ulps)} if pol is not None else set())
    return sorted(sls | {p.sl for p in spec.partitions if p.sl is not None})


def sls_of(text: str) -> dict[int, int]:
    """pkey -> the SL a file :func:`render` wrote gives its paths: every rule's, and the Default
    partition's (the ``default`` line) unless a rule names it."""
    want = {DEFAULT_PKEY: int(text.split("\n    default : ", 1)[1].split("\n", 1)[0])}
    rules = [x.strip()[len("any, pkey "):].split(" : ") for x in text.splitlines() if x.startswith("    any, pkey ")]
    return {**want, **{int(pk, 16): int(sl) for pk, sl in rules}}


def sls(spec: SmSpec) -> dict[int, int]:
    """pkey -> SL of ``spec``'s policy (:func:`sls_of` of :func:`render`); {} without a policy."""
    return sls_of(render(spec)) if spec.qos_policy is not None else {}


def read_back_sl2vl(target, want: dict[str, list[int]],
                    whose: str = "opensm.conf's qos_ca_sl2vl (is its qos TRUE?)") -> None:
    """After a push of a ``qos_ca_sl2vl`` line, or a restore: every HCA port of ``want`` (port GUID ``0x...``
    -> its SL2VL row, the VL of SL 0..15) holds that row (``smpquery sl2vl``, one command, a few reads:
    OpenSM programs the ports during its sweep; ``target``: the open :class:`~tuning.targets.sm.SmTarget`;
    ``whose``: where the rows come from, for the error).

    Raises:
        VerifyError: a port with another row (names it, what it holds and the row wanted).
        TuningError: a read failed (as :meth:`~tuning.targets.sm.SmTarget.run_diag`).
    """
    for _ in range(5):
        tables = target.read_sl2vl(sorted(want))
        bad = {g: t.rows.get((0, 0)) for g, t in tables.items() if t.rows.get((0, 0)) != want[g]}
        if not bad:
            return
        time.sleep(0.3)
    g, have = next(iter(sorted(bad.items())))
    raise VerifyError(f"{len(bad)} HCA port(s) hold another SL2VL table than {whose}; {g}: smpquery sl2vl reads "
                      f"{have}, want {want[g]}", host=target.name, phase="sm")


def read_back(target, text: str) -> None:
    """After a push of ``text`` (a rendered file): each pkey's path record between two ports holding it
    (one full) carries the SL the file gives (``saquery PR``, one command; ``target``: the open
    :class:`~tuning.targets.sm.SmTarget`). A pkey fewer than two ports hold has no path to read.

    Raises:
        VerifyError: a path with another SL, or none (names the pkey, the record and the SL wanted).
        TuningError: a read failed (as :meth:`~tuning.targets.sm.SmTarget.run_diag`).
    """
    want = sls_of(text)
    ports = target.read_ports()
    tables = target.read_pkeys([f"{p.guid:#018x}" for p in ports])
    queries = {}
    for pkey, sl in want.items():
        holders = [p for p in ports if pkey_word(pkey) in tables.get(f"{p.guid:#018x}", {})]
        full = next((p for p in holders if tables[f"{p.guid:#018x}"][pkey_word(pkey)] == "full"), None)
        other = next((p for p in holders if p is not full), None)
        if full is not None and other is not None:
            queries[str(pkey)] = f"--src-to-dst {full.lid}:{other.lid} --pkey {0x8000 | pkey:#06x}"
    read = target.read_path_records(queries)
    bad = [f"{pkey_word(int(k))}: saquery PR {q}: " + (f"sl {read[k][0].sl}" if read[k] else "no path record")
           + f", want {want[int(k)]}" for k, q in queries.items() if not read[k] or read[k][0].sl != want[int(k)]]
    if bad:
        raise VerifyError(f"OpenSM does not serve the QoS policy's SLs (is opensm.conf's qos TRUE and its "
                          f"qos_policy_file this file?): {'; '.join(bad[:3])}", host=target.name, phase="sm")
