"""Stand-in of ``mlnx_qos`` (Mellanox/mlnx-tools ``python/mlnx_qos``): trust, PFC, the DSCP-to-
priority map and the DCBX owner of a lab NIC, kept in ``<sysroot>/run/lab/dcb/<if>.json``.
Standard library only (it starts per call).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tuning.lab.sudo import is_privileged
from tuning.lab.sysroot import dcb_lock, dcb_path, read_json, write_json
from tuning.lab.tools.node import _fail, _sysroot


# ---- mlnx_qos (Mellanox/mlnx-tools python/mlnx_qos) ------------------------------------------

def mlnx_qos(argv: list[str]) -> int:
    """``mlnx_qos -i IF [--trust pcp|dscp] [--pfc a,b,c,d,e,f,g,h] [--dscp2prio set,D,P]``.

    Sets what it is given, then always prints the full status table (layout of
    cli/mlnx_qos__set_trust_dscp_pfc3_prints_full_status.txt). Errors print on
    stdout (the tool uses ``print``) and exit 1.
    """
    opts = _long_opts(argv, {"-i": "intf", "--interface": "intf", "--trust": "trust",
                             "-f": "pfc", "--pfc": "pfc", "--dscp2prio": "dscp2prio", "-d": "dcbx",
                             "--dcbx": "dcbx"})
    if opts is None or "intf" not in opts:
        return _fail("Usage: mlnx_qos -i <interface> [options]", 1, sys.stdout)
    root = _sysroot()
    if not (root / "sys/class/net" / opts["intf"]).is_dir():
        return _fail(f"Interface {opts['intf']} doesn't exist", 1, sys.stdout)
    denied = _qos_denied(root, opts)
    if denied:
        return _fail(denied, 1, sys.stdout)
    with dcb_lock(root):  # the lab's DCBX agent writes this state too
        state = read_json(dcb_path(root, opts["intf"]))
        error = _qos_update(state, opts)
        if error:
            return _fail(error, 1, sys.stdout)
        if {"trust", "pfc", "dscp2prio", "dcbx"} & set(opts):  # a bare query writes nothing (non-root may query)
            write_json(dcb_path(root, opts["intf"]), state)
            trust_file = root / "sys/class/net" / opts["intf"] / "qos/trust"
            if trust_file.exists():
                trust_file.write_text(state["trust"] + "\n")
    print(_qos_table(state), end="")
    return 0


def _qos_denied(root: Path, opts: dict[str, str]) -> str:
    """What mlnx_qos prints when a set is refused for lack of root, or ``""``.

    Sets go through DCB netlink (RTM_SETDCB needs CAP_NET_ADMIN: ``check_privilege`` prints
    the netlink OSError), in the tool's order pfc, dscp2prio, trust; a trust set on a node
    with ``qos/trust`` in sysfs fails to open the file (EACCES), which the tool reports as
    ``Priority trust state is not supported on your system`` (Mellanox/mlnx-tools python/mlnx_qos).
    """
    if is_privileged() or not ({"pfc", "dscp2prio", "trust", "dcbx"} & set(opts)):
        return ""
    if "trust" in opts and not ({"pfc", "dscp2prio"} & set(opts)) \
            and (root / "sys/class/net" / opts["intf"] / "qos/trust").exists():
        return "Priority trust state is not supported on your system"
    return "Netlink error: Operation not permitted (1)"


def _long_opts(argv: list[str], names: dict[str, str]) -> dict[str, str] | None:
    opts, args = {}, list(argv)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if name not in names or (not eq and not args):
            return None
        opts[names[name]] = value if eq else args.pop(0)
    return opts


def _qos_update(state: dict, opts: dict[str, str]) -> str:
    """Apply the options to ``state`` (in place); returns an error text or ``""``."""
    if "dcbx" in opts:
        if opts["dcbx"] not in ("os", "fw"):
            return "Invalid dcbx command. Refer to the help."
        state["dcbx"] = opts["dcbx"]
    if "trust" in opts:
        if opts["trust"] not in ("pcp", "dscp"):
            return "Invalid trust state command. Refer to the help."
        state["trust"] = opts["trust"]
    if "pfc" in opts:
        items = opts["pfc"].split(",")
        if len(items) != 8:
            return "pfc list must have 8 items"
        if any(i not in ("0", "1") for i in items):
            return f"Bad value for PFC: {opts['pfc']}"
        state["pfc"] = [int(i) for i in items]
    if "dscp2prio" in opts:
        verb, _, rest = opts["dscp2prio"].partition(",")
        dscp, _, prio = rest.partition(",")
        if verb not in ("set", "del") or not (dscp.isdigit() and prio.isdigit()) \
                or int(dscp) > 63 or int(prio) > 7:
            return "Invalid dscp2prio command. Refer to the help."
        state["dscp2prio"][int(dscp)] = int(prio) if verb == "set" else int(dscp) // 8
    return ""


def _qos_table(state: dict) -> str:
    mode = "Firmware controlled" if state.get("dcbx") == "fw" else "OS controlled"
    lines = [f"DCBX mode: {mode}", f"Priority trust state: {state['trust']}"]
    if state["trust"] == "dscp":
        lines.append("dscp2prio mapping:")
        for prio in range(8):
            dscps = [d for d in range(63, -1, -1) if state["dscp2prio"][d] == prio]
            if dscps:
                lines.append(f"\tprio:{prio} dscp:" + "".join(f"{d:02d}," for d in dscps))
        lines.append("default priority:")
    lines += ["Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,total_size=1027584",
              "Cable len: 7", "PFC configuration:",
              "\tpriority    " + "   ".join(str(p) for p in range(8)),
              "\tenabled     " + "".join(f"{v}   " for v in state["pfc"]),
              "\tbuffer      " + "".join(f"{v}   " for v in state["pfc"])]
    prio_tc = [1, 0, 2, 3, 4, 5, 6, 7]  # mlx5 default: priority 0 -> tc 1, priority 1 -> tc 0
    for tc in dict.fromkeys(prio_tc):  # first-seen order, as Python 3 mlnx_qos prints it
        lines.append(f"tc: {tc} ratelimit: unlimited, tsa: vendor")
        lines += [f"\t priority:  {p}" for p in range(8) if prio_tc[p] == tc]
    return "\n".join(lines) + "\n"
