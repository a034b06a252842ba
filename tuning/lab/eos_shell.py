"""The SSH shell of a lab Arista EOS switch: a FakeNOS ``CMDShell`` whose every line goes to the
switch's :class:`tuning.lab.eos.EosTerminal` (one per login), as :class:`tuning.lab.switches.NvueShell`
does for NVUE.

``cmd.Cmd.cmdloop`` prints ``self.prompt`` before it reads each line, so after each line the prompt
is set to the terminal's (``leaf01>``, ``leaf01#``, ``leaf01(config-s-fabtun-if-Et1)#``). ``exit`` at
the ``>``/``#`` level ends the SSH session as on EOS; elsewhere it goes up one mode. netmiko's
``arista_eos`` driver logs in (it waits for ``Width set to`` and ``Pagination disabled`` and finds
the prompt with ``[$>#]``) and runs ``enable`` (no password).

Register it on the FakeNOS instance as the ``CMDShell`` plugin of the EOS hosts, with the switch's
:class:`tuning.lab.eos.EosSwitch` as ``Nos.device``. When the device is replaced (a lab reset: a
reload of the switch) an open session ends at its next line, as a reload drops SSH.
"""

from __future__ import annotations

from typing import Any

from fakenos.plugins.shell.cmd_shell import CMDShell

#: the FakeNOS ``initial_prompt`` of an EOS host (the shell replaces it with the terminal's at start)
PROMPT = "{base_prompt}>"


class EosShell(CMDShell):
    """FakeNOS shell that hands every typed line to the switch's EOS terminal."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.intro = ""
        self.device = self.nos.device
        self.term = self.device.terminal()
        self.prompt = self.term.prompt

    def onecmd(self, line: str) -> bool:
        """Run one line on the switch; True ends the session (``exit`` at exec level, client gone,
        server stopping, or the switch reloaded)."""
        if line == "EOF" or not self.is_running.is_set() or self.nos.device is not self.device:
            return True
        out = self.term.run(line)
        if out:
            self.stdout.write(out)
        self.prompt = self.term.prompt
        return self.term.closed
