"""The parse cache (issue 24, fleet scale): a large inventory loads from its cache exactly as from
its YAML, an edited file is read again, and a cache fabtune cannot trust is neither read nor
written. Each test loads a generated 6-SU fleet (264 nodes, 312 vars files: over MIN_FILES)."""

from __future__ import annotations

import ipaddress
import marshal
import os
import random
from pathlib import Path

import pytest

from bench.gen_example_su import write_fleet
from tuning import inventory
from tuning.errors import InputError
from tuning.model import ipv4, parsecache


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    inv = tmp_path_factory.mktemp("fleet") / "inv"
    write_fleet(inv, 6)
    return inv


@pytest.fixture
def cache_home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(parsecache.ENV, raising=False)
    return tmp_path / "xdg" / "fabtune"


def _dump(inv: inventory.Inventory) -> dict:
    return {name: (d.spec.model_dump(mode="json"), d.groups, d.sources) for name, d in inv.devices.items()}


def _cache_file(home: Path) -> Path:
    files = list(home.iterdir())
    assert len(files) == 1 and files[0].name.startswith("parsed-"), files
    return files[0]


def test_a_warm_load_gives_what_a_cold_one_gives(fleet, cache_home):
    cold = _dump(inventory.load(fleet))
    path = _cache_file(cache_home)
    header, entries = marshal.loads(path.read_bytes())
    files = sum(1 for _ in (fleet / "host_vars").iterdir()) + sum(1 for _ in (fleet / "group_vars").rglob("*.yml"))
    assert len(entries) == files + 1  # every vars file and hosts.yaml, by content
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(cache_home.stat().st_mode & 0o777) == "0o700"
    mtime = path.stat().st_mtime_ns
    assert _dump(inventory.load(fleet)) == cold
    assert path.stat().st_mtime_ns == mtime  # nothing new parsed: nothing written


def test_an_edited_file_is_parsed_again(fleet, cache_home, tmp_path):
    inv = tmp_path / "inv"
    write_fleet(inv, 6)
    inventory.load(inv)
    host = inv / "host_vars" / "gpu-su3-n07.yml"
    host.write_text(host.read_text().replace("10.192.3.7/24", "10.192.3.77/24"))
    nics = inventory.load(inv).devices["gpu-su3-n07"].spec.nics
    assert str(nics[4].ipv4) == "10.192.3.77/24"
    host.write_text(host.read_text() + "mtu: 9000\nmtu: 4200\n")
    with pytest.raises(InputError) as e:
        inventory.load(inv)
    assert e.value.file == str(host) and "key given twice (line" in e.value.problem


def test_a_cache_fabtune_cannot_trust_is_ignored_and_left_alone(fleet, cache_home):
    inventory.load(fleet)
    path = _cache_file(cache_home)
    header, entries = marshal.loads(path.read_bytes())
    host = (fleet / "host_vars" / "gpu-su1-n01.yml").read_bytes()
    key = parsecache.hashlib.blake2b(host, digest_size=16).digest()
    entries[key] = marshal.dumps({"nics": []})  # a planted answer for that file's content
    path.write_bytes(marshal.dumps((header, entries)))
    os.chmod(path, 0o666)  # writable by others: not trusted
    assert len(inventory.load(fleet).devices["gpu-su1-n01"].spec.nics) == 8
    assert oct(path.stat().st_mode & 0o777) == "0o666"  # and not rewritten
    path.unlink()
    target = cache_home / "elsewhere"
    target.write_bytes(marshal.dumps((header, entries)))
    path.symlink_to(target)  # a link: neither followed for reading nor replaced
    assert len(inventory.load(fleet).devices["gpu-su1-n01"].spec.nics) == 8
    assert path.is_symlink()


@pytest.mark.parametrize("content", [b"", b"\x00garbage", marshal.dumps((("another parser",), {})),
                                     marshal.dumps([1, 2, 3])])
def test_a_broken_or_foreign_cache_costs_only_the_parse(fleet, cache_home, content):
    want = _dump(inventory.load(fleet))
    path = _cache_file(cache_home)
    path.write_bytes(content)
    assert _dump(inventory.load(fleet)) == want
    assert marshal.loads(path.read_bytes())[0] == parsecache._parser_id()  # written anew


def test_off_and_small_inventories_write_nothing(fleet, cache_home, monkeypatch):
    inventory.load(Path(__file__).resolve().parents[2] / "inventory" / "lab")  # 6 hosts: under MIN_FILES
    assert not cache_home.exists()
    monkeypatch.setenv(parsecache.ENV, "off")
    inventory.load(fleet)
    assert not cache_home.exists()


def test_a_shared_subnet_interface_is_what_ipaddress_builds():
    rng = random.Random(24)
    for _ in range(2000):
        ip, prefix = rng.getrandbits(32), rng.choice([0, 1, 8, 16, 23, 24, 30, 31, 32])
        ours, theirs = ipv4.shared_interface(ip, prefix), ipaddress.IPv4Interface((ip, prefix))
        assert (ours, str(ours), hash(ours), ours.ip, ours.network, ours.netmask, ours.with_prefixlen) == \
               (theirs, str(theirs), hash(theirs), theirs.ip, theirs.network, theirs.netmask, theirs.with_prefixlen)
    assert ipv4._SHARED_NETWORKS  # this Python takes the shared path the test compared
    a, b = ipv4.check_nic_ipv4("10.9.1.1/24"), ipv4.check_nic_ipv4("10.9.1.2/24")
    assert a.network is b.network and a != b
