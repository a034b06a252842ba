"""Start, stop and inspect the lab (``fabtune lab up|down|status``).

``up`` lays out the state folder of the lab contract (``docs/lab.md``): fresh node
sysroots, SSH keys and ``known_hosts``, ``bin/`` stand-in wrappers and
``fabric.json``; then it spawns the detached daemon (``python -m
tuning.lab.daemon STATE_DIR``, pid in ``lab.pid``, output in ``lab.log``) and waits
until every node and switch port accepts TCP.
"""

from __future__ import annotations

import importlib.util
import os
import stat
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tuning.errors import SetupError, TuningError
from tuning.lab import keys, privileges, sysroot_share, toolserver
from tuning.lab.fabric import Fabric, default_fabric
from tuning.lab.sysroot import build_sysroot
from tuning.lab.tools import RELAYED, SHELL_TOOLS, TOOLS

#: seconds from the daemon's power-on copy (:func:`tuning.lab.power_on.keep`) to every endpoint listening
UP_TIMEOUT_S = 30.0
#: seconds the daemon may take to copy the built node trees to ``power-on/`` before it serves
#: (about 10 s for 4 nodes' ~57,000 entries at load 5 on this project's 2-core machine; more loaded, more),
#: plus :data:`COPY_S_PER_NODE` per node: the copy grows with the lab (a 64-node lab's ran past 300 s at
#: load 10-25, about 6 s a node, bench/slurm_vs_ssh.py on 2026-12-04)
COPY_TIMEOUT_S = 300.0
COPY_S_PER_NODE = 10.0
#: what the daemon imports beyond the core (the ``lab`` extra of pyproject.toml)
LAB_MODULES = ("asyncssh", "fakenos")
DOWN_TIMEOUT_S = 5.0
#: a stand-in's wrapper: the lab's tool server forks it (:mod:`tuning.lab.toolserver`), else it runs here
WRAPPER = """#!{python} -S
import sys
sys.path.insert(0, {root!r})
from tuning.lab.toolclient import run
sys.exit(run({tool!r}, {tools_dir!r}, {relay!r}))
"""


def _package_parent() -> str:
    return str(Path(__file__).resolve().parents[2])  # the folder that holds the tuning package


def write_wrappers(bin_dir: Path) -> list[Path]:
    """Write one executable wrapper per stand-in tool into ``bin_dir``; returns their paths."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for tool in TOOLS:
        path = bin_dir / tool
        # -S: no site-packages (the stand-ins are stdlib-only), ~45 ms less per call
        path.write_text(WRAPPER.format(python=sys.executable, root=_package_parent(), tool=tool,
                                              tools_dir=str(toolserver.socket_path(bin_dir.parent, "root").parent),
                                              relay=tool in RELAYED))
        path.chmod(0o755)
        paths.append(path)
    for tool, script in SHELL_TOOLS.items():  # stand-ins in bash: called once per sysfs write
        path = bin_dir / tool
        path.write_text(script.read_text())
        path.chmod(0o755)
        paths.append(path)
    sudo = bin_dir / "sudo"
    sudo.write_text(SUDO_WRAPPER.format(python=sys.executable, root=_package_parent()))
    sudo.chmod(0o755)
    return paths + [sudo]


SUDO_WRAPPER = """#!{python} -S
import sys
sys.path.insert(0, {root!r})
from tuning.lab.sudo import main
main()
"""


def _protect(state_dir: Path, fabric: Fabric) -> None:
    """Permissions as a real node has them, for the unprivileged node shells.

    ``run/`` (the sudo sockets' folder) is the daemon's, 0755: no node user may rename or
    replace what it holds. ``run/perftest/`` (rendezvous, written by unprivileged servers and
    sudo'ed clients) is world-writable with the sticky bit (1777, as ``/tmp``): nobody removes or
    renames another user's file there. debugfs is root-only (0700, as the kernel mounts it).
    When the daemon is root, the lab user gets search permission on the folders above the state
    folder, the package and the interpreter, so it can reach them.
    """
    for folder, mode in ((state_dir / "run", 0o755), (state_dir / "run" / "perftest", 0o1777)):
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(mode)
    for node in fabric.nodes:
        debug = state_dir / "nodes" / node.name / "sysroot" / "sys" / "kernel" / "debug"
        if debug.is_dir():
            debug.chmod(0o700)
    user = privileges.lab_user()
    if user is not None:
        for path in (state_dir, Path(_package_parent()), Path(sys.executable).resolve().parent):
            privileges.grant_search(path, *user)
        # the stand-ins put the package parent on sys.path: Python's importer lists that folder,
        # so the lab user needs to read it too (a fresh clone in a mktemp folder is 0700)
        parent = Path(_package_parent()).resolve()
        parent.chmod(stat.S_IMODE(parent.stat().st_mode) | stat.S_IROTH | stat.S_IXOTH)
    elif os.geteuid() != 0 or privileges.in_user_namespace():  # the shells' uid owns the files
        for node in fabric.nodes:
            privileges.make_read_only(state_dir / "nodes" / node.name / "sysroot")
            debug = state_dir / "nodes" / node.name / "sysroot" / "sys" / "kernel" / "debug"
            if debug.is_dir():
                debug.chmod(0)  # the owner may not read it either: only CAP_DAC_OVERRIDE (sudo) may


def _daemon_argv(state_dir: Path) -> tuple[list[str], dict[str, str]]:
    """The daemon's command line: as is when root (or root of a user namespace), else in a user namespace."""
    argv = [sys.executable, "-m", "tuning.lab.daemon", str(state_dir)]
    if os.geteuid() == 0:
        return argv, {}
    unshare = shutil.which("unshare")
    if unshare is None:
        raise TuningError("the lab needs root or user namespaces (`unshare` from util-linux) to give its "
                          "node shells an unprivileged user and a sudo", phase="lab")
    return [unshare, "--user", "--map-root-user", "--", *argv], {}


def endpoints(fabric: Fabric) -> list[tuple[str, str, int]]:
    """``[(name, kind, port), ...]`` of every SSH endpoint, nodes first (kind node|switch)."""
    return ([(n.name, "node", n.port) for n in fabric.nodes]
            + [(s.name, "switch", s.port) for s in fabric.switches])


def prepare(state_dir: Path, fabric: Fabric) -> None:
    """Lay out everything the daemon serves (no process is started).

    Node folders, ``run/`` and ``bin/`` are rebuilt from scratch; keys in ``ssh/`` are
    kept (host keys are persistent), ``known_hosts`` is rewritten.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    _discard([state_dir / folder for folder in ("nodes", "run", "bin", "power-on")])
    keys.ensure_client_key(state_dir)
    (state_dir / "ssh" / "known_hosts").unlink(missing_ok=True)  # no stale ports of an older fabric
    keys.write_known_hosts(state_dir, {port: keys.ensure_host_key(state_dir, name)
                                       for name, _, port in endpoints(fabric)})
    with sysroot_share.sharing():  # read-only attributes: one inode for every node
        for node in fabric.nodes:
            build_sysroot(state_dir / "nodes" / node.name / "sysroot", node)
    (state_dir / "run").mkdir()
    write_wrappers(state_dir / "bin")
    fabric.save(state_dir / "fabric.json")
    _protect(state_dir, fabric)


def _discard(folders: list[Path]) -> None:
    """Move old folders into ``.trash/`` and delete them in a detached ``rm -rf``.

    Unlinking ~14k sysroot files takes seconds on slow disks; ``up`` need not wait.
    """
    present = [f for f in folders if f.exists()]
    if not present:
        return
    trash = present[0].parent / ".trash" / str(time.time_ns())
    trash.mkdir(parents=True)
    for folder in present:
        folder.rename(trash / folder.name)
    try:
        wipe = 'chmod -R u+rwX "$1" 2>/dev/null; rm -rf "$1"'  # read-only trees of user-namespace mode
        subprocess.Popen(["sh", "-c", wipe, "sh", str(trash)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        shutil.rmtree(trash, ignore_errors=True)


def up(state_dir: Path, fabric: Fabric | None = None) -> None:
    """Build and start the lab in ``state_dir``; returns once every endpoint accepts TCP.

    Args:
        state_dir: the state folder (created if missing).
        fabric: the fabric to run; :func:`tuning.lab.fabric.default_fabric` if None.

    Raises:
        SetupError: the ``lab`` extra is not installed, the lab already runs there, or its ports are
            taken (exit 2, nothing started).  TuningError: it did not come up (:func:`_wait_up`: 30 s after its
            power-on copy, which may take 300 s; the message carries the tail of ``lab.log``; the
            daemon is stopped).
    """
    missing = [m for m in LAB_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise SetupError(f"the lab needs {', '.join(missing)}, which this installation lacks: "
                          "pip install 'fabtune[lab]' (`make demo` installs it)", phase="lab")
    state_dir = state_dir.resolve()
    pid = running_pid(state_dir)
    if pid is not None:
        raise SetupError(f"the lab is already running in {state_dir} (pid {pid}); "
                          "run `fabtune lab down` first", phase="lab")
    fabric = fabric or default_fabric()
    _refuse_taken_ports(fabric, "already in use")
    argv, extra_env = _daemon_argv(state_dir)
    prepare(state_dir, fabric)
    env = {**os.environ, **extra_env, "PYTHONPATH": os.pathsep.join(
        p for p in (_package_parent(), os.environ.get("PYTHONPATH")) if p)}
    with open(state_dir / "lab.log", "wb") as log:
        proc = subprocess.Popen(argv,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=state_dir, env=env, start_new_session=True)
    (state_dir / "lab.pid").write_text(f"{proc.pid}\n")
    _wait_up(state_dir, fabric, proc)
    _log_start(state_dir)


#: a file that ``up`` appends one line to per start-up (the test suite counts and attributes them)
STARTS_LOG_ENV = "FABTUNE_LAB_STARTS_LOG"


def _log_start(state_dir: Path) -> None:
    """Append ``<state_dir>\t<PYTEST_CURRENT_TEST>`` to ``$FABTUNE_LAB_STARTS_LOG`` when it is set."""
    log = os.environ.get(STARTS_LOG_ENV)
    if log:
        try:
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"{state_dir}\t{os.environ.get('PYTEST_CURRENT_TEST', '')}\n")
        except OSError as exc:  # a count, never a reason for the lab not to start
            print(f"fabtune lab: cannot append to {STARTS_LOG_ENV}={log}: {exc}", file=sys.stderr)


def _wait_up(state_dir: Path, fabric: Fabric, proc: subprocess.Popen) -> None:
    """Wait until every endpoint of ``fabric`` accepts TCP: :data:`UP_TIMEOUT_S` from the moment the
    daemon has its power-on copy (``power-on/manifest.json``; the copy of the node trees grows with
    the lab and the machine's load and proves the daemon alive), :data:`COPY_TIMEOUT_S` plus
    :data:`COPY_S_PER_NODE` per node for that copy.
    Raises TuningError (the daemon stopped) past either, or when the daemon exits."""
    from tuning.lab.power_on import FOLDER, MANIFEST

    started, deadline = time.monotonic(), None
    copy_s = COPY_TIMEOUT_S + COPY_S_PER_NODE * len(fabric.nodes)
    waiting = [port for _, _, port in endpoints(fabric)]
    while waiting:
        if proc.poll() is not None:
            (state_dir / "lab.pid").unlink(missing_ok=True)
            if "Address already in use" in log_tail(state_dir):  # a port taken after up() checked it
                _refuse_taken_ports(fabric, "taken while the lab started")
            raise TuningError(f"the lab daemon exited with {proc.returncode}:\n{log_tail(state_dir)}", phase="lab")
        if deadline is None and (state_dir / FOLDER / MANIFEST).exists():
            deadline = time.monotonic() + UP_TIMEOUT_S
        if time.monotonic() > (deadline or started + copy_s):
            down(state_dir)
            what = (f"did not come up within {UP_TIMEOUT_S:.0f} s of its power-on copy" if deadline else
                    f"did not finish its power-on copy within {copy_s:.0f} s")
            raise TuningError(f"the lab {what} (ports {waiting} not listening):\n{log_tail(state_dir)}", phase="lab")
        waiting = [port for port in waiting if not port_open(port)]
        if waiting:
            time.sleep(0.05)


def _refuse_taken_ports(fabric: Fabric, when: str) -> None:
    """Raise SetupError (exit 2) naming the endpoints of ``fabric`` another program holds: one that
    accepts a connection (another lab) or one bound without listening (only a bind shows it)."""
    busy = [f"{name}:{port}" for name, _kind, port in endpoints(fabric)
            if port_open(port) or not port_bindable(port)]
    if busy:
        raise SetupError(f"lab ports {when} ({', '.join(busy[:3])}{'...' if len(busy) > 3 else ''}): another lab "
                          "or program holds them; stop it (a lab: `fabtune lab down -i <its inventory>`) or give this "
                          "lab other ports (`fabtune lab init DIR --base-port N`); nothing was started", phase="lab")


def port_bindable(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could bind ``host:port`` now (SO_REUSEADDR, as asyncssh and FakeNOS set it:
    a port in TIME_WAIT is free, one another socket is bound to is not)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``host:port`` accepts a TCP connection (0.2 s timeout)."""
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def log_tail(state_dir: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of ``lab.log`` (empty if there is none)."""
    try:
        return "\n".join((state_dir / "lab.log").read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False  # our own child, now reaped
    except ChildProcessError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False


def running_pid(state_dir: Path) -> int | None:
    """Pid of the lab daemon of ``state_dir`` if it runs, else None (a stale ``lab.pid`` is ignored)."""
    try:
        pid = int((state_dir / "lab.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    if not _alive(pid):
        return None
    try:
        if b"tuning.lab.daemon" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return None
    except OSError:
        pass
    return pid


def down(state_dir: Path) -> bool:
    """Stop the lab of ``state_dir``. Returns True if a running daemon was stopped.

    SIGTERM to the daemon's process group (it and the commands it runs), SIGKILL
    after 5 s; ``lab.pid`` is removed either way. The Slurm lab (``lab up --slurm``) and the
    Kubernetes lab (``lab up --k8s``) are stopped first.
    """
    from tuning.lab import k8s, slurm

    state_dir = state_dir.resolve()
    pid = running_pid(state_dir)
    if pid is not None:
        try:
            os.kill(pid, 0)
        except PermissionError:  # its lab.pid stays: removing it would orphan a live lab
            raise SetupError(f"the lab in {state_dir} runs as another user (daemon pid {pid}); stop it as that "
                             "user (nothing was stopped)") from None
        except ProcessLookupError:
            pid = None
    slurm.down(state_dir)  # `lab up --slurm`'s daemons, if any
    k8s.down(state_dir)  # `lab up --k8s`'s API server and agents, if any
    try:
        return pid is not None and _stop(pid)
    finally:
        (state_dir / "lab.pid").unlink(missing_ok=True)


def _stop(pid: int) -> bool:
    """SIGTERM to the daemon's process group, SIGKILL after :data:`DOWN_TIMEOUT_S`; True."""
    for sig, wait_s in ((signal.SIGTERM, DOWN_TIMEOUT_S), (signal.SIGKILL, DOWN_TIMEOUT_S)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not _alive(pid):
                return True
            time.sleep(0.05)
    return True


def status(state_dir: Path) -> dict:
    """The lab's state: ``{"state_dir", "running", "pid", "endpoints": [{"name", "kind", "port", "up"}]}``;
    the endpoints end with the Slurm and Kubernetes processes started beside it, if any
    (:mod:`tuning.lab.schedulers`; kind ``slurm`` / ``k8s``, port None where one serves none)."""
    from tuning.lab import schedulers

    state_dir = state_dir.resolve()
    pid = running_pid(state_dir)
    fabric_file = state_dir / "fabric.json"
    fabric = Fabric.load(fabric_file) if fabric_file.exists() else None
    eps = [{"name": n, "kind": k, "port": p, "up": pid is not None and port_open(p)}
           for n, k, p in (endpoints(fabric) if fabric else [])]
    return {"state_dir": str(state_dir), "running": pid is not None, "pid": pid,
            "endpoints": eps + (schedulers.endpoints(state_dir, fabric, port_open) if fabric else [])}
