"""``make demo``: the main job end to end on the embedded lab, with its switches on three OSes.

1. start the lab with its switches on the three OSes fabtune drives: leaf02 on Arista EOS, spine01
   on community SONiC, leaf01 on NVUE (the inventory of
   ``fabtune lab init --switch-os leaf02=eos --switch-os spine01=sonic`` on the default ports; untuned: MTU 1500, no PFC/ECN,
   IRQs remote, switches lossy);
2. roll it out: performance improves, the change is kept;
3. roll out a deliberately wrong variant (leaf01's uplink to the spine at MTU 1500: consistent
   enough to pass the inventory checks, but the spine paths drop RoCE frames): verification fails
   and every touched device is restored;
4. print per-pair bandwidth and latency before / after, stop the lab; exit 0 only if both
   outcomes were the expected ones.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import yaml

from tuning import inventory
from tuning.lab import controller
from tuning.lab.fabric import fabric_for_inventory
from tuning.lab.scale import write_inventory
from tuning.report import console, verify_table
from tuning.rollout import engine
from tuning.model.outcomes import RunOutcome

LAB = Path("inventory/lab")
#: the demo lab's switch OSes where not NVUE (:data:`tuning.lab.fabric.SWITCH_OSES`)
SWITCH_OS = {"leaf02": "eos", "spine01": "sonic"}


def wrong_variant(src: Path, dst: Path) -> Path:
    """Copy ``src`` to ``dst`` with leaf01's uplink to the spine (``swp31``) at MTU 1500; the lab
    state is shared by a symlink. Every consistency rule of the inventory holds (a node-facing port
    under the node MTU is refused at input, issue 6 item 13), but the pairs through the spine that
    cross leaf01 drop their RoCE frames (4096 B + 78 B of headers > 1500): verification fails them."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    (dst / ".state").symlink_to((src / ".state").resolve())
    hv = dst / "host_vars" / "leaf01.yml"
    hv.write_text(yaml.safe_dump({**(yaml.safe_load(hv.read_text()) or {}), "port_mtu_overrides": {"swp31": 1500}},
                                 sort_keys=False))
    return dst


def _oses() -> str:
    """``leaf01 on nvue, leaf02 on eos, spine01 on sonic``: what the demo's switches run."""
    names = ("leaf01", "leaf02", "spine01")
    return ", ".join(f"{n} on {SWITCH_OS.get(n, 'nvue')}" for n in names)


def main() -> int:
    """Run the demo; returns the exit status."""
    out, err = console(), console(stderr=True)
    progress = lambda m: err.print(f"[dim]... {m}[/dim]")  # noqa: E731
    if controller.running_pid(LAB / ".state"):
        controller.down(LAB / ".state")  # the embedded lab's ports
    root = Path(tempfile.mkdtemp(prefix="fabtune-demo-"))
    lab = write_inventory(root / "lab", 4, switch_os=SWITCH_OS)
    state = lab / ".state"
    controller.up(state, fabric_for_inventory(lab))
    ok = True
    try:
        journal = root / "journal"
        out.rule(f"1. roll out the lab: {_oses()} (untuned -> tuned)")
        good = engine.run(inventory.load(lab), engine.Options(mode="rollout", journal_dir=journal), progress)
        out.print(verify_table(good.verify_after, "per pair, before -> after", good.verify_before))
        out.print(f"outcome: [bold]{good.outcome}[/bold], {good.n_changes} changes, run {good.run_id}, {good.seconds} s")
        ok &= good.outcome == RunOutcome.KEPT
        with tempfile.TemporaryDirectory() as tmp:
            bad_inv = wrong_variant(lab, Path(tmp) / "lab-wrong")
            out.rule("2. roll out a wrong variant (leaf01's spine uplink at MTU 1500: RoCE frames dropped)")
            bad = engine.run(inventory.load(bad_inv), engine.Options(mode="rollout", journal_dir=journal), progress)
            out.print(verify_table(bad.verify_after, "per pair, before -> after", bad.verify_before))
            out.print(f"outcome: [bold]{bad.outcome}[/bold], restored: {', '.join(bad.restored)}, run {bad.run_id}")
            ok &= bad.outcome == RunOutcome.ROLLED_BACK
        again = engine.run(inventory.load(lab), engine.Options(mode="plan"), progress)
        out.print(f"3. after the rollback, plan of the lab: {again.n_changes} change(s) (expected 0)")
        ok &= again.n_changes == 0
        out.print(f"journals of these runs: {journal} (`fabtune runs --journal-dir {journal}`; the lab "
                  "they ran on is stopped now)", markup=False)
    finally:
        controller.down(state)
        shutil.rmtree(state, ignore_errors=True)  # the lab's sysroots and logs (~300 MB): no leftovers
    out.print("[green]demo OK[/green]" if ok else "[red]demo FAILED[/red]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
