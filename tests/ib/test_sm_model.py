"""The subnet manager's inventory (issue 22): partitions, SM priority and routing engine read from
host_vars / group_vars like every setting, bad values refused with file, key and the allowed values;
partitions.conf rendered from them over the fabric's port GUIDs, and the plan's diff (no lab)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tuning import inventory
from tuning.errors import InputError, RollbackError
from tuning.lab.fabric import default_fabric
from tuning.lab.ib_topology import topology_for
from tuning.model.ib_sm import SmSpec
from tuning.targets import sm_partitions as sp
from tuning.targets import target_for
from tuning.targets.sm import SmTarget, snapshot_of

from tests.input.test_strict import error as load_error  # one line naming file, key, allowed values

TOPO = topology_for(default_fabric(n_nodes=2))
#: the fabric's HCA ports as the SM reads them (iblinkinfo: description, port, GUID, LID)
PORTS = [sp.CaPort(h.description, 1, h.port_guid, i) for i, h in enumerate(TOPO.hcas, 2)]
DEFAULT = {"name": "Default", "pkey": 0x7FFF, "ipoib": True, "members": {"ALL": "full"}}
TENANT = {"name": "tenant1", "pkey": "0x0001", "ipoib": True, "mtu": 5, "sl": 3,
          "members": {"node01": "full", "node02": "limited"}}


def write_inventory(root: Path, sm_vars: dict, group_vars: dict | None = None) -> Path:
    inv = root / "inv"
    (inv / "host_vars").mkdir(parents=True)
    hosts = {"all": {"children": {"subnet_managers": {"hosts": {"sm01": {"ansible_host": "127.0.0.1"}}}}}}
    (inv / "hosts.yaml").write_text(yaml.safe_dump(hosts))
    (inv / "host_vars" / "sm01.yml").write_text(yaml.safe_dump(sm_vars, sort_keys=False))
    if group_vars is not None:
        (inv / "group_vars").mkdir()
        (inv / "group_vars" / "subnet_managers.yml").write_text(yaml.safe_dump(group_vars, sort_keys=False))
    return inv


def test_an_sm_host_reads_its_partitions_priority_and_engine_from_its_vars(tmp_path):
    inv = write_inventory(tmp_path, {"sm_priority": 15, "partitions": [DEFAULT, TENANT]},
                          group_vars={"routing_engine": "updn"})
    dev = inventory.load(inv).devices["sm01"]
    assert (dev.role, dev.spec.platform, dev.spec.sm_priority, dev.spec.routing_engine) == ("sm", "opensm", 15, "updn")
    assert [(p.name, p.pkey, p.members, p.mtu, p.sl) for p in dev.spec.partitions] == [
        ("Default", 0x7FFF, {"ALL": "full"}, None, None), ("tenant1", 1, {"node01": "full", "node02": "limited"}, 5, 3)]
    assert (dev.sources["partitions"], dev.sources["routing_engine"]) == (
        str(inv / "host_vars/sm01.yml"), str(inv / "group_vars/subnet_managers.yml"))
    assert isinstance(target_for(dev), SmTarget) and dev.spec.opensm_partitions_file == "/etc/opensm/partitions.conf"


@pytest.mark.parametrize("key, value, expected", [
    ("sm_priority", 16, "host_vars/sm01.yml: sm_priority: 16 is outside 0..15 (host sm01)"),
    ("sm_priority", True, "sm_priority: True is a bool"),
    ("routing_engine", "fat-tree", "routing_engine: 'fat-tree' is not an OpenSM routing engine; allowed: minhop, "
                                   "updn, dnup, file, ftree, lash, dor, torus-2QoS, nue, dfsssp, sssp (host sm01)"),
    ("opensm_partitions_file", "etc/opensm/p.conf", "is not an absolute path"),
    ("opensm_partitions_file", "/etc/x;reboot", "is not a usable path"),
    ("platform", "ufm", "platform: 'ufm'"),
])
def test_bad_sm_settings_are_refused_naming_file_key_and_allowed_values(tmp_path, key, value, expected):
    assert expected in load_error(write_inventory(tmp_path, {key: value}))


@pytest.mark.parametrize("change, expected", [
    ({"pkey": 0x8001}, "partitions.0.pkey: 0x8001 is outside 0x0001..0x7fff; allowed: 0x0001..0x7fff"),
    ({"pkey": 0}, "partitions.0.pkey: 0x0000 is outside 0x0001..0x7fff"),
    ({"pkey": "0x1g"}, "partitions.0.pkey: '0x1g' is not a pkey; allowed: 0x0001..0x7fff"),
    ({"pkey": True}, "partitions.0.pkey: True is not a pkey"),
    ({"name": "t;ALL"}, "partitions.0.name: 't;ALL' is not a partition name; allowed: a letter, then up to 31"),
    ({"name": "t x"}, "is not a partition name"),
    ({"mtu": 6}, "partitions.0.mtu: 6 is outside 1..5"),
    ({"sl": 16}, "partitions.0.sl: 16 is outside 0..15"),
    ({"rate": 1}, "partitions.0.rate: 1 is outside 2..22"),
    ({"members": {}}, "partitions.0.members: needs at least 1 entry"),
    ({"members": {"node01": "both"}}, "partitions.0.members.node01: 'both' is not a membership; allowed: full, limited"),
    ({"members": {"node01 ; ALL": "full"}}, "is not a member; allowed: a node name like node01 or one of ALL, ALL_CAS"),
    ({"ipoib": "yes"}, "partitions.0.ipoib: 'yes' is a str"),
    ({"qos": 1}, "partitions.0.qos: unknown key; allowed: ipoib, members, mtu, name, pkey, rate, sl"),
])
def test_bad_partition_values_are_refused_naming_file_key_and_allowed_values(tmp_path, change, expected):
    msg = load_error(write_inventory(tmp_path, {"partitions": [{**TENANT, **change}]}))
    assert msg.startswith("host_vars/sm01.yml: partitions") and expected in msg, msg


def test_fabtune_local_makes_the_sm_this_controller_and_is_an_sm_key_only(tmp_path):
    inv = write_inventory(tmp_path, {"fabtune_local": True})
    assert inventory.load(inv).devices["sm01"].connection.local is True
    (inv / "host_vars/sm01.yml").write_text("fabtune_local: 'yes'\n")
    assert load_error(inv) == "host_vars/sm01.yml: fabtune_local: 'yes' is a str; allowed: true or false (host sm01)"
    hosts = {"all": {"children": {"gpu_nodes": {"hosts": {"node01": {"fabtune_local": True}}}}}}
    (inv / "hosts.yaml").write_text(yaml.safe_dump(hosts))
    (inv / "host_vars/sm01.yml").unlink()
    assert load_error(inv).startswith("hosts.yaml: fabtune_local: not a node setting (host node01)")


def test_a_pkey_or_name_given_twice_is_refused(tmp_path):
    msg = load_error(write_inventory(tmp_path, {"partitions": [DEFAULT, {**TENANT, "pkey": 0x7FFF}]}))
    assert "partitions: partition pkey 0x7fff given twice; allowed: each pkey once" in msg


def test_partitions_conf_names_each_members_port_guids_read_from_the_fabric():
    spec = SmSpec.model_validate({"partitions": [DEFAULT, {**TENANT, "members": {"node02": "limited", "SELF": "full"}}]})
    lines = sp.render(spec, PORTS).splitlines()
    guids = [f"{h.port_guid:#018x}=limited" for h in TOPO.hcas if h.node == "node02"]
    assert lines[1:] == ["Default=0x7fff,ipoib : ALL=full ;",
                         f"tenant1=0x0001,ipoib,mtu=5,sl=3 : {', '.join(guids)}, SELF=full ;"]
    assert guids[0] == "0x0c42a10300000201=limited" and len(guids) == 8


def test_a_definition_longer_than_opensms_line_puts_one_member_a_line():
    topo = topology_for(default_fabric(n_nodes=24))
    ports = [sp.CaPort(h.description, 1, h.port_guid, i) for i, h in enumerate(topo.hcas, 2)]
    nodes = {f"node{k:02d}": "full" for k in range(1, 25)}
    text = sp.render(SmSpec.model_validate({"partitions": [{**TENANT, "members": nodes}]}), ports)
    lines = text.splitlines()
    assert lines[1] == "tenant1=0x0001,ipoib,mtu=5,sl=3 :" and lines[2] == "  0x0c42a10300000101=full,"
    assert len(lines) == 2 + 192 and lines[-1] == "  0x0c42a10300001871=full ;"
    assert max(map(len, lines)) <= sp.MAX_LINE < len(" ".join(lines[1:]))


def test_a_port_listed_twice_takes_its_last_listing_as_opensm_does():
    spec = SmSpec.model_validate({"partitions": [{**TENANT, "members": {"node01": "limited", "ALL_CAS": "full"}},
                                                 {**TENANT, "name": "t2", "pkey": 2,
                                                  "members": {"ALL": "full", "node01": "limited"}}]})
    tables = sp.expected_tables(spec, PORTS)
    assert tables["0x0c42a10300000101"] == {"0x7fff": "limited", "0x0001": "full", "0x0002": "limited"}
    assert tables["0x0c42a10300000201"] == {"0x7fff": "limited", "0x0001": "full", "0x0002": "full"}


def test_a_node_member_is_matched_by_host_name_or_fqdn_never_by_a_firmware_description():
    ports = [sp.CaPort("node01.cluster.local mlx5_0", 1, 0x0C42A10300000101, 2),
             sp.CaPort("MT4129 ConnectX7   Mellanox Technologies", 1, 0x0C42A10300000201, 3),
             sp.CaPort("node011 mlx5_0", 1, 0x0C42A10300000301, 4)]
    spec = SmSpec.model_validate({"partitions": [{**TENANT, "members": {"node01": "full"}}]})
    assert sp.render(spec, ports).splitlines()[1] == "tenant1=0x0001,ipoib,mtu=5,sl=3 : 0x0c42a10300000101=full ;"


def test_a_node_member_without_hca_ports_in_the_fabric_is_refused():
    spec = SmSpec.model_validate({"partitions": [{**TENANT, "members": {"node09": "full"}}]})
    with pytest.raises(InputError, match=r"host_vars/sm01.yml: partitions.0.members.node09: no active HCA port of node "
                                         r"'node09' in the fabric .*nodes there: node01, node02"):
        sp.render(spec, PORTS, "host_vars/sm01.yml")


def test_a_policy_without_a_default_rule_is_planned_as_hcas_turning_limited():
    """The classic: the first tenant's partitions.conf has no Default rule; every HCA port that was
    a full member of 0x7fff becomes a limited one (OpenSM's rule, measured in the lab)."""
    spec = SmSpec.model_validate({"partitions": [TENANT]})
    state = {"ports": PORTS, "partitions": sp.render(SmSpec.model_validate({"partitions": [DEFAULT]}), PORTS),
             "pkeys": {f"{p.guid:#018x}": {"0x7fff": "full"} for p in PORTS}, "sm_priority": "0"}
    changes = sp.plan("sm01", spec, state)
    default = [c for c in changes if c.key.endswith("/0x7fff")]
    assert len(default) == 16 and {(c.before, c.after) for c in default} == {("full", "limited")}
    assert default[0].key == "pkey/node01 mlx5_0/1/0x7fff"
    [f] = sp.findings("sm01", spec, state, changes)
    assert f.code == "ib-default-limited" and f.message.startswith("16 HCA port(s) would become limited members")
    assert f.evidence.startswith("smpquery pkeys now full: node01 mlx5_0/1, node01 mlx5_1/1")


GOOD_SNAPSHOT = {"paths": {"opensm_partitions_file": "/p.conf", "opensm_conf_file": "/o.conf",
                           "opensm_log_file": "/o.log", "opensm_pid_file": "/o.pid",
                           "opensm_subnet_list_file": "/s.lst"},
                 "files_before": {"/p.conf": "Default=0x7fff : ALL=full ;\n", "/o.conf": None},
                 "ports": {"0x0c42a10300000101": "node01 mlx5_0/1"},
                 "pkeys_before": {"0x0c42a10300000101": {"0x7fff": "full"}}, "sm_priority_before": "0"}


@pytest.mark.parametrize("tamper", [
    lambda s: s["paths"].update(opensm_partitions_file="/etc/../sudoers"),
    lambda s: s["paths"].update(opensm_pid_file="/run/x;reboot"),
    lambda s: s["paths"].pop("opensm_log_file"),
    lambda s: s["files_before"].update({"/etc/sudoers": "x"}),
    lambda s: s["ports"].update({"0x1; reboot": "x"}),
    lambda s: s["pkeys_before"]["0x0c42a10300000101"].update({"0x0001": "both"}),
    lambda s: s.update(sm_priority_before=5),
    lambda s: s.pop("files_before"),
])
def test_a_journal_snapshot_that_fails_a_check_is_never_restored_from(tamper):
    """What a restore sends to the SM host's shell comes from the journal: checked before anything runs."""
    assert snapshot_of("sm01", {"snapshot": GOOD_SNAPSHOT}) == GOOD_SNAPSHOT
    snap = json.loads(json.dumps(GOOD_SNAPSHOT))
    tamper(snap)
    with pytest.raises(RollbackError, match="the journal's SM snapshot is missing or malformed"):
        snapshot_of("sm01", {"snapshot": snap})


def _lab_with_sm(tmp_path) -> Path:
    """A 2-node lab inventory (never started) with an SM host sm01 serving the Default partition."""
    from tuning.lab.scale import write_inventory as write_lab_inventory

    inv = write_lab_inventory(tmp_path / "lab", 2)
    (inv / "host_vars" / "sm01.yml").write_text(yaml.safe_dump({"partitions": [DEFAULT]}))
    hosts = yaml.safe_load((inv / "hosts.yaml").read_text())
    hosts["all"]["children"]["subnet_managers"] = {"hosts": {"sm01": {"ansible_host": "127.0.0.1"}}}
    (inv / "hosts.yaml").write_text(yaml.safe_dump(hosts))
    return inv


#: a partition no verification can read: it asks an SL, and two limited members have no path record
UNPROVABLE = {"name": "storage", "pkey": 2, "sl": 1, "members": {"node01": "limited", "node02": "limited"}}


@pytest.mark.parametrize("limit", [[], ["--limit", "sm01"]])
def test_a_rollout_refuses_an_sm_partition_no_verification_can_prove_before_reading_anything(tmp_path, limit):
    """The IB verification reads a partition's path records from a full member: a partition asking
    an SL with limited members only is one line naming the file, the key and why, before any device
    is read (the lab was never started); nothing is pushed or journaled."""
    import subprocess
    import sys

    from tests.conftest import REPO

    inv = _lab_with_sm(tmp_path)
    (inv / "host_vars" / "sm01.yml").write_text(yaml.safe_dump({"partitions": [DEFAULT, UNPROVABLE]}))
    res = subprocess.run([sys.executable, "-m", "tuning", "rollout", "-i", str(inv), *limit, "--journal-dir",
                          str(tmp_path / "j")], capture_output=True, text=True, cwd=REPO, timeout=60)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert lines[0] == (f"fabtune: error: {inv / 'host_vars/sm01.yml'}: partitions: partition storage asks mtu/sl "
                        "and has no full member: limited members have no path record between them: a rollout keeps "
                        "a change only when its verification proves it (host sm01); nothing was pushed"), lines[0]
    assert not (tmp_path / "j").exists() or not list((tmp_path / "j").glob("*.json"))


def test_render_of_an_inventory_with_an_sm_writes_the_rest_and_names_the_sm_it_cannot(tmp_path):
    """An SM's partitions.conf names port GUIDs read from the fabric: `fabtune render` writes every
    other device and says which it left (it exited 1 on the whole inventory before)."""
    import subprocess
    import sys

    from tests.conftest import REPO
    inv = _lab_with_sm(tmp_path)
    res = subprocess.run([sys.executable, "-m", "tuning", "render", "-i", str(inv), "-o", str(tmp_path / "out")],
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "sm01: not rendered: partitions.conf names the members' port GUIDs" in res.stdout
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["leaf01.nvue", "leaf02.nvue", "node01.files", "node02.files", "spine01.nvue"], written
    assert f"wrote 5 file(s) to {tmp_path / 'out'}; 1 device(s) need the fabric" in " ".join(res.stdout.split())


def test_a_port_given_more_pkeys_than_its_table_holds_is_a_finding_naming_it_and_its_capacity():
    tenants = [{"name": f"t{i}", "pkey": 0x0100 + i, "members": {"node01": "full"}} for i in range(3)]
    spec = SmSpec.model_validate({"partitions": [{"name": "Default", "pkey": 0x7FFF, "members": {"ALL": "full"}},
                                                 *tenants]})
    caps = {f"{p.guid:#018x}": 4 for p in PORTS}
    node01 = [p for p in PORTS if p.node == "node01"]
    caps[f"{node01[0].guid:#018x}"] = 3  # one HCA with a smaller table: 4 pkeys do not fit
    state = {"ports": PORTS, "pkey_caps": caps}
    [f] = sp._table_overflow("sm01", spec, state)
    assert (f.code, f.device) == ("ib-pkey-table-full", "sm01")
    assert f.message.startswith(f"1 HCA port(s) would be members of more partitions than their P_Key table holds: "
                                f"{node01[0].name} (4 pkeys, holds 3);")
    assert f.evidence == f"smpquery pkeys: {node01[0].name}: 3 pkeys capacity for this port"
    assert sp._table_overflow("sm01", spec, {"ports": PORTS, "pkey_caps": {}}) == []  # nothing read: nothing judged
