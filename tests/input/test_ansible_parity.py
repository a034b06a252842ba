"""fabtune sees exactly the variables ``ansible-inventory --list`` gives: on every inventory in the
repository and on one fixture per layout form (group_vars folders, group ``vars:`` in hosts.yaml,
host_vars folders, inline host vars under host_vars files, sibling and nested group precedence,
top-level groups beside ``all``, a string ``hosts:``). Forms Ansible reads ambiguously are refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tuning import inventory
from tuning.errors import InputError

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_INVENTORY = Path(sys.executable).parent / "ansible-inventory"


def ansible_hostvars(inv: Path) -> dict[str, dict]:
    """``_meta.hostvars`` of ``ansible-inventory -i INV --list`` (Ansible's own reading)."""
    res = subprocess.run([str(ANSIBLE_INVENTORY), "-i", str(inv), "--list"], capture_output=True, text=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin", "ANSIBLE_LOCAL_TEMP": str(inv.parent / ".ansible-tmp"),
                                           "HOME": str(inv.parent), "ANSIBLE_INVENTORY_ENABLED": "yaml"})
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["_meta"]["hostvars"]


def fabtune_hostvars(inv: Path) -> dict[str, dict]:
    """fabtune's resolved variables, as JSON would carry them (int keys become strings)."""
    return json.loads(json.dumps(inventory.resolved_vars(inv)))


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


HOSTS = """\
all:
  vars: {mtu: 1500, from_all_inline: a}
  children:
    gpu_nodes:
      vars: {mtu: 4200, nic_qos: {pfc_priority: 3}}
      hosts:
        n1: {ansible_host: 10.9.0.1, irq_affinity: "off"}
        n2:
      children:
        rack_b:
          vars: {mtu: 4000}
          hosts: {n2: {ansible_port: 2222}}
    zeta: {vars: {site: zeta}, hosts: {n1: {}, n2: {}}}
    alpha: {vars: {site: alpha, ntp_servers: [ntp1]}, hosts: {n1: {}}}
    switches:
      hosts: s1
extra_top:
  hosts: {s1: {ansible_host: 10.9.0.9}}
  vars: {site: extra}
"""

FORMS = {
    "group vars inline": {"hosts.yaml": HOSTS},
    "group_vars folder": {"hosts.yaml": HOSTS, "group_vars/gpu_nodes/10-mtu.yml": "mtu: 9000\n",
                          "group_vars/gpu_nodes/20-qos.yaml": "mtu: 8000\nnic_qos: {pfc_priority: 4}\n",
                          "group_vars/gpu_nodes/sub/30.yml": "deep: 1\n", "group_vars/gpu_nodes/README.txt": "x: 1\n",
                          "group_vars/gpu_nodes/.hidden.yml": "mtu: 1\n", "group_vars/gpu_nodes/noext": "noext: 1\n"},
    "group_vars all file over all inline": {"hosts.yaml": HOSTS, "group_vars/all.yml": "mtu: 1400\nfrom_all_file: 1\n",
                                            "group_vars/zeta.yml": "site: zeta_file\n"},
    "host_vars over inline": {"hosts.yaml": HOSTS, "host_vars/n1.yml": "irq_affinity: numa-local\nmtu: 9100\n",
                              "host_vars/n2.json": '{"ansible_port": 2200}\n'},
    "host_vars folder": {"hosts.yaml": HOSTS, "host_vars/n1/a.yml": "mtu: 7000\n", "host_vars/n1/b.yml": "mtu: 7100\n"},
    "vault and unsafe values": {"hosts.yaml": HOSTS, "group_vars/gpu_nodes.yml": (
        "site_secret: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6231336539\n  6134333665\n"
        "template: !unsafe '{{ not templated }}'\n")},
    "group priority": {"hosts.yaml": HOSTS.replace("{site: alpha,", "{ansible_group_priority: 5, site: alpha,")},
}


@pytest.mark.parametrize("name", sorted(FORMS))
def test_each_layout_form_matches_ansible_inventory(name: str, tmp_path: Path):
    inv = write_tree(tmp_path / "inv", FORMS[name])
    assert fabtune_hostvars(inv) == ansible_hostvars(inv)


REPO_INVENTORIES = sorted(str(p.parent.relative_to(REPO)) for p in REPO.glob("inventory/*/hosts.y*ml"))


def test_every_repository_inventory_is_compared():
    assert {"inventory/lab", "inventory/example-su"} <= set(REPO_INVENTORIES)


@pytest.mark.parametrize("rel", REPO_INVENTORIES)
def test_repository_inventories_match_ansible_inventory(rel: str, tmp_path: Path):
    inv = tmp_path / "inv"
    shutil.copytree(REPO / rel, inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    want = ansible_hostvars(inv)
    assert fabtune_hostvars(inv) == want
    loaded = inventory.load(inv)  # and the devices are built from those very values
    for name, dev in loaded.devices.items():
        assert dev.connection.hostname == want[name].get("ansible_host", name)
        if dev.role == "node":
            assert dev.spec.mtu == want[name]["mtu"]


def test_directory_form_reaches_the_model(tmp_path: Path):
    """The issue's case: a group_vars folder sets MTU 4200; fabtune planned 9000."""
    inv = tmp_path / "lab"
    shutil.copytree(REPO / "inventory/lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    gv = inv / "group_vars"
    (gv / "gpu_nodes").mkdir()
    (gv / "gpu_nodes.yml").rename(gv / "gpu_nodes" / "main.yml")
    (gv / "gpu_nodes" / "mtu.yml").write_text("mtu: 4200\n")
    assert ansible_hostvars(inv)["node01"]["mtu"] == 4200
    assert inventory.load(inv).devices["node01"].spec.mtu == 4200


def test_yml_and_yaml_for_one_host_is_refused_naming_what_ansible_reads(tmp_path: Path):
    inv = write_tree(tmp_path / "inv", {"hosts.yaml": HOSTS, "host_vars/n1.yml": "mtu: 9000\n",
                                        "host_vars/n1.yaml": "mtu: 4200\n"})
    assert ansible_hostvars(inv)["n1"]["mtu"] == 9000  # Ansible silently ignores n1.yaml
    with pytest.raises(InputError) as e:
        inventory.resolved_vars(inv)
    assert str(e.value).startswith(f"{inv}/host_vars/n1.yaml: -: host_vars/ has n1.yml, n1.yaml for n1; "
                                   "Ansible reads only n1.yml")


def test_site_keys_are_left_alone_and_near_misses_refused(tmp_path: Path):
    inv = tmp_path / "lab"
    shutil.copytree(REPO / "inventory/lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    gv = inv / "group_vars" / "gpu_nodes.yml"
    base = gv.read_text()
    gv.write_text(base + "ntp_servers: [ntp1.example.com]\nsyslog_host: log1\n")
    assert inventory.load(inv).devices["node01"].spec.mtu == 9000
    gv.write_text(base + "pfc_priorty: 4\n")
    with pytest.raises(InputError) as e:
        inventory.load(inv)
    assert f"{gv}: pfc_priorty: unknown key (host node01); did you mean nic_qos.pfc_priority?" in str(e.value)
    # a transposed short key (difflib's ratio is 0.67 for mut/mtu) is a typo, not a site key
    (inv / "host_vars" / "node01.yml").write_text((inv / "host_vars" / "node01.yml").read_text() + "mut: 4200\n")
    gv.write_text(base + "cpu_vendor: amd\ngpu: h100\n")  # site keys one letter off a setting stay theirs
    with pytest.raises(InputError) as e:
        inventory.load(inv)
    assert "host_vars/node01.yml: mut: unknown key (host node01); did you mean mtu?" in str(e.value)
    shutil.copy(REPO / "inventory/lab/host_vars/node01.yml", inv / "host_vars" / "node01.yml")
    assert inventory.load(inv).devices["node01"].spec.mtu == 9000
    gv.write_text(base + "fabtune_frobnicate: 1\n")
    with pytest.raises(InputError, match="fabtune_frobnicate: unknown key"):
        inventory.load(inv)
    gv.write_text(base + "port_mtu: 9216\n")
    with pytest.raises(InputError, match="gpu_nodes.yml: port_mtu: not a node setting"):
        inventory.load(inv)


def test_vault_values_are_left_alone_or_refused_in_fabtune_keys(tmp_path: Path):
    inv = tmp_path / "lab"
    shutil.copytree(REPO / "inventory/lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    gv = inv / "group_vars" / "gpu_nodes.yml"
    base = gv.read_text()
    gv.write_text(base + "site_secret: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6231336539\n")
    assert inventory.load(inv).devices["node01"].spec.mtu == 9000
    gv.write_text(base.replace("mtu: 9000", "mtu: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6231336539\n"))
    with pytest.raises(InputError) as e:
        inventory.load(inv)
    assert str(e.value).startswith(f"{gv}: mtu: an Ansible !vault or !unsafe value; fabtune reads its own settings")


def test_duplicate_key_is_refused_with_file_key_and_line(tmp_path: Path):
    inv = tmp_path / "lab"
    shutil.copytree(REPO / "inventory/lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    gv = inv / "group_vars" / "gpu_nodes.yml"
    gv.write_text(gv.read_text() + "mtu: 4200\n")
    with pytest.raises(InputError) as e:
        inventory.load(inv)
    assert str(e.value).startswith(f"{gv}: mtu: key given twice (line ")


def test_site_hosts_outside_the_role_groups_are_left_alone(tmp_path: Path):
    inv = tmp_path / "lab"
    shutil.copytree(REPO / "inventory/lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    hosts = inv / "hosts.yaml"
    base = hosts.read_text()
    hosts.write_text(base + "    login:\n      hosts:\n        login01: {ansible_host: 10.9.9.9, ntp_servers: [a]}\n")
    loaded = inventory.load(inv)
    assert "login01" not in loaded.devices and len(loaded.devices) == 7
    assert inventory.resolved_vars(inv)["login01"]["ntp_servers"] == ["a"]
    hosts.write_text(base + "    gpu-nodes:\n      hosts:\n        node09: {}\n")
    with pytest.raises(InputError) as e:
        inventory.load(inv)
    assert str(e.value) == (f"{hosts}: all.*.hosts.node09: host must be in exactly one of the groups gpu_nodes, "
                            "switches, subnet_managers (it is in gpu-nodes); did you mean gpu_nodes?")
