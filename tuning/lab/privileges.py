"""Who the lab's node shells run as, and the lab's sudo (daemon side).

A real node is reached as an unprivileged user who runs what needs root through sudo; the
lab is never more lenient. Two modes, chosen by who runs the daemon:

- **root daemon** (CI): every node shell runs with the uid/gid of the lab user (the system
  user ``fabtune`` if one exists, else ``nobody``), so the kernel itself refuses a write to a
  root-owned sysroot file (``bash: ...: Permission denied``) and the stand-ins see a
  non-root caller. The state folder's ancestors get search permission (``o+x``, never read)
  so that uid can reach its sysroot (pytest's tmp folders are 0700).
- **user namespace** (a developer): the controller starts the daemon in a user namespace
  (``unshare --user --map-root-user``; ``make test`` runs the whole suite in one) where only
  the developer's uid is mapped, as 0. Node shells keep uid 0 there but drop every
  capability (``setpriv``: empty bounding set, ``no_new_privs``), and the sysroot trees are made
  read-only (files 0444, folders 0555), so the kernel refuses their writes (EACCES) while
  the daemon and sudo (uid 0 with CAP_DAC_OVERRIDE in the namespace) write as root does.

``sudo`` on a node's PATH is the stand-in :mod:`tuning.lab.sudo`. It connects to the node's
unix socket ``<state>/run/sudo/<node>.sock`` served here, passes its stdin/stdout/stderr
(SCM_RIGHTS) and the command. ``run/`` and ``run/sudo/`` belong to the daemon's uid, 0755, so
no node user can move or replace a socket (only ``run/perftest/`` is world-writable, sticky).
The daemon identifies the caller by its peer pid (SO_PEERCRED): it must descend from a shell
(or a sudo'ed command) of THIS socket's node (:func:`node_of`; never the caller's
``FABTUNE_LAB_*`` variables); then it checks the lab's sudo policy (``<state>/sudoers.json``:
NOPASSWD unless a password hash is set) and runs the command with full privileges in the
socket's node's environment. One lab-internal request needs no sudo policy: ``{"op": "counters"}``
adds a perftest stand-in's increments to its node's NIC counters (:func:`tuning.lab.counters.bump`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pwd
import signal
import socket
import stat
import subprocess
import threading
import time
from pathlib import Path

from tuning.procs import readable

log = logging.getLogger("fabtune.lab.sudo")
LAB_USERS = ("fabtune", "nobody")
MAX_REQUEST = 1 << 20


def in_user_namespace() -> bool:
    """Whether this process runs in a user namespace that maps only some uids (not the initial one)."""
    try:
        maps = Path("/proc/self/uid_map").read_text().split()
    except OSError:
        return False
    return maps != ["0", "0", "4294967295"]


def lab_user() -> tuple[int, int] | None:
    """(uid, gid) node shells drop to when the daemon is real root; None otherwise."""
    if os.geteuid() != 0 or in_user_namespace():
        return None
    for name in LAB_USERS:
        try:
            entry = pwd.getpwnam(name)
            return entry.pw_uid, entry.pw_gid
        except KeyError:
            continue
    return 65534, 65534


def describe() -> str:
    """How node shells are made unprivileged, for lab.log."""
    user = lab_user()
    return f"as uid {user[0]}" if user else "without capabilities (user namespace)"


def make_read_only(tree: Path) -> None:
    """Files 0444 and folders 0555 under ``tree`` (user-namespace mode: the shells own them)."""
    for parent, dirs, files in os.walk(tree):
        for name in files:
            path = os.path.join(parent, name)
            if not os.path.islink(path):
                os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) & 0o555)
        for name in dirs:
            path = os.path.join(parent, name)
            if not os.path.islink(path):
                os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) & 0o555)
    os.chmod(tree, stat.S_IMODE(os.stat(tree).st_mode) & 0o555)


def grant_search(path: Path, uid: int, gid: int) -> list[str]:
    """Give ``uid`` search permission on every ancestor of ``path`` (``o+x``); returns the folders changed."""
    changed = []
    for folder in [*reversed(Path(path).resolve().parents), Path(path).resolve()]:
        st = folder.stat()
        if st.st_uid == uid and st.st_mode & stat.S_IXUSR or st.st_gid == gid and st.st_mode & stat.S_IXGRP:
            continue
        if not st.st_mode & stat.S_IXOTH:
            os.chmod(folder, stat.S_IMODE(st.st_mode) | stat.S_IXOTH)
            changed.append(str(folder))
    return changed


def unprivileged(argv: list[str]) -> tuple[list[str], dict]:
    """The command line and ``create_subprocess_exec`` keyword arguments of an unprivileged node shell.

    Both ways go through ``setpriv`` (util-linux) before ``exec``; no ``preexec_fn`` (the daemon has
    threads) and no ``user=``/``group=``/``extra_groups=`` either: with those CPython (3.11) forks the
    whole daemon instead of using vfork, for every SSH exec of every node: on the lab's 70 MB daemon
    2.5 ms of its CPU, 200 page faults and 15 ms of its event loop per command under load, against
    0.4 ms and 7 ms through setpriv. The shell's credentials (``/proc/PID/status``) are the same.

    - Real root: ``--reuid``/``--regid`` the lab user's uid/gid, ``--clear-groups`` (no supplementary
      groups); the capabilities go with uid 0, as with ``setuid``.
    - User namespace: it empties the capability bounding set and sets ``no_new_privs``, so the shell
      holds no capability although it is uid 0 there.
    """
    user = lab_user()
    if user is not None:
        return ["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups", "--", *argv], {}
    return ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--", *argv], {}


def require_write_access(sysroot: Path, what: str) -> None:
    """Refuse, in one line, a lab command that must write ``sysroot`` when this process may not.

    That is a normal user outside the lab's user namespace: the node trees are read-only there
    (:func:`make_read_only`) and only the namespace's root may write them.

    Raises:
        TuningError: ``sysroot`` is not writable for this process.
    """
    from tuning.errors import TuningError

    if os.access(sysroot, os.W_OK):
        return
    raise TuningError(f"{what} must write {sysroot}, which is read-only to this user (a lab started by a normal "
                      "user keeps its node trees read-only outside its user namespace, docs/lab.md); run it as "
                      "`unshare --user --map-root-user fabtune ...` or start the lab as root", phase="lab")


# ---- the sudo policy ------------------------------------------------------------------------

def policy_path(state_dir: Path) -> Path:
    """``<state>/sudoers.json``: ``{}`` (NOPASSWD) or ``{"password_sha256": HEX}``."""
    return Path(state_dir) / "sudoers.json"


def require_password(state_dir: Path, password: str | None) -> None:
    """Make the lab's sudo ask for ``password`` (None: passwordless again). Only a hash is stored."""
    data = {} if password is None else {"password_sha256": hashlib.sha256(password.encode()).hexdigest()}
    path = policy_path(state_dir)
    path.write_text(json.dumps(data) + "\n")
    path.chmod(0o600)


def _password_hash(state_dir: Path) -> str | None:
    try:
        return json.loads(policy_path(state_dir).read_text()).get("password_sha256")
    except (OSError, ValueError, AttributeError):
        return None


# ---- the sudo server ------------------------------------------------------------------------

def socket_path(state_dir: Path, node: str) -> Path:
    """The node's sudo socket: ``<state>/run/sudo/<node>.sock``."""
    return Path(state_dir) / "run" / "sudo" / f"{node}.sock"


#: how many 50 ms steps (30 s) a sudo call of an unclaimed process waits for its spawner's
#: :func:`claim` (the shell exists, and may call sudo, a moment before it is claimed). 2 s was too
#: short for a 256-node lab planned at once (load ~200 on 2 cores): node07's first sudo was refused
#: as no node's, a harness error read as the node's failure. A process of another node, or one that
#: does not descend from the daemon (it is never claimed), is refused at once.
CLAIM_WAIT_STEPS = 600
_OWNERS: dict[int, str] = {}
_OWNERS_LOCK = threading.Lock()


def claim(pid: int, node: str) -> None:
    """Record that ``pid`` is a shell (or a sudo'ed command) of ``node``, until :func:`release`."""
    with _OWNERS_LOCK:
        _OWNERS[pid] = node


def release(pid: int) -> None:
    """Forget ``pid`` (it was waited for)."""
    with _OWNERS_LOCK:
        _OWNERS.pop(pid, None)


def node_of(pid: int) -> str | None:
    """The node whose shell or sudo'ed command ``pid`` descends from; None for any other process.

    Walks the parent chain up to the first recorded pid (a node shell's environment, e.g.
    ``FABTUNE_LAB_NODE``, is the caller's to forge; its ancestry is not).
    """
    return _ancestry(pid)[1]


def _ancestry(pid: int) -> tuple[bool, str | None]:
    """``(pid descends from this daemon, the node of the first recorded pid on the way or None)``."""
    me, node = os.getpid(), None
    for _ in range(64):
        if pid == me:
            return True, node  # the chain must reach the daemon (no stale pid of another process)
        if node is None:
            with _OWNERS_LOCK:
                node = _OWNERS.get(pid)
        if pid <= 1:
            return False, None
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False, None
        pid = int(status.split("PPid:", 1)[1].split()[0])
    return False, None


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, MAX_REQUEST, 3)
    while not data.endswith(b"\n") and len(data) < MAX_REQUEST:
        more = conn.recv(MAX_REQUEST)
        if not more:
            break
        data += more
    return json.loads(data), fds


def _reply(conn: socket.socket, message: dict) -> None:
    try:
        conn.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        pass


def _own_folder(folder: Path) -> None:
    """Make ``folder`` the daemon's, 0755: no node user may rename, replace or add to what it holds."""
    folder.mkdir(parents=True, exist_ok=True)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():  # planted before the daemon came up
        raise PermissionError(f"{folder} is not a folder of the lab daemon's user")
    os.chmod(folder, 0o755)


class SudoServer:
    """One node's sudo socket, served by a thread of the daemon (a thread per request)."""

    def __init__(self, state_dir: Path, node: str, env: dict[str, str], cwd: Path):
        self.state_dir, self.node, self.env, self.cwd = Path(state_dir), node, env, cwd
        path = socket_path(state_dir, node)
        _own_folder(path.parent.parent)
        _own_folder(path.parent)
        path.unlink(missing_ok=True)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        path.chmod(0o666)  # anyone may connect; _serve_one admits only the node shells' descendants
        self._sock.listen(64)
        self._stop = False
        threading.Thread(target=self._accept, name=f"sudo-{node}", daemon=True).start()

    def close(self) -> None:
        """Stop accepting; running commands finish."""
        self._stop = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        fds: list[int] = []
        try:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            pid = int.from_bytes(creds[:4], "little")
            mine, caller = _ancestry(pid)
            for _ in range(CLAIM_WAIT_STEPS):  # a shell of this daemon may call sudo before its spawner claimed it
                if caller is not None or not mine:
                    break
                time.sleep(0.05)
                mine, caller = _ancestry(pid)
            if caller != self.node:
                log.warning("%s: sudo refused to pid %d (a process of %s)", self.node, pid, caller or "no node")
                _reply(conn, {"rc": 1, "error": f"sudo: this lab socket serves only {self.node}'s own shells"})
                return
            request, fds = _recv_request(conn)
            self._serve_one(conn, request, fds)
        except (OSError, ValueError, KeyError) as exc:
            _reply(conn, {"rc": 1, "error": f"sudo: lab daemon: {exc}"})
        finally:
            for fd in fds:
                os.close(fd)
            conn.close()

    def _serve_one(self, conn: socket.socket, request: dict, fds: list[int]) -> None:
        if request.get("op") == "policy":
            _reply(conn, {"password": _password_hash(self.state_dir) is not None})
            return
        if request.get("op") == "counters":  # the NIC updating its own counters, not a sudo: no password
            _reply(conn, self._counters(request))
            return
        want = _password_hash(self.state_dir)
        given = request.get("password")
        if want is not None and (given is None or hashlib.sha256(given.encode()).hexdigest() != want):
            _reply(conn, {"rc": 1, "denied": True})
            return
        if len(fds) != 3 or not request.get("argv"):
            _reply(conn, {"rc": 1, "error": "sudo: lab daemon: bad request"})
            return
        _reply(conn, {"rc": self._run(conn, request, fds)})

    def _counters(self, request: dict) -> dict:
        """Add a perftest stand-in's counter increments to this node's NIC counters (files the
        daemon owns, as sysfs files are root's: :func:`tuning.lab.counters.apply_request`)."""
        from tuning.lab import counters

        try:
            counters.apply_request(Path(self.env["FABTUNE_LAB_SYSROOT"]), request)
        except (ValueError, OSError, KeyError) as exc:
            return {"rc": 1, "error": f"{self.node}: {exc}"}
        return {"rc": 0}

    def _run(self, conn: socket.socket, request: dict, fds: list[int]) -> int:
        """Run the command as root with the caller's stdio; kill it if the caller goes away."""
        cwd = request.get("cwd") or str(self.cwd)
        env = {**self.env, "USER": "root", "LOGNAME": "root", "SUDO_USER": self.env.get("USER", "fabtune"),
               "SUDO_COMMAND": " ".join(request["argv"])[:4096]}
        try:
            proc = subprocess.Popen(request["argv"], cwd=cwd if os.path.isdir(cwd) else self.cwd, env=env,
                                    stdin=fds[0], stdout=fds[1], stderr=fds[2], start_new_session=True)
        except OSError as exc:
            why = "command not found" if isinstance(exc, FileNotFoundError) else exc.strerror
            os.write(fds[2], f"sudo: {request['argv'][0]}: {why}\n".encode())
            return 1
        claim(proc.pid, self.node)  # its own sudo calls are this node's
        try:
            return self._watch(conn, proc)
        finally:
            release(proc.pid)

    @staticmethod
    def _watch(conn: socket.socket, proc: subprocess.Popen) -> int:
        while True:
            try:
                return exit_status(proc.wait(timeout=0.05))
            except subprocess.TimeoutExpired:
                pass
            ready = readable([conn], 0)  # poll: the daemon holds more than 1,024 descriptors in a big lab
            if ready and not conn.recv(1):  # the sudo stand-in died (its SSH channel closed)
                _killpg(proc.pid)
                return exit_status(proc.wait())


def exit_status(rc: int) -> int:
    """A child's exit status as a shell reports it: ``rc``, or 128 + N for a kill by signal N (``rc`` = -N)."""
    return rc if rc >= 0 else 128 - rc


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def start_sudo(state_dir: Path, nodes: list[str], env_of, cwd_of) -> list[SudoServer]:
    """Serve the sudo socket of every node; ``env_of(node)`` / ``cwd_of(node)`` give its shell's env and cwd."""
    return [SudoServer(state_dir, node, env_of(node), cwd_of(node)) for node in nodes]
