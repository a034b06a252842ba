"""Verification you can trust (issue 8) over real SSH against the lab: a pair whose server is not
listening did not run (``connect_failed``, status error, never a regression); a GID index changed
on a node between the baseline and the verification is drift, recorded per end; a node whose
reads stall hits the per-pair timeout while the rest of the round is measured and the run ends.
One lab for the module; three pairs measured in all."""

from __future__ import annotations

import ipaddress
import os
import time
from pathlib import Path

import pytest

from tests.conftest import running_lab
from tuning import inventory
from tuning.lab.sysroot import nic_gids, set_gid_attrs
from tuning.lab.fabric import Fabric
from tuning.transport.ssh import SshHost
from tuning.verify.pairs import Pair, select_pairs
from tuning.verify.runner import Thresholds, as_baseline, judge, measure, resolve_ends, verify

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(inventory dir, pairs of the lab, SSH hosts by node) for one lab shared by the module."""
    with running_lab(tmp_path_factory.mktemp("trustlab")) as inv:
        nodes = inventory.load(inv).nodes
        hosts = {d.name: SshHost(d.name, d.connection) for d in nodes}
        try:
            yield inv, {p.name: p for p in select_pairs(nodes)}, hosts
        finally:
            for h in hosts.values():
                h.close()


def _port(inv: Path, node: str, dev: str) -> Path:
    return inv / ".state" / "nodes" / node / "sysroot" / "sys/class/infiniband" / dev / "ports/1"


def test_a_server_that_is_not_listening_did_not_run(lab):
    inv, pairs, hosts = lab
    pair = pairs["node01:mlx5_0->node02:mlx5_0"]
    ends = resolve_ends([pair], hosts)
    # the client dials an address of node02's subnet where no server listens (perftest's own text)
    ghost = pair.server_nic.model_copy(update={"ipv4": ipaddress.IPv4Interface("10.0.0.222/24")})
    r = measure(Pair(pair.client, pair.client_nic, pair.server, ghost, "leaf"), hosts, gids=ends)
    assert judge([r], Thresholds(), as_baseline([])) is False
    assert (r.status, r.verdict, r.error_kind, r.bw_gbps) == ("error", "fail", "connect_failed", None), r.reasons
    assert r.reasons[0].startswith("did not run: connect_failed: ib_write_bw: Couldn't connect to 10.0.0.222:18515")
    assert (r.client_gid_index, r.server_gid_index) == (3, 3) and r.params["bw"]["size_bytes"] == 65536


def test_a_gid_index_changed_between_baseline_and_verify_is_drift(lab):
    inv, pairs, hosts = lab
    pair = pairs["node03:mlx5_1->node04:mlx5_1"]
    ok, before = verify([pair], hosts, Thresholds(), None, absolute=False)
    assert ok, before[0].reasons
    b = before[0]
    assert (b.client_gid_index, b.server_gid_index, b.server_gid_type) == (3, 3, "RoCE v2")
    assert b.client_speed_mbps == b.server_speed_mbps == 400000 and b.baseline == "none"
    base = as_baseline(before)
    # node04 gains a second link-local address: its RoCE v2 IPv4 GID moves from index 3 to 5,
    # as on node03:mlx5_0 (shared/cases show_gids sample); written the way the kernel lists it
    nic = next(c for n in Fabric.load(inv / ".state" / "fabric.json").nodes if n.name == "node04"
               for c in n.nics if c.rdma_device == "mlx5_1")
    port = _port(inv, "node04", "mlx5_1")
    v4 = nic_gids(nic)[-2:]
    extra = "fe80:0000:0000:0000:5a1e:77c2:90ab:0104"
    for idx, (gid, kind) in enumerate([(extra, "IB/RoCE v1"), (extra, "RoCE v2"), *v4], start=2):
        (port / "gids" / str(idx)).write_text(gid + "\n")
        set_gid_attrs(port, idx, kind, nic.netdev)  # 4 and 5 were empty (their attributes read EINVAL)
    ok, after = verify([pair], hosts, Thresholds(), base, absolute=False)
    a = after[0]
    assert ok and a.status == "pass" and a.baseline == "compared", a.reasons
    assert (a.client_gid_index, a.server_gid_index) == (3, 5)  # resolved right before the test
    assert a.drift == ["server node04:mlx5_1 GID index 3 -> 5"]
    assert a.reasons == ["drift: server node04:mlx5_1 GID index 3 -> 5"]


def test_a_stalled_node_hits_the_timeout_and_the_round_goes_on(lab):
    inv, pairs, hosts = lab
    stalled, healthy = pairs["node03:mlx5_2->node04:mlx5_2"], pairs["node01:mlx5_2->node02:mlx5_2"]
    speed = inv / ".state" / "nodes" / "node04" / "sysroot" / "sys/class/net" / stalled.server_nic.netdev / "speed"
    saved = speed.read_text()
    speed.unlink()
    os.mkfifo(speed, 0o666)  # a read that never returns, as a wedged driver's sysfs file
    try:
        t0 = time.monotonic()
        ok, res = verify([stalled, healthy], hosts, Thresholds(), None, absolute=False, timeout_s=3)
        took = time.monotonic() - t0
    finally:
        try:  # let the blocked reader go, then put the file back
            fd = os.open(speed, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, saved.encode())
            os.close(fd)
        except OSError:
            pass
        speed.unlink()
        speed.write_text(saved)
    by = {r.pair: r for r in res}
    s, h = by[stalled.name], by[healthy.name]
    assert not ok and (s.status, s.error_kind) == ("error", "timeout")
    assert s.reasons == ["did not run: timeout: node04: no answer in verify after 3 s"]
    assert h.status == "pass" and h.bw_gbps > 0 and h.lat_us > 0, h.reasons
    assert took < 30, took  # 3 s for node04's reads, then the healthy pair's two tests
