"""The one exception tree of fabtune (DESIGN.md, "Errors").

Every error fabtune raises on purpose is a :class:`TuningError`. Subclasses are
named for the phase that failed and carry the host and the phase, so a fleet
report can say exactly where a rollout stopped. Library errors (OSError,
paramiko, netmiko) are converted at the boundary and chained with ``from``.

Exit codes used by the CLI (``tuning.cli``):
    0  success / nothing to change
    1  a device failed, verification failed (and was rolled back)
    2  bad input (inventory, profile, flags, an unreadable tool output)
    3  a rollback failed, or the journal became unwritable after a push: a human must look (page)
    4  a device could not be reached (nothing pushed; ansible-playbook's "unreachable" code,
       see docs/reports.md)
"""

from __future__ import annotations


class TuningError(Exception):
    """Root of all fabtune errors.

    Args:
        message: one line that says what went wrong.
        host: the inventory name of the device, if the error is about one.
        phase: the engine stage (validate, collect, plan, apply, verify, restore).
    """

    exit_code = 1

    def __init__(self, message: str, *, host: str | None = None, phase: str | None = None):
        super().__init__(message)
        self.message = message
        self.host = host
        self.phase = phase

    def __str__(self) -> str:
        prefix = f"{self.host}: " if self.host else ""
        return f"{prefix}{self.message}"


def _one_line(text: str) -> str:
    """``text`` with control characters (a newline in an inventory key) shown escaped, as ``repr`` does."""
    text = str(text)
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class InputError(TuningError):
    """Bad input: an inventory file, a profile, a CLI flag. Nothing was pushed.

    Args:
        file: the file (or ``--flag``) that holds the bad value.
        key: the dotted key inside that file, e.g. ``nic_qos.pfc_priority``.
        problem: what is wrong and what is allowed, e.g. ``9500 is outside 68..9216``.
    """

    exit_code = 2

    def __init__(self, file: str, key: str, problem: str, *, host: str | None = None):
        self.file = _one_line(file)
        self.key = _one_line(key)
        self.problem = _one_line(problem)
        file, key, problem = self.file, self.key, self.problem
        super().__init__(f"{file}: {key}: {problem}", host=None, phase="validate")
        self.host = host


class ParseError(TuningError):
    """A tool output fabtune cannot read; never a partial or a wrong number.

    Args:
        tool: the tool whose output was being read (``ib_write_bw``).
        line_no: 1-based line number of the offending line (0 if the whole text).
        expected: what the parser looked for there.
        line: the offending line, as printed (shortened to 120 characters).
    """

    exit_code = 2

    def __init__(self, tool: str, line_no: int, expected: str, line: str = ""):
        self.tool = tool
        self.line_no = line_no
        self.expected = expected
        self.line = line[:120]
        where = f"line {line_no}" if line_no else "output"
        got = f": got {self.line!r}" if line else ""
        super().__init__(f"{tool}: {where}: expected {expected}{got}", phase="parse")


class ConnectError(TuningError):
    """A device could not be reached or refused our credentials / host key (exit 4, as
    ansible-playbook's unreachable hosts)."""

    exit_code = 4


class CommandError(TuningError):
    """A command on a device exited non-zero.

    Args:
        command: the command line as sent (kept whole in ``command``; a script of several lines is
            named in the message by its first line and its length).
        exit_code_: its exit status.
        stderr: the tail of its standard error (last 500 characters kept).
    """

    def __init__(self, command: str, exit_code_: int, stderr: str, *, host: str | None = None, phase: str | None = None):
        self.command = command
        self.rc = exit_code_
        self.stderr = stderr[-500:]
        tail = self.stderr.strip().splitlines()[-1] if self.stderr.strip() else ""
        lines = command.strip().splitlines() or [""]  # a read script: its first line, not 200 (one line said)
        shown = lines[0] if len(lines) == 1 else f"{lines[0][:80]} ... ({len(lines)} lines)"
        super().__init__(f"`{shown}` exited {exit_code_}: {tail}", host=host, phase=phase)


class NotSupportedError(TuningError):
    """A driver or plugin was asked for an operation it does not have."""


class CandidateError(TuningError):
    """A switch rejected a staged change (``nv set`` gave ``Invalid Command``)."""


class CommitError(TuningError):
    """A switch commit failed, or a commit was attempted with a confirm pending."""


class CommitConfirmError(TuningError):
    """Confirming a commit-confirm revision failed."""


class PendingCommitError(TuningError):
    """A switch holds a commit-confirm that no live run of this inventory owns (a run killed
    mid-push, or a person's): collecting it would plan against a configuration that goes back by
    itself when its window runs out, so the run is refused before anything is pushed (exit 2).
    """

    exit_code = 2


class SetupError(TuningError):
    """This installation or host lacks what the command needs before it can start: an optional
    extra (``pip install 'fabtune[lab]'``), a free port, a lab not already running there. Nothing
    was done; fix the setup and run again (exit 2, as bad input: never a device's failure)."""

    exit_code = 2


class VerifyError(TuningError):
    """Verification failed or regressed against the baseline."""


class RollbackError(TuningError):
    """Restoring a snapshot failed. The one that must page a human (exit 3)."""

    exit_code = 3


class JournalWriteError(TuningError):
    """A run journal or baseline could not be written (a full disk, a read-only remount, a folder
    gone or not writable): one line, exit 2 while nothing was pushed, exit 3 once the journal on
    disk records a device the run may have changed (a human must look: run ``fabtune rollback``
    once the folder is writable; the journal on disk still names every such device).

    Args:
        path: the file being written.  reason: the OS's words (``Read-only file system``).
        pushed: True after a push, False before one, None when unknown (a baseline): exit 2.
        run_id: the run, named in the rollback hint.
    """

    def __init__(self, path: str, reason: str, *, pushed: bool | None = False, run_id: str | None = None):
        self.path, self.reason, self.pushed = path, reason, pushed
        self.exit_code = 3 if pushed else 2
        tail = {False: "; nothing was pushed",
                True: f"; devices may have been changed: run `fabtune rollback {run_id}` once it is writable",
                None: ""}[pushed]
        super().__init__(f"cannot write {_one_line(path)}: {reason}{tail}", phase="journal")


class DeviceTimeout(TuningError):
    """A device did not answer within a phase's time limit (counted as unreachable, like a
    :class:`ConnectError`: exit 4 when nothing else failed).

    Args:
        host: the inventory name of the device.
        phase: the phase that timed out (``connect``, ``collect``, ``apply``, ``verify``...).
        seconds: the limit it ran past (s).

    ``str()`` is ``"node03: no answer in collect after 120 s"``.
    """

    exit_code = 4

    def __init__(self, host: str, phase: str, seconds: float):
        self.seconds = seconds
        super().__init__(f"no answer in {phase} after {seconds:g} s", host=host, phase=phase)


class Terminated(KeyboardInterrupt):
    """SIGTERM (Slurm's ``scancel``, systemd, Kubernetes, a CI job's timeout) taken as Ctrl-C is: a
    run restores what it changed and says so, then exits 143 (128 + 15, the shell's code for it).
    Raised by the signal handler :func:`tuning.cli.main` installs."""

    exit_code = 143
