"""The Kubernetes lab: an API server stand-in with the NVIDIA Maintenance Operator's part and one
fabtune agent per lab node, beside a running lab (``fabtune lab up --k8s``; issue 23).

:func:`up` writes ``<state>/k8s/`` (``lab.json``: port, nodes, namespace and the tokens, mode 0600;
one token file per identity), starts the stand-in (:mod:`tuning.lab.k8s_api`, this module run as a
program) and one ``fabtune k8s agent`` per lab node (:mod:`tuning.k8s.agent`, what the DaemonSet's
container runs), each with its node's environment (``tuning.lab.nodeserver.node_env`` and
``FABTUNE_SYSROOT``: that node's sysroot, as a pod's ``/host``), as the Slurm lab maps one slurmd
to a node. The stand-in's cluster has the lab's nodes and the RBAC of ``fabtune k8s manifests``
(:func:`tuning.k8s.manifests.rbac`), enforced for the two service accounts; the identities:

- ``controller.token``: ``system:serviceaccount:fabtune:fabtune-controller`` (``fabtune rollout --engine k8s``);
- ``agent.token``: ``system:serviceaccount:fabtune:fabtune-agent`` (the agents);
- ``admin.token``: ``system:admin`` (every verb: a person with kubectl, another operator in tests).

The agents' journal folder, the shared volume of a cluster, is ``<state>/k8s/journal``: a rollout
through the lab passes it as ``--journal-dir``. Port: the one after the Slurm lab's range
(:func:`tuning.lab.slurm.ports`), so both labs run side by side. The processes' command lines name
no path of the state folder (they run in ``<state>/k8s`` with relative paths), so ``fabtune lab
reset`` leaves them up; pids in ``<state>/k8s/pids.json``; :func:`down` (called by ``lab down``) stops them.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from tuning.errors import SetupError, TuningError
from tuning.lab.fabric import Fabric

FOLDER, NAMESPACE, JOURNAL = "k8s", "fabtune", "journal"
IDENTITIES = {"controller": "system:serviceaccount:fabtune:fabtune-controller",
              "agent": "system:serviceaccount:fabtune:fabtune-agent", "admin": "system:admin"}
UP_TIMEOUT_S, DOWN_TIMEOUT_S, POLL_S = 30.0, 5.0, 0.3
#: how long the agents must stay up after their start (an agent that refuses its input exits well within it)
AGENT_SETTLE_S = 3.0
_MARK = (b"tuning.lab.k8s", b"k8s\0agent")  # what the command line of a process of this lab holds


def port(fabric: Fabric) -> int:
    """The stand-in's port: the first after the Slurm lab's ``SrunPortRange``."""
    from tuning.lab import slurm

    return slurm.ports(fabric).srun[1] + 1


def folder(state_dir: Path) -> Path:
    """``<state>/k8s`` (absolute)."""
    return Path(state_dir).resolve() / FOLDER


def client_env(state_dir: Path) -> dict[str, str]:
    """What ``fabtune rollout --engine k8s`` needs to reach the lab's API server as the controller."""
    from tuning.k8s import api

    base = folder(state_dir)
    conf = json.loads((base / "lab.json").read_text())
    return {api.SERVER_ENV: f"http://127.0.0.1:{conf['port']}", api.TOKEN_FILE_ENV: str(base / "controller.token"),
            api.NAMESPACE_ENV: conf["namespace"]}


def write(state_dir: Path, fabric: Fabric) -> Path:
    """Lay out ``<state>/k8s/`` afresh (module docstring); returns it."""
    base = folder(state_dir)
    (base / JOURNAL).mkdir(parents=True, exist_ok=True)
    tokens = {who: secrets.token_hex(24) for who in IDENTITIES}
    for who, tok in tokens.items():
        fd = os.open(base / f"{who}.token", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(tok + "\n")
    conf = {"port": port(fabric), "namespace": NAMESPACE, "nodes": [n.name for n in fabric.nodes],
            "users": {tokens[who]: user for who, user in IDENTITIES.items()}}
    fd = os.open(base / "lab.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(conf, f, indent=2)
    return base


def check(fabric: Fabric) -> None:
    """Raises SetupError when the lab has no node or the stand-in's port is taken (nothing started)."""
    from tuning.lab.controller import port_open

    if not fabric.nodes:
        raise SetupError("the Kubernetes lab needs lab nodes: this lab has none", phase="lab")
    if port_open(port(fabric)):
        raise SetupError(f"the Kubernetes lab's port {port(fabric)} is in use", phase="lab")


def _spawn(argv: list[str], base: Path, log: str, env: dict[str, str]) -> int:
    with open(base / "log" / log, "ab") as out:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=base,
                                env=env, start_new_session=True).pid


def up(state_dir: Path, fabric: Fabric, inventory: Path) -> float:
    """Start the stand-in and the agents (module docstring); the seconds it took.

    Raises:
        SetupError: no node, the port taken.  TuningError: the stand-in did not answer within 30 s, or an
            agent exited within :data:`AGENT_SETTLE_S` (all stopped, the logs' tails in the message).
    """
    from tuning.lab.controller import _package_parent, port_open
    from tuning.lab.nodeserver import node_env
    from tuning.transport.base import SYSROOT_ENV

    start, state_dir = time.monotonic(), Path(state_dir).resolve()
    down(state_dir)
    check(fabric)
    base = write(state_dir, fabric)
    (base / "log").mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": _package_parent()}
    pids = {"apiserver": _spawn([sys.executable, "-m", "tuning.lab.k8s"], base, "apiserver.log", env)}
    _save(base, pids)
    p = port(fabric)
    deadline = time.monotonic() + UP_TIMEOUT_S
    while not port_open(p):
        if time.monotonic() > deadline or not runs(pids["apiserver"]):
            tail = (base / "log" / "apiserver.log").read_text(errors="replace")[-1000:]
            down(state_dir)
            raise TuningError(f"the Kubernetes lab's API server did not answer on {p}: {tail}", phase="lab")
        time.sleep(0.05)
    for node in fabric.nodes:
        nenv = {**env, **node_env(state_dir, node.name)}
        nenv[SYSROOT_ENV] = nenv["FABTUNE_LAB_SYSROOT"]
        argv = [sys.executable, "-m", "tuning", "k8s", "agent", "--node", node.name, "-i", str(Path(inventory).resolve()),
                "-n", NAMESPACE, "--server", f"http://127.0.0.1:{p}", "--token-file", "agent.token",
                "--journal-dir", JOURNAL, "--poll-s", str(POLL_S)]
        pids[f"agent {node.name}"] = _spawn(argv, base, f"agent.{node.name}.log", nenv)
    _save(base, pids)
    time.sleep(AGENT_SETTLE_S)  # an agent that refuses its flags or inventory exits at once (exit 2)
    gone = [name for name, pid in pids.items() if not runs(pid)]
    if gone:
        tails = {g: (base / "log" / f"{g.replace(' ', '.')}.log").read_text(errors="replace")[-300:] for g in gone}
        down(state_dir)
        raise TuningError(f"the Kubernetes lab did not come up: {', '.join(gone)} exited: {tails}", phase="lab")
    return time.monotonic() - start


def _save(base: Path, pids: dict[str, int]) -> None:
    (base / "pids.json").write_text(json.dumps(pids, indent=2) + "\n")


def runs(pid: int) -> bool:
    """Whether ``pid`` is a live process of this lab (its command line holds :data:`_MARK`; not a zombie)."""
    try:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, IndexError):
        return False
    return not cmd or any(m in cmd for m in _MARK)  # empty: still inside execve (tuning.lab.slurm.runs)


def recorded(state_dir: Path) -> dict[str, int]:
    """``pids.json``: every process :func:`up` started (``{"apiserver": pid, "agent node01": pid}``),
    running or not; {} when this lab was not started."""
    try:
        return dict(json.loads((folder(state_dir) / "pids.json").read_text()))
    except (OSError, ValueError):
        return {}


def running(state_dir: Path) -> dict[str, int]:
    """The Kubernetes lab's processes of ``state_dir`` that still run (:func:`recorded`'s live ones)."""
    return {name: pid for name, pid in recorded(state_dir).items() if runs(pid)}


def down(state_dir: Path) -> bool:
    """Stop the Kubernetes lab of ``state_dir``: SIGTERM, SIGKILL after 5 s. Returns whether one ran."""
    live = running(state_dir)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in live.values():
            if runs(pid):
                os.kill(pid, sig)
        deadline = time.monotonic() + DOWN_TIMEOUT_S
        while time.monotonic() < deadline and any(runs(pid) for pid in live.values()):
            time.sleep(0.05)
        if not any(runs(pid) for pid in live.values()):
            break
    (folder(state_dir) / "pids.json").unlink(missing_ok=True)
    return bool(live)


def main() -> None:
    """The stand-in as a program (run in ``<state>/k8s``): serve ``lab.json``'s cluster until SIGTERM."""
    from tuning.k8s.manifests import rbac
    from tuning.lab.k8s_api import Cluster, serve

    conf = json.loads(Path("lab.json").read_text())
    cluster = Cluster(conf["nodes"], users=conf["users"], rbac=rbac(conf["namespace"]))
    server = serve(cluster, conf["port"])
    signal.signal(signal.SIGTERM, lambda *a: (server.shutdown(), sys.exit(0)))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
