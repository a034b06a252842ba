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


def _fab(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuning", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env={"PATH": "/usr/bin:/bin"})


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
    # on an 80-column terminal (a real one: script(1)'s pty) the tables fold to its width, the findings
    # into fewer columns; piped, 160 columns
    tty = subprocess.run(["script", "-qec", f"stty cols 80 rows 50; {sys.executable} -m tuning plan -i {module_lab}",
                          "/dev/null"], capture_output=True, text=True, timeout=120, cwd=REPO)
    shown = [re.sub(r"\x1b\[[0-9;]*m", "", ln) for ln in tty.stdout.replace("\r", "").splitlines()]
    assert tty.returncode == 0 and len(shown) < 60, "\n".join(shown)
    assert max(len(ln) for ln in shown if ln[:1] in "┏┃┡│└") <= 80 and "evidence: --json" in tty.stdout
    text = _fab("plan", "-i", str(module_lab))
    lines = (text.stdout + text.stderr).splitlines()
    assert text.returncode == 0 and len(lines) < 60 and max(len(ln) for ln in lines if ln[:1] in "┏┃┡│└") <= 160
    doc = json.loads(_fab("plan", "-i", str(module_lab), "--json").stdout)
    want: Counter = Counter()
    for items in doc["changes"].values():
        want.update(c["domain"] for c in items)
    rows = {m[1]: int(m[3]) for m in re.finditer(r"│ (\w+)\s+│ (\d+)\s+│ (\d+)\s+│", text.stdout)}
    assert rows == dict(want) and sum(want.values()) > 400, (rows, want)
    assert f"summary of {sum(want.values())} change(s)" in text.stdout
    detail = _fab("plan", "-i", str(module_lab), "--detail").stdout
    rows = Counter((m[1], m[2]) for m in re.finditer(r"^│ (\w+)\s+│ \w+\s+│ (\S+)\s+│", detail, re.M))
    keys = Counter((dev, c["key"]) for dev, items in doc["changes"].items() for c in items if c["domain"] != "irq")
    assert rows & keys == keys and len(keys) > 300  # every setting a row (a NIC's IRQs are one row: 8 -> 1)


def test_a_rollout_refuses_a_drifted_read_only_switch_and_keeps_its_hands_off_a_held_one(lab_inventory: Path,
                                                                                         tmp_path: Path):
    inv, journal = lab_inventory, tmp_path / "j"
    _read_only(inv)
    with _driver(inv, "leaf02") as person:
        person.load_candidate(PERSONS_EDIT)
        revision = person.current_revision()
    plan = json.loads(_fab("plan", "-i", str(inv), "--json").stdout)
    assert plan["changes"].get("leaf02", []) == [] and plan["changes"]["leaf01"]
    assert sum(f["code"] == "switch-drift" and f["device"] == "leaf02" for f in plan["findings"]) == 16
    only = _fab("plan", "-i", str(inv), "--limit", "leaf02").stdout.splitlines()[-1]
    assert only.startswith("0 changes fabtune would make; leaf02 (manage: false) does not hold what the inventory says")
    lint = json.loads(_fab("lint", "-i", str(inv), "--json").stdout)["findings"]
    fixes = {f["fix"] for f in lint if f["rule"] == "live-pfc" and "leaf02" in f["devices"]}
    assert fixes == {"the switch is manage: false (fabtune never writes it): have its owners set it, or make its "
                     "host_vars say what it runs"}, lint

    # the untuned leaf02 carries no lossless class: the nodes behind it would rely on what it lacks
    res = _fab("rollout", "-i", str(inv), "--journal-dir", str(journal))
    errors = [ln for ln in res.stderr.splitlines() if not ln.startswith("...")]
    assert res.returncode == 2 and len(errors) == 1, res.stdout[-800:] + res.stderr[-800:]
    assert "leaf02: 16 setting(s) (roce/mode, roce/trust, roce/dscp/26, ...)" in errors[0]
    assert errors[0].endswith("nothing was pushed") and not list(journal.glob("2*.json"))

    # its owners tune it (here: the same inventory with leaf02 managed, once); then a rollout keeps
    # the nodes and the other switches, and neither it nor its rollback writes leaf02
    (inv / "host_vars/leaf02.yml").write_text((inv / "host_vars/leaf02.yml").read_text().replace("manage: false\n", ""))
    with _driver(inv, "leaf02") as person:
        person.discard()
    assert _fab("apply", "-i", str(inv), "--limit", "leaf02", "--journal-dir", str(tmp_path / "net")).returncode == 0
    _read_only(inv)
    with _driver(inv, "leaf02") as person:
        person.load_candidate(PERSONS_EDIT)
        revision = person.current_revision()
    res = _fab("rollout", "-i", str(inv), "--journal-dir", str(journal), "--no-incast")
    assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-800:]
    (run,) = [p.stem for p in journal.glob("*.json") if p.stem != "baseline"]
    record = json.loads((journal / f"{run}.json").read_text())["devices"]["leaf02"]
    assert record["manage"] is False and not record.get("applied")
    rep = _fab("report", run, "--journal-dir", str(journal), "--json")  # the journal check takes `manage`
    assert rep.returncode == 0 and json.loads(rep.stdout)["outcome"] == "kept", rep.stdout[-600:]
    rb = _fab("rollback", run, "--journal-dir", str(journal))
    assert rb.returncode == 0 and "leaf02" not in rb.stdout.split("restored:")[-1].split("\n")[0], rb.stdout[-800:]
    with _driver(inv, "leaf02") as person:
        assert person.current_revision() == revision
        assert "mtu: 4000" in person.compare(), "the person's staged edit was discarded"
