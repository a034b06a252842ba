"""Work that needs no change on devices: the offline plan (no device contacted) and a
stand-alone verification against the recorded baseline.
"""

from __future__ import annotations

from pathlib import Path

from tuning.errors import NotSupportedError
from tuning.inventory import Inventory
from tuning.outfile import write_atomic
from tuning.rollout.run_report import RunReport
from tuning.targets import platform_of, target_class
from tuning.verify.runner import Thresholds
from tuning.model.outcomes import RunOutcome


def offline_plan(inv: Inventory, limit: list[str] | None, domains_: set[str] | None = None) -> RunReport:
    """The desired settings of every selected device, ``before`` unknown (None).

    Settings that depend on discovery (IRQ numbers, the ECN file flavour of the NIC driver)
    are absent: they need the device.
    """
    report = RunReport(None, "offline-plan", outcome=RunOutcome.PLANNED)
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


def verify_only(inv: Inventory, journal_dir: Path, th: Thresholds, progress,
                rails: tuple[int, ...] | None = None, limit: list[str] | None = None,
                incast: bool = True) -> tuple[bool, list[dict], list[dict]]:
    """Measure every pair (of the devices ``limit`` names, None: all) and judge against ``th`` and
    the recorded baseline (if any); then, when the inventory expects lossless
    (:meth:`tuning.verify.incast.Expectation.from_inventory`), ``incast`` is True and the policy's
    ``incast.enabled``, one k-to-1 incast per leaf of the selection
    (:func:`tuning.verify.incast.leaves_of`, k = the policy's ``incast.k``).

    Holds the inventory's lock like a run: RDMA tests beside another run's would load the same
    links and spoil both runs' measurements.

    Returns:
        (every pair and incast passed, PairResult dicts, IncastResult dicts).

    Raises:
        LockError: another run holds the inventory (nothing measured).
    """
    from dataclasses import asdict

    from tuning.rollout import baseline, gate, journal, lock, options, session  # live only: render needs none
    from tuning.verify.incast import Expectation, leaves_of, plan_incasts, run_incasts

    run_id = journal.new_run_id()
    with lock.RunLock(lock.lock_path(inv.path), run_id, "verify", journal_dir / f"{run_id}.json"):
        s = session.Session(inv, [], 1)  # no device is changed: the nodes are opened as the pairs need them
        try:
            ok, results = gate.verify_fabric(s, options.Options(mode="verify", thresholds=th, rails=rails, limit=limit),
                                             baseline.load_baseline(journal_dir, inv.path), progress)
            incasts, expect = [], Expectation.from_inventory(inv)
            if incast and inv.policy.incast.enabled and expect.lossless:
                planned = plan_incasts(inv, leaves_of(inv, limit), inv.policy.incast.k)
                hosts = s.node_hosts({i.receiver for i in planned} | {n for i in planned for n, _ in i.senders})
                inc_ok, incasts = run_incasts(planned, hosts, expect, progress)
                ok = ok and inc_ok
        finally:
            s.close()
    return ok, [r.__dict__ for r in results], [asdict(r) for r in incasts]
