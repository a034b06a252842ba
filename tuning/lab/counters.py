"""The lab NICs' traffic counters: ``ethtool -S IF`` and RDMA ``hw_counters`` (issue 8). Stdlib only.

Files (per node sysroot, built at lab up and at every lab reboot, all zero but ``lifespan``):
    ``sys/class/infiniband/<dev>/ports/1/hw_counters/<name>``  one decimal value and a newline per
        file (0444, folder 0555, as sysfs); names :data:`HW_COUNTERS` (``shared/cases/
        hw_counters__sysfs_grep_mlx5_port1.txt`` plus the DCQCN reaction point's ``rp_cnp_*``)
    ``run/lab/ethtool/<if>.json``  ``{name: value}`` of :data:`ETHTOOL_COUNTERS`, which the
        ``ethtool -S`` stand-in prints in mlx5's order (``shared/cases/ethtool_S__*.txt``)
    ``sys/class/net/<if>/speed``  the link speed in Mb/s (400000 for a 400 Gb/s NIC), if missing

Counters change only through :func:`bump` (the perftest stand-in: the client for its own NIC,
the server for the receiver's), under an exclusive ``flock`` of the node's ``run/lab/ethtool``
folder; readers of the JSON take it shared. The files belong to the node shells' user (the
lab user when the daemon is root), who may chmod them: a counter file is made writable for
the one write and put back to 0444, as the hardware updates what nobody may write.
"""

from __future__ import annotations

import json
import os
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
#: counters, per priority the traffic counters, then per priority the PFC counters, the pause
#: storm counters, then per priority the buffer counters (Linux mlx5 ``counters.rst``)
ETHTOOL_COUNTERS = (
    "rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "rx_out_of_buffer",
    "rx_packets_phy", "rx_bytes_phy", "tx_packets_phy", "tx_bytes_phy",
    "rx_pause_ctrl_phy", "tx_pause_ctrl_phy", "rx_discards_phy", "tx_discards_phy",
    *(f"{d}_prio{p}_{n}" for p in range(8) for d, n in (("rx", "bytes"), ("rx", "packets"), ("rx", "discards"),
                                                          ("tx", "bytes"), ("tx", "packets"))),
    *(f"{d}_prio{p}_{n}" for p in range(8) for d, n in (("rx", "pause"), ("rx", "pause_duration"), ("tx", "pause"),
                                                          ("tx", "pause_duration"), ("rx", "pause_transition"))),
    "tx_pause_storm_warning_events", "tx_pause_storm_error_events",
    *(f"rx_prio{p}_{n}" for p in range(8) for n in ("buf_discard", "cong_discard", "marked")),
)


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


def read_stats(sysroot: Path, ifname: str) -> dict[str, int] | None:
    """A port's ``ethtool -S`` counters in driver order; None when the port has none."""
    path = stats_path(sysroot, ifname)
    if not path.is_file():
        return None
    with _lock(sysroot, shared=True):
        raw = json.loads(path.read_text())
    return {k: int(raw.get(k, 0)) for k in ETHTOOL_COUNTERS}


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
    """Add ``deltas`` (``ethtool -S`` and hw_counters names mixed) to one NIC's counters, under
    the node's counter lock. Unknown names are ignored (a model newer than the files)."""
    if not deltas:
        return
    with _lock(sysroot):
        path = stats_path(sysroot, ifname)
        stats = json.loads(path.read_text())
        eth = {k: v for k, v in deltas.items() if k in ETHTOOL_COUNTERS}
        if eth:
            for k, v in eth.items():
                stats[k] = int(stats.get(k, 0)) + int(v)
            _write_in_place(path, json.dumps(stats, sort_keys=True) + "\n")
        for name, v in deltas.items():
            if name in HW_COUNTERS and v:
                f = hw_dir(sysroot, dev) / name
                _write_in_place(f, f"{int(f.read_text().strip() or 0) + int(v)}\n")


def build(root: Path, node: Node) -> None:
    """Sysroot builder (``tuning.lab.sysroot.EXTRA_BUILDERS``): every NIC's counters at zero
    (``lifespan`` 10), ``sys/class/net/<if>/speed`` where missing; handed to the lab user when
    the daemon runs as root, so the unprivileged perftest stand-ins can count."""
    from tuning.lab import privileges

    user = privileges.lab_user()
    owned: list[Path] = [stats_dir(root)]
    stats_dir(root).mkdir(parents=True, exist_ok=True)
    for nic in node.nics:
        speed = root / "sys/class/net" / nic.netdev / "speed"
        if not speed.exists():
            speed.write_text(f"{nic.speed_gbps * 1000}\n")
        path = stats_path(root, nic.netdev)
        path.write_text(json.dumps({k: 0 for k in ETHTOOL_COUNTERS}, sort_keys=True) + "\n")
        path.chmod(0o444)
        hw = hw_dir(root, nic.rdma_device)
        hw.mkdir(parents=True, exist_ok=True)
        for name in HW_COUNTERS:
            (hw / name).write_text(f"{HW_INITIAL.get(name, 0)}\n")
            (hw / name).chmod(0o444)
        hw.chmod(0o555)
        owned += [path, hw, *(hw / n for n in HW_COUNTERS)]
    if user is not None:
        for p in owned:
            os.chown(p, *user)
