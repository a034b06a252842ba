"""How to reach a device: the one record every transport takes (:class:`tuning.transport.ssh.SshHost`)
and the inventory builds (:func:`tuning.inventory.load`, re-exported there as ``Connection``)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Connection:
    """How to reach a device. ``sysroot`` prefixes every file path on nodes (``/`` on a real host)."""

    hostname: str
    port: int
    username: str
    key_file: str | None
    known_hosts: str | None
    sysroot: str = "/"
    become: bool = False  # run privileged commands through sudo (tuning.transport.become)
    become_user: str = "root"
    become_method: str = "sudo"
    #: an Ansible-vault ciphertext of the become password (decrypted at connect; never journaled)
    become_password_vault: str | None = field(default=None, repr=False)
    #: the device is the controller itself (``fabtune_local: true``; a subnet manager host): commands
    #: run as local subprocesses, no SSH (:class:`tuning.transport.local.LocalHost`)
    local: bool = False
