"""``fabtune node check --passive`` (Slurm's HealthCheckProgram, run every HealthCheckInterval) judges the NIC
counters on what they rose since its previous read, kept in a state file on the node: one lossy episode
drains the node once and the next check with no further rise resumes it; a reset (reboot) is a new baseline;
a corrupt or linked state file is no previous read, never followed. In process on a lab node's sysroot
(the lab's stand-in tools on PATH, no lab running), draining through the stand-in ``scontrol``."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.burnin.test_drain import scontrol  # noqa: F401  (the stand-in scontrol fixture)
from tests.conftest import served_stand_ins
from tuning import inventory
from tuning.burnin import node_check as nc
from tuning.lab import counters
from tuning.lab.controller import prepare
from tuning.lab.fabric import default_fabric
from tuning.lab.nodeserver import node_env
from tuning.lab.scale import write_inventory

NIC, DEV = "enp12s0np0", "mlx5_0"  # node01's first NIC (tuning.lab.fabric)


@pytest.fixture
def node(tmp_path, monkeypatch, scontrol):  # noqa: F811
    """node01 of a one-node lab laid out (not started), its MTU, PFC and trust tuned through the node's own
    stand-ins (a clean gate); the process environment is the node shell's; the stand-ins served by the lab's
    tool servers, as in a running lab (:mod:`tuning.lab.toolserver`). Yields (inventory device, sysroot)."""
    state = tmp_path / "lab"
    prepare(state, default_fabric(n_nodes=1))
    with served_stand_ins(state):
        env = node_env(state, "node01")
        for k in ("FABTUNE_LAB_DIR", "FABTUNE_LAB_NODE", "FABTUNE_LAB_SYSROOT"):
            monkeypatch.setenv(k, env[k])
        monkeypatch.setenv("PATH", f"{state / 'bin'}:{scontrol[0].parent / 'bin'}:/usr/local/bin:/usr/bin:/bin")
        dev = inventory.load(write_inventory(tmp_path / "inv", 1)).devices["node01"]
        for nic in dev.spec.nics:
            for argv in (["ip", "link", "set", "dev", nic.netdev, "mtu", "9000"],
                         ["mlnx_qos", "-i", nic.netdev, "--trust", "dscp", "--pfc", "0,0,0,1,0,0,0,0"]):
                r = subprocess.run(argv, capture_output=True, text=True)
                assert r.returncode == 0, (argv, r.stdout, r.stderr)
        yield dev, state / "nodes/node01/sysroot"


def _reason(scontrol_state) -> str | None:  # noqa: F811
    return json.loads(scontrol_state.read_text())["node01"]["reason"]


def test_one_lossy_episode_drains_once_and_the_next_check_without_a_rise_resumes(node, scontrol):  # noqa: F811
    dev, root = node
    first = nc.passive(dev, str(root))  # no state yet: counters not judged, this read is the baseline
    assert (first.problems, first.counters["judged"], first.counters["saved"]) == ([], False, True)
    assert first.counters["why"].startswith("no previous read: ") and first.exit_code == nc.EXIT_HEALTHY
    path = root / nc.STATE_PATH
    assert (path.stat().st_mode & 0o777, json.loads(path.read_text())["node"]) == (0o600, "node01")
    counters.bump(root, NIC, DEV, {"rx_discards_phy": 40, "out_of_sequence": 7})
    lossy = nc.passive(dev, str(root))
    assert lossy.problems == ["link-lossy node01:mlx5_0: loss counters rose on it"], lossy.problems
    assert lossy.doc["findings"][0]["evidence"]["counters"]["link-lossy"] == {"rx_discards_phy": 40, "out_of_sequence": 7}
    assert lossy.drain["drained"] == ["node01"] and _reason(scontrol[1]).startswith("fabtune:health-")
    again = nc.passive(dev, str(root))  # the counters stay at their totals: no rise since the last check
    assert (again.problems, again.counters["judged"], again.undrain["resumed"]) == ([], True, ["node01"])
    assert _reason(scontrol[1]) is None and again.exit_code == nc.EXIT_HEALTHY


def test_a_counter_below_its_previous_read_is_a_reset_and_a_new_baseline(node, scontrol):  # noqa: F811
    dev, root = node
    counters.bump(root, NIC, DEV, {"rx_discards_phy": 100})
    nc.passive(dev, str(root))  # baseline: 100
    counters.build(root, default_fabric(n_nodes=1).node("node01"))  # the node rebooted: counters from 0
    counters.bump(root, NIC, DEV, {"rx_discards_phy": 40})  # 40 since the reboot, below the 100 kept
    after = nc.passive(dev, str(root))
    assert after.problems == [] and f"{DEV}:rx_discards_phy" in after.counters["baseline"]
    counters.bump(root, NIC, DEV, {"rx_discards_phy": 3})  # judged against the new baseline of 40
    rose = nc.passive(dev, str(root))
    assert rose.problems == ["link-lossy node01:mlx5_0: loss counters rose on it"]
    assert rose.doc["findings"][0]["evidence"]["counters"]["link-lossy"] == {"rx_discards_phy": 3}


@pytest.mark.parametrize("bad", ["corrupt", "link"])
def test_a_corrupt_or_linked_state_file_is_no_previous_read_and_never_written_through(node, scontrol, tmp_path,
                                                                                       bad):  # noqa: F811
    dev, root = node
    counters.bump(root, NIC, DEV, {"rx_discards_phy": 9})  # totals since boot: no rise this check saw
    path = tmp_path / "state.json"
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("precious\n")
    if bad == "corrupt":
        path.write_text('{"format": "fabtune-node-check/1", "node": "node01", "read_at": 1, "nics": {"mlx5_0": ')
    else:
        path.symlink_to(elsewhere)
    v = nc.passive(dev, str(root), state=path)
    assert v.problems == [] and v.counters["judged"] is False, v.problems
    assert v.counters["why"].startswith(f"no previous read: the state file {path} "), v.counters["why"]
    if bad == "corrupt":
        assert "corrupt" in v.counters["why"] and v.counters["saved"] is True
        assert json.loads(path.read_text())["nics"][DEV]["counters"]["rx_discards_phy"] == 9
    else:
        assert "symbolic link" in v.counters["why"] and "symbolic link" in v.counters["save_error"]
        assert (path.is_symlink(), elsewhere.read_text()) == (True, "precious\n")
        assert v.exit_code == nc.EXIT_UNREAD  # healthy, but the next check could judge no counter
