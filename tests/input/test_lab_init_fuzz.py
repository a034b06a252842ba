"""`fabtune lab init` at 1..256 nodes: the refusals of malformed flags, the invariants of what it
writes, and the one-line errors of a hand-edited inventory (what `fabtune lab up` validates first).

Cheap by design (under 10 s on a loaded 2-core box): the CLI runs in-process through
``tuning.cli.main`` (the console entry point, so the `fabtune: error:` line and exit code are the
real ones), one real subprocess checks that path agrees; the invariants call
``tuning.lab.scale.write_inventory`` directly.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuning import inventory
from tuning.errors import InputError
from tuning.lab.fabric import MAX_NODES, SU_NODES, fabric_for_inventory, port_span
from tuning.lab.scale import write_inventory
from tuning.verify.fabric_topology import topology_of
from tuning.verify.schedule import plan_schedule

EPHEMERAL = 32768


def _max_base(n: int) -> int:
    return EPHEMERAL - 1 - port_span(n)


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """``fabtune ARGV`` in-process (:func:`tests.k8s.clirun.fabtune`): (exit code, stdout, stderr)."""
    from tests.k8s.clirun import fabtune

    r = fabtune(*argv)
    return r.returncode, r.stdout, r.stderr


# --------------------------------------------------------------------------------------------------
# refusals: exit 2, one `fabtune: error:` line naming the flag, nothing written

BAD = [
    # (argv after DIR, the flag the error must name)
    (["--nodes", "0"], "--nodes"),
    (["--nodes", "-1"], "--nodes"),
    (["--nodes", "257"], "--nodes"),
    (["--nodes", "1e3"], "--nodes"),
    (["--nodes", "\u0663"], "--nodes"),          # Arabic-Indic three
    (["--nodes", "\uff13"], "--nodes"),          # fullwidth three
    (["--nodes", "9" * 30], "--nodes"),
    (["--nodes", "0x10"], "--nodes"),
    (["--base-port", "1023"], "--base-port"),
    (["--base-port", "abc"], "--base-port"),
    (["--base-port", ""], "--base-port"),
    (["--base-port", "9" * 30], "--base-port"),
    (["--nodes", "256", "--base-port", "32494"], "--base-port"),
    (["--nodes", "33", "--base-port", str(_max_base(33) + 1)], "--base-port"),
    (["--nodes", "101", "--base-port", str(_max_base(101) + 1)], "--base-port"),
    (["--base-port", str(_max_base(4) + 1)], "--base-port"),
    (["--switch-os", "leaf03=eos"], "--switch-os"),                  # a switch of bigger labs only
    (["--nodes", "256", "--switch-os", "leaf17=eos"], "--switch-os"),
    (["--nodes", "32", "--switch-os", "spine02=sonic"], "--switch-os"),
    (["--switch-os", "leaf01=junos"], "--switch-os"),
    (["--switch-os", "leaf01=EOS"], "--switch-os"),
    (["--switch-os", "leaf01"], "--switch-os"),
    (["--switch-os", "=eos"], "--switch-os"),
    (["--switch-os", "="], "--switch-os"),
    (["--switch-os", "leaf01=eos=sonic"], "--switch-os"),
    (["--switch-os", "leaf01=eos", "--switch-os", "leaf01=sonic"], "--switch-os"),
    (["--switch-os", "leaf01=eos", "--switch-os", "leaf01=eos"], "--switch-os"),
    (["--switch-os", "x" * 5000 + "=eos"], "--switch-os"),
    (["--switch-os", "leaf01=" + "e" * 5000], "--switch-os"),
    (["--switch-os", "leaf01\n=eos"], "--switch-os"),
    (["--switch-os", "leaf01=eos\nrm -rf /"], "--switch-os"),
    (["--shape", "nvl72", "--nodes", "19"], "--nodes"),
    (["--shape", "nvl72", "--switch-os", "spine02=eos"], "--switch-os"),
    (["--shape", "NVL72"], "--shape"),
]


@pytest.mark.parametrize("args,flag", BAD, ids=[" ".join(a)[:40] for a, _ in BAD])
def test_a_malformed_flag_is_one_error_line_exit_2_and_nothing_written(tmp_path, capsys, args, flag):
    dest = tmp_path / "lab"
    code, out, err = _cli(["lab", "init", str(dest), *args], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fabtune: error: ")
    assert flag in lines[0]
    assert len(lines[0]) < 400, "a long value is cut, not echoed whole"
    assert not dest.exists()


# What python's int() reads but a size flag refuses (tuning.cli_args.integer: digits only, as `--iterations`):
# a sign, a decimal point, an exponent, an underscore. Surrounding blanks are stripped, as for every
# integer flag.
LENIENT = ["+8", "8.0", "8e0", "1_0", "0x8"]


@pytest.mark.parametrize("value", LENIENT)
def test_nodes_takes_plain_ascii_digits_only(tmp_path, capsys, value):
    dest = tmp_path / "lab"
    code, _, err = _cli(["lab", "init", str(dest), "--nodes", value], capsys)
    assert code == 2 and "--nodes" in err and not dest.exists()


def test_base_port_help_range_is_true_for_every_size(capsys):
    """The help names the limit at one SU and at 256 nodes (33 nodes: 32661); the refusal names the
    limit of the size asked for (tests above)."""
    code, out, _ = _cli(["lab", "init", "--help"], capsys)
    assert code == 0
    text = " ".join(out.split())
    assert "BASE at most 32664 up to 32 nodes" in text and "32493 for 256 nodes" in text.replace("│ ", "")
    assert _max_base(32) == 32664 and _max_base(33) == 32661 and _max_base(256) == 32493


def test_the_real_console_script_agrees(tmp_path):
    """One real subprocess: the installed `fabtune` prints the same single line, exit 2."""
    exe = Path(sys.executable).with_name("fabtune")
    dest = tmp_path / "lab"
    r = subprocess.run([str(exe), "lab", "init", str(dest), "--nodes", "256", "--switch-os", "leaf17=eos"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("fabtune: error: --switch-os: leaf17=eos:")
    assert "leaf01..leaf16, spine01, spine02" in r.stderr
    assert not dest.exists()


def test_write_inventory_refuses_out_of_range_in_process(tmp_path):
    for n in (0, -1, MAX_NODES + 1, 10**9, 8.0, "8"):
        with pytest.raises(InputError, match="--nodes"):
            write_inventory(tmp_path / "x", n)
    for n in (1, 32, 33, 256):
        for port in (1023, _max_base(n) + 1, 40000, "22100"):
            with pytest.raises(InputError, match="--base-port"):
                write_inventory(tmp_path / "x", n, port)
    assert not (tmp_path / "x").exists()


def test_write_inventory_refuses_a_bool_node_count(tmp_path):
    with pytest.raises(InputError, match="--nodes"):
        write_inventory(tmp_path / "x", True)


# --------------------------------------------------------------------------------------------------
# invariants of what is written


def _check_invariants(d: Path, n: int, base: int, switch_os: dict[str, str]) -> None:
    inv = inventory.load(d)
    nodes = inv.nodes
    switches = [x for x in inv.devices.values() if x.role == "switch"]
    sus = -(-n // min(n, SU_NODES))
    n_spines = 1 if sus == 1 else 2
    leaves = [f"leaf{i:02d}" for i in range(1, 2 * sus + 1)]
    spines = [f"spine{i:02d}" for i in range(1, n_spines + 1)]
    assert sorted(x.name for x in nodes) == sorted(f"node{k:02d}" for k in range(1, n + 1))
    assert sorted(x.name for x in switches) == sorted(leaves + spines)

    # ports: unique, 1024..32767, node k on base+k, switches past the nodes (base+101.. up to 100)
    ports = {x.name: x.connection.port for x in inv.devices.values()}
    assert len(set(ports.values())) == len(ports)
    assert all(1024 <= p < EPHEMERAL for p in ports.values())
    assert all(ports[f"node{k:02d}"] == base + k for k in range(1, n + 1))
    first_sw = base + max(100, n) + 1
    assert sorted(ports[s] for s in leaves + spines) == list(range(first_sw, first_sw + len(leaves) + n_spines))
    assert max(ports.values()) == base + port_span(n)

    # IPs unique, one /24 per (rail, SU)
    ips = [nic.ipv4 for x in nodes for nic in x.spec.nics]
    assert len(ips) == 8 * n and len({i.ip for i in ips}) == len(ips)
    for x in nodes:
        k = int(x.name[4:])
        su, j = (k - 1) // min(n, SU_NODES), (k - 1) % min(n, SU_NODES) + 1
        for nic in x.spec.nics:
            assert nic.ipv4 == ipaddress.ip_interface(f"10.{nic.rail}.{su}.{j}/24")
            assert nic.switch == leaves[2 * su + nic.rail % 2]

    # node cabling: one NIC per leaf port, every cabled port listed on its leaf, no uplink shared
    cabled = [(nic.switch, nic.switch_port) for x in nodes for nic in x.spec.nics]
    assert len(set(cabled)) == len(cabled)
    by = {s.name: s for s in switches}
    for leaf, port in cabled:
        assert port in by[leaf].spec.port_names()

    # uplinks: each leaf to each spine once, the spine port numbered by the leaf
    if n_spines > 1:
        # spine port i is the i-th leaf's (swp{i}; in the spine OS's names when not NVUE: SONiC
        # Ethernet{8(i-1)}, EOS Ethernet{i})
        sp = {s: by[s].spec.port_names() for s in spines}
        for i, leaf in enumerate(leaves, start=1):
            ups = by[leaf].spec.uplinks
            assert sorted(ups.values()) == [f"{s}:{sp[s][i - 1]}" for s in spines], leaf
            assert not set(ups) & {p for lf, p in cabled if lf == leaf}
            assert set(ups) <= set(by[leaf].spec.port_names())
        for s in spines:
            assert len(sp[s]) == len(leaves)
            if switch_os.get(s, "nvue") == "nvue":
                assert sp[s] == [f"swp{i}" for i in range(1, len(leaves) + 1)]
    else:
        assert all(not getattr(by[lf].spec, "uplinks", None) for lf in leaves)

    # the verification schedule's topology reads the inventory's cabling (nothing assumed above 32)
    topo = topology_of(nodes, switches)
    assert len(topo.uplinks()) == len(leaves) * n_spines
    if n_spines > 1:
        assert topo.assumed == []
        assert {(u.leaf, u.spine, u.spine_port) for u in topo.uplinks()} == {
            (lf, s, sp[s][i - 1]) for i, lf in enumerate(leaves, start=1) for s in spines}

    # the schedule built on it covers every NIC, uplink and spine (one node: its rails have no partner)
    sched = plan_schedule(nodes, switches)
    if n > 1:
        assert sched.coverage.missing == [], sched.coverage.summary()
    else:
        assert all("no other NIC on its rail" in u for u in sched.coverage.uncoverable)

    # OSes: only the named switches leave NVUE
    for name in leaves + spines:
        platform = getattr(by[name].spec, "platform", None)
        assert (platform or "nvue") in ("nvue", switch_os.get(name, "nvue")), (name, platform)
        if name in switch_os and switch_os[name] != "nvue":
            assert platform == switch_os[name]

    # what `fabtune lab up` validates first sizes the same fabric on the same ports
    fab = fabric_for_inventory(d)
    assert len(fab.nodes) == n
    assert {s.name: s.port for s in fab.switches} == {s: ports[s] for s in leaves + spines}
    assert {x.name: x.port for x in fab.nodes} == {x.name: ports[x.name] for x in nodes}
    assert {s.name: s.os for s in fab.switches if s.os != "nvue"} == {k: v for k, v in switch_os.items() if v != "nvue"}


@st.composite
def _lab(draw, n=None):
    n = draw(st.integers(1, MAX_NODES)) if n is None else n
    base = draw(st.sampled_from([1024, _max_base(n), 22100]) | st.integers(1024, _max_base(n)))
    sus = -(-n // min(n, SU_NODES))
    names = [f"leaf{i:02d}" for i in range(1, 2 * sus + 1)] + [f"spine{i:02d}" for i in range(1, (1 if sus == 1 else 2) + 1)]
    switch_os = draw(st.dictionaries(st.sampled_from(names), st.sampled_from(["nvue", "eos", "sonic"]), max_size=3))
    return n, base, switch_os


@pytest.mark.parametrize("n", [1, 4, 31, 32, 33, 100, 101, 256])
def test_boundary_sizes_hold_the_invariants(tmp_path, n):
    switch_os = {"leaf01": "eos"} if n <= 32 else {f"leaf{2 * (-(-n // 32)):02d}": "eos", "spine02": "sonic"}
    base = _max_base(n)
    d = write_inventory(tmp_path / "lab", n, base, switch_os)
    _check_invariants(d, n, base, switch_os)


@settings(max_examples=5, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lab=_lab())
def test_sampled_sizes_hold_the_invariants(tmp_path_factory, lab):
    n, base, switch_os = lab
    d = write_inventory(tmp_path_factory.mktemp("lab") / "lab", n, base, switch_os)
    _check_invariants(d, n, base, switch_os)


@pytest.mark.parametrize("n", [1, 18])
def test_nvl72_trays_hold_their_invariants(tmp_path, n):
    from tuning.lab.hw_nvl72 import write_tray_inventory

    d = write_tray_inventory(tmp_path / "lab", n, 32664, {"leaf02": "eos"})
    inv = inventory.load(d)
    ports = [x.connection.port for x in inv.devices.values()]
    assert len(set(ports)) == len(ports) and max(ports) < EPHEMERAL
    assert all(len(x.spec.nics) == 4 for x in inv.nodes) and len(inv.nodes) == n
    ips = [nic.ipv4.ip for x in inv.nodes for nic in x.spec.nics]
    assert len(set(ips)) == len(ips)
    fab = fabric_for_inventory(d)
    assert len(fab.nodes) == n and {s.name for s in fab.switches} == {"leaf01", "leaf02", "spine01"}
    assert fab.switch("leaf02").os == "eos"


@pytest.mark.parametrize("under", ["file", "proc"])
def test_an_unwritable_dir_is_one_error_line(tmp_path, capsys, under):
    if under == "file":
        (tmp_path / "afile").write_text("")
        dest = tmp_path / "afile" / "lab"
    else:
        dest = Path("/proc/fabtune-no-such-dir")
    try:
        code, _, err = _cli(["lab", "init", str(dest), "--nodes", "2"], capsys)
    except OSError:
        code, err = None, ""
    assert code == 2 and err.startswith("fabtune: error: ") and err.count("\n") == 1


# --------------------------------------------------------------------------------------------------
# hand-edited inventories: fabric_for_inventory (lab up's first check) gives one clear line


def _drop_host(d: Path, name: str, host_vars: bool = True) -> None:
    hosts = d / "hosts.yaml"
    hosts.write_text(re.sub(rf"^ *{name}:\n.*\n.*\n", "", hosts.read_text(), flags=re.M))
    if host_vars:
        (d / "host_vars" / f"{name}.yml").unlink()


def _rename(d: Path, old: str, new: str) -> None:
    for p in [d / "hosts.yaml", *(d / "host_vars").glob("*.yml")]:
        p.write_text(re.sub(rf"\b{old}\b", new, p.read_text()))
    (d / "host_vars" / f"{old}.yml").rename(d / "host_vars" / f"{new}.yml")


def _set_port(d: Path, old: int, new: int) -> None:
    hosts = d / "hosts.yaml"
    hosts.write_text(hosts.read_text().replace(f"ansible_port: {old}\n", f"ansible_port: {new}\n"))


def _add_node257(d: Path) -> None:
    hosts = d / "hosts.yaml"
    hosts.write_text(hosts.read_text().replace(
        "    switches:\n", "        node257:\n          ansible_host: 127.0.0.1\n          ansible_port: 20999\n    switches:\n"))
    # cabled to a fresh port of leaf01, so only the name is wrong
    text = (d / "host_vars" / "node256.yml").read_text()
    text = re.sub(r"switch: leaf\d+", "switch: leaf01", text)
    ports = iter(range(131, 139))
    text = re.sub(r"switch_port: swp\d+", lambda m: f"switch_port: swp{next(ports)}", text)
    text = re.sub(r"ipv4: 10\.(\d)\.7\.32/24", r"ipv4: 10.\1.7.99/24", text)
    (d / "host_vars" / "node257.yml").write_text(text)
    leaf = d / "host_vars" / "leaf01.yml"
    leaf.write_text(leaf.read_text().replace("- swp1-130\n", "- swp1-138\n"))


EDITS = [
    ("node40 removed", 64, lambda d: _drop_host(d, "node40"), r"node64.*without a gap \(missing node40\)"),
    ("node40 removed, host_vars kept", 64, lambda d: _drop_host(d, "node40", host_vars=False), r"node40"),
    ("leaf03 renamed leaf99", 64, lambda d: _rename(d, "leaf03", "leaf99"), r"leaf99: not a lab device"),
    ("spine02 renamed spine03", 256, lambda d: _rename(d, "spine02", "spine03"), r"spine0[23]"),
    ("node257 added", 256, _add_node257, r"node257.*node01\.\.node256"),
    ("node10 on node11's port", 64, lambda d: _set_port(d, 20010, 20011), r"node1[01] and node1[01] both use"),
    ("leaf01 on node256's port", 256, lambda d: _set_port(d, 20257, 20256), r"both use 127\.0\.0\.1:20256"),
    ("last node of an SU-2 lab removed", 33, lambda d: _drop_host(d, "node33"), r"leaf03: not a lab device"),
]


@pytest.mark.parametrize("what,n,edit,match", EDITS, ids=[e[0] for e in EDITS])
def test_a_hand_edited_inventory_is_one_clear_line(tmp_path, what, n, edit, match):
    d = write_inventory(tmp_path / "lab", n, 20000)
    edit(d)
    with pytest.raises(InputError, match=match) as e:
        fabric_for_inventory(d)
    msg = str(e.value)
    assert "\n" not in msg


def test_a_hand_edit_error_stays_short_at_256_nodes(tmp_path):
    d = write_inventory(tmp_path / "lab", 256, 20000)
    _rename(d, "leaf03", "leaf99")
    with pytest.raises(InputError) as e:
        fabric_for_inventory(d)
    assert len(str(e.value)) < 400


def test_a_hand_edited_port_in_the_ephemeral_range_is_refused(tmp_path):
    d = write_inventory(tmp_path / "lab", 64, 20000)
    _set_port(d, 20010, 40000)
    with pytest.raises(InputError, match="40000: a lab port is 1024..32767"):
        fabric_for_inventory(d)


@pytest.mark.parametrize("edit", ["uplinks swapped", "nic recabled"])
def test_an_inventory_cabled_otherwise_than_the_lab_is_refused(tmp_path, edit):
    d = write_inventory(tmp_path / "lab", 64, 20000)
    if edit == "uplinks swapped":
        p = d / "host_vars" / "leaf03.yml"
        p.write_text(p.read_text().replace("swp129: spine01:swp3\n  swp130: spine02:swp3",
                                           "swp129: spine02:swp3\n  swp130: spine01:swp3"))
    else:
        p = d / "host_vars" / "node40.yml"
        p.write_text(p.read_text().replace("switch: leaf03\n  switch_port: swp8\n", "switch: leaf01\n  switch_port: swp131\n", 1))
        leaf = d / "host_vars" / "leaf01.yml"
        leaf.write_text(leaf.read_text().replace("- swp1-130\n", "- swp1-131\n"))
    inventory.load(d)  # a valid inventory on its own
    with pytest.raises(InputError, match="the lab cables (leaf03:swp129 to spine01:swp3|mlx5_0 to leaf03:swp8)$"):
        fabric_for_inventory(d)
