"""Parsers for SONiC's Generic Config Updater (issue 21): ``config apply-patch`` and the checkpoint
commands (``config checkpoint``, ``list-checkpoints [-t]``, ``rollback``, ``delete-checkpoint``).

Formats (shared/cases/cli/INDEX-switch.md):
- apply-patch: shared/cases/cli/sonic__apply_patch_roce_success.txt and
  sonic__apply_patch_failure_yang_invalid_value.txt; message strings from sonic-net/sonic-utilities
  generic_config_updater/generic_updater.py and patch_sorter.py, layouts from sonic-utilities#3373,
  #3316, #4219, #1934 (the ``  * [...]`` change lines) and sonic-net/sonic-buildimage#19485 (a
  failure). Progress lines start ``Patch Applier:``; the patch and each change are RFC 6902 JSON
  patches (read with :mod:`json`), paths ``/TABLE/key/field``. A failure prints its reason twice
  (``Failed to apply patch due to: ...``, then click's ``Usage:`` block and ``Error: ...``) and exits 2
  (click's ``ctx.fail``). ``--dry-run`` (DryRunConfigWrapper: ``** DryRun: Would apply ...`` lines)
  writes nothing yet still ends ``Patch applied successfully.``.
- checkpoints: shared/cases/cli/sonic__checkpoint_list_rollback_delete.txt; sonic-utilities#3299,
  #3746 (``list-checkpoints -t``: ``{name, time}`` objects, ISO-8601 times), #1885, and the strings
  of generic_updater.py and config/main.py. Prefixes ``Config Rollbacker:`` / ``Config Replacer:``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from tuning.errors import ParseError
from tuning.parsers.base import Finding, Parsed, ToolFailure, parser
from tuning.parsers.sonic import segments

_PATCH = re.compile(r"Patch Applier: (?:\S+: )?Patch: (\[.*\])")
_COUNT = re.compile(r"Patch Applier: The (?:\S+ )?patch was converted into (\d+) changes?[:.]")
_CHANGE = re.compile(r"Patch Applier:\s+\* (\[.*\])")
_APPLYING = re.compile(r"Patch Applier: (?:\S+: )?applying \d+ changes? in order")
_DRY_RUN = re.compile(r"\*\* DryRun:?\s*(.*)")
_PROGRESS = re.compile(r"(?:Patch Applier|Config Replacer|Config Rollbacker|\*\* DryRun):?\s*(.*)")
SUCCESS = "Patch applied successfully."


class PatchOp(BaseModel):
    """One RFC 6902 operation (``op``, ``path`` ``/TABLE/key/field``, ``value`` as given: strings in CONFIG_DB)."""

    op: Literal["add", "remove", "replace", "move", "copy", "test"]
    path: str
    value: Any = None
    from_: str | None = Field(default=None, alias="from")


class SonicApplyPatch(Parsed):
    """``config apply-patch`` result.

    Attributes:
        command: the command line, where the transcript shows it.
        dry_run: ``--dry-run``/``-d`` on the command line, or ``** DryRun`` lines in the output.
        success: the tool succeeded: ``Patch applied successfully.`` is the output's last line.
        applied: CONFIG_DB was written (success and not a dry run).
        config_changed: False when nothing was written (a dry run, or a failure before the first
            change was applied); None when a failure came after changes began (some may be applied).
        patch: the operations as given (the ``Patch: [...]`` line). change_count: ``converted into N changes``.
        changes: the sorted changes, each a JSON patch, in the order applied (``* [...]`` lines).
        stage: the last progress step printed. reason: the failure reason (once; printed twice).
        exit_code: the ``echo $?`` that follows, else what the output implies (2: click's ``Usage:``
            block; 0: the success line last).
    """

    command: str | None = None
    dry_run: bool = False
    success: bool = False
    applied: bool = False
    config_changed: bool | None = None
    patch: list[PatchOp] = []
    change_count: int | None = None
    changes: list[list[PatchOp]] = []
    stage: str | None = None
    reason: str | None = None
    exit_code: int | None = None


def _ops(tool: str, no: int, line: str, raw: str) -> list[PatchOp]:
    try:
        doc = json.loads(raw)
        return [PatchOp.model_validate(op) for op in doc]
    except (ValueError, TypeError, ValidationError) as exc:
        raise ParseError(tool, no, "a JSON patch: a list of {op, path[, value]}", line) from exc


def failure_reason(lines: list[tuple[int, str]]) -> tuple[int | None, str | None]:
    """Where a GCU failure starts (the ``Failed to ...`` line) and its reason, once: the ``Error: ...``
    block click prints last, else the text after ``due to:`` up to the ``Usage:`` line."""
    texts = [ln for _, ln in lines]
    start = next((i for i, ln in enumerate(texts) if ln.startswith("Failed to ")), None)
    if start is None:
        return None, None
    err = next((i for i in range(start, len(texts)) if texts[i].startswith("Error: ")), None)
    if err is not None:
        body = [texts[err][len("Error: "):]] + texts[err + 1:]
    else:
        stop = next((i for i in range(start + 1, len(texts)) if texts[i].startswith("Usage:")), len(texts))
        body = [texts[start].partition("due to: ")[2] or texts[start], *texts[start + 1:stop]]
    return lines[start][0], "\n".join(ln for ln in body if ln.strip()).strip()


def _apply_lines(tool: str, lines: list[tuple[int, str]], end: int | None) -> dict[str, Any]:
    """The progress part of an apply-patch output (the lines before ``end``, the failure's first line)."""
    out: dict[str, Any] = {"patch": [], "changes": [], "started": False, "dry": False}
    for no, line in lines:
        if end is not None and no >= end:
            break
        s = line.strip()
        if not s or line.startswith(" ") and not s.startswith("Patch Applier"):
            continue  # blank, or a continuation ("since they do not show up in ConfigDb.")
        if (m := _PATCH.fullmatch(s)):
            out["patch"] = _ops(tool, no, line, m[1])
        elif (m := _CHANGE.fullmatch(s)):
            out["changes"].append(_ops(tool, no, line, m[1]))
        elif (m := _COUNT.fullmatch(s)):
            out["change_count"] = int(m[1])
        elif s == SUCCESS:
            continue
        elif not _PROGRESS.fullmatch(s):
            raise ParseError(tool, no, "a 'Patch Applier: ...' progress line", line)
        out["started"] |= bool(_APPLYING.match(s))
        out["dry"] |= bool(_DRY_RUN.fullmatch(s))
        if s.startswith(("Patch Applier", "** DryRun")) and not _CHANGE.fullmatch(s):
            out["stage"] = _PROGRESS.fullmatch(s)[1]  # type: ignore[index]
    return out


def _exit_code(segs: list, at: int) -> int | None:
    """The ``echo $?`` printed right after segment ``at``."""
    if at + 1 < len(segs) and (segs[at + 1][0] or "").replace(" ", "") in ("echo$?", "echo\"$?\""):
        body = [ln.strip() for _, ln in segs[at + 1][1] if ln.strip()]
        return int(body[0]) if body and body[0].isdigit() else None
    return None


@parser("sonic-apply-patch")
def parse_sonic_apply_patch(text: str) -> SonicApplyPatch:
    """Parse ``config apply-patch [--dry-run] FILE`` (formats: the module docstring). In a transcript
    the last ``apply-patch`` command is read (and the ``echo $?`` after it). Findings:
    ``apply_patch_failed`` (error), ``apply_patch_partial`` (failed after changes began), ``dry_run``."""
    tool = "sonic-apply-patch"
    segs = segments(text)
    at = max((i for i, (cmd, _) in enumerate(segs) if cmd and "apply-patch" in cmd), default=None)
    if at is None and segs[0][0] is None and len(segs) == 1:
        at = 0
    if at is None:
        raise ParseError(tool, 0, "a 'config apply-patch' output")
    command, lines = segs[at]
    body = [(no, ln) for no, ln in lines if ln.strip()]
    fail_at, reason = failure_reason(body)
    seen = _apply_lines(tool, body, fail_at)
    success = fail_at is None and bool(body) and body[-1][1].strip() == SUCCESS
    if not success and reason is None:
        raise ParseError(tool, body[-1][0] if body else 0, f"{SUCCESS!r} as the last line, or a 'Failed to ...' reason")
    dry = seen["dry"] or bool(command and re.search(r"(?:^|\s)(?:--dry-run|-d)(?:\s|$)", command))
    usage = any(ln.startswith("Usage:") for _, ln in body)
    echoed = _exit_code(segs, at)
    result = SonicApplyPatch(
        tool=tool, command=command, dry_run=dry, success=success, applied=success and not dry,
        config_changed=(not dry) if success else (False if dry or not seen["started"] else None),
        patch=seen["patch"], change_count=seen.get("change_count"), changes=seen["changes"], stage=seen.get("stage"),
        reason=reason, exit_code=echoed if echoed is not None else 0 if success else 2 if usage else None)
    result.findings, result.failure = _apply_findings(result)
    return result


def _failure_kind(reason: str) -> tuple[str, str]:
    if "produce invalid config" in reason:
        return "invalid_config", "a value or reference the switch's YANG models refuse (range, type, missing key)"
    if "is not permitted" in reason or "illegal" in reason:
        return "not_permitted", "a table or field GCU does not let a patch change"
    if "does not exist" in reason or "JsonPointer" in reason or "Given patch is not valid" in reason:
        return "invalid_patch", "a path or operation that does not fit the running CONFIG_DB"
    return "unknown", "see the reason the switch printed"


def _apply_findings(r: SonicApplyPatch) -> tuple[list[Finding], ToolFailure | None]:
    findings: list[Finding] = []
    failure = None
    if r.reason is not None:
        kind, cause = _failure_kind(r.reason)
        failure = ToolFailure(kind=kind, message=r.reason, likely_cause=cause)
        unchanged = "CONFIG_DB unchanged" if r.config_changed is False else "CONFIG_DB may be partly changed"
        findings.append(Finding(code="apply_patch_failed", severity="error",
                                message=f"apply-patch failed at '{r.stage}' ({unchanged}): {r.reason}"))
        if r.config_changed is None:
            findings.append(Finding(code="apply_patch_partial", severity="error", message=(
                "apply-patch failed after it began applying changes; restore the checkpoint")))
    if r.dry_run:
        findings.append(Finding(code="dry_run", severity="info", message=(
            "a dry run: nothing was written to CONFIG_DB, whatever the last line says")))
    return findings, failure


# ---------------------------------------------------------------- checkpoints

#: GCU success lines and failure openers -> action
_DONE = {"Checkpoint created successfully.": "checkpoint", "Config rolled back successfully.": "rollback",
         "Checkpoint deleted successfully.": "delete", "Config replaced successfully.": "replace"}
_FAILED = {"Failed to create checkpoint": "checkpoint", "Failed to rollback config": "rollback",
           "Failed to delete checkpoint": "delete", "Failed to replace config": "replace"}
_STARTS = {"Config Rollbacker: Config checkpoint starting.": "checkpoint",
           "Config Rollbacker: Config rollbacking starting.": "rollback",
           "Config Rollbacker: Deleting checkpoint starting.": "delete",
           "Config Replacer: Config replacement starting.": "replace"}


class CheckpointOp(BaseModel):
    """One checkpoint command's outcome: ``ok`` only on its success line; ``error`` the reason (once);
    ``path``: where the switch saved it; ``changes``: the rollback's JSON patches, in order."""

    action: Literal["checkpoint", "rollback", "delete", "replace"]
    name: str | None = None
    ok: bool
    error: str | None = None
    path: str | None = None
    changes: list[list[PatchOp]] = []


class SonicCheckpoints(Parsed):
    """``config checkpoint|rollback|delete-checkpoint|replace`` outcomes and ``list-checkpoints [-t]``
    (``checkpoints``: the latest list's names; ``times``: name -> ISO-8601 time as printed)."""

    checkpoints: list[str] | None = None
    times: dict[str, str] = {}
    operations: list[CheckpointOp] = []


def _checkpoint_list(tool: str, lines: list[tuple[int, str]]) -> list[dict[str, str]]:
    try:
        doc = json.loads("\n".join(ln for _, ln in lines))
    except json.JSONDecodeError as exc:
        raise ParseError(tool, lines[0][0] + exc.lineno - 1, f"the list-checkpoints JSON array ({exc.msg})") from exc
    items = [{"name": x} if isinstance(x, str) else x for x in doc] if isinstance(doc, list) else None
    if items is None or not all(isinstance(x, dict) and isinstance(x.get("name"), str) for x in items):
        raise ParseError(tool, lines[0][0], "a JSON array of names or of {name, time}", lines[0][1])
    return items


def _checkpoint_op(tool: str, lines: list[tuple[int, str]]) -> CheckpointOp:
    texts = [ln.strip() for _, ln in lines]
    action = next((_STARTS[t] for t in texts if t in _STARTS), None)
    action = action or next((a for t in texts for k, a in _FAILED.items() if t.startswith(k)), None)
    if action is None:
        raise ParseError(tool, lines[0][0], "a checkpoint, rollback, delete-checkpoint or replace output", lines[0][1])
    name = next((m[1] for t in texts if (m := re.fullmatch(r"Config Rollbacker: Checkpoint name: (.+)\.", t))), None)
    path = next((m[1] for t in texts if (m := re.fullmatch(r"Config Rollbacker: Saving config db content to (.+)\.", t))), None)
    _, error = failure_reason(lines)
    changes = [_ops(tool, no, ln, m[1]) for no, ln in lines if (m := _CHANGE.fullmatch(ln.strip()))]
    ok = error is None and texts[-1] in _DONE and _DONE[texts[-1]] == action
    if not ok and error is None:
        raise ParseError(tool, lines[-1][0], f"the {action} success line or a 'Failed to ...' reason", lines[-1][1])
    return CheckpointOp(action=action, name=name, ok=ok, error=error, path=path, changes=changes)


@parser("sonic-checkpoints", "sonic-list-checkpoints", "sonic-rollback")
def parse_sonic_checkpoints(text: str) -> SonicCheckpoints:
    """Parse GCU checkpoint outputs, one or a transcript of several (formats: the module docstring).
    Findings: ``checkpoint_missing`` (error: ``Checkpoint 'x' does not exist``), ``checkpoint_failed``."""
    tool = "sonic-checkpoints"
    result = SonicCheckpoints(tool=tool)
    for _, lines in segments(text):
        body = [(no, ln) for no, ln in lines if ln.strip()]
        if not body:
            continue
        if body[0][1].lstrip().startswith("["):
            items = _checkpoint_list(tool, body)
            result.checkpoints = [x["name"] for x in items]
            result.times.update({x["name"]: str(x["time"]) for x in items if "time" in x})
        else:
            result.operations.append(_checkpoint_op(tool, body))
    if result.checkpoints is None and not result.operations:
        raise ParseError(tool, 0, "a checkpoint command's output")
    for op in result.operations:
        if not op.ok:
            missing = bool(op.error and "does not exist" in op.error)
            result.findings.append(Finding(code="checkpoint_missing" if missing else "checkpoint_failed",
                                           severity="error", subject=op.name, message=f"{op.action}: {op.error}"))
    return result
