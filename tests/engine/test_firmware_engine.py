"""The engine's side of irreversible changes, over real SSH against the lab: the plan says which
changes are pending a reset and not undone by an automatic rollback; a rollback keeps NIC
firmware values and says so; ``rollback --firmware`` puts them back byte for byte; a firmware burn
is refused without ``--allow-firmware`` before anything is pushed; findings reach the report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import running_lab
from tests.node.conftest import node_files
from tuning import inventory
from tuning.errors import InputError
from tuning.rollout import engine
from tuning.rollout.engine import Options
from tuning.rollout.rollback import rollback_run

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with running_lab(tmp_path_factory.mktemp("fwlab")) as inv:
        yield inv


def _profile(inv: Path, host: str, firmware: dict) -> None:
    path = inv / "host_vars" / f"{host}.yml"
    data = yaml.safe_load(path.read_text())
    data["firmware"] = firmware
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _hw(inv: Path, host: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((inv / ".state/nodes" / host / "sysroot/hw/nic").glob("*.json"))}


def test_plan_marks_firmware_pending_and_not_undone(lab):
    _profile(lab, "node01", {"mlxconfig": {"SRIOV_EN": "True"}})
    out = subprocess.run([sys.executable, "-m", "tuning", "plan", "-i", str(lab), "--limit", "node01",
                          "--domain", "firmware"], capture_output=True, text=True, timeout=120,
                         env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if "mlxconfig/0000:0c:00.0/SRIOV_EN" in line]
    assert len(rows) == 1, out.stdout
    cells = [c.strip() for c in rows[0].split("│")]
    assert cells[4:6] == ["False(0)", "True"], rows[0]
    assert "takes effect" in out.stdout and cells[6].startswith("pending reset"), out.stdout
    assert "8 change(s) planned, nothing pushed" in out.stdout


def test_rollback_keeps_firmware_then_rollback_firmware_restores_the_flash(lab, tmp_path):
    _profile(lab, "node01", {"mlxconfig": {"SRIOV_EN": "True"}})
    before_hw, before_files = _hw(lab, "node01"), node_files(lab / ".state/nodes/node01/sysroot")
    jdir = tmp_path / "j"
    rep = engine.run(inventory.load(lab), Options(mode="apply", limit=["node01"], journal_dir=jdir,
                                                  domains={"firmware"}))
    assert rep.outcome == "applied" and rep.n_changes == 8
    assert _hw(lab, "node01") != before_hw
    back = rollback_run(jdir, rep.run_id)
    assert back.outcome == "rolled-back"
    assert sorted(c["key"] for c in back.kept["node01"]) == sorted(c["key"] for c in rep.changes["node01"])
    assert {c["after"] for c in back.kept["node01"]} == {"True"}
    assert _hw(lab, "node01") != before_hw  # kept: the NIC flash still holds the new Next Boot values
    again = rollback_run(jdir, rep.run_id)  # nothing reversible left: says so, touches nothing
    assert again.outcome == "no-change" and "already rolled back" in again.errors["run"]
    fw = rollback_run(jdir, rep.run_id, firmware=True)
    assert fw.outcome == "rolled-back" and fw.kept == {}
    assert _hw(lab, "node01") == before_hw  # byte for byte
    assert node_files(lab / ".state/nodes/node01/sysroot") == before_files


def test_firmware_burn_needs_allow_firmware_and_nothing_is_pushed(lab, tmp_path):
    images = lab / ".state/nodes/node02/sysroot/usr/local/share/mlnx-fw"
    images.mkdir(parents=True, exist_ok=True)
    (images / "fw-ConnectX7-rel-28_42_1000-MCX75310AAS-NEA_Ax.bin").write_text("LABFW MT_0000000834 28.42.1000\n")
    _profile(lab, "node02", {"version": "28.42.1000", "image_dir": "/usr/local/share/mlnx-fw"})
    before = node_files(lab / ".state/nodes/node02/sysroot")
    with pytest.raises(InputError) as err:
        engine.run(inventory.load(lab), Options(mode="apply", limit=["node02"], journal_dir=tmp_path / "j",
                                                domains={"firmware", "mtu"}))
    assert "--allow-firmware" in str(err.value) and "node02:fw/0000:0c:00.0" in str(err.value)
    assert node_files(lab / ".state/nodes/node02/sysroot") == before
    _profile(lab, "node02", {})


def test_findings_reach_the_report(lab):
    rep = engine.run(inventory.load(lab), Options(mode="plan", limit=["node04"], domains={"nic_qos"}))
    codes = {(f["device"], f["code"]) for f in rep.findings}
    assert ("node04", "ecn-unsupported") in codes  # the inbox-driver node: ECN per priority cannot be set
    ecn = next(f for f in rep.findings if f["code"] == "ecn-unsupported")
    assert "enp12s0np0" in ecn["evidence"] and ecn["domain"] == "nic_qos"
