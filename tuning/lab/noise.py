"""Run-to-run noise of the lab's RDMA test results: a real fabric never returns the same
bandwidth twice (other traffic, ECMP hashing, CPU frequency), and verification must be judged
on such numbers.

The lab's ``fabric.json`` holds ``noise``: ``{"bw_pct": 3.0, "lat_pct": 3.0, "seed": 7}`` (absent or
0: none, the model's numbers as they are). Each perftest run draws one factor per metric,
``1 + N(0, pct / 100)`` clipped at 3 standard deviations, from a generator seeded by
(seed, the pair and test, the run's sequence number among that pair and test's runs in this lab),
so a lab reset with the same seed gives every pair and test the same series of draws, whatever
the order in which concurrent runs of a round start (a count over all runs handed each pair the
numbers of whichever started first, so a verification's draws moved with scheduling); without a
seed every run draws from the operating system. The counters are ``run/perftest/noise.seq``, one
JSON object (the world-writable rendezvous folder: the stand-ins run as the node's user;
power-on empties it), taken under ``flock``.

Only the stdlib is imported: the perftest stand-ins run with ``python -S``
(:mod:`tuning.lab.tools.perftest`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import stat
from pathlib import Path

#: the most a lab's noise may be, percent (a fabric noisier than this is broken, not noisy)
MAX_PCT = 50.0
#: the spread (percent, one standard deviation, bandwidth and latency) `fabtune lab up` gives a lab:
#: a quiet real fabric's, the run-to-run spread verification assumes by default
#: (:class:`tuning.model.policy.Thresholds` ``noise_pct``); `lab up --noise 0` gives the model's numbers
DEFAULT_PCT = 1.0
#: draws are clipped at this many standard deviations
CLIP_SIGMAS = 3.0


def check(bw_pct: float, lat_pct: float, seed: int | None) -> dict:
    """The ``noise`` entry of ``fabric.json`` for these settings; {} for no noise.

    Raises:
        ValueError: a percentage outside 0..50 or a negative seed (the message names it).
    """
    for name, v in (("bandwidth noise", bw_pct), ("latency noise", lat_pct)):
        if not 0 <= v <= MAX_PCT:
            raise ValueError(f"{name} {v} %: must be 0..{MAX_PCT:g} percent")
    if seed is not None and seed < 0:
        raise ValueError(f"noise seed {seed}: must be a whole number >= 0")
    if not bw_pct and not lat_pct:
        return {}
    return {"bw_pct": float(bw_pct), "lat_pct": float(lat_pct), **({"seed": seed} if seed is not None else {})}


def _sequence(state_dir: Path, key: str) -> int:
    """The next run number (0, 1, ...) of the runs named ``key`` in this lab, from the counters of
    ``run/perftest/noise.seq`` (``{key: runs so far}``) under an exclusive lock; never through a
    symlink or a special file (OSError). A file that is not such an object starts the counts again."""
    path = state_dir / "run" / "perftest" / "noise.seq"
    path.parent.mkdir(parents=True, exist_ok=True)  # the lab makes it (mode 1777); a bare state dir has none
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path}: not a regular file")
        if st.st_uid == os.geteuid():
            os.fchmod(fd, 0o666)  # the other nodes' users take numbers too
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = b""
        while chunk := os.read(fd, 65536):
            raw += chunk
        try:
            counts = json.loads(raw or b"{}")
        except ValueError:
            counts = {}
        counts = counts if isinstance(counts, dict) else {}
        n = counts.get(key, 0) if isinstance(counts.get(key, 0), int) else 0
        counts[key] = n + 1
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(counts, sort_keys=True).encode())
        return n
    finally:
        os.close(fd)


def draw(state_dir: Path | str, noise: dict | None, key: tuple) -> tuple[float, float]:
    """One run's (bandwidth factor, latency factor) for the ``noise`` of ``fabric.json``;
    ``(1.0, 1.0)`` when there is none. ``key`` names the run (pair and test)."""
    bw_pct, lat_pct = float((noise or {}).get("bw_pct", 0)), float((noise or {}).get("lat_pct", 0))
    if not bw_pct and not lat_pct:
        return 1.0, 1.0
    seed = (noise or {}).get("seed")
    if seed is None:
        rng = random.Random(os.urandom(16))
    else:
        n = _sequence(Path(state_dir), repr(key))
        rng = random.Random(hashlib.sha256(repr((seed, n, key)).encode()).digest())

    def factor(pct: float) -> float:
        z = max(-CLIP_SIGMAS, min(CLIP_SIGMAS, rng.gauss(0.0, 1.0)))
        return 1.0 + z * pct / 100

    return factor(bw_pct), factor(lat_pct)
