"""`fabtune lab up -i INV` serves INV's ports; default and test ports avoid the ephemeral range."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from tests.conftest import POOL_OFFSET, REPO, TEST_BASE_PORT
from tests.labpool import MAX_LABS, SLOT
from tuning.errors import InputError
from tuning.lab.fabric import default_fabric, fabric_for_inventory, retarget_inventory

EPHEMERAL_LOW = 32768  # Linux default net.ipv4.ip_local_port_range: 32768 60999


def test_lab_serves_the_ports_its_inventory_names(tmp_path: Path):
    inv = tmp_path / "lab"
    shutil.copytree(REPO / "inventory" / "lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    retarget_inventory(inv / "hosts.yaml", default_fabric(base_port=TEST_BASE_PORT))
    fabric = fabric_for_inventory(inv)
    ports = {n.name: n.port for n in fabric.nodes} | {s.name: s.port for s in fabric.switches}
    assert ports["node01"] == TEST_BASE_PORT + 1 and ports["spine01"] == TEST_BASE_PORT + 103
    repo_ports = {n.name: n.port for n in fabric_for_inventory(REPO / "inventory" / "lab").nodes}
    assert repo_ports["node01"] == 22101


def test_every_lab_port_lies_below_the_ephemeral_range():
    for fabric in (default_fabric(), default_fabric(base_port=TEST_BASE_PORT)):
        top = max([n.port for n in fabric.nodes] + [s.port for s in fabric.switches])
        assert top < EPHEMERAL_LOW
    # the pool's labs: +POOL_OFFSET + k * SLOT for k < MAX_LABS, each up to 100 nodes and 3 switches
    top = TEST_BASE_PORT + POOL_OFFSET + (MAX_LABS - 1) * SLOT + 103
    assert top < TEST_BASE_PORT + 800 and top < EPHEMERAL_LOW  # inside this process's 800 ports


def test_every_worker_of_a_run_has_its_own_port_range():
    from tests.conftest import port_ranges_to_try

    starts = {port_ranges_to_try(f"gw{worker}", "run-1")[0] for worker in range(12)}
    assert len(starts) == 12 and max(starts) + 800 <= EPHEMERAL_LOW and min(starts) >= 23000
    assert sorted(port_ranges_to_try("gw0", "run-1")) == sorted(starts)  # each worker may fall back to any


def test_a_range_another_process_holds_is_skipped(monkeypatch):
    import tests.conftest as conftest
    from tests.conftest import TEST_BASE_PORT, _port_range, claim_port_range, port_ranges_to_try

    assert claim_port_range(TEST_BASE_PORT) is None  # this process's own range is held (by itself)
    order = port_ranges_to_try("gw5", "run-2")
    held = [c for c in (claim_port_range(b) for b in order[:2]) if c is not None]  # as another run would
    mine = conftest._PORT_CLAIM  # kept referenced: this process's labs keep their range
    try:
        monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "run-2")
        monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw5")
        got = _port_range()
        assert got in order and got not in order[:2] and got != TEST_BASE_PORT
        assert claim_port_range(got) is None  # now held by this process
    finally:
        for c in held:
            c.close()
        if conftest._PORT_CLAIM is not mine:
            conftest._PORT_CLAIM.close()
            conftest._PORT_CLAIM = mine
    assert claim_port_range(TEST_BASE_PORT) is None  # still this process's


def test_an_inventory_host_the_lab_lacks_is_refused(tmp_path: Path):
    inv = tmp_path / "lab"
    shutil.copytree(REPO / "inventory" / "lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    text = (inv / "hosts.yaml").read_text().replace("node04:", "node09:")
    (inv / "hosts.yaml").write_text(text)
    (inv / "host_vars" / "node04.yml").rename(inv / "host_vars" / "node09.yml")
    with pytest.raises(InputError, match="node09"):
        fabric_for_inventory(inv)


def _hold(port: int) -> socket.socket:
    """A socket bound to ``port`` without listening, as another program may hold it: a connect
    finds nothing there, only a bind shows it."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", port))
    return s


def test_a_port_bound_without_listening_is_named_before_anything_starts(tmp_path: Path):
    """`lab up` checked ports by connecting: a port bound but not listening passed, and the daemon
    died in FakeNOS's bind with a traceback (exit 1). Now it is one line, exit 2, no daemon."""
    from tuning.errors import SetupError
    from tuning.lab import controller

    fabric = default_fabric(base_port=TEST_BASE_PORT + 160)
    with _hold(fabric.switch("spine01").port):
        with pytest.raises(SetupError) as err:
            controller.up(tmp_path / "state", fabric)
    assert str(err.value) == (f"lab ports already in use (spine01:{TEST_BASE_PORT + 263}): another lab or program "
                              "holds them; stop it (a lab: `fabtune lab down -i <its inventory>`) or give this lab "
                              "other ports (`fabtune lab init DIR --base-port N`); nothing was started")
    assert not (tmp_path / "state" / "lab.pid").exists()


@pytest.mark.lab
def test_a_port_taken_while_the_lab_starts_is_one_line_naming_it(tmp_path: Path):
    """A port free when `lab up` checked it and bound by another program before the daemon's
    switches bound it (here: as soon as the daemon's pid file appears, during its power-on copy):
    the daemon exits, and `lab up` says which port, exit 2, instead of the daemon's traceback."""
    import threading
    import time

    from tuning.errors import SetupError
    from tuning.lab import controller

    fabric = default_fabric(base_port=TEST_BASE_PORT + 160, n_nodes=1)  # one node: its sysroot copy is the wait
    state, held = tmp_path / "state", []

    def take() -> None:
        deadline = time.monotonic() + 60
        while not (state / "lab.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        held.append(_hold(fabric.switch("leaf02").port))

    t = threading.Thread(target=take)
    t.start()
    try:
        with pytest.raises(SetupError) as err:
            controller.up(state, fabric)
    finally:
        t.join()
        for s in held:
            s.close()
    assert str(err.value).startswith(f"lab ports taken while the lab started (leaf02:{TEST_BASE_PORT + 262}): "
                                     "another lab or program holds them"), err.value
    assert controller.running_pid(state) is None
