"""Nornir as the fan-out: our validated inventory becomes a Nornir inventory, and each
stage runs one task per device on Nornir's threaded runner. Per-device failures stay
per device (Nornir marks the host failed); fleet results are data.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from nornir.core import Nornir
from nornir.core.inventory import Defaults, Groups, Host, Hosts, Inventory as NrInventory
from nornir.core.task import AggregatedResult, Result, Task
from nornir.plugins.runners import ThreadedRunner

from tuning.inventory import Device

# Nornir logs each failed task's traceback; fabtune reports the error itself, in one line.
logging.getLogger("nornir").addHandler(logging.NullHandler())
logging.getLogger("nornir").propagate = False


def nornir_for(devices: list[Device], workers: int = 20) -> Nornir:
    """A Nornir object whose hosts carry our :class:`Device` in ``host.data["device"]``."""
    hosts = Hosts()
    for d in devices:
        hosts[d.name] = Host(name=d.name, hostname=d.connection.hostname, port=d.connection.port,
                             username=d.connection.username, platform=getattr(d.spec, "platform", "linux"),
                             data={"device": d, "role": d.role})
    inv = NrInventory(hosts=hosts, groups=Groups(), defaults=Defaults())
    return Nornir(inventory=inv, runner=ThreadedRunner(num_workers=max(1, min(workers, len(devices) or 1))))


def fan_out(nr: Nornir, fn: Callable[[Device], Any], name: str, only: set[str] | None = None) -> AggregatedResult:
    """Run ``fn(device)`` on every host (or those in ``only``) in parallel.

    Returns:
        Nornir's AggregatedResult; ``result[host][0].result`` is what ``fn`` returned, and
        ``.exception`` is set for a host whose ``fn`` raised.
    """

    def task(task: Task) -> Result:
        return Result(host=task.host, result=fn(task.host.data["device"]))

    target = nr.filter(filter_func=lambda h: h.name in only) if only is not None else nr
    return target.run(task=task, name=name, on_failed=True)


def outcomes(agg: AggregatedResult) -> tuple[dict[str, Any], dict[str, BaseException]]:
    """Split an AggregatedResult into ``{host: value}`` and ``{host: exception}``."""
    ok, failed = {}, {}
    for host, multi in agg.items():
        if multi.failed:
            failed[host] = multi[0].exception or RuntimeError(str(multi[0].result))
        else:
            ok[host] = multi[0].result
    return ok, failed
