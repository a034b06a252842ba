"""The verification baseline of an inventory: the last kept rollout's pair results, one file per
inventory in ``<journal_dir>/baselines/`` (``lab-1a2b3c4d5e.json``), which the next verification
compares against. Read through :func:`tuning.rollout.statefile.read_state_file` (bounded, never
following a link); written as journals are (``0600`` in a ``0700`` folder, atomic).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tuning.errors import InputError, JournalWriteError
from tuning.rollout.journal import write_private
from tuning.rollout.statefile import JOURNAL_MAX_BYTES, read_state_file


def inventory_slug(inventory: str | Path) -> str:
    """``lab-1a2b3c4d5e`` for an inventory directory: its name plus a hash of its absolute path."""
    p = Path(inventory).resolve()
    return f"{p.name}-{hashlib.sha256(str(p).encode()).hexdigest()[:10]}"


def baseline_path(journal_dir: Path, inventory: str | Path) -> Path:
    """Where the verification baseline of ``inventory`` lives (one file per inventory)."""
    return journal_dir / "baselines" / f"{inventory_slug(inventory)}.json"


def load_baseline(journal_dir: Path, inventory: str | Path) -> dict | None:
    """The recorded baseline of ``inventory`` (pair name -> result dict), or None when there is none.

    Raises:
        InputError: the file is unreadable or hostile (:func:`tuning.rollout.statefile.read_state_file`),
            or an entry is not a result object.
    """
    p = baseline_path(journal_dir, inventory)
    doc = read_state_file(p, JOURNAL_MAX_BYTES, "baseline")
    for pair, result in (doc or {}).items():
        if not isinstance(result, dict):
            raise InputError(str(p), pair, f"{type(result).__name__} is not a pair result; allowed: an object "
                             "(delete the file: the next verified rollout records a new baseline)")
    return doc


def save_baseline(journal_dir: Path, inventory: str | Path, results: dict, pairs: set[str] | None = None) -> dict:
    """MERGE ``results`` into the baseline of ``inventory``: measured pairs replace their entries,
    pairs not measured this time keep theirs (a run verified on some rails, or limited to one
    leaf, never drops the others), pairs no longer in ``pairs`` (the inventory's whole pair set,
    when given) are dropped; nccl-tests jobs (keys ``nccl:<test>:<nodes>``,
    :func:`tuning.verify.nccl.baseline_key`) are kept as measured pairs are. Written atomically. An unreadable baseline is replaced.

    Returns:
        The baseline as saved.

    Raises:
        JournalWriteError: the baselines folder cannot be written.
    """
    try:
        old = load_baseline(journal_dir, inventory) or {}
    except InputError:
        old = {}  # an unreadable baseline is replaced by this run's results, as if there were none
    merged = {**old, **results}
    if pairs is not None:
        merged = {k: v for k, v in merged.items() if k in pairs or k.startswith("nccl:")}
    p = baseline_path(journal_dir, inventory)
    try:
        write_private(p, json.dumps(merged, indent=2, sort_keys=True) + "\n")
    except OSError as e:
        raise JournalWriteError(str(p), e.strerror or str(e), pushed=None) from None
    return merged
