"""Issue 6 items 1 and 12, one test each: what used to end in a traceback, a silent coercion or a
shell string is refused at load with one line naming the file, the key and what is allowed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tuning import inventory
from tuning.errors import InputError
from tuning.model import grammar

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def inv(tmp_path: Path) -> Path:
    out = tmp_path / "lab"
    shutil.copytree(REPO / "inventory" / "lab", out, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    return out


def error(inv: Path) -> str:
    with pytest.raises(InputError) as e:
        inventory.load(inv)
    msg = str(e.value)
    assert len(msg.splitlines()) == 1, msg
    return msg.replace(f"{inv}/", "")


def edit(path: Path, *keys, value) -> None:
    data = yaml.safe_load(path.read_text())
    node = data
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def hosts_entry(inv: Path, host: str, **values) -> None:
    edit(inv / "hosts.yaml", "all", "children", "gpu_nodes", "hosts", host,
         value={**yaml.safe_load((inv / "hosts.yaml").read_text())["all"]["children"]["gpu_nodes"]["hosts"][host],
                **values})


@pytest.mark.parametrize("key, value, expected", [
    ("kernel.numa_balancing;touch pwned", 1, "sysctl.kernel.numa_balancing;touch pwned: 'kernel.numa_balancing;touch "
                                             "pwned' is not a sysctl name"),
    ("kernel.$(touch pwned)", 1, "is not a sysctl name"),
    ("kernel.x\nkernel.y", 1, "sysctl.kernel.x\\nkernel.y: 'kernel.x\\nkernel.y' is not a sysctl name"),
    ("kernel.numa_balancing", "1; touch pwned", "sysctl.kernel.numa_balancing: '1; touch pwned' is not a sysctl value"),
    ("kernel.numa_balancing", "0\nkernel.panic = 1", "is not a sysctl value"),
    ("kernel.numa_balancing", True, "True is not a string"),
])
def test_sysctl_names_and_values_follow_the_grammar(inv: Path, key, value, expected):
    edit(inv / "group_vars/gpu_nodes.yml", "sysctl", value={key: value})
    msg = error(inv)
    assert msg.startswith("group_vars/gpu_nodes.yml: sysctl.") and expected in msg


def test_vector_and_word_sysctls_are_grammatical(inv: Path):
    edit(inv / "group_vars/gpu_nodes.yml", "sysctl",
         value={"net.ipv4.tcp_rmem": "4096 87380 6291456", "net.ipv4.tcp_congestion_control": "bbr", "vm.x": -1})
    assert inventory.load(inv).devices["node01"].spec.sysctl["net.ipv4.tcp_rmem"] == "4096 87380 6291456"


@pytest.mark.parametrize("field, value, expected", [
    ("netdev", "enp12s0np0;reboot", "nics.0.netdev: 'enp12s0np0;reboot' is not an interface name"),
    ("netdev", "a" * 16, "is not an interface name; allowed: 1..15"),
    ("netdev", "-rf", "not starting with -"),
    ("rdma_device", "mlx5_0 x", "nics.0.rdma_device: 'mlx5_0 x' is not an RDMA device name"),
    ("switch_port", "swp1;x", "nics.0.switch_port: 'swp1;x' is not a port like swp1"),
    ("rail", True, "nics.0.rail: True is a bool; allowed: an integer in 0..31"),
    ("ipv4", 167772161, "nics.0.ipv4: 167772161 is not a string"),
])
def test_nic_names_follow_the_grammar(inv: Path, field, value, expected):
    edit(inv / "host_vars/node01.yml", "nics", 0, field, value=value)
    assert error(inv).startswith("host_vars/node01.yml: ") and expected in error(inv)


def test_cpu_list_is_bounded_before_it_is_built(inv: Path):
    edit(inv / "host_vars/node02.yml", "irq_cpus", value="0-99999999")
    assert ("host_vars/node02.yml: irq_cpus: '0-99999999' in '0-99999999' is not a range of CPUs within 0..8191"
            in error(inv))
    assert grammar.check_cpulist("0-8191") == "0-8191"
    for bad in ("0-8192", "15-0", "0,,1", "0-15 ", "1;2"):
        with pytest.raises(ValueError):
            grammar.check_cpulist(bad)


def test_bool_is_not_an_int_and_float_is_not_a_port(inv: Path):
    edit(inv / "group_vars/gpu_nodes.yml", "nic_qos", "pfc_priority", value=True)
    assert "group_vars/gpu_nodes.yml: nic_qos.pfc_priority: True is a bool; allowed: an integer in 0..7" in error(inv)
    edit(inv / "group_vars/gpu_nodes.yml", "nic_qos", "pfc_priority", value=None)  # `pfc_priority:` and nothing after
    assert ("group_vars/gpu_nodes.yml: nic_qos.pfc_priority: no value (an empty YAML key); allowed: an integer "
            "in 0..7") in error(inv)
    shutil.copy(REPO / "inventory/lab/group_vars/gpu_nodes.yml", inv / "group_vars/gpu_nodes.yml")
    hosts_entry(inv, "node01", ansible_port=22.5)
    assert "hosts.yaml: ansible_port: 22.5 is not a TCP port; allowed: 1..65535 (host node01)" in error(inv)


def test_null_host_address_and_numeric_key_file_are_refused(inv: Path):
    hosts_entry(inv, "node01", ansible_host=None)
    assert "hosts.yaml: ansible_host: None is not a string; allowed: a host name or an IP address" in error(inv)
    shutil.copy(REPO / "inventory/lab/hosts.yaml", inv / "hosts.yaml")
    edit(inv / "group_vars/all.yml", "fabtune_ssh_key_file", value=5)
    assert "group_vars/all.yml: fabtune_ssh_key_file: 5 is not a string; allowed: a path (host node01)" in error(inv)


def test_two_nics_with_one_netdev_or_rdma_device(inv: Path):
    edit(inv / "host_vars/node01.yml", "nics", 1, "netdev", value="enp12s0np0")
    assert "host_vars/node01.yml: nics: two NICs have netdev 'enp12s0np0'; allowed: each netdev once" in error(inv)
    shutil.copy(REPO / "inventory/lab/host_vars/node01.yml", inv / "host_vars/node01.yml")
    edit(inv / "host_vars/node01.yml", "nics", 1, "rdma_device", value="mlx5_0")
    assert "two NICs have rdma_device 'mlx5_0'" in error(inv)


def test_two_nodes_with_one_address_and_port(inv: Path):
    hosts_entry(inv, "node02", ansible_port=22101)
    assert "hosts.yaml: ansible_host: node02 and node01 both use 127.0.0.1:22101" in error(inv)


@pytest.mark.parametrize("name", ["../../x", "/abs", "a/b", ".hidden", "node 1"])
def test_host_names_that_are_not_file_names_are_refused(inv: Path, name: str):
    text = (inv / "hosts.yaml").read_text().replace("        node04:", f"        {name!r}:")
    (inv / "hosts.yaml").write_text(text)
    assert error(inv).startswith(f"hosts.yaml: all.children.gpu_nodes.hosts.{name}: bad host name")


@pytest.mark.parametrize("text, expected", [
    (b"all:\n  children: \xff\n", "hosts.yaml: byte 17: not UTF-8 text"),
    ("all:\n  hosts: [node01]\n", "hosts.yaml: all.hosts: hosts is a list; allowed: a mapping"),
    ("all:\n  children: [gpu_nodes]\n", "hosts.yaml: all.children: children is a list; allowed: a mapping"),
    ("all:\n  children:\n    gpu_nodes:\n      hosts:\n        123:\n", "hosts.yaml: all.children.gpu_nodes.hosts.123: "
                                                                       "bad host name: 123 is not a string; quote it"),
    ("all:\n  children:\n    gpu_nodes:\n      hosts:\n        node01: [1]\n", "node01: host variables are a list"),
    ("all:\n  children:\n    gpu_nodes:\n      hosts:\n        node01: x\n", "node01: host variables are a str"),
    ("all: &a\n  children:\n    loop: *a\n", "hosts.yaml: line 1: a YAML alias includes itself"),
    ("all:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(70)), "nested deeper than 64 levels"),
    ("all:\n  children:\n    a:\n      children:\n        b:\n          children:\n            a: {}\n",
     "hosts.yaml: b.children.a: group a contains itself (all > a > b > a)"),
])
def test_broken_hosts_file_is_one_line_not_a_traceback(inv: Path, text, expected):
    (inv / "hosts.yaml").write_bytes(text if isinstance(text, bytes) else text.encode())
    assert expected in error(inv)
