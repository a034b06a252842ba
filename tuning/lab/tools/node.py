"""Stand-ins of the node tools fabtune runs by name: ip, sysctl, cma_roce_tos,
ibdev2netdev, show_gids.

Each function takes the argument list (without the tool name), works on the sysroot
named by ``$FABTUNE_LAB_SYSROOT`` and returns the exit status. Output and error
texts are those of the real tools as recorded in ``shared/cases/cli/`` (iproute2,
procps-ng sysctl, Mellanox/mlnx-tools ``mlnx_qos``, ``cma_roce_tos``,
``ibdev2netdev``, ``show_gids``). Standard library only: these start per call.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tuning.lab.sudo import is_privileged
from tuning.lab.sysroot import (populate_rdma_cm, populated_gid_indices, rdma_cm_path, sysctl_path, sysctl_store,
                                 write_json)

MLX5_MIN_MTU, MLX5_MAX_MTU = 68, 9978
IP_DETAILS = ("promiscuity 0 allmulti 0 minmtu 68 maxmtu 9978 addrgenmode eui64 numtxqueues 760 "
              "numrxqueues 63 gso_max_size 65536 gso_max_segs 65535 tso_max_size 524280 "
              "tso_max_segs 65535 gro_max_size 65536 gso_ipv4_max_size 65536 "
              "gro_ipv4_max_size 65536 portname p0 switchid 307c5b0003a1420c parentbus pci parentdev ")


def _sysroot() -> Path:
    root = os.environ.get("FABTUNE_LAB_SYSROOT")
    if not root:
        print("fabtune lab: FABTUNE_LAB_SYSROOT is not set", file=sys.stderr)
        raise SystemExit(127)
    return Path(root)


def _fail(message: str, rc: int, stream=sys.stderr) -> int:
    print(message, file=stream)
    return rc


def _read(path: Path) -> str:
    return path.read_text().rstrip("\n")


# ---- ip (iproute2) --------------------------------------------------------------------------

def ip(argv: list[str]) -> int:
    """``ip [-d] link set [dev] IF mtu N|up|down`` and ``ip [-d] link show [dev IF]``.

    MTU outside the mlx5 range 68..9978 fails like the kernel's extack: stderr
    ``Error: mtu greater than device maximum.`` (or ``less than device minimum``), exit 2.
    """
    args, details = list(argv), False
    while args and args[0].startswith("-"):
        opt = args.pop(0)
        if opt not in ("-d", "-details"):
            return _fail(f'Option "{opt}" is unknown, try "ip -help".', 255)
        details = True
    if not args or args[0] != "link":
        return _fail(f'Object "{args[0] if args else ""}" is unknown, try "ip help".', 255)
    verb = args[1] if len(args) > 1 else "show"
    if verb == "set":
        return _ip_link_set(_sysroot(), args[2:])
    if verb in ("show", "list", "ls"):
        return _ip_link_show(_sysroot(), args[2:], details)
    return _fail(f'Command "{verb}" is unknown, try "ip link help".', 255)


def _ip_link_set(root: Path, args: list[str]) -> int:
    if args and args[0] == "dev":
        args = args[1:]
    if not args:
        return _fail('Not enough information: "dev" argument is required.', 255)
    ifname, rest, mtu, state = args[0], args[1:], None, None
    while rest:
        word = rest.pop(0)
        if word == "mtu" and rest:
            value = rest.pop(0)
            if not value.isdigit():
                return _fail(f'Error: argument "{value}" is wrong: Invalid "mtu" value', 255)
            mtu = int(value)
        elif word in ("up", "down"):
            state = word
        else:
            return _fail(f'Error: either "dev" is duplicate, or "{word}" is a garbage.', 255)
    net = root / "sys/class/net" / ifname
    if not net.is_dir():
        return _fail(f'Cannot find device "{ifname}"', 1)
    if not is_privileged():  # RTM_NEWLINK needs CAP_NET_ADMIN; iproute2 prints the errno
        return _fail("RTNETLINK answers: Operation not permitted", 2)
    if mtu is not None and mtu > MLX5_MAX_MTU:
        return _fail("Error: mtu greater than device maximum.", 2)
    if mtu is not None and mtu < MLX5_MIN_MTU:
        return _fail("Error: mtu less than device minimum.", 2)
    if mtu is not None:
        (net / "mtu").write_text(f"{mtu}\n")
    if state is not None:
        (net / "operstate").write_text(f"{state}\n")
    return 0


def _ip_link_show(root: Path, args: list[str], details: bool) -> int:
    if args and args[0] == "dev":
        args = args[1:]
    nets = root / "sys/class/net"
    names = [args[0]] if args else sorted(os.listdir(nets), key=lambda n: int(_read(nets / n / "ifindex")))
    for name in names:
        net = nets / name
        if not net.is_dir():
            return _fail(f'Device "{name}" does not exist.', 1)
        up = _read(net / "operstate") == "up"
        flags = "BROADCAST,MULTICAST,UP,LOWER_UP" if up else "BROADCAST,MULTICAST"
        print(f"{_read(net / 'ifindex')}: {name}: <{flags}> mtu {_read(net / 'mtu')} qdisc mq state "
              f"{'UP' if up else 'DOWN'} mode DEFAULT group default qlen 1000")
        extra = " " + IP_DETAILS + os.path.basename(os.readlink(net / "device")) if details else ""
        print(f"    link/ether {_read(net / 'address')} brd ff:ff:ff:ff:ff:ff{extra}")
    return 0


# ---- sysctl (procps-ng) ---------------------------------------------------------------------

def sysctl(argv: list[str]) -> int:
    """``sysctl [-n] [-q] [-e] [-w] KEY[=VALUE]...``, ``sysctl -p [FILE]``, ``sysctl --system``.

    A write echoes ``key = value`` (unless ``-q``); ``-n`` prints values only. Unknown
    key: ``sysctl: cannot stat /proc/sys/<path>: No such file or directory``, exit 1. A value the
    kernel's handler refuses (``tuning.lab.sysroot.SYSCTLS``): ``sysctl: setting key "KEY": <strerror>``
    (``Invalid argument``; an unknown congestion control ``No such file or directory``), exit 1.
    """
    root, flags, ops, files = _sysroot(), set(), [], []
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-p", "--load"):
            files.append(args.pop(0) if args and "=" not in args[0] and not args[0].startswith("-") else "/etc/sysctl.conf")
        elif arg.startswith("-p") and not arg.startswith("--"):
            files.append(arg[2:])
        elif arg == "--system":
            files.extend(f"/etc/sysctl.d/{p.name}" for p in sorted((root / "etc/sysctl.d").glob("*.conf")))
            flags.add("announce")
        elif arg.startswith("--"):
            flags.add({"--write": "w", "--values": "n", "--quiet": "q", "--ignore": "e"}.get(arg, arg))
        elif arg.startswith("-"):
            flags.update(arg[1:])
        else:
            ops.append(arg)
    rc = 0
    for op in ops:
        rc |= _sysctl_one(root, op, flags)
    for name in files:
        rc |= _sysctl_file(root, name, flags)
    return rc


def _sysctl_one(root: Path, op: str, flags: set) -> int:
    key, eq, value = op.partition("=")
    key = key.strip().replace("/", ".")
    path = sysctl_path(root, key)
    if not path.is_file():
        if "e" in flags:
            return 0
        return _fail(f"sysctl: cannot stat /proc/sys/{key.replace('.', '/')}: No such file or directory", 1)
    if not eq:
        print(_read(path) if "n" in flags else f"{key} = {_read(path)}")
        return 0
    if not os.access(path, os.W_OK):
        return _fail(f"sysctl: permission denied on key '{key}'", 1)
    err, stored = sysctl_store(root, key, value.strip() + "\n")  # procps writes "%s\n"
    if err == "Permission denied":  # fopen fails (EACCES): procps-ng 3.x's text
        return _fail(f"sysctl: permission denied on key '{key}'", 1)
    if err:  # the write fails: xwarn, "setting key" and strerror
        return _fail(f'sysctl: setting key "{key}": {err}', 1)
    path.write_text(stored)
    if "q" not in flags:
        print(value.strip() if "n" in flags else f"{key} = {value.strip()}")
    return 0


def _sysctl_file(root: Path, name: str, flags: set) -> int:
    path = Path(name)
    if path.is_absolute() and not path.exists():
        path = root / name.lstrip("/")
    if "announce" in flags:
        print(f"* Applying {name} ...")
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return _fail(f'sysctl: cannot open "{name}": No such file or directory', 1)
    rc = 0
    for line in lines:
        line = line.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        rc |= _sysctl_one(root, line.lstrip("-"), flags | ({"e"} if line.startswith("-") else set()))
    return rc


# ---- cma_roce_tos (Mellanox/mlnx-tools sbin/cma_roce_tos, configfs rdma_cm) ----------------

def cma_roce_tos(argv: list[str]) -> int:
    """``cma_roce_tos -d DEV [-p PORT] [-t TOS]``: set and/or print RDMA-CM's default RoCE ToS.

    Like the script, it creates ``sys/kernel/config/rdma_cm/<dev>`` if missing (the
    lab's "kernel" fills ``ports/<p>/default_roce_{mode,tos}`` from the persisted
    values), prints the ToS, and removes the group again only if it created it; a bad
    port exits 1 and leaves the group behind.
    """
    opts: dict[str, str] = {"-p": "1"}
    args = list(argv)
    while args:
        flag = args.pop(0)
        if flag[:2] not in ("-d", "-p", "-t") or (len(flag) == 2 and not args):
            return _fail("Usage: cma_roce_tos -d <ib_device> [-p <port>] [-t <tos>]", 1, sys.stdout)
        opts[flag[:2]] = flag[2:] or args.pop(0)
    if "-d" not in opts:
        return _fail("Usage: cma_roce_tos -d <ib_device> [-p <port>] [-t <tos>]", 1, sys.stdout)
    if not is_privileged():  # the script's `id -u` check, before it touches configfs
        return _fail("You must be root to run this", 1, sys.stdout)
    root, dev, port = _sysroot(), opts["-d"], opts["-p"]
    group = root / "sys/kernel/config/rdma_cm" / dev
    created = not group.is_dir()
    if created and not populate_rdma_cm(root, dev):
        return _fail(f"Failed to create configuration for {dev}", 1, sys.stdout)
    tos_file = group / "ports" / port / "default_roce_tos"
    if not tos_file.parent.is_dir():
        return _fail(f"Device {dev} port {port} does not exist", 1, sys.stdout)
    if "-t" in opts:
        if not opts["-t"].isdigit() or int(opts["-t"]) > 255:
            return _fail(f"{tos_file.name}: echo: write error: Invalid argument", 1)
        tos_file.write_text(f"{int(opts['-t'])}\n")
    print(_read(tos_file))
    save_rdma_cm(root, dev)
    if created:
        _rmtree(group)
    return 0


def _rmtree(folder: Path) -> None:
    """``rmdir`` of a configfs group (its attribute files go with it); no shutil: start-up cost."""
    for parent, dirs, files in os.walk(folder, topdown=False):
        for name in files:
            os.unlink(os.path.join(parent, name))
        for name in dirs:
            os.rmdir(os.path.join(parent, name))
    os.rmdir(folder)


def save_rdma_cm(root: Path, dev: str) -> None:
    """Persist port 1's configfs values (they outlive the group, as in the kernel)."""
    port = root / "sys/kernel/config/rdma_cm" / dev / "ports/1"
    values = {"default_roce_mode": _read(port / "default_roce_mode"),
              "default_roce_tos": int(_read(port / "default_roce_tos"))}
    write_json(rdma_cm_path(root, dev), values)


# ---- ibdev2netdev and show_gids (Mellanox/mlnx-tools) ---------------------------------------

def _ib_devices(root: Path) -> list[str]:
    return sorted(os.listdir(root / "sys/class/infiniband"))  # shell glob order: lexical


def ibdev2netdev(argv: list[str]) -> int:
    """``ibdev2netdev``: ``mlx5_N port P ==> netdev (Up|Down)``, devices in lexical order."""
    root = _sysroot()
    for dev in _ib_devices(root):
        ib = root / "sys/class/infiniband" / dev
        for port in sorted(os.listdir(ib / "ports")):
            for netdev in sorted(os.listdir(ib / "device/net")):
                state = "Up" if _read(root / "sys/class/net" / netdev / "operstate") == "up" else "Down"
                print(f"{dev} port {port} ==> {netdev} ({state})")
    return 0


def show_gids(argv: list[str]) -> int:
    """``show_gids [DEV [PORT]]``: the populated GIDs, tab-separated, footer ``n_gids_found=N``.

    Skips all-zero and bare ``fe80::`` entries; IPv4-mapped rows carry ``<ip>  \\t``.
    """
    root = _sysroot()
    devs = argv[:1] or _ib_devices(root)
    print("DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV")
    print("---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---")
    found = 0
    for dev in devs:
        ports = root / "sys/class/infiniband" / dev / "ports"
        for port in argv[1:2] or sorted(os.listdir(ports)):
            for index in _gid_indices(ports / port):
                row = _gid_row(ports / port, index)
                if row is not None:
                    print(f"{dev}\t{port}\t{index}\t{row}")
                    found += 1
    print(f"n_gids_found={found}")
    return 0


def _gid_indices(port: Path) -> list[str]:
    """Indices worth reading, in ``ls`` (lexical) order as the script walks ``gids/``.

    An empty entry's ``gid_attrs/types/N`` reads EINVAL (the lab's is a link that does,
    :data:`tuning.lab.sysroot.GID_EMPTY_ATTR`), and only populated entries hold a non-zero GID;
    this skips ~250 reads per port.
    """
    return populated_gid_indices(port)


def _gid_row(port: Path, index: str) -> str | None:
    gid = _read(port / "gids" / index)
    if gid in ("0000:0000:0000:0000:0000:0000:0000:0000", "fe80:0000:0000:0000:0000:0000:0000:0000"):
        return None
    attrs = port / "gid_attrs"
    ndev = _read(attrs / "ndevs" / index) if (attrs / "ndevs" / index).exists() else ""
    kind = _read(attrs / "types" / index) if (attrs / "types" / index).exists() else ""
    ver = kind[kind.lower().find("v"):] if "v" in kind.lower() else ""
    if gid.startswith("0000"):
        ipv4 = ".".join(str(int(h, 16)) for h in (gid[30:32], gid[32:34], gid[35:37], gid[37:39]))
        return f"{gid}\t{ipv4}  \t{ver}\t{ndev}"
    return f"{gid}\t\t\t{ver}\t{ndev}"
