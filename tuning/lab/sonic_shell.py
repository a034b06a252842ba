"""The SSH shell of a lab community SONiC switch: EOS's FakeNOS shell
(:class:`tuning.lab.eos_shell.EosShell`: every typed line to the device's terminal, the prompt the
terminal's after each line, the session ended by ``exit``, a gone client or a reboot), with the
switch's :class:`tuning.lab.sonic.SonicTerminal` as the terminal.

The login prints SONiC's banner (shared/cases/cli/sonic__ssh_login_banner_prompt.txt) before the
first prompt ``<user>@<host>:~$ ``; inside a heredoc the prompt is bash's ``> ``. netmiko's
``linux`` driver finds the prompt with ``[$#]``.
"""

from __future__ import annotations

from typing import Any

from tuning.lab.eos_shell import EosShell

#: the FakeNOS ``initial_prompt`` of a SONiC host (the shell replaces it with the terminal's at start)
PROMPT = "{base_prompt}:~$ "


class SonicShell(EosShell):
    """FakeNOS shell that hands every typed line to the switch's bash stand-in, after its banner."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.intro = self.term.banner
