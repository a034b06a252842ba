"""The SM Target over the real OpenSM 3.3.23 of the IB lab (issue 22): plan = the diff against what
the ports hold, push = partitions.conf written and SIGHUP, read back from the ports' pkey tables
(smpquery, independently of the target here), restore from the journal record alone.

One 2-node lab (16 HCA ports) for the module; every test restores what it pushed, so they pass in
any order. The SM's shell is the lab's (:meth:`tuning.lab.ib.IbLab.sm_shell`); the inventory is a
real one loaded by :func:`tuning.inventory.load`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tuning import inventory
from tuning.errors import CommitError
from tuning.lab.fabric import default_fabric
from tuning.lab.ib import SM_PATHS, IbLab
from tuning.model.outcomes import DeviceState
from tuning.parsers.ib_sm import parse_pkeys, parse_sminfo
from tuning.rollout.journal import Journal
from tuning.targets import journaled_connection, target_for
from tuning.targets import sm_partitions as sp
from tuning.targets.sm import SmTarget

pytestmark = pytest.mark.lab

DEFAULT = {"name": "Default", "pkey": 0x7FFF, "ipoib": True, "members": {"ALL": "full"}}
TENANT = {"name": "tenant1", "pkey": 0x0001, "ipoib": True, "mtu": 5, "sl": 3,
          "members": {"node01": "full", "node02": "limited"}}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = IbLab(tmp_path_factory.mktemp("smlab"), default_fabric(n_nodes=2))
    lab.up()
    yield lab
    assert lab.down()


def sm_target(lab: IbLab, root: Path, sm_vars: dict, local: bool = False) -> SmTarget:
    """The inventory's SM (the lab's OpenSM files, its folder as the sysroot) on the lab's shell;
    ``local``: the inventory says ``fabtune_local`` (the SM is the controller)."""
    inv = root / "inv"
    (inv / "host_vars").mkdir(parents=True, exist_ok=True)
    hosts = {"sm01": {"ansible_host": "127.0.0.1", "fabtune_sysroot": str(lab.dir), **({"fabtune_local": True} if local else {})}}
    (inv / "hosts.yaml").write_text(yaml.safe_dump({"all": {"children": {"subnet_managers": {"hosts": hosts}}}}))
    (inv / "host_vars" / "sm01.yml").write_text(yaml.safe_dump({**SM_PATHS, **sm_vars}, sort_keys=False))
    dev = inventory.load(inv).devices["sm01"]
    assert type(target_for(dev)) is SmTarget
    return SmTarget(dev.name, dev.connection, dev.spec.platform, device=dev, host=lab.sm_shell())


def all_pkeys(lab: IbLab) -> dict[str, list[str]]:
    """Every HCA port's used pkey entries, read with smpquery in one shell (not through the target)."""
    guids = [f"{h.port_guid:#018x}" for h in lab.topology.hcas]
    out = lab.sm_shell().run(f"for g in {' '.join(guids)}; do echo \"== $g\"; smpquery pkeys -G $g 1 || exit; done",
                             privileged=False)
    assert out.rc == 0, out.stderr
    tables = {c.split("\n", 1)[0]: c.split("\n", 1)[1] for c in out.stdout.split("== ")[1:]}
    return {h.node_id: [e.raw for e in parse_pkeys(tables[f"{h.port_guid:#018x}"]).entries] for h in lab.topology.hcas}


def pkeys(lab: IbLab, node_id: str) -> list[str]:
    """A port's used pkey table entries as smpquery prints them (``0xffff``, ``0x8001``)."""
    table = parse_pkeys(lab.run("smpquery", "pkeys", "-G", hex(lab.topology.hca(node_id).port_guid), "1"))
    return [e.raw for e in table.entries]


def start(lab: IbLab, root: Path, sm_vars: dict):
    """The lab as it is, the SM target, its collected state, a journal holding its snapshot, its plan."""
    before = lab_before(lab)
    t = sm_target(lab, root, sm_vars)
    state = t.collect()
    j = Journal.create(root / "journal", str(root / "inv"), "rollout")
    j.update(t.name, **t.record(state))
    return before, t, state, j, t.plan(state)


def restored_from_journal(lab: IbLab, j: Journal, before: dict) -> None:
    """Restore from the journal record alone and check the files and pkey tables byte for byte."""
    rec = Journal.load(j.path.parent, j.run_id).device("sm01")
    t = SmTarget("sm01", journaled_connection("sm01", rec), rec["platform"], host=lab.sm_shell())
    assert t.preflight(rec) is None and t.restore(rec) == []
    assert (lab.dir / "partitions.conf").read_bytes() == before["partitions"]
    assert (lab.dir / "opensm.conf").read_bytes() == before["conf"]
    assert all_pkeys(lab) == before["pkeys"]


def lab_before(lab: IbLab) -> dict:
    return {"partitions": (lab.dir / "partitions.conf").read_bytes(), "conf": (lab.dir / "opensm.conf").read_bytes(),
            "pkeys": all_pkeys(lab)}


def test_a_tenant_partition_is_planned_pushed_read_back_kept_and_restored(lab, tmp_path):
    sm_vars = {"sm_priority": 5, "routing_engine": "minhop", "partitions": [DEFAULT, TENANT]}
    before, t, state, j, changes = start(lab, tmp_path, sm_vars)
    moves = {(c.key, c.before, c.after) for c in changes if c.key.startswith("pkey/")}
    assert ("pkey/node01 mlx5_3/1/0x0001", None, "full") in moves and ("pkey/node02 mlx5_7/1/0x0001", None, "limited") in moves
    assert len(moves) == 16 and t.findings(state) == []
    assert [(c.key, c.before, c.after) for c in changes if not c.key.startswith("pkey/")][1:] == [("sm_priority", "0", "5")]
    assert t.push(changes, j.of("sm01")) == changes and j.device("sm01")["state"] == DeviceState.APPLIED
    # read back here without the target: the real OpenSM programmed the ports
    assert (pkeys(lab, "node01-mlx5_0"), pkeys(lab, "node02-mlx5_0")) == (["0xffff", "0x8001"], ["0xffff", "0x0001"])
    assert parse_sminfo(lab.run("sminfo")).priority == 5
    assert (lab.dir / "partitions.conf").read_text() == changes[0].after
    # the second push changes nothing and says so; the path record shows what ibsim's ports and QoS off allow
    after = t.collect()
    assert t.plan(after) == [] and t.push([], j.of("sm01")) == []
    assert [(f.code, f.evidence.split(": ", 1)[1]) for f in t.findings(after)] == [
        ("ib-path-mtu", "mtu 2048, sl 0"), ("ib-path-sl", "mtu 2048, sl 0")]
    assert j.device("sm01")["state"] == DeviceState.UNCHANGED
    restored_from_journal(lab, j, before)


def test_a_policy_dropping_the_default_rule_is_caught_in_the_plan_and_restored(lab, tmp_path):
    before, t, state, j, changes = start(lab, tmp_path, {"partitions": [TENANT]})
    [f] = t.findings(state)
    assert f.code == "ib-default-limited" and f.message.startswith("16 HCA port(s) would become limited members")
    assert ("pkey/node02 mlx5_5/1/0x7fff", "full", "limited") in {(c.key, c.before, c.after) for c in changes}
    t.push(changes, j.of("sm01"))
    assert pkeys(lab, "node02-mlx5_5") == ["0x7fff", "0x0001"]  # limited in Default and in tenant1
    restored_from_journal(lab, j, before)


def test_a_partitions_conf_opensm_refuses_fails_the_push_with_its_log_and_is_restored(lab, tmp_path):
    before, t, state, j, changes = start(lab, tmp_path, {"partitions": [DEFAULT, TENANT]})
    # a definition OpenSM's parser refuses (a pkey that is no number), as a hand-edited plan would carry it
    changes[0] = dataclasses.replace(changes[0], after=changes[0].after + "broken=0xzz : ALL=full ;\n")
    with pytest.raises(CommitError, match=r"OpenSM refused the new files: parse_part_conf: PARSE ERROR: line 4: "
                                          r"bad partition definition / osm_prtn_make_partitions: Partition "
                                          r"configuration in error; retrying with default config"):
        t.push(changes, j.of("sm01"))
    assert j.device("sm01")["state"] == DeviceState.FAILED
    assert pkeys(lab, "node01-mlx5_0") == ["0xffff"]  # OpenSM fell back to its default policy
    restored_from_journal(lab, j, before)


def test_a_symlink_in_place_of_partitions_conf_is_never_written_through(lab, tmp_path):
    before, t, state, j, changes = start(lab, tmp_path, {"partitions": [DEFAULT, TENANT]})
    target = tmp_path / "elsewhere.conf"
    target.write_text("untouched\n")
    (lab.dir / "partitions.conf").rename(tmp_path / "kept.conf")
    (lab.dir / "partitions.conf").symlink_to(target)
    try:
        with pytest.raises(CommitError, match="partitions.conf is not a regular file: not written"):
            t.push(changes, j.of("sm01"))
        assert target.read_text() == "untouched\n" and (lab.dir / "partitions.conf").is_symlink()
    finally:
        (lab.dir / "partitions.conf").unlink()
        (tmp_path / "kept.conf").rename(lab.dir / "partitions.conf")
    assert lab_before(lab) == before
    assert sp.FILE_KEY == changes[0].key


#: a controller that opens the inventory's SM as the engine does (``fabtune_local``: a local shell,
#: the lab's IB tools on PATH), collects, journals the snapshot and pushes, in its own process
CONTROLLER = """
import sys
from pathlib import Path
from tuning import inventory
from tuning.rollout.journal import Journal
from tuning.targets import target_for
inv, journal_dir = sys.argv[1:3]
t = target_for(inventory.load(inv).devices["sm01"])
t.open()
state = t.collect()
j = Journal.create(Path(journal_dir), inv, "rollout")
j.update("sm01", **t.record(state))
print(j.run_id, flush=True)
t.push(t.plan(state), j.of("sm01"))
"""


def test_a_controller_killed_mid_push_is_restored_by_fabtune_rollback(lab, tmp_path):
    """Killed after OpenSM took the new file, before the read back was journaled: the journal says
    ``pushing``, and ``fabtune rollback RUN_ID`` puts files and pkey tables back from it alone."""
    before = lab_before(lab)
    sm_target(lab, tmp_path, {"sm_priority": 3, "partitions": [DEFAULT, TENANT]}, local=True)
    env = {**os.environ, "PATH": f"{lab.tools_dir}{os.pathsep}{os.environ['PATH']}"}
    child = subprocess.Popen([sys.executable, "-c", CONTROLLER, str(tmp_path / "inv"), str(tmp_path / "journal")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**env, "FABTUNE_TEST_PAUSE_AT": "apply-sm"})
    try:
        run_id = child.stdout.readline().strip()
        assert "fabtune: test pause at apply-sm" in child.stderr.readline()
    finally:
        child.kill()
        child.wait()
    rolled_back_mid_push(lab, tmp_path, env, run_id, before)


def rolled_back_mid_push(lab: IbLab, root: Path, env: dict, run_id: str, before: dict) -> None:
    """A run killed after OpenSM took the new file (journal ``pushing``): ``fabtune rollback RUN_ID``
    in a new process puts the files and every port's pkey table back as ``before``."""
    assert pkeys(lab, "node02-mlx5_0") == ["0xffff", "0x0001"]  # OpenSM serves the new policy
    assert Journal.load(root / "journal", run_id).device("sm01")["state"] == DeviceState.PUSHING
    done = subprocess.run([sys.executable, "-m", "tuning", "rollback", run_id, "-i", str(root / "inv"),
                           "--journal-dir", str(root / "journal")], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert lab_before(lab) == before


def fabtune(env: dict, *args: str) -> dict:
    """``fabtune ARGS --json`` in a new process; its JSON report (exit 0 asserted)."""
    done = subprocess.run([sys.executable, "-m", "tuning", *args, "--json"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(done.stdout)


def test_fabtune_plan_and_apply_drive_the_labs_opensm(lab, tmp_path):
    """The engine's own path: the inventory's SM opened as ``fabtune_local`` (the lab's IB tools on
    PATH): plan shows the diff and the Default-rule finding, writing nothing; apply pushes and reads
    back; the journal restores byte for byte (``fabtune rollback``: the killed-controller test; a
    second push that changes nothing: the tenant test)."""
    before = lab_before(lab)
    sm_target(lab, tmp_path, {"sm_priority": 5, "partitions": [TENANT]}, local=True)
    env = {**os.environ, "PATH": f"{lab.tools_dir}{os.pathsep}{os.environ['PATH']}"}
    inv, jdir = ["-i", str(tmp_path / "inv")], ["--journal-dir", str(tmp_path / "journal")]
    report = fabtune(env, "plan", *inv)
    keys = {(c["key"], c["before"], c["after"]) for c in report["changes"]["sm01"]}
    assert {("sm_priority", "0", "5"), ("pkey/node01 mlx5_2/1/0x0001", None, "full"),
            ("pkey/node01 mlx5_2/1/0x7fff", "full", "limited")} <= keys and len(keys) == 1 + 16 + 16 + 1
    assert [f["code"] for f in report["findings"]] == ["ib-default-limited"]
    assert (lab.dir / "partitions.conf").read_bytes() == before["partitions"]
    applied = fabtune(env, "apply", *inv, *jdir)
    assert (applied["outcome"], len(applied["changes"]["sm01"])) == ("applied", len(keys))
    assert pkeys(lab, "node02-mlx5_0") == ["0x7fff", "0x0001"]  # limited in Default and in tenant1
    restored_from_journal(lab, Journal.load(tmp_path / "journal", applied["run_id"]), before)


def hup_and_wait_sweep(lab: IbLab) -> None:
    """SIGHUP the lab's OpenSM and wait until its heavy sweep rewrote opensm-subnet.lst."""
    lst = lab.dir / "opensm-subnet.lst"
    before = lst.stat().st_mtime_ns
    os.kill(int((lab.dir / "opensm.pid").read_text()), signal.SIGHUP)
    deadline = time.monotonic() + 15
    while lst.stat().st_mtime_ns == before:
        assert time.monotonic() < deadline, "no heavy sweep within 15 s of SIGHUP"
        time.sleep(0.05)


def test_a_push_sees_the_sweep_when_opensm_keeps_its_log_in_its_buffer(lab, tmp_path):
    """OpenSM's default ``force_log_flush FALSE`` keeps SUBNET UP in its buffer (the lab's own default is
    TRUE): push and restore see the sweep end by opensm-subnet.lst and read back as before."""
    conf = lab.dir / "opensm.conf"
    flushed = conf.read_text()
    conf.write_text(flushed.replace("force_log_flush TRUE", "force_log_flush FALSE"))
    hup_and_wait_sweep(lab)
    try:
        before, t, state, j, changes = start(lab, tmp_path, {"partitions": [DEFAULT, TENANT]})
        log = lab.dir / "opensm.log"
        ups, started = log.read_text().count("SUBNET UP"), time.monotonic()
        assert t.push(changes, j.of("sm01")) == changes and time.monotonic() - started < 10
        assert log.read_text().count("SUBNET UP") == ups  # the sweep's INFO lines are still buffered
        assert pkeys(lab, "node02-mlx5_0") == ["0xffff", "0x0001"]
        restored_from_journal(lab, j, before)
    finally:
        conf.write_text(flushed)
        hup_and_wait_sweep(lab)


def test_more_partitions_than_a_pkey_table_holds_is_said_in_the_plan_and_a_push_of_them_fails_and_is_restored(lab, tmp_path):
    """70 tenant partitions on node01 (71 pkeys with Default) over ibsim's 64-entry P_Key tables:
    the plan says so before the push, naming the ports, what they would need and what they hold; a
    push anyway fails with OpenSM's own ERR 0512 lines (it programmed what fits and dropped the rest)
    and the journal restores every file and table."""
    tenants = [{"name": f"t{i}", "pkey": 0x0100 + i, "members": {"node01": "full"}} for i in range(70)]
    before, t, state, j, changes = start(lab, tmp_path, {"partitions": [DEFAULT, *tenants]})
    assert set(state["pkey_caps"].values()) == {64} and len(state["pkey_caps"]) == 16
    [f] = t.findings(state)
    assert f.code == "ib-pkey-table-full" and f.message.startswith(
        "8 HCA port(s) would be members of more partitions than their P_Key table holds: "
        "node01 mlx5_0/1 (71 pkeys, holds 64), node01 mlx5_1/1 (71 pkeys, holds 64)")
    assert f.evidence.startswith("smpquery pkeys: node01 mlx5_0/1: 64 pkeys capacity for this port")
    with pytest.raises(CommitError, match=r"OpenSM refused the new files: pkey_mgr_update_port: ERR 0512: Failed to "
                                          r"set PKey 0x8\w+ because Pkey table is full for node 0x0c42a10300000100 "
                                          r"port 1 \(node01 mlx5_0\)"):
        t.push(changes, j.of("sm01"))
    assert j.device("sm01")["state"] == DeviceState.FAILED
    assert len(pkeys(lab, "node01-mlx5_0")) == 64  # the table is full: 7 partitions are missing
    restored_from_journal(lab, j, before)
