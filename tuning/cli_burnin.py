"""``fabtune lab init``, ``fabtune burnin`` and ``fabtune health`` (issue 10).

Registered at the end of :mod:`tuning.cli`'s command registrations (``register(app, lab_app)``).
Exit codes (``fabtune burnin`` / ``fabtune health``): 0 healthy, 1 findings, 2 bad input, 4 a node
unreachable (or no node at all: a round that tested nothing stops the run, one line naming the nodes),
or the verification harness failed (a ``harness-error`` finding).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from tuning.cli_args import checked_path, file_arg, integer, inventory_arg, load_inventory
from tuning.lab.fabric import DEFAULT_BASE_PORT, MAX_NODES
from tuning.reports import report_file


NEW_DIR = checked_path("DIR", "a new (or empty) inventory folder", is_dir=True)


def lab_init(directory: Path = typer.Argument(..., metavar="DIR", help="A new (or empty) inventory folder.",
                                             parser=NEW_DIR),
             nodes: int = typer.Option(4, "--nodes", "-n", metavar="N", parser=integer("--nodes", 1, MAX_NODES, "a lab size"),
                                       help=f"GPU nodes, 1..{MAX_NODES} (8 rails each; SUs of 32 nodes, 2 rail leaves each; "
                                            "1 spine for one SU, else 2)."),
             base_port: int = typer.Option(DEFAULT_BASE_PORT, "--base-port", metavar="BASE",
                                           parser=integer("--base-port", 1024, 32664, "a port", "1024..32664 (at most "
                                                          "32767 minus the lab's ports: 32493 for 256 nodes)"),
                                           help="Node k listens on BASE+k, the switches on BASE+101.. (past the "
                                                "last node's port beyond 100 nodes); every port stays below 32768: "
                                                "BASE at most 32664 up to 32 nodes, 32493 for 256 nodes."),
             switch_os: list[str] = typer.Option([], "--switch-os", metavar="SWITCH=OS",
                                                 help="A switch's OS where not NVUE: nvue, eos or sonic (repeat per switch)."),
             shape: str = typer.Option("dgx", "--shape", metavar="dgx|nvl72",
                                       help="Node shape: dgx (8 GPUs, 8 NICs) or nvl72 (GB200 NVL72 compute trays: "
                                            "4 GPUs, 4 NICs, 2 Grace CPUs; 1..18 nodes).")) -> None:
    """Write the inventory of an N-node lab (4 nodes on the default ports = inventory/lab).

    Example: fabtune lab init /tmp/lab8 --nodes 8 --base-port 28000 --switch-os leaf02=eos --switch-os leaf01=sonic && fabtune lab up -i /tmp/lab8
    """
    from tuning.errors import InputError
    from tuning.lab.scale import write_inventory

    pairs = [item.partition("=") for item in switch_os]
    bad = next((f"{a}{eq}{b}" for a, eq, b in pairs if not eq), None)
    if bad is not None:
        raise InputError("--switch-os", bad[:60], "SWITCH=OS, e.g. leaf02=eos")
    twice = next((a for i, (a, _, _) in enumerate(pairs) if a in [p[0] for p in pairs[:i]]), None)
    if twice is not None:
        raise InputError("--switch-os", twice[:60], "a switch given twice; allowed: one OS per switch")
    if shape not in ("dgx", "nvl72"):
        raise InputError("--shape", shape[:60], "dgx or nvl72")
    from tuning.lab.hw_nvl72 import write_tray_inventory

    writer = write_tray_inventory if shape == "nvl72" else write_inventory
    dest = writer(directory, nodes, base_port, switch_os={a: b for a, _, b in pairs})
    print(f"lab inventory of {nodes} node(s) in {dest}; start it with `fabtune lab up -i {dest}`")


def parse_duration(text: str, flag: str = "--duration", zero: bool = False) -> float:
    """``90s`` / ``45m`` / ``2h`` / ``1d`` (or plain seconds) -> seconds; 0 only with ``zero``.

    Digits are ASCII only (``\u0661h``, Arabic-Indic one, is refused though ``float`` reads it).

    Raises:
        InputError: anything else (names ``flag`` and the allowed forms).
    """
    import re

    from tuning.errors import InputError

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhd]?)\s*", text or "", re.ASCII)
    if not m or (float(m.group(1)) <= 0 and not zero):
        raise InputError(flag, (text or "")[:40], "a duration like 90s, 45m, 2h or 1d " + ("(0 or more)" if zero else "(above 0)"))
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def parse_iterations(text: str | None) -> int | None:
    """``--iterations N``: ASCII digits only (``int`` also reads ``\u0663`` as 3), None when not given.

    Raises:
        InputError: not a plain decimal (names ``--iterations``; the range is checked by BurninOptions).
    """
    import re

    from tuning.errors import InputError

    if text is None:
        return None
    if not re.fullmatch(r"[0-9]{1,9}", text.strip(), re.ASCII):
        raise InputError("--iterations", text[:40], "an integer 1..100000 (ASCII digits)")
    return int(text)


#: exit codes of burnin / health: 0 healthy, 1 findings (or the drain cap held), 2 bad input, 4 a node
#: unreachable (or a round that tested nothing, or the verification harness failed)
EXIT_HEALTHY, EXIT_FINDINGS, EXIT_UNREACHABLE = 0, 1, 4


def _exit_code(doc: dict) -> int:
    """0 healthy, 1 findings (or the drain cap held, or a drain failed), 4 a node unreachable, a round that tested
    nothing, or the verification harness failed (a ``harness-error`` finding: not a fabric fault)."""
    if doc.get("stopped") or doc.get("unreachable") or any(r.get("errors") for r in doc.get("rounds", [])):
        return EXIT_UNREACHABLE
    if any(f.get("kind") == "harness" for f in doc.get("findings") or []):
        return EXIT_UNREACHABLE
    if doc.get("findings") or (doc.get("drain") or {}).get("capped") or (doc.get("drain") or {}).get("failed"):
        return EXIT_FINDINGS
    return EXIT_HEALTHY


def _summary(doc: dict) -> str:
    """The last line of a run: run id, rounds, seconds, findings, the reports written."""
    reports = "".join(f"; {k} {v}" for k, v in doc.get("reports", {}).items())
    return (f"{doc['run_id']}: {len(doc.get('rounds', []))} round(s) in {doc['seconds']:.0f} s, "
            f"{len(doc.get('findings') or [])} finding(s){reports}")


def _finding_lines(f: dict) -> list[str]:
    """A finding's console lines: code, kind, target and message (its severity when not ``error``), then its
    ``fix`` when it has one (the IB views': :mod:`tuning.burnin.ib_views`)."""
    msg = f["message"]  # localise's node messages open with the target itself: print it once
    msg = msg[len(f["target"]) + 2:] if msg.startswith(f"{f['target']}: ") else msg
    sev = f" ({f['severity']})" if f.get("severity") not in (None, "error") else ""
    return [f"{f['code']:<22} {f['kind']:<6} {f['target']}: {msg}{sev}"] + ([f"{'':<29} fix: {f['fix']}"] if f.get("fix") else [])


def _show(doc: dict, as_json: bool) -> None:
    """Print ``doc`` (JSON, or a line per unreachable node, finding (its severity when not ``error``, its
    ``fix`` on the next line when it has one) and drain, then :func:`_summary`).
    A run that ``stopped`` (tested nothing) prints ONE error line on stderr naming the nodes, then the summary."""
    import json

    if as_json:
        print(json.dumps(doc, indent=2, default=str))
        return
    if doc.get("stopped"):
        print(f"fabtune: error: {doc.get('kind', 'burnin')}: {doc['stopped']}", file=sys.stderr)
        print(_summary(doc))
        return
    for name, why in (doc.get("unreachable") or {}).items():
        print(f"UNREACHABLE {name}: {why}")
    for f in doc.get("findings") or []:
        print("\n".join(_finding_lines(f)))
    d = doc.get("drain")
    if d:
        print(f"drain ({d['adapter']}, {'dry run' if d['dry_run'] else 'acted'}): {', '.join(d['drained']) or 'none'}"
              + (f"; over the cap, not drained: {', '.join(d['over_cap'])}" if d.get("capped") else "")
              + (f"; left alone (drained by someone else): {', '.join(d['left'])}" if d.get("left") else "")
              + (f"; FAILED, not drained: {', '.join(d['failed'])}" if d.get("failed") else ""))
        for node, why in (d.get("failed") or {}).items():  # a drain that did not happen is a failure
            said = why if why.startswith(f"{node}: ") else f"{node}: {why}"
            print(f"fabtune: error: drain failed: {said}", file=sys.stderr)
    u = doc.get("undrain")
    if u:
        whys: dict[str, list[str]] = {}  # one reason (scontrol missing...) said once for its nodes
        for n, why in {**u["left"], **u["failed"]}.items():
            if why != "not drained":
                whys.setdefault(why, []).append(n)
        print(f"undrain ({u['adapter']}, {'dry run' if u['dry_run'] else 'acted'}): "
              f"{', '.join(u['resumed']) or 'none'} resumed"
              + "".join(f"; {', '.join(ns)} not: {w}" for w, ns in whys.items()))
    print(_summary(doc))


RAIL = integer("--rail", 0, 31, "a rail")
MAX_DRAIN = integer("--max-drain", 0, 1000000, "a count of nodes")
INV = typer.Option(Path("inventory/lab"), "-i", "--inventory", parser=inventory_arg, help="Ansible-format inventory.")
RAIL_HELP = "an integer 0..31, repeatable"
LIMIT = typer.Option(None, "--limit", "-l", help="Only these nodes (repeatable).")
REPORT_JSON = typer.Option(None, "--report-json", metavar="FILE", help="Write the burn-in document as JSON.",
                           parser=file_arg("--report-json", report_file("--report-json")))
PROM = typer.Option(None, "--prom-file", metavar="FILE.prom", help="Write Prometheus textfile metrics.",
                    parser=file_arg("--prom-file", report_file("--prom-file", ".prom")))
DRAIN_LOG = typer.Option(None, "--drain-log", metavar="FILE", help="Where the drain commands are logged.",
                         parser=file_arg("--drain-log"))
JSON = typer.Option(False, "--json", help="Print the document as JSON on stdout.")
IB_RECOVERY = typer.Option("10s", "--ib-recovery", metavar="10s", help="With subnet_managers: idle time after "
                           "the last round before the IB fabric's last read (0 none).")
UNDRAIN_HELP = ("Resume (Slurm State=RESUME / uncordon) the nodes this run found clean whose drain reason "
                "starts with 'fabtune:' (needs --drain-adapter; dry run unless --drain).")


def burnin(inventory: Path = INV,
           duration: Optional[str] = typer.Option(None, "--duration", metavar="2h", help="Run rounds for this long (90s, 45m, 2h, 1d)."),
           iterations: Optional[str] = typer.Option(None, "--iterations", "-n", metavar="N", help="Run N rounds (1..100000)."),
           rail: Optional[list[int]] = typer.Option(None, "--rail", metavar="0..31", parser=RAIL,
                                                    help=f"Only these rails ({RAIL_HELP}; default every rail)."),
           limit: Optional[list[str]] = LIMIT,
           html: Optional[Path] = typer.Option(None, "--html", metavar="FILE.html", help="Write the HTML report.",
                                               parser=file_arg("--html", report_file("--html"))),
           report_json: Optional[Path] = REPORT_JSON, prom_file: Optional[Path] = PROM,
           drain_adapter: Optional[str] = typer.Option(None, "--drain-adapter", metavar="slurm|k8s", help="Drain nodes with findings (dry run unless --drain)."),
           drain: bool = typer.Option(False, "--drain", help="Act on the drain (default: dry run, commands logged)."),
           max_drain: int = typer.Option(1, "--max-drain", metavar="N", parser=MAX_DRAIN,
                                         help="Drain at most N nodes in this run (0..1000000, default 1)."),
           drain_log: Optional[Path] = DRAIN_LOG, ib_recovery: str = IB_RECOVERY,
           undrain: bool = typer.Option(False, "--undrain", help=UNDRAIN_HELP), as_json: bool = JSON) -> None:
    """Burn in a fabric: repeated all-pairs RDMA rounds (bandwidth, latency; nccl-tests when present), NIC
    counter deltas, link and PCIe state against capability, GPU health; with subnet_managers, the IB fabric
    read on each SM host (iblinkinfo width/speed and its 'Could be' hint, perfquery -x error counter deltas
    over the window and a recovery window); then name the bad nodes and links (an IB cable by both ends and
    the end counting errors), drain (dry run by default), write the reports. Exit 0 healthy, 1 findings, 2 bad
    input, 4 a node or SM unreachable, a round that reached none (one line naming them) or the verification
    harness failed (harness-error: not a fabric fault, nothing drained).

    Example: fabtune burnin -i inventory/lab --iterations 3 --html burnin.html --drain-adapter slurm
    Example (IB, the SM in subnet_managers): fabtune burnin -i inventory/ib --duration 30m --ib-recovery 60s
    """
    from tuning.burnin.run import BurninOptions, run_burnin
    from tuning.errors import InputError

    if (duration is None) == (iterations is None):
        raise InputError("--iterations", "", "give exactly one of --duration (e.g. 2h) and --iterations N")
    opts = BurninOptions(iterations=parse_iterations(iterations),
                         duration_s=parse_duration(duration) if duration else None,
                         rails=tuple(rail) if rail else None, limit=limit or None, html=html,
                         report_json=report_json, prom_file=prom_file, drain_adapter=drain_adapter, drain=drain,
                         max_drain=max_drain, drain_log=drain_log, undrain=undrain,
                         ib_recovery_s=parse_duration(ib_recovery, "--ib-recovery", zero=True)).check()
    doc = run_burnin(load_inventory(inventory), opts, lambda m: print(f"... {m}", file=sys.stderr))
    _show(doc, as_json)
    raise typer.Exit(_exit_code(doc))


def health(inventory: Path = INV,
           local: bool = typer.Option(False, "--local", help="Read this machine (sysfs, NVML, kernel log) without SSH or traffic."),
           rail: Optional[list[int]] = typer.Option(None, "--rail", metavar="0..31", parser=RAIL,
                                                    help=f"The rail(s) of the quick round ({RAIL_HELP}; "
                                                         "default the lowest)."),
           limit: Optional[list[str]] = LIMIT, report_json: Optional[Path] = REPORT_JSON,
           prom_file: Optional[Path] = PROM,
           drain_adapter: Optional[str] = typer.Option(None, "--drain-adapter", metavar="slurm|k8s", help="Drain a node with findings (dry run unless --drain; at most one)."),
           drain: bool = typer.Option(False, "--drain", help="Act on the drain / undrain (default: dry run, commands logged)."),
           drain_log: Optional[Path] = DRAIN_LOG,
           undrain: bool = typer.Option(False, "--undrain", help=UNDRAIN_HELP), as_json: bool = JSON) -> None:
    """One quick health round (for cron, a Slurm HealthCheckProgram, a node-problem-detector plugin):
    over SSH, one rail's pairs between two reads of every node; with --local, this machine only.
    Exit 0 healthy, 1 findings, 2 bad input, 4 a node unreachable (none reached: one line naming them)
    or the verification harness failed (harness-error: not a fabric fault, nothing drained).

    Example: fabtune health --local --prom-file /var/lib/node_exporter/fabtune.prom
    """
    from tuning.burnin.run import BurninOptions

    opts = BurninOptions(kind="health", rails=tuple(rail) if rail else None, limit=limit or None,
                         report_json=report_json, prom_file=prom_file, drain_adapter=drain_adapter, drain=drain,
                         drain_log=drain_log, undrain=undrain).check()
    if local:
        from tuning.burnin.health import local_document

        doc = local_document(Path("/"), opts)
    else:
        from tuning.burnin.health import run_health

        doc = run_health(load_inventory(inventory), opts, lambda m: print(f"... {m}", file=sys.stderr))
    _show(doc, as_json)
    raise typer.Exit(_exit_code(doc))


def register(app: typer.Typer, lab_app: typer.Typer) -> None:
    """Add this module's commands to the ``fabtune`` app and its ``lab`` group."""
    lab_app.command("init")(lab_init)
    app.command("burnin")(burnin)
    app.command("health")(health)
