"""``fabtune lint``: the fabric lint (:mod:`tuning.lint`) as a table or JSON. Registered in :mod:`tuning.cli`.

Exit 0: no finding, or warnings only; 2: an error finding (a rule the fabric breaks: nothing is
pushed by a plan or rollout of this inventory while an inventory rule fails); 1 or 4: the lint
itself failed (a switch unreachable: 4).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from tuning.cli_args import load_inventory
from tuning.cli_emit import out
from tuning.cli_options import INV, JSON


def lint_cmd(inventory: Path = INV, offline: bool = typer.Option(
        False, "--offline", help="Lint the inventory alone; contact no device."), as_json: bool = JSON) -> None:
    """Check the rules RoCE needs across devices: MTU headroom on every hop, one PFC priority, trust
    and DSCP map from NIC to switch, CNPs outside the lossless class, ECN on the lossless queue, rail
    cabling. Without --offline also the switches' effective QoS and port MTUs as they report them.
    Changes nothing. Exit 0 clean (or warnings), 2 a rule broken.

    Example: fabtune lint -i inventory/lab --offline
    """
    from tuning.lint import inventory_findings, live_findings

    inv = load_inventory(inventory, lint=False)
    findings = list(inventory_findings(inv.devices))
    if not offline:
        findings += list(live_findings(inv.devices, _switch_states(inv)))
    if as_json:
        print(json.dumps({"findings": [f.as_dict() for f in findings], "offline": offline}, indent=2))
    else:
        _table(findings, offline, len(inv.devices))
    raise typer.Exit(2 if any(f.severity == "error" for f in findings) else 0)


def _switch_states(inv) -> dict:
    """Each switch's state as it reports it (:meth:`tuning.switch.base.SwitchDriver.get_state`), read
    in parallel over one session each. Raises the first device's error (ConnectError: exit 4)."""
    from concurrent.futures import ThreadPoolExecutor

    from tuning.targets.switch import open_driver

    def read(dev):
        drv = open_driver(dev)
        try:
            return dev.name, drv.get_state()
        finally:
            drv.close()

    with ThreadPoolExecutor(max_workers=16) as pool:
        return dict(pool.map(read, inv.switches))


def _table(findings: list, offline: bool, n_devices: int) -> None:
    from rich.table import Table

    scope = "the inventory" if offline else "the inventory and the switches as they report"
    if not findings:
        out.print(f"lint: no rule broken in {scope} ({n_devices} devices)")
        return
    table = Table("rule", "severity", "devices", "finding", "fix")
    for f in findings:
        table.add_row(f.rule, f.severity, ", ".join(f.devices), f.message, f.fix)
    out.print(table)
    errors = sum(f.severity == "error" for f in findings)
    out.print(f"lint: {errors} error(s), {len(findings) - errors} warning(s) in {scope} ({n_devices} devices)")
