"""Parsers for Arista EOS ``| json`` outputs fabtune acts on (issue 21): ``show interfaces [IF] | json``
and ``show configuration sessions detail | json``. Read with :mod:`json`.

Formats (shared/cases/cli/INDEX-switch.md):
- ``show interfaces | json``: shared/cases/cli/eos__show_interfaces_json_mtu.txt (aristanetworks/anta
  tests/units/anta_tests/test_interfaces.py, ``VerifyL3MTU`` data): ``interfaces.<name>.mtu`` an
  integer in bytes, ``l2Mru`` 0 when unset, ``l3MtuConfigured``, ``forwardingModel``.
- ``show configuration sessions detail | json``: shared/cases/cli/
  eos__show_configuration_sessions_detail_json_pre_4_32.txt and napalm-automation/napalm#2166 (fixed by
  napalm#2281). Up to EOS 4.31 a session awaiting ``commit`` after ``commit timer`` has
  ``state: pendingCommitTimer`` and ``commitBy``; from 4.32 every such session reads ``committed``,
  and the top-level ``commitTimerSessionName`` / ``commitTimerExpireTime`` (present only while a
  timer runs) name it. Times are seconds as EOS prints them (napalm compares ``commitBy`` with the
  ``show version`` uptime).

The running configuration's RoCE lines are read by :mod:`tuning.switch.eos_keys` (one reader for
every EOS configuration text); the layer contract keeps the parsers from importing it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from tuning.errors import ParseError
from tuning.parsers.base import Finding, Parsed, clean_lines, parser
from tuning.parsers.text import is_prompt

#: an EOS CLI prompt with its command: ``leaf1#show ...``, ``leaf1(config-s-fabtun)#``, ``(s1)`` on a chassis
_EOS_PROMPT = re.compile(r"[A-Za-z0-9][\w.-]*(?:\(s\d\))?(?:\([\w.-]+\))?[>#].*")


def eos_json(tool: str, text: str, key: str) -> dict[str, Any]:
    """The JSON object of one ``| json`` output, prompt lines around it allowed; it must hold ``key``.

    Raises:
        ParseError: no JSON object, invalid JSON, other text around it, or no ``key``.
    """
    lines = [(no, ln) for no, ln in enumerate(clean_lines(text), 1) if ln.strip()]
    body = [(no, ln) for no, ln in lines if not (is_prompt(ln) or _EOS_PROMPT.fullmatch(ln.strip()))]
    if not body or not body[0][1].startswith("{"):
        raise ParseError(tool, body[0][0] if body else 0, "a '| json' object", body[0][1] if body else "")
    try:
        doc = json.loads("\n".join(ln for _, ln in body))
    except json.JSONDecodeError as exc:
        raise ParseError(tool, body[0][0] + exc.lineno - 1, f"valid JSON ({exc.msg})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get(key), dict):
        raise ParseError(tool, body[0][0], f"a JSON object with {key!r}", body[0][1])
    return doc


class EosInterface(BaseModel):
    """One interface of ``show interfaces | json``; ``mtu``, ``l2_mru`` in bytes (``l2_mru`` 0: unset)."""

    name: str
    mtu: int | None = None
    l2_mru: int | None = Field(default=None, alias="l2Mru")
    l3_mtu_configured: bool | None = Field(default=None, alias="l3MtuConfigured")
    forwarding_model: str | None = Field(default=None, alias="forwardingModel")
    line_protocol_status: str | None = Field(default=None, alias="lineProtocolStatus")
    interface_status: str | None = Field(default=None, alias="interfaceStatus")

    model_config = {"populate_by_name": True}


class EosInterfaces(Parsed):
    """``show interfaces [IF] | json``: the interfaces in printed order."""

    interfaces: list[EosInterface]


@parser("eos-show-interfaces-json")
def parse_eos_interfaces(text: str) -> EosInterfaces:
    """Parse ``show interfaces [IF] | json`` (format, units: the module docstring)."""
    tool = "eos-show-interfaces-json"
    doc = eos_json(tool, text, "interfaces")
    try:
        rows = [EosInterface.model_validate({"name": name, **{k: v for k, v in fields.items() if k != "name"}})
                for name, fields in doc["interfaces"].items()]
    except (ValidationError, AttributeError) as exc:
        raise ParseError(tool, 0, "interfaces.<name> objects with an integer mtu") from exc
    return EosInterfaces(tool=tool, interfaces=rows)


class EosSession(BaseModel):
    """One configuration session (``state``: ``pending``, ``pendingCommitTimer``, ``committed``, ``aborted``...;
    times in seconds as printed)."""

    name: str
    state: str
    completed_time: float | None = Field(default=None, alias="completedTime")
    commit_by: float | None = Field(default=None, alias="commitBy")
    commit_user: str | None = Field(default=None, alias="commitUser")
    description: str | None = None

    model_config = {"populate_by_name": True}


class EosSessions(Parsed):
    """``show configuration sessions detail | json``.

    Attributes:
        layout: ``pre-4.32`` (the timer session's state is ``pendingCommitTimer``) or ``4.32+``
            (top-level ``commitTimerSessionName``); ``pre-4.32`` too when no timer runs and nothing tells.
        pending_commit: the session awaiting ``configure session NAME commit`` (a running commit timer), if any.
        commit_by: when its timer expires (``commitBy`` / ``commitTimerExpireTime``), seconds as printed.
        open_sessions: sessions not yet committed or aborted (state ``pending``); max_open_sessions: the limit.
    """

    sessions: dict[str, EosSession]
    layout: Literal["pre-4.32", "4.32+"]
    pending_commit: str | None = None
    commit_by: float | None = None
    open_sessions: list[str] = []
    max_open_sessions: int | None = None
    max_saved_sessions: int | None = None
    merge_on_commit: bool | None = None
    save_to_startup_config_on_commit: bool | None = None


@parser("eos-show-sessions-json")
def parse_eos_sessions(text: str) -> EosSessions:
    """Parse ``show configuration sessions detail | json``, both layouts (the module docstring). Findings:
    ``commit_timer_pending`` (info: a session must be confirmed or it rolls back), ``sessions_full``
    (error: open sessions at ``maxOpenSessions``; EOS refuses a new session until stale ones are aborted)."""
    tool = "eos-show-sessions-json"
    doc = eos_json(tool, text, "sessions")
    try:
        sessions = {n: EosSession.model_validate({"name": n, **s}) for n, s in doc["sessions"].items()}
    except (ValidationError, TypeError) as exc:
        raise ParseError(tool, 0, "sessions.<name> objects with a state") from exc
    new = "commitTimerSessionName" in doc
    pending = (doc.get("commitTimerSessionName") or None) if new else next(
        (n for n, s in sessions.items() if s.state == "pendingCommitTimer"), None)
    expire = doc.get("commitTimerExpireTime") if new else (sessions[pending].commit_by if pending else None)
    result = EosSessions(
        tool=tool, sessions=sessions, layout="4.32+" if new else "pre-4.32", pending_commit=pending,
        commit_by=expire if isinstance(expire, (int, float)) and expire >= 0 else None,
        open_sessions=[n for n, s in sessions.items() if s.state == "pending"],
        max_open_sessions=doc.get("maxOpenSessions"), max_saved_sessions=doc.get("maxSavedSessions"),
        merge_on_commit=doc.get("mergeOnCommit"), save_to_startup_config_on_commit=doc.get("saveToStartupConfigOnCommit"))
    if pending:
        result.findings.append(Finding(code="commit_timer_pending", severity="info", subject=pending, message=(
            f"session {pending} awaits 'configure session {pending} commit' before its timer"
            f" ({result.commit_by}) rolls it back")))
    if result.max_open_sessions and len(result.open_sessions) >= result.max_open_sessions:
        result.findings.append(Finding(code="sessions_full", severity="error", message=(
            f"{len(result.open_sessions)} open sessions of {result.max_open_sessions}: abort stale ones")))
    return result
