"""Privilege escalation on nodes, as Ansible's ``become`` (``ansible_become*`` inventory keys).

Real nodes are reached as an unprivileged user who runs what needs root through ``sudo``.
Domains never write ``sudo``: the transport wraps each privileged command as

    sudo -n -u root -- /bin/bash -c '<command>'           (passwordless sudo, NOPASSWD)
    sudo -S -p '' -u root -- /bin/bash -c '<command>'     (a become password, fed on stdin)

A become password comes from the environment (``FABTUNE_BECOME_PASSWORD``) or from an
Ansible-vault value in the inventory (``ansible_become_password: !vault |``, decrypted at connect
time with the vault password in ``ANSIBLE_VAULT_PASSWORD_FILE``; the environment wins). The
plain password is never stored in a :class:`~tuning.inventory.Connection` (only the ciphertext,
under a key the journal leaves out), never put on a command line and never logged, journaled or
reported. An inventory that holds one in clear text is refused.

Source: ``sudo(8)`` (``-n`` non-interactive, ``-S`` read the password from stdin, ``-p`` prompt,
``-u`` target user, ``--`` end of options); Ansible ``become`` keys
(``ansible_become``, ``ansible_become_method``, ``ansible_become_user``).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Callable

from pathlib import Path

from tuning.errors import InputError

#: the only become method fabtune drives (Ansible's default)
METHODS = ("sudo",)
#: a POSIX user name as useradd's default NAME_REGEX allows it
USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}\Z")
#: the environment variable that may hold the become password
PASSWORD_ENV = "FABTUNE_BECOME_PASSWORD"
#: inventory keys that would hold a become password (Ansible's names)
PASSWORD_KEYS = ("ansible_become_password", "ansible_become_pass")
#: the environment variable naming the file that holds the vault password (Ansible's own)
VAULT_FILE_ENV = "ANSIBLE_VAULT_PASSWORD_FILE"
#: how the YAML loader hands over a ``!vault`` value (the form ``ansible-inventory --list`` prints)
VAULT_KEY = "__ansible_vault"
#: inventory keys this module reads
KEYS = ("ansible_become", "ansible_become_method", "ansible_become_user") + PASSWORD_KEYS
#: (issue 9, Ansible front end) a function ``ciphertext -> password`` a front end registers to decrypt
#: vault values with its own secrets (``ansible-playbook --vault-id``/``--ask-vault-pass``: the Ansible
#: plugins register Ansible's own VaultLib); tried before ``ANSIBLE_VAULT_PASSWORD_FILE``; None: unused
decrypt_hook: Callable[[str], str] | None = None


@dataclass(frozen=True)
class Become:
    """Become settings of one host: ``enabled``, ``user`` (default root), ``method`` (sudo)."""

    enabled: bool = False
    user: str = "root"
    method: str = "sudo"
    password_vault: str | None = field(default=None, repr=False)  # ciphertext, never the password


def parse(vars_: dict, sources: dict, host: str) -> Become:
    """Read and check the ``ansible_become*`` keys of one host's merged variables.

    Args:
        vars_: the host's variables (Ansible precedence already applied).
        sources: key -> file that set it (for the error message).
        host: inventory name.

    Raises:
        InputError: a non-boolean ``ansible_become``, a method other than sudo, a user name
            outside the POSIX grammar, or a become password written in clear text.
    """
    def where(key: str) -> str:
        return sources.get(key, "inventory")

    enabled = vars_.get("ansible_become", False)
    if not isinstance(enabled, bool):
        raise InputError(where("ansible_become"), "ansible_become",
                         f"{enabled!r} is not a boolean; allowed: true, false (host {host})")
    method = vars_.get("ansible_become_method", "sudo")
    if method not in METHODS:
        raise InputError(where("ansible_become_method"), "ansible_become_method",
                         f"{method!r} is not supported; allowed: {', '.join(METHODS)} (host {host})")
    user = vars_.get("ansible_become_user", "root")
    if not isinstance(user, str) or not USER_RE.match(user):
        raise InputError(where("ansible_become_user"), "ansible_become_user",
                         f"{user!r} is not a user name; allowed: [a-z_][a-z0-9_-]{{0,31}} (host {host})")
    vault = None
    for key in PASSWORD_KEYS:
        if key in vars_:
            vault = _vault_text(vars_[key])
            if vault is None:
                raise InputError(where(key), key, "a become password is never read from the inventory in "
                                 f"clear text; set {PASSWORD_ENV} in the environment or encrypt it with "
                                 f"`ansible-vault encrypt_string` (host {host})")
    return Become(enabled, user, method, vault)


def _vault_text(value: object) -> str | None:
    """The ciphertext of a ``!vault`` value (``{"__ansible_vault": "$ANSIBLE_VAULT;..."}``), else None."""
    text = value.get(VAULT_KEY) if isinstance(value, dict) and set(value) == {VAULT_KEY} else None
    return text if isinstance(text, str) and text.lstrip().startswith("$ANSIBLE_VAULT;") else None


def password(vault: str | None, host: str) -> str | None:
    """The become password of a host: ``FABTUNE_BECOME_PASSWORD``, else the decrypted vault value, else None.

    Raises:
        InputError: a vault value without ``ANSIBLE_VAULT_PASSWORD_FILE``, an unreadable file, a wrong
            vault password or no ansible-core to decrypt with: bad input (exit 2), the same for every
            host and every retry, never an unreachable host (the message never holds a secret).
    """
    env = os.environ.get(PASSWORD_ENV)
    if env or vault is None:
        return env or None
    if decrypt_hook is not None:  # a front end decrypting with its own vault secrets (Ansible's)
        try:
            return decrypt_hook(vault)
        except Exception:  # its text may quote the data: never passed on
            raise _vault_error("vault", "the playbook's vault secrets", "cannot decrypt ansible_become_password "
                               "with them (a wrong vault password?)", host) from None
    path = os.environ.get(VAULT_FILE_ENV)
    if not path:
        raise _vault_error(VAULT_FILE_ENV, "unset", f"ansible_become_password is vault-encrypted: set "
                           f"{VAULT_FILE_ENV} (or {PASSWORD_ENV})", host)
    try:
        from ansible.parsing.vault import VaultLib, VaultSecret
    except ImportError:
        raise _vault_error("ansible-core", "import", "decrypting ansible_become_password needs ansible-core "
                           "(pip install ansible-core)", host) from None
    try:
        secret = VaultSecret(Path(path).read_bytes().strip())
    except OSError as e:
        raise _vault_error(path, VAULT_FILE_ENV, f"cannot read it: {e.strerror}", host) from None
    try:
        return VaultLib([("default", secret)]).decrypt(vault.encode()).decode()
    except Exception:  # AnsibleVaultError and friends: their text may quote the data, never passed on
        raise _vault_error(path, VAULT_FILE_ENV, "cannot decrypt ansible_become_password with this vault "
                           "password (a wrong vault password?)", host) from None


def _vault_error(source: str, key: str, problem: str, host: str) -> InputError:
    """``<host>: <source>: <key>: <problem>``, exit 2: where the vault password comes from, what went wrong."""
    return InputError(source, key, problem, host=host)


def wrap(command: str, user: str, *, with_password: bool) -> str:
    """The command line that runs ``command`` as ``user`` through sudo.

    Args:
        command: the shell command a domain built (inventory strings already quoted).
        user: the target user (checked against :data:`USER_RE` at load).
        with_password: True when a password will be written on stdin (``-S -p ''``);
            False for passwordless sudo (``-n``: fail at once instead of prompting).

    Returns:
        e.g. ``sudo -n -u root -- /bin/bash -c 'sysctl -w net.core.rmem_max=1'``.
    """
    opts = "-S -p ''" if with_password else "-n"
    return f"sudo {opts} -u {shlex.quote(user)} -- /bin/bash -c {shlex.quote(command)}"
