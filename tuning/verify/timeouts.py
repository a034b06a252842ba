"""How long verification waits on a node: :data:`PAIR_TIMEOUT_S` and :func:`finish`, shared by the
end reads (:mod:`tuning.verify.ends`) and the perftest runs (:mod:`tuning.verify.runner`).
"""

from __future__ import annotations

from tuning.errors import ConnectError, DeviceTimeout
from tuning.transport.base import Host

#: seconds a perftest client (and each node's GID round trip) may take before the pair is
#: ``error`` / ``timeout`` when :func:`tuning.verify.runner.verify` is given no ``timeout_s``:
#: ``-D 2`` plus connection setup is ~4 s on the lab, a loaded fabric a few times that
PAIR_TIMEOUT_S = 60.0


def finish(running, host: Host, timeout_s: float):
    """``running.wait(timeout_s)``; a command still running then is :class:`DeviceTimeout`
    (``Running.wait`` raises ConnectError only for that once the command has started)."""
    try:
        return running.wait(timeout=timeout_s)
    except ConnectError as e:
        raise DeviceTimeout(host.name, "verify", timeout_s) from e
