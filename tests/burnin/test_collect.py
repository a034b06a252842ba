"""Burn-in collection (tuning.burnin.collect): one round trip per node over real SSH to a lab with
every burn-in fault injected; the values read back are the faults' (and zero elsewhere)."""

from __future__ import annotations

import pytest

from tests.conftest import running_lab
from tuning import inventory
from tuning.burnin.collect import deltas, node_script, parse_node, read_nodes
from tuning.lab.inject import inject
from tuning.transport.ssh import SshHost
from tuning.verify.pairs import pair_of
from tuning.verify.runner import measure


def _snap(counters: dict[str, int], carrier: int = 0, xid: list[str] | None = None) -> dict:
    return {"nics": {"mlx5_0": {"counters": counters, "link": {"speed_mbps": 400000, "max_speed_mbps": 400000,
                                                              "carrier_down_count": carrier},
                                "pcie": {"width": 16, "max_width": 16, "speed_gts": 32.0, "max_speed_gts": 32.0}}},
            "gpus": [], "xid_lines": xid or []}


def test_a_counter_that_went_backwards_is_a_reset_and_counts_from_zero():
    seen: set[str] = set()
    nics, _ = deltas(_snap({"rx_discards_phy": 500, "np_cnp_sent": 10}, carrier=4),
                     _snap({"rx_discards_phy": 7, "np_cnp_sent": 25}, carrier=1), seen)
    assert nics["mlx5_0"]["counters"] == {"rx_discards_phy": 7, "np_cnp_sent": 15}
    assert nics["mlx5_0"]["counter_resets"] == ["rx_discards_phy"]
    assert nics["mlx5_0"]["link"] == {"speed_mbps": 400000, "max_speed_mbps": 400000, "carrier_down_delta": 1}


def test_an_xid_line_is_reported_once_per_run():
    line = "[  12.000001] NVRM: Xid (PCI:0000:1b:00): 48, pid=77, name=python3, DBE (Double Bit Error) ECC Error"
    seen: set[str] = set()
    _, gpus = deltas(None, _snap({}, xid=[line]), seen)
    assert [(g["bdf"], g["xid"]) for g in gpus] == [("0000:1b:00.0", [48])]
    _, again = deltas(None, _snap({}, xid=[line]), seen)
    assert again == []


@pytest.mark.lab
def test_malformed_values_read_as_unknown_or_a_parse_error_naming_the_line():
    """Issue 10 finding 4: ``[N/A]``, ``-1`` and '\u00b2' (``str.isdigit`` says yes, ``int`` says no)
    are never numbers; a bus id that is none is a ParseError with the nvidia-smi line."""
    from tuning.errors import ParseError

    text = "\n".join(["@@fabtune-burnin hw mlx5_0", "rx_atomic_requests:\u00b2", "out_of_sequence:-1", "np_cnp_sent:12",
                      "@@fabtune-burnin link mlx5_0", "\tSpeed: \u0664\u0660\u0660Mb/s", "carrier_down_count=[N/A]",
                      "@@fabtune-burnin pcie mlx5_0", "current_link_width=\u00b2", "max_link_width=16",
                      "@@fabtune-burnin gpu -", "0, 00000000:1B:00.0, [N/A], [N/A]", "\u0661, 00000000:43:00.0, 0, 0x0",
                      "@@fabtune-burnin remap -", "00000000:1B:00.0, No, No"])
    snap = parse_node(text)
    nic = snap["nics"]["mlx5_0"]
    assert nic["counters"] == {"np_cnp_sent": 12}
    assert nic["link"]["speed_mbps"] is None and nic["link"]["carrier_down_count"] is None
    assert nic["pcie"]["width"] is None and nic["pcie"]["max_width"] == 16
    gpus = [(g["bdf"], g["ecc_uncorrected"], g["throttle_reasons"]) for g in snap["gpus"]]
    assert gpus == [("0000:1b:00.0", None, [])]
    for bad in ("0, [N/A], 0, 0x0", "0, 00000000:ZZ:00.0, 0, 0x0"):
        with pytest.raises(ParseError, match="line 1: expected a PCI bus id") as e:
            parse_node(text.replace("0, 00000000:1B:00.0, [N/A], [N/A]", bad))
        assert bad in str(e.value)
    with pytest.raises(ParseError, match="remapped-rows"):
        parse_node(text.replace("00000000:1B:00.0, No, No", "[N/A], No, No"))


def test_one_round_trip_per_node_reads_every_fault(tmp_path):
    with running_lab(tmp_path) as inv_dir:
        inv = inventory.load(inv_dir)
        hosts = {d.name: SshHost(d.name, d.connection) for d in inv.nodes}
        try:
            nic = {n.rail: n for n in inv.devices["node04"].spec.nics}
            inject(inv_dir / ".state", "node01:mlx5_5", "pcie-width", "4")
            inject(inv_dir / ".state", "node02", "gpu-xid", "48")
            inject(inv_dir / ".state", "node03:mlx5_0", "flap")
            inject(inv_dir / ".state", f"{nic[1].switch}:{nic[1].switch_port}", "lossy")
            before = read_nodes(list(inv.nodes), hosts)
            for i, (a, b, rail) in enumerate((("node03", "node01", 0), ("node02", "node04", 1))):
                da, db = inv.devices[a], inv.devices[b]
                na = next(n for n in da.spec.nics if n.rail == rail)
                nb = next(n for n in db.spec.nics if n.rail == rail)
                assert measure(pair_of(da, na, db, nb), hosts, 19600 + 10 * i).bw_gbps
            after = read_nodes(list(inv.nodes), hosts)
            raw = hosts["node02"].run(node_script(inv.devices["node02"])).stdout
        finally:
            for h in hosts.values():
                h.close()
    assert all(isinstance(s, dict) for s in (*before.values(), *after.values())), (before, after)
    assert parse_node(raw)["xid_lines"] == after["node02"]["xid_lines"]
    n1, _ = deltas(before["node01"], after["node01"], set())
    assert n1["mlx5_5"]["pcie"] == {"width": 4, "max_width": 16, "speed_gts": 32.0, "max_speed_gts": 32.0}
    assert n1["mlx5_4"]["pcie"]["width"] == 16 and n1["mlx5_5"]["link"]["max_speed_mbps"] == 400000
    n3, _ = deltas(before["node03"], after["node03"], set())
    assert n3["mlx5_0"]["link"]["carrier_down_delta"] == 1 and n3["mlx5_0"]["counters"]["link_down_events_phy"] == 1
    assert n3["mlx5_1"]["link"]["carrier_down_delta"] == 0
    n4, _ = deltas(before["node04"], after["node04"], set())
    c = n4["mlx5_1"]["counters"]
    assert c["rx_discards_phy"] > 0 and c["out_of_sequence"] == 3 * c["rx_discards_phy"]
    assert c["rx_bytes_phy"] == 0  # a pair test moves no traffic counter in the lab; the drops are the fault's
    assert all(v == 0 for k, v in n4["mlx5_0"]["counters"].items() if k != "lifespan")
    _, g2 = deltas(before["node02"], after["node02"], set())
    assert [(g["index"], g["xid"], g["lost"], g["ecc_uncorrected"]) for g in g2 if g["xid"]] == [(0, [48], False, 0)]
    assert len(g2) == 8 and all(g["remapped_rows_pending"] == 0 and g["throttle_reasons"] == [] for g in g2)
