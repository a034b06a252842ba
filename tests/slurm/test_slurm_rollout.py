"""``fabtune rollout --engine slurm`` on the Slurm lab (issue 23): the controller plans, verifies and
journals; each node's writes are ``fabtune node apply`` / ``restore`` started by the real ``srun``
(the lab's TaskProlog gives each task its node's sysroot), each batch held by an allocation and
drained with the reason ``fabtune:RUN_ID: ...`` while it runs, its nodes resumed after. The lab:
``tests/slurm/conftest.py`` (as a normal user: the one-line refusal)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from datetime import datetime

import pytest

from tests.conftest import REPO, snapshot_fabric
from tests.slurm.conftest import client, fab, reasons
from tuning.lab.inject import inject
from tuning.slurm_engine import NODE_COMMAND_ENV

pytestmark = pytest.mark.lab

OTHER = "bad DIMM, ticket 4711"
#: the change rolled out: the nodes' sysctls and MTUs, verified on rail 0; the lab fabric without the rest (~270 Gb/s)
#: meets 200 Gb/s
CHANGE = ("--domain", "sysctl", "--domain", "mtu", "--min-bw", "200", "--rail", "0")


def _env(env: dict) -> dict:
    """The controller's environment: the lab's SLURM_CONF, and the node command a task runs (this
    interpreter: the lab's nodes share the machine, and a task's PATH is the node shell's)."""
    return {**env, NODE_COMMAND_ENV: f"{sys.executable} -m tuning", "PYTHONPATH": str(REPO)}


def _idle(env: dict, timeout_s: float = 10.0) -> dict[str, str]:
    """``sinfo``'s node states once no node shows ``*`` (a resumed node until slurmd answers a ping)."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = dict(line.split() for line in client(env, "sinfo", "-h", "-N", "-o", "%N %T").splitlines())
        if not any(s.endswith("*") for s in states.values()) or time.monotonic() > deadline:
            return states


def _results(jdir, run_id: str, tag: str) -> dict[str, dict]:
    """Each node's JSON result of one srun step (``<journal>/<run>.slurm/<tag>-<task>.out``)."""
    out = {}
    for f in sorted((jdir / f"{run_id}.slurm").glob(f"{tag}-*.out")):
        doc = json.loads(f.read_text())
        out[doc["node"]] = doc
    return out


def test_good_change_is_pushed_through_srun_kept_and_writes_what_the_ssh_engine_writes(slurm_lab, tmp_path):
    """A sysctl and MTU change (the lab fabric without the rest meets --min-bw 200, not the inventory's
    300) kept on both nodes; the same change pushed by the Nornir engine over SSH on the reset lab writes the very
    same files, byte for byte."""
    inv, env = slurm_lab
    assert fab("lab", "reset", "-i", str(inv)).returncode == 0
    untuned, jdir = snapshot_fabric(inv), tmp_path / "j"
    r = fab("rollout", "-i", str(inv), "--engine", "slurm", "--journal-dir", str(jdir), *CHANGE, "--json",
            env=_env(env), timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["outcome"] == "kept" and doc["verify_ok"] is True and not doc["errors"], doc["errors"]
    # the nodes were read on the nodes: one srun of `fabtune node collect` for both before the batch,
    # one in the batch's allocation for the report's read again after it
    assert r.stderr.count("slurm: collecting 2 node(s) on the nodes") == 2, r.stderr[-3000:]
    assert r.stderr.count("... node collect") == 2 and "--jobid=" in r.stderr.split("... node collect")[1].splitlines()[-1]
    # each node's changes were applied by its own srun task, exactly the ones the controller planned
    done = _results(jdir, doc["run_id"], "apply-b1")
    assert sorted(done) == ["node01", "node02"]
    planned = json.loads((jdir / f"{doc['run_id']}.plans" / "apply-b1.json").read_text())  # the batch's plan file
    assert planned["run_id"] == doc["run_id"] and sorted(planned["changes"]) == ["node01", "node02"]
    for node, res in done.items():
        assert res["pushed"] is True and res["run_id"] == doc["run_id"]
        assert sorted(c["key"] for c in res["changes"]) == sorted(c["key"] for c in doc["changes"][node])
        assert [(c["key"], c["before"], c["after"]) for c in res["changes"]] == \
            [(c["key"], c["before"], c["after"]) for c in planned["changes"][node]]
    # the hold is over: no reason left, both nodes idle again
    assert reasons(env) == {} and _idle(env) == {"node01": "idle", "node02": "idle"}
    through_slurm = snapshot_fabric(inv)
    assert through_slurm != untuned
    # parity: the Nornir engine's SSH push of the same change on the reset lab, file for file
    assert fab("lab", "reset", "-i", str(inv)).returncode == 0
    ssh = fab("apply", "-i", str(inv), "--journal-dir", str(tmp_path / "ssh"), *CHANGE[:4])
    assert ssh.returncode == 0, ssh.stdout[-2000:] + ssh.stderr[-2000:]
    assert snapshot_fabric(inv) == through_slurm


def test_node_collect_through_srun_plans_and_finds_what_the_ssh_collect_does(slurm_lab, tmp_path):
    """Each node's state document from `fabtune node collect` under the real srun (the task sees its
    node's sysroot by an absolute path, as a pod sees /host) gives the controller the same settings,
    plan and findings as its own collect over SSH."""
    from tuning import inventory
    from tuning.node_local_state import state_from_doc
    from tuning.targets import target_for

    inv, env = slurm_lab
    assert fab("lab", "reset", "-i", str(inv)).returncode == 0
    client(_env(env), "srun", "--nodelist=node01,node02", "--nodes=2", "--ntasks-per-node=1", f"--output={tmp_path}/%t.out",
           *_env(env)[NODE_COMMAND_ENV].split(), "node", "collect", "-i", str(inv), "--json")
    docs = {d["node"]: d for d in (json.loads(f.read_text()) for f in sorted(tmp_path.glob("*.out")))}
    assert sorted(docs) == ["node01", "node02"]
    for name, doc in docs.items():
        t = target_for(inventory.load(inv).devices[name])
        t.open()
        try:
            ssh = t.collect()
        finally:
            t.close()
        mine = state_from_doc(doc, name, ssh.sysroot)
        assert doc["state"]["sysroot"].endswith(f"/nodes/{name}/sysroot") and mine.current == ssh.current
        planned = [c.as_dict() for c in t.plan(mine)]
        assert planned and planned == [c.as_dict() for c in t.plan(ssh)]
        assert [f.as_dict() for f in t.findings(mine)] == [f.as_dict() for f in t.findings(ssh)]


@pytest.mark.parametrize("command, rc, said", [
    ("sh -c 'exit 4'", 4, r"srun task on node0[12]: Exited with exit code 4"),
    ("/nonexistent/bin/fabtune", 2, r"fabtune: error: node0[12]: srun task on node0[12]: Exited with exit code 2: "
     r".*execve\(\): /nonexistent/bin/fabtune: No such file or directory; set FABTUNE_NODE_COMMAND to fabtune's "
     r"path on the nodes"),
], ids=["node-exits-4", "no-such-command"])
def test_a_failed_collect_task_is_the_nodes_error_in_slurms_words_and_nothing_is_pushed(slurm_lab, tmp_path, command,
                                                                                        rc, said):
    """A node command that exits 4 (the node's shell did not answer) on every task: the run stops before
    any write, exit 4 as an unreachable node's collect over SSH, naming what srun said of the task. A
    node command the nodes do not have (execve's ENOENT under srun): bad input, exit 2, with the
    variable to set."""
    inv, env = slurm_lab
    assert fab("lab", "reset", "-i", str(inv)).returncode == 0
    untuned = snapshot_fabric(inv)
    r = fab("rollout", "-i", str(inv), "--engine", "slurm", "--journal-dir", str(tmp_path / "j"), *CHANGE,
            env={**_env(env), NODE_COMMAND_ENV: command}, timeout=300)
    assert r.returncode == rc, r.stdout[-2000:] + r.stderr[-3000:]
    assert re.search(said, r.stderr), r.stderr[-3000:]
    # at the collect, before any hold (over SSH the collect read both nodes and the push task failed instead)
    assert "slurm: collecting 2 node(s) on the nodes" in r.stderr and " holds " not in r.stderr, r.stderr[-3000:]
    assert snapshot_fabric(inv) == untuned and reasons(env) == {}


def test_a_node_changed_after_the_plan_writes_nothing_and_the_batch_is_restored(slurm_lab, tmp_path):
    """Someone sets node01's MTU between the controller's plan and the batch's push: node01's task
    finds its own plan differs from the batch's plan file and writes nothing (exit 1, naming the
    setting); the batch fails, node02 is put back; no file but the one the person wrote differs."""
    inv, env = slurm_lab
    assert fab("lab", "reset", "-i", str(inv)).returncode == 0
    untuned, jdir = snapshot_fabric(inv), tmp_path / "j"
    mtu = inv / ".state" / "nodes" / "node01" / "sysroot" / "sys/class/net/enp12s0np0/mtu"
    p = subprocess.Popen([sys.executable, "-m", "tuning", "rollout", "-i", str(inv), "--engine", "slurm",
                          "--journal-dir", str(jdir), *CHANGE, "--json"], cwd=REPO, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**_env(env), "FABTUNE_TEST_PAUSE_AT": "apply-batch-1:2"})
    line = ""
    while "test pause at apply-batch-1" not in line and p.poll() is None:
        line = p.stderr.readline()
    mtu.write_text("4200\n")  # planned, not pushed yet: a person's change
    out, err = p.communicate(timeout=240)
    assert p.returncode == 1, out[-2000:] + err[-3000:]
    doc = json.loads(out)
    assert doc["outcome"] == "rolled-back" and doc["restored"] == ["node02"], (doc["outcome"], doc["restored"])
    why = doc["errors"]["node01"]
    assert "the node is not as planned, nothing written" in why and \
        "mtu/enp12s0np0: planned '1500' -> '9000', '4200' -> '9000' now" in why, why
    assert snapshot_fabric(inv) == {**untuned, "node01:sys/class/net/enp12s0np0/mtu": b"4200\n"}
    assert reasons(env) == {} and _idle(env) == {"node01": "idle", "node02": "idle"}


def test_regression_restores_through_srun_byte_for_byte_and_another_drain_is_left_alone(slurm_lab, tmp_path):
    inv, env = slurm_lab
    assert fab("lab", "reset", "-i", str(inv)).returncode == 0
    untuned = snapshot_fabric(inv)
    client(env, "scontrol", "update", "NodeName=node02", "State=DRAIN", f"Reason={OTHER}")
    jdir = tmp_path / "j"
    try:
        p = subprocess.Popen([sys.executable, "-m", "tuning", "rollout", "-i", str(inv), "--engine", "slurm",
                              "--journal-dir", str(jdir), *CHANGE, "--max-fail-percentage", "50", "--json"],
                             cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**_env(env), "FABTUNE_TEST_PAUSE_AT": "verify-batch-1:3"})
        line, said = "", []
        while "test pause at verify-batch-1" not in line and p.poll() is None:
            line = p.stderr.readline()
            said.append(line)
        run_id = line.rsplit("(run ", 1)[-1].rstrip(")\n")
        # during the batch: node01 held and drained with this run's reason, node02 keeps its owner's
        assert reasons(env) == {"node01": f"fabtune:{run_id}: rollout batch 1/1", "node02": OTHER}
        inject(inv / ".state", "node01:mlx5_0", "degrade")  # what `fabtune lab inject` does, at once
        out, err = p.communicate(timeout=120)
    finally:
        inject(inv / ".state", "node01:mlx5_0", "clear")
        states, after = _idle(env), reasons(env)
        subprocess.run(["scontrol", "update", "NodeName=node02", "State=RESUME"], env=env, capture_output=True)
    assert p.returncode == 1, out[-2000:] + err[-3000:]
    doc = json.loads(out)
    assert doc["outcome"] == "rolled-back" and doc["restored"] == ["node01"] and doc["unreachable"] == ["node02"]
    assert doc["errors"]["node02"] == f"Slurm: node02 is drained with reason {OTHER!r}, not this run's: left alone"
    # said as what it is: not held, not "no answer" (a tryout read "left for rollback" for a node never touched)
    assert "batch 1: node02: no answer, or not held by its scheduler (each one's error says which)" in "".join(said)
    # node01 was pushed and put back by its own srun tasks, byte for byte; node02 never touched
    assert _results(jdir, run_id, "apply-b1")["node01"]["pushed"] is True
    assert _results(jdir, run_id, "restore-b1")["node01"]["restored"] == ["node01"]
    assert snapshot_fabric(inv) == untuned
    # node01 resumed (it was this run's drain), node02 still drained with its owner's reason
    assert states == {"node01": "idle", "node02": "drained"} and after == {"node02": OTHER}


#: a change that needs a boot (kernel command line, reboot_required) with the MTU it is verified on and
#: the boot files (the setup unit puts the MTU back at boot, as on a real node)
BOOT_CHANGE = ("--domain", "cmdline", "--domain", "mtu", "--domain", "files", "--min-bw", "200", "--rail", "0")
IOMMU = "kernel:\n  cmdline: {iommu: pt}\n"


def _boot_times(env: dict, timeout_s: float = 30.0) -> dict[str, str]:
    """Each node's BootTime as ``scontrol show node`` gives it, once it gives one for every node (it
    said ``BootTime=None`` for a node once, after a rollout at load ~13, and a time again later)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = {line.split()[0].split("=")[1]: line.split(" BootTime=")[1].split()[0]
               for line in client(env, "scontrol", "show", "node", "-o").splitlines()}
        if "None" not in got.values() or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def _seconds(a: str, b: str) -> float:
    """How far apart two BootTimes are, s. slurmctld computes BootTime from the uptime slurmd reports at
    each registration, in whole seconds: two reads with no reboot between them may be 1 s apart."""
    return abs((datetime.fromisoformat(a) - datetime.fromisoformat(b)).total_seconds())


def _cmdline(inv, node: str) -> list[str]:
    return (inv / ".state" / "nodes" / node / "sysroot" / "proc" / "cmdline").read_text().split()


def test_a_change_that_needs_a_boot_is_rebooted_once_by_slurm_only_with_allow_reboot(slurm_lab, tmp_path):
    """``--allow-reboot``: one ``scontrol reboot ASAP nextstate=RESUME`` per node (BootTime moved once,
    the lab's RebootProgram ran once per node), ``iommu=pt`` in the running kernel's command line, the
    MTU back from the boot unit, the run kept and the nodes resumed. Without it: the same result as the
    SSH engine (kept, exit 0, the ``reboot-required`` finding in the same words), no reboot."""
    inv, env = slurm_lab
    gv = inv / "group_vars" / "gpu_nodes.yml"
    plain = gv.read_text()
    gv.write_text(plain + IOMMU)
    try:
        runs = {}
        for name, engine, extra in (("ssh", "nornir", ()), ("slurm", "slurm", ()),
                                    ("boot", "slurm", ("--allow-reboot",))):
            assert fab("lab", "reset", "-i", str(inv)).returncode == 0
            booted = _boot_times(env)
            r = fab("rollout", "-i", str(inv), "--engine", engine, "--journal-dir", str(tmp_path / name),
                    *BOOT_CHANGE, *extra, "--json", env=_env(env), timeout=400)
            runs[name] = (r, json.loads(r.stdout) if r.stdout.startswith("{") else {}, booted, _boot_times(env),
                          {n: _cmdline(inv, n) for n in ("node01", "node02")},
                          sorted(p.name for p in (inv / ".state" / "slurm" / "log").glob("reboot.*.log")))
    finally:
        gv.write_text(plain)
    found = {}
    for name, (r, doc, booted, boots, cmdlines, _) in runs.items():
        assert r.returncode == 0 and doc["outcome"] == "kept" and not doc["errors"], name + r.stderr[-3000:]
        assert [c["effect"] for c in doc["changes"]["node01"] if c["key"] == "cmdline/iommu"] == ["reboot_required"]
        found[name] = sorted((f["device"], f["code"], f["message"]) for f in doc["findings"]
                             if f["domain"] == "cmdline")
    # without --allow-reboot: what the SSH engine gives, word for word, and no node rebooted
    why = ("iommu=pt is in the boot loader config but not in the running kernel's command line (absent): active "
           "after the next reboot")
    assert found["ssh"] == found["slurm"] == [("node01", "reboot-required", why), ("node02", "reboot-required", why)]
    for name in ("ssh", "slurm"):  # the RebootProgram never ran; BootTime as before (+-1 s: slurmctld's rounding)
        _, _, booted, boots, cmdlines, rebooted = runs[name]
        assert rebooted == [] and all(_seconds(boots[n], booted[n]) <= 1 for n in booted), (booted, boots)
        assert all("iommu=pt" not in c for c in cmdlines.values())
    # with it: one reboot per node, through Slurm's RebootProgram, the option live after it
    r, doc, booted, boots, cmdlines, rebooted = runs["boot"]
    assert rebooted == ["reboot.node01.log", "reboot.node02.log"]
    assert found["boot"] == [] and all(c[-1] == "iommu=pt" for c in cmdlines.values()), cmdlines
    assert all(boots[n] > booted[n] for n in booted), (booted, boots)
    events = [e[:2] for e in json.loads((tmp_path / "boot" / f"{doc['run_id']}.json").read_text())["events"]
              if e[0].startswith("reboot")]
    assert events[0] == ["reboot", "node01,node02: scontrol reboot ASAP nextstate=RESUME"] and len(events) == 2
    # the journal names each node's BootTime when it came back (a later read may be 1 s off: _seconds)
    said = dict(zip(("node01", "node02"), re.fullmatch(r"rebooted node01 BootTime=(\S+); node02 BootTime=(\S+)",
                                                        " ".join(events[1])).groups()))
    for node, boot in said.items():
        assert boot > booted[node] and _seconds(boots[node], boot) <= 1, (node, boot, booted, boots)
    logs = inv / ".state" / "slurm" / "log"
    for node in ("node01", "node02"):
        assert (logs / f"reboot.{node}.log").read_text().count("slurmd -b started") == 1
        nics = (inv / ".state" / "nodes" / node / "sysroot" / "sys" / "class" / "net").glob("*/mtu")
        mtus = {p.read_text().strip() for p in nics}
        assert mtus == {"9000"}, mtus  # the boot unit put the MTU back: verification passed after the boot
    assert reasons(env) == {} and _idle(env) == {"node01": "idle", "node02": "idle"}


def test_inventory_nodes_slurm_does_not_know_are_refused_before_anything(slurm_lab, tmp_path):
    """The inventory's names are not Slurm's (a copy naming node02 gpu002): exit 2 naming them and
    the names Slurm has, before the lock, the journal or any device is read."""
    import shutil

    inv, env = slurm_lab
    other = tmp_path / "renamed"
    shutil.copytree(inv, other, ignore=shutil.ignore_patterns(".state", ".fabtune*"))
    for f in [p for p in other.rglob("*") if p.is_file()]:
        f.write_text(f.read_text().replace("node02", "gpu002"))
        if "node02" in f.name:
            f.rename(f.with_name(f.name.replace("node02", "gpu002")))
    r = fab("rollout", "-i", str(other), "--engine", "slurm", "--journal-dir", str(tmp_path / "j"), *CHANGE,
            env=_env(env), timeout=120)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-3000:]
    assert r.stderr.strip().splitlines()[-1] == (
        "fabtune: error: --engine slurm: 1 inventory node(s) unknown to Slurm: gpu002 (Slurm knows node01, node02); "
        "the inventory's node names must be Slurm's NodeName")
    assert not (tmp_path / "j").exists() and not list(other.glob(".fabtune*"))


def test_a_controller_killed_in_a_batch_leaves_its_hold_in_the_journal_and_rollback_ends_it(slurm_lab, tmp_path):
    """SIGKILL of the controller while its batch is held: the allocation (no time limit) and the drains
    stay, as Slurm keeps them, and the journal names them; `fabtune rollback RUN_ID` puts the nodes
    back, cancels the job and resumes the nodes, and the journal forgets the hold."""
    import signal

    inv, env = slurm_lab
    assert fab("lab", "reset", "-i", str(inv)).returncode == 0
    untuned, jdir = snapshot_fabric(inv), tmp_path / "j"
    p = subprocess.Popen([sys.executable, "-m", "tuning", "rollout", "-i", str(inv), "--engine", "slurm",
                          "--journal-dir", str(jdir), *CHANGE], cwd=REPO, text=True, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env={**_env(env), "FABTUNE_TEST_PAUSE_AT": "verify-batch-1"})
    try:
        line = ""
        while "test pause at verify-batch-1" not in line and p.poll() is None:
            line = p.stderr.readline()
        run_id = line.rsplit("(run ", 1)[-1].rstrip(")\n")
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    journal = json.loads((jdir / f"{run_id}.json").read_text())
    [(job, hold)] = journal["slurm_holds"].items()
    reason = f"fabtune:{run_id}: rollout batch 1/1"
    assert hold == {"nodes": ["node01", "node02"], "drained": {"node01": reason, "node02": reason}}
    # what a killed controller leaves: its job running, both nodes drained with its reason, both changed
    assert client(env, "squeue", "-h", "-o", "%i %j %T").split() == [job, f"fabtune:{run_id}", "RUNNING"]
    assert reasons(env) == {"node01": reason, "node02": reason}
    assert snapshot_fabric(inv) != untuned
    [row] = json.loads(fab("runs", "--journal-dir", str(jdir), "--json").stdout)
    assert (row["engine"], row["holds"]) == ("slurm", [f"Slurm job {job} (node01, node02)"])
    r = fab("rollback", run_id, "--journal-dir", str(jdir), timeout=300, env=_env(env))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert f"slurm: ending job {job} the run left (nodes node01, node02)" in r.stderr
    # what ended is said on stdout beside the outcome (a tryout: only "the run changed nothing" was)
    assert f"ended what run {run_id} held outside its devices: Slurm job {job} (node01, node02)" in r.stdout
    assert snapshot_fabric(inv) == untuned
    deadline = time.monotonic() + 15  # a cancelled job shows COMPLETING until slurmd has ended it
    while client(env, "squeue", "-h", "-o", "%i").split() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert client(env, "squeue", "-h", "-o", "%i %T").split() == [] and reasons(env) == {}
    assert _idle(env) == {"node01": "idle", "node02": "idle"}
    assert "slurm_holds" not in json.loads((jdir / f"{run_id}.json").read_text())
    assert json.loads(fab("runs", "--journal-dir", str(jdir), "--json").stdout)[0]["holds"] == []


def test_an_allocation_asked_for_by_a_killed_controller_is_ended_by_rollback_never_under_a_live_one(slurm_lab,
                                                                                                    tmp_path):
    """A busy node makes the batch's ``salloc`` wait; SIGKILL of the controller then leaves salloc
    waiting, and Slurm grants it later: a job of no time limit holding the nodes that no hold in the
    journal names (a tryout: rollback said "the run changed nothing", the job stayed). The request is
    journaled before salloc: `fabtune rollback RUN_ID` refuses while the controller lives (exit 2,
    naming it) and, once it is gone, cancels the run's job by name; nothing was pushed."""
    import signal

    inv, env = slurm_lab
    assert fab("lab", "reset", "-i", str(inv)).returncode == 0
    untuned, jdir = snapshot_fabric(inv), tmp_path / "j"
    busy = subprocess.Popen(["srun", "-w", "node01", "-N1", "--job-name=user-job", "sleep", "120"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p = subprocess.Popen([sys.executable, "-m", "tuning", "rollout", "-i", str(inv), "--engine", "slurm",
                          "--journal-dir", str(jdir), *CHANGE], cwd=REPO, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=_env(env))
    try:
        deadline, jobs = time.monotonic() + 60, []
        while not any(name.startswith("fabtune:2") for _, name, _ in jobs) and time.monotonic() < deadline:
            time.sleep(0.2)
            jobs = [tuple(x.split()) for x in client(env, "squeue", "-h", "-o", "%i %j %T").splitlines()]
        [(job, name, state)] = [x for x in jobs if x[1].startswith("fabtune:2")]
        run_id = name.split(":", 1)[1]
        assert state == "PENDING" and p.poll() is None
        r = fab("rollback", run_id, "--journal-dir", str(jdir), env=_env(env))
        assert r.returncode == 2 and f"another run holds this inventory: run {run_id} (rollout, pid {p.pid}" in r.stderr
        assert client(env, "squeue", "-h", "-n", name, "-o", "%i %T").split() == [job, "PENDING"]
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        [row] = json.loads(fab("runs", "--journal-dir", str(jdir), "--json").stdout)  # the request is shown
        assert row["holds"] == ["a Slurm allocation asked for (node01, node02)"], row
        r = fab("rollback", run_id, "--journal-dir", str(jdir), env=_env(env))
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        assert f"slurm: ending job {job} the run left (asked for before its controller ended)" in r.stderr
        assert f"ended what run {run_id} held outside its devices: a Slurm allocation asked for (node01, node02)" in r.stdout
        assert "slurm_request" not in json.loads((jdir / f"{run_id}.json").read_text())
    finally:
        p.kill()
        subprocess.run(["scancel", "-n", "user-job"], env=env, timeout=30)
        busy.wait(timeout=30)
    deadline = time.monotonic() + 15  # nothing of the run is granted once the busy job ends
    while client(env, "squeue", "-h", "-o", "%i").split() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert client(env, "squeue", "-h", "-o", "%i %j").split() == [] and reasons(env) == {}
    assert snapshot_fabric(inv) == untuned
