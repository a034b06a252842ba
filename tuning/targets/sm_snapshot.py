"""The journal snapshot of the subnet manager Target (:meth:`tuning.targets.sm.SmTarget.record`):
which of OpenSM's files it holds and the check a snapshot passes before anything is written from it
(a restore, a push)."""

from __future__ import annotations

import re

from tuning.errors import RollbackError
from tuning.model.ib_sm import SmSpec

#: the files a push may write, by the spec field naming their path (a journal before the QoS file lacks its path)
FILES = ("opensm_partitions_file", "opensm_conf_file", "opensm_qos_policy_file")
#: every path of OpenSM's the target reads or writes (the journal's ``snapshot.paths``)
PATHS = FILES + ("opensm_log_file", "opensm_pid_file", "opensm_subnet_list_file")


_GUID = re.compile(r"0x[0-9a-f]{16}")


def snapshot_of(name: str, record: dict) -> dict:
    """The ``snapshot`` of a journal record (:meth:`tuning.targets.sm.SmTarget.record`), checked before anything is
    written from it: its paths pass the SM spec's grammar and are the only files written, the ports
    are GUIDs (they reach a shell), the tables map pkeys to ``full`` / ``limited``.

    Raises:
        RollbackError: no snapshot, or one that fails a check (names what).
    """
    from pydantic import ValidationError

    snap = record.get("snapshot")
    try:
        paths = SmSpec.model_validate(snap["paths"]).model_dump(include=set(snap["paths"]))
        ok = (set(PATHS) - {FILES[-1]} <= set(paths) <= set(PATHS)
              and set(snap["files_before"]) == {paths[f] for f in FILES if f in paths}
              and all(isinstance(v, (str, type(None))) for v in snap["files_before"].values())
              and all(_GUID.fullmatch(g) and isinstance(n, str) for g, n in snap["ports"].items())
              and all(set(t.values()) <= {"full", "limited"} for t in snap["pkeys_before"].values())
              and isinstance(snap["sm_priority_before"], (str, type(None)))
              and all(_GUID.fullmatch(g) and isinstance(r, list) and len(r) == 16
                      and all(type(v) is int and 0 <= v <= 15 for v in r) for g, r in snap.get("sl2vl_before", {}).items()))
    except (TypeError, KeyError, AttributeError, ValidationError):
        ok = False
    if not ok:
        raise RollbackError("the journal's SM snapshot is missing or malformed (paths, files_before, ports, "
                            "pkeys_before, sm_priority_before, sl2vl_before): restore OpenSM's files by hand", host=name,
                            phase="restore")
    return snap
