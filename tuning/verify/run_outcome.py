"""Why one perftest run gave no value: the verification harness's own failure on a node
(:func:`harness_fault`: the class ``harness``, :data:`tuning.verify.pair_result.HARNESS_KINDS`) or
perftest's own error line, a 0.00 average, a missing row (:func:`no_result`: the fabric's). Used by
:mod:`tuning.verify.runner` (and importable from there, as before)."""

from __future__ import annotations

import math
import re

from tuning.parsers.perftest import PerftestResult
from tuning.transport.base import CommandResult


#: perftest's line when its server cannot bind its TCP port (src/perftest_communication.c,
#: ethernet_server_connect; it prints its "Waiting for client" banner before trying)
_NO_LISTEN = re.compile(r"Couldn't listen to port (\d+)")


def harness_fault(res: CommandResult, tool: str, end: str) -> tuple[str, str] | None:
    """Why the verification harness, not the fabric, kept one end of a test from running, or None.

    ``port_in_use``: the perftest server printed ``Couldn't listen to port N`` (another process on
    that node holds the TCP port: perftest binds every address). ``tool_missing``: the shell could
    not start the tool (exit 127: not found; 126: not executable). ``end``: ``node02 (server)``.

    Returns:
        ``(error_kind, cause)``, the cause naming the end and saying the fabric was not tested.
    """
    text = res.stdout + res.stderr
    if res.rc in (126, 127):
        last = (res.stderr.strip().splitlines() or ["no output"])[-1][:160]
        return "tool_missing", f"{end}: {tool} could not start (exit {res.rc}: {last}); the fabric was not tested"
    if (m := _NO_LISTEN.search(text)) is not None:
        return "port_in_use", (f"{end}: {tool} could not listen on TCP port {m.group(1)} (another process on the "
                               f"node holds it); the fabric was not tested")
    return None


def no_result(res: PerftestResult, tool: str) -> tuple[str, str] | None:
    """Why a parsed perftest run gave no value, or None when it did.

    Returns:
        ``(error_kind, cause)``: perftest's own classified error
        (:func:`tuning.parsers.perftest_failures.classify_failure`: ``connect_failed``,
        ``qp_rtr_failed``, ``qp_rts_failed``, ``completion_error``, ``gid_type_mismatch``,
        ``no_rdma_device``, ``unknown``), or ``no_value``: a bandwidth test whose best average is
        0.00 (perftest prints 0.00 when a duration-mode run completed nothing; a ``0.00`` peak is
        normal in duration mode and is not looked at), or any average that is negative or not
        finite, or a latency test without a finite typical latency > 0.
    """
    if res.failure is not None:
        f = res.failure
        return f.kind, f"{tool}: {f.message} ({f.likely_cause})"
    if res.kind == "lat" or tool.endswith("_lat"):
        typical = res.lat_rows[0].t_typical if res.lat_rows else None
        if not _measured(typical):
            return "no_value", f"{tool}: typical latency {typical if res.lat_rows else 'missing'}: not a measurement"
        return None
    best = res.best_bw_gbps()
    if not _measured(best) or not all(_measured(r.bw_avg.value) or r.bw_avg.value == 0 for r in res.bw_rows):
        # 0.00: the run produced no value, it did not measure 0 Gb/s
        shown = "missing" if best is None else "0.00" if best == 0 else best
        return "no_value", f"{tool}: average bandwidth {shown}: not a measurement"
    return None


def _measured(value: float | None) -> bool:
    """A bandwidth or latency is a value only when finite and > 0 (0.00, negative, inf, nan: not)."""
    return value is not None and math.isfinite(value) and value > 0
