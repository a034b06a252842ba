"""The lab daemon: ``python -m tuning.lab.daemon STATE_DIR``.

Started detached by :func:`tuning.lab.controller.up`; serves every node's SSH
endpoint (:mod:`tuning.lab.nodeserver`) and the switches
(``tuning.lab.switches.start_switches``) from ``STATE_DIR/fabric.json`` until
SIGTERM/SIGINT, with the stand-ins' two fork servers (:mod:`tuning.lab.toolserver`); SIGHUP resets
the lab to power-on (:mod:`tuning.lab.power_on`). Logs to stdout, which the controller points at
``lab.log``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from tuning.lab import power_on, toolserver
from tuning.lab.fabric import Fabric
from tuning.lab.nodeserver import serve_nodes

log = logging.getLogger("fabtune.lab.daemon")


def _stop_switches(handle: object) -> None:
    """Stop what ``start_switches`` returned: an object with ``stop()`` or a list of them."""
    for item in handle if isinstance(handle, (list, tuple)) else [handle]:
        stop = getattr(item, "stop", None)
        if callable(stop):
            try:
                stop()
            except Exception:  # shutting down: report and go on with the others
                log.exception("stopping switch endpoint %r failed", item)


def _reset(state_dir: Path, switches: object, servers: frozenset[int]) -> None:
    """SIGHUP: put the lab back to power-on (:func:`tuning.lab.power_on.restore`) in a thread, so the
    loop keeps serving; answer in ``power-on/reset.done``."""
    def work() -> None:
        def reset_switches() -> dict[str, int]:
            return switches.reset() if switches is not None else {}  # type: ignore[attr-defined]
        try:
            result = power_on.restore(state_dir, os.getpid(), reset_switches, servers)
        except Exception as exc:  # reported to the caller; the lab keeps serving
            log.exception("reset failed")
            result = {"error": f"the lab's reset failed: {type(exc).__name__}: {exc}"}
        power_on.answer(state_dir, result)
        log.info("reset to power-on: %s", result)

    threading.Thread(target=work, name="reset", daemon=True).start()


async def _serve(state_dir: Path, fabric: Fabric, switches: object, servers: frozenset[int]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, _reset, state_dir, switches, servers)
    await serve_nodes(state_dir, fabric, stop, getattr(switches, "cut", None))


def main(argv: list[str] | None = None) -> int:
    """Run the lab of ``argv[0]`` (the state folder) in the foreground; returns the exit status."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tuning.lab.daemon STATE_DIR", file=sys.stderr)
        return 2
    logging.basicConfig(stream=sys.stdout, level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("asyncssh").setLevel(logging.WARNING)  # one INFO line per channel event otherwise
    state_dir = Path(args[0]).resolve()
    fabric = Fabric.load(state_dir / "fabric.json")
    power_on.keep(state_dir)  # before anything is served: the copy a reset restores
    switches = None
    if fabric.switches:
        from tuning.lab.switches import start_switches  # the switch lab (FakeNOS)
        try:
            switches = start_switches(state_dir, fabric)
        except OSError as exc:  # a port bound by another program since `lab up` checked it
            log.error("switches not started: %s", exc)  # the controller names the port (controller.up)
            logging.shutdown()
            os._exit(3)  # FakeNOS's threads of the switches that did start would keep the process alive
        log.info("switches up: %s", ", ".join(f"{s.name}:{s.port}" for s in fabric.switches))
    tool_servers = toolserver.start(state_dir) if fabric.nodes else []
    try:
        asyncio.run(_serve(state_dir, fabric, switches, frozenset(p.pid for p in tool_servers)))
    finally:
        toolserver.stop(tool_servers)
        if switches is not None:
            _stop_switches(switches)
        log.info("lab stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
