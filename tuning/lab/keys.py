"""SSH keys of the lab (lab contract: ``<state_dir>/ssh/``).

- ``ssh/id_ed25519[.pub]``: the client key fabtune logs in with (user ``fabtune``).
- ``ssh/hostkeys/<name>``: each endpoint's persistent host key (made once, reused).
- ``ssh/known_hosts``: ``[127.0.0.1]:PORT ssh-ed25519 AAAA...`` per endpoint (OpenSSH format).

Keys are ed25519 in the OpenSSH private-key format (paramiko and OpenSSH read it).
Files are written atomically; ``known_hosts`` updates hold an flock so the node and
switch labs can both update it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Mapping

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

LOOPBACK = "127.0.0.1"


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _ensure_key(path: Path, comment: str) -> str:
    """Create an ed25519 key at ``path`` (0600) and ``path.pub`` if missing; return the public line."""
    pub = path.with_name(path.name + ".pub")
    if not path.exists():
        key = Ed25519PrivateKey.generate()
        private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                    serialization.NoEncryption())
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        _write_atomic(path, private, 0o600)
        _write_atomic(pub, public + f" {comment}\n".encode(), 0o644)
    if not pub.exists():
        key = serialization.load_ssh_private_key(path.read_bytes(), password=None)
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        _write_atomic(pub, public + f" {comment}\n".encode(), 0o644)
    kind, b64 = pub.read_text().split()[:2]
    return f"{kind} {b64}"


def ensure_client_key(state_dir: Path) -> Path:
    """Make ``ssh/id_ed25519`` (+ ``.pub``) if missing.

    Returns:
        The private key path (``<state_dir>/ssh/id_ed25519``).
    """
    path = Path(state_dir) / "ssh" / "id_ed25519"
    _ensure_key(path, "fabtune@lab")
    return path


def client_public_line(state_dir: Path) -> str:
    """``"ssh-ed25519 AAAA..."`` of the client key (made if missing)."""
    return _ensure_key(ensure_client_key(state_dir), "fabtune@lab")


def ensure_host_key(state_dir: Path, name: str) -> str:
    """Make the host key ``ssh/hostkeys/<name>`` if missing.

    Returns:
        Its public line without comment, e.g. ``"ssh-ed25519 AAAAC3Nz..."``.
    """
    return _ensure_key(Path(state_dir) / "ssh" / "hostkeys" / name, f"{name}@lab")


def host_key_path(state_dir: Path, name: str) -> Path:
    """Path of the private host key of endpoint ``name``."""
    return Path(state_dir) / "ssh" / "hostkeys" / name


def write_known_hosts(state_dir: Path, entries: Mapping[int, str]) -> Path:
    """Add or replace ``[127.0.0.1]:PORT <type> <b64>`` lines in ``ssh/known_hosts``.

    Args:
        entries: port -> public line (``"ssh-ed25519 AAAA..."``); other ports' lines are kept.

    Returns:
        The known_hosts path. Lines are ordered by port.
    """
    path = Path(state_dir) / "ssh" / "known_hosts"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(".known_hosts.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        lines: dict[str, str] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    lines[line.split()[0]] = line
        for port, public in entries.items():
            host = f"[{LOOPBACK}]:{port}"
            lines[host] = f"{host} {' '.join(public.split()[:2])}"
        order = sorted(lines, key=lambda h: (len(h), h))
        _write_atomic(path, "".join(lines[h] + "\n" for h in order).encode(), 0o644)
    return path
