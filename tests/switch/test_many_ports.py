"""A leaf with many ports (257) is staged in one write, as `fabtune plan` does: the echo of so many
lines comes back in pieces between the prompts, and only what the switch printed of its own is an
error. Real SSH to the lab's NVUE switches of a 4-node inventory whose leaf01 lists 257 ports
(:func:`tuning.lab.scale.write_inventory`, then leaf01's ``ports`` in the inventory and the lab alike:
the lab's own leaves hold at most 130 since SUs of 32 nodes); only the switches run."""

from __future__ import annotations

import pytest

from tests.conftest import TEST_BASE_PORT
from tuning import inventory
from tuning.errors import CandidateError
from tuning.lab.fabric import fabric_for_inventory
from tuning.lab.scale import write_inventory
from tuning.lab.switches import start_switches
from tuning.targets import switch as switch_ops
from tuning.switch.nvue_text import residue as _residue

pytestmark = pytest.mark.lab

#: this module's switches listen on +231..+233, clear of the other labs of tests/conftest.py (+1..+223)
BASE_PORT = TEST_BASE_PORT + 130
N_PORTS = 257


@pytest.fixture(scope="module")
def big_lab(tmp_path_factory: pytest.TempPathFactory):
    """The switches of a 4-node lab inventory with a 257-port leaf01; yields the inventory's devices."""
    inv_dir = write_inventory(tmp_path_factory.mktemp("many") / "lab", 4, BASE_PORT)
    (inv_dir / "host_vars" / "leaf01.yml").write_text(f"# leaf01 (leaf)\nports:\n- swp1-{N_PORTS}\n")
    fabric = fabric_for_inventory(inv_dir)
    fabric.switch("leaf01").ports = [f"swp{i}" for i in range(1, N_PORTS + 1)]
    lab = start_switches(inv_dir / ".state", fabric)
    try:
        yield inventory.load(inv_dir).devices
    finally:
        lab.stop()


@pytest.fixture()
def leaf01(big_lab):
    """(leaf01's Device, an open driver on it); the candidate is discarded after."""
    dev = big_lab["leaf01"]
    drv = switch_ops.open_driver(dev)
    try:
        yield dev, drv
    finally:
        drv.discard()
        drv.close()


def test_plan_stages_the_full_candidate_of_a_257_port_leaf(leaf01) -> None:
    dev, drv = leaf01
    state = switch_ops.collect(drv, dev)  # the plan's path: stage the rendered candidate, read its diff
    staged = [line for line in state.candidate.splitlines() if line.startswith("nv set interface swp")]
    assert len(staged) == len(state.ports) == 257
    assert any(c.key.startswith("roce/") for c in switch_ops.plan(dev, state))


def test_one_write_stages_what_one_command_per_line_stages(leaf01) -> None:
    dev, drv = leaf01
    candidate = switch_ops.collect(drv, dev).candidate
    drv.load_candidate(candidate)
    batched = drv.compare()
    drv.discard()
    for line in candidate.splitlines():  # netmiko send_command per line: one prompt each, slow but plain
        if line.startswith("nv "):
            drv._send(line, phase="apply")
    assert drv.compare() == batched and batched.count("mtu: 9216") == 257


def test_an_mtu_on_every_port_is_staged_in_one_write(leaf01) -> None:
    dev, drv = leaf01
    ports = sorted(drv.get_state().ports)
    assert len(ports) > 256
    drv.load_candidate("".join(f"nv set interface {p} link mtu 9000\n" for p in ports))
    diff = drv.compare()
    assert all(f"{p}:" in diff for p in ports), diff[:400]
    assert diff.count("mtu: 9000") == len(ports)


def test_a_bad_line_among_many_is_named(leaf01) -> None:
    dev, drv = leaf01
    ports = sorted(drv.get_state().ports)
    lines = [f"nv set interface {p} link mtu 9000" for p in ports]
    lines.insert(200, "nv set interface swp999 link mtu 9000")  # no such port on this leaf
    with pytest.raises(CandidateError, match="rejected `nv set interface swp999 link mtu 9000`"):
        drv.load_candidate("\n".join(lines) + "\n")


PROMPT = "cumulus@leaf01:mgmt:~"


def test_echo_cut_between_prompts_or_echoed_twice_is_no_residue() -> None:
    lines = ["nv set interface swp110 link mtu 9216", "nv set interface swp111 link mtu 9216"]
    cut = (f"{lines[0]}nv set interface swp1\r\n{PROMPT}$ \r\n{PROMPT}$ 11 link mtu 9216\r\n{PROMPT}$ ")
    twice = f"{lines[0]}\r\n{PROMPT}$ {lines[1]}\r\n{lines[1]}\r\n{PROMPT}$ "
    assert _residue(cut, lines, PROMPT) == ""
    assert _residue(twice, lines, PROMPT) == ""


def test_text_of_the_switch_among_the_echo_is_residue() -> None:
    lines = ["nv set interface swp110 link mtu 9216", "nv set interface swp111 link mtu 9216"]
    out = (f"{lines[0]}nv set interface swp1\r\nWarning: swp110 is in use\r\n{PROMPT}$ \r\n"
           f"{PROMPT}$ 11 link mtu 9216\r\n{PROMPT}$ ")
    assert _residue(out, lines, PROMPT) == "Warning: swp110 is in use"
