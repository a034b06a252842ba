"""The inventory loader: Ansible precedence, role by group, paths relative to the inventory,
and one-line errors that name the file, the key and what is allowed (no lab needed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tuning import inventory
from tuning.errors import InputError
from tuning.model.settings import expand_ports

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def lab_copy(tmp_path: Path) -> Path:
    inv = tmp_path / "lab"
    shutil.copytree(REPO / "inventory" / "lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    return inv


def test_lab_inventory_layers_group_and_host_vars(lab_copy: Path):
    hv = lab_copy / "host_vars" / "node02.yml"
    data = yaml.safe_load(hv.read_text())
    data["mtu"] = 4200  # host_vars beat group_vars
    hv.write_text(yaml.safe_dump(data))
    inv = inventory.load(lab_copy)
    assert [d.name for d in inv.nodes] == ["node01", "node02", "node03", "node04"]
    assert [d.name for d in inv.switches] == ["leaf01", "leaf02", "spine01"]
    assert inv.devices["node01"].spec.mtu == 9000 and inv.devices["node02"].spec.mtu == 4200
    assert inv.devices["node02"].sources["mtu"].endswith("host_vars/node02.yml")
    assert inv.devices["node01"].spec.nic_qos.roce_tos == 106
    conn = inv.devices["leaf01"].connection
    assert (conn.hostname, conn.port, conn.username) == ("127.0.0.1", 22201, "fabtune")
    assert conn.known_hosts == str(lab_copy / ".state/ssh/known_hosts")
    assert inv.devices["node03"].connection.sysroot == "sysroot"
    assert inv.devices["spine01"].groups == ["all", "switches", "spines"]
    assert [d.name for d in inv.select(["leaves", "node01"])] == ["leaf01", "leaf02", "node01"]


def test_limit_unknown_host_is_input_error(lab_copy: Path):
    with pytest.raises(InputError, match="no host or group called 'leaf09'"):
        inventory.load(lab_copy).select(["leaf09"])


def test_nic_cabled_to_unknown_switch(lab_copy: Path):
    hv = lab_copy / "host_vars" / "node01.yml"
    data = yaml.safe_load(hv.read_text())
    data["nics"][0]["switch"] = "leaf09"
    hv.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as e:
        inventory.load(lab_copy)
    assert "host_vars/node01.yml: nics.0.switch: 'leaf09' is not a switch" in str(e.value)
    assert "allowed: leaf01, leaf02, spine01" in str(e.value)


def test_yaml_syntax_error_names_the_line(lab_copy: Path):
    (lab_copy / "group_vars" / "gpu_nodes.yml").write_text("mtu: 9000\nnic_qos: [\n")
    with pytest.raises(InputError) as e:
        inventory.load(lab_copy)
    assert "group_vars/gpu_nodes.yml: line" in str(e.value) and "not valid YAML" in str(e.value)


def test_wrong_type_names_key(lab_copy: Path):
    gv = lab_copy / "group_vars" / "gpu_nodes.yml"
    data = yaml.safe_load(gv.read_text())
    data["nic_qos"]["trust"] = "l3"
    gv.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as e:
        inventory.load(lab_copy)
    assert "gpu_nodes.yml: nic_qos.trust:" in str(e.value) and "'pcp' or 'dscp'" in str(e.value)


def test_example_su_loads_44_devices():
    inv = inventory.load(REPO / "inventory" / "example-su")
    assert len(inv.nodes) == 32 and len(inv.switches) == 12
    assert inv.devices["gpu-su1-n01"].connection.sysroot == "/"


def test_expand_ports():
    assert expand_ports(["swp1-3", "swp31"]) == ["swp1", "swp2", "swp3", "swp31"]
    with pytest.raises(ValueError, match="not a port"):
        expand_ports(["eth0"])


def test_bad_port_name_is_refused_at_load(lab_copy: Path):
    hv = lab_copy / "host_vars" / "leaf01.yml"
    hv.write_text("ports: [swp1-16, eth0]\n")
    with pytest.raises(InputError) as e:
        inventory.load(lab_copy)
    assert "host_vars/leaf01.yml: ports:" in str(e.value) and "'eth0' is not a port like swp1" in str(e.value)


def _error(inv: Path) -> str:
    with pytest.raises(InputError) as e:
        inventory.load(inv)
    return str(e.value)


def test_misnamed_group_vars_file_is_refused(lab_copy: Path):
    (lab_copy / "group_vars" / "gpu_nodes.yml").rename(lab_copy / "group_vars" / "gpu-nodes.yml")
    msg = _error(lab_copy)
    assert "group_vars/gpu-nodes.yml: -: no group called 'gpu-nodes' in hosts.yaml" in msg
    assert "gpu_nodes" in msg


def test_missing_host_vars_means_no_nics_and_is_refused(lab_copy: Path):
    (lab_copy / "host_vars" / "node03.yml").unlink()
    msg = _error(lab_copy)
    assert "host_vars/node03.yml: nics: required for node03" in msg


def test_nic_on_unlisted_port_and_shared_port(lab_copy: Path):
    hv = lab_copy / "host_vars" / "node01.yml"
    data = yaml.safe_load(hv.read_text())
    data["nics"][0]["switch_port"] = "swp77"
    hv.write_text(yaml.safe_dump(data))
    assert "nics.0.switch_port: leaf01:swp77 is not in leaf01's ports (swp1-16, swp31)" in _error(lab_copy)
    data["nics"][0]["switch_port"] = "swp2"  # node02's mlx5_0 port
    hv.write_text(yaml.safe_dump(data))
    msg = _error(lab_copy)
    assert "leaf01:swp2 is already cabled to" in msg and "one NIC per port" in msg


def test_bad_port_and_nested_unknown_key_and_huge_range(lab_copy: Path):
    hosts = lab_copy / "hosts.yaml"
    text = hosts.read_text()
    hosts.write_text(text.replace("ansible_port: 22102", "ansible_port: x22102"))
    assert "hosts.yaml: ansible_port: 'x22102' is not a TCP port; allowed: 1..65535 (host node02)" in _error(lab_copy)
    hosts.write_text(text)
    gv = lab_copy / "group_vars" / "switches.yml"
    data = yaml.safe_load(gv.read_text())
    data["roce"]["trsut"] = "dscp"
    gv.write_text(yaml.safe_dump(data))
    msg = _error(lab_copy)
    assert "switches.yml: roce.trsut: unknown key; allowed:" in msg and "pfc_priority" in msg
    del data["roce"]["trsut"]
    gv.write_text(yaml.safe_dump(data))
    (lab_copy / "host_vars" / "leaf02.yml").write_text("ports: [swp1-99999999]\n")
    assert "spans more than 1024 ports" in _error(lab_copy)


def test_connection_paths_are_absolute_for_the_journal(lab_copy: Path, monkeypatch):
    """The journal stores connection facts so that rollback works from any folder (contract 2)."""
    monkeypatch.chdir(lab_copy.parent)
    conn = inventory.load(Path("lab")).devices["node01"].connection
    assert conn.key_file == str(lab_copy / ".state/ssh/id_ed25519")
    assert conn.known_hosts == str(lab_copy / ".state/ssh/known_hosts")
    assert conn.sysroot == "sysroot"  # relative on purpose: the node shell's own folder


def test_switch_platform_is_any_registered_os_and_nothing_else(lab_copy: Path):
    """``cumulus_linux`` (Ansible's name of the NVUE OS) loads and drives the NVUE driver; a
    platform no driver serves is refused at load naming the allowed ones."""
    from tuning.switch import driver_class
    from tuning.switch.nvue import NvueDriver

    (lab_copy / "host_vars" / "leaf02.yml").write_text(
        (lab_copy / "host_vars" / "leaf02.yml").read_text() + "platform: cumulus_linux\n")
    leaf02 = inventory.load(lab_copy).devices["leaf02"]
    assert leaf02.spec.platform == "cumulus_linux" and driver_class(leaf02.spec.platform) is NvueDriver
    (lab_copy / "host_vars" / "leaf02.yml").write_text(
        (lab_copy / "host_vars" / "leaf02.yml").read_text().replace("cumulus_linux", "junos"))
    assert ("leaf02.yml: platform: 'junos' is not a switch platform fabtune drives; allowed: nvue, cumulus_linux"
            in _error(lab_copy))


def test_limit_takes_ansible_patterns(lab_copy: Path):
    """--limit as Ansible's: wildcards over hosts and groups, ',' and ':' lists, '&' intersections and
    '!' exclusions (alone: from every device); a term that matches nothing is refused, exclusions too."""
    inv = inventory.load(lab_copy)

    def names(*limit: str) -> list[str]:
        return [d.name for d in inv.select(list(limit))]

    assert names("node0[12]") == ["node01", "node02"]
    assert names("node0*:!node03") == ["node01", "node02", "node04"]
    assert names("switches,&leaf*") == ["leaf01", "leaf02"]
    assert names("!spine01", "!gpu_nodes") == ["leaf01", "leaf02"]
    assert names("leaves", "node01") == ["leaf01", "leaf02", "node01"]
    with pytest.raises(InputError, match="no host or group called 'nod03'"):
        inv.select(["all", "!nod03"])  # a typo in an exclusion must not widen the run
