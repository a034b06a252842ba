"""Stand-ins of the NVIDIA firmware tools (MFT / mstflint) on a lab node: ``mlxconfig``, ``mlxfwmanager``
and ``mlxfwreset``, over the NIC flash of :mod:`tuning.lab.hw_nic` (``<sysroot>/hw/nic/<bdf>.json``).

Texts and layouts (confidence H = from the tool's source or a recorded transcript, M = source read
but flow simplified, L = invented by analogy):

- ``mlxconfig``: mstflint ``mlxconfig/mlxcfg_ui.cpp`` of the narrow-layout era (MFT 4.1x-4.20,
  ``printOpening`` ``%-16s%-16s``, ``printConfHeader`` ``%-16s%36s%16s%18s`` / ``%-16s%38s`` plus
  ``       New``, ``printSingleParam`` ``*        %-36s``), values as the shared/cases sample prints
  them (``%-15s`` and a space) (H). Errors are printed on stdout as ``-E- <text>``: ``Unknown
  Parameter: X`` (``mlxcfg_db_manager.cpp``), ``The Device doesn't support X parameter``
  (``mlxcfg_generic_commander.cpp``), ``Unknown value X`` (enum, ``mlxcfg_param.cpp``), ``The value X is
  not valid,  as its size is N bits`` and ``Cannot parse the value`` (integers), ``Failed to open the
  device`` (``mlxcfg_commander.cpp``: also what a non-root caller gets, the config space cannot be
  opened), ``Aborted by user.`` (H); ``Parameter NUM_OF_VFS' value is larger than maximum allowed
  127`` after ``Applying... Failed!`` (a recorded ConnectX-4 Lx transcript quoted in a public test) (M).
  Exit status: 0, 2 (aborted), 3 (error) (``mlxCfgStatus``) (H). Argument errors print the ``-E-``
  line without the usage text that follows it on the real tool (M).
- ``mlxfwmanager``: ``--query`` layout of shared/cases ``mlxfwmanager__query_two_devices...`` (H);
  ``-u`` flow after mstflint ``mlxfwupdate/mlxfwmanager.cpp`` (status words, ``Found N device(s)
  requiring firmware update...``, ``Restart needed for updates to take effect.``) without the
  progress percentages and backspaces (M). Lab images: a file in the ``-D`` folder (or ``-i``)
  whose first line is ``LABFW <PSID> <version>`` (a real image is binary; MFT reads the same two
  facts from it). Non-root (``MlnxDev::query``: ``User is Not Root``): each device's block with
  ``Status:           Failed to open device`` on stdout; ``-u`` adds ``---------`` and ``-E- Failed
  to query <dev> device, error : User is Not Root`` on stderr (``--query`` returns before printing
  them); exit 1 (``ERR_CODE_QUERY_FAILED``) (H for the texts, M for the empty fields).
- ``mlxfwreset``: a recorded ``mlxfwreset -y -d 0000:04:00.0 reset`` transcript (talos docs) and
  mstflint ``small_utils/mstfwreset.py`` (``AskUser``, ``-E- Only root user can run this tool.``,
  ``-E- Aborted by user``) (H/M).
Standard library only (they start per call).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tuning.lab import hw_nic
from tuning.lab.sudo import is_privileged
from tuning.lab.tools.node import _sysroot

MLX_OK, MLX_ABORTED, MLX_ERROR = 0, 2, 3
FOOTER = "The '*' shows parameters with next value different from default/current value."


def _resolve(root: Path, dev: str) -> str | None:
    """The NIC's full BDF for ``-d`` given as ``0000:0c:00.0`` or ``0c:00.0``; None if no such NIC."""
    full = dev if dev.count(":") == 2 else f"0000:{dev}"
    return full if hw_nic.nic_path(root, full).is_file() else None


def _opening(index: int, nic: dict, dev: str) -> str:
    """``printOpening`` then the blank line ``queryDevCfg`` prints."""
    rows = [("Device type:", nic["device_type"]), ("Name:", nic["name"]),
            ("Description:", nic["description"]), ("Device:", dev)]
    return (f"\nDevice #{index}:\n----------\n\n" + "".join(f"{k:<16}{v:<16}\n" for k, v in rows) + "\n")


def _header(verbose: bool, new: bool) -> str:
    head = (f"{'Configurations:':<16}{'Default':>36}{'Current':>16}{'Next Boot':>18}" if verbose
            else f"{'Configurations:':<16}{'Next Boot':>38}")
    return head + ("       New" if new else "") + "\n"


def _row(name: str, p: dict, verbose: bool, new: str | None = None) -> tuple[str, bool]:
    """One table row (and whether it is starred: Next Boot differs from Default or Current)."""
    star = verbose and (p["next_boot"] != p["default"] or p["next_boot"] != p["current"])
    cols = ([hw_nic.show(name, p["default"]), hw_nic.show(name, p["current"])] if verbose else [])
    cols.append(hw_nic.show(name, p["next_boot"]))
    if new is not None:
        cols.append(new)
    return ("*" if star else " ") + f"        {name:<36}" + "".join(f"{v:<15} " for v in cols) + "\n", star


def _parse_value(name: str, text: str) -> tuple[int | None, str]:
    """``(value, "")`` or ``(None, the -E- text)`` for ``NAME=text`` (mstflint ``parseValue``)."""
    kind = hw_nic.PARAMS[name]
    if kind[0] == "enum":
        if text.isdigit() and int(text) in kind[1].values():
            return int(text), ""
        for label, value in kind[1].items():
            if label.lower() == text.lower():
                return value, ""
        return None, f"Unknown value {text}"
    try:
        value = int(text, 0)
    except ValueError:
        return None, "Cannot parse the value"
    if value >= 1 << kind[1] or value < 0:
        return None, f"The value {text} is not valid,  as its size is {kind[1]} bits"
    return value, ""


def _param_error(name: str) -> str:
    if name in hw_nic.UNSUPPORTED:
        return f"The Device doesn't support {name} parameter"
    return f"Unknown Parameter: {name}"


def mlxconfig(argv: list[str]) -> int:
    """``mlxconfig [-d DEV] [-e] [-y] q|query [PARAM...]`` and ``mlxconfig -d DEV [-e] [-y] s|set P=V...``.

    A set changes Next Boot only, and prints ``-I- Please reboot machine to load new configurations.``
    whether or not a value changed (as the real tool). Without ``-y`` it reads the answer from stdin.
    """
    opts, args = {"dev": "", "verbose": False, "yes": False}, list(argv)
    cmd = None
    while args:
        arg = args.pop(0)
        if arg in ("-d", "--dev"):
            if not args:
                return _err("missing device name")
            opts["dev"] = args.pop(0)
        elif arg in ("-e", "--enable_verbosity"):
            opts["verbose"] = True
        elif arg in ("-y", "--yes"):
            opts["yes"] = True
        elif arg in ("-b", "--db"):
            args.pop(0) if args else None
        elif arg in ("q", "query", "s", "set"):
            cmd = "set" if arg in ("s", "set") else "query"
            break
        else:
            return _err(f"invalid argument: {arg}")
    if cmd is None:
        return _err("No command found. For more information please read the help message:")
    if cmd == "set":
        if not args:
            return _err("missing configuration arguments. For more information please run mlxconfig -h|--help.")
        if not opts["dev"]:
            return _err("set command expects device to be specified.")
        return _set(_sysroot(), opts, args)
    return _query(_sysroot(), opts, args)


def _err(text: str, rc: int = MLX_ERROR, prefix: str = "") -> int:
    sys.stdout.write(f"{prefix}-E- {text}\n")
    return rc


def _query(root: Path, opts: dict, names: list[str]) -> int:
    if opts["dev"]:
        bdf = _resolve(root, opts["dev"]) if is_privileged() else None
        if bdf is None:
            return _err("Failed to open the device")
        targets = [(bdf, opts["dev"])]
    else:
        if not is_privileged():
            return _err("No devices found, mst might be stopped. You may need to run 'mst start' to load MST modules. ")
        targets = [(b, b) for b in hw_nic.bdfs(root)]
    rc = MLX_OK
    for index, (bdf, dev) in enumerate(targets, 1):
        nic = hw_nic.load(root, bdf)
        out = _opening(index, nic, dev) + _header(opts["verbose"], False)
        bad = next((n for n in names if n not in nic["params"]), None)
        if bad is not None:
            sys.stdout.write(out)
            rc = _err(_param_error(bad))
            continue
        starred = False
        for name in names or [p for p in hw_nic.PARAMS if p in nic["params"]]:
            row, star = _row(name, nic["params"][name], opts["verbose"])
            out, starred = out + row, starred or star
        sys.stdout.write(out + (FOOTER + "\n" if starred else ""))
    return rc


def _set(root: Path, opts: dict, pairs: list[str]) -> int:
    wanted: dict[str, str] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not name or not value:
            return _err(f"Invalid Configuration argument {pair}")
        if name in wanted:
            return _err(f"Duplicate parameter, {name}.")
        wanted[name] = value
    bdf = _resolve(root, opts["dev"]) if is_privileged() else None
    if bdf is None:
        return _err("Failed to open the device")
    with hw_nic.locked(root):
        nic = hw_nic.load(root, bdf)
        out = _opening(1, nic, opts["dev"]) + _header(opts["verbose"], True)
        values = {}
        for name, text in wanted.items():
            if name not in nic["params"]:
                sys.stdout.write(out)
                return _err(_param_error(name))
            value, problem = _parse_value(name, text)
            if value is None:
                sys.stdout.write(out)
                return _err(problem)
            values[name] = value
        for name, value in values.items():
            out += _row(name, nic["params"][name], opts["verbose"], hw_nic.show(name, value))[0]
        out += "\n Apply new Configuration? (y/n) [n] : "
        if opts["yes"]:
            out += "y\n"
        else:
            sys.stdout.write(out)
            sys.stdout.flush()
            answer, out = sys.stdin.readline().strip(), ""
            if answer.lower() not in ("y", "yes"):
                return _err("Aborted by user.", MLX_ABORTED)
        out += "Applying... "
        for name, value in values.items():
            limit = hw_nic.PARAMS[name][2] if hw_nic.PARAMS[name][0] == "uint" else None
            if limit is not None and value > limit:
                sys.stdout.write(out + "Failed!\n")
                return _err(f"Parameter {name}' value is larger than maximum allowed {limit}")
        for name, value in values.items():
            nic["params"][name]["next_boot"] = value
        hw_nic.save(root, nic)
    sys.stdout.write(out + "Done!\n-I- Please reboot machine to load new configurations.\n")
    return MLX_OK


# ---- mlxfwmanager ------------------------------------------------------------------------------

def _image(root: Path, folder: str | None, file: str | None, psid: str) -> tuple[str | None, int]:
    """(version of the lab image for ``psid``, how many matched) in ``-D folder`` or ``-i file``."""
    paths = [Path(file)] if file else sorted(Path(folder).glob("*")) if folder and Path(folder).is_dir() else []
    found = []
    for path in paths:
        try:
            head = path.read_text(errors="replace").split("\n", 1)[0].split()
        except OSError:
            continue
        if len(head) == 3 and head[0] == "LABFW" and head[1] == psid:
            found.append(head[2])
    return (found[0] if len(found) == 1 else None), len(found)


def _newer(a: str, b: str) -> bool:
    """Whether firmware version ``a`` is newer than ``b`` (``28.42.1000`` > ``28.39.2048``)."""
    return [int(x) for x in a.split(".")] > [int(x) for x in b.split(".")]


def _fw_block(index: int, nic: dict, dev: str, avail: str | None, status: str) -> str:
    mac = nic["mac"]
    guid = mac[:6] + "0300" + mac[6:]
    rows = [("Device Type:", nic["device_type"]), ("Part Number:", nic["name"]),
            ("Description:", nic["description"]), ("PSID:", nic["psid"]), ("PCI Device Name:", dev),
            ("Base GUID:", guid), ("Base MAC:", mac)]
    return (f"Device #{index}:\n----------\n\n" + "".join(f"  {k:<18}{v}\n" for k, v in rows)
            + f"  {'Versions:':<18}{'Current':<14} {'Available':<14}\n"
            + f"     {'FW':<15}{nic['fw']['flash']:<14} {avail or 'N/A':<14}\n"
            + f"\n  {'Status:':<18}{status}\n\n")


def mlxfwmanager(argv: list[str]) -> int:
    """``mlxfwmanager --query [-d DEV] [-D DIR | -i FILE]`` and ``mlxfwmanager -u [-f] [-y] -d DEV
    (-D DIR | -i FILE)``. An update writes the flash; the new version runs after a reset or reboot."""
    opts: dict = {"query": False, "update": False, "force": False, "yes": False, "dev": None, "dir": None, "img": None}
    args = list(argv)
    while args:
        arg = args.pop(0)
        flag = {"--query": "query", "-u": "update", "--update": "update", "-f": "force", "--force": "force",
                "-y": "yes", "--yes": "yes"}.get(arg)
        value = {"-d": "dev", "--dev": "dev", "-D": "dir", "--image-dir": "dir", "-i": "img",
                 "--image-file": "img"}.get(arg)
        if flag:
            opts[flag] = True
        elif value and args:
            opts[value] = args.pop(0)
        else:
            print(f"-E- Unknown option: {arg}", file=sys.stderr)
            return 1
    root = _sysroot()
    print("Querying Mellanox devices firmware ...\n")
    if opts["dev"]:
        bdf = _resolve(root, opts["dev"])
        if bdf is None:
            print(f"-E- Failed to query {opts['dev']} device, error : No such device", file=sys.stderr)
            return 1
        targets = [(bdf, opts["dev"])]
    else:
        targets = [(b, b) for b in hw_nic.bdfs(root)]
    if not is_privileged():
        return _fw_not_root(opts, targets)
    return _fw_run(root, opts, targets)


def _fw_not_root(opts: dict, targets: list[tuple[str, str]]) -> int:
    """What mstflint prints for a caller who is not root (``MlnxDev::query``: ``User is Not Root``):
    a block per device that could not be opened (``printDeviceInfoQuery`` of a device whose query
    failed: type ``N/A``, no PSID, no port addresses, version ``--``, status ``Failed to open
    device``), then, for ``-u`` only, ``---------`` and ``-E- Failed to query DEV device, error : User
    is Not Root`` per device on stderr (``checkAndDisplayDeviceQuery1D`` returns before printing its
    error lines when it queries); exit 1 (``ERR_CODE_QUERY_FAILED``)."""
    out = ""
    for index, (_, dev) in enumerate(targets, 1):
        rows = [("Device Type:", "N/A"), ("Part Number:", "--"), ("Description:", ""), ("PSID:", ""),
                ("PCI Device Name:", dev), ("Port1 MAC:", ""), ("Port1 GUID:", ""), ("Port2 MAC:", ""),
                ("Port2 GUID:", "")]
        out += (f"Device #{index}:\n----------\n\n" + "".join(f"  {k:<18}{v}\n" for k, v in rows)
                + f"  {'Versions:':<18}{'Current':<14} {'Available':<14}\n"
                + f"     {'FW':<15}{'--':<14} {'':<14}\n\n  {'Status:':<18}Failed to open device\n\n")
    sys.stdout.write(out)
    if opts["update"]:
        sys.stderr.write("---------\n" + "".join(f"-E- Failed to query {dev} device, error : User is Not Root\n"
                                                for _, dev in targets))
    return 1


def _fw_run(root: Path, opts: dict, targets: list[tuple[str, str]]) -> int:
    todo: list[tuple[int, str, str]] = []
    skipped: dict[int, str] = {}
    for index, (bdf, dev) in enumerate(targets, 1):
        nic = hw_nic.load(root, bdf)
        avail, matches = _image(root, opts["dir"], opts["img"], nic["psid"])
        if matches > 1:
            status = "Multiple image files found"
        elif avail is None:
            status = "No matching image found"
        elif opts["force"] and opts["update"]:
            status = "Forced update required"
        else:
            status = "Update required" if _newer(avail, nic["fw"]["flash"]) else "Up to date"
        sys.stdout.write(_fw_block(index, nic, dev, avail, status))
        if status in ("Update required", "Forced update required"):
            todo.append((index, bdf, avail or ""))
        else:
            skipped[index] = "Up to date" if status == "Up to date" else "Error - no matching image found"
    errors = sum(1 for s in skipped.values() if s.startswith("Error"))
    if not opts["update"] or (not todo and not errors):
        return 0
    if todo:
        print(f"---------\nFound {len(todo)} device(s) requiring firmware update...\n")
        if not opts["force"]:
            sys.stdout.write("Perform FW update? [y/N]: ")
            sys.stdout.flush()
            if not opts["yes"] and sys.stdin.readline().strip().lower() not in ("y", "yes"):
                print("No updates performed")
                return 0
            print("y" if opts["yes"] else "")
    for index in range(1, len(targets) + 1):
        if index in skipped:
            print(f"Device #{index}: {skipped[index]}")
            continue
        _, bdf, version = next(t for t in todo if t[0] == index)
        with hw_nic.locked(root):
            nic = hw_nic.load(root, bdf)
            nic["fw"]["flash"] = version
            hw_nic.save(root, nic)
        print("Updating FW ...     \nDone" if len(targets) == 1 else f"Device #{index}: Updating FW ...     \nDone")
    if todo:
        print("\nRestart needed for updates to take effect.")
    if errors:
        print("-E- One or more errors were encountered.", file=sys.stderr)
        return 255
    return 0


# ---- mlxfwreset --------------------------------------------------------------------------------

def mlxfwreset(argv: list[str]) -> int:
    """``mlxfwreset -d DEV [-y] [-l 3] r|reset``: the NIC loads its Next Boot configuration and its
    flashed firmware (parameters in the lab fault ``needs_power_cycle`` stay pending)."""
    if not is_privileged():
        print("-E- Only root user can run this tool.")
        return 1
    dev, yes, cmd, args = None, False, None, list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-d", "--device") and args:
            dev = args.pop(0)
        elif arg in ("-y", "--yes"):
            yes = True
        elif arg in ("-l", "--level") and args:
            args.pop(0)
        elif arg in ("r", "reset", "q", "query"):
            cmd = "reset" if arg in ("r", "reset") else "query"
        else:
            print(f"mlxfwreset: error: unrecognized arguments: {arg}", file=sys.stderr)
            return 2
    if dev is None or cmd is None:
        print("mlxfwreset: error: the following arguments are required: --device/-d, command", file=sys.stderr)
        return 2
    root = _sysroot()
    bdf = _resolve(root, dev)
    if bdf is None:
        print(f"-E- Device {dev} doesn't exist")
        return 1
    short = bdf[5:] if bdf.startswith("0000:") else bdf
    sys.stdout.write(f"\nMinimal reset level for device, {short}:\n\n3: Driver restart and PCI reset\n")
    if cmd == "query":
        return 0
    sys.stdout.write("Continue with reset?[y/N] ")
    if yes:
        sys.stdout.write("y\n")
    else:
        sys.stdout.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            print("-E- Aborted by user")
            return 1
    hw_nic.reset(root, bdf)
    for step, result in (("Sending Reset Command To Fw", "Done"), ("Stopping Driver", "Done"),
                         ("Resetting PCI", "Done"), ("Starting Driver", "Done"), ("Restarting MST", "Skipped")):
        sys.stdout.write(f"-I- {step:<40}-{result}\n")
    sys.stdout.write("-I- FW was loaded successfully.\n")
    return 0
