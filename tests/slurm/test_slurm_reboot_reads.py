"""How ``rollout --engine slurm --allow-reboot`` reads Slurm (fast tier, no Slurm needed): the
``scontrol show node -o`` lines of Slurm 22.05.8 as the Slurm lab printed them before, during and
after ``scontrol reboot ASAP nextstate=RESUME`` (tuning/slurm_reboot.py), which node it takes as back,
still rebooting or lost, and which nodes a run's journal already rebooted."""

from __future__ import annotations

from datetime import datetime

from tuning.slurm_reboot import asked_before, needs_reboot, show_nodes, verdict

#: node01 idle before the request, as ``scontrol show node -o node01`` printed it (Slurm 22.05.8)
IDLE = ("NodeName=node01 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=2.26 "
        "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=localhost NodeHostName=localhost "
        "Port=12105 Version=22.05.8 OS=Linux 6.18.44-fc-v1252 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1 AllocMem=0 "
        "FreeMem=19402 Sockets=1 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
        "Partitions=lab  BootTime=2026-12-03T21:40:59 SlurmdStartTime=2026-12-04T03:05:24 "
        "LastBusyTime=2026-12-04T03:05:24 CfgTRES=cpu=1,mem=1M,billing=1 AllocTRES= CapWatts=n/a CurrentWatts=0 "
        "AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s")
#: the same node once the reboot was issued (its State, NextState and Reason as the lab showed them)
ISSUED = (IDLE.replace("State=IDLE", "State=DOWN+DRAIN+REBOOT_ISSUED NextState=RESUME")
          + " Reason=fabtune:R1: reboot batch 1/1 : reboot issued [root@2026-12-04T03:05:29]")
#: back: slurmd -b registered, nextstate=RESUME cleared the drain and the reason
BACK = IDLE.replace("BootTime=2026-12-03T21:40:59", "BootTime=2026-12-04T03:05:42")
ASKED = datetime(2026, 12, 4, 3, 5, 28, 400000)
BEFORE = "2026-12-03T21:40:59"


def _one(line: str) -> dict[str, str]:
    return show_nodes(["node01"], lambda argv: (0, line + "\n", ""))["node01"]


def test_scontrol_show_node_fields_are_read_from_its_one_line_form():
    assert _one(IDLE) == {"state": "IDLE", "boot": BEFORE, "reason": ""}
    assert _one(ISSUED) == {"state": "DOWN+DRAIN+REBOOT_ISSUED", "boot": BEFORE,  # not NextState=RESUME
                            "reason": "fabtune:R1: reboot batch 1/1 : reboot issued [root@2026-12-04T03:05:29]"}


def test_a_node_is_back_only_with_a_newer_boot_time_and_no_reboot_flag():
    assert verdict(_one(ISSUED), BEFORE, ASKED) == "waiting"
    assert verdict(_one(BACK), BEFORE, ASKED) == "back"
    assert verdict(_one(BACK.replace("State=IDLE", "State=IDLE+NOT_RESPONDING")), BEFORE, ASKED) == "waiting"
    # the reboot flag dropped without a new BootTime: Slurm gave up (scontrol(1): "reboot timed out"
    # after ResumeTimeout, the node DOWN): lost, in Slurm's own words
    lost = ISSUED.replace("DOWN+DRAIN+REBOOT_ISSUED", "DOWN+DRAIN").replace("reboot issued", "reboot timed out")
    assert verdict(_one(lost), BEFORE, ASKED) == (
        "State=DOWN+DRAIN BootTime=2026-12-03T21:40:59 Reason=fabtune:R1: reboot batch 1/1 : reboot timed out "
        "[root@2026-12-04T03:05:29]")
    assert verdict(_one(IDLE.replace(BEFORE, "None")), BEFORE, ASKED) == "waiting"  # Slurm knows no BootTime yet
    # a BootTime older than the request is no reboot of this run
    assert verdict(_one(IDLE.replace(BEFORE, "2026-12-04T03:05:27")), BEFORE, ASKED).startswith("State=IDLE ")


def test_only_pushed_changes_that_need_a_boot_ask_for_one_and_never_twice_per_run():
    assert needs_reboot({"pushed": True, "effects": {"reboot_required": True, "pending_reset": False}}) is True
    assert needs_reboot({"pushed": False, "effects": {"reboot_required": True}}) is False
    assert needs_reboot({"pushed": True, "effects": {"reboot_required": False, "pending_reset": True}}) is False
    events = [["batch", "1/2", 1.0], ["reboot", "node01,node02: scontrol reboot ASAP nextstate=RESUME", 2.0],
              ["rebooted", "node01 BootTime=2026-12-04T03:05:42", 3.0]]
    assert asked_before(events) == {"node01", "node02"} and asked_before([]) == set()


def test_allow_reboot_is_refused_by_the_engines_that_do_not_reboot_before_anything_runs():
    from tests.k8s.clirun import fabtune

    for engine in ("nornir", "ansible"):
        r = fabtune("rollout", "-i", "inventory/lab", "--engine", engine, "--allow-reboot")
        assert r.returncode == 2 and r.stderr.splitlines() == [
            f"fabtune: error: --allow-reboot: {engine}: only --engine slurm reboots nodes in a rollout (the "
            "playbooks: -e fabtune_allow_reboot=true); allowed: --engine slurm (see `fabtune rollout --help`)"], r.stderr
