"""Nornir as the fan-out: our validated inventory becomes a Nornir inventory, and each
stage runs one task per device on Nornir's threaded runner. Per-device failures stay
per device (Nornir marks the host failed); fleet results are data.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any, Callable

from nornir.core import Nornir
from nornir.core.inventory import Defaults, Groups, Host, Hosts, Inventory as NrInventory
from nornir.core.task import AggregatedResult, Result, Task
from nornir.plugins.runners import ThreadedRunner

from tuning.errors import DeviceTimeout
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


def fan_out(nr: Nornir, fn: Callable[[Device], Any], name: str, only: set[str] | None = None,
            timeout_s: float | None = None) -> AggregatedResult:
    """Run ``fn(device)`` on every host (or those in ``only``) in parallel.

    Args:
        name: the phase (``collect``, ``apply``...), named in a :class:`DeviceTimeout`.
        timeout_s: seconds each host's ``fn`` may take (None: no limit). A host whose ``fn`` has
            not returned by then gets ``DeviceTimeout(host, name, timeout_s)`` as its exception and
            the fan-out returns without waiting for it.

    What a timeout leaves behind: the late ``fn`` goes on in its own (daemon) thread; nothing can
    stop a thread blocked in a device's I/O. Its result is dropped. For ``apply`` that means the
    push may still land: the node-side lock (``tuning.node`` takes it for the whole push) keeps a
    restore that starts meanwhile from interleaving with it (the restore waits for the lock, or
    fails on it, and the device is reported unreachable either way); the engine journals a device as
    ``pushing`` before its push, so ``fabtune rollback`` restores it later.

    Returns:
        Nornir's AggregatedResult; ``result[host][0].result`` is what ``fn`` returned, and
        ``.exception`` is set for a host whose ``fn`` raised or timed out.
    """

    def task(task: Task) -> Result:
        device = task.host.data["device"]
        if timeout_s is None:
            return Result(host=task.host, result=fn(device))
        return Result(host=task.host, result=_within(lambda: fn(device), task.host.name, name, timeout_s))

    target = nr.filter(filter_func=lambda h: h.name in only) if only is not None else nr
    return _uninterrupted(lambda: target.run(task=task, name=name, on_failed=True), name, timeout_s)


def _within(call: Callable[[], Any], host: str, phase: str, timeout_s: float) -> Any:
    """``call()``'s value, or its exception re-raised; :class:`DeviceTimeout` when it has not
    returned after ``timeout_s`` seconds (it is left running in a daemon thread, its result dropped)."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["result"] = call()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=target, name=f"fabtune-{phase}-{host}", daemon=True).start()
    if not done.wait(timeout_s):
        raise DeviceTimeout(host, phase, timeout_s)
    if "error" in box:
        raise box["error"]
    return box["result"]


def _uninterrupted(run: Callable[[], AggregatedResult], phase: str = "", timeout_s: float | None = None
                   ) -> AggregatedResult:
    """Run ``run`` in a thread and wait for it even through Ctrl-C, then re-raise the interrupt.

    Nornir's threaded runner stops waiting on KeyboardInterrupt while its workers go on writing
    to devices; a restore started then would race them on the same sessions. Waiting lets every
    in-flight device task end (and be journaled) before the engine restores. The first Ctrl-C says
    so on stderr (``phase``, and the per-device limit ``timeout_s`` when there is one); the next
    ones are absorbed the same way.
    """
    box: dict[str, Any] = {}
    done = threading.Event()  # not Thread.is_alive(): a join() cut short by Ctrl-C can mark a running
    # thread stopped (CPython 3.11), and the restore would then race the push it must follow

    def target() -> None:
        try:
            box["result"] = run()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread below
            box["error"] = e
        finally:
            done.set()

    worker = threading.Thread(target=target, name="fabtune-fan-out", daemon=True)
    worker.start()
    interrupted: BaseException | None = None
    while not done.is_set():
        try:
            done.wait(0.2)
        except KeyboardInterrupt as e:  # finish the devices' in-flight work first
            if interrupted is None:
                limit = f" (at most {timeout_s:g} s per device)" if timeout_s else ""
                print(f"fabtune: interrupted: waiting for the in-flight {phase or 'device'} work to end{limit}, "
                      "then restoring what this run changed", file=sys.stderr, flush=True)
            interrupted = interrupted or e
    if interrupted is not None:
        raise interrupted
    if "error" in box:
        raise box["error"]
    return box["result"]


def outcomes(agg: AggregatedResult) -> tuple[dict[str, Any], dict[str, BaseException]]:
    """Split an AggregatedResult into ``{host: value}`` and ``{host: exception}``."""
    ok, failed = {}, {}
    for host, multi in agg.items():
        if multi.failed:
            failed[host] = multi[0].exception or RuntimeError(str(multi[0].result))
        else:
            ok[host] = multi[0].result
    return ok, failed
