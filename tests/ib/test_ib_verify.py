"""The IB verification's verdicts (:mod:`tuning.verify.ib_sm`, intents :mod:`tuning.targets.sm_verify`), no lab: which partitions a plan makes
it prove, what each member's pkey table and each pair's path record must hold, and a check that ran
nothing read as the harness's error. The path records and the PortInfo are real saquery / smpquery
outputs of the IB lab (``tests/ib/cases/``); the lab tests are ``test_ib_verify_lab.py``."""

from __future__ import annotations

from pathlib import Path

from tuning.model.ib_sm import SmSpec
from tuning.parsers.ib_sm import parse_portinfo, parse_saquery_pr
from tuning.targets import sm_partitions as sp
from tuning.targets.sm_verify import intents
from tuning.verify import ib_sm

from tests.ib.test_sm_model import DEFAULT, PORTS, TENANT

CASES = Path(__file__).parent / "cases"
GUIDS = {f"{p.guid:#018x}": p for p in PORTS}
NAMES = {g: p.name for g, p in GUIDS.items()}
ALL_FULL = {g: {"0x7fff": "full"} for g in GUIDS}


def spec(*parts: dict) -> SmSpec:
    return SmSpec.model_validate({"partitions": list(parts)})


def plan(s: SmSpec, before: dict = ALL_FULL) -> list:
    return sp.plan("sm01", s, {"ports": PORTS, "partitions": "", "pkeys": before})


def test_a_new_tenant_is_proven_with_the_default_partition_as_the_inventory_defines_them():
    s = spec(DEFAULT, TENANT)
    wanted = intents(s, PORTS, plan(s), ALL_FULL)
    assert [(i.name, i.pkey, i.mtu_bytes, i.sl, i.source) for i in wanted] == [
        ("tenant1", 1, 4096, 3, "inventory"), ("Default", 0x7FFF, None, None, "inventory")]
    tenant = wanted[0]
    assert sorted(tenant.members.values()).count("full") == 8 and len(tenant.members) == 16


def test_the_default_partition_without_a_rule_keeps_each_ports_membership_of_before_the_run():
    s = spec(TENANT)
    [tenant, default] = intents(s, PORTS, plan(s), ALL_FULL)
    assert (default.name, default.source, set(default.members.values())) == ("Default", "before the run", {"full"})
    # what OpenSM programs from that file: every HCA a limited member of 0x7fff
    after = {g: {**t, "0x7fff": "limited"} for g, t in ALL_FULL.items()}
    verdict = ib_sm.judge_pkeys("sm01", default, NAMES, after)
    assert verdict.status == "fail" and len(verdict.reasons) == 16
    assert verdict.reasons[0] == ("node01 mlx5_0/1: 0x7fff limited, want full (full before the run: it cannot talk "
                                  "to other limited members)")
    assert ib_sm.judge_pkeys("sm01", default, NAMES, ALL_FULL).judged == [
        "smpquery pkeys: 16 member port(s) hold 0x7fff as intended (before the run): 16 full (0xffff), 0 limited (0x7fff)"]


def test_a_member_that_lost_the_pkey_or_left_the_fabric_is_named():
    s = spec(DEFAULT, TENANT)
    tenant = intents(s, PORTS, plan(s), ALL_FULL)[0]
    tables = sp.expected_tables(s, PORTS)
    first, second = sorted(tenant.members, key=NAMES.get)[:2]
    del tables[first]["0x0001"]
    del tables[second]
    verdict = ib_sm.judge_pkeys("sm01", tenant, NAMES, tables)
    assert verdict.reasons == ["node01 mlx5_0/1: 0x0001 absent, want full",
                               "node01 mlx5_1/1: 0x0001 no Active port (iblinkinfo), want full"]


def test_an_unchanged_partition_is_not_proven_again_and_a_removed_one_must_be_gone():
    s = spec(DEFAULT, TENANT)
    served = sp.render(s, PORTS)
    now = sp.expected_tables(s, PORTS)
    assert [i.name for i in intents(s, PORTS, sp.plan("sm01", s, {"ports": PORTS, "partitions": served,
                                                                          "pkeys": now}), now)] == ["Default"]
    gone = spec(DEFAULT)
    wanted = intents(gone, PORTS, sp.plan("sm01", gone, {"ports": PORTS, "partitions": served, "pkeys": now}), now)
    assert [i.name for i in wanted] == ["removed 0x0001", "Default"]
    assert ib_sm.judge_pkeys("sm01", wanted[0], NAMES, now).reasons[0] == (
        "node01 mlx5_0/1: holds 0x0001 (full), the partition was removed")


def test_a_path_record_is_judged_on_the_partitions_sl_and_its_mtu_capped_by_the_ends():
    records = parse_saquery_pr((CASES / "saquery_pr__tenant_pkey_0x8001_mtu2048_sl0.txt").read_text()).records
    cap = parse_portinfo((CASES / "smpquery_portinfo__hca_mtucap_2048.txt").read_text()).mtu_cap_bytes
    hub = sp.CaPort("node01 mlx5_0", 1, 0x0C42A10300000101, records[0].slid)
    member = sp.CaPort("node02 mlx5_0", 1, 0x0C42A10300000201, records[0].dlid)
    caps = {f"{hub.guid:#018x}": cap, f"{member.guid:#018x}": cap}
    it = ib_sm.Intent("tenant1", 1, {}, 4096, 3, "inventory")
    [bad] = ib_sm.judge_paths(it, hub, [member], records, caps)
    assert bad.status == "fail" and bad.reasons == [
        f"saquery PR --src-to-dst {hub.lid}:{member.lid} --pkey 0x8001: mtu 2048 (MtuCap 2048), sl 0: sl 0, want 3"]
    [ok] = ib_sm.judge_paths(ib_sm.Intent("tenant1", 1, {}, 4096, 0, "inventory"), hub, [member], records, caps)
    assert (ok.status, ok.mtu_bytes, ok.mtu_allowed) == ("pass", 2048, 2048)  # 4096 capped by MtuCap 2048
    [short] = ib_sm.judge_paths(it, hub, [member], records, {**caps, f"{hub.guid:#018x}": 4096,
                                                             f"{member.guid:#018x}": 4096})
    assert short.reasons[0].endswith("mtu 2048, want 4096 (mtu 4096 capped by the ends' MtuCap 4096); sl 0, want 3")
    [none] = ib_sm.judge_paths(it, hub, [member], [], caps)
    assert none.reasons == [f"saquery PR --src-to-dst {hub.lid}:{member.lid} --pkey 0x8001: no path record (the pair "
                            "cannot talk in the partition)"]


def test_a_check_with_nothing_to_read_is_the_harness_error_never_a_pass():
    lone = ib_sm.Intent("solo", 5, {f"{PORTS[0].guid:#018x}": "full"}, None, 1, "inventory")
    assert ib_sm.path_plan(lone, GUIDS) is None
    verdict = ib_sm.judge_pkeys("sm01", ib_sm.Intent("empty", 5, {}, None, None, "inventory"), NAMES, {})
    assert (verdict.status, verdict.error_kind, verdict.error_class) == ("error", "no_pairs", "harness")


def test_partitions_no_verification_can_read_are_named_from_the_inventory_alone():
    switches = {"name": "sw", "pkey": 3, "members": {"ALL_SWITCHES": "full"}}
    limited = {"name": "st", "pkey": 4, "sl": 2, "members": {"node01": "limited"}}
    assert ib_sm.unprovable(spec(DEFAULT, TENANT)) == []
    assert ib_sm.unprovable(spec(DEFAULT, switches, limited)) == [
        "partition sw has no HCA member (only ALL_SWITCHES): no port to read",
        "partition st asks mtu/sl and has no full member: limited members have no path record between them"]


def test_a_failed_gate_names_the_ib_verdicts_and_their_evidence():
    from tuning.rollout.gate import gate_failed_why

    s = spec(TENANT)
    default = intents(s, PORTS, plan(s), ALL_FULL)[1]
    bad = ib_sm.judge_pkeys("sm01", default, NAMES, {g: {"0x7fff": "limited"} for g in GUIDS})
    lone = ib_sm.harness("sm01", "solo paths", "no_pairs", "partition solo: no full member")
    assert gate_failed_why(1, [dict(bad.__dict__), dict(lone.__dict__)]) == (
        "batch 1: verification failed or regressed (1 pair(s) not tested: the verification harness failed); "
        "ib Default 0x7fff pkeys: node01 mlx5_0/1: 0x7fff limited, want full (full before the run: it cannot talk "
        "to other limited members) (+15 more)")
    assert gate_failed_why(1, [dict(lone.__dict__)]).startswith(
        "batch 1: the verification harness failed on 1 pair(s) (no_pairs on sm01): the fabric was not tested")


def test_portinfo_of_the_real_smpquery_gives_the_ports_mtu_cap():
    info = parse_portinfo((CASES / "smpquery_portinfo__hca_mtucap_2048.txt").read_text())
    assert (info.lid, info.port, info.mtu_cap_bytes, info.fields["LinkWidthActive"]) == (2, 1, 2048, "4X")


def test_a_standalone_verification_proves_every_partition_the_inventory_defines_and_nothing_else():
    """No plan, no journal (``fabtune verify``): each partition of the inventory as OpenSM programs it;
    the Default partition only when the inventory has a rule for it; none defined: nothing to prove."""
    both = intents(spec(DEFAULT, TENANT), PORTS, None, None)
    assert [(i.name, i.source, len(i.members)) for i in both] == [("tenant1", "inventory", 16), ("Default", "inventory", 16)]
    assert [i.name for i in intents(spec(TENANT), PORTS, None, None)] == ["tenant1"]
    assert intents(spec(), PORTS, None, None) == []
