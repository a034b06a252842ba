"""The load's fast paths (issue 24, fleet scale) give exactly what the slow ones gave: the plain YAML
builder against PyYAML's own constructor, the canonical IPv4 spelling against ``ipaddress``, the
cached port expansion against a fresh one; and every refusal still reads as before."""

from __future__ import annotations

from ipaddress import IPv4Interface
from pathlib import Path

import pytest
import yaml

from tuning.errors import InputError
from tuning.model import yamlfile
from tuning.model.settings import NicSpec, expand_ports

NIC = {"netdev": "enp12s0np0", "rdma_device": "mlx5_0", "rail": 0, "switch": "leaf01", "switch_port": "swp1"}

#: documents both paths read: the plain builder takes the first group, PyYAML's constructor the rest
PLAIN = [
    "nics:\n- netdev: enp12s0np0\n  rail: 0\n  ipv4: 10.0.1.1/24\n",
    "a: yes\nb: 0x1F\nc: 0o17\nd: 1_000\ne: 1:20\nf: .inf\ng: ~\nh: '07'\ni: 3.5e3\nj: off\n",
    "base: &b {mtu: 9000}\nx: *b\ny: [*b, *b]\n",
    "[1, [2, [3, {}]], []]\n",
    "just a string\n",
    "~: null key\n2: int key\ntrue: bool key\n",
]
FULL = [
    "base: &b {mtu: 9000}\nnode: {<<: *b, rail: 1}\n",  # merge key
    "secret: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\n",  # Ansible's tag
    "when: 2026-12-03\n",  # timestamp
    "s: !!set {a, b}\n",
]


def _node(text: str):
    loader = yamlfile._Loader(text)
    return loader, loader.get_single_node()


def _full(text: str, path: Path):
    """What read_yaml gave before the plain builder: the graph check, then PyYAML's constructor."""
    loader, node = _node(text)
    yamlfile._check_graph(node, path)
    return loader.construct_document(node)


@pytest.mark.parametrize("text", PLAIN + FULL)
def test_read_yaml_gives_what_pyyaml_gives(tmp_path: Path, text: str):
    path = tmp_path / "vars.yml"
    path.write_text(text)
    got, want = yamlfile.read_yaml(path), _full(text, path)
    assert got == want and repr(got) == repr(want)  # repr: True is not 1, '07' is not 7
    if text in PLAIN:
        assert got == yaml.load(text, Loader=yaml.SafeLoader)


@pytest.mark.parametrize("text", PLAIN)
def test_plain_documents_take_the_plain_builder(text: str):
    loader, node = _node(text)
    assert yamlfile._Plain(loader).data(node) == yaml.load(text, Loader=yaml.SafeLoader)


@pytest.mark.parametrize("text", FULL)
def test_other_documents_leave_the_plain_builder(text: str):
    loader, node = _node(text)
    with pytest.raises(yamlfile._NotPlain):
        yamlfile._Plain(loader).data(node)


def test_an_alias_is_shared_as_pyyaml_shares_it(tmp_path: Path):
    (tmp_path / "a.yml").write_text("base: &b {mtu: 9000}\nx: *b\n")
    data = yamlfile.read_yaml(tmp_path / "a.yml")
    assert data["x"] is data["base"] and data["x"] == {"mtu": 9000}


@pytest.mark.parametrize("text, key, problem", [
    ("a: 1\nb:\n  c: 2\n  c: 3\n", "c", "key given twice (line 4)"),
    ("a: &x [*x]\n", "line 1", "a YAML alias includes itself"),
    ("a:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(70)), "line", "nested deeper than 64 levels"),
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e]\n", "line", "expands to more than 200000 values"),
    ("? [1, 2]\n: x\n", "line 1", "found unhashable key"),
    ("=: value key\n", "line 1", "could not determine a constructor for the tag 'tag:yaml.org,2002:value'"),
    ("1: int key\ntrue: bool key\n", "True", "key given twice (line 2)"),
])
def test_refusals_are_unchanged(tmp_path: Path, text: str, key: str, problem: str):
    path = tmp_path / "bad.yml"
    path.write_text(text)
    with pytest.raises(InputError) as e:
        yamlfile.read_yaml(path)
    assert e.value.file == str(path) and e.value.key.startswith(key) and problem in e.value.problem


@pytest.mark.parametrize("text", ["10.0.1.7/24", "10.0.1.7/31", "0.0.0.1/0", "255.255.255.254/32",
                                  "10.0.1.7/255.255.255.0", "10.0.1.7/024"])
def test_nic_address_is_what_ipaddress_reads(text: str):
    nic = NicSpec.model_validate({**NIC, "ipv4": text})
    assert nic.ipv4 == IPv4Interface(text) and str(nic.ipv4) == str(IPv4Interface(text))
    assert nic.ipv4.network == IPv4Interface(text).network


@pytest.mark.parametrize("text, problem", [
    ("10.0.1.0/24", "is the network address of 10.0.1.0/24"),
    ("10.0.1.255/24", "is the broadcast address of 10.0.1.0/24"),
    ("010.0.1.7/24", "is not an IPv4 address"),
    ("10.0.1.256/24", "is not an IPv4 address"),
    ("10.0.1.7/33", "is not an IPv4 address"),
    ("10.0.1.7", "has no prefix length"),
])
def test_nic_address_refusals_are_unchanged(text: str, problem: str):
    with pytest.raises(ValueError) as e:
        NicSpec.model_validate({**NIC, "ipv4": text})
    assert problem in str(e.value)


def test_expanded_ports_are_a_new_list_each_time():
    first = expand_ports(["swp1-3", "swp31"])
    first.append("swp99")
    assert expand_ports(["swp1-3", "swp31"]) == ["swp1", "swp2", "swp3", "swp31"]
    for _ in range(2):  # a refusal is never cached as a result
        with pytest.raises(ValueError, match="'Ethernet1' is not a port like swp1"):
            expand_ports(["Ethernet1"])
