"""Lab agents that undo tuning behind fabtune's back (``fabtune lab inject NODE irqbalance|dcbx``).

Stdlib only (the ``systemctl`` stand-in starts them). Each agent is a detached process
(``python -m tuning.lab.agents STATE NODE KIND``) that polls every :data:`PERIOD_S` and exits by
itself when its injection is cleared, its service is stopped, the node's sysroot is gone or the
lab daemon has stopped:

- ``irqbalance``: the IRQ affinities at injection time are "its" choice
  (``<sysroot>/run/lab/irqbalance.json``); whichever IRQ differs is put back within 0.1 s, both
  ``smp_affinity_list`` and ``smp_affinity``, as long as ``systemctl is-active irqbalance`` says
  ``active`` (``<sysroot>/run/lab/services/irqbalance.service``), except the IRQs banned with
  ``--banirq=N`` in ``IRQBALANCE_ARGS`` of ``etc/sysconfig/irqbalance`` or
  ``etc/default/irqbalance``, read at start as irqbalance does. Its pid is in
  ``run/lab/services/irqbalance.pid`` (``systemctl stop|restart`` ends it).
- ``dcbx``: every NIC's DCB state gets ``"dcbx": "fw"`` (``mlnx_qos`` prints ``DCBX mode:
  Firmware controlled``) and the PFC the switch's DCBX TLVs carry (``fw_pfc``, all off); while
  a NIC stays firmware controlled the agent puts that PFC back. ``mlnx_qos --dcbx os`` ends it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tuning.lab.sysroot import cpumask_hex, dcb_lock, parse_cpulist, read_json, write_json

PERIOD_S = 0.05
KINDS = ("irqbalance", "dcbx")


def service_file(sysroot: Path, unit: str) -> Path:
    """Where the lab keeps a service's state (``active`` / ``inactive``)."""
    return sysroot / "run" / "lab" / "services" / unit


def spawn(state_dir: Path, node: str, kind: str) -> None:
    """Start the agent ``kind`` for ``node`` as a detached process (it outlives the caller)."""
    root = str(Path(__file__).resolve().parents[2])
    subprocess.Popen([sys.executable, "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                      "from tuning.lab.agents import main; main(sys.argv[2:])", root, str(state_dir), node, kind],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, close_fds=True)


def arm(state_dir: Path, node: str, kind: str) -> None:
    """Prepare the node's state for agent ``kind`` (snapshot the IRQs, firmware DCBX) and start it."""
    sysroot = Path(state_dir) / "nodes" / node / "sysroot"
    if kind == "irqbalance":
        irqs = {p.parent.name: p.read_text().strip() for p in (sysroot / "proc/irq").glob("*/smp_affinity_list")}
        _write(sysroot / "run/lab/irqbalance.json", irqs)
        _put(service_file(sysroot, "irqbalance.service"), "active")
        env = sysroot / "etc/default/irqbalance"
        if not env.exists():  # as the Debian package installs it
            _put(env, "# irqbalance is a daemon process that distributes interrupts across\n"
                      "# CPUs on SMP systems.\n#IRQBALANCE_BANNED_CPULIST=\n#IRQBALANCE_ARGS=")
    else:
        with dcb_lock(sysroot):
            for path in (sysroot / "run/lab/dcb").glob("*.json"):
                state = read_json(path)
                state.update(dcbx="fw", fw_pfc=[0] * 8)
                write_json(path, state)
    spawn(Path(state_dir), node, kind)


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, data)


def _alive(state_dir: Path, node: str, kind: str) -> bool:
    try:
        os.kill(int((state_dir / "lab.pid").read_text().split()[0]), 0)
        injections = json.loads((state_dir / "fabric.json").read_text()).get("injections", [])
    except (OSError, ValueError):
        return False
    return {"target": node, "kind": kind} in injections


def _irqbalance_pass(sysroot: Path, wanted: dict[str, str], ncpu: int) -> None:
    if service_file(sysroot, "irqbalance.service").read_text().strip() != "active":
        raise SystemExit(0)
    for irq, cpus in wanted.items():
        lst = sysroot / "proc/irq" / irq / "smp_affinity_list"
        if lst.read_text().strip() != cpus:
            lst.write_text(cpus + "\n")
            (lst.parent / "smp_affinity").write_text(cpumask_hex(parse_cpulist(cpus), ncpu) + "\n")


def _dcbx_pass(sysroot: Path) -> None:
    with dcb_lock(sysroot):
        for path in (sysroot / "run/lab/dcb").glob("*.json"):
            state = read_json(path)
            if state.get("dcbx") == "fw" and state["pfc"] != state.get("fw_pfc", state["pfc"]):
                state["pfc"] = state["fw_pfc"]
                write_json(path, state)


def banned(sysroot: Path) -> set[str]:
    """IRQs banned with ``--banirq=N`` in irqbalance's environment file (RHEL path first)."""
    import shlex

    for path in (sysroot / "etc/sysconfig/irqbalance", sysroot / "etc/default/irqbalance"):
        if path.is_file():
            for line in path.read_text().splitlines():
                if line.strip().startswith("IRQBALANCE_ARGS="):
                    words = " ".join(shlex.split(line.split("=", 1)[1])).split()
                    return {w.split("=", 1)[1] for w in words if w.startswith("--banirq=")}
            return set()
    return set()


def stop(sysroot: Path, unit: str) -> None:
    """End the running agent of ``unit`` (its pid file), as systemd stops the service."""
    import signal

    pidfile = service_file(sysroot, unit).with_suffix(".pid")
    try:
        pid = int(pidfile.read_text())
        if b"tuning.lab.agents" in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass


def main(argv: list[str]) -> None:
    """``STATE NODE KIND``: run one agent until its injection or its service ends."""
    state_dir, node, kind = Path(argv[0]), argv[1], argv[2]
    sysroot = state_dir / "nodes" / node / "sysroot"
    wanted = {}
    if kind == "irqbalance":
        service_file(sysroot, "irqbalance.pid").write_text(f"{os.getpid()}\n")
        skip = banned(sysroot)
        wanted = {irq: cpus for irq, cpus in read_json(sysroot / "run/lab/irqbalance.json").items() if irq not in skip}
    ncpu = max(parse_cpulist((sysroot / "sys/devices/system/cpu/online").read_text())) + 1
    while _alive(state_dir, node, kind) and sysroot.is_dir():
        try:
            _irqbalance_pass(sysroot, wanted, ncpu) if kind == "irqbalance" else _dcbx_pass(sysroot)
        except (OSError, ValueError, KeyError):
            pass  # a file being replaced by the node's own tools: try again next period
        time.sleep(PERIOD_S)
