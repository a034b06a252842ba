"""The on-disk journal of a run: what was snapshotted, what was applied, how it ended.

Written before the first write to any device and after every stage (atomic replace), so
``fabtune rollback RUN_ID`` can finish what a crashed controller left. One JSON file per run:
``<journal_dir>/<run_id>.json``. Holds settings values only, never credentials.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tuning.errors import InputError

DEFAULT_DIR = Path(".fabtune") / "journal"
#: device states that mean the run may have changed the device (see docs/architecture.md)
TOUCHED = ("pushing", "applied", "failed")


def new_run_id() -> str:
    """``20261130T101500-1a2b3c`` (UTC time + random suffix): sortable and unique."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


@dataclass
class Journal:
    """One run's journal. ``data`` is the JSON document; :meth:`save` persists it.

    Document shape::

        {"run_id": "...", "inventory": "inventory/lab", "mode": "rollout", "stage": "verify",
         "outcome": null, "devices": {"node01": {"role": "node", "changes": [...], "applied": [...]},
                                      "leaf01": {"role": "switch", "revision_before": "3", "revision": "4"}},
         "verify": {"before": [...], "after": [...]}, "events": [["apply", "..."]]}
    """

    path: Path
    data: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def create(cls, journal_dir: Path, inventory: str, mode: str) -> "Journal":
        """Start a new journal (written at once)."""
        run_id = new_run_id()
        j = cls(journal_dir / f"{run_id}.json", {
            "run_id": run_id, "inventory": inventory, "mode": mode, "stage": "validate",
            "outcome": None, "started": time.time(), "devices": {}, "verify": {}, "events": []})
        j.save()
        return j

    @classmethod
    def load(cls, journal_dir: Path, run_id: str) -> "Journal":
        """Open a run's journal. Raises InputError naming the runs that exist."""
        if not re.fullmatch(r"[0-9A-Za-z][0-9A-Za-z_.-]*", run_id):
            raise InputError("RUN_ID", run_id, "not a run id like 20261130T101500-1a2b3c (see `fabtune runs`)")
        path = journal_dir / f"{run_id}.json"
        if not path.exists():
            runs = sorted(p.stem for p in journal_dir.glob("*.json") if p.stem != "baseline")[-5:]
            raise InputError("RUN_ID", run_id, f"no journal {path}; recent runs: {', '.join(runs) or 'none'}")
        return cls(path, json.loads(path.read_text()))

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.data["run_id"]

    def stage(self, name: str, note: str = "") -> None:
        """Record entering a stage, and save."""
        self.data["stage"] = name
        self.data["events"].append([name, note, round(time.time(), 3)])
        self.save()

    def device(self, name: str) -> dict:
        """The mutable per-device record."""
        return self.data["devices"].setdefault(name, {})

    def update(self, name: str, **fields: object) -> None:
        """Set fields of one device's record and save at once (safe from the fan-out threads)."""
        with self._lock:
            self.data["devices"].setdefault(name, {}).update(fields)
        self.save()

    def save(self) -> None:
        """Atomic write (tmp file + rename), serialised across threads."""
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.data, indent=2, sort_keys=True, default=str) + "\n")
            os.replace(tmp, self.path)


def baseline_path(journal_dir: Path) -> Path:
    """Where the last kept rollout's verification results live."""
    return journal_dir / "baseline.json"


def load_baseline(journal_dir: Path) -> dict | None:
    """The recorded baseline (pair name -> result dict), or None."""
    p = baseline_path(journal_dir)
    return json.loads(p.read_text()) if p.exists() else None


def save_baseline(journal_dir: Path, results: dict) -> None:
    """Record verification results as the new baseline."""
    journal_dir.mkdir(parents=True, exist_ok=True)
    baseline_path(journal_dir).write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")


def list_runs(journal_dir: Path, last: int = 20) -> list[dict]:
    """The newest ``last`` journals, oldest first: run_id, mode, stage, outcome, touched devices."""
    out = []
    for path in sorted(journal_dir.glob("*.json"))[-last - 1:]:
        if path.stem == "baseline":
            continue
        d = json.loads(path.read_text())
        touched = sorted(n for n, rec in d.get("devices", {}).items()
                         if rec.get("state") in TOUCHED)
        out.append({"run_id": d["run_id"], "mode": d.get("mode"), "stage": d.get("stage"),
                    "outcome": d.get("outcome"), "touched": touched, "inventory": d.get("inventory")})
    return out[-last:]
