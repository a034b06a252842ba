"""The lab fabric model under incast (tuning.lab.model.incast, incast_counters) and the lab's NIC
counters (tuning.lab.counters, the ``ethtool -S`` stand-in): the numbers of the model's contract,
computed on state directories built here (no lab, no SSH)."""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from tests.lab.test_fabric_model import TUNED_ROCE, make_state, set_nic, set_switch
from tuning.lab import counters
from tuning.lab.fabric import default_fabric
from tuning.lab.model import compute, incast, incast_counters, incast_weights
from tuning.lab.sysroot import build_sysroot, dcb_path
from tuning.parsers.nic import parse_ethtool_s
from tuning.parsers.rdma_counters import parse_hw_counters

SENDERS = ("node02", "node03", "node04")
LINE = 400.0


def _state(tmp_path: Path, tuned: bool, ecn: bool = True) -> Path:
    state = make_state(tmp_path, tuned=tuned, nics=("mlx5_0",), nodes=("node01", *SENDERS))
    if tuned and not ecn:
        for node in ("node01", *SENDERS):
            set_nic(state, node, "mlx5_0", mtu=9000, trust="dscp", pfc_prio=3, ecn_prio=None, tos=106)
        set_switch(state, "leaf01", roce={**TUNED_ROCE, "ecn_tcs": []})
    return state


def _run(state: Path, k: int = 3):
    """Every sender's outcome and counters of a k-to-1 incast into node01:mlx5_0 (2 s)."""
    outs = [incast(compute(state, s, "mlx5_0", "node01", "mlx5_0", None, "write_bw"), "node01:mlx5_0", k, i)
            for i, s in enumerate(SENDERS[:k])]
    return outs, [incast_counters(o, k, 2.0) for o in outs]


def test_pair_is_unchanged(tmp_path: Path) -> None:
    state = _state(tmp_path, tuned=True)
    o = compute(state, "node02", "mlx5_0", "node01", "mlx5_0", None, "write_bw")
    assert incast(o, "node01:mlx5_0", 1, 0) is o
    c = incast_counters(o, 1, 2.0)
    assert set(c.sender) == {"tx_prio3_bytes", "tx_prio3_packets", "tx_bytes_phy", "tx_packets_phy"} and set(
        c.receiver) == {"rx_prio3_bytes", "rx_prio3_packets", "rx_bytes_phy", "rx_packets_phy"}


def test_lossy_incast_drops_retransmits_and_is_unfair(tmp_path: Path) -> None:
    outs, cs = _run(_state(tmp_path, tuned=False))
    bws = [o.bw_avg_gbps for o in outs]
    fair = LINE / 3
    assert sum(bws) == pytest.approx(0.45 * LINE, rel=1e-3)
    assert min(bws) < 0.5 * fair and max(bws) - min(bws) > 0.2 * fair
    for c in cs:  # untuned: trust pcp, so RoCE travels on priority 0
        assert c.receiver["rx_prio0_discards"] > 0 and c.receiver["out_of_sequence"] > 0
        assert c.receiver["packet_seq_err"] > 0 and c.sender["local_ack_timeout_err"] > 0
        assert not {"np_cnp_sent", "rp_cnp_handled", "rx_prio0_pause", "tx_prio0_pause"} & (
            c.sender.keys() | c.receiver.keys())


def test_pfc_only_incast_pauses_fairly_without_cnp(tmp_path: Path) -> None:
    outs, cs = _run(_state(tmp_path, tuned=True, ecn=False))
    bws = [o.bw_avg_gbps for o in outs]
    fair = LINE / 3
    assert sum(bws) == pytest.approx(0.96 * LINE, rel=1e-3)
    assert all(abs(b / fair - 1) <= 0.10 for b in bws) and max(bws) > min(bws)
    for c in cs:
        assert c.sender["rx_prio3_pause"] >= 1000 and c.receiver["tx_prio3_pause"] >= 1000
        assert not {"np_cnp_sent", "rp_cnp_handled", "out_of_sequence"} & (c.sender.keys() | c.receiver.keys())


def test_pfc_ecn_incast_is_fair_with_cnps_and_few_pauses(tmp_path: Path) -> None:
    outs, cs = _run(_state(tmp_path / "ecn", tuned=True))
    _, pfc = _run(_state(tmp_path / "pfc", tuned=True, ecn=False))
    bws = [o.bw_avg_gbps for o in outs]
    assert sum(bws) == pytest.approx(0.97 * LINE, rel=1e-3)
    assert all(abs(b / (LINE / 3) - 1) <= 0.05 for b in bws)
    for c, p in zip(cs, pfc):
        assert c.receiver["np_cnp_sent"] > 0 and c.sender["rp_cnp_handled"] > 0
        assert 0 < c.receiver["tx_prio3_pause"] < 0.01 * p.receiver["tx_prio3_pause"]
        assert "out_of_sequence" not in c.receiver and "rx_prio3_discards" not in c.receiver


@pytest.mark.parametrize("k", [2, 4, 8, 16])
def test_weights_average_one_and_spread_by_mode(k: int) -> None:
    for mode, spread in (("lossy", 0.30), ("pfc", 0.02), ("ecn", 0.01)):
        w = incast_weights("node01:mlx5_0", k, mode)
        assert sum(w) / k == pytest.approx(1.0) and all(abs(x - 1) <= spread + 1e-9 for x in w)
        assert max(w) - min(w) == pytest.approx(2 * spread)
        assert w == incast_weights("node01:mlx5_0", k, mode)  # deterministic
    with pytest.raises(ValueError):
        incast_weights("node01:mlx5_0", 0, "pfc")


def test_counter_files_and_ethtool_s_format(tmp_path: Path, cases_dir: Path, monkeypatch) -> None:
    node = default_fabric().nodes[0]
    root = tmp_path / "sysroot"
    build_sysroot(root, node)
    nic = node.nics[0]
    assert (root / "sys/class/net" / nic.netdev / "speed").read_text() == "400000\n"
    hw = counters.hw_dir(root, nic.rdma_device)
    sample = (cases_dir / "hw_counters__sysfs_grep_mlx5_port1.txt").read_text()
    names = re.findall(r"hw_counters/(\w+):", sample)
    assert set(names) <= {p.name for p in hw.iterdir()} and "rp_cnp_handled" in counters.HW_COUNTERS
    assert oct(hw.stat().st_mode & 0o777) == "0o555" and all(p.stat().st_mode & 0o777 == 0o444 for p in hw.iterdir())
    counters.bump(root, nic.netdev, nic.rdma_device, {"np_cnp_sent": 7, "rx_prio3_pause": 9, "rx_prio3_discards": 2})
    text = "".join(f"/sys/class/infiniband/{nic.rdma_device}/ports/1/hw_counters/{p.name}:{p.read_text()}"
                   for p in sorted(hw.iterdir()))
    port = parse_hw_counters(text).ports[0].counters
    assert port["np_cnp_sent"] == 7 and port["lifespan"] == 10 and port["out_of_sequence"] == 0
    assert (hw / "np_cnp_sent").stat().st_mode & 0o777 == 0o444

    from tuning.lab.tools.ethtool import ethtool, pause_path

    monkeypatch.setenv("FABTUNE_LAB_SYSROOT", str(root))
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out):  # untuned (PFC off, 802.3x pause on): mlx5 lists no per-priority pause counter
        assert ethtool(["-S", nic.netdev]) == 0
    untuned = [ln.split(":")[0].strip() for ln in out.getvalue().splitlines()[1:]]
    assert "rx_global_pause" in untuned and not [n for n in untuned if re.fullmatch(r"[rt]x_prio\d_pause\w*", n)]
    # as the sample's NIC: PFC on priority 3, 802.3x pause off
    dcb = json.loads(dcb_path(root, nic.netdev).read_text())
    dcb_path(root, nic.netdev).write_text(json.dumps({**dcb, "pfc": [0, 0, 0, 1, 0, 0, 0, 0]}))
    pause_path(root, nic.netdev).write_text(json.dumps({"autoneg": False, "rx": False, "tx": False}))
    out = io.StringIO()
    with redirect_stdout(out):
        assert ethtool(["-S", nic.netdev]) == 0
    with redirect_stderr(err):
        assert ethtool(["-S", "nosuch0"]) == 96
    assert err.getvalue() == "Cannot get stats strings information: No such device\n"
    lines = out.getvalue().splitlines()
    assert lines[0] == "NIC statistics:" and all(re.fullmatch(r"     [a-z0-9_]+: \d+", ln) for ln in lines[1:])
    ref = [ln for ln in (cases_dir / "ethtool_S__mlx5_grep_prio3_pause_discards_roce_congested.txt").read_text()
           .splitlines() if not ln.startswith("$")]
    ours = [ln.split(":")[0] for ln in lines[1:]]
    want = [ln.split(":")[0] for ln in ref]
    assert [n for n in ours if n in want] == want  # every sample name, in the sample's (the driver's) order
    for p in range(8):
        for fam in ("bytes", "packets", "pause", "pause_duration", "discards"):
            assert (f"     rx_prio{p}_{fam}: " in out.getvalue()) == (p == 3 or "pause" not in fam), (p, fam)
    assert "global_pause" not in out.getvalue()
    stats = parse_ethtool_s(out.getvalue()).counters
    assert stats["rx_prio3_pause"] == 9 and stats["rx_prio3_discards"] == 2 and "np_cnp_sent" not in stats
    assert json.loads(counters.stats_path(root, nic.netdev).read_text())["rx_prio3_pause"] == 9


def test_a_degraded_receiver_link_caps_the_incast_total(tmp_path: Path) -> None:
    """A degrade on the receiver's leaf port halves what every sender can push through it together:
    the lab never lets an incast total more than the receiver's link carries (a new user saw 388 of
    400 Gb/s pass through a link the pair tests measured at about 195)."""
    from tuning.lab.fabric import Fabric

    state = _state(tmp_path, tuned=True)
    fabric = Fabric.load(state / "fabric.json")
    port = default_fabric().node("node01").nics[0].switch_port
    fabric.injections = [{"target": f"leaf01:{port}", "kind": "degrade"}]
    fabric.save(state / "fabric.json")
    outs, _ = _run(state)
    assert sum(o.bw_avg_gbps for o in outs) == pytest.approx(0.97 * LINE * 0.5, rel=1e-3)
    pair = compute(state, "node02", "mlx5_0", "node01", "mlx5_0", None, "write_bw")
    assert sum(o.bw_avg_gbps for o in outs) <= pair.bw_avg_gbps * 1.0  # no more than the link measured alone
