"""The ``Host`` contract every node domain talks through (DESIGN.md, transport/).

A node is reached by running shell commands; files are addressed under a sysroot
prefix: ``/`` on a real host, ``/host`` in a Kubernetes pod, a folder in the lab.
Nothing above this layer knows which.
"""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass
from typing import Protocol

from tuning.errors import CommandError


@dataclass(frozen=True)
class CommandResult:
    """What one command returned: ``rc`` exit status, ``stdout`` and ``stderr`` as text."""

    command: str
    rc: int
    stdout: str
    stderr: str

    def check(self, host: str, phase: str | None = None) -> "CommandResult":
        """Return self, or raise CommandError (command, exit code, stderr tail) if rc != 0."""
        if self.rc != 0:
            raise CommandError(self.command, self.rc, self.stderr or self.stdout, host=host, phase=phase)
        return self


class Running(Protocol):
    """A command started in the background (a perftest server). ``wait`` collects it; ``output``
    is its stdout so far (after a ``wait`` that timed out too: what it printed until then)."""

    def read_until(self, marker: str, timeout: float = 10.0) -> bool: ...

    def wait(self, timeout: float = 30.0) -> CommandResult: ...

    def output(self) -> str: ...


class Host(Protocol):
    """A device fabtune can run commands on.

    Attributes:
        name: inventory name.  sysroot: prefix for file paths (``/`` on a real host).

    ``privileged``: whether the command needs root. A host reached with become
    (``ansible_become``) runs privileged commands through sudo; ``run`` is privileged by
    default (reads of debugfs and writes of /proc/sys need root), ``start`` (background
    perftest servers) is not.
    """

    name: str
    sysroot: str

    def run(self, command: str, *, timeout: float = 60.0, privileged: bool = True) -> CommandResult: ...

    def start(self, command: str, *, privileged: bool = False) -> Running: ...

    def close(self) -> None: ...


#: where a process on the node itself sees the node's filesystem when not told (``fabtune node --sysroot``'s
#: default: a pod spec mounting the host sets ``/host``; the Slurm lab's TaskProlog sets each task's lab sysroot)
SYSROOT_ENV = "FABTUNE_SYSROOT"


def sysroot_path(sysroot: str, path: str) -> str:
    """Place an absolute device path under the sysroot: (``sysroot``, ``/proc/irq/5``) -> ``sysroot/proc/irq/5``."""
    if sysroot in ("", "/"):
        return path
    return posixpath.join(sysroot, path.lstrip("/"))


def q(path: str) -> str:
    """Shell-quote a path or value for a command line."""
    return shlex.quote(path)
