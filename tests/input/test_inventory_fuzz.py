"""Regression cases from the input fuzzer (issue 6): inventories the loader accepted or hung on.

Each is refused in one line (exit 2 from the CLI) naming the file and key: a FIFO (or socket)
where a vars file belongs; QoS that disagrees between the nodes and any switch (a spine, a lossy
or unmanaged switch, the CNP path); a spine port under the node frame; a NIC address without a
prefix or that is its subnet's network address; a second inventory source beside hosts.yaml
(Ansible reads it, fabtune would not). Ansible's own reading of the extra-source case and its
ignore list are checked against the installed ansible-core.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tuning import inventory
from tuning.errors import InputError
from tuning.model import sources

REPO = Path(__file__).resolve().parents[2]
G, S, N1, H = "group_vars/gpu_nodes.yml", "group_vars/switches.yml", "host_vars/node01.yml", "hosts.yaml"
SP = "host_vars/spine01.yml"
ROCE4 = {"mode": "lossless", "pfc_priority": 4, "trust": "dscp", "dscp_to_switch_priority": {26: 4, 48: 6},
         "lossless_tc": 4, "cnp_priority": 6}


def fresh(dst: Path) -> Path:
    """A copy of inventory/lab without its run state."""
    shutil.copytree(REPO / "inventory/lab", dst, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    return dst


def setk(rel: str, path: tuple, value):
    def apply(inv: Path) -> None:
        data = yaml.safe_load((inv / rel).read_text()) or {}
        d = data
        for p in path[:-1]:
            d = d.setdefault(p, {}) if isinstance(d, dict) else d[p]
        d[path[-1]] = value
        (inv / rel).write_text(yaml.safe_dump(data, sort_keys=False))
    return apply


def text(rel: str, body: str):
    return lambda inv: (inv / rel).write_text(body)


def second_hosts(inv: Path) -> None:
    (inv / "hosts.yml").write_text((inv / H).read_text().replace("22101", "1"))


GAPS = [  # (id, mutate, file or None, text the one line must hold)
    ("spine01 lossless priority 4, leaves 3", text(SP, yaml.safe_dump({"roce": ROCE4})), SP, "roce.pfc_priority"),
    ("spine01 lossy, leaves lossless", text(SP, "roce: {mode: lossy}\n"), SP, "roce.mode"),
    ("spine01 no roce, leaves lossless", text(SP, "roce: null\n"), SP, "roce"),
    ("spine01 trust pcp", text(SP, "roce: {trust: pcp}\n"), SP, "roce.trust"),
    ("spine01 maps RoCE DSCP 26 to 2", text(SP, "roce: {dscp_to_switch_priority: {26: 2, 48: 6}}\n"), SP,
     "roce.dscp_to_switch_priority"),
    ("spine01 port_mtu 1500 under 9000 frames", text(SP, "ports: [swp1-2]\nport_mtu: 1500\n"), SP, "port_mtu"),
    ("spine01 port_mtu 1500, no ports listed", text(SP, "port_mtu: 1500\n"), SP, "port_mtu"),
    ("spine01 override 9000 under 9000 frames", text(SP, "ports: [swp1-2]\nport_mtu_overrides: {swp2: 9000}\n"),
     SP, "port_mtu_overrides"),
    ("switches roce null, nodes PFC 3", setk(S, ("roce",), None), S, "roce"),
    ("switches lossy, nodes PFC 3", setk(S, ("roce", "mode"), "lossy"), S, "roce.mode"),
    ("node cnp_dscp 40 unmapped on switch", setk(G, ("nic_qos", "cnp_dscp"), 40), S, "cnp_dscp"),
    ("switch maps CNP DSCP 48 to 5, node cnp_priority 6",
     setk(S, ("roce", "dscp_to_switch_priority"), {26: 3, 48: 5}), S, "cnp_priority"),
    ("switch roce.cnp_priority 5, node 6", setk(S, ("roce", "cnp_priority"), 5), S, "roce.cnp_priority"),
    ("ipv4 without prefix (a /32 on a rail NIC)", setk(N1, ("nics", 0, "ipv4"), "10.0.0.1"), N1, "nics.0.ipv4"),
    ("ipv4 is the subnet's network address", setk(N1, ("nics", 0, "ipv4"), "10.0.0.0/24"), N1, "nics.0.ipv4"),
    ("ipv4 is the subnet's broadcast address", setk(N1, ("nics", 0, "ipv4"), "10.0.0.255/24"), N1, "nics.0.ipv4"),
    ("hosts.yml beside hosts.yaml (Ansible reads both)", second_hosts, "hosts.yml", "inventory source"),
    ("second inventory source extra.yml", text("extra.yml", "all:\n  hosts:\n    node01: {ansible_port: 1}\n"),
     "extra.yml", "inventory source"),
    ("an ini source", text("site.ini", "[gpu_nodes]\nnode01 ansible_port=1\n"), "site.ini", "inventory source"),
    ("a json source", text("more.json", "{}"), "more.json", "inventory source"),
    ("a source in a sub-folder", lambda inv: ((inv / "sub").mkdir(), (inv / "sub/x.yaml").write_text("{}")),
     "sub/x.yaml", "inventory source"),
    # issue 19: an InfiniBand inventory gets one line saying IB is not driven yet, not "host_vars missing?"
    ("an IPoIB netdev", setk(N1, ("nics", 0, "netdev"), "ib0"), N1, "nics.0.netdev: 'ib0' is an IPoIB interface "
     "(an InfiniBand port): InfiniBand is not driven yet"),
    ("an IPoIB netdev, rdma-core naming", setk(N1, ("nics", 0, "netdev"), "ibp12s0"), N1, "InfiniBand is not driven yet"),
    ("an IPoIB netdev with a PCI domain", setk(N1, ("nics", 0, "netdev"), "ibP257p0s0"), N1, "InfiniBand is not driven"),
    ("an IPoIB partition child", setk(N1, ("nics", 0, "netdev"), "ib0.8001"), N1, "InfiniBand is not driven yet"),
    ("fabric: ib", setk(G, ("fabric",), "ib"), G, "fabric: 'ib': InfiniBand is not driven yet"),
    ("fabric: InfiniBand", setk(G, ("fabric",), "InfiniBand"), G, "InfiniBand is not driven yet"),
    ("fabric: ethernet", setk(G, ("fabric",), "ethernet"), G, "fabric: 'ethernet' is not a fabric kind fabtune drives; "
     "allowed: roce"),
    ("switch platform nvos (Quantum IB)", setk(S, ("platform",), "nvos"), S, "platform: 'nvos': InfiniBand is not "
     "driven yet"),
]


@pytest.mark.parametrize("case", GAPS, ids=[g[0] for g in GAPS])
def test_gap_refused(case, tmp_path: Path):
    _, mutate, rel, needle = case
    inv = fresh(tmp_path / "inv")
    mutate(inv)
    with pytest.raises(InputError) as e:
        inventory.load(inv)
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"{inv / rel}: "), line
    assert needle in line, line


@pytest.mark.parametrize("value", ["10.0.0.1/31", "10.0.0.0/31", "10.0.0.1/32", "10.0.0.1/255.255.255.0"])
def test_ipv4_forms_that_stay_allowed(tmp_path: Path, value):
    inv = fresh(tmp_path / "inv")
    setk(N1, ("nics", 0, "ipv4"), value)(inv)
    assert str(inventory.load(inv).devices["node01"].spec.nics[0].ipv4.ip) == value.split("/")[0]


def test_ipv4_error_says_what_is_allowed(tmp_path: Path):
    inv = fresh(tmp_path / "inv")
    setk(N1, ("nics", 0, "ipv4"), "10.0.0.1")(inv)
    with pytest.raises(InputError, match="allowed: a host address with its prefix length like 10.0.0.1/24"):
        inventory.load(inv)


def test_spine_at_the_boundary_mtu_loads(tmp_path: Path):
    inv = fresh(tmp_path / "inv")
    text(SP, "ports: [swp1-2]\nport_mtu: 9022\n")(inv)
    assert inventory.load(inv).devices["spine01"].spec.port_mtu == 9022


def test_fifo_vars_file_is_refused_not_waited_on(tmp_path: Path):
    """A FIFO where host_vars/node01.yml belongs: refused in one line, exit 2, never read."""
    inv = fresh(tmp_path / "inv")
    (inv / N1).unlink()
    os.mkfifo(inv / N1)
    try:
        res = subprocess.run([sys.executable, "-m", "tuning", "render", "-i", str(inv), "-o", str(tmp_path / "o")],
                             capture_output=True, text=True, timeout=60, cwd=REPO)
    except subprocess.TimeoutExpired:
        pytest.fail("fabtune render hung on a FIFO host_vars file")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and str(inv / N1) in res.stderr, res.stderr
    assert "FIFO" in res.stderr and not (tmp_path / "o").exists()


@pytest.mark.parametrize("where", [N1, H, "group_vars/gpu_nodes/zz.yml"])
def test_non_regular_files_are_refused_in_process(tmp_path: Path, where):
    """A FIFO in a vars folder or as hosts.yaml, and a socket: refused before any open blocks."""
    inv = fresh(tmp_path / "inv")
    if where.startswith("group_vars/gpu_nodes/"):
        (inv / "group_vars/gpu_nodes").mkdir()
        (inv / G).rename(inv / "group_vars/gpu_nodes/main.yml")
    else:
        (inv / where).unlink()
    os.mkfifo(inv / where)
    with pytest.raises(InputError, match="is a FIFO"):
        inventory.load(inv)
    (inv / where).unlink()
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(inv / where))
        with pytest.raises(InputError, match="is a socket"):
            inventory.load(inv)


def test_fifo_given_as_the_inventory_file(tmp_path: Path):
    os.mkfifo(tmp_path / "hosts.yaml")
    with pytest.raises(InputError, match="is a FIFO"):
        inventory.load(tmp_path / "hosts.yaml")


def test_files_ansible_ignores_are_allowed(tmp_path: Path):
    inv = fresh(tmp_path / "inv")
    for name in ("README.md", "notes.txt", "ansible.cfg", "hosts.yaml.bak", "hosts.yaml~", ".fabtune.lock"):
        (inv / name).write_text("x")
    (inv / ".state").mkdir()
    (inv / ".state/x.yml").write_text("{}")
    assert len(inventory.load(inv).devices) == 7
    assert len(inventory.load(inv / H).devices) == 7  # a file given as -i is the only source


def test_ignore_list_is_the_installed_ansible_cores():
    constants = pytest.importorskip("ansible.constants")
    manager = pytest.importorskip("ansible.inventory.manager")
    assert list(sources.IGNORE_EXTS) == list(constants.INVENTORY_IGNORE_EXTS)
    assert [p.decode() for p in manager.IGNORED_ALWAYS] == list(sources.IGNORED_ALWAYS)
    assert manager.IGNORED.pattern.decode() == sources.IGNORED.pattern


def test_ansible_reads_the_extra_source_fabtune_refuses(tmp_path: Path):
    """Parity: ansible-inventory reads zz.yml after hosts.yaml (node01 on port 1) and skips README.md; fabtune
    refuses the first and accepts the second."""
    from tests.input.test_ansible_parity import ANSIBLE_INVENTORY, ansible_hostvars

    assert ANSIBLE_INVENTORY.exists(), "ansible-inventory comes with the test extras (ansible-core)"
    inv = fresh(tmp_path / "inv")
    (inv / "README.md").write_text("all:\n  hosts:\n    node01: {ansible_port: 2}\n")
    assert ansible_hostvars(inv)["node01"]["ansible_port"] == 22101
    inventory.load(inv)
    (inv / "zz.yml").write_text("all:\n  hosts:\n    node01: {ansible_port: 1}\n")
    assert ansible_hostvars(inv)["node01"]["ansible_port"] == 1
    with pytest.raises(InputError, match="Ansible would read it as an inventory source"):
        inventory.load(inv)


def test_fabric_roce_loads_for_nodes_and_leaves_switches_alone(tmp_path: Path):
    inv = fresh(tmp_path / "inv")
    setk("group_vars/all.yml", ("fabric",), "roce")(inv)  # all: the switches' vars do not take it
    loaded = inventory.load(inv)
    assert {d.spec.fabric for d in loaded.nodes} == {"roce"} and len(loaded.nodes) == 4
