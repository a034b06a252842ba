"""The Slurm lab: Debian's real Slurm (22.05) and munge beside a running lab (``fabtune lab up --slurm``).

:func:`up` writes a munge key and a ``slurm.conf`` under ``<state>/slurm/``, then starts ``munged``
(its own socket), ``slurmctld`` and one ``slurmd -N <node>`` per lab node, all on loopback, and
returns once ``sinfo`` shows every node ``idle``; :func:`down` (called by ``lab down``) stops them.
Sources: ``slurm.conf(5)``, ``slurmd(8)``, ``slurmctld(8)`` and ``srun(1)`` of Slurm 22.05, ``munged(8)``
of munge 0.5.15 (the versions Debian 12 ships).

Ports: the lab's own range, above its highest SSH port P (``P = base + 103`` for a lab of
``fabtune lab init --base-port base``): ``SlurmctldPort`` P+1, node k's ``slurmd`` P+1+k (its
``NodeName=... NodeHostname=localhost Port=`` line: every slurmd shares the host, so each has its
own port), and ``SrunPortRange`` the next :data:`SRUN_PORTS` ports (``srun`` listens for its tasks'
I/O there instead of the kernel's ephemeral range; ``srun(1)``: 3 ports per step plus 2 per 48
nodes). Every port must lie below the kernel's ephemeral range and be free, else nothing starts.

Clients: ``SLURM_CONF=<state>/slurm/slurm.conf`` (:func:`client_env`) is all ``sinfo``, ``srun``
and ``scontrol`` need; the file's ``AuthInfo=socket=`` names the lab's munge socket.

A task's lab node: ``slurmstepd`` sets ``SLURMD_NODENAME`` (the ``-N`` name of its slurmd) in
every task. The lab's ``TaskProlog`` turns it into the environment a node shell of that node has
(``tuning.lab.nodeserver.node_env``: ``FABTUNE_LAB_DIR``, ``FABTUNE_LAB_NODE``,
``FABTUNE_LAB_SYSROOT`` and ``PATH`` with the lab's stand-ins first) and ``FABTUNE_SYSROOT``, the node's
sysroot for ``fabtune node`` (its ``--sysroot``, as a Kubernetes pod would set ``/host``), by printing
``<state>/slurm/env/<node>.env`` (``slurm.conf(5)`` TaskProlog: ``export NAME=value`` lines on
stdout are set in the task), so ``srun -N2 fabtune node apply ...`` acts on each node's own
sysroot. The task runs as the ``srun`` user (root in CI), not as the node shells' unprivileged user.

``scontrol reboot`` reboots a lab node for real: ``RebootProgram`` is :mod:`tuning.lab.slurm_reboot`
(``fabtune lab reboot NODE``, then that node's ``slurmd -b``: a new BootTime), ``ResumeTimeout``
:data:`RESUME_TIMEOUT_S`.

The daemons run in the foreground (``-D``, ``-F``), detached, with output in ``<state>/slurm/log/``;
their pids are in ``<state>/slurm/pids.json``. Their command lines name no path of the state
folder (the config comes from ``SLURM_CONF``, munged runs in its folder with relative paths), so
``fabtune lab reset``, which stops every process whose command line names it, leaves Slurm up.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tuning.errors import InputError, SetupError, TuningError
from tuning.lab import privileges, slurm_reboot
from tuning.lab.fabric import Fabric
from tuning.model.grammar import check_host_name, check_path

#: what ``fabtune lab up --slurm`` runs (Debian: ``apt-get install slurmctld slurmd slurm-client munge``)
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sinfo", "scontrol", "srun")
#: ports of ``SrunPortRange``: a few concurrent steps of up to 100 nodes (7 ports each)
SRUN_PORTS = 32
UP_TIMEOUT_S = 30.0
#: more seconds per node for every slurmd to register and show idle: 64 slurmds at load ~20 were not
#: all idle within 30 s (bench/slurm_vs_ssh.py --nodes 64, 2026-12-04)
UP_S_PER_NODE = 1.0
DOWN_TIMEOUT_S = 5.0
FOLDER = "slurm"
#: the lab's RebootProgram (:mod:`tuning.lab.slurm_reboot`) in ``<state>/slurm/``, and the seconds
#: slurmctld gives a reboot before it marks the node DOWN ("reboot timed out"; slurm.conf(5)
#: ResumeTimeout, default 60: a lab node's reboot rebuilds its sysroot, which takes longer on a loaded machine)
REBOOT_PROGRAM = "reboot_program"
RESUME_TIMEOUT_S = 180


@dataclass(frozen=True)
class Ports:
    """The Slurm lab's loopback ports: ``slurmctld``, each node's ``slurmd``, ``srun``'s range."""

    slurmctld: int
    slurmd: dict[str, int]
    srun: tuple[int, int]

    def all(self) -> list[int]:
        """Every port, in order."""
        return [self.slurmctld, *self.slurmd.values(), *range(self.srun[0], self.srun[1] + 1)]


def ports(fabric: Fabric) -> Ports:
    """The ports above the lab's highest SSH port (module docstring)."""
    top = max([n.port for n in fabric.nodes] + [s.port for s in fabric.switches])
    slurmd = {n.name: top + 1 + k for k, n in enumerate(fabric.nodes, start=1)}
    first = top + 2 + len(fabric.nodes)
    return Ports(top + 1, slurmd, (first, first + SRUN_PORTS - 1))


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (``net.ipv4.ip_local_port_range``)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def client_env(state_dir: Path) -> dict[str, str]:
    """``{"SLURM_CONF": "<state>/slurm/slurm.conf"}``: what the Slurm clients need to reach the lab."""
    return {"SLURM_CONF": str(Path(state_dir).resolve() / FOLDER / "slurm.conf")}


def config(state_dir: Path, fabric: Fabric, user: str) -> str:
    """The text of the lab's ``slurm.conf`` (``state_dir`` absolute, checked by :func:`write`)."""
    base, p = state_dir / FOLDER, ports(fabric)
    lines = [
        "# fabtune lab: written by tuning.lab.slurm (slurm.conf(5), Slurm 22.05); rewritten by every `lab up --slurm`",
        "ClusterName=fabtune-lab", "SlurmctldHost=localhost", f"SlurmctldPort={p.slurmctld}",
        f"SrunPortRange={p.srun[0]}-{p.srun[1]}",
        f"SlurmUser={user}", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={base / 'munge' / 'run' / 'munge.sock'}",
        f"StateSaveLocation={base / 'state'}", f"SlurmdSpoolDir={base / 'spool' / '%n'}",
        f"SlurmctldPidFile={base / 'run' / 'slurmctld.pid'}", f"SlurmdPidFile={base / 'run' / 'slurmd.%n.pid'}",
        f"SlurmctldLogFile={base / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={base / 'log' / 'slurmd.%n.log'}",
        f"PlugStackConfig={base / 'plugstack.conf'}", f"TaskProlog={base / 'task_prolog'}",
        f"RebootProgram={base / REBOOT_PROGRAM}", f"ResumeTimeout={RESUME_TIMEOUT_S}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "ReturnToService=2", "MpiDefault=none", "SchedulerType=sched/backfill",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
    ]
    lines += [f"NodeName={name} NodeHostname=localhost Port={port} CPUs=1 State=UNKNOWN"
              for name, port in p.slurmd.items()]
    lines.append("PartitionName=lab Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def write(state_dir: Path, fabric: Fabric, inventory: Path) -> Path:
    """Lay out ``<state>/slurm/`` afresh: munge key and folders (munged(8)'s modes), ``slurm.conf``,
    an empty ``plugstack.conf`` (no SPANK plugin of this host), the ``TaskProlog`` and one
    environment file per node, and the ``RebootProgram`` (``fabtune lab reboot`` of ``inventory``'s
    node, :mod:`tuning.lab.slurm_reboot`). Returns the ``slurm.conf`` path.

    Raises:
        InputError: a node name outside the inventory grammar, or a state folder or inventory path
            that ``slurm.conf`` or the RebootProgram cannot carry as is.
    """
    state_dir, inventory = state_dir.resolve(), inventory.resolve()
    for flag, path in (("--state-dir", state_dir), ("--inventory", inventory)):
        try:
            check_path(str(path))
        except ValueError as e:
            raise InputError(flag, str(path), f"the Slurm lab writes it into slurm.conf: {e}") from e
    for node in fabric.nodes:
        try:
            check_host_name(node.name)
        except ValueError as e:
            raise InputError("node", node.name, str(e)) from e
    base = state_dir / FOLDER
    if base.exists():
        shutil.rmtree(base)
    for sub, mode in (("", 0o755), ("munge", 0o755), ("munge/etc", 0o700), ("munge/run", 0o755),
                      ("munge/lib", 0o700), ("state", 0o700), ("spool", 0o755), ("run", 0o755),
                      ("log", 0o755), ("env", 0o755)):
        (base / sub).mkdir(mode=mode, parents=True, exist_ok=True)
        (base / sub).chmod(mode)
    key = base / "munge" / "etc" / "munge.key"
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(1024))
    _task_env(state_dir, fabric)
    (base / "plugstack.conf").write_text("")
    program = base / REBOOT_PROGRAM
    program.write_text(slurm_reboot.program_text(sys.executable, str(Path(__file__).resolve().parents[2]),
                                                 state_dir, inventory))
    program.chmod(0o755)
    conf = base / "slurm.conf"
    conf.write_text(config(state_dir, fabric, pwd.getpwuid(os.geteuid()).pw_name))
    return conf


def _task_env(state_dir: Path, fabric: Fabric) -> None:
    """The ``TaskProlog`` and the environment file of each node it prints (module docstring)."""
    from tuning.transport.base import SYSROOT_ENV
    from tuning.lab.nodeserver import node_env

    base = state_dir / FOLDER
    for node in fabric.nodes:
        env = node_env(state_dir, node.name)
        env[SYSROOT_ENV] = env["FABTUNE_LAB_SYSROOT"]  # `fabtune node` acts on this node's files, as a pod's /host
        (base / "env" / f"{node.name}.env").write_text("".join(f"export {k}={env[k]}\n" for k in (
            "FABTUNE_LAB_DIR", "FABTUNE_LAB_NODE", "FABTUNE_LAB_SYSROOT", "PATH", SYSROOT_ENV)))
    prolog = base / "task_prolog"
    prolog.write_text(f'#!/bin/sh\n# the task\'s lab node (tuning.lab.slurm)\nexec cat "{base / "env"}/$SLURMD_NODENAME.env"\n')
    prolog.chmod(0o755)


def tool_path(tool: str) -> str | None:
    """Where ``tool`` is: PATH, then the sbin folders (a normal user's PATH may lack them); None if missing."""
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")


def check(fabric: Fabric) -> dict[str, str]:
    """What :func:`up` needs, checked before anything starts (``lab up --slurm`` calls it before the
    lab itself). Returns the daemons' and clients' paths.

    Raises:
        SetupError: one missing, not real root (a user namespace is not), no lab node, a port taken or inside the ephemeral range.
    """
    from tuning.lab.controller import port_open

    found = {t: tool_path(t) for t in DAEMONS + CLIENTS}
    tools = {t: path for t, path in found.items() if path is not None}
    missing = [t for t in found if t not in tools]
    if missing:
        raise SetupError(f"the Slurm lab needs {', '.join(missing)}: apt-get install slurmctld slurmd "
                         "slurm-client munge", phase="lab")
    if os.geteuid() != 0 or privileges.in_user_namespace():
        raise SetupError("the Slurm lab needs real root: slurmd runs as root (slurmd(8)) to start tasks as "
                         "their user; in a user namespace slurmctld and slurmd stop at setgroups "
                         "(Operation not permitted) and munged refuses folders owned outside it", phase="lab")
    if not fabric.nodes:
        raise SetupError("the Slurm lab needs lab nodes: this lab has none", phase="lab")
    p = ports(fabric)
    low = _ephemeral_low()
    if p.all()[-1] >= low:
        raise SetupError(f"the Slurm lab's ports {p.slurmctld}-{p.all()[-1]} reach the kernel's ephemeral "
                         f"range (from {low}): use a lab with a lower --base-port", phase="lab")
    busy = [port for port in p.all() if port_open(port)]
    if busy:
        raise SetupError(f"the Slurm lab's ports are in use: {busy[:5]}", phase="lab")
    return tools


def _searchable(folder: Path) -> list[str]:
    """Make ``folder`` and every folder above it searchable by all (``a+x``), as munged(8) demands of
    its socket's folders (munge 0.5.15 ``src/munged/path.c`` ``path_is_accessible``: "execute
    permissions for all required"); returns the folders changed (a pytest or mktemp folder is 0700)."""
    changed = []
    for path in [*reversed(folder.parents), folder]:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o111 != 0o111:
            path.chmod(mode | 0o111)
            changed.append(str(path))
    return changed


def _spawn(argv: list[str], log: Path, env: dict[str, str], cwd: Path) -> int:
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                cwd=cwd, env=env, start_new_session=True)
    return proc.pid


def up(state_dir: Path, fabric: Fabric, inventory: Path) -> float:
    """Start munged, slurmctld and one slurmd per node of ``fabric`` for the lab of ``state_dir``
    (``inventory``: the lab's, for the RebootProgram). Each slurmd has its node in
    :data:`tuning.lab.slurm_reboot.NODE_ENV`.

    Returns:
        The seconds until ``sinfo`` showed every node idle.

    Raises:
        SetupError: Slurm or munge missing, not root, a port taken (nothing started).
        TuningError: a daemon exited, or a node not idle within 30 s plus 1 s per node (everything
            stopped; the logs' tails in the message).
    """
    start = time.monotonic()
    state_dir = state_dir.resolve()
    down(state_dir)  # a Slurm lab left over from a lab that was not stopped
    tools = check(fabric)
    base = write(state_dir, fabric, inventory).parent
    env = {**os.environ, **client_env(state_dir)}
    pids: dict[str, int] = {}
    munge = base / "munge"
    _searchable(munge / "run")
    pids["munged"] = _spawn([tools["munged"], "-F", "--socket=run/munge.sock", "--key-file=etc/munge.key",
                             "--pid-file=run/munged.pid", "--seed-file=lib/munged.seed"],
                            base / "log" / "munged.log", env, munge)
    _save(base, pids)
    _wait(lambda: (munge / "run" / "munge.sock").exists(), state_dir, "munged made no socket")
    pids["slurmctld"] = _spawn([tools["slurmctld"], "-D"], base / "log" / "slurmctld.out", env, base)
    for node in fabric.nodes:
        (base / "spool" / node.name).mkdir()
        pids[f"slurmd {node.name}"] = _spawn([tools["slurmd"], "-D", "-N", node.name],
                                             base / "log" / f"slurmd.{node.name}.out",
                                             {**env, slurm_reboot.NODE_ENV: node.name}, base)
    _save(base, pids)
    names = {n.name for n in fabric.nodes}
    _wait(lambda: _idle(tools["sinfo"], env) >= names, state_dir, "not every node is idle in sinfo",
          UP_TIMEOUT_S + UP_S_PER_NODE * len(names))
    return time.monotonic() - start


def _idle(sinfo: str, env: dict[str, str]) -> set[str]:
    """The nodes ``sinfo -N`` shows idle (none while slurmctld does not answer)."""
    p = subprocess.run([sinfo, "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, env=env, timeout=30)
    return {line.split()[0] for line in p.stdout.splitlines()
            if p.returncode == 0 and len(line.split()) == 2 and line.split()[1] == "idle"}


def _wait(ready, state_dir: Path, what: str, timeout_s: float = UP_TIMEOUT_S) -> None:
    """Until ``ready()``; a daemon that exits or ``timeout_s`` without it stop everything and raise TuningError."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        gone = sorted(set(recorded(state_dir)) - set(running(state_dir)))
        if gone or time.monotonic() > deadline:
            tail = _log_tails(state_dir / FOLDER / "log")
            down(state_dir)
            why = f"{', '.join(gone)} exited" if gone else f"not within {timeout_s:.0f} s"
            raise TuningError(f"the Slurm lab did not come up ({what}: {why}):\n{tail}", phase="lab")
        time.sleep(0.1)


def _log_tails(folder: Path, lines: int = 5) -> str:
    out = []
    for log in sorted(folder.glob("*")):
        text = log.read_text(errors="replace").splitlines()[-lines:]
        out += [f"{log.name}: {line}" for line in text]
    return "\n".join(out)


def _save(base: Path, pids: dict[str, int]) -> None:
    (base / "pids.json").write_text(json.dumps(pids, indent=2) + "\n")


def _program(pid: int) -> str | None:
    """The program name of a live pid (``/proc/PID/cmdline``'s first word), None when gone or a zombie;
    ``""`` while the process is still inside execve (:func:`runs`)."""
    try:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return None
        return os.path.basename(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode())
    except (OSError, IndexError, UnicodeDecodeError):
        return None


def runs(pid: int, program: str) -> bool:
    """Whether ``pid`` runs ``program``, or is still becoming it: Popen returns once execve has closed
    the close-on-exec pipe, before the kernel lays out the new command line, and in that window
    ``/proc/PID/cmdline`` reads empty. Taking it as "exited" made ``lab up --slurm`` fail with
    "munged made no socket: munged exited" and an empty log, and leave munged running (``down`` saw
    the same empty line): 2 of 6 hand starts at load 2-30 on 2026-12-04."""
    return _program(pid) in (program, "")


def running(state_dir: Path) -> dict[str, int]:
    """The Slurm lab's daemons of ``state_dir`` that still run (``{"slurmd node01": pid, ...}``):
    each pid of ``pids.json`` whose process still runs its program."""
    return {name: pid for name, pid in recorded(state_dir).items() if runs(pid, name.split()[0])}


def recorded(state_dir: Path) -> dict[str, int]:
    """``pids.json``: every daemon :func:`up` started, running or not."""
    try:
        return dict(json.loads((Path(state_dir).resolve() / FOLDER / "pids.json").read_text()))
    except (OSError, ValueError):
        return {}


def down(state_dir: Path) -> bool:
    """Stop the Slurm lab of ``state_dir`` (slurmds, slurmctld, then munged): SIGTERM to each
    recorded pid still running its program, SIGKILL after 5 s. Returns whether one was running."""
    live = running(state_dir)
    order = [(pid, name.split()[0]) for name, pid in
             sorted(live.items(), key=lambda item: ("slurmd" not in item[0], item[0] == "munged"))]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, program in order:
            if runs(pid, program):
                os.kill(pid, sig)
        deadline = time.monotonic() + DOWN_TIMEOUT_S
        while time.monotonic() < deadline and any(runs(pid, prog) for pid, prog in order):
            time.sleep(0.05)
        if not any(runs(pid, prog) for pid, prog in order):
            break
    (Path(state_dir).resolve() / FOLDER / "pids.json").unlink(missing_ok=True)
    return bool(live)
