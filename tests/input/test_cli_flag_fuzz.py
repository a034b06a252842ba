"""Issue 18 item 10: nonsense values for every option of every ``fabtune`` command.

The command tree is walked from ``tuning.cli.app`` (typer -> click), so a new command or option is
fuzzed with no new line here. Each case runs in this process through ``tuning.cli.main`` (typer's
CliRunner isolation for stdin, stdout and stderr; ``sys.argv`` set, as main reads it), in a fresh
working folder under tmp_path (empty: no relative value names anything there), against a lab
inventory whose endpoints are closed ports on 127.0.0.1 and with ``--journal-dir`` in tmp_path.
Nothing reaches a device: paramiko's ``SSHClient.connect`` (under SshHost and netmiko, third-party)
is replaced by a refusal that counts the attempt; no code of ``tuning`` is replaced. No lab starts:
``lab up`` (the one command that starts one, ``tuning.lab.controller.up``) gets an inventory path
that does not exist, which it refuses (``existing_inventory``) before anything else, and each value
its ``-i`` is fuzzed with is a relative name in the empty working folder (or refused as a path),
so nothing is there either. Every start the real controller logs (``$FABTUNE_LAB_STARTS_LOG``,
tests/conftest.py) fails the case, and that lab is stopped.

Each case must end (SIGALRM after 20 s), print no traceback, and when it exits 2 print ONE line
``fabtune: error: ...`` naming the option, or be the command's own error without it (``report``'s
unknown RUN_ID, the value put in its place). A connection attempt is allowed only for a value the
option takes (:data:`ACCEPTED`): every other value is refused before. A lab start is never allowed.

By default each option gets the empty string, the 5000-character string and three more values in
turn (every value meets every command); ``FABTUNE_FUZZ_ALL=1`` runs all of :data:`NONSENSE`.
Positional arguments are fuzzed the same way. A few cases also run as a real subprocess, to show the
in-process runs give what a user sees.

``burnin --html NAME`` (a value the flag takes) writes the real HTML report, matplotlib heat maps
included (about a second): a burn-in that reaches no node stops after its first round
(tuning/burnin/run.py), then writes its reports. So of the values ``--html`` takes only the first
is run (:data:`SLOW`); every value it refuses is (``FABTUNE_FUZZ_ALL=1``: all of them).
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import paramiko
import pytest
import typer
from typer.testing import CliRunner

from tuning import cli
from tuning.lab import controller

#: this file, as it opens a test's node id
HERE = Path(__file__).name

NONSENSE = ("", "-1", "0", "99999999999999999999", "1e309", "nan", "abc", "x" * 5000, "../../etc/passwd",
            "\x1b[31m", "90", "1h", "-", "a\nb")
ALWAYS = ("", "x" * 5000)
RUN = "20261130T101500-1a2b3c"
#: relative names a path option takes (a file or folder under the working folder)
NAMES = frozenset({"-1", "0", "99999999999999999999", "1e309", "nan", "abc", "90", "1h", "../../etc/passwd"})
#: option -> the values of NONSENSE it takes, so its command may go on to a (refused) connection;
#: any other value must be refused before
ACCEPTED = {"--journal-dir": NAMES, "--junit": NAMES, "--report-json": NAMES, "--html": NAMES, "--drain-log": NAMES,
            "--state-dir": NAMES, "--serial": {"90"}, "--confirm-s": {"90"}, "--min-bw": {"0", "90"},
            "--max-lat": {"0", "90"}, "--min-bw-share": {"0"}, "--rail": {"0"}, "--max-fail-percentage": {"0", "90"},
            "--max-failed": {"0", "90"}, "--settle-s": {"0", "90"}, "--duration": {"90", "1h"},
            "--iterations": {"90"}, "--max-drain": {"0", "90"}, "--gpu-type": {"nan", "abc", "1h", "1e309"},
            "--ib-recovery": {"0", "90", "1h"}}
#: (command, option) whose accepted values run a slow step (``burnin --html``: the real HTML report,
#: :func:`tuning.burnin.html_report.render`): only the first value of :data:`ACCEPTED` it gets runs
SLOW = {(("burnin",), "--html")}
#: valid positional arguments of the commands that take some (``{new}``: a fresh folder per case)
ARGS = {("rollback",): [RUN], ("report",): [RUN], ("parse",): ["interrupts", "-"], ("topology",): ["node01"],
        ("lab", "inject"): ["leaf01:swp1", "degrade"], ("lab", "reboot"): ["node01"], ("lab", "init"): ["{new}"]}
STDIN = {"interrupts": "            CPU0       CPU1\n 151:    4716506          0  IR-PCI-MSIX-0000:c1:00.0    "
                       "1-edge      mlx5_comp0@pci:0000:c1:00.0\n",
         "show-gids": "DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV\n---\t----\t-----\t---\t\t\t\t\t------------"
                      "  \t---\t---\nmlx5_0\t1\t5\t0000:0000:0000:0000:0000:ffff:ac14:053c\t172.20.5.60  \tv2\tens1f0\n"
                      "n_gids_found=1\n"}


class Hang(Exception):
    """A case ran past its time (SIGALRM)."""


def _alarm(*_args) -> None:
    raise Hang()


@dataclass
class Outcome:
    """One run of ``fabtune``: exit code (-1: an exception escaped main), stdout, stderr, how
    many device connections it attempted and the state folders of the labs it started."""

    code: int
    out: str
    err: str
    contacts: int = 0
    starts: list[str] = field(default_factory=list)


@dataclass
class Bench:
    """The fuzz bench: the closed-port inventory, ``lab up``'s inventory (a path with nothing
    there), tmp_path, the contact counter and the log the lab controller appends its starts to."""

    inv: Path
    no_inv: Path
    tmp: Path
    starts_log: Path
    contacts: list = field(default_factory=list)
    n: int = 0

    def starts(self) -> list[str]:
        """The state folders of the lab starts logged so far by this module's tests (a line of
        ``tuning.lab.controller._log_start`` is ``STATE_DIR<tab>$PYTEST_CURRENT_TEST``; the log is the
        whole run's, other processes' starts are not ours to judge or stop)."""
        try:
            lines = self.starts_log.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        return [state for state, _, test in (line.partition("\t") for line in lines) if f"{HERE}::" in test]


def commands() -> list[tuple[tuple[str, ...], object]]:
    """Every leaf command of ``fabtune`` as (words, click command), walked from the typer app."""
    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs is None:
            return [(path, cmd)]
        return [c for name, sub in sorted(subs.items()) for c in walk(sub, (*path, name))]
    return walk(typer.main.get_command(cli.app), ())


def values(index: int) -> tuple[str, ...]:
    """The values the ``index``-th fuzzed parameter gets (module docstring)."""
    if os.environ.get("FABTUNE_FUZZ_ALL"):
        return NONSENSE
    rest = [v for v in NONSENSE if v not in ALWAYS]
    return (*ALWAYS, *(rest[(index * 3 + k) % len(rest)] for k in range(3)))


def invoke(bench: Bench, argv: list[str], stdin: str = "") -> Outcome:
    """Run ``fabtune ARGV`` through :func:`tuning.cli.main` in a fresh, empty working folder, at
    most 20 s. A lab it started (it must start none) is stopped before this returns."""
    cwd = new_cwd(bench)
    old_argv, old_cwd, start = sys.argv, os.getcwd(), len(bench.contacts)
    labs = len(bench.starts())
    old_alarm = signal.signal(signal.SIGALRM, _alarm)
    code, tb = 0, ""
    with CliRunner().isolation(input=stdin) as (out, err, _):
        try:
            os.chdir(cwd)
            sys.argv = ["fabtune", *argv]
            signal.setitimer(signal.ITIMER_REAL, 20)
            cli.main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # noqa: BLE001 - a traceback (or a Hang) is what this test looks for
            code, tb = -1, traceback.format_exc()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old_alarm)
            sys.argv = old_argv
            os.chdir(old_cwd)
            sys.stdout.flush()
            sys.stderr.flush()
        text = (out.getvalue().decode(errors="replace"), err.getvalue().decode(errors="replace") + tb)
    started = bench.starts()[labs:]
    for state_dir in started:  # a lab this case started in spite of the bench: stop it, the case fails
        controller.down(Path(state_dir))
    return Outcome(code, *text, contacts=len(bench.contacts) - start, starts=started)


def new_cwd(bench: Bench) -> Path:
    """A fresh, empty working folder, 2 levels under its own one (``../../etc/passwd`` stays in tmp_path)."""
    cwd = bench.tmp / "cwd" / f"c{bench.n}" / "a" / "b"
    bench.n += 1
    cwd.mkdir(parents=True)
    return cwd


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """The bench, with connections refused for the module (module docstring; paramiko's, not ours);
    typer's click tree is built once (it is rebuilt on every call otherwise: 85% of a case's time).
    The lab starts are read from the controller's own log (tests/conftest.py sets
    ``$FABTUNE_LAB_STARTS_LOG`` for the run; one in tmp_path when it is not set)."""
    from tuning.lab.scale import write_inventory

    tmp = tmp_path_factory.mktemp("flagfuzz")
    log = Path(os.environ.get(controller.STARTS_LOG_ENV) or tmp / "lab-starts.log")
    b = Bench(write_inventory(tmp / "inv", 2, base_port=26500),  # any port: connect is refused below
              tmp / "no-inventory", tmp, log)
    (b.inv / ".state" / "ssh").mkdir(parents=True)
    (b.inv / ".state" / "ssh" / "known_hosts").write_text("")  # so a connection is attempted, and refused

    def refused(*_a, **_k):
        b.contacts.append("ssh")
        raise OSError(111, "connection refused (flag fuzz: no device is contacted)")

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(controller.STARTS_LOG_ENV, str(log))
        mp.setattr(paramiko.SSHClient, "connect", refused)
        mp.setattr(typer.main, "get_command", functools.lru_cache(maxsize=None)(typer.main.get_command))
        yield b


def base_argv(bench: Bench, words: tuple[str, ...], cmd, fuzzed: str) -> list[str]:
    """Valid options of ``words``: the inventory (``lab up``'s: a path with nothing there, so it
    refuses it before it starts anything), the journal and state folders in tmp_path, render's
    output, burn-in's one round (not beside a fuzzed ``--duration``). A fuzzed option comes after
    them: the last value of an option is the one click keeps."""
    names = {o for p in cmd.params for o in p.opts}
    a: list[str] = []
    inv = bench.no_inv if " ".join(words) == "lab up" else bench.inv
    base = {"-i": str(inv), "--journal-dir": str(bench.tmp / "j"), "--state-dir": str(bench.tmp / "state"),
            "-o": str(bench.tmp / "out")}
    for flag, value in base.items():
        if flag in names:
            a += [flag, value]
    if words == ("burnin",) and fuzzed != "--duration":
        a += ["--iterations", "1"]
    return a


def cases() -> list[tuple[tuple[str, ...], str, int, str]]:
    """(command words, parameter name, position among the arguments or -1 for an option, value)."""
    out, index = [], 0
    for words, cmd in commands():
        for p in cmd.params:
            if getattr(p, "is_flag", False) or "--help" in p.opts:
                continue
            pos = -1
            if p.param_type_name == "argument":
                pos = [q.name for q in cmd.params if q.param_type_name == "argument"].index(p.name)
                if pos >= len(ARGS.get(words, [])):
                    continue  # an optional argument past the valid ones given (lab inject VALUE)
            vals = values(index)
            if (words, p.opts[0]) in SLOW and not os.environ.get("FABTUNE_FUZZ_ALL"):
                taken = [v for v in vals if v in ACCEPTED[p.opts[0]]]
                vals = tuple(v for v in vals if v not in taken[1:])
            out += [(words, p.name, pos, v) for v in vals]
            index += 1
    return out


CASES = cases()


@dataclass
class Case:
    """One case: its argv and stdin, the parameter's spellings, and the argv of its control (the
    base options alone, or a valid argument in its place)."""

    argv: list[str]
    stdin: str
    spellings: list[str]
    control: list[str]


def case_of(bench: Bench, words, cmd, name: str, pos: int, value: str) -> Case:
    """The :class:`Case` of ``value`` for parameter ``name`` of ``words`` (argument ``pos``, or -1)."""
    p = next(q for q in cmd.params if q.name == name)
    args = [a.format(new=bench.tmp / f"new{bench.n}") for a in ARGS.get(words, [])]
    opts = base_argv(bench, words, cmd, p.opts[0] if pos < 0 else p.name)
    if words == ("parse",) and name == "ipv4":
        args[0] = "show-gids"
    elif words == ("parse",) and name in ("bdf", "local_cpus"):  # the interrupts findings need both
        opts += ["--bdf", "0000:c1:00.0", "--local-cpus", "0-1"]
    stdin = STDIN.get(args[0] if args else "", "")
    if pos < 0:
        return Case([*words, *opts, *args, p.opts[0], value], stdin, [*p.opts, f"{p.name}:"], [*words, *opts, *args])
    fuzzed = [*args[:pos], value, *args[pos + 1:]]
    spellings = [p.name.upper(), p.name, *([p.metavar] if p.metavar else [])]
    return Case([*words, *opts, "--", *fuzzed], stdin, spellings, [*words, *opts, "--", *args])


def names_it(line: str, spellings: list[str], control: Outcome, base_values: list[str], value: str) -> bool:
    """Whether a one-line refusal names the parameter, or is the command's own error (``control``,
    the run with its base value) with ``value`` in place of a base value."""
    if any(s and s in line for s in spellings):
        return True
    ctl = control.err.strip()
    return ctl == line or any(b and ctl.replace(b, value) == line for b in base_values)


@pytest.mark.parametrize("words", sorted({c[0] for c in CASES}), ids=" ".join)
def test_every_option_refuses_nonsense_in_one_line(bench: Bench, words):
    """Every fuzzed value of every option of ``words`` (module docstring)."""
    cmd = dict(commands())[words]
    problems = []
    for w, name, pos, value in CASES:
        if w != words:
            continue
        case = case_of(bench, words, cmd, name, pos, value)
        problems += check(bench, case, value, invoke(bench, case.argv, case.stdin))
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems[:20])


def check(bench: Bench, c: Case, value: str, got: Outcome) -> list[str]:
    """What is wrong with one case's outcome (an empty list when nothing is)."""
    spellings = c.spellings
    case = f"{' '.join(a[:40] for a in c.argv)!r}: exit {got.code}"
    text = got.out + got.err
    if got.starts:
        return [f"{case}: started a lab in {', '.join(got.starts)} (stopped again)"]
    if got.code == -1 or "Traceback" in text:
        return [f"{case}: traceback or hang: {got.err[-600:]}"]
    if got.contacts and value not in ACCEPTED.get(spellings[0], ()):
        return [f"{case}: {spellings[0]} {value[:20]!r} went on to a device before being refused"]
    if got.code != 2:
        return []
    lines = got.err.strip().splitlines()
    if len(lines) != 1 or not lines[0].startswith("fabtune: error: ") or got.out.strip():
        return [f"{case}: not one line: {text[-600:]!r}"]
    base = [a for a in c.control if a.startswith(str(bench.tmp)) or a not in c.argv or a == "1"]
    if any(s in lines[0] for s in spellings):
        return []
    if not names_it(lines[0], spellings, invoke(bench, c.control, c.stdin), base, value):
        return [f"{case}: the error does not name {spellings[0]}: {lines[0][:300]}"]
    return []


@pytest.mark.parametrize("argv, flag", [
    (["plan", "-i", "{inv}", "--junit", "x" * 5000], "--junit"),  # was: OSError File name too long
    (["burnin", "-i", "{inv}", "--iterations", "1", "--rail", "99"], "--rail"),  # was: accepted, then SSH
])
def test_a_sample_as_a_real_subprocess(bench: Bench, argv, flag):
    """The in-process runs give what a user sees: the same exit code and the same one line."""
    argv = [a.format(inv=bench.inv) for a in argv]
    r = subprocess.run([sys.executable, "-m", "tuning", *argv], capture_output=True, text=True, cwd=new_cwd(bench),
                       timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-800:]
    assert len(r.stderr.strip().splitlines()) == 1 and flag in r.stderr, r.stderr[-800:]
    got = invoke(bench, argv)
    assert (got.code, got.err.strip()) == (r.returncode, r.stderr.strip())
