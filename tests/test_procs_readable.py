"""tuning.procs.readable: waiting on descriptors numbered past select()'s FD_SETSIZE (1,024), as a
256-node lab's daemon holds them (its sudo watch failed with "filedescriptor out of range in select()")."""

from __future__ import annotations

import os
import resource

from tuning.procs import readable


def test_a_descriptor_past_1024_is_waited_on_and_an_idle_one_is_not_ready():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wide = hard if hard == resource.RLIM_INFINITY else max(hard, 1600)  # root (CI) may raise a low hard limit
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1600), wide))
    r, w = os.pipe()
    high = os.dup2(r, 1500)
    try:
        assert readable([high], 0) == []
        os.write(w, b"x")
        assert readable([high, r], 0.5) == [high, r]
        os.close(w)
        assert os.read(high, 1) == b"x" and readable([high], 0) == [high]  # EOF reads as ready
    finally:
        for fd in (high, r):
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
