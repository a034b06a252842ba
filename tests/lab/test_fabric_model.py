"""The lab's fabric model (tuning.lab.model): the numbers the tests and the engine rely on.

The state directory is built here by :func:`make_state` (per the lab contract), not by the
lab's sysroot builder, so the model is tested on its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuning.errors import InputError
from tuning.lab.fabric import Nic, default_fabric
from tuning.lab.inject import inject, list_injections
from tuning.lab.model import active_mtu, compute

TUNED_ROCE = {"enabled": True, "mode": "lossless", "pfc_priority": 3, "trust": "pcp,dscp",
              "dscp_to_switch_priority": {"26": 3, "48": 6}, "lossless_tc": 3, "ecn_tcs": [3],
              "ecn_min_bytes": 150000, "ecn_max_bytes": 1500000}


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _gid_table(nic: Nic) -> list[tuple[str, str]]:
    """GID entries 0.. in mlx5 order (lab contract): link-local v1/v2 [second fe80], IPv4 v1/v2."""
    ll = [f"fe80:0000:0000:0000:0e42:a1ff:fe{nic.rail:02x}:{n:04x}" for n in (1, 2)]
    a, b, c, d = (int(x) for x in nic.ipv4.split("/")[0].split("."))
    ipv4 = f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"
    addrs = ll if nic.extra_link_local else ll[:1]
    return [(g, t) for g in addrs + [ipv4] for t in ("IB/RoCE v1", "RoCE v2")]


def set_nic(state: Path, node: str, dev: str, *, mtu: int = 1500, trust: str = "pcp",
            pfc_prio: int | None = None, ecn_prio: int | None = None, tos: int = 0) -> None:
    """Write one NIC's sysroot files (netdev MTU, DCB json, ECN, ToS, GID table)."""
    fabric_node = next(n for n in default_fabric().nodes if n.name == node)
    nic = next(c for c in fabric_node.nics if c.rdma_device == dev)
    root = state / "nodes" / node / "sysroot"
    net = root / "sys/class/net" / nic.netdev
    _put(net / "mtu", str(mtu))
    pfc = [int(p == pfc_prio) for p in range(8)]
    _put(root / "run/lab/dcb" / f"{nic.netdev}.json",
         json.dumps({"trust": trust, "pfc": pfc, "dscp2prio": [d // 8 for d in range(64)]}))
    if fabric_node.driver == "ofed":
        for kind in ("roce_np", "roce_rp"):
            for p in range(8):
                _put(net / "ecn" / kind / "enable" / str(p), str(int(p == ecn_prio)))
    if tos:
        _put(root / "sys/kernel/config/rdma_cm" / dev / "ports/1/default_roce_tos", str(tos))
    port = root / "sys/class/infiniband" / dev / "ports/1"
    for i, (gid, kind) in enumerate(_gid_table(nic)):
        _put(port / "gids" / str(i), gid)
        _put(port / "gid_attrs/types" / str(i), kind)
        _put(port / "gid_attrs/ndevs" / str(i), nic.netdev)


def set_switch(state: Path, name: str, *, roce: dict | None = None, mtus: dict[str, int] | None = None) -> None:
    """Write ``switches/<name>.fabric.json``: every port 9216 unless ``mtus`` says otherwise."""
    sw = default_fabric().switch(name)
    ports = {p: {"mtu": (mtus or {}).get(p, 9216)} for p in sw.ports}
    _put(state / "switches" / f"{name}.fabric.json",
         json.dumps({"ports": ports, "roce": roce or {"enabled": False, "mode": None}}))


def make_state(root: Path, *, tuned: bool = False, nics: tuple[str, ...] = ("mlx5_0", "mlx5_1"),
               nodes: tuple[str, ...] = ("node01", "node02")) -> Path:
    """A minimal lab state dir: fabric.json, the named NICs' sysroot files and the switches.

    ``tuned`` = the inventory's tuned state (MTU 9000, trust dscp, PFC+ECN on 3, ToS 106,
    switches lossless on 3); otherwise the untuned initial state of the lab contract.
    """
    state = root / "state"
    state.mkdir(parents=True)
    default_fabric().save(state / "fabric.json")
    knobs = dict(mtu=9000, trust="dscp", pfc_prio=3, ecn_prio=3, tos=106) if tuned else {}
    for node in nodes:
        for dev in nics:
            set_nic(state, node, dev, **knobs)
    for sw in ("leaf01", "leaf02", "spine01"):
        set_switch(state, sw, roce=TUNED_ROCE if tuned else None)
    return state


@pytest.fixture
def tuned(tmp_path: Path) -> Path:
    return make_state(tmp_path, tuned=True)


def test_active_mtu_rule() -> None:
    assert [active_mtu(m) for m in (1500, 2200, 4183, 4184, 4200, 9000)] == [1024, 2048, 2048, 4096, 4096, 4096]


def test_tuned_leaf_path_is_lossless_and_near_line_rate(tuned: Path) -> None:
    o = compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    assert o.error is None and o.reasons == []
    assert o.path == ["node01:mlx5_0", "leaf01:swp1", "leaf01", "leaf01:swp2", "node02:mlx5_0"]
    assert (o.active_mtu, o.lossless, o.ecn) == (4096, True, True)
    assert 388 < o.bw_avg_gbps < 393 and o.bw_peak_gbps >= o.bw_avg_gbps
    assert o.lat_min_us < o.lat_typical_us < o.lat_avg_us < o.lat_p99_us < o.lat_p999_us < o.lat_max_us
    assert o.client_gid == "0000:0000:0000:0000:0000:ffff:0a00:0001"


def test_same_inputs_same_numbers(tuned: Path) -> None:
    a = compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    assert a == compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")


def test_untuned_is_slower_lossy_mtu1024(tmp_path: Path) -> None:
    good = compute(make_state(tmp_path / "good", tuned=True), "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    bad = compute(make_state(tmp_path / "bad"), "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    assert (bad.active_mtu, bad.lossless) == (1024, False)
    assert bad.bw_avg_gbps < 0.75 * good.bw_avg_gbps
    assert bad.lat_typical_us > good.lat_typical_us + 2
    assert any("trust pcp" in r for r in bad.reasons) and any("leaf01 RoCE not lossless" in r for r in bad.reasons)


def test_leaf_port_mtu_1500_on_tuned_path_collapses(tuned: Path) -> None:
    good = compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    set_switch(tuned, "leaf01", roce=TUNED_ROCE, mtus={"swp2": 1500})
    bad = compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    assert bad.bw_avg_gbps < 0.05 * good.bw_avg_gbps
    assert bad.lat_typical_us > good.lat_typical_us + 30
    assert bad.reasons == ["leaf01:swp2 MTU 1500 < RoCEv2 frame 4174 bytes: drops"]


def test_lossy_switch_lowers_bandwidth(tuned: Path) -> None:
    good = compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    set_switch(tuned, "leaf01", roce={**TUNED_ROCE, "pfc_priority": 4})
    bad = compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    assert not bad.lossless
    assert bad.bw_avg_gbps == pytest.approx(0.70 * good.bw_avg_gbps, rel=0.01)
    assert good.lat_typical_us + 2 < bad.lat_typical_us and bad.lat_p99_us - good.lat_p99_us > 6


def test_nic_pfc_on_wrong_priority_is_lossy(tuned: Path) -> None:
    set_nic(tuned, "node02", "mlx5_0", mtu=9000, trust="dscp", pfc_prio=4, ecn_prio=3, tos=106)
    o = compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    assert not o.lossless and "lossy: node02:mlx5_0 PFC off on priority 3 (DSCP 26)" in o.reasons


def test_ecn_off_costs_ten_percent(tuned: Path) -> None:
    good = compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    set_nic(tuned, "node02", "mlx5_0", mtu=9000, trust="dscp", pfc_prio=3, tos=106)
    bad = compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    assert bad.lossless and not bad.ecn
    assert bad.bw_avg_gbps == pytest.approx(0.90 * good.bw_avg_gbps, rel=0.01)
    assert bad.lat_typical_us == pytest.approx(good.lat_typical_us + 1.0, abs=0.15)
    set_nic(tuned, "node02", "mlx5_0", mtu=9000, trust="dscp", pfc_prio=3, ecn_prio=3, tos=106)
    set_switch(tuned, "leaf01", roce={**TUNED_ROCE, "ecn_tcs": [0]})
    assert compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw").reasons == [
        "ECN off: leaf01 ECN not on lossless TC 3"]


def test_inbox_driver_has_ecn_on(tuned: Path) -> None:
    set_nic(tuned, "node04", "mlx5_0", mtu=9000, trust="dscp", pfc_prio=3, tos=106)  # inbox: no ecn/ files
    o = compute(tuned, "node01", "mlx5_0", "node04", "mlx5_0", 3, "write_bw")
    assert (o.lossless, o.ecn, o.reasons) == (True, True, [])


def test_spine_path_latency_above_leaf_path(tuned: Path) -> None:
    leaf = compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "read_lat", size=2)
    spine = compute(tuned, "node01", "mlx5_0", "node02", "mlx5_1", 3, "read_lat", size=2)
    assert spine.path[2:7] == ["leaf01", "leaf01:swp31", "spine01:swp1", "spine01", "spine01:swp2"]
    assert spine.lat_typical_us - leaf.lat_typical_us == pytest.approx(1.2, abs=0.1)
    assert 2.1 < leaf.lat_typical_us < 2.4


def test_degrade_halves_and_down_fails(tuned: Path) -> None:
    good = compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    inject(tuned, "leaf01:swp2", "degrade")
    bad = compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    assert bad.bw_avg_gbps == pytest.approx(good.bw_avg_gbps / 2, rel=0.01)
    assert bad.lat_typical_us == pytest.approx(good.lat_typical_us + 5, abs=0.2)
    inject(tuned, "node02:mlx5_0", "down")
    down = compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    assert (down.error, down.bw_avg_gbps) == ("connect_failed", 0.0)
    assert list_injections(tuned) == [{"target": "leaf01:swp2", "kind": "degrade"},
                                      {"target": "node02:mlx5_0", "kind": "down"}]
    inject(tuned, "leaf01:swp2", "clear")
    inject(tuned, "node02:mlx5_0", "clear")
    assert list_injections(tuned) == []
    assert compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw") == good


def test_inject_refuses_bad_target_and_kind(tuned: Path) -> None:
    with pytest.raises(InputError, match="node01:mlx5_0"):
        inject(tuned, "node09:mlx5_0", "down")
    with pytest.raises(InputError, match="swp31"):
        inject(tuned, "leaf01:swp99", "down")
    with pytest.raises(InputError, match="degrade, down, clear"):
        inject(tuned, "leaf01:swp1", "wobble")  # (D, issue 10: "flap" is a lab fault now)
    with pytest.raises(InputError, match="no NIC node01:mlx5_9"):
        compute(tuned, "node01", "mlx5_9", "node02", "mlx5_0", 3, "write_bw")


def test_gid_not_roce_v2_ipv4_is_rtr_failure(tuned: Path) -> None:
    set_nic(tuned, "node03", "mlx5_0", mtu=9000, trust="dscp", pfc_prio=3, ecn_prio=3, tos=106)
    assert compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 1, "write_bw").error == "qp_rtr_failed"
    # node03 mlx5_0 has an extra link-local address: its IPv4 RoCE v2 GID is 5, index 3 is fe80.
    bad = compute(tuned, "node03", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    assert bad.error == "qp_rtr_failed" and "node03:mlx5_0 GID index 3 is RoCE v2 fe80" in bad.reasons[0]
    ok = compute(tuned, "node03", "mlx5_0", "node02", "mlx5_0", 5, "write_bw", server_gid_index=None)
    assert (ok.error, ok.server_gid_index) == (None, 3)


def test_tos_kept_outside_configfs_is_read(tuned: Path) -> None:
    """cma_roce_tos removes the configfs group it created; the kernel keeps the value."""
    for node in ("node01", "node02"):
        root = tuned / "nodes" / node / "sysroot"
        (root / "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos").unlink()
        _put(root / "run/lab/rdma_cm/mlx5_0.json", json.dumps({"default_roce_mode": "RoCE v2", "default_roce_tos": 106}))
    assert compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw").lossless
    (tuned / "nodes/node02/sysroot/run/lab/rdma_cm/mlx5_0.json").unlink()  # ToS 0 -> DSCP 0 -> priority 0
    o = compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    assert not o.lossless and "lossy: node01:mlx5_0 PFC off on priority 0 (DSCP 0)" in o.reasons


@pytest.mark.parametrize("n_nodes", [4, 8])
def test_the_stand_ins_path_is_the_one_networkx_gives_for_every_nic_pair(n_nodes: int):
    """The perftest stand-ins search the cabling themselves (no networkx import per call): the lab's
    cabling is a tree, so each NIC pair's path equals ``networkx.shortest_path``'s."""
    import networkx as nx

    from tuning.lab.fabric import default_fabric
    from tuning.lab.model import fabric_graph, shortest_path

    fabric = default_fabric(n_nodes=n_nodes)
    graph = fabric_graph(fabric)
    nics = [f"{n.name}:{c.rdma_device}" for n in fabric.nodes for c in n.nics]
    for a in nics:
        for b in nics:
            if a != b:
                assert shortest_path(fabric, a, b) == nx.shortest_path(graph, a, b), (a, b)
    assert shortest_path(fabric, "node01:mlx5_0", "node02:mlx5_0") == [
        "node01:mlx5_0", "leaf01:swp1", "leaf01", "leaf01:swp2", "node02:mlx5_0"]
    with pytest.raises(ValueError, match="no path"):
        shortest_path(fabric, "node01:mlx5_0", "node99:mlx5_0")


def test_admin_down_switch_port_fails_the_path_as_a_down_link(tuned: Path) -> None:
    """Issue 21: a leaf port set `link state down` (its fabric.json says so) carries nothing."""
    set_switch(tuned, "leaf01", roce=TUNED_ROCE)
    data = json.loads((tuned / "switches" / "leaf01.fabric.json").read_text())
    data["ports"]["swp2"]["state"] = "down"
    _put(tuned / "switches" / "leaf01.fabric.json", json.dumps(data))
    o = compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw")
    assert (o.error, o.reasons) == ("connect_failed", ["leaf01:swp2 link down (injected or admin down)"])
    set_switch(tuned, "leaf01", roce=TUNED_ROCE)  # back up
    assert compute(tuned, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw").error is None
