"""``fabtune rollout --engine ansible``: the same rollout, driven through ``playbooks/tune.yml``
with ansible-runner instead of the Nornir fan-out.

The playbook's plugins call the same core stages (:mod:`tuning.rollout.steps`) and write ONE
journal run whose id this module makes up front (extra var ``fabtune_run_id``). When the play ends,
the run's :class:`~tuning.rollout.run_report.RunReport` is rebuilt from that journal by the very code of
``fabtune report RUN_ID`` (:func:`tuning.reports.history.report_of`), so the table, the exit code
and ``--report-json`` / ``--junit`` / ``--prom-file`` come out of one path for both engines.

Secrets: ansible-runner writes the whole environment of ``ansible-playbook`` into
``artifacts/<ident>/command`` (ansible-runner 2.4 ``runner.py``) and, unless told not to, its
``passwords`` / ``envvars`` / ``extravars`` keyword arguments into ``env/`` files
(``utils.dump_artifacts``; ``suppress_env_files``). So the environment handed to the play drops
every variable that looks like a secret (:data:`SECRET_ENV`, ``FABTUNE_BECOME_PASSWORD`` among
them) and nothing is dumped into ``env/``. A become password from ``FABTUNE_BECOME_PASSWORD`` goes
to the play as a vault value: encrypted under a one-time random vault secret (vault id
:data:`VAULT_ID`) into an extra-vars file ``ansible_become_password: !vault |`` (ciphertext only),
and that one-time secret is typed into Ansible's own ``--vault-id VAULT_ID@prompt`` prompt by
ansible-runner's pexpect ``passwords`` (in memory; getpass turns echo off, so it is never in
stdout). The plugins hand the ciphertext to the core, which decrypts it at connect time with the
play's vault secrets, as for a vault value written in the inventory (extra vars win over it, as
the environment wins in ``fabtune rollout``). A vault-encrypted ``ansible_become_password`` in the
inventory works as it is (``ANSIBLE_VAULT_PASSWORD_FILE``, a path, is kept).

Artifacts: ansible-runner's private data dir is a temporary folder under the journal directory,
removed after the run; ``FABTUNE_ANSIBLE_ARTIFACTS=DIR`` keeps a copy of its ``artifacts/`` in
``DIR/RUN_ID`` (job events, stdout, the command line).

Sources: ansible-runner 2.4 ``interface.run`` / ``RunnerConfig`` keyword arguments
(``private_data_dir``, ``project_dir``, ``playbook``, ``inventory``, ``limit``, ``tags``,
``extravars``, ``cmdline``, ``passwords``, ``suppress_env_files``, ``event_handler``); event names
(``runner_on_ok``, ``runner_on_failed``, ``runner_on_unreachable``, ``runner_on_skipped``,
``playbook_on_task_start``) from ansible-runner's display callback (docs: "Runner Artifacts Job
Events"); ansible-core 2.19 ``--ask-become-pass`` prompt text ``BECOME password:``.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tuning.errors import ConnectError, InputError, RollbackError, TuningError
from tuning.model.policy import RolloutPolicy
from tuning.rollout.journal import DEFAULT_DIR, new_run_id
from tuning.transport import become
from tuning.model.outcomes import RunOutcome

Progress = Callable[[str], None]

REPO = Path(__file__).resolve().parents[1]
#: the playbook the engine runs (relative to the project directory)
PLAYBOOK = "playbooks/tune.yml"
#: environment variables never handed to ansible-playbook (their values would land in the
#: runner's ``command`` artifact); names ending in ``_FILE`` (paths) are kept
SECRET_ENV = re.compile(r"PASSW|SECRET|TOKEN|CREDENTIAL", re.I)
#: the vault id of the one-time secret that carries ``FABTUNE_BECOME_PASSWORD`` into the play
VAULT_ID = "fabtune-become"
#: ansible-core 2.19's prompt for ``--vault-id VAULT_ID@prompt`` (``PromptVaultSecret``:
#: ``Vault password (%s): ``), as a pexpect pattern
VAULT_PROMPT = r"Vault password \(" + VAULT_ID + r"\):\s*?$"
#: ``HOST: message``, a core error about one device as a task's message (``TuningError.__str__``);
#: HOST as the inventory grammar allows a device name (tuning/model/grammar.py)
HOST_PREFIX = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*): (.+)")
#: keep a copy of ansible-runner's artifacts in this folder (``DIR/RUN_ID``) when set
ARTIFACTS_ENV = "FABTUNE_ANSIBLE_ARTIFACTS"
#: rollout flags this engine honours only at their defaults: ``flag -> default``; any other value is
#: refused with one line (see :func:`refuse_unsupported`)
UNSUPPORTED = {"--rail": None, "--batch-by": "none"}


@dataclass
class AnsibleRun:
    """What to run: a rollout of ``inventory`` (an inventory DIRECTORY, as ``-i``), limited to
    ``limit`` hosts/groups and ``domains`` (tags; None: every domain), under ``policy`` (the
    inventory's ``fabtune_rollout`` with the flags applied, passed whole as the extra var
    ``fabtune_rollout`` plus ``fabtune_serial`` / ``fabtune_max_fail_percentage`` for the play
    keywords), journaling into ``journal_dir``. ``confirm_s``: switch commit-confirm window, s
    (None: derived by the core). ``artifacts``: keep ansible-runner's artifacts in this folder
    (None: removed with the private data dir)."""

    inventory: Path
    policy: RolloutPolicy
    limit: list[str] | None = None
    domains: set[str] | None = None
    journal_dir: Path = DEFAULT_DIR
    confirm_s: int | None = None
    verify: bool = True
    allow_firmware: bool = False
    allow_overwrite_files: bool = False
    artifacts: Path | None = None
    run_id: str = field(default_factory=new_run_id)


def refuse_unsupported(**flags: object) -> None:
    """Refuse the rollout flags the Ansible engine cannot honour (given, i.e. not None).

    ``--rail`` (the playbook verifies every rail) has no playbook form; ``--batch-by`` is honoured
    only as ``none``: Ansible's ``serial`` cuts batches in inventory order (:meth:`StepOptions.policy
    <tuning.rollout.steps.StepOptions.policy>`; the core checks that order is safe).

    Raises:
        InputError: ``--FLAG: VALUE: not supported by --engine ansible; ...`` (exit 2, nothing run).
    """
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        if value is not None and value != UNSUPPORTED.get(flag):
            raise InputError(flag, str(value)[:40], "not supported by --engine ansible (the playbook has no "
                             "such setting); drop it or use --engine nornir")


def extra_vars(run: AnsibleRun) -> dict:
    """The extra vars of ``playbooks/tune.yml`` (CONTRACT "Issue 9 interfaces"): JSON values, so
    Ansible passes them typed (``-e '{...}'``).

    Returns:
        ``{"fabtune_run_id", "fabtune_journal_dir" (absolute), "fabtune_serial" (list of ints and
        "N%" strings, Ansible's ``serial`` list form), "fabtune_max_fail_percentage",
        "fabtune_verify", "fabtune_allow_firmware", "fabtune_allow_overwrite_files", "fabtune_rollout" (the
        policy, JSON),
        ["fabtune_confirm_s"]}``.
    """
    out = {"fabtune_run_id": run.run_id, "fabtune_journal_dir": str(Path(run.journal_dir).resolve()),
           "fabtune_serial": list(run.policy.serial), "fabtune_max_fail_percentage": run.policy.max_fail_percentage,
           "fabtune_verify": run.verify, "fabtune_allow_firmware": run.allow_firmware,
           "fabtune_allow_overwrite_files": run.allow_overwrite_files,
           "fabtune_rollout": run.policy.model_dump(mode="json")}
    if run.confirm_s is not None:
        out["fabtune_confirm_s"] = run.confirm_s
    return out


def play_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of ``ansible-playbook``: ``environ`` (default this process's) without secret-like
    names (:data:`SECRET_ENV`, except ``*_FILE`` paths), the venv's ``bin`` first on PATH (ansible-runner
    runs the ``ansible-playbook`` it finds there), and the repository on PYTHONPATH (the plugins
    import ``tuning``)."""
    env = {k: v for k, v in (os.environ if environ is None else environ).items()
           if not SECRET_ENV.search(k) or k.endswith("_FILE")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", os.defpath)])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["ANSIBLE_FORCE_COLOR"] = "0"
    return env


def progress_line(event: dict) -> str | None:
    """One progress line for an ansible-runner event, None for events not worth a line.

    Only the host, the task's name, its status and (failed / unreachable) the result's ``msg``
    (first line, 200 characters) are shown: never the task's arguments or other result fields.
    """
    kind, data = event.get("event", ""), event.get("event_data") or {}
    if kind == "playbook_on_play_start":
        return f"play: {data.get('play', '')}"
    status = {"runner_on_ok": "ok", "runner_on_failed": "FAILED", "runner_on_unreachable": "UNREACHABLE",
              "runner_on_skipped": None}.get(kind)
    if status is None:
        return None
    res = data.get("res") or {}
    if status == "ok" and res.get("changed"):
        status = "changed"
    line = f"{data.get('host', '?')}: {data.get('task', '?')}: {status}"
    if status in ("FAILED", "UNREACHABLE") and res.get("msg"):
        line += ": " + str(res["msg"]).splitlines()[0][:200] if str(res["msg"]).strip() else ""
    if data.get("ignore_errors"):
        line += " (ignored)"
    return line


def _run_playbook(run: AnsibleRun, work: Path, progress: Progress):
    """Run the playbook with ansible-runner in ``work`` (its private data dir). Returns the Runner."""
    import ansible_runner
    from ansible_runner.config.runner import RunnerConfig

    cmdline, passwords = become_vault(work, os.environ.get(become.PASSWORD_ENV) or None)
    tags = ",".join(sorted(run.domains)) if run.domains else None
    rc = RunnerConfig(private_data_dir=str(work), project_dir=str(REPO), playbook=PLAYBOOK,
                      inventory=str(Path(run.inventory).resolve()), limit=",".join(run.limit) if run.limit else None,
                      tags=tags, extravars=extra_vars(run), cmdline=cmdline, passwords=passwords, quiet=True,
                      suppress_env_files=True, ident=run.run_id, envvars=None)
    rc.prepare()
    rc.env = play_env(rc.env)  # after prepare: it seeded env with os.environ
    runner = ansible_runner.Runner(config=rc, event_handler=_handler(progress))
    runner.run()
    return runner


def become_vault(work: Path, password: str | None) -> tuple[str | None, dict | None]:
    """Carry a become password into the play without writing it anywhere (module docstring).

    Writes ``work/become.yml`` (``ansible_become_password: !vault |`` ciphertext under a one-time
    random secret, vault id :data:`VAULT_ID`; mode 0600) when ``password`` is set.

    Returns:
        ``(cmdline, passwords)`` for ansible-runner: ``-e @work/become.yml --vault-id VAULT_ID@prompt``
        and ``{VAULT_PROMPT: one-time secret}``; ``(None, None)`` without a password.
    """
    if not password:
        return None, None
    import secrets
    import shlex

    from ansible.parsing.vault import VaultLib, VaultSecret

    one_time = secrets.token_urlsafe(32)
    cipher = VaultLib([(VAULT_ID, VaultSecret(one_time.encode()))]).encrypt(
        password.encode(), vault_id=VAULT_ID).decode()
    path = work / "become.yml"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("ansible_become_password: !vault |\n" + "".join(f"  {line}\n" for line in cipher.splitlines()))
    return f"-e @{shlex.quote(str(path))} --vault-id {VAULT_ID}@prompt", {VAULT_PROMPT: one_time}


def _handler(progress: Progress):
    def handle(event: dict) -> bool:
        line = progress_line(event)
        if line:
            progress(line)
        return True
    return handle


def failure_text(runner) -> str:
    """The first failed or unreachable task's ``host: task: msg`` of a finished run ('' if none)."""
    for ev in runner.events:
        if ev.get("event") in ("runner_on_failed", "runner_on_unreachable") and \
                not (ev.get("event_data") or {}).get("ignore_errors"):
            line = progress_line(ev)
            if line:
                return line
    return ""


def failure_codes(runner) -> list[int]:
    """The fabtune exit code of each failed task, in order: its result's ``exit_code`` (the plugins put
    the core error's :attr:`~tuning.errors.TuningError.exit_code` there), else 2 for a bad-input line
    (``...; allowed: ...``), else 1."""
    out = []
    for ev in runner.events:
        data = ev.get("event_data") or {}
        if ev.get("event") == "runner_on_failed" and not data.get("ignore_errors"):
            res = data.get("res") or {}
            code = res.get("exit_code")
            if not isinstance(code, int) or isinstance(code, bool):
                code = InputError.exit_code if re.search(r"\ballowed\b|bad input", str(res.get("msg") or "")) else 1
            out.append(code)
    return out


def unreachable_error(runner) -> ConnectError:
    """The first failed task's core ConnectError again (exit 4), from its message: the plugins fail a
    task with ``str(error)``, ``HOST: message`` for an error about one device
    (:meth:`tuning.errors.TuningError.__str__`), so ``host`` is the device that did not answer, not
    the task's host (begin runs once, on the play's first host)."""
    for ev in runner.events:
        data = ev.get("event_data") or {}
        if ev.get("event") == "runner_on_failed" and not data.get("ignore_errors"):
            msg = str((data.get("res") or {}).get("msg") or "").strip().splitlines()
            m = HOST_PREFIX.match(msg[0] if msg else "")
            return ConnectError(m.group(2), host=m.group(1)) if m else ConnectError(msg[0] if msg else "no answer")
    return ConnectError("a device did not answer")


def host_errors(runner) -> dict[str, str]:
    """Each host's first failed or unreachable task message (its first line) in a finished run: the
    error text a journal does not keep (:data:`tuning.reports.history.NO_TEXT`), as the task said it."""
    out: dict[str, str] = {}
    for ev in runner.events:
        data = ev.get("event_data") or {}
        if ev.get("event") in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            msg = str((data.get("res") or {}).get("msg") or "").strip()
            if msg and data.get("host"):
                out.setdefault(str(data["host"]), msg.splitlines()[0][:500])
    return out


def run(run: AnsibleRun, progress: Progress = lambda msg: None):
    """Roll out through ``playbooks/tune.yml`` and return the run's RunReport, rebuilt from its journal.

    Returns:
        :class:`tuning.rollout.run_report.RunReport` (``run_id`` = ``run.run_id``), as
        :func:`tuning.reports.history.report_of` builds it from the journal; ``seconds`` is the
        wall time of the whole playbook run; a failed or unreachable device's error is its task's
        message (:func:`host_errors`), which the journal does not keep. A play that stopped before its end stage (the journal
        has no outcome) is ``failed``, with ``errors["run"]`` saying so and naming the rollback.

    Raises:
        InputError: the playbook stopped before the run was journaled with a bad-input failure
            (the inventory, a flag) — the failing task's one line.
        RollbackError: a task says a restore failed (exit 3: a human must look).
        TuningError: the playbook stopped before the run was journaled for another reason (its
            one line, exit code 1), or ansible-runner could not start ``ansible-playbook``.
    """
    import time

    t0 = time.monotonic()
    journal_dir = Path(run.journal_dir)
    journal_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"ansible-{run.run_id}-", dir=journal_dir))
    try:
        progress(f"ansible-playbook {PLAYBOOK} (run {run.run_id}) through ansible-runner")
        runner = _run_playbook(run, work, progress)
        keep = run.artifacts or (Path(os.environ[ARTIFACTS_ENV]) if os.environ.get(ARTIFACTS_ENV) else None)
        if keep is not None:
            shutil.copytree(work / "artifacts", Path(keep) / run.run_id, dirs_exist_ok=True)
        report = _journaled_report(run, runner, journal_dir)
        report.seconds = round(time.monotonic() - t0, 2)
        return report
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _journaled_report(run: AnsibleRun, runner, journal_dir: Path):
    """The RunReport of a finished play, from its journal, with the failed devices' own error text
    (see :func:`run`, which says what is raised)."""
    from tuning.reports.history import report_of
    from tuning.rollout.journal import Journal
    from tuning.rollout.rollback import kept_changes

    if not (journal_dir / f"{run.run_id}.json").is_file():
        why = failure_text(runner) or f"ansible-playbook ended {runner.status} (rc {runner.rc})"
        if failure_codes(runner)[:1] == [InputError.exit_code]:
            raise InputError(str(run.inventory), PLAYBOOK, why)
        if failure_codes(runner)[:1] == [ConnectError.exit_code]:  # begin: a node its baseline needs is gone
            raise unreachable_error(runner)
        raise TuningError(f"the playbook stopped before the run was journaled: {why}")
    if RollbackError.exit_code in failure_codes(runner):  # a restore failed: page a human, as the engine raises
        raise RollbackError(f"a restore failed in the playbook run {run.run_id}: {failure_text(runner)}; "
                            f"see `fabtune report {run.run_id}`")
    j = Journal.load(journal_dir, run.run_id)
    report = report_of(j.data, kept_changes(j))
    said = host_errors(runner)  # what the journal does not keep: the failed devices' own error text
    report.errors.update({n: said[n] for n in [*report.errors, *report.unreachable] if n in said})
    if j.data.get("outcome") is None:  # the play stopped before its end stage (a failed or killed play)
        report.outcome = RunOutcome.FAILED
        report.errors["run"] = (f"the playbook ended {runner.status} (rc {runner.rc}) before its end stage"
                                f"{': ' + failure_text(runner) if failure_text(runner) else ''}; the journal is "
                                f"left as it stands: `fabtune rollback {run.run_id}` restores what it touched")
    return report
