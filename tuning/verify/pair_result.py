"""The record of one pair's measurement: :class:`PairResult`, why a test gave no value
(:data:`ERROR_KINDS`) and whether that was the verification harness's own failure
(:data:`HARNESS_KINDS`, :func:`error_class`), never the fabric's.

:func:`tuning.verify.runner.measure` fills the measured fields, :func:`tuning.verify.pair_verdict.judge`
the verdict; reports read it as a dict (:func:`tuning.verify.pair_verdict.as_baseline`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tuning.verify.pairs import Pair

#: ``PairResult.error_kind`` values: why a test produced no value (``status == "error"``)
ERROR_KINDS = ("connect_failed", "qp_rtr_failed", "qp_rts_failed", "completion_error", "gid_type_mismatch",
               "no_rdma_device", "timeout", "no_value", "gid_unresolved", "port_in_use", "server_not_ready", "tool_missing", "no_pairs", "unknown")
#: the kinds that are a local failure of the verification harness on one node, not of the fabric:
#: a perftest server that could not listen on its TCP port (another process holds it: perftest's
#: ``Couldn't listen to port N``), a server still running that never said it listens within
#: :data:`tuning.verify.runner.BANNER_S` (``server_not_ready``: its client is not started, as it
#: could only fail to connect), a tool that could not start (shell exit 126 or 127), an InfiniBand
#: check with nothing to read (``no_pairs``: :mod:`tuning.verify.ib_sm`). The pair's
#: fabric was not tested: no link, NIC or node fault may be read from it, and a drain never follows.
HARNESS_KINDS = ("port_in_use", "server_not_ready", "tool_missing", "no_pairs")


def error_class(kind: str | None) -> str | None:
    """``harness`` for a :data:`HARNESS_KINDS` kind, ``fabric`` for any other kind (the test reached
    the NIC, the link or the far end and failed there, or gave no value), None for no error."""
    if not kind:
        return None
    return "harness" if kind in HARNESS_KINDS else "fabric"


def harness_node(result: dict) -> str:
    """The node where the harness failed for a pair result dict: the first word of its ``error``
    (:func:`tuning.verify.runner.harness_fault` writes ``node02 (server): ...``) when that is one of
    the pair's ends, else the client's node."""
    ends = [str(result.get(k) or "").split(":")[0] for k in ("client_nic", "server_nic")]
    first = str(result.get("error") or "").split(" ", 1)[0]
    return first if first in ends else ends[0]


@dataclass
class PairResult:
    """One pair's measurement: bandwidth (Gb/s), typical and p99 latency (us), or an error.

    ``client_nic``/``server_nic`` name the ends (``node01:mlx5_0``), ``client_link``/``server_link``
    the leaf port each is cabled to (``leaf01:swp1``), so a summary can name a shared culprit.

    Set by :func:`tuning.verify.pair_verdict.judge`: ``status`` ``pass`` | ``fail`` | ``error``
    (the test produced no value: it did not run, never a regression), ``verdict`` ``pass`` |
    ``fail`` (``fail`` for an error too, for older readers), ``reasons``, ``baseline`` ``compared`` |
    ``none`` | ``mismatch: <what>`` (then no regression is judged), ``drift`` (``["client GID
    index 3 -> 5"]``: an end's GID index or type changed since the baseline; reported, not a failure
    by itself), ``error_class`` (:func:`error_class`: ``harness`` | ``fabric`` for an error, else None)
    and ``judged``: each regression comparison's statement (``"bandwidth drop 0.4 % +/- 3.3 % (99 %,
    1 vs 1 sample): within the 5 % mark"``, :mod:`tuning.verify.samples`).

    Set by :func:`tuning.verify.runner.measure`: ``error_kind`` (one of :data:`ERROR_KINDS` when the
    test did not produce a value), ``gid_index`` (the client's, kept for older readers),
    ``client_gid_index`` / ``server_gid_index`` and ``*_gid_type`` (``RoCE v2``) resolved right
    before the pair on each end, ``*_speed_mbps`` (each end's netdev link speed, Mb/s; None when
    unknown), ``params``: per test, what fabtune ran, from its command line: ``{"bw": {"tool":
    "ib_write_bw", "size_bytes": 65536, "duration_s": 2, "iters": None, "qps": 1, "direction": "uni"},
    "lat": {...}}``, ``bw_samples`` / ``lat_samples``: every sample's bandwidth (Gb/s) and typical
    latency (us) in the order taken; ``bw_gbps`` / ``lat_us`` are their means.
    """

    pair: str
    path: str
    client_nic: str | None = None
    server_nic: str | None = None
    client_link: str | None = None
    server_link: str | None = None
    bw_gbps: float | None = None
    lat_us: float | None = None
    lat_p99_us: float | None = None
    gid_index: int | None = None
    mtu_bytes: int | None = None
    mtu_allowed: int | None = None
    error: str | None = None
    verdict: str = "pass"
    reasons: list[str] = field(default_factory=list)
    status: str = "pass"
    error_kind: str | None = None
    client_gid_index: int | None = None
    server_gid_index: int | None = None
    client_gid_type: str | None = None
    server_gid_type: str | None = None
    client_speed_mbps: int | None = None
    server_speed_mbps: int | None = None
    params: dict[str, dict] = field(default_factory=dict)
    baseline: str = "none"
    drift: list[str] = field(default_factory=list)
    error_class: str | None = None
    bw_samples: list[float] = field(default_factory=list)
    lat_samples: list[float] = field(default_factory=list)
    judged: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, pair: Pair) -> "PairResult":
        """An empty result naming ``pair``'s ends and the leaf ports they are cabled to."""
        c, s = pair.client_nic, pair.server_nic
        return cls(pair.name, pair.path, *pair.nics, f"{c.switch}:{c.switch_port}", f"{s.switch}:{s.switch_port}",
                   mtu_allowed=pair.mtu_allowed)

