"""NvueDriver over real SSH (netmiko) against one FakeNOS NVUE switch (tuning.lab.switches)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from tuning.errors import CandidateError, CommitConfirmError, CommitError, ConnectError
from tuning.lab.fabric import Fabric, default_fabric
from tuning.lab.keys import ensure_host_key, write_known_hosts
from tuning.lab.switches import SwitchLab, start_switches
from tuning.switch.nvue import NvueDriver

pytestmark = pytest.mark.lab
TEMPLATES = Path(__file__).resolve().parents[2] / "tuning" / "templates"
ROCE = {"mode": "lossless", "pfc_priority": 3, "trust": "dscp", "dscp_to_switch_priority": {26: 3, 48: 6},
        "lossless_tc": 3, "cnp_priority": 6, "ecn_min_bytes": 150000, "ecn_max_bytes": 1500000, "ecn_probability": 100}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Fabric, SwitchLab]:
    state = tmp_path_factory.mktemp("state")
    full = default_fabric()
    leaf = full.switch("leaf01")
    leaf.port = _free_port()
    fabric = Fabric(nodes=full.nodes, switches=[leaf], links=[])
    running = start_switches(state, fabric)
    yield state, fabric, running
    running.stop()


def driver(lab: tuple[Path, Fabric, SwitchLab], **kw) -> NvueDriver:
    state, fabric, _ = lab
    args = dict(port=fabric.switches[0].port, username="fabtune", key_file=state / "ssh" / "id_ed25519",
                known_hosts=state / "ssh" / "known_hosts", name="leaf01")
    return NvueDriver("127.0.0.1", **{**args, **kw})


def render(ports: list[str], roce: dict | None) -> str:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), undefined=StrictUndefined, trim_blocks=True,
                      lstrip_blocks=True, keep_trailing_newline=True)
    switch = {"name": "leaf01", "role": "leaf", "roce": roce,
              "ports": [{"name": p, "mtu": 9216, "description": f"node0{i % 4 + 1}:mlx5_0"} for i, p in enumerate(ports)]}
    return env.get_template("nvue/switch.j2").render(switch=switch)


def test_lab_files(lab) -> None:
    state, fabric, _ = lab
    port = fabric.switches[0].port
    assert (state / "ssh" / "known_hosts").read_text().startswith(f"[127.0.0.1]:{port} ssh-ed25519 AAAA")
    assert (state / "ssh" / "hostkeys" / "leaf01").exists() and (state / "ssh" / "id_ed25519.pub").exists()
    assert json.loads((state / "switches" / "leaf01.fabric.json").read_text())["ports"]["swp31"] == {"mtu": 9216}


def test_unknown_host_key_is_refused(lab, tmp_path: Path) -> None:
    state, fabric, _ = lab
    port = fabric.switches[0].port
    wrong = write_known_hosts(tmp_path / "a", {port: ensure_host_key(tmp_path / "a", "impostor")})
    missing = write_known_hosts(tmp_path / "b", {port + 1: ensure_host_key(state, "leaf01")})
    for known_hosts in (wrong, missing):
        with pytest.raises(ConnectError):
            driver(lab, known_hosts=known_hosts).open()


def test_wrong_client_key_is_refused(lab, tmp_path: Path) -> None:
    from tuning.lab.keys import ensure_client_key

    with pytest.raises(ConnectError):
        driver(lab, key_file=ensure_client_key(tmp_path)).open()


def test_template_applies_with_confirm_then_idempotent(lab) -> None:
    state, fabric, running = lab
    config = render(["swp1", "swp2", "swp16", "swp31"], ROCE)
    assert config.startswith("# fabtune: leaf01 (leaf). NVUE syntax: NVIDIA Cumulus Linux 5.x") and config.endswith("\n")
    with driver(lab) as dev:
        before = dev.current_revision()
        t0 = time.perf_counter()
        dev.load_candidate(config)
        diff = dev.compare()
        nxt = dev.next_revision()  # NVUE numbers every apply, rejected ones too: not always before + 1
        rev = dev.commit(confirm_within_s=60)
        assert dev.has_pending_commit()
        dev.confirm()
        cycle = time.perf_counter() - t0
        print(f"\nload+diff+apply(--confirm)+confirm of {len(config.splitlines())} lines: {cycle:.2f} s")
        assert "- set:" in diff and "mode: lossless" in diff and "min-threshold: 150000" in diff
        assert rev == nxt and int(rev) > int(before) and not dev.has_pending_commit()
        state_now = dev.get_state()
        assert state_now.revision == rev and state_now.ports["swp16"] == 9216
        assert (state_now.roce.enabled, state_now.roce.mode, state_now.roce.pfc_priority) == (True, "lossless", 3)
        assert state_now.roce.trust == "dscp" and state_now.roce.ecn_tcs == (3,)
        assert state_now.roce.dscp_to_switch_priority[26] == 3
        assert running.devices["leaf01"].run("nv config show -o commands").stdout == dev.running_config()
        dev.load_candidate(config)
        assert dev.compare() == ""
        assert dev.commit() == rev
    roce = json.loads((state / "switches" / "leaf01.fabric.json").read_text())["roce"]
    assert (roce["trust"], roce["ecn_min_bytes"], roce["lossless_tc"]) == ("dscp", 150000, 3)


def test_bad_line_is_a_candidate_error_and_discard(lab) -> None:
    with driver(lab) as dev:
        with pytest.raises(CandidateError, match="swp1 link mtu 9300"):
            dev.load_candidate("nv set interface swp1 link mtu 9300\n")
        dev.load_candidate("nv set interface swp2 link mtu 4000\n")
        assert "mtu: 4000" in dev.compare()
        dev.discard()
        assert dev.compare() == ""


def test_commit_twice_and_rollback(lab) -> None:
    with driver(lab) as dev:
        before = dev.current_revision()
        dev.load_candidate("nv set interface swp5 link mtu 1500\n")
        dev.commit(confirm_within_s=60)
        dev.load_candidate("nv set interface swp6 link mtu 1500\n")
        with pytest.raises(CommitError):
            dev.commit()
        dev.discard()
        dev.rollback()  # answers the pending confirm with --confirm-no
        assert dev.current_revision() == before and dev.get_state().ports["swp5"] == 9216
        with pytest.raises(CommitConfirmError):
            dev.confirm()
        dev.load_candidate("nv set interface swp5 link mtu 4000\n")
        dev.commit()
        assert dev.get_state().ports["swp5"] == 4000
        dev.rollback()
        assert dev.current_revision() == before and dev.get_state().ports["swp5"] == 9216


def test_interactive_apply_over_ssh(lab) -> None:
    with driver(lab) as dev:
        dev.load_candidate("nv set interface swp7 description node03:mlx5_4\n")
        conn = dev._conn
        out = conn.send_command("nv config apply", expect_string=r"\[y/N\]")
        out += conn.send_command("y", auto_find_prompt=False, expect_string=r"mgmt:~\$")
        assert "Are you sure? [y/N]" in out and "applied [rev_id:" in out
        assert "nv set interface swp7 description node03:mlx5_4" in dev.running_config()


def test_connect_time(lab) -> None:
    t0 = time.perf_counter()
    with driver(lab) as dev:
        elapsed = time.perf_counter() - t0
        assert dev.current_revision().isdigit()
    print(f"\nnetmiko connect: {elapsed:.3f} s")


def test_known_hosts_replace_keeps_other_lines(tmp_path: Path) -> None:
    write_known_hosts(tmp_path, {42101: "ssh-ed25519 AAAA1", 42201: "ssh-ed25519 BBBB"})
    write_known_hosts(tmp_path, {42101: "ssh-ed25519 AAAA2 comment"})
    assert (tmp_path / "ssh" / "known_hosts").read_text() == (
        "[127.0.0.1]:42101 ssh-ed25519 AAAA2\n[127.0.0.1]:42201 ssh-ed25519 BBBB\n")
