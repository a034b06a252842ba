"""Work that needs no change on devices: the offline plan (no device contacted) and a
stand-alone verification against the recorded baseline.
"""

from __future__ import annotations

from pathlib import Path

from tuning.errors import NotSupportedError
from tuning.inventory import Inventory, collector_paused
from tuning.outfile import write_atomic
from tuning.rollout.run_report import RunReport
from tuning.targets import platform_of, target_class
from tuning.model.outcomes import RunOutcome


def offline_plan(inv: Inventory, limit: list[str] | None, domains_: set[str] | None = None) -> RunReport:
    """The desired settings of every selected device, ``before`` unknown (None).

    Settings that depend on discovery (IRQ numbers, the ECN file flavour of the NIC driver)
    are absent: they need the device.
    """
    report = RunReport(None, "offline-plan", outcome=RunOutcome.PLANNED)
    with collector_paused():  # half a million changes that live on: see collector_paused
        for dev in inv.select(limit):
            items, notes = target_class(dev.role, platform_of(dev)).offline_plan(dev, domains_)
            report.changes[dev.name] = [c.as_dict() for c in items]
            report.findings += [f.as_dict() for f in notes]
    return report


def render_inventory(inv: Inventory, out_dir: Path, skipped: list | None = None) -> list[Path]:
    """Write one file per device, ``<name>.<suffix>``, with what its Target renders without
    contacting it (``Target.rendered``: a switch's OS configuration, e.g. ``leaf01.nvue`` with
    ``nv set`` lines; a node's boot files, ``node01.files``).

    Args:
        skipped: when given, a device whose kind cannot render without the fabric (an SM's
            ``partitions.conf`` names port GUIDs read from it: NotSupportedError) is appended as
            ``(name, why)`` and the others are still written; None: that error is raised.

    Returns:
        The written paths, in inventory order.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    with collector_paused():
        return _render_each(inv, out_dir, skipped)


def _render_each(inv: Inventory, out_dir: Path, skipped: list | None) -> list[Path]:
    """:func:`render_inventory`'s loop, device by device."""
    written = []
    for dev in inv.devices.values():
        try:
            suffix, text = target_class(dev.role, platform_of(dev)).rendered(dev)
        except NotSupportedError as e:
            if skipped is None:
                raise
            skipped.append((dev.name, e.message))
            continue
        path = out_dir / f"{dev.name}.{suffix}"
        write_atomic(path, text.encode())  # never through a link or onto a special file
        written.append(path)
    return written
