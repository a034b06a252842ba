"""The local transport: this machine as a node (the :class:`tuning.transport.base.Host` contract),
each command a ``bash -c`` subprocess; no SSH.

For node-local work (one node's part of a run, launched on the node by a scheduler) and for the
fast test layer, which runs the real node domains on a lab node's sysroot in-process
(:func:`tuning.lab.localnode.lab_node`: the lab's stand-ins on ``PATH``, the node's folder as the
working directory, as the lab's SSH server runs them). With ``become_user`` (Ansible's become), privileged commands
go through sudo exactly as over SSH (:mod:`tuning.transport.become`, ``sudo -n``: a password is
never typed here); without it they run as this process's user, which must then be root for
privileged work (the lab stand-ins refuse what the kernel refuses an unprivileged user).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from tuning.errors import ConnectError
from tuning.procs import readable
from tuning.transport import become
from tuning.transport.base import CommandResult


def _is_user(name: str) -> bool:
    """Whether this process already runs as ``name`` (sudo to oneself changes nothing: a node-local
    task a scheduler started as root needs no sudo, and a sudo that serves only login shells, as
    the lab's, would refuse it)."""
    import pwd

    try:
        return pwd.getpwnam(name).pw_uid == os.geteuid()
    except KeyError:
        return False


class LocalRunning:
    """A command running in a local subprocess (see :meth:`LocalHost.start`); its output is read as
    it comes, so :meth:`read_until` sees a server's banner while the server runs on."""

    def __init__(self, host: str, command: str, proc: subprocess.Popen):
        self._host, self._command, self._proc = host, command, proc
        self._out_fd = proc.stdout.fileno()
        self._buf = {self._out_fd: bytearray(), proc.stderr.fileno(): bytearray()}
        self._open = set(self._buf)

    def _pump(self, deadline: float) -> None:
        """Read what the pipes hold, waiting at most until ``deadline`` (monotonic s) for some."""
        ready = readable(list(self._open), max(0.0, deadline - time.monotonic()))
        for fd in ready:
            chunk = os.read(fd, 65536)
            if chunk:
                self._buf[fd] += chunk
            else:
                self._open.discard(fd)

    def read_until(self, marker: str, timeout: float = 10.0) -> bool:
        """Wait until ``marker`` appears in the output; False when the command exited or ``timeout``
        (s) passed first."""
        deadline, want = time.monotonic() + timeout, marker.encode()
        while True:
            if any(want in b for b in self._buf.values()):
                return True
            if not self._open or time.monotonic() >= deadline:
                return False
            self._pump(deadline)

    def output(self) -> str:
        """Stdout so far (what the pipe holds now is read first)."""
        if self._open:
            self._pump(time.monotonic())
        return bytes(self._buf[self._out_fd]).decode(errors="replace")

    def wait(self, timeout: float = 30.0) -> CommandResult:
        """Wait for exit and collect output. Raises ConnectError on timeout (the command is killed)."""
        deadline = time.monotonic() + timeout
        while self._open and time.monotonic() < deadline:
            self._pump(deadline)
        try:
            rc = self._proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            raise ConnectError(f"`{' '.join(self._command.split())[:100]}` did not finish within {timeout:.0f} s",
                               host=self._host) from None
        out, err = (bytes(self._buf[p.fileno()]).decode(errors="replace") for p in (self._proc.stdout, self._proc.stderr))
        self._proc.stdout.close()
        self._proc.stderr.close()
        return CommandResult(self._command, rc, out, err)


class LocalHost:
    """This machine as the node ``name``; implements the Host contract.

    Args:
        name: inventory name.  sysroot: the path prefix of the node's files (``/`` on a real node).
        cwd: the working directory of every command (None: this process's).
        env: the environment of every command (None: this process's).
        become_user: run privileged commands through ``sudo -n -u USER`` (None: as this user).
    """

    def __init__(self, name: str, sysroot: str = "/", *, cwd: str | Path | None = None,
                 env: dict[str, str] | None = None, become_user: str | None = None):
        self.name, self.sysroot, self.cwd = name, sysroot, cwd
        self._env, self._become_user = env, become_user

    def start(self, command: str, *, privileged: bool = False) -> LocalRunning:
        """Start ``command`` (``bash -c``) and return at once; ``.wait()`` collects its result."""
        line = command
        if privileged and self._become_user is not None and not _is_user(self._become_user):
            line = become.wrap(command, self._become_user, with_password=False)
        try:
            proc = subprocess.Popen(["bash", "-c", line], cwd=self.cwd, env=self._env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)
        except OSError as e:
            raise ConnectError(f"cannot run bash: {e.strerror or e}", host=self.name) from None
        return LocalRunning(self.name, line, proc)

    def run(self, command: str, *, timeout: float = 60.0, privileged: bool = True) -> CommandResult:
        """Run one command and wait for it; through sudo when the host has ``become_user``."""
        return self.start(command, privileged=privileged).wait(timeout)

    def is_active(self) -> bool:
        """Always True: there is no connection to lose."""
        return True

    def close(self) -> None:
        """Nothing to close."""

