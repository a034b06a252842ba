"""A plan file: the changes a controller planned, which a node pushes exactly or not at all
(``fabtune node apply --plan FILE``) and checks later (``fabtune node verify --plan FILE``).

The file is a ``fabtune plan --json`` report (:func:`tuning.cli_emit.dump_report`): an object
whose ``changes`` maps each device to its change objects (:meth:`tuning.node.base.Change.as_dict`),
with an optional ``run_id``. A person can review such a file and hand it to ``node apply``; the
Slurm and Kubernetes front ends write one per batch (:func:`write`) beside the run's journal,
the folder their nodes already share.

A node never takes a value from the file: it plans itself from the inventory with the same code,
and pushes only when its own plan equals the file's for this node, change for change
(:data:`COMPARED`). Values in the inventory have passed the model's grammars; a file's would not
have. A difference is :class:`StalePlanError` before anything is written: the node changed since
the plan was made, or the inventory did.
"""

from __future__ import annotations

import json
from pathlib import Path

from tuning.errors import InputError, TuningError

#: what must agree between the file's change and the node's own (the commands carry the sysroot
#: the planner saw, which differs between a controller and the node itself)
COMPARED = ("domain", "key", "before", "after")

#: the longest setting key a plan file may hold (a file path under /etc, a sysctl name)
KEY_MAX = 512

#: the folder, beside the run's journal, holding the plans a front end wrote for its nodes
FOLDER = "{run_id}.plans"


class StalePlanError(TuningError):
    """The node's own plan differs from the plan file's: nothing was written (exit 1, a failed push
    that left the node as it was). ``differences``: one line per differing key."""

    exit_code = 1

    def __init__(self, node: str, differences: list[str]):
        self.differences = differences
        shown = "; ".join(differences[:4]) + (f"; and {len(differences) - 4} more" if len(differences) > 4 else "")
        super().__init__(f"the node is not as planned, nothing written (plan again): {shown}", host=node, phase="plan")


def path_for(journal_dir: Path, run_id: str, tag: str) -> Path:
    """Where a front end's plan of one step lives: ``JOURNAL_DIR/RUN_ID.plans/TAG.json``
    (``tag``: ``apply-b1``; both already checked by their grammars)."""
    return Path(journal_dir) / FOLDER.format(run_id=run_id) / f"{tag}.json"


def write(path: Path, run_id: str, changes: dict[str, list[dict]]) -> Path:
    """Write ``changes`` (``{node: [change dicts]}``) as a plan report of ``run_id`` at ``path``
    (compact JSON, the keys of a ``fabtune plan --json`` report; its folder made 0700 if missing;
    the file replaced atomically, never through a link). Raises OSError as
    :func:`tuning.outfile.write_atomic`."""
    from tuning.outfile import write_atomic

    path.parent.mkdir(mode=0o700, exist_ok=True)
    doc = {"mode": "plan", "run_id": run_id, "changes": changes}
    write_atomic(path, json.dumps(doc, separators=(",", ":"), default=str).encode(), mode=0o600)
    return path


def read(path: Path, node: str, run_id: str | None, domains: set[str] | None, need: bool = False) -> list[dict]:
    """This node's planned changes in ``path`` (a plan report, module docstring), only those of
    ``domains`` (None: all). A node the file does not name is planned to change nothing, unless
    ``need`` (``node verify``: a check of nothing fails).

    Raises:
        InputError: the file cannot be read, is not JSON, has no ``changes`` object, names a device
            that is no host name, a change is not an object of strings or names an unknown domain or a
            key twice (naming it, as ``changes.node01[2].after``), the file is a plan of another run
            than ``run_id``, an offline plan (``plan --offline``: no before), or ``need`` and no change.
    """
    where = str(path)
    doc = _document(path, where, run_id)
    mine = doc["changes"].get(node, [])
    if not isinstance(mine, list):
        raise InputError(where, f"changes.{node}", "not a list of changes")
    out = [_change(where, f"changes.{node}[{i}]", c, node) for i, c in enumerate(mine)]
    seen: dict[str, int] = {}
    for i, c in enumerate(out):
        if seen.setdefault(c["key"], i) != i:
            raise InputError(where, f"changes.{node}[{i}].key", f"{c['key']!r} is planned twice (also [{seen[c['key']]}])")
    out = [c for c in out if domains is None or c["domain"] in domains]
    if need and not out:
        raise InputError(where, f"changes.{node}", f"no change planned for {node}"
                         + (f" in {', '.join(sorted(domains))}" if domains else "")
                         + ": nothing to check (a plan of other nodes?); without --plan the inventory is checked")
    return out


def _document(path: Path, where: str, run_id: str | None) -> dict:
    """The plan report at ``path``, its top level checked (:func:`read`'s errors but a change's)."""
    from tuning.model.grammar import check_host_name

    try:
        doc = json.loads(Path(path).read_bytes())
    except OSError as e:
        raise InputError("--plan", where, f"cannot read it: {e.strerror or e}") from None
    except ValueError as e:
        raise InputError(where, "-", f"not JSON ({str(e)[:80]}); give a `fabtune plan --json` report") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("changes"), dict):
        raise InputError(where, "changes", "missing or not an object of {device: [changes]}; give a "
                         "`fabtune plan --json` report")
    if doc.get("mode") == "offline-plan":  # `before` unknown everywhere: every change would read as moved
        raise InputError(where, "mode", "an offline plan (nothing was read, every before unknown); give a "
                         "`fabtune plan --json` report made against the devices")
    made_for = doc.get("run_id")
    if made_for is not None and run_id is not None and made_for != run_id:
        raise InputError(where, "run_id", f"the plan of run {str(made_for)[:40]!r}, not of --run-id {run_id}")
    for name in doc["changes"]:
        try:
            check_host_name(name)
        except ValueError as e:
            raise InputError(where, f"changes.{name[:40]!r}", str(e)) from None
    return doc


def _change(where: str, key: str, c: object, node: str) -> dict:
    """The :data:`COMPARED` fields of one change of ``node`` found at ``key`` of the file ``where``.
    Raises InputError naming the key: not an object, a field not a string (before/after: or null),
    a domain fabtune does not have, a setting key with whitespace or control characters, another
    device's change."""
    from tuning.targets import domains

    if not isinstance(c, dict):
        raise InputError(where, key, "not a change object")
    for f in COMPARED:
        v = c.get(f)
        if not (v is None and f in ("before", "after")) and not isinstance(v, str):
            raise InputError(where, f"{key}.{f}", f"{type(v).__name__}, want a string"
                             + (" or null" if f in ("before", "after") else ""))
    if c["domain"] not in domains():
        raise InputError(where, f"{key}.domain", f"{c['domain'][:40]!r}, want one of {', '.join(domains())}")
    if not c["key"] or len(c["key"]) > KEY_MAX or not c["key"].isprintable() or any(x.isspace() for x in c["key"]):
        raise InputError(where, f"{key}.key", f"{c['key'][:40]!r}: a setting key is 1..{KEY_MAX} printable "
                         "characters without spaces (as `mtu/enp12s0np0`)")
    if c.get("device", node) != node:
        raise InputError(where, f"{key}.device", f"{str(c['device'])[:40]!r}, want {node!r}")
    return {f: c.get(f) for f in COMPARED}


def refuse_stale(node: str, planned: list[dict] | None, own: list) -> None:
    """Raise :class:`StalePlanError` when ``planned`` (:func:`read`; None: no plan file) differs
    from ``own``, the node's plan now (its Changes)."""
    stale = differences(planned, [c.as_dict() for c in own]) if planned is not None else []
    if stale:
        raise StalePlanError(node, stale)


def differences(planned: list[dict], own: list[dict]) -> list[str]:
    """Where ``own`` (the node's plan now, change dicts) differs from ``planned`` (:func:`read`):
    one line per key, sorted; empty when they agree on every :data:`COMPARED` field."""
    want = {c["key"]: c for c in planned}
    have = {c["key"]: c for c in own}
    out = []
    for key in sorted(want.keys() | have.keys()):
        w, h = want.get(key), have.get(key)
        if h is None:
            out.append(f"{key}: planned {shown(w['before'])} -> {shown(w['after'])}, nothing to change now")
        elif w is None:
            out.append(f"{key}: not planned, {shown(h['before'])} -> {shown(h['after'])} now")
        elif w["domain"] != h["domain"]:
            out.append(f"{key}: planned in domain {shown(w['domain'])}, in {shown(h['domain'])} now")
        elif any(w[f] != h.get(f) for f in COMPARED):
            out.append(f"{key}: planned {shown(w['before'])} -> {shown(w['after'])}, {shown(h['before'])} -> "
                       f"{shown(h['after'])} now")
    return out


def verdict(node: str, checked: int, what: str, wrong: list[dict]) -> str:
    """``node verify``'s one line: ``node01: 8 planned change(s) in force``, or how many of ``checked``
    are not, the first five with what they read and want (``wrong``: :func:`drift`'s shape)."""
    if not wrong:
        return f"{node}: {checked} {what} in force"
    said = "; ".join(f"{w['key']} reads {shown(w['have'])}, want {shown(w['want'])}" for w in wrong[:5])
    more = f"; and {len(wrong) - 5} more" if len(wrong) > 5 else ""
    return f"{node}: {len(wrong)} of {checked} {what} NOT in force: {said}{more}"


def shown(value: str | None) -> str:
    """A planned or read value in a one-line verdict: absent, or its repr, cut at 40 characters."""
    return "absent" if value is None else repr(value[:40] + ("..." if len(value) > 40 else ""))


def drift(planned: list[dict], read: dict[str, dict[str, str]], same, absent: str) -> list[dict]:
    """The planned changes not in force on a node read as ``read`` (``domain -> key -> value``, the
    node's state; ``absent`` marks a value not there): ``[{domain, key, want, have}]``, ``have`` None
    when absent. ``same(domain, have, want)``: the domain's own comparison (whitespace, CPU list
    forms); a change planned to remove a value (``after`` null) is in force when it is absent."""
    out = []
    for c in planned:
        have = read.get(c["domain"], {}).get(c["key"], absent)
        ok = have == absent if c["after"] is None else have != absent and same(c["domain"], have, c["after"])
        if not ok:
            out.append({"domain": c["domain"], "key": c["key"], "want": c["after"],
                        "have": None if have == absent else have})
    return out
