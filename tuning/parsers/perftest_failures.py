"""perftest's own error output, classified (issues 3 and 8): no RDMA device, connect failure,
GID type mismatch, QP RTS and RTR transition failures (different causes), completion error with
its ``ibv_wc_status``.

Message texts from linux-rdma/perftest ``src/perftest_resources.c`` (``No IB devices found``,
``IB device %s not found``, ``Failed to modify QP %d to RTR``, ``Failed to modify QP to RTS``, and
``perftest_resources.h``'s ``Completion with error at client`` / ``Failed status-%s (%d)``),
``src/perftest_communication.c`` (``Couldn't connect to %s:%d``) and ``src/write_bw.c`` / ``read_lat.c``
(`` Found Incompatibility issue with GID types.`` when the two ends' GIDs are of different
types); checked at perftest commit 00b55b6 (2026-07). Samples: shared/cases and tests/parsers/cases
(each with its public source in tests/verify/test_classify.py). docs/verify.md lists them.
"""

from __future__ import annotations

import re

from tuning.parsers.base import ToolFailure

__all__ = ["classify_failure", "gid_kind", "refine_with_gids"]

# (kind, pattern searched in each space-normalised line, likely cause); first kind that matches wins.
# Patterns are substrings, not whole lines: perftest may run two messages together (perftest#228).
_FAILURES = tuple((k, re.compile(p, re.I), c) for k, p, c in (
    ("no_rdma_device", r"no ib devices found|couldn't get device|ib device \S+ not found|did not detect devices|"
                       r"unable to find the infiniband/roce device|couldn't get context for",
     "no RDMA device visible: driver (mlx5_ib) not loaded, wrong -d name, or no /dev/infiniband in the container"),
    ("connect_failed", r"couldn't connect to|unable to init the socket connection|couldn't listen to port|"
                       r"unable to open file descriptor for socket connection|problem in resolving basic addr?ess",
     "TCP out-of-band connect failed: server not listening, firewall, or wrong IP/port (default 18515)"),
    ("gid_type_mismatch", r"incompatibility issue with gid types|gid type mismatch|different gid types|"
                          r"gid types are different",
     "one end's GID is IPv4-mapped and the other's IPv6 (perftest's ctx_check_gid_compatibility), e.g. an "
     "fe80 link-local GID index on one side; give each end the index of its RoCE v2 IPv4 GID"),
    # before RTR: write_bw.c prints "Unable to Connect the HCA's through the link" after either
    ("qp_rts_failed", r"failed to modify qp (?:\S+ )?to rts",
     "QP could not reach RTS (after RTR): attributes the local HCA refuses (outstanding reads above "
     "its max_qp_rd_atom, perftest#114; timeout/retry values), or RDMA-CM address resolution"),
    ("qp_rtr_failed", r"failed to modify qp \S+ to rtr|unable to connect the hca's through the link",
     "QP could not reach RTR: bad GID index or a GID that is not routable (fe80 link-local), "
     "path MTU mismatch, or a wrong remote"),
    ("completion_error", r"completion with error|failed status",
     "a work completion failed: lossy fabric or PFC not holding, link flap, wrong route"),
    ("unknown", r"^(?:couldn't|unable to|failed to|error)\b", "unclassified perftest error"),
))
_STATUS = re.compile(r"failed status\D*?(\d+)", re.I)
#: ibv_wc_status numbers perftest prints as ``Failed status N``
_WC_STATUS = {4: "IBV_WC_LOC_PROT_ERR", 5: "IBV_WC_WR_FLUSH_ERR", 9: "IBV_WC_REM_OP_ERR",
              10: "IBV_WC_REM_ACCESS_ERR", 12: "IBV_WC_RETRY_EXC_ERR (transport retry counter exceeded)",
              13: "IBV_WC_RNR_RETRY_EXC_ERR"}


def classify_failure(norm_lines: list[str]) -> ToolFailure | None:
    """Classify perftest's own error lines.

    Args:
        norm_lines: output lines with whitespace runs collapsed to one space.

    Returns:
        A ToolFailure (kind, message = the matching lines joined by `` / ``, likely
        cause, status for a completion error), or None when no error line is present.
    """
    for kind, pattern, cause in _FAILURES:
        hits = [x for x in norm_lines if pattern.search(x)]
        if not hits:
            continue
        status = next((m.group(1) for x in norm_lines if (m := _STATUS.search(x))), None)
        if kind != "completion_error":
            status = None
        elif status is not None:
            cause = f"{cause}; status {status} = {_WC_STATUS.get(int(status), 'see ibv_wc_status')}"
        return ToolFailure(kind=kind, message=" / ".join(hits), likely_cause=cause, status=status)
    return None


def gid_kind(gid: str) -> str:
    """Kind of a GID as perftest prints it (16 decimal bytes joined by ``:``).

    Returns:
        ``ipv4`` (IPv4-mapped, ``...:255:255:a:b:c:d``, the RoCEv2 IPv4 GID),
        ``link-local`` (``254:128:...`` = fe80::/64) or ``ipv6``.
    """
    parts = gid.split(":")
    if parts[:10] == ["00"] * 10 and parts[10:12] == ["255", "255"]:
        return "ipv4"
    return "link-local" if parts[:2] == ["254", "128"] else "ipv6"


def refine_with_gids(failure: ToolFailure, local_gid: str | None, remote_gid: str | None,
                     gid_index: int | None) -> ToolFailure:
    """Sharpen an RTR failure with the GIDs the header showed.

    Different GID kinds on the two sides (IPv4-mapped vs fe80 link-local) make it a
    ``gid_type_mismatch``; a link-local local GID is named as the likely cause.
    """
    if failure.kind != "qp_rtr_failed" or not (local_gid and remote_gid):
        return failure
    local, remote = gid_kind(local_gid), gid_kind(remote_gid)
    if local != remote:
        return failure.model_copy(update={"kind": "gid_type_mismatch", "likely_cause": (
            f"the two sides use GIDs of different types ({local} vs {remote}); "
            "use the same RoCEv2 IPv4 GID index (show_gids) on both ends")})
    if local == "link-local":
        return failure.model_copy(update={"likely_cause": (
            f"GID index {gid_index} is an fe80 link-local GID, not routable; use the RoCEv2 IPv4 "
            f"GID index (show_gids). Else: path MTU mismatch or a wrong remote")})
    return failure
