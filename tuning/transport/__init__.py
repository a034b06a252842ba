"""The Host contract (run a command, read and write files under a sysroot) and its SSH transport."""

from tuning.transport.base import CommandResult, Host, Running, sysroot_path  # noqa: F401
