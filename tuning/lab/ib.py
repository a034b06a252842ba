"""The InfiniBand lab: Debian's ibsim fabric simulator with the real OpenSM and infiniband-diags on it.

``IbLab(state_dir).up()`` writes ``<state_dir>/ib/``: the ibsim net file of the lab's HCAs on two
leaves (:mod:`tuning.lab.ib_topology`), the ``partitions.conf`` it was given
(:mod:`tuning.lab.ib_partitions`; default: ``Default=0x7fff,ipoib : ALL=full ;``) and an
``opensm.conf`` (the installed OpenSM's own ``opensm -c`` template, its file paths moved into the
folder); starts ``ibsim -s`` with its console on a FIFO, then ``opensm -F opensm.conf`` attached at
leaf01's port 0 (the SM of a managed switch), both with ``LD_PRELOAD=libumad2sim.so`` and the lab's
own ``IBSIM_SOCKNAME`` (:mod:`tuning.lab.ib_tools`), and returns once ``sminfo`` answers
``SMINFO_MASTER`` and OpenSM's log says ``SUBNET UP``. ``down()`` stops OpenSM, then ibsim.

Faults, as far as ibsim 0.10 can take them (``help`` on its console, ``ibsim/sim_cmd.c``):
- counters: the console's ``PerformanceSet "nodeid"[port] PortCounters.<field>=<value>``
  (:meth:`IbLab.set_counter`), read back by ``perfquery`` and ``ibqueryerrors``;
- link down and back: ``Unlink "nodeid"[port]`` / ``ReLink "nodeid"[port]`` (both ends Down/Polling,
  trap 128 to the SM, which sweeps);
- width: the console has no width command and ibsim reads a port's enabled width only from the net
  file or a PortInfo Set, so :meth:`IbLab.set_width` sends the Set the way an operator would, with
  ``ibportstate <leaf lid> <port> width <mask>`` on the leaf's port: ibsim retrains both ends at once
  (LinkWidthActive) and sends trap 144; OpenSM's sweeps keep it;
- a port's own view apart from the SM's and the switch's (:mod:`tuning.lab.ib_port_faults`): its LID or SM
  LID rewritten (:meth:`IbLab.set_lids`), its link left half up (:meth:`IbLab.half_activate`); a heavy
  sweep (:meth:`IbLab.resweep`, SIGHUP) puts them back.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import shlex
import shutil
import subprocess
import time
from pathlib import Path

from tuning.errors import SetupError, TuningError
from tuning.lab.fabric import Fabric, default_fabric
from tuning.lab.ib_nodes import link_state, node_sysroot, refresh
from tuning.lab.ib_partitions import IbMember, IbPartition, partitions_conf
from tuning.lab import ib_port_faults
from tuning.lab.ib_topology import IbTopology, net_file, topology_for
from tuning.lab.ib_tools import PACKAGES, WRAPPER_MARK, ib_env, program, run_tool

__all__ = ["DEFAULT_PARTITIONS", "IbLab", "WIDTHS"]

DEFAULT_PARTITIONS = (IbPartition("Default", 0x7FFF, (IbMember("ALL", "full"),), ipoib=True),)
#: LinkWidthEnabled masks ``ibportstate ... width`` takes (IBA PortInfo)
WIDTHS = {"1X": 1, "4X": 2, "8X": 4, "12X": 8, "2X": 16}
#: PortCounters fields the console's PerformanceSet takes (ibsim 0.10 ``do_perf_counter_set``)
COUNTERS = ("SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter", "PortRcvErrors",
            "PortRcvRemotePhysicalErrors", "PortRcvSwitchRelayErrors", "PortXmitDiscards",
            "PortXmitConstraintErrors", "PortRcvConstraintErrors", "LocalLinkIntegrityErrors",
            "ExcessiveBufferOverrunErrors", "VL15Dropped", "PortXmitWait")
SM_NODE = "leaf01"
#: where the lab's OpenSM files are under its folder (the SM spec's ``opensm_*_file`` keys in the lab)
SM_PATHS = {"opensm_partitions_file": "/partitions.conf", "opensm_conf_file": "/opensm.conf",
            "opensm_log_file": "/opensm.log", "opensm_pid_file": "/opensm.pid",
            "opensm_subnet_list_file": "/opensm-subnet.lst"}
_PROMPT = "sim> "
#: opensm.conf keys holding a file or folder of the machine, moved into the lab folder
_PATH_KEYS = {"log_file": "opensm.log", "dump_files_dir": "", "partition_config_file": "partitions.conf",
              "per_module_logging_file": "per-module-logging.conf", "qos_policy_file": "qos-policy.conf",
              "torus_config": "torus-2QoS.conf", "prefix_routes_file": "prefix-routes.conf"}


class IbLab:
    """One IB lab in ``<state_dir>/ib``. Every method but :meth:`up` works from any process.

    ``qos``: OpenSM's ``qos`` option (its default FALSE). A partition's ``sl=`` reaches its path
    records only with it on (measured: ``saquery PR --pkey 0x8001`` answers SL 0 with it off, 3 on).
    ``node_trees``: keep each node's sysfs HCA tree (:mod:`tuning.lab.ib_nodes`) as ibsim's HCAs hold it, written
    at :meth:`up` and after each fault on an HCA (3.5-5.5 s for 32 HCAs at load 6 here: opt-in).
    """

    def __init__(self, state_dir: Path, fabric: Fabric | None = None,
                 partitions: tuple[IbPartition, ...] = DEFAULT_PARTITIONS, sm_priority: int = 0, qos: bool = False,
                 node_trees: bool = False):
        self.dir = Path(state_dir) / "ib"
        if fabric is None:
            saved = Path(state_dir) / "fabric.json"
            fabric = Fabric.load(saved) if saved.is_file() else default_fabric()
        self.topology: IbTopology = topology_for(fabric)
        self.partitions = tuple(partitions)
        if type(sm_priority) is not int or not 0 <= sm_priority <= 15:
            raise TuningError(f"SM priority {sm_priority!r} is outside 0..15")
        self.sm_priority = sm_priority
        self.qos = bool(qos)
        self.node_trees = bool(node_trees)
        self._procs: dict[str, subprocess.Popen] = {}  # the processes this object started (reaped on down)

    # --- start and stop -------------------------------------------------------------------
    def up(self, timeout_s: float = 30.0, *, sm: bool = True) -> float:
        """Start ibsim and OpenSM; returns the seconds from OpenSM's start to MASTER and SUBNET UP. Then writes
        every node's HCA tree when ``node_trees``. ``sm=False``: ibsim alone (no port swept: LID and SM LID 0,
        ports INIT), returns 0.0.

        Raises:
            SetupError: a package is missing, or this lab is running already.
            TuningError: ibsim or OpenSM died, or the SM did not come up within ``timeout_s``.
        """
        if self.running():
            raise SetupError(f"the IB lab in {self.dir} is running already")
        for name in ("ibsim", "opensm", "sminfo"):
            program(name)
        self._prepare()
        self._start_ibsim()
        try:
            started = time.monotonic()
            if sm:
                self._start_opensm()
                self.wait_subnet_up(timeout_s, sweeps=1)
            seconds = time.monotonic() - started if sm else 0.0
            if self.node_trees:
                self.refresh_nodes()
            return seconds
        except BaseException:
            self.down()
            raise

    def down(self) -> bool:
        """Stop OpenSM, then ibsim (OpenSM blocks in its exit when ibsim goes first); True when
        something was running. Removes the fake sysfs folders libumad2sim leaves behind."""
        stopped = False
        for name in ("opensm", "ibsim"):
            pid = self._pid(name)
            if pid:
                _stop(pid)
                stopped = True
            proc = self._procs.pop(name, None)
            if proc is not None:
                proc.wait(timeout=5)
            (self.dir / f"{name}.pid").unlink(missing_ok=True)
        if self.dir.is_dir():
            for leftover in self.dir.glob("sys-*"):
                shutil.rmtree(leftover, ignore_errors=True)
        return stopped

    def running(self) -> bool:
        """Whether this lab's ibsim runs."""
        return self._pid("ibsim") is not None

    def _prepare(self) -> None:
        if self.dir.exists():
            shutil.rmtree(self.dir)
        (self.dir / "cache").mkdir(parents=True)
        (self.dir / "net").write_text(net_file(self.topology))
        (self.dir / "partitions.conf").write_text(partitions_conf(list(self.partitions), self.topology))
        os.mkfifo(self.dir / "console")
        subprocess.run([program("opensm"), "-c", str(self.dir / "opensm.template")], cwd=self.dir,
                       capture_output=True, check=True, env=ib_env(self.dir, preload=False))
        (self.dir / "opensm.conf").write_text(self._opensm_conf())
        self._write_tools()

    @property
    def tools_dir(self) -> Path:
        """``<lab>/bin``: one script per infiniband-diags program (``smpquery``, ``saquery``,
        ``iblinkinfo``, ``sminfo``...) that runs the real one over this lab's ibsim, attached at the
        SM's leaf; on a caller's PATH, the IB tools of the lab's SM host (a ``fabtune_local`` SM)."""
        return self.dir / "bin"

    def _write_tools(self) -> None:
        env = ib_env(self.dir, host=SM_NODE)
        sets = " ".join(f"{k}={shlex.quote(env[k])}" for k in
                        ("IBSIM_SOCKNAME", "SIM_HOST", "LD_PRELOAD", "OSM_CACHE_DIR", "OSM_TMP_DIR"))
        self.tools_dir.mkdir()
        for tool, pkg in PACKAGES.items():
            if pkg != "infiniband-diags":
                continue
            script = self.tools_dir / tool
            script.write_text(f"#!/bin/sh\n{WRAPPER_MARK} (tuning/lab/ib.py): the real {tool} over this lab's ibsim\n"
                              f"cd {shlex.quote(str(self.dir))} || exit 1\n"
                              f"exec env -u IBSIM_SERVER_NAME -u IBSIM_SERVER_PORT -u SIM_SET_ISSM {sets} "
                              f"{shlex.quote(program(tool))} \"$@\"\n")
            script.chmod(0o755)

    def _opensm_conf(self) -> str:
        out = []
        for line in (self.dir / "opensm.template").read_text().splitlines():
            key = line.split(" ", 1)[0]
            if key in _PATH_KEYS:
                line = f"{key} {self.dir / _PATH_KEYS[key]}" + ("/" if not _PATH_KEYS[key] else "")
            elif key == "sm_priority":
                line = f"sm_priority {self.sm_priority}"
            elif key == "qos":
                line = f"qos {'TRUE' if self.qos else 'FALSE'}"
            elif key == "force_log_flush":  # the lab reads the log as OpenSM writes it
                line = "force_log_flush TRUE"
            out.append(line)
        return "\n".join(out) + "\n"

    def _start_ibsim(self) -> None:
        console = os.open(self.dir / "console", os.O_RDWR)  # read and write end: never an EOF
        try:
            with open(self.dir / "ibsim.log", "ab") as log:
                proc = subprocess.Popen([program("ibsim"), "-s", "net"], cwd=self.dir, stdin=console,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                        env=ib_env(self.dir, preload=False))
        finally:
            os.close(console)
        self._procs["ibsim"] = proc
        (self.dir / "ibsim.pid").write_text(f"{proc.pid}\n")
        self._wait_log("ibsim.log", _PROMPT, 10.0, proc)

    def _start_opensm(self) -> None:
        with open(self.dir / "opensm.out", "ab") as out:
            proc = subprocess.Popen([program("opensm"), "-F", "opensm.conf"], cwd=self.dir,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, env=ib_env(self.dir, host=SM_NODE))
        self._procs["opensm"] = proc
        (self.dir / "opensm.pid").write_text(f"{proc.pid}\n")

    def _wait_log(self, name: str, text: str, timeout_s: float, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in (self.dir / name).read_text(errors="replace"):
                return
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        tail = (self.dir / name).read_text(errors="replace")[-800:]
        raise TuningError(f"{name}: no {text.strip()!r} within {timeout_s:g} s; its tail: {tail}")

    def _pid(self, name: str) -> int | None:
        """The pid of this lab's ``name`` process, only while it runs in this lab's folder."""
        try:
            pid = int((self.dir / f"{name}.pid").read_text())
            same = Path(f"/proc/{pid}/cwd").resolve() == self.dir.resolve()
            alive = (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z")
        except (OSError, ValueError):
            return None
        return pid if same and alive else None

    # --- the subnet manager ---------------------------------------------------------------
    def subnet_ups(self) -> int:
        """How many times OpenSM's log said ``SUBNET UP`` (each sweep that configured the subnet)."""
        log = self.dir / "opensm.log"
        return log.read_text(errors="replace").count("SUBNET UP") if log.is_file() else 0

    def wait_subnet_up(self, timeout_s: float = 30.0, *, sweeps: int = 1) -> None:
        """Wait until OpenSM logged ``SUBNET UP`` ``sweeps`` times in all and ``sminfo`` says MASTER.

        Raises:
            TuningError: OpenSM died or the subnet was not up within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._pid("opensm") is None:
                tail = (self.dir / "opensm.out").read_text(errors="replace")[-800:]
                raise TuningError(f"OpenSM of the IB lab exited; its output: {tail}")
            if self.subnet_ups() >= sweeps and "SMINFO_MASTER" in self.run("sminfo"):
                return
            time.sleep(0.1)
        raise TuningError(f"the IB lab's SM was not MASTER with SUBNET UP within {timeout_s:g} s")

    def set_partitions(self, partitions: tuple[IbPartition, ...], timeout_s: float = 30.0) -> None:
        """Write a new ``partitions.conf`` and make OpenSM re-read it (SIGHUP: a heavy sweep), then
        wait for that sweep's ``SUBNET UP``."""
        text = partitions_conf(list(partitions), self.topology)
        before = self.subnet_ups()
        (self.dir / "partitions.conf").write_text(text)
        self.partitions = tuple(partitions)
        self._sighup(before, timeout_s)

    def _sighup(self, before: int, timeout_s: float) -> None:
        """SIGHUP to OpenSM (a heavy sweep), then wait for the SUBNET UP after the ``before``-th."""
        pid = self._pid("opensm")
        if pid is None:
            raise TuningError("OpenSM of the IB lab is not running")
        os.kill(pid, signal.SIGHUP)
        self.wait_subnet_up(timeout_s, sweeps=before + 1)

    def resweep(self, timeout_s: float = 30.0) -> None:
        """A heavy sweep of OpenSM (SIGHUP, its SUBNET UP awaited), then every node tree rewritten: what an
        operator does to put back a port's LIDs or a half-up link (:mod:`tuning.lab.ib_port_faults`)."""
        self._sighup(self.subnet_ups(), timeout_s)
        self.refresh_nodes()

    def sm_shell(self):
        """The SM host's shell as :class:`tuning.targets.sm.SmTarget` reaches it in the lab: a local
        ``bash`` in the lab folder with the diagnostics' environment (:func:`ib_env`, attached at the
        SM's leaf), sysroot the lab folder, whose OpenSM files an inventory names ``/partitions.conf``,
        ``/opensm.conf``, ``/opensm.log`` and ``/opensm.pid`` (:data:`SM_PATHS`)."""
        from tuning.transport.local import LocalHost

        return LocalHost(SM_NODE, str(self.dir), cwd=self.dir, env=ib_env(self.dir, host=SM_NODE))

    # --- diagnostics and faults -----------------------------------------------------------
    def run(self, tool: str, *args: str, host: str | None = None, ok_codes: tuple[int, ...] = (0,)) -> str:
        """Run an infiniband-diags program over the fabric (attached at ``host``, default the SM's
        leaf); returns its standard output (:func:`tuning.lab.ib_tools.run_tool`)."""
        return run_tool(self.dir, tool, list(args), host=host, ok_codes=ok_codes)

    def console(self, command: str, timeout_s: float = 10.0) -> str:
        """Send one line to ibsim's console; returns what it printed before its next prompt.

        Raises:
            TuningError: ibsim is not running, printed an error line (``# ...``) or no prompt in time.
        """
        if "\n" in command or "\r" in command:
            raise TuningError(f"one console line, got {command!r}")
        if not self.running():
            raise TuningError(f"the IB lab in {self.dir} is not running")
        log = self.dir / "ibsim.log"
        with open(self.dir / "console.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            start = log.stat().st_size
            try:  # non-blocking: a FIFO nobody reads (ibsim just died) must not hang the caller
                con = os.open(self.dir / "console", os.O_WRONLY | os.O_NONBLOCK)
            except OSError as e:
                raise TuningError(f"ibsim console of {self.dir} is not open: {e}") from e
            try:
                os.write(con, (command + "\n").encode())
            finally:
                os.close(con)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                with open(log, "rb") as f:
                    f.seek(start)
                    new = f.read().decode(errors="replace")
                if _PROMPT in new:
                    answer = new.split(_PROMPT, 1)[0]
                    break
                time.sleep(0.02)
            else:
                raise TuningError(f"ibsim console: no prompt after {command!r} within {timeout_s:g} s")
        errors = [x for x in answer.splitlines() if x.startswith("#")]
        if errors:
            raise TuningError(f"ibsim console refused {command!r}: {' / '.join(errors)}")
        return answer

    def node_sysroot(self, node: str) -> Path:
        """The sysroot of lab node ``node`` (:mod:`tuning.lab.ib_nodes`): its ``/sys/class/infiniband``."""
        return node_sysroot(self.dir, node)

    def refresh_nodes(self, *node_ids: str) -> None:
        """With ``node_trees``: rewrite the sysfs trees of HCAs ``node_ids`` (default: all) from ibsim's HCAs
        (:func:`tuning.lab.ib_nodes.refresh`); every injection below calls it for its HCA."""
        if not self.node_trees:
            return
        hcas = [self.topology.hca(self._node(n)) for n in node_ids] if node_ids else list(self.topology.hcas)
        refresh(self.dir, hcas)

    def set_counter(self, node_id: str, counter: str, value: int, port: int = 1) -> None:
        """Set a PortCounters field of ``node_id``'s ``port`` (an HCA: port 1; a leaf: 1..N).

        Raises:
            TuningError: an unknown counter or node, or a value ibsim did not take as given.
        """
        if counter not in COUNTERS:
            raise TuningError(f"counter {counter!r}: one of {', '.join(COUNTERS)}")
        if type(value) is not int or value < 0:
            raise TuningError(f"counter value {value!r} is not a count")
        node = self._node(node_id)
        answer = self.console(f'PerformanceSet "{node}"[{int(port)}] PortCounters.{counter}={value}')
        if f"has been set to {value}" not in answer:
            raise TuningError(f"ibsim set {counter} of {node}[{port}] to another value (it caps each "
                              f"counter at its field's maximum): {answer.strip()}")
        if node not in self.topology.leaves:
            self.refresh_nodes(node)

    def link_down(self, node_id: str) -> None:
        """Take the cable of HCA ``node_id`` down (both ends Down/Polling; trap 128 to the SM)."""
        self.console(f'Unlink "{self._node(node_id)}"[1]')
        self.refresh_nodes(node_id)

    def link_up(self, node_id: str, timeout_s: float = 15.0) -> None:
        """Bring the cable of HCA ``node_id`` back (the SM's next sweep makes it Active); with ``node_trees``
        and OpenSM running, waits up to ``timeout_s`` for Active, then refreshes the node's tree."""
        self.console(f'ReLink "{self._node(node_id)}"[1]')
        deadline = time.monotonic() + timeout_s
        while self.node_trees and self._pid("opensm") and time.monotonic() < deadline and \
                link_state(self.run("smpquery", "-D", "portinfo", "0", "1", host=node_id)) != "Active":
            time.sleep(0.1)
        self.refresh_nodes(node_id)

    def set_width(self, node_id: str, width: str) -> None:
        """Retrain the cable of HCA ``node_id`` at ``width`` (``1X``, ``4X``): LinkWidthEnabled set on
        the leaf's port with ``ibportstate``; ibsim moves LinkWidthActive of both ends at once."""
        if width not in WIDTHS:
            raise TuningError(f"width {width!r}: one of {', '.join(WIDTHS)}")
        hca = self.topology.hca(self._node(node_id))
        guid = f"{self.topology.leaves[hca.leaf][0]:#x}"
        # read back: the link runs the width before the fault is in. The Set is sent again every 2 s
        # while it does not: an OpenSM sweep that read the port just before may put its own, older
        # LinkWidthEnabled back (CI at load: a 4X asked after 1X still read 1X 10 s later)
        deadline, got = time.monotonic() + 20.0, None
        while got != width:
            if time.monotonic() > deadline:
                raise TuningError(f"{hca.node_id}: the link runs {got} after ibportstate width {width}")
            self.run("ibportstate", "-G", guid, str(hca.leaf_port), "width", str(WIDTHS[width]))
            resend = time.monotonic() + 2.0
            while (got := _width_active(self.run("smpquery", "portinfo", "-G", guid, str(hca.leaf_port)))) != width \
                    and time.monotonic() < resend:
                time.sleep(0.1)
        self.refresh_nodes(hca.node_id)

    def set_lids(self, node_id: str, lid: int | None = None, sm_lid: int | None = None) -> None:
        """Rewrite HCA ``node_id``'s LID and / or SM LID in its PortInfo, read back
        (:func:`tuning.lab.ib_port_faults.set_lids`); the SM's SA keeps serving its own until a heavy sweep."""
        ib_port_faults.set_lids(self, self._node(node_id), lid, sm_lid)
        self.refresh_nodes(node_id)

    def half_activate(self, node_id: str) -> None:
        """Leave HCA ``node_id``'s link half up: the HCA Active, its leaf port Armed, through IBA-allowed
        PortState steps only (:func:`tuning.lab.ib_port_faults.half_activate`)."""
        hca = self.topology.hca(self._node(node_id))
        ib_port_faults.half_activate(self, hca.node_id, (f"{self.topology.leaves[hca.leaf][0]:#x}", hca.leaf_port))
        self.refresh_nodes(node_id)

    def _node(self, node_id: str) -> str:
        known = {h.node_id for h in self.topology.hcas} | set(self.topology.leaves)
        if node_id not in known:
            raise TuningError(f"no node {node_id!r} in the IB lab; known: {', '.join(sorted(known))}")
        return node_id


def _stop(pid: int, grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; waits until the process is gone (or a zombie)."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
            except OSError:
                return
            if state == "Z":
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                return
            time.sleep(0.05)


def _width_active(portinfo: str) -> str | None:
    """``LinkWidthActive`` of ``smpquery portinfo``'s dotted layout (``LinkWidthActive:....4X``)."""
    m = re.search(r"^LinkWidthActive:\.*(\S+)", portinfo, re.M)
    return m.group(1) if m else None
