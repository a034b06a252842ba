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


def check_key(key_file, host: str | None = None) -> None:
    """Fail in one line when the SSH private key an inventory names cannot be read: paramiko and
    netmiko report it as a failed TCP connection or a wrong host name (a new user ran fabtune as
    ``nobody`` against a lab whose key is root's 0600 and was told to check the host name).

    Args:
        key_file: the key's path (None: the agent-less default keys; nothing to check).

    Raises:
        ConnectError: naming the key and why (permission denied, no such file).
    """
    if not key_file:
        return
    try:
        with open(key_file, "rb"):
            pass
    except OSError as e:
        from tuning.errors import ConnectError

        raise ConnectError(f"cannot read the SSH key {key_file}: {e.strerror} (run as its owner, or name a key "
                           "this user may read)", host=host, phase="connect") from e

