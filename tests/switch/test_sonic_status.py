"""Issue 24: SONiC reads each deciding command's exit status in the command's own send
(``COMMAND; echo $?``), so the lab's bash stand-in runs a ``;`` list as bash does, and a status
read that way fails a step exactly as the separate ``echo $?`` did. In process: the driver on the
lab's terminal without SSH (:func:`tests.switch.test_sonic_keys._driver`), or on canned answers."""

from __future__ import annotations

import json

import pytest

from tests.switch.test_sonic_keys import _driver
from tuning.errors import CandidateError, CommandError, CommitError, ParseError
from tuning.lab.fabric import Switch
from tuning.lab.sonic import SonicSwitch
from tuning.switch.sonic import APPLIED, LOCK, SAVED

#: (line typed, what bash prints, the status after it), each checked against bash 5 (``bash -c``)
LISTS = [
    ("sudo mkdir /run/lock/fabtune; echo $?", "0\n", 0),
    ("sudo mkdir /run/lock/fabtune; echo $?", "mkdir: cannot create directory '/run/lock/fabtune': File exists\n1\n", 0),
    ("sudo mkdir /run/lock/fabtune", "mkdir: cannot create directory '/run/lock/fabtune': File exists\n", 1),
    ("echo $?; echo $?", "1\n0\n", 0),  # each $? the status of the command before it
    ("sudo rmdir /run/lock/fabtune;echo $?;", "0\n", 0),  # a trailing `;` ends the list
    ("sudo mkdir /run/lock/fabtune; sudo rmdir /run/lock/fabtune; sudo rmdir /run/lock/fabtune",
     "rmdir: failed to remove '/run/lock/fabtune': No such file or directory\n", 1),  # the last one's status
    ("nosuch; echo $?", "-bash: nosuch: command not found\n127\n", 0),
    ("echo ';'; echo \"a;b\" a\\;b", ";\na;b a;b\n", 0),  # a quoted or escaped `;` is a word's
    ("sudo mkdir /x; ; echo $?", "-bash: syntax error near unexpected token `;'\n", 2),  # nothing runs
    ("; echo x", "-bash: syntax error near unexpected token `;'\n", 2),
    ("echo a;; echo b", "-bash: syntax error near unexpected token `;;'\n", 2),
    ("echo $?", "2\n", 0),
]


def _switch() -> SonicSwitch:
    return SonicSwitch(Switch("leaf01", 1, "leaf", ["Ethernet0", "Ethernet8"]))


def test_the_stand_in_runs_a_list_as_bash_does() -> None:
    sw = _switch()
    term = sw.terminal()
    for line, printed, rc in LISTS:
        assert (term.run(line), term.rc) == (printed, rc), line
    assert "/x" not in sw.dirs  # the line with a syntax error ran none of its commands
    assert term.run("exit; echo after") == "logout\n" and term.closed  # exit ends the list and the login


def test_a_commits_statuses_come_in_the_commands_own_sends() -> None:
    sw = _switch()
    drv = _driver(sw)
    sent: list[str] = []
    run = drv._conn.send_command
    drv._conn.send_command = lambda command, **kw: sent.append(command) or run(command, **kw)
    drv.current_revision()
    drv.load_candidate(json.dumps([{"op": "add", "path": "/PORT/Ethernet0/mtu", "value": "9000"}]))
    assert drv.compare()
    rev = drv.commit(confirm_within_s=60)
    drv.confirm(rev)
    assert "echo $?" not in sent
    path = next(c for c in sent if c.startswith("cat > ")).split()[2]  # the heredoc's file
    assert [c for c in sent if c.endswith("; echo $?")] == [
        f"sudo config apply-patch --dry-run {path}; echo $?", f"sudo mkdir {LOCK}; echo $?",
        f"sudo config checkpoint fabtune-{drv._tx['before']}; echo $?", f"sudo config apply-patch {path}; echo $?",
        f"sudo rmdir {LOCK}; echo $?", "sudo config save -y; echo $?"]
    assert sw.config["PORT"]["Ethernet0"]["mtu"] == "9000" and not sw.dirs and not sw.timers


def test_a_held_lock_fails_the_commit_on_mkdirs_status_alone() -> None:
    """mkdir prints no ``Error:`` text: only its status 1, read in the same send, stops the commit."""
    sw = _switch()
    drv = _driver(sw)
    start = drv.current_revision()
    sw.dirs.add(LOCK)  # another controller's commit holds the switch
    drv.load_candidate(json.dumps([{"op": "add", "path": "/PORT/Ethernet0/mtu", "value": "9000"}]))
    with pytest.raises(CommitError, match=r"lock is held \(mkdir: cannot create directory '/run/lock/fabtune': "
                                          r"File exists\)"):
        drv.commit(confirm_within_s=60)
    assert drv.current_revision() == start and not sw.checkpoints and not sw.timers and sw.dirs == {LOCK}


class _Canned:
    """A session whose answer to ``COMMAND; echo $?`` is given (the rest of the session unused)."""

    base_prompt = "fabtune@leaf01:~"

    def __init__(self, answer: str) -> None:
        self.answer, self.sent = answer, []

    def send_command(self, command: str, **kw) -> str:
        self.sent.append(command)
        return self.answer


@pytest.mark.parametrize(("answer", "error", "match"), [
    (f"{APPLIED}\n1", CommitError, r"exited 1 and printed 'Patch applied successfully\.'"),  # the text alone never passes
    (f"{APPLIED}\n0\n2", CommitError, r"exited 2"),  # the status is the last line's
    ("Patch Applier: localhost: sorting patch updates.\n0", CommitError, r"exited 0 .*not 'Patch applied successfully\.'"),
    (APPLIED, ParseError, r"its exit status on the last line.*Patch applied successfully\."),  # no status came back
    (f"{APPLIED}0", ParseError, "its exit status on the last line"),  # the status joined to the text
    ("", ParseError, "its exit status on the last line"),
])
def test_a_step_passes_only_on_its_success_text_and_a_status_of_0(answer: str, error: type, match: str) -> None:
    drv = _driver(_switch())
    drv._conn = _Canned(answer)
    with pytest.raises(error, match=match):
        drv._step("sudo config apply-patch /tmp/p.json-patch", APPLIED, phase="apply", error=CommitError)
    assert drv._conn.sent == ["sudo config apply-patch /tmp/p.json-patch; echo $?"]  # one send


def test_a_step_returns_the_commands_output_without_the_status() -> None:
    drv = _driver(_switch())
    drv._conn = _Canned(f"** DRY RUN EXECUTION **\n{APPLIED}\n0")
    assert drv._step("sudo config apply-patch --dry-run /tmp/p", APPLIED, phase="plan",
                     error=CandidateError) == f"** DRY RUN EXECUTION **\n{APPLIED}\n"


@pytest.mark.parametrize(("answer", "error", "match"), [
    (f"{SAVED}\n1", CommandError, r"`config save -y` exited 1: printed 'Running command: "),
    (f"{SAVED}\n0", None, None),
    (SAVED, ParseError, "its exit status on the last line"),
    ('Error: No such command "save".\n2', CommandError, r'exited 1: Error: No such command "save"\.$'),  # its text
])
def test_config_save_passes_only_on_its_line_and_a_status_of_0(answer: str, error: type | None, match: str) -> None:
    drv = _driver(_switch())
    drv._conn = _Canned(answer)
    if error is None:
        drv._save("confirm")
    else:
        with pytest.raises(error, match=match):
            drv._save("confirm")
    assert drv._conn.sent == ["sudo config save -y; echo $?"]
