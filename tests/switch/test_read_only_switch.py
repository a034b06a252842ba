"""Issue 19, read-only switches: a switch the inventory keeps with ``manage: false`` is read (lint,
verification, ``switch-drift`` findings) and never written: no candidate staged or discarded (a
person's pending edit survives), no plan, a push refused, a restore from the journal touching
nothing; and the 4-node lab's plan fits one screen. Real SSH to the lab's NVUE switches."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.switch.conftest import leaf
from tuning.errors import InputError
from tuning.node.base import Change
from tuning.switch.nvue import NvueDriver
from tuning.targets import target_for, target_from_record

pytestmark = pytest.mark.lab

PERSONS_EDIT = "nv set interface swp5 link mtu 4000\n"


def _fab(*args: str, timeout: float = 400, columns: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuning", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env={"COLUMNS": str(columns), "PATH": "/usr/bin:/bin"})


def _driver(inv: Path, name: str) -> NvueDriver:
    c = leaf(inv, name).connection
    return NvueDriver(c.hostname, port=c.port, username=c.username, key_file=c.key_file,
                      known_hosts=c.known_hosts, name=name)


def _read_only(inv: Path, name: str = "leaf02") -> None:
    path = inv / "host_vars" / f"{name}.yml"
    path.write_text(path.read_text() + "manage: false\n")


class _Journal:
    run_id = "t-read-only"

    def __init__(self):
        self.rec: dict = {}

    def get(self) -> dict:
        return dict(self.rec)

    def update(self, **fields) -> None:
        self.rec.update(fields)


def test_a_read_only_switch_is_read_never_written(module_lab: Path):
    dev = leaf(module_lab, "leaf02", manage=False)
    with _driver(module_lab, "leaf02") as person:  # the network team's edit, staged and not applied
        person.load_candidate(PERSONS_EDIT)
        revision = person.current_revision()
    target = target_for(dev)
    target.open()
    try:
        state = target.collect()
        assert target.plan(state) == []
        drift = {f.evidence.split(":")[0]: f.evidence for f in target.findings(state) if f.code == "switch-drift"}
        # the untuned lab leaf runs MTU 9216 (NVUE's default) and carries no RoCE configuration
        assert drift["roce/mode"] == "roce/mode: applied not set, inventory lossless"
        assert drift["roce/dscp/26"] == "roce/dscp/26: applied not set, inventory 3"
        assert not any(k.startswith("port/") or k.startswith("swp") for k in drift), drift
        record = target.record(state)
        assert record["manage"] is False and record["revision_before"] == revision
        with pytest.raises(InputError, match="leaf02 is manage: false: fabtune never writes it"):
            target.push([Change("leaf02", "switch", "port/swp1/mtu", "9216", "9000")], _Journal(), 600)
    finally:
        target.close()
    restorer = target_from_record("leaf02", {**record, "state": "applied", "revision": revision})
    restorer.open()
    try:  # a restore from the journal alone: a managed switch's would discard the staged edit
        assert restorer.preflight(record) is None
        assert restorer.restore({**record, "state": "applied", "revision": revision}) == []
    finally:
        restorer.close()
    with _driver(module_lab, "leaf02") as person:
        assert person.current_revision() == revision
        assert "mtu: 4000" in person.compare(), "the person's staged edit was discarded"
        person.discard()


def test_the_4_node_lab_plan_fits_one_screen_and_counts_as_the_json(module_lab: Path):
    text = _fab("plan", "-i", str(module_lab))
    assert text.returncode == 0, text.stderr[-800:]
    lines = (text.stdout + text.stderr).splitlines()
    assert len(lines) < 60, "\n".join(lines)
    doc = json.loads(_fab("plan", "-i", str(module_lab), "--json").stdout)
    want: Counter = Counter()
    for items in doc["changes"].values():
        want.update(c["domain"] for c in items)
    rows = {m[1]: int(m[3]) for m in re.finditer(r"│ (\w+)\s+│ (\d+)\s+│ (\d+)\s+│", text.stdout)}
    assert rows == dict(want) and sum(want.values()) > 400, (rows, want)
    assert f"summary of {sum(want.values())} change(s)" in text.stdout
    detail = _fab("plan", "-i", str(module_lab), "--detail", columns=250).stdout
    rows = Counter((m[1], m[2]) for m in re.finditer(r"^│ (\w+)\s+│ \w+\s+│ (\S+)\s+│", detail, re.M))
    keys = Counter((dev, c["key"]) for dev, items in doc["changes"].items() for c in items if c["domain"] != "irq")
    assert rows & keys == keys and len(keys) > 300  # every setting a row (a NIC's IRQs are one row: 8 -> 1)


def test_a_rollout_keeps_its_hands_off_a_read_only_switch(lab_inventory: Path, tmp_path: Path):
    _read_only(lab_inventory)
    with _driver(lab_inventory, "leaf02") as person:
        person.load_candidate(PERSONS_EDIT)
        revision = person.current_revision()
    plan = json.loads(_fab("plan", "-i", str(lab_inventory), "--json").stdout)
    assert plan["changes"].get("leaf02", []) == [] and plan["changes"]["leaf01"]
    assert sum(f["code"] == "switch-drift" and f["device"] == "leaf02" for f in plan["findings"]) == 16

    # the lab fabric runs leaf02 lossy: the rollout's verification sees it, names it, restores its own
    res = _fab("rollout", "-i", str(lab_inventory), "--journal-dir", str(tmp_path / "j"))
    assert res.returncode == 1 and "common switch leaf02" in res.stdout, res.stdout[-1500:] + res.stderr[-800:]
    assert "restored: leaf01, node01, node02, node03, node04, spine01 (" in res.stdout, res.stdout[-800:]
    (run,) = [p.stem for p in (tmp_path / "j").glob("*.json") if p.stem != "baseline"]
    journal = json.loads((tmp_path / "j" / f"{run}.json").read_text())
    assert journal["devices"]["leaf02"]["manage"] is False and not journal["devices"]["leaf02"].get("applied")
    rep = _fab("report", run, "--journal-dir", str(tmp_path / "j"), "--json")  # the journal check takes `manage`
    assert rep.returncode == 0 and json.loads(rep.stdout)["outcome"] == "rolled-back", rep.stdout[-600:]
    with _driver(lab_inventory, "leaf02") as person:
        assert person.current_revision() == revision
        assert "mtu: 4000" in person.compare(), "the person's staged edit was discarded"
