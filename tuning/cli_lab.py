"""``fabtune lab up | status | inject | reboot | down | reset``: the embedded lab, a digital twin of a
GPU fabric on this machine (``lab init`` is in :mod:`tuning.cli_burnin`). Registered in :mod:`tuning.cli`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from tuning.cli_args import existing_inventory, load_inventory
from tuning.cli_emit import out
from tuning.cli_options import INV, JSON, STATE
from tuning.errors import InputError
from tuning.lab.noise import DEFAULT_PCT as NOISE_PCT


def _state_dir(inventory: Path, state_dir: Optional[Path]) -> Path:
    return state_dir or inventory / ".state"


def _running_state_dir(inventory: Path, state_dir: Optional[Path]) -> Path:
    """The state directory of a running lab. Raises InputError naming --state-dir when no lab runs there."""
    from tuning.lab.controller import running_pid

    sd = _state_dir(inventory, state_dir)
    if not (sd / "fabric.json").is_file() or running_pid(sd) is None:
        # a stopped lab's state is thrown away by the next `lab up`: a fault set there would vanish
        raise InputError("--state-dir", str(sd), f"the lab is not running in {sd}; start it with "
                         f"`fabtune lab up -i {inventory}`")
    return sd


#: ``lab up --k8s`` (tuning/lab/k8s.py)
K8S = typer.Option(False, "--k8s", help="also start a Kubernetes API server stand-in (with the Maintenance Operator's "
                   "part) and one fabtune agent per lab node (docs/kubernetes.md)")


def lab_up(inventory: Path = INV, state_dir: Optional[Path] = STATE, k8s: bool = K8S,
           slurm: bool = typer.Option(False, "--slurm", help="also start a real Slurm: munged, slurmctld and one "
                                      "slurmd per lab node on the lab's loopback ports (docs/lab.md)"),
           noise: float = typer.Option(NOISE_PCT, "--noise", help="run-to-run spread of the RDMA test results, "
                                       "percent (one standard deviation, 0..50; 0: the fabric model's numbers); "
                                       "`lab noise` changes it later, `lab reset` brings this back"),
           noise_seed: Optional[int] = typer.Option(None, "--noise-seed", help="draw the noise from this seed "
                                                    "(default: the OS's randomness)")) -> None:
    """Start the lab of INVENTORY, untuned: its GPU nodes (SSH) and switches (NVUE unless it names another
    OS; inventory/lab: 4 nodes, 2 leaves, 1 spine; `lab init`: up to 256) on its ports. Its RDMA test results
    spread as a quiet real fabric's do (1 %, tuning.lab.noise), unless --noise says otherwise.

    Example: fabtune lab up -i inventory/lab --slurm --noise 3
    """
    from tuning.lab import controller
    from tuning.lab import slurm as slurm_lab
    from tuning.lab.fabric import fabric_for_inventory

    sd = _state_dir(inventory, state_dir)
    spread = _noise(noise, noise_seed)  # the flags first, then the inventory
    fabric = fabric_for_inventory(existing_inventory(inventory))
    fabric.noise = spread
    if slurm:
        slurm_lab.check(fabric)  # before the lab starts (exit 2): Slurm missing, not root, a port taken
    _k8s_up(sd, fabric, inventory, check_only=True) if k8s else None  # before the lab starts (exit 2)
    controller.up(sd, fabric)
    if slurm:
        try:
            took = slurm_lab.up(sd, fabric, inventory)
        except BaseException:
            controller.down(sd)  # nothing half up
            raise
        out.print(f"Slurm up in {took:.1f} s; its clients need: export "
                  f"SLURM_CONF={slurm_lab.client_env(sd)['SLURM_CONF']}")
    _k8s_up(sd, fabric, inventory) if k8s else None
    _lab_status(sd)


def _noise(noise: float, seed: int | None) -> dict:
    """``lab up``'s noise flags as the fabric keeps them (:func:`tuning.lab.noise.check`).

    Raises:
        InputError: ``--noise`` outside 0..50 or not finite, ``--noise-seed`` below 0.
    """
    from tuning.lab.noise import check

    try:
        return check(noise, noise, seed)
    except ValueError as e:
        bad = seed if seed is not None and seed < 0 else noise
        raise InputError("--noise-seed" if bad is seed else "--noise", str(bad), str(e)) from None


def _k8s_up(sd: Path, fabric, inventory: Path, check_only: bool = False) -> None:
    """``lab up --k8s``'s part (tuning/lab/k8s.py): the stand-in and the agents, or the whole lab
    stopped; ``check_only``: what it needs (lab nodes, its port free), checked before the lab starts."""
    from tuning.lab import controller
    from tuning.lab import k8s as k8s_lab

    if check_only:
        return k8s_lab.check(fabric)
    try:
        took = k8s_lab.up(sd, fabric, inventory)
    except BaseException:
        controller.down(sd)  # nothing half up
        raise
    env = " ".join(f"{k}={v}" for k, v in k8s_lab.client_env(sd).items())
    out.print(f"Kubernetes lab up in {took:.1f} s; a rollout through it needs: export {env}; "
              f"--journal-dir {k8s_lab.folder(sd) / k8s_lab.JOURNAL}", soft_wrap=True)


def lab_status(inventory: Path = INV, state_dir: Optional[Path] = STATE, as_json: bool = JSON) -> None:
    """Show every lab endpoint and whether it answers. Exit 1 if the lab is down.

    Example: fabtune lab status --json
    """
    sd = _state_dir(inventory, state_dir)
    ok = _lab_status(sd, as_json)
    raise typer.Exit(0 if ok else 1)


def _lab_status(sd: Path, as_json: bool = False) -> bool:
    from rich.table import Table

    from tuning.lab import controller

    st = controller.status(sd)
    if as_json:
        print(json.dumps(st, indent=2, default=str))
    else:
        t = Table(title=f"lab {sd}", title_justify="left")
        for col in ("name", "kind", "port", "up"):
            t.add_column(col)
        for e in st.get("endpoints", []):
            t.add_row(str(e["name"]), str(e["kind"]), "-" if e["port"] is None else str(e["port"]),
                      "yes" if e["up"] else "NO")
        out.print(t)
    eps = st.get("endpoints", [])
    return bool(eps) and all(e["up"] for e in eps)


def lab_inject(target: str = typer.Argument(..., help="node01:mlx5_0 or leaf01:swp1"),
               kind: str = typer.Argument("degrade", help="degrade [PERCENT] | down | clear | flap | lossy | pcie-width W "
                                          "(NODE:DEV); node: irqbalance | dcbx | gpu-xid N | slow-tools SECONDS | port-held PORT; "
                                          "switch: apply-fails | nvued-down | slow-apply SECONDS | reboot | hand-edit FILE[,FILE] | "
                                          "(SWITCH:PORT) oper-mtu N; node or switch: ssh-cut"),
               value: Optional[str] = typer.Argument(None, help="PERCENT (degrade: bandwidth lost, 1..99; default 50), SECONDS (slow-apply, slow-tools), MTU (oper-mtu), "
                                                     "W (pcie-width), N (gpu-xid), PORT (port-held) or FILE[,FILE] (hand-edit: files NVUE manages)"),
               inventory: Path = INV, state_dir: Optional[Path] = STATE) -> None:
    """Inject a fault on a link (the fabric model applies it to every RDMA test crossing it)
    or on a switch (see tuning.lab.nvue_faults).

    Example: fabtune lab inject leaf01:swp1 degrade; fabtune lab inject node03:mlx5_3 degrade 30;
    fabtune lab inject leaf01:swp3 oper-mtu 1500; fabtune lab inject leaf01 slow-apply 30
    """
    from tuning.lab.inject import degrade_pct, inject

    if kind == "degrade":
        degrade_pct(value)  # a bad PERCENT (`degrade -5`) is named before the lab is looked for
    sd = _running_state_dir(inventory, state_dir)
    inject(sd, target, kind, value)
    out.print(f"{kind}{'' if value is None else ' ' + value} on {target}")


def lab_noise(bw_pct: Optional[float] = typer.Option(None, "--bw-pct", help="spread of each bandwidth "
                                                    "result, percent of the model's value (one standard deviation, 0..50; "
                                                    "0: none)"),
              lat_pct: Optional[float] = typer.Option(None, "--lat-pct", help="spread of each latency result, "
                                                      "percent (default: as --bw-pct)"),
              seed: Optional[int] = typer.Option(None, "--seed", help="draw from this seed (runs taken one at a "
                                                 "time then repeat after `lab reset`); default: the OS's randomness"),
              inventory: Path = INV, state_dir: Optional[Path] = STATE, as_json: bool = JSON) -> None:
    """Set (or, without options, show) the run-to-run noise of the running lab's RDMA test results
    (tuning.lab.noise): each perftest run's bandwidth and latency are the fabric model's times
    1 + N(0, PCT/100). A real fabric spreads about 1 % (quiet) to 3 % (busy). `lab reset` puts back
    what `lab up --noise` set (default 1 %).

    Example: fabtune lab noise --bw-pct 3 --seed 7
    """
    from tuning.lab.fabric import Fabric
    from tuning.lab.noise import check

    sd = _running_state_dir(inventory, state_dir)
    fabric = Fabric.load(sd / "fabric.json")
    if bw_pct is not None or lat_pct is not None or seed is not None:
        bw = bw_pct if bw_pct is not None else float(fabric.noise.get("bw_pct", 0))
        lat = lat_pct if lat_pct is not None else bw
        try:
            fabric.noise = check(bw, lat, seed)
        except ValueError as e:  # the flag whose value check names (its message starts with what it checked)
            flag, value = (("--seed", seed) if str(e).startswith("noise seed") else
                           ("--bw-pct", bw) if str(e).startswith("bandwidth") else ("--lat-pct", lat))
            raise InputError(flag, str(value), str(e)) from None
        fabric.save(sd / "fabric.json")
    if as_json:
        print(json.dumps(fabric.noise, sort_keys=True))
    elif not fabric.noise:
        out.print("lab noise: none (every run gives the fabric model's numbers)")
    else:
        n = fabric.noise
        out.print(f"lab noise: bandwidth {n['bw_pct']:g} %, latency {n['lat_pct']:g} % (one standard deviation)"
                  + (f", seed {n['seed']}" if "seed" in n else ", unseeded"))


def lab_reboot(node: str = typer.Argument(..., help="a lab node, e.g. node01"),
               inventory: Path = INV, state_dir: Optional[Path] = STATE) -> None:
    """Power-cycle a lab node: live values drop back to power-on (NIC firmware makes its Next Boot
    values current, the boot loader's command line becomes /proc/cmdline), then boot runs what is
    persisted (modules-load.d, sysctl.d, and the ENABLED systemd units' ExecStart) as root over the
    node's SSH endpoint.

    Example: fabtune lab reboot node01
    """
    from tuning.lab.boot import reboot

    dev = {d.name: d for d in load_inventory(inventory).nodes}.get(node)
    if dev is None:
        raise InputError("NODE", "node", f"{node!r} is not a node of {inventory}")
    cmds = reboot(_running_state_dir(inventory, state_dir), node, dev.connection)
    out.print(f"{node} rebooted; boot ran: {'; '.join(cmds)}")


def lab_down(inventory: Path = INV, state_dir: Optional[Path] = STATE) -> None:
    """Stop the lab (its state directory stays for inspection).

    Example: fabtune lab down
    """
    from tuning.lab import controller

    stopped = controller.down(_state_dir(inventory, state_dir))
    out.print("lab stopped" if stopped else "lab was not running")


def lab_reset(inventory: Path = INV, state_dir: Optional[Path] = STATE, as_json: bool = JSON) -> None:
    """Put the running lab back to power-on without restarting it: node files, switch revisions,
    injected faults and agents, the sudo policy (checked after; exit 1 if it is not at power-on).

    Example: fabtune lab reset -i inventory/lab
    """
    from tuning.lab import power_on

    done = power_on.reset(_state_dir(inventory, state_dir))
    if as_json:
        print(json.dumps(done))
    else:
        out.print(f"lab at power-on: {done['paths_restored']} node path(s) restored, "
                  f"{done['processes_stopped']} process(es) stopped, switches at revision "
                  + ", ".join(f"{name} {rev}" for name, rev in done["switches"].items()))
