"""Reboots through Slurm for ``fabtune rollout --engine slurm --allow-reboot`` (issue 23): a batch's
nodes whose pushed changes need a boot (the node's ``fabtune node apply`` result says
``effects.reboot_required``, the same rule the Ansible front end's ``fabtune_reboot_required`` fact
comes from: :func:`tuning.rollout.steps.push`) are rebooted by Slurm itself, once per run, after
the push and before verification (:func:`reboot_batch`):

1. the batch's allocation ends (``scancel``; Slurm reboots a node only once it is idle,
   ``scontrol(1)``), its drains stay;
2. the run's journal records the request (event ``reboot``: the nodes and the command), then ONE
   ``scontrol reboot ASAP nextstate=RESUME reason="fabtune:RUN_ID: reboot batch K/N" NODES``;
   a node whose reboot this run already asked for (an event of the journal) is never asked again;
3. the wait (:func:`wait_back`, bounded by the policy's ``timeouts.apply_s``): a node is back when
   ``scontrol show node`` gives a BootTime newer than the request and a state without ``REBOOT``,
   ``NOT_RESPONDING``, ``DOWN`` or ``FAIL``; one whose reboot flag Slurm dropped without a new
   BootTime (DOWN "reboot timed out" after ResumeTimeout, ``cancel_reboot``) or that is not back by
   the deadline fails as unreachable, with Slurm's state and reason as evidence; journal event
   ``rebooted`` names each node's new BootTime;
4. ``nextstate=RESUME`` has resumed the rebooted nodes and cleared their reason (``scontrol(1)``);
   the batch is held again (its nodes still drained by this run resumed, one allocation and the
   batch's drain for all that came back), so verification and a restore run under the hold as
   without a reboot. A restore puts the boot loader config back, not the running kernel: it is never
   rebooted a second time (one reboot per node per run).

Without ``--allow-reboot`` nothing here runs: the change is pushed, verified and reported as the SSH
engine reports it (``takes effect: reboot required``, finding ``reboot-required``).
Sources: ``scontrol(1)`` (``reboot``, ``show node``), ``slurm.conf(5)`` (RebootProgram,
ResumeTimeout), ``scancel(1)`` of Slurm 22.05.
"""

from __future__ import annotations

import re
import time
from datetime import datetime

from tuning import slurm_holds
from tuning.burnin import drain
from tuning.errors import ConnectError
from tuning.slurm_cli import call, said

#: ``scontrol show node -o``'s fields read here (one line per node; ``Reason=`` is the last field)
_STATE = re.compile(r"(?:^| )State=(\S+)")
_BOOT = re.compile(r" BootTime=(\S+)")
_REASON = re.compile(r" Reason=(.*)$")
_NAME = re.compile(r"^NodeName=(\S+)")
#: state words of a node not (yet) back (``scontrol show node`` State, ``+``-joined)
NOT_BACK = ("REBOOT", "NOT_RESPONDING", "DOWN", "FAIL", "POWER")
POLL_S = 1.0


def needs_reboot(result: dict) -> bool:
    """Whether a node's ``fabtune node apply --json`` result pushed a change that needs a boot."""
    return bool(result.get("pushed") and (result.get("effects") or {}).get("reboot_required"))


def asked_before(events: list) -> set[str]:
    """The nodes this run's journal events already asked a reboot of (event ``reboot``, its note
    ``NODE,NODE: ...``)."""
    return {n for e in events if isinstance(e, list) and e and e[0] == "reboot"
            for n in str(e[1]).split(":", 1)[0].split(",")}


def show_nodes(nodes: list[str], call) -> dict[str, dict[str, str]]:
    """``{node: {"state", "boot", "reason"}}`` from ``scontrol show node -o LIST`` (``call``:
    :func:`tuning.slurm_cli.call`). Raises ConnectError when scontrol fails."""
    rc, out, err = call(["scontrol", "show", "node", "-o", ",".join(nodes)])
    if rc != 0:
        raise ConnectError(f"scontrol show node: exit {rc}: {(err or out).strip()[-300:]}", phase="slurm")
    got = {}
    for line in out.splitlines():
        name = _NAME.search(line)
        if name:
            got[name.group(1)] = {k: (m.group(1).strip() if (m := rx.search(line)) else "")
                                  for k, rx in (("state", _STATE), ("boot", _BOOT), ("reason", _REASON))}
    return got


def _boot_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None  # "None" or "Unknown": Slurm has no boot time for the node


def verdict(info: dict[str, str], before: str, asked: datetime) -> str | None:
    """``"back"``, ``"waiting"`` or Slurm's words on why the node will not come back, from one
    :func:`show_nodes` entry, the node's BootTime before the request and the request's time
    (slurmctld's local time, to the second, as ``scontrol`` prints it). ``BootTime=None`` (seen for a
    node of the Slurm lab under load, a time again later) is waited for, not taken as lost."""
    boot, words = _boot_time(info["boot"]), [w for w in info["state"].split("+") if w]
    moved = boot is not None and info["boot"] != before and boot >= asked.replace(microsecond=0)
    if any(w.startswith("REBOOT") for w in words):
        return "waiting"  # requested (the node still busy), issued, or booting
    if moved and not any(w.startswith(NOT_BACK) for w in words):
        return "back"
    if (moved or boot is None) and not any(w in ("DOWN", "FAIL") for w in words):
        return "waiting"  # booted, not yet answering slurmctld's ping; or no BootTime known yet ("None")
    return f"State={info['state'] or '?'} BootTime={info['boot'] or '?'} Reason={info['reason'] or 'none'}"


def wait_back(nodes: list[str], before: dict[str, str], asked: datetime, deadline_s: float, call,
              progress) -> tuple[dict[str, str], dict[str, BaseException]]:
    """Poll ``scontrol show node`` until every node of ``nodes`` is back or given up (module
    docstring, step 3). Returns ``(back, failed)``: node -> its new BootTime, node -> ConnectError
    with Slurm's words."""
    end = time.monotonic() + deadline_s
    back: dict[str, str] = {}
    failed: dict[str, BaseException] = {}
    while True:
        info = show_nodes([n for n in nodes if n not in back and n not in failed], call)
        for n in [n for n in nodes if n not in back and n not in failed]:
            v = verdict(info.get(n, {"state": "", "boot": "", "reason": "not in scontrol show node"}),
                        before.get(n, ""), asked)
            if v == "back":
                back[n] = info[n]["boot"]
                progress(f"slurm: {n} is back, BootTime={back[n]}")
            elif v != "waiting":
                failed[n] = ConnectError(f"Slurm did not bring {n} back from its reboot: {v}", host=n, phase="reboot")
        left = [n for n in nodes if n not in back and n not in failed]
        if not left:
            return back, failed
        if time.monotonic() > end:
            for n, i in show_nodes(left, call).items():
                failed[n] = ConnectError(f"{n}: not back from its reboot within {deadline_s:g} s (policy "
                                         f"timeouts.apply_s): State={i['state']} BootTime={i['boot']} "
                                         f"Reason={i['reason'] or 'none'}", host=n, phase="reboot")
            return back, failed
        time.sleep(POLL_S)


def reboot_batch(session, nodes: list[str], j, label: str) -> dict[str, BaseException]:
    """Steps 1-4 of the module docstring for the nodes ``nodes`` of ``session``'s held batch
    (:class:`tuning.slurm_engine.SlurmSession`); ``label`` like ``batch 1/2``. Returns the nodes
    that failed (unreachable, Slurm's words), each reboot node or batch node the hold lost."""
    again = sorted(set(nodes) & asked_before(j.data.get("events") or []))
    if again:
        session.progress(f"slurm: {', '.join(again)}: already rebooted in this run, not again")
    want = [n for n in nodes if n not in again]
    hold = session.hold
    if not want or hold is None:
        return {}
    rc, out, err = call(["scancel", hold.job])
    if rc != 0:
        return {n: ConnectError(f"scancel {hold.job} before the reboot: exit {rc}: {said(out, err)}", host=n,
                                phase="reboot") for n in want}
    failed = _reboot(session, want, j, label)
    for n in want:  # Slurm owns these drains now (nextstate=RESUME clears them); never resumed by this run
        hold.drained.pop(n, None)
    session.hold = None
    session.release_errors += slurm_holds.resume(hold.drained, session.progress)
    slurm_holds.forget(j, hold.job)
    again_held = session.hold_nodes([n for n in hold.nodes if n not in failed], j, failed, f"rollout {label}")
    session.progress(f"slurm: batch held again after the reboot: {', '.join(again_held) or 'no node'}")
    return failed


def _reboot(session, want: list[str], j, label: str) -> dict[str, BaseException]:
    """Step 2 and 3: journal, ask once, wait; the nodes that did not come back."""
    before = {n: i["boot"] for n, i in show_nodes(want, call).items()}
    reason = drain.reason(j.run_id, f"reboot {label}")
    j.data["events"].append(["reboot", f"{','.join(want)}: scontrol reboot ASAP nextstate=RESUME",
                             round(time.time(), 3)])
    j.save()  # the request is journaled before it is made
    asked = datetime.now()
    rc, out, err = call(["scontrol", "reboot", "ASAP", "nextstate=RESUME", f"reason={reason}", ",".join(want)])
    if rc != 0:
        back: dict[str, str] = {}
        failed: dict[str, BaseException] = {n: ConnectError(f"scontrol reboot: exit {rc}: {said(out, err)}",
                                                            host=n, phase="reboot") for n in want}
    else:
        session.progress(f"slurm: reboot asked of {', '.join(want)}: {reason}")
        back, failed = wait_back(want, before, asked, session.timeouts.apply_s, call, session.progress)
    j.data["events"].append(["rebooted", "; ".join(f"{n} BootTime={b}" for n, b in sorted(back.items())) or "none",
                             round(time.time(), 3)])
    j.save()
    return failed
