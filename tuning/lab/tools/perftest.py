"""``ib_write_bw`` and ``ib_read_lat`` stand-ins (linux-rdma/perftest) for the lab's nodes.

Arguments: the subset fabtune uses, as perftest spells them: ``-d/--ib-dev DEV``,
``-i/--ib-port PORT``, ``-x/--gid-index N``, ``-s/--size BYTES``, ``-n/--iters N``,
``-D/--duration SECS``, ``-a/--all``, ``-F/--CPU-freq``, ``--report_gbits``,
``--report-both``, ``-q/--qp N``, ``-p/--port TCP_PORT``, ``--tclass=N`` (the GRH traffic class of
the QP: the ToS byte of its RoCEv2 packets), ``-R/--rdma_cm`` and ``-T/--tos N`` (the ToS of an
RDMA-CM QP; ``-T`` without ``-R`` is refused with perftest's own line, exit 1); no address =
server, the last positional = the client's server address. The data sender's ToS (the client's
for ``ib_write_bw``, the server's for ``ib_read_lat``: it sends the read responses) is what the
fabric model judges: ``--tclass`` or ``-T`` as given, an RDMA-CM QP without ``-T`` the node's
``default_roce_tos``, a verbs QP without ``--tclass`` traffic class 0, as on a real host.

Rendezvous (the perftest out-of-band TCP exchange, port 18515 by default) goes through
files in ``<FABTUNE_LAB_DIR>/run/perftest/`` named ``<server IPv4>_<port>.<stage>.json``:
the server writes ``listen`` (node FABTUNE_LAB_NODE, the IPv4 of its ``-d`` device), the
client renames it to ``claimed`` (one client per server), computes the result with
:func:`tuning.lab.model.compute` and writes ``result``; the server waits for it (up to
10 s, polling every 20 ms), prints and removes both files.

Incast (``ib_write_bw``): at its start the client counts the servers of live processes (the
record's ``pid``) in ``listen`` or ``claimed`` on the receiver's IPv4 (k) and takes the rank
of its own port among theirs (sender i), then applies :func:`tuning.lab.model.incast` and adds
:func:`tuning.lab.model.incast_counters` to its own NIC's counters
(:func:`tuning.lab.counters.bump`); the receiver's part travels in the result and the server
adds it to its NIC's. A pair test (k = 1) moves no counter, so a verification of pairs leaves
every sysroot file as it was. With k > 1 a server keeps its files until no server on its IPv4 is
still ``listen`` (at most 10 s), so a late client still counts every sender.

Output formats, to the character (``shared/cases/``):
    client bandwidth   ``ib_write_bw__roce_client_MiBsec_new_perftest.txt`` (MiB/sec)
    client --report_gbits ``ib_write_bw__client_all_sizes_gbits_mtu1024_gid5.txt``
    server bandwidth   ``ib_write_bw__roce_server_duration_mbsec_peak0_tabs.txt`` (MB/sec,
                       tabs; ``-D`` prints peak 0.00 on both sides)
    latency            ``ib_read_lat__roce_mtu1024_gid12_cpufreq_warnings.txt`` (no warnings)
    errors             ``..._err_couldnt_connect_concatenated.txt``, ``..._err_modify_qp_rtr.txt``
Only the stdlib, tuning.lab.fabric, tuning.lab.model (and its stdlib-only tuning.errors) are
imported here (an incast's client and server also tuning.lab.counters), so a stand-in runs with
``python -S`` and costs tens of milliseconds, not an import of networkx (~0.4 s of CPU) each.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import stat
import sys
import time
from pathlib import Path

from tuning.lab.fabric import Fabric, Nic
from tuning.lab.tools import PORT_HELD
from tuning.lab.model import Outcome, compute_sizes, incast, incast_counters

DEFAULT_PORT = 18515
SERVER_WAIT_S = 10.0
POLL_S = 0.02
LINE = "-" * 87
BANNER = ["", "*" * 36, "* Waiting for client to connect... *", "*" * 36]
#: flavour -> the header block between the title and the dashes (``{dev} {qps} {mtu} {gid}``)
HEADERS = {
    "client": [" Dual-port       : OFF          Device         : {dev}",
               " Number of qps   : {qps:<13}Transport type : IB",
               " Connection type : RC           Using SRQ      : OFF",
               " PCIe relax order: ON           Lock-free      : OFF",
               " ibv_wr* API     : ON           Using DDP      : OFF",
               " TX depth        : 128", " CQ Moderation   : 1", " CQE Poll Batch  : 16",
               " Mtu             : {mtu}[B]", " Link type       : Ethernet", " GID index       : {gid}",
               " Max inline data : 0[B]", " rdma_cm QPs     : OFF", " Data ex. method : Ethernet"],
    "gbits": [" Dual-port       : OFF          Device         : {dev}",
              " Number of qps   : {qps:<13}Transport type : IB",
              " Connection type : RC           Using SRQ      : OFF",
              " PCIe relax order: ON", " ibv_wr* API     : ON", " TX depth        : 128",
              " CQ Moderation   : 100", " Mtu             : {mtu}[B]", " Link type       : Ethernet",
              " GID index       : {gid}", " Max inline data : 0[B]", " rdma_cm QPs     : OFF",
              " Data ex. method : Ethernet"],
    "server": [" Dual-port       : OFF\t\tDevice         : {dev}",
               " Number of qps   : {qps}\t\tTransport type : IB",
               " Connection type : RC\t\tUsing SRQ      : OFF",
               " PCIe relax order: ON", " ibv_wr* API     : ON", " CQ Moderation   : 1",
               " Mtu             : {mtu}[B]", " Link type       : Ethernet", " GID index       : {gid}",
               " Max inline data : 0[B]", " rdma_cm QPs\t : OFF", " Data ex. method : Ethernet"],
    "lat": [" Dual-port       : OFF    Device         : {dev}",
            " Number of qps   : {qps}    Transport type : IB",
            " Connection type : RC   Using SRQ      : OFF", " TX depth        : 1",
            " Mtu             : {mtu}[B]", " Link type       : Ethernet", " GID index       : {gid}",
            " Outstand reads  : 16", " rdma_cm QPs   : OFF", " Data ex. method : Ethernet"],
}
TITLES = {"ib_write_bw": "                    RDMA_Write BW Test",
          "ib_read_lat": "                    RDMA_Read Latency Test"}
#: flavour -> (bandwidth unit, Gb/s -> unit factor, row format); MB and MiB are 2^20 bytes/s.
BW_ROWS = {
    "client": ("MiB/sec", 1e9 / 8 / 2**20,
               " {:<7d}    {:<10d}       {:<7.2f}            {:<7.2f}                    {:<7.6f}"),
    "gbits": ("Gb/sec", 1.0, " {:<7d}    {:<10d}       {:<7.2f}            {:<7.2f}            {:<7.6f}"),
    "server": ("MB/sec", 1e9 / 8 / 2**20, " {:<7d}    {:<10d}       {:<7.2f}            {:<7.2f}   \t\t   {:<7.6f}"),
}
BW_ROWS["server_gbits"] = ("Gb/sec", 1.0, BW_ROWS["server"][2])
BW_HEADER = " #bytes     #iterations    BW peak[{u}]    BW average[{u}]   MsgRate[Mpps]"
LAT_HEADER = (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
              "t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]")
LAT_ROW = (" {:<7d} {:d}          {:<7.2f}        {:<7.2f}      {:<7.2f}           {:<7.2f}      "
           "{:<7.2f}   {:<7.2f}     {:.2f}")
CONNECT_ERR = ("Couldn't connect to {addr}:{port}\n"
               "Unable to open file descriptor for socket connection Unable to init the socket connection\n")
RTR_ERR = "Failed to modify QP {qpn} to RTR\n Unable to Connect the HCA's through the link\n"
#: a server whose TCP port another process of the node holds (perftest binds every address of the
#: node: src/perftest_communication.c ethernet_server_connect, establish_connection, write_bw.c main);
#: printed after the "Waiting for client" banner, exit 1
LISTEN_ERR = ("Couldn't listen to port {port}\nUnable to open file descriptor for socket connection\n"
              " Unable to init the socket connection\n")
ALL_SIZES = [2**k for k in range(1, 24)]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # perftest prints its own line and exits 1
        raise ValueError(message)


def parse_args(tool: str, argv: list[str]) -> argparse.Namespace:
    """Parse perftest arguments (see the module docstring).

    Raises:
        ValueError: an unknown option or a bad value (the message for stderr).
    """
    p = _Parser(prog=tool, add_help=False, allow_abbrev=False)
    p.add_argument("-d", "--ib-dev", dest="dev")
    p.add_argument("-i", "--ib-port", dest="ib_port", type=int, default=1)
    p.add_argument("-x", "--gid-index", dest="gid", type=int)
    p.add_argument("-s", "--size", type=int, default=2 if tool == "ib_read_lat" else 65536)
    p.add_argument("-n", "--iters", type=int, default=1000 if tool == "ib_read_lat" else 5000)
    p.add_argument("-D", "--duration", type=int)
    p.add_argument("-q", "--qp", dest="qps", type=int, default=1)
    p.add_argument("-p", "--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--tclass", type=int)
    p.add_argument("-T", "--tos", type=int)
    p.add_argument("-R", "--rdma_cm", action="store_true")
    for flag in ("-a", "-F", "--report_gbits", "--report-both"):
        p.add_argument(flag, action="store_true")
    p.add_argument("address", nargs="?")
    args = p.parse_args(argv)
    if args.tos is not None and not 0 <= args.tos <= 255:
        raise ValueError(" TOS should be between 0 and 255")
    return args


#: what perftest prints on stdout (and exits 1) for ``-T`` without ``-R`` (perftest_parameters.c)
TOS_WITHOUT_CM = " TOS only valid for rdma_cm based QP and RawEth QP "


def flow_tos(args: argparse.Namespace) -> int | None:
    """The ToS byte this side's QP sets: ``--tclass`` (the GRH traffic class, low 8 bits), else
    ``-R -T``; None for an RDMA-CM QP without ``-T`` (the node's ``default_roce_tos``); 0 for a
    verbs QP given none."""
    if args.tclass is not None:
        return args.tclass & 0xFF
    if args.rdma_cm:
        return args.tos
    return 0


def _qp_addr(seed: str, qp: int) -> list[int]:
    """Deterministic QPN, PSN, RKey and VAddr of one QP (perftest prints them in hex)."""
    h = hashlib.sha256(f"{seed}/{qp}".encode()).digest()
    qpn = 0x100 + int.from_bytes(h[0:2], "big") % 0x200
    return [qpn, 1 + int.from_bytes(h[2:5], "big") % 0xFFFFFF, 0x10000 + int.from_bytes(h[5:8], "big") % 0x200000,
            0x7F0000000000 + (int.from_bytes(h[8:13], "big") % 0xFFFFFFF) * 0x1000]


def _gid_text(gid: str) -> str:
    """sysfs GID ``0000:...:ffff:0a00:0001`` -> perftest ``00:...:255:255:10:00:00:01`` (``%02d``)."""
    raw = bytes.fromhex(gid.replace(":", "")) if gid else bytes(16)
    return ":".join(f"{b:02d}" for b in raw)


def address_lines(local: list[list[int]], remote: list[list[int]], gids: tuple[str, str], lat: bool) -> list[str]:
    """The ``local address`` / ``remote address`` blocks, one per QP (format ``%#06x`` etc.)."""
    out = []
    for who, qps, gid in (("local", local, gids[0]), ("remote", remote, gids[1])):
        for qpn, psn, rkey, vaddr in qps:
            out += [f" {who} address: LID 0000 QPN 0x{qpn:04x} PSN 0x{psn:x}{' OUT 0x10' if lat else ''}"
                    f" RKey 0x{rkey:06x} VAddr 0x{vaddr:014x}", f" GID: {_gid_text(gid)}"]
    return out


def header(tool: str, flavour: str, dev: str, qps: int, mtu: int, gid: int | None) -> list[str]:
    """Title and parameter block, between two dashed lines."""
    body = [line.format(dev=dev, qps=qps, mtu=mtu, gid=gid) for line in HEADERS[flavour]]
    return [LINE, TITLES[tool], *body, LINE]


def sizes(args: argparse.Namespace) -> list[int]:
    """Message sizes of the run: ``-s`` or, with ``-a``, 2 .. 8388608 bytes."""
    return ALL_SIZES if args.a else [args.size]


def bw_rows(outcomes: list[Outcome], args: argparse.Namespace) -> list[list[float]]:
    """Result rows ``[bytes, iterations, peak Gb/s, avg Gb/s, Mpps]``, one per size of :func:`sizes`."""
    rows = []
    for size, out in zip(sizes(args), outcomes):
        iters = int(out.bw_avg_gbps * 1e9 / 8 * args.duration / size) if args.duration else args.iters
        peak = 0.0 if args.duration else out.bw_peak_gbps
        rows.append([size, iters, peak, out.bw_avg_gbps, out.bw_avg_gbps * 1e9 / 8 / size / 1e6])
    return rows


def format_bw(rows: list[list[float]], flavour: str) -> list[str]:
    """Result header, rows and closing dashes in the flavour's unit."""
    unit, factor, fmt = BW_ROWS[flavour]
    out = [BW_HEADER.format(u=unit)]
    out += [fmt.format(int(s), int(n), pk * factor, avg * factor, mpps) for s, n, pk, avg, mpps in rows]
    return out + [LINE]


def format_lat(outcomes: list[Outcome], args: argparse.Namespace) -> list[str]:
    """Latency result header, rows (one per size of :func:`sizes`) and closing dashes (usec)."""
    rows = []
    for size, out in zip(sizes(args), outcomes):
        iters = int(args.duration * 1e6 / out.lat_avg_us) if args.duration else args.iters
        t_max = out.lat_p999_us if iters <= 1000 else out.lat_max_us  # 1000 samples: p99.9 is the max
        rows.append(LAT_ROW.format(size, iters, out.lat_min_us, t_max, out.lat_typical_us,
                                   out.lat_avg_us, out.lat_stdev_us, out.lat_p99_us, out.lat_p999_us))
    return [LAT_HEADER, *rows, LINE]


def _say(lines: list[str], stream=None) -> None:
    (stream or sys.stdout).write("".join(f"{line}\n" for line in lines))
    (stream or sys.stdout).flush()


def _write_json(path: Path, obj: dict, owner: tuple[int, int] | None = None) -> None:
    """Write ``path`` whole: a fresh temporary name beside it, then rename.

    ``run/perftest/`` is shared by every node user, so the temporary file is created with
    O_CREAT|O_EXCL|O_NOFOLLOW under a random name: a name another user planted (a symlink, a
    file) is never followed nor reused. ``owner``: (uid, gid) to hand the file to (a sudo'ed
    client gives its result to the server's user, who removes it from the sticky folder).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(64):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(6).hex()}")
        try:
            fd = os.open(tmp, flags, 0o644)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name beside {path}")
    try:
        with os.fdopen(fd, "w") as f:
            if owner is not None and owner != (os.geteuid(), os.getegid()):
                try:
                    os.fchown(f.fileno(), *owner)
                except PermissionError:
                    pass
            f.write(json.dumps(obj))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _read_record(path: Path) -> tuple[dict, tuple[int, int]]:
    """A rendezvous record and its (uid, gid); never follows a symlink nor opens a non-regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path} is not a regular file")
        return json.loads(f.read()), (st.st_uid, st.st_gid)


def _remove(paths) -> None:
    for path in paths:
        try:
            path.unlink()
        except OSError:  # gone, or another user's (sticky folder)
            pass


def _files(lab: Path, ip: str, port: int) -> dict[str, Path]:
    run = lab / "run" / "perftest"
    run.mkdir(parents=True, exist_ok=True)
    return {k: run / f"{ip}_{port}.{k}.json" for k in ("listen", "claimed", "result")}


def _flavours(tool: str, args: argparse.Namespace, server: bool) -> tuple[str, str]:
    """(header flavour, bandwidth rows flavour) for this run."""
    if tool == "ib_read_lat":
        return "lat", ""
    if server:
        return "server", "server_gbits" if args.report_gbits else "server"
    return ("gbits", "gbits") if args.report_gbits else ("client", "client")


def _wait(path: Path, timeout_s: float) -> dict | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return _read_record(path)[0]
        except (OSError, ValueError):
            time.sleep(POLL_S)
    return None


def serve(tool: str, args: argparse.Namespace, lab: Path, node: str, nic: Nic, timeout_s: float = SERVER_WAIT_S) -> int:
    """Server side: announce, wait for a client's result, print it. Returns the exit status."""
    ip = nic.ipv4.split("/")[0]
    f = _files(lab, ip, args.port)
    if _port_held(lab, node, args.port):
        _say(BANNER)
        _say([LISTEN_ERR.format(port=args.port).rstrip("\n")], sys.stderr)
        return 1
    local = [_qp_addr(f"{node}:{nic.rdma_device}:{args.port}", q) for q in range(args.qps)]
    _remove([f["claimed"], f["result"]])  # a stale result is not this run's
    _write_json(f["listen"], {"tool": tool, "node": node, "dev": nic.rdma_device, "gid": args.gid, "qps": local,
                              "pid": os.getpid(), "flow_tos": flow_tos(args)})
    _say(BANNER)
    res = _wait(f["result"], timeout_s)
    if res is not None and res.get("k", 1) > 1:  # an incast: every sender must still see this server
        deadline = time.monotonic() + timeout_s
        while _servers(lab, ip, tool, ("listen",)) and time.monotonic() < deadline:
            time.sleep(POLL_S)
    _remove(f.values())
    if res is not None and res.get("receiver_counters"):
        from tuning.lab.counters import bump  # only an incast counts: pair tests import nothing more

        bump(lab / "nodes" / node / "sysroot", nic.netdev, nic.rdma_device, res["receiver_counters"])
    if res is None:
        _say([f"{tool} (lab): no client connected to {ip}:{args.port} within {timeout_s:g} s"], sys.stderr)
        return 1
    if res["error"] == "connect_failed":
        return 1
    head, rows = _flavours(tool, args, server=True)
    _say(header(tool, head, nic.rdma_device, args.qps, res["mtu"], res["server_gid_index"]))
    _say(address_lines(local, res["client_qps"], (res["server_gid"], res["client_gid"]), tool == "ib_read_lat"))
    if res["error"]:
        _say([RTR_ERR.format(qpn=local[0][0]).rstrip("\n")], sys.stderr)
        return 1
    _say([LINE] + (format_bw(res["rows"], rows) if rows else []))
    return 0


def _port_held(lab: Path, node: str, port: int) -> bool:
    """Whether another process of ``node`` holds TCP ``port``: the node's ``port-held`` fault names it
    (:data:`PORT_HELD`), or a live perftest server of the node (any tool, any of its addresses) has
    it: its rendezvous record names the node and its ``pid`` is alive (a killed server's does not)."""
    from tuning.procs import pid_alive  # stdlib only, as this module

    try:
        held = (lab / "nodes" / node / "sysroot" / PORT_HELD).read_text().split()
    except OSError:
        held = []
    if str(port) in held:
        return True
    for path in (lab / "run" / "perftest").glob(f"*_{port}.*.json"):
        if not path.name.endswith((f"_{port}.listen.json", f"_{port}.claimed.json")):
            continue
        try:
            rec = _read_record(path)[0]
        except (OSError, ValueError):
            continue
        pid = rec.get("pid")
        if rec.get("node") == node and isinstance(pid, int) and pid != os.getpid() and pid_alive(pid):
            return True
    return False


def _servers(lab: Path, ip: str, tool: str, stages: tuple[str, ...] = ("listen", "claimed")) -> set[int]:
    """TCP ports of the live ``tool`` servers on ``ip`` whose rendezvous record is in ``stages``
    (a record whose ``pid`` is gone, a killed server's, does not count)."""
    from tuning.procs import pid_alive  # stdlib only, as this module

    ports = set()
    for stage in stages:
        for path in (lab / "run" / "perftest").glob(f"{ip}_*.{stage}.json"):
            port = path.name[len(ip) + 1:-len(f".{stage}.json")]
            try:
                rec = _read_record(path)[0]
            except (OSError, ValueError):
                continue
            pid = rec.get("pid")
            if port.isdigit() and rec.get("tool") == tool and isinstance(pid, int) and pid_alive(pid):
                ports.add(int(port))
    return ports


def _incast(outcomes: list[Outcome], args: argparse.Namespace, lab: Path, node: str, nic: Nic,
            receiver: str, k: int, index: int) -> tuple[list[Outcome], dict[str, int]]:
    """Sender ``index`` of ``k``: shares per size, its own counters bumped; returns the outcomes
    and the receiver's counter increments."""
    outcomes = [incast(o, receiver, k, index) for o in outcomes]
    mine: dict[str, int] = {}
    theirs: dict[str, int] = {}
    for size, o in zip(sizes(args), outcomes):
        secs = args.duration or (args.iters * size * 8 / (o.bw_avg_gbps * 1e9) if o.bw_avg_gbps else 0.0)
        c = incast_counters(o, k, secs)
        for into, add in ((mine, c.sender), (theirs, c.receiver)):
            for name, v in add.items():
                into[name] = into.get(name, 0) + v
    from tuning.lab.counters import bump  # only an incast counts: pair tests import nothing more

    bump(lab / "nodes" / node / "sysroot", nic.netdev, nic.rdma_device, mine)
    return outcomes, theirs


def _fault_counters(outcomes: list[Outcome], args: argparse.Namespace, lab: Path, node: str, nic: Nic,
                    rec: dict, theirs: dict[str, int]) -> dict[str, int]:
    """Bump this NIC's counters for the ``flap`` / ``lossy`` injections on the test's path
    (:func:`tuning.lab.hw_faults.traffic_counters`); returns ``theirs`` plus the server's part."""
    from tuning.lab import hw_faults

    fabric = Fabric.load(lab / "fabric.json")
    if not any(i.get("kind") in ("flap", "lossy") for i in fabric.injections):
        return theirs
    cable = {f"{c.switch}:{c.switch_port}": f"{n.name}:{c.rdma_device}" for n in fabric.nodes for c in n.nics}
    o = outcomes[0]
    secs = args.duration or 0.0
    nbytes = int(o.bw_avg_gbps * 1e9 / 8 * secs) if secs else args.iters * sizes(args)[0]
    mine, server = hw_faults.traffic_counters(fabric.injections, o.path, cable, f"{node}:{nic.rdma_device}",
                                              f"{rec['node']}:{rec['dev']}", True, nbytes, o.active_mtu,
                                              o.receiver_prio)
    from tuning.lab.counters import bump

    bump(lab / "nodes" / node / "sysroot", nic.netdev, nic.rdma_device, mine)
    return {k: theirs.get(k, 0) + server.get(k, 0) for k in {*theirs, *server}}


def connect(tool: str, args: argparse.Namespace, lab: Path, node: str, nic: Nic) -> int:
    """Client side: claim the server's listen record, compute, hand the result over, print."""
    f = _files(lab, args.address, args.port)
    peers = sorted(_servers(lab, args.address, tool) | {args.port}) if tool == "ib_write_bw" else [args.port]
    try:
        os.rename(f["listen"], f["claimed"])
        rec, server_user = _read_record(f["claimed"])
    except (OSError, ValueError):
        _say([CONNECT_ERR.format(addr=args.address, port=args.port).rstrip("\n")], sys.stderr)
        return 1
    test = "write_bw" if tool == "ib_write_bw" else "read_lat"
    sender_tos = flow_tos(args) if test == "write_bw" else rec.get("flow_tos", 0)  # the data sender's class
    outcomes = compute_sizes(lab, node, nic.rdma_device, rec["node"], rec["dev"], args.gid, test,
                             server_gid_index=rec["gid"], sizes=sizes(args), qps=args.qps, flow_tos=sender_tos)
    receiver_counters: dict[str, int] = {}
    if len(peers) > 1 and not outcomes[0].error:  # a pair test (k = 1) moves no counter
        outcomes, receiver_counters = _incast(outcomes, args, lab, node, nic, f"{rec['node']}:{rec['dev']}",
                                              len(peers), peers.index(args.port))
    if tool == "ib_write_bw" and not outcomes[0].error:  # flap / lossy faults on the path count per test
        receiver_counters = _fault_counters(outcomes, args, lab, node, nic, rec, receiver_counters)
    o = outcomes[0]
    local = [_qp_addr(f"{node}:{nic.rdma_device}:{args.port}:client", q) for q in range(args.qps)]
    head, flavour = _flavours(tool, args, server=False)
    rows = bw_rows(outcomes, args) if flavour and not o.error else []
    _write_json(f["result"], {"error": o.error, "mtu": o.active_mtu, "client_qps": local, "rows": rows,
                              "client_gid": o.client_gid, "server_gid": o.server_gid,
                              "server_gid_index": o.server_gid_index, "reasons": o.reasons,
                              "k": len(peers), "receiver_counters": receiver_counters},
                owner=server_user)
    if o.error == "connect_failed":
        _say([CONNECT_ERR.format(addr=args.address, port=args.port).rstrip("\n")], sys.stderr)
        return 1
    gid = args.gid if args.gid is not None else (o.client_gid_index or 0)
    _say(header(tool, head, nic.rdma_device, args.qps, o.active_mtu, gid))
    _say(address_lines(local, rec["qps"], (o.client_gid, o.server_gid), tool == "ib_read_lat"))
    if o.error:
        _say([RTR_ERR.format(qpn=local[0][0]).rstrip("\n")], sys.stderr)
        return 1
    _say([LINE] + (format_bw(rows, flavour) if flavour else format_lat(outcomes, args)))
    return 0


def _main(tool: str, argv: list[str]) -> int:
    try:
        args = parse_args(tool, argv)
    except ValueError as exc:  # perftest's own range lines start with a space and name no tool
        _say([str(exc) if str(exc).startswith(" ") else f"{tool}: {exc}"], sys.stderr)
        return 1
    if args.tos is not None and not args.rdma_cm:
        _say([TOS_WITHOUT_CM])
        return 1
    lab, node = os.environ.get("FABTUNE_LAB_DIR"), os.environ.get("FABTUNE_LAB_NODE")
    if not lab or not node:
        _say([f"{tool} (lab): FABTUNE_LAB_DIR and FABTUNE_LAB_NODE must be set"], sys.stderr)
        return 1
    fabric = Fabric.load(Path(lab) / "fabric.json")
    dev = args.dev or "mlx5_0"
    nic = next((c for n in fabric.nodes if n.name == node for c in n.nics if c.rdma_device == dev), None)
    if nic is None:
        _say([f"IB device {dev} not found", " Unable to find the Infiniband/RoCE device"], sys.stderr)
        return 1
    if args.address is None:
        return serve(tool, args, Path(lab), node, nic)
    return connect(tool, args, Path(lab), node, nic)


def ib_write_bw(argv: list[str]) -> int:
    """``ib_write_bw`` stand-in: server without an address, client with one. Returns the exit status."""
    return _main("ib_write_bw", argv)


def ib_read_lat(argv: list[str]) -> int:
    """``ib_read_lat`` stand-in: server without an address, client with one. Returns the exit status."""
    return _main("ib_read_lat", argv)
