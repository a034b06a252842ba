"""The texts a lab community SONiC switch prints, to the character of shared/cases/cli/sonic__*.txt.

- login banner: sonic__ssh_login_banner_prompt.txt (sonic-mgmt vlab transcript), the host and the
  ``Last login`` line the lab's;
- ``show interfaces status``: sonic__show_interfaces_status.txt (scripts/intfutil:
  ``tabulate(..., tablefmt='simple', stralign='right')``, 11 columns);
- apply-patch, checkpoint, list-checkpoints, rollback, delete-checkpoint: sonic__apply_patch_*.txt and
  sonic__checkpoint_list_rollback_delete.txt; message strings of generic_config_updater/
  generic_updater.py and config/main.py (``** DRY RUN EXECUTION **``, ``Failed to apply patch due
  to: ...``, click's usage block and ``Error: ...``, exit status 2);
- ``config save -y``: utilities_common/cli.py ``run_command(display_cmd=True)`` (``Running command: ...``);
- systemd-run / systemctl: systemd's ``Running timer as unit: U.timer`` / ``Will run service as
  unit: U.service``; ``list-units --plain --no-legend`` rows and the stop failure text are L.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

from tuning.lab.sonic_db import GcuError

BANNER = r"""Linux {host} 4.19.0-12-2-amd64 #1 SMP Debian 4.19.152-1 (2020-10-18) x86_64
You are on
  ____   ___  _   _ _  ____
 / ___| / _ \| \ | (_)/ ___|
 \___ \| | | |  \| | | |
  ___) | |_| | |\  | | |___
 |____/ \___/|_| \_|_|\____|

-- Software for Open Networking in the Cloud --

Unauthorized access and/or use are prohibited.
All access and/or use are subject to monitoring.

Help:    http://azure.github.io/SONiC/

"""
APPLIED = "Patch applied successfully."
SAVED = "Running command: /usr/local/bin/sonic-cfggen -d --print-data > /etc/sonic/config_db.json"
ROOT = "Root privileges are required for this operation"
_PA = "Patch Applier: "
_COLUMNS = ("Interface", "Lanes", "Speed", "MTU", "FEC", "Alias", "Vlan", "Oper", "Admin", "Type", "Asym PFC")
_OPTIC = "QSFP-DD Double Density 8X Pluggable Transceiver"


def banner(host: str, last: float | None, address: str) -> str:
    """What a login prints before the first prompt (``Last login`` only after an earlier login)."""
    text = BANNER.format(host=host)
    if last is not None:
        text += f"Last login: {time.strftime('%a %b %d %H:%M:%S %Y', time.gmtime(last))} from {address}\n"
    return text


def table(rows: list[list[str]], headers: tuple[str, ...]) -> str:
    """tabulate ``simple`` with every column right-aligned, 2 spaces apart (width: its widest cell,
    at least its header + tabulate's MIN_PADDING of 2)."""
    widths = [max(len(h) + 2, *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(headers), "  ".join("-" * w for w in widths), *map(line, rows)]) + "\n"


def interfaces_status(cfg: dict, ports: list[str], oper_mtu: dict[str, int], down: frozenset[str]) -> str:
    """``show interfaces status [PORT]`` of ``ports`` (MTU: the operational one; Oper ``down`` when
    the port is admin down or a link fault is injected; the optic of the transcript's up ports)."""
    rows = []
    for p in ports:
        f = cfg["PORT"][p]
        oper = "up" if f.get("admin_status") == "up" and p not in down else "down"
        rows.append([p, f.get("lanes", "N/A"), f"{int(f.get('speed', '0')) // 1000}G",
                     str(oper_mtu.get(p, f.get("mtu", "9100"))), f.get("fec", "N/A"), f.get("alias", "N/A"), "routed",
                     oper, f.get("admin_status", "down"), _OPTIC if f.get("admin_status") == "up" else "N/A",
                     f.get("pfc_asym", "off")])
    return table(rows, _COLUMNS)


def _pa(scope_line: str) -> str:
    return _PA + scope_line + "\n"


def apply_head(patch: list[dict], stage: str) -> str:
    """The progress lines up to and including ``stage`` (``fields``, ``empty``, ``sort``)."""
    out = _pa("localhost: Patch application starting.") + _pa(f"localhost: Patch: {json.dumps(patch)}")
    out += _pa("localhost getting current config db.")
    out += _pa("localhost: simulating the target full config after applying the patch.")
    if stage == "simulate":
        return out
    out += _pa("localhost: validating all JsonPatch operations are permitted on the specified fields")
    if stage == "fields":
        return out
    out += _pa("localhost: validating target config does not have empty tables,\n"
               "                            since they do not show up in ConfigDb.")
    if stage == "empty":
        return out
    return out + _pa("localhost: sorting patch updates.")


def apply_tail(changes: list[dict]) -> str:
    """The lines after sorting: the changes and the verification."""
    n = len(changes)
    s, end = "s" if n != 1 else "", ":" if n else "."
    out = _pa(f"The localhost patch was converted into {n} change{s}{end}")
    out += _pa(f"localhost: applying {n} change{s} in order{end}")
    out += "".join(_pa(f"  * {json.dumps([c])}") for c in changes)
    return out + _pa("localhost: verifying patch updates are reflected on ConfigDB.") + _pa("localhost patch application completed.")


def apply_failed(err: GcuError, command: str) -> str:
    """apply-patch's failure: the reason twice, click's usage between (exit status 2)."""
    reason = f"Failed to apply patch on the following scopes:\n- localhost: {err}"
    return (f"Failed to apply patch due to: {reason}\n" + usage(command) + f"Error: {reason}\n")


def usage(command: str) -> str:
    """click's usage block of a failed ``config`` subcommand (ctx.fail)."""
    arg = {"apply-patch": "PATCH_FILE_PATH", "rollback": "CHECKPOINT_NAME", "checkpoint": "CHECKPOINT_NAME",
           "delete-checkpoint": "CHECKPOINT_NAME"}.get(command, "")
    return f"Usage: config {command} [OPTIONS] {arg}\nTry \"config {command} -h\" for help.\n\n"


def rollbacker(lines: list[str]) -> str:
    return "".join(f"Config Rollbacker: {ln}\n" for ln in lines)


def checkpoint_text(name: str) -> str:
    return rollbacker(["Config checkpoint starting.", f"Checkpoint name: {name}.", "Getting current config db.",
                       "Getting checkpoint full-path.", "Ensuring checkpoint directory exist.",
                       f"Saving config db content to /etc/sonic/checkpoints/{name}.cp.json.",
                       "Config checkpoint completed."]) + "Checkpoint created successfully.\n"


def list_checkpoints(names: dict[str, float], times: bool) -> str:
    """``config list-checkpoints [-t]``: a JSON array (indent 4) of names, or of ``{name, time}``."""
    items = sorted(names)
    if times:
        return json.dumps([{"name": n, "time": _iso(names[n])} for n in items], indent=4) + "\n"
    return json.dumps(items, indent=4) + "\n"


def _iso(stamp: float) -> str:
    """ISO 8601 with microseconds in UTC (``2025-03-11T09:20:41.118264+00:00``)."""
    return datetime.fromtimestamp(stamp, timezone.utc).isoformat(timespec="microseconds")


def replacer_head(name: str, length: int) -> str:
    """Rollback's lines up to the nested Patch Applier."""
    return rollbacker(["Config rollbacking starting.", f"Checkpoint name: {name}.", f"Verifying '{name}' exists.",
                       "Loading checkpoint into memory.", "Replacing config using 'Config Replacer'."]) + "".join(
        f"Config Replacer: {ln}\n" for ln in ("Config replacement starting.", f"Target config length: {length}.",
                                              "Getting current config db.",
                                              "Generating patch between target config and current config db.",
                                              "Applying patch using 'Patch Applier'."))


def replacer_tail() -> str:
    return ("Config Replacer: Verifying config replacement is reflected on ConfigDB.\n"
            "Config Replacer: Config replacement completed.\n" + rollbacker(["Config rollbacking completed."])
            + "Config rolled back successfully.\n")


def no_checkpoint(name: str) -> str:
    return rollbacker(["Config rollbacking starting.", f"Checkpoint name: {name}.", f"Verifying '{name}' exists."]) + \
        "Failed to rollback config\n" + usage("rollback") + f"Error: Checkpoint '{name}' does not exist\n"


def delete_text(name: str, exists: bool) -> str:
    """``config delete-checkpoint``; a missing one: config/main.py's failure line, L for its reason."""
    head = rollbacker(["Deleting checkpoint starting.", f"Checkpoint name: {name}.", "Checking checkpoint exists."])
    if not exists:
        return head + "Failed to delete config checkpoint\n" + usage("delete-checkpoint") + \
            f"Error: Checkpoint '{name}' does not exist\n"
    return head + rollbacker(["Deleting checkpoint.", "Deleting checkpoint completed."]) + "Checkpoint deleted successfully.\n"
