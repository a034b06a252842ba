"""The ``fabtune`` command (typer + rich). Exit codes: 0 ok, 1 failed / rolled back,
2 bad input, 3 rollback failed (page a human), 4 a device unreachable. See ``fabtune COMMAND --help``
(and docs/reports.md for the table beside ansible-playbook's).

The commands live in rooms of their own and are registered here, in the order ``fabtune --help``
lists them: :mod:`tuning.cli_run` (render, plan, apply, rollout, verify), :mod:`tuning.cli_journal`
(rollback, runs, report), :mod:`tuning.cli_lint`, :mod:`tuning.cli_parse`, :mod:`tuning.cli_topology`, :mod:`tuning.cli_lab`
and :mod:`tuning.cli_burnin` (lab init, burnin, health); their shared options are in
:mod:`tuning.cli_options`, the printing of a run report in :mod:`tuning.cli_emit`.
"""

from __future__ import annotations

import signal
import sys
import threading

import typer

from tuning.cli_args import click, usage_line
from tuning.cli_burnin import register as _register_burnin
from tuning.cli_node import register as _register_node
from tuning.cli_journal import report_cmd, rollback, runs
from tuning.cli_k8s import register as _register_k8s
from tuning.cli_lint import lint_cmd
from tuning.cli_lab import lab_down, lab_inject, lab_noise, lab_reboot, lab_reset, lab_status, lab_up
from tuning.cli_parse import parse_cmd
from tuning.cli_run import apply, plan, render, rollout, verify
from tuning.cli_topology import topology as topology_cmd
from tuning.errors import ConnectError, InputError, Terminated, TuningError

app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False, add_completion=True,
                  help="Tune a GPU/RDMA fabric's nodes and switches, and prove every change.\n\n"
                       "Example: fabtune lab up && fabtune rollout -i inventory/lab")
lab_app = typer.Typer(no_args_is_help=True, help="The embedded lab: a digital twin of a GPU fabric on this machine.")


def _print_version(value: bool) -> None:
    if value:
        from tuning import __version__

        print(f"fabtune {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print fabtune's version and exit.")) -> None:
    pass
app.add_typer(lab_app, name="lab")

for _command in (render, plan, apply, rollout, verify, rollback, runs):
    app.command()(_command)
app.command("report")(report_cmd)
app.command("lint")(lint_cmd)
app.command("parse")(parse_cmd)
app.command("topology")(topology_cmd)
for _name, _command in (("up", lab_up), ("status", lab_status), ("inject", lab_inject), ("noise", lab_noise),
                        ("reboot", lab_reboot),
                        ("down", lab_down), ("reset", lab_reset)):
    # a VALUE may be negative (`degrade -5`): inject refuses it by its own range, not click as "No such option"
    lab_app.command(_name, context_settings={"ignore_unknown_options": True} if _name == "inject" else None)(_command)
_register_burnin(app, lab_app)
_register_node(app)
_register_k8s(app)


def main() -> None:
    """Console entry point: usage errors (click) and fabtune errors print ONE line on stderr and exit
    with their code (2 for bad input, see :mod:`tuning.errors`), never a Rich box or a traceback.
    With ``--json`` the error is also a JSON document on stdout (:func:`_error_document`), so a
    machine reading stdout never gets nothing. SIGTERM is taken as Ctrl-C while it runs
    (:func:`_terminated`; on the main thread only, where Python delivers signals)."""
    here = threading.current_thread() is threading.main_thread()
    before = signal.signal(signal.SIGTERM, _terminated) if here else None
    try:
        _main()
    finally:
        if here:
            # a host process (tests) gets its own handler back (None: one not set from Python)
            signal.signal(signal.SIGTERM, before if before is not None else signal.SIG_DFL)


def _main() -> None:
    """:func:`main`'s body."""
    try:
        code = app(prog_name="fabtune", standalone_mode=False)
    except click.NoArgsIsHelpError as e:
        print(e.ctx.get_help() if e.ctx else "", file=sys.stderr)
        sys.exit(e.exit_code)
    except click.UsageError as e:
        _fail(usage_line(e), "UsageError", _error_code(2))
    except click.ClickException as e:
        _fail(f"fabtune: error: {' '.join(e.format_message().split())}", type(e).__name__, _error_code(e.exit_code))
    except typer.Abort:
        _fail("fabtune: aborted", "Abort", 1)
    except KeyboardInterrupt as e:  # outside a run's own ending (cli_emit.interrupted_summary): nothing changed
        _fail(f"fabtune: interrupted ({'SIGTERM' if isinstance(e, Terminated) else 'Ctrl-C'})", type(e).__name__,
              getattr(e, "exit_code", 130))
    except PermissionError as e:  # a file or folder another user owns (a lab, a journal, a run lock)
        _fail(f"fabtune: error: {e.filename or 'a file'}: {e.strerror or 'permission denied'}: run as the user "
              "that owns it, or point fabtune at a folder you may write (-i, --journal-dir, the lab folder)",
              "PermissionError", 2)
    except TuningError as e:
        hint = ""
        lab_hosts = "/.state/ssh/known_hosts" in str(e)  # a lab never started has none yet
        if isinstance(e, ConnectError) and ("127.0.0.1" in str(e) or lab_hosts):
            hint = " (is the lab up? `fabtune lab up`)"
        elif isinstance(e, InputError) and e.file.startswith("--"):  # a flag's value: as click's usage errors
            hint = f" (see `fabtune {_command_words()}--help`)"
        _fail(f"fabtune: error: {e}{hint}", type(e).__name__, _error_code(e.exit_code))  # one line, never wrapped
    sys.exit(code if isinstance(code, int) else 0)


def _terminated(signum: int, frame) -> None:
    """SIGTERM's handler: :class:`tuning.errors.Terminated` on the main thread, where a run's Ctrl-C
    lands (its restore, its summary, its journal)."""
    raise Terminated("SIGTERM")


def _fail(line: str, kind: str, code: int) -> None:
    """Print ``line`` on stderr (and, with ``--json``, :func:`_error_document` on stdout); exit ``code``."""
    print(line, file=sys.stderr)
    if "--json" in sys.argv[1:]:
        import json

        print(json.dumps(_error_document(line, kind, code), indent=2))
    sys.exit(code)


def _error_document(line: str, kind: str, code: int) -> dict:
    """What ``--json`` prints when a command fails before it has a document of its own (bad input, a
    lock held, an unreachable device at the start): ``{"command": "lint", "outcome": "error",
    "exit_code": 2, "error": {"type": "InputError", "message": "<the stderr line without its
    'fabtune: error: ' prefix>"}}`` (docs/reports.md, "Errors as JSON")."""
    message = line.removeprefix("fabtune: error: ")
    return {"command": _command_words().strip() or None, "outcome": "error", "exit_code": code,
            "error": {"type": kind, "message": message}}


def _command_words() -> str:
    """The command of this process's argv, with a trailing space (``rollout ``, ``lab up ``, ``node check ``), or ''."""
    words: list[str] = []
    for a in sys.argv[1:]:
        if a.startswith("-") or len(words) == (2 if words[:1] in (["lab"], ["node"], ["k8s"]) else 1):  # the command groups
            break
        words.append(a)
    return "".join(w + " " for w in words)


def _error_code(code: int) -> int:
    """An error's exit code: under ``plan --detailed-exitcode`` every error is 1, as 2 means drift
    there (:func:`tuning.reports.detailed_code`)."""
    from tuning.reports import detailed_code

    argv = sys.argv[1:]
    return detailed_code(code, argv[:1] == ["plan"] and "--detailed-exitcode" in argv)
