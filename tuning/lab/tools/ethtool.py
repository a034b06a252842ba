"""Stand-in of ``ethtool`` (6.x, netlink) on a lab node: link-level (802.3x global) pause only. Stdlib only.

- ``ethtool -a|--show-pause IF``: ``Pause parameters for IF:``, ``Autonegotiate:\\t<on|off>``,
  ``RX:\\t\\t<on|off>``, ``TX:\\t\\t<on|off>`` and a blank line (ethtool ``netlink/pause.c``
  ``pause_reply_cb``; shared/cases/cli ``ethtool_a__global_pause_formats.txt``). mlx5 has no pause
  autonegotiation, so ``RX negotiated``/``TX negotiated`` never print on a lab NIC.
- ``ethtool -A|--pause IF [autoneg on|off] [rx on|off] [tx on|off]``: silent on success. Without
  CAP_NET_ADMIN the kernel refuses ETHTOOL_MSG_PAUSE_SET (genetlink ``GENL_UNS_ADMIN_PERM``) and
  ethtool prints ``netlink error: Operation not permitted`` (``perror`` in ``nlsock_process_ack``) and
  exits 76 (``nl_spause``: ``nlctx->exit_code ?: 76``), whatever the device name (the permission is
  checked before the request's header is parsed). ``autoneg on`` is refused by mlx5
  (``mlx5e_ethtool_set_pauseparam`` returns -EINVAL): ``netlink error: Invalid argument``, exit 76.
  The ioctl-era texts (``Cannot set device pause parameters: ...``, exit 81) are not what a current
  ethtool prints on a kernel with ethtool netlink (5.6+).
- An unknown interface: ``netlink error: no device matches name (offset 24)`` and
  ``netlink error: No such device``, exit 1 (M: the extack text is the kernel's, the offset inferred).
- ``ethtool -S|--statistics IF``: ``NIC statistics:`` then one ``     name: value`` line per counter
  (5 spaces, ethtool ``ioctl.c`` ``dump_stats``) in mlx5's order (:data:`tuning.lab.counters.
  ETHTOOL_COUNTERS`, the names of shared/cases ``ethtool_S__mlx5_grep_prio3_pause_discards_roce_congested.txt``
  with the ``prio0..7`` families; the PFC counters only of the priorities with PFC on, the
  ``*_global_pause*`` ones only while 802.3x pause is on, as mlx5 ``en_stats.c``
  ``mlx5e_grp_per_prio_pfc_fill_strings``); no privilege needed. The values are the lab's counters
  (``run/lab/ethtool/<if>.json``, bumped by the perftest stand-in). ``-S`` without ``--groups``
  takes the ioctl path (``do_gnicstats``): an unknown interface prints ``Cannot get stats strings
  information: No such device`` and exits 96 (M: ethtool ``ethtool.c`` as remembered).
- ``ethtool IF`` (link settings, ``netlink/settings.c``): ``Settings for IF:`` then the ConnectX-7
  port's supported and advertised modes (``100000baseCR4/Full`` .. ``400000baseCR4/Full``, the
  continuation lines aligned under the first mode as ethtool's ``dump_link_modes`` does), ``Speed:
  400000Mb/s`` from sysfs ``speed`` (``Unknown!`` and ``Duplex: Unknown! (255)`` while the link is
  down), ``Lanes``, ``Duplex``, ``Auto-negotiation``, ``Port: Direct Attach Copper``, ``PHYAD``,
  ``Transceiver`` and ``Link detected: yes|no``. The Wake-on and message-level lines (root-only ioctls
  on a real host) are left out (M: the mode list is a ConnectX-7's as remembered).
- Every other verb fails honestly: ``fabtune lab: ethtool stand-in supports -a, -A and -S only``, exit 1.

State: ``run/lab/pause/<if>.json`` ``{"autoneg": false, "rx": true, "tx": true}`` (mlx5 loads with
RX and TX pause on); it is rebuilt at every boot, as the driver's defaults are.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tuning.lab.sudo import is_privileged
from tuning.lab.tools.node import _sysroot  # the node's sysroot ($FABTUNE_LAB_SYSROOT), one helper for all stand-ins


def pause_path(root: Path, ifname: str) -> Path:
    """``run/lab/pause/<if>.json`` under a sysroot."""
    return root / "run/lab/pause" / f"{ifname}.json"


def _no_device(ifname: str) -> int:
    print("netlink error: no device matches name (offset 24)", file=sys.stderr)
    print("netlink error: No such device", file=sys.stderr)
    return 1


def _show(root: Path, ifname: str) -> int:
    path = pause_path(root, ifname)
    if not (root / "sys/class/net" / ifname).is_dir() or not path.is_file():
        return _no_device(ifname)
    st = json.loads(path.read_text())
    onoff = lambda v: "on" if v else "off"  # noqa: E731
    sys.stdout.write(f"Pause parameters for {ifname}:\nAutonegotiate:\t{onoff(st['autoneg'])}\n"
                     f"RX:\t\t{onoff(st['rx'])}\nTX:\t\t{onoff(st['tx'])}\n\n")
    return 0


def _set(root: Path, ifname: str, args: list[str]) -> int:
    want: dict[str, bool] = {}
    while args:
        name = args.pop(0)
        if name not in ("autoneg", "rx", "tx"):
            print(f"ethtool (-A): unknown parameter '{name}'", file=sys.stderr)
            return 1
        if not args:
            print(f"ethtool (-A): option '{name}' requires an argument", file=sys.stderr)
            return 1
        value = args.pop(0)
        if value not in ("on", "off"):
            print(f"ethtool (-A): invalid value '{value}' for parameter '{name}'", file=sys.stderr)
            return 1
        want[name] = value == "on"
    if not want:
        print("ethtool (-A): no parameters given", file=sys.stderr)  # M: ethtool's parser wants at least one
        return 1
    if not is_privileged():  # genetlink checks GENL_UNS_ADMIN_PERM before the header names a device
        print("netlink error: Operation not permitted", file=sys.stderr)
        return 76
    path = pause_path(root, ifname)
    if not (root / "sys/class/net" / ifname).is_dir() or not path.is_file():
        return _no_device(ifname)
    if want.get("autoneg"):
        print("netlink error: Invalid argument", file=sys.stderr)
        return 76
    st = json.loads(path.read_text())
    st.update(want)
    tmp = path.with_name(f".{ifname}.{os.getpid()}")
    tmp.write_text(json.dumps(st, sort_keys=True) + "\n")
    tmp.replace(path)
    return 0


def _stats(root: Path, ifname: str) -> int:
    from tuning.lab.counters import read_stats

    stats = read_stats(root, ifname) if (root / "sys/class/net" / ifname).is_dir() else None
    if stats is None:
        print("Cannot get stats strings information: No such device", file=sys.stderr)
        return 96
    sys.stdout.write("NIC statistics:\n" + "".join(f"     {k}: {v}\n" for k, v in stats.items()))
    return 0


#: the link modes a lab ConnectX-7 port supports (ethtool link mode names)
LINK_MODES = ("100000baseCR4/Full", "200000baseCR4/Full", "400000baseCR4/Full")


def _settings(root: Path, ifname: str) -> int:
    net = root / "sys/class/net" / ifname
    if not net.is_dir():
        print("netlink error: no device matches name (offset 24)\nnetlink error: No such device", file=sys.stderr)
        return 1
    try:
        speed = int((net / "speed").read_text().strip())
    except (OSError, ValueError):
        speed = -1
    up = speed > 0
    pad = "\n\t" + " " * 24

    def modes(label: str) -> str:
        return f"\t{label}" + " " * (24 - len(label)) + pad.join(LINK_MODES) + "\n"

    sys.stdout.write(
        f"Settings for {ifname}:\n\tSupported ports: [ Backplane ]\n" + modes("Supported link modes:")
        + "\tSupported pause frame use: Symmetric\n\tSupports auto-negotiation: Yes\n"
        "\tSupported FEC modes: Not reported\n" + modes("Advertised link modes:")
        + "\tAdvertised pause frame use: No\n\tAdvertised auto-negotiation: Yes\n"
        "\tAdvertised FEC modes: Not reported\n"
        + (f"\tSpeed: {speed}Mb/s\n\tLanes: 4\n\tDuplex: Full\n" if up else "\tSpeed: Unknown!\n\tDuplex: Unknown! (255)\n")
        + "\tAuto-negotiation: on\n\tPort: Direct Attach Copper\n\tPHYAD: 0\n\tTransceiver: internal\n"
        + f"\tLink detected: {'yes' if up else 'no'}\n")
    return 0


def ethtool(argv: list[str]) -> int:
    """``ethtool -a IF`` / ``ethtool -A IF [autoneg|rx|tx on|off]...`` / ``ethtool -S IF``
    (see the module docstring)."""
    if len(argv) >= 2 and argv[0] in ("-a", "--show-pause") and len(argv) == 2:
        return _show(_sysroot(), argv[1])
    if len(argv) >= 2 and argv[0] in ("-A", "--pause"):
        return _set(_sysroot(), argv[1], list(argv[2:]))
    if len(argv) == 2 and argv[0] in ("-S", "--statistics"):
        return _stats(_sysroot(), argv[1])
    if len(argv) == 1 and not argv[0].startswith("-"):
        return _settings(_sysroot(), argv[0])
    print("fabtune lab: ethtool stand-in supports -a|--show-pause IF, -A|--pause IF ... and -S|--statistics IF only",
          file=sys.stderr)
    return 1
