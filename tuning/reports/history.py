"""Past runs, from their journals alone: ``fabtune runs`` and ``fabtune report RUN_ID``.

A journal (:mod:`tuning.rollout.journal`) is written by every apply that changes something and
by every rollout (one with nothing to change too: its baseline verification and outcome
``no-change``); it holds the run's mode, inventory, start time, stage events (each with its
time), outcome, policy, per device the planned changes, state and ``restored`` flag, the
batches (how each was formed, its push phases and their order, outcome, per-batch results),
the verification before and after (each pair's final result), the incasts, the verdict and the
restored devices' re-verification. :func:`load` turns one back into the RunReport the run
printed (and the report document, :mod:`tuning.reports.json_report`); a plan, or an apply with
nothing to change, writes no journal and so is not listed.

What a journal does not keep is said, not invented: the error text of a device whose apply
failed (the report says the device failed and that the text was not journaled), the findings,
and the pass marks the run was judged by (``thresholds`` is null; each pair's reasons carry the
values it failed by; ``policy`` holds the rollout's own ``thresholds``). Durations are the run's own
``seconds`` as it printed them (the engine writes them into the journal at its end, from the run's
start); a journal without them (the Ansible front end's, an older one) runs from its ``started``
to its last event.
"""

from __future__ import annotations

from pathlib import Path

from tuning.model.outcomes import DeviceState, RunOutcome
from tuning.rollout.journal import K8S_HOLDS_KEY, SLURM_HOLDS_KEY, SLURM_REQUEST_KEY

#: the error text of a failed device in a report rebuilt from its journal
NO_TEXT = "apply failed on this device (the journal keeps no error text; see the run's own output)"


def _last_event(doc: dict) -> float | None:
    """Time of the journal's last event (epoch seconds), None when it has none."""
    events = [e for e in doc.get("events") or [] if isinstance(e, list) and len(e) == 3
              and isinstance(e[2], (int, float)) and not isinstance(e[2], bool)]
    return float(events[-1][2]) if events else None


def _finished(doc: dict) -> float | None:
    """Time of the journal's last event (epoch seconds), None when it has none or no outcome yet."""
    return _last_event(doc) if doc.get("outcome") is not None else None


def _seconds(doc: dict, end: float | None) -> float | None:
    """The run's duration: its own ``seconds`` (written at its end), else ``end - started``; None
    without an ``end`` (an unfinished run)."""
    if end is None:
        return None
    own = doc.get("seconds")
    if isinstance(own, (int, float)) and not isinstance(own, bool):
        return own
    return round(end - doc["started"], 2) if doc.get("started") else None


def _n_changes(doc: dict) -> int:
    """Setting changes the run pushed: those of devices with a journaled state (a device whose
    batch never ran has none)."""
    return sum(len(rec.get("changes") or []) for rec in doc["devices"].values()
               if isinstance(rec, dict) and rec.get("state"))


def rows(journal_dir: Path, last: int = 20) -> list[dict]:
    """The newest ``last`` runs, oldest first, for ``fabtune runs``.

    Returns:
        :func:`tuning.rollout.journal.list_runs` rows (``run_id``, ``mode``, ``stage``, ``outcome``,
        ``touched``, ``inventory``) plus ``started`` (ISO 8601 UTC), ``seconds`` (the run's own
        duration, the journal's ``seconds`` as the run printed it; else from its ``started`` to its
        last event; None while unfinished), ``n_changes`` (setting changes pushed to the run's
        devices), ``engine`` (:func:`engine_of`) and ``holds`` (:func:`holds_left`); None (holds
        ``[]``) for an unreadable journal.

    Raises:
        InputError: ``last`` below 1.
    """
    from tuning.reports.json_report import iso_utc
    from tuning.rollout.journal import list_runs, read_doc

    out = []
    for r in list_runs(journal_dir, last):
        extra: dict = {"started": None, "seconds": None, "n_changes": None, "engine": None, "holds": []}
        doc = read_doc(journal_dir / f"{r['run_id']}.json")[0] if r["stage"] != "unreadable" else None
        if doc is not None:
            start, end = doc.get("started"), _finished(doc)
            extra = {"started": iso_utc(start) if isinstance(start, (int, float)) and start else None,
                     "seconds": _seconds(doc, end), "n_changes": _n_changes(doc), "engine": engine_of(doc),
                     "holds": holds_left(doc)}
        out.append({**r, **extra})
    return out


def engine_of(doc: dict) -> str:
    """The engine that ran a journaled run: its ``engine`` (``slurm``, ``k8s``), ``ansible`` for the
    Ansible front end's journal, else ``ssh`` (the Nornir engine)."""
    if isinstance(doc.get("engine"), str):
        return doc["engine"][:20]
    return "ansible" if isinstance(doc.get("ansible"), dict) else "ssh"


def holds_left(doc: dict) -> list[str]:
    """What the run still holds outside its devices, as its journal says (a killed controller's:
    ``fabtune rollback RUN_ID`` ends them): ``Slurm job 42 (node01, node02)``, ``NodeMaintenance
    fabtune/NAME (node01)``, ``ConfigMap fabtune/fabtune-plan``."""
    def d(v: object) -> dict:
        return v if isinstance(v, dict) else {}

    def seq(v: object) -> list:
        return v if isinstance(v, list) else []

    out = [f"Slurm job {str(job)[:20]} ({', '.join(map(str, seq(d(rec).get('nodes'))))[:200]})"
           for job, rec in d(doc.get(SLURM_HOLDS_KEY)).items()]
    if SLURM_REQUEST_KEY in doc:  # salloc was waiting when the controller ended: Slurm may grant it later
        out.append(f"a Slurm allocation asked for ({', '.join(map(str, seq(doc[SLURM_REQUEST_KEY])))[:200]})")
    k8s = d(doc.get(K8S_HOLDS_KEY))
    ns = str(k8s.get("namespace"))[:63]
    out += [f"NodeMaintenance {str(d(rec).get('namespace') or ns)[:63]}/{str(d(rec).get('name'))[:253]} "
            f"({str(node)[:253]})" for node, rec in d(k8s.get("holds")).items()]  # a joined hold: its owner's namespace
    return out + [f"ConfigMap {ns}/{str(c)[:253]}" for c in seq(k8s.get("configmaps"))]


def _verdict(results: list[dict]) -> bool:
    return all(r.get("verdict") == "pass" for r in results)


def _outcome(raw: object) -> str:
    """A journal's outcome as a report outcome: None is ``unfinished``; ``fabtune rollback`` writes
    ``rolled-back (fabtune rollback)``, which is ``rolled-back``; anything else unknown is ``error``."""
    from tuning.reports.json_report import RUN_OUTCOMES

    if raw is None:
        return "unfinished"
    text = str(raw)
    if text.startswith("rolled-back"):
        return "rolled-back"
    return text if text in RUN_OUTCOMES else "error"


def report_of(doc: dict, kept: dict[str, list[dict]]):
    """The RunReport a journal document stands for (see the module docstring for what is missing).

    Args:
        doc: a validated journal document.  kept: :func:`tuning.rollout.rollback.kept_changes` of it.
    """
    from tuning.rollout.run_report import RunReport

    devices = {n: rec for n, rec in doc["devices"].items() if isinstance(rec, dict)}
    rep = RunReport(doc["run_id"], doc.get("mode") or "unknown", outcome=_outcome(doc.get("outcome")))
    rep.changes = {n: list(rec["changes"]) for n, rec in devices.items() if rec.get("changes")}
    rep.not_run = sorted(n for n in rep.changes if not devices[n].get("state"))  # never pushed
    rep.restored = sorted(n for n, rec in devices.items() if rec.get("restored"))
    rep.errors = {n: NO_TEXT for n, rec in devices.items() if rec.get("state") == DeviceState.FAILED}
    rep.kept = kept
    _verification(rep, doc.get("verify") if isinstance(doc.get("verify"), dict) else {})
    rep.batches = [b for b in doc.get("batches") or [] if isinstance(b, dict)]
    rep.unreachable = sorted({n for b in rep.batches for n in b.get("unreachable") or []})
    for n in rep.unreachable:
        rep.errors.pop(n, None)  # did not answer: counted apart from the failed
    rep.incast = [x for x in doc.get("incast") or [] if isinstance(x, dict)]
    rep.policy = doc.get("policy") if isinstance(doc.get("policy"), dict) else None
    rep.restored_verified = doc.get("restored_verified")
    if "verify_ok" in doc:  # the run's own verdict (incasts included)
        rep.verify_ok = doc["verify_ok"]
    elif rep.verify_after:  # journals written before the verdict was journaled
        rep.verify_ok = _verdict(rep.verify_after)
    elif rep.outcome == RunOutcome.NO_CHANGE and rep.verify_before:
        rep.verify_ok = _verdict(rep.verify_before)
    end = _last_event(doc)  # an unfinished run: how long it ran until its last journaled event
    rep.seconds = _seconds(doc, end) or 0.0  # its own seconds exist once it ended
    why = next((e[1] for e in reversed(doc.get("events") or []) if isinstance(e, list) and len(e) == 3
                and e[0] == "restore" and e[1]), None)
    engine_restored = doc.get("outcome") in (RunOutcome.ROLLED_BACK, RunOutcome.HALTED)  # not `fabtune rollback` afterwards
    if engine_restored and why and not rep.errors and rep.verify_ok is not False:
        rep.errors["run"] = why  # nothing else says why the run was restored
    if rep.outcome == RunOutcome.ERROR:
        rep.errors["run"] = f"the journal's outcome is {str(doc.get('outcome'))[:80]!r}"
    return rep


def _verification(rep, verify: dict) -> None:
    """The journal's verification into ``rep``: pairs before/after and nccl-tests jobs before/after
    and after a restore (entries that are not objects are left out)."""
    for name, key in (("verify_before", "before"), ("verify_after", "after"), ("nccl_before", "nccl_before"),
                      ("nccl_after", "nccl_after"), ("nccl_restored", "nccl_restored")):
        setattr(rep, name, [x for x in verify.get(key) or [] if isinstance(x, dict)])


def load(journal_dir: Path, run_id: str):
    """A past run: ``(RunReport, report document)`` from its journal alone.

    The document's ``command`` is ``report``; ``exit_code`` is the code the run exited with
    (null for an unfinished run: it has none yet, or its controller died).

    Raises:
        InputError: no such run, an untrusted or unreadable journal (:meth:`Journal.load`).
    """
    from tuning.reports import exit_code
    from tuning.reports.json_report import Context, build
    from tuning.rollout.journal import Journal
    from tuning.rollout.rollback import kept_changes

    j = Journal.load(journal_dir, run_id)
    rep = report_of(j.data, kept_changes(j))
    ctx = Context("report", j.data.get("inventory"),
                  {n: rec.get("role", "unknown") for n, rec in j.data["devices"].items() if isinstance(rec, dict)},
                  started=float(j.data.get("started") or 0.0), finished=_finished(j.data),
                  baseline={r["pair"]: r for r in rep.verify_before if not r.get("error")},
                  exit_code=None if rep.outcome == RunOutcome.UNFINISHED else exit_code(rep))
    return rep, build(rep, ctx)
