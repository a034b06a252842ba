"""The lab NICs' traffic counters: ``ethtool -S IF`` and RDMA ``hw_counters`` (issue 8). Stdlib only.

Files (per node sysroot, built at lab up and at every lab reboot, all zero but ``lifespan``):
    ``sys/class/infiniband/<dev>/ports/1/hw_counters/<name>``  one decimal value and a newline per
        file (0444, folder 0555, as sysfs); names :data:`HW_COUNTERS` (``shared/cases/
        hw_counters__sysfs_grep_mlx5_port1.txt`` plus the DCQCN reaction point's ``rp_cnp_*``)
    ``run/lab/ethtool/<if>.json``  ``{name: value}`` of :data:`ETHTOOL_COUNTERS`, which the
        ``ethtool -S`` stand-in prints in mlx5's order (``shared/cases/ethtool_S__*.txt``)
    ``sys/class/net/<if>/speed``  the link speed in Mb/s (400000 for a 400 Gb/s NIC), if missing
    ``sys/class/net/<if>/{carrier_changes,carrier_up_count,carrier_down_count}``  :data:`NET_COUNTERS`
        (1, 1, 0 at boot); a ``flap`` injection (:mod:`tuning.lab.hw_faults`) moves them

Counters change only through :func:`bump` (the perftest stand-in: the client for its own NIC,
the server for the receiver's), under an exclusive ``flock`` of the node's ``run/lab/ethtool``
folder; readers of the JSON take it shared. The files and the folder belong to whoever built the
sysroot (root when the lab daemon is root), as sysfs files belong to root: a node user can
neither write, chmod nor replace them. The stand-ins run as the node user, so :func:`bump` of a
caller who does not own the files asks the lab daemon over the node's sudo socket (request
``{"op": "counters", ...}``; the daemon admits only processes of that socket's node, checks the
names and that every increment is a non-negative integer, and applies it with :func:`apply_request`),
as only the NIC updates its counters. In a user-namespace lab the shells own the tree
(docs/lab.md, lenient) and :func:`bump` writes directly: a counter file is made writable by its
owner for the one write and put back to 0444.

``ethtool -S`` prints, as mlx5 (``en_stats.c`` ``mlx5e_grp_per_prio_pfc_fill_strings``), the PFC
counters ``{rx,tx}_prioN_pause*`` only for the priorities with PFC on (``run/lab/dcb/<if>.json``
``pfc``) and the ``{rx,tx}_global_pause*`` ones only while 802.3x pause is on
(``run/lab/pause/<if>.json`` ``rx`` or ``tx``); the JSON keeps every counter.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tuning.lab.fabric import Node

#: RDMA port counters of an mlx5 port 1 (``hw_counters``); ``lifespan`` is the refresh period (ms)
HW_COUNTERS = (
    "duplicate_request", "implied_nak_seq_err", "lifespan", "local_ack_timeout_err", "np_cnp_sent",
    "np_ecn_marked_roce_packets", "out_of_buffer", "out_of_sequence", "packet_seq_err", "req_cqe_error",
    "req_cqe_flush_error", "req_remote_access_errors", "req_remote_invalid_request", "resp_cqe_error",
    "resp_cqe_flush_error", "resp_local_length_error", "resp_remote_access_errors", "rnr_nak_retry_err",
    "rp_cnp_handled", "rp_cnp_ignored", "rx_atomic_requests", "rx_read_requests", "rx_write_requests",
)
HW_INITIAL = {"lifespan": 10}
#: ``ethtool -S`` names of an mlx5 port in the driver's order: the global and physical-port
#: counters, per priority the traffic counters, then per priority the PFC counters, the global
#: (802.3x) pause counters, the pause storm counters, then per priority the buffer counters (Linux
#: mlx5 ``counters.rst``, ``en_stats.c``); :func:`read_stats` leaves out the PFC and global pause
#: counters the port's configuration hides
ETHTOOL_COUNTERS = (
    "rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "rx_out_of_buffer",
    "rx_packets_phy", "rx_bytes_phy", "tx_packets_phy", "tx_bytes_phy",
    "rx_pause_ctrl_phy", "tx_pause_ctrl_phy", "rx_discards_phy", "tx_discards_phy", "link_down_events_phy",
    *(f"{d}_prio{p}_{n}" for p in range(8) for d, n in (("rx", "bytes"), ("rx", "packets"), ("rx", "discards"),
                                                          ("tx", "bytes"), ("tx", "packets"))),
    *(f"{d}_prio{p}_{n}" for p in range(8) for d, n in (("rx", "pause"), ("rx", "pause_duration"), ("tx", "pause"),
                                                          ("tx", "pause_duration"), ("rx", "pause_transition"))),
    *(f"{d}_global_{n}" for d, n in (("rx", "pause"), ("rx", "pause_duration"), ("tx", "pause"),
                                     ("tx", "pause_duration"), ("rx", "pause_transition"))),
    "tx_pause_storm_warning_events", "tx_pause_storm_error_events",
    *(f"rx_prio{p}_{n}" for p in range(8) for n in ("buf_discard", "cong_discard", "marked")),
)


#: the netdev's sysfs carrier counters (kernel ``Documentation/ABI/testing/sysfs-class-net``:
#: ``carrier_changes``, ``carrier_up_count``, ``carrier_down_count``) and their value at boot (up once)
NET_COUNTERS = {"carrier_changes": 1, "carrier_up_count": 1, "carrier_down_count": 0}


def stats_dir(sysroot: Path) -> Path:
    """``run/lab/ethtool``: the ``ethtool -S`` state of every port, and the counters' lock."""
    return sysroot / "run" / "lab" / "ethtool"


def stats_path(sysroot: Path, ifname: str) -> Path:
    """``run/lab/ethtool/<if>.json``."""
    return stats_dir(sysroot) / f"{ifname}.json"


def hw_dir(sysroot: Path, dev: str) -> Path:
    """``sys/class/infiniband/<dev>/ports/1/hw_counters``."""
    return sysroot / "sys/class/infiniband" / dev / "ports/1/hw_counters"


class _lock:  # noqa: N801 - a context manager, like open()
    def __init__(self, sysroot: Path, shared: bool = False):
        self._dir, self._shared = stats_dir(sysroot), shared

    def __enter__(self) -> "_lock":
        import fcntl

        self._fd = os.open(self._dir, os.O_RDONLY)
        fcntl.flock(self._fd, fcntl.LOCK_SH if self._shared else fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)  # closing releases the lock


#: ``{rx,tx}_prioN_pause*`` / ``{rx,tx}_global_pause*`` (mlx5 ``pport_per_prio_pfc_stats_desc``)
_PAUSE = re.compile(r"[rt]x_(prio(\d)|global)_pause\w*")


def _shown(sysroot: Path, ifname: str) -> tuple[set[int], bool]:
    """The priorities with PFC on and whether 802.3x pause is on (RX or TX), from the DCB and
    pause state (``run/lab/dcb``, ``run/lab/pause``); no file: PFC off, pause on (mlx5 at load)."""
    try:
        pfc = json.loads((sysroot / "run/lab/dcb" / f"{ifname}.json").read_text()).get("pfc", [0] * 8)
    except (OSError, ValueError):
        pfc = [0] * 8
    try:
        pause = json.loads((sysroot / "run/lab/pause" / f"{ifname}.json").read_text())
        glob = bool(pause.get("rx") or pause.get("tx"))
    except (OSError, ValueError):
        glob = True
    return {p for p, on in enumerate(pfc) if on}, glob


def read_stats(sysroot: Path, ifname: str) -> dict[str, int] | None:
    """A port's ``ethtool -S`` counters in driver order, as mlx5 lists them for the port's
    configuration (PFC counters of the PFC priorities only, global pause counters only while
    802.3x pause is on); None when the port has none."""
    path = stats_path(sysroot, ifname)
    if not path.is_file():
        return None
    with _lock(sysroot, shared=True):
        raw = json.loads(path.read_text())
    prios, glob = _shown(sysroot, ifname)

    def shown(name: str) -> bool:
        m = _PAUSE.fullmatch(name)
        return m is None or (glob if m.group(2) is None else int(m.group(2)) in prios)

    return {k: int(raw.get(k, 0)) for k in ETHTOOL_COUNTERS if shown(k)}


def _write_in_place(path: Path, text: str) -> None:
    """Rewrite a 0444 file its owner may chmod: writable for the write, 0444 again after."""
    mode = path.stat().st_mode & 0o777
    os.chmod(path, mode | 0o200)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
        with os.fdopen(fd, "w") as f:
            f.write(text)
    finally:
        os.chmod(path, mode)


def bump(sysroot: Path, ifname: str, dev: str, deltas: dict[str, int]) -> None:
    """Add ``deltas`` (``ethtool -S`` and hw_counters names mixed, non-negative) to one NIC's
    counters, under the node's counter lock. Unknown names are ignored (a model newer than the
    files). A caller who does not own the files (a node user of a root lab) asks the lab daemon
    over ``<lab>/run/sudo/<node>.sock`` (``sysroot`` is ``<lab>/nodes/<node>/sysroot``).

    Raises:
        PermissionError: the daemon refused or could not be reached.
    """
    if not deltas:
        return
    if os.stat(stats_path(sysroot, ifname)).st_uid == os.geteuid():
        _apply(sysroot, ifname, dev, deltas)
        return
    from tuning.lab.sudo import lab_request

    sock = sysroot.parent.parent.parent / "run" / "sudo" / f"{sysroot.parent.name}.sock"
    try:
        reply = lab_request(str(sock), {"op": "counters", "ifname": ifname, "dev": dev, "deltas": deltas})
    except (OSError, ValueError) as exc:
        raise PermissionError(f"lab counters of {ifname}/{dev}: cannot reach the lab daemon: {exc}") from exc
    if reply.get("rc") != 0:
        raise PermissionError(reply.get("error") or f"lab counters of {ifname}/{dev}: refused")


_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def apply_request(sysroot: Path, request: dict) -> None:
    """The lab daemon's side of :func:`bump`: check a ``{"ifname", "dev", "deltas"}`` request of
    one of ``sysroot``'s node's processes and apply it (the daemon owns the files).

    Raises:
        ValueError: a name that is not one of this node's NICs or counters, or an increment that
            is not an integer in 0..2**48.
    """
    ifname, dev, deltas = request.get("ifname"), request.get("dev"), request.get("deltas")
    if not (isinstance(ifname, str) and _NAME.fullmatch(ifname) and stats_path(sysroot, ifname).is_file()):
        raise ValueError(f"lab counters: no NIC {ifname!r} on this node")
    if not (isinstance(dev, str) and _NAME.fullmatch(dev) and hw_dir(sysroot, dev).is_dir()):
        raise ValueError(f"lab counters: no RDMA device {dev!r} on this node")
    if not isinstance(deltas, dict) or not all(
            k in ETHTOOL_COUNTERS or k in HW_COUNTERS or k in NET_COUNTERS for k in deltas) or not all(
            type(v) is int and 0 <= v <= 1 << 48 for v in deltas.values()):
        raise ValueError("lab counters: increments must be known counters with integers in 0..2**48")
    _apply(sysroot, ifname, dev, deltas)


def _apply(sysroot: Path, ifname: str, dev: str, deltas: dict[str, int]) -> None:
    with _lock(sysroot):
        path = stats_path(sysroot, ifname)
        stats = json.loads(path.read_text())
        eth = {k: v for k, v in deltas.items() if k in ETHTOOL_COUNTERS}
        if eth:
            for k, v in eth.items():
                stats[k] = int(stats.get(k, 0)) + int(v)
            _write_in_place(path, json.dumps(stats, sort_keys=True) + "\n")
        for name, v in deltas.items():
            f = hw_dir(sysroot, dev) / name if name in HW_COUNTERS else (
                sysroot / "sys/class/net" / ifname / name if name in NET_COUNTERS else None)
            if f is not None and v and f.is_file():
                _write_in_place(f, f"{int(f.read_text().strip() or 0) + int(v)}\n")


def build(root: Path, node: Node) -> None:
    """Sysroot builder (``tuning.lab.sysroot.EXTRA_BUILDERS``): every NIC's counters at zero
    (``lifespan`` 10), ``sys/class/net/<if>/speed`` where missing, all 0444 (folders 0555, the
    ``run/lab/ethtool`` folder 0755), owned by the builder (root in a root lab, as sysfs)."""
    stats_dir(root).mkdir(parents=True, exist_ok=True)
    stats_dir(root).chmod(0o755)
    for nic in node.nics:
        speed = root / "sys/class/net" / nic.netdev / "speed"
        if not speed.exists():
            speed.write_text(f"{nic.speed_gbps * 1000}\n")
            speed.chmod(0o444)
        for name, value in NET_COUNTERS.items():
            f = speed.with_name(name)
            f.write_text(f"{value}\n")
            f.chmod(0o444)
        path = stats_path(root, nic.netdev)
        path.write_text(json.dumps({k: 0 for k in ETHTOOL_COUNTERS}, sort_keys=True) + "\n")
        path.chmod(0o444)
        hw = hw_dir(root, nic.rdma_device)
        hw.mkdir(parents=True, exist_ok=True)
        for name in HW_COUNTERS:
            (hw / name).write_text(f"{HW_INITIAL.get(name, 0)}\n")
            (hw / name).chmod(0o444)
        hw.chmod(0o555)
