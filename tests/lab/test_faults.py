"""The lab's burn-in faults (tuning.lab.hw_faults): refusals, what the node's tools and files show,
what a test through the fault does to the numbers and counters, and `clear`. Real SSH, real stand-ins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import running_lab
from tuning import inventory
from tuning.errors import InputError
from tuning.lab.fabric import Fabric, default_fabric
from tuning.lab.hw_faults import pcie_gbps
from tuning.lab.inject import inject
from tuning.transport.ssh import SshHost
from tuning.verify.pairs import pair_of
from tuning.verify.runner import measure

pytestmark = pytest.mark.lab


@pytest.mark.parametrize("target, kind, value, text", [
    ("node01:mlx5_2", "pcie-width", "7", "width 1, 2, 4, 8, 16"),
    ("leaf01:swp1", "pcie-width", "8", "node NIC"),
    ("node01:mlx5_0", "gpu-xid", "79", "gpu-xid targets a node"),
    ("node01", "gpu-xid", "x", "XID code 1..999"),
    ("node01:mlx5_0", "flap", "3", "flap takes no value"),
    ("node09:mlx5_0", "lossy", None, "NIC or a switch port"),
])
def test_bad_burnin_faults_are_refused_in_one_line(tmp_path: Path, target, kind, value, text):
    default_fabric().save(tmp_path / "fabric.json")
    with pytest.raises(InputError, match=text) as e:
        inject(tmp_path, target, kind, value)
    assert "\n" not in str(e.value)
    assert Fabric.load(tmp_path / "fabric.json").injections == []


def test_pcie_bandwidth_of_a_gen5_link():
    assert round(pcie_gbps(32.0, 8), 1) == 228.8 and round(pcie_gbps(32.0, 16), 1) == 457.6


@pytest.fixture(scope="module")
def lab4(tmp_path_factory):
    with running_lab(tmp_path_factory.mktemp("faults")) as inv_dir:
        inv = inventory.load(inv_dir)
        hosts = {d.name: SshHost(d.name, d.connection) for d in inv.nodes}
        try:
            yield inv_dir, inv, hosts
        finally:
            for h in hosts.values():
                h.close()


def _sh(host, cmd: str, privileged: bool = True):
    return host.run(cmd, privileged=privileged)


def _pair(inv, a: str, b: str, rail: int):
    da, db = inv.devices[a], inv.devices[b]
    na = next(n for n in da.spec.nics if n.rail == rail)
    nb = next(n for n in db.spec.nics if n.rail == rail)
    return pair_of(da, na, db, nb)


def test_pcie_width_shows_in_lspci_and_sysfs_caps_bandwidth_and_clears(lab4):
    inv_dir, inv, hosts = lab4
    before = measure(_pair(inv, "node01", "node02", 2), hosts, 19500)
    inject(inv_dir / ".state", "node02:mlx5_2", "pcie-width", "8")
    h = hosts["node02"]
    dev = "sysroot/sys/bus/pci/devices/0000:4c:00.0"
    assert _sh(h, f"cat {dev}/current_link_width {dev}/max_link_width").stdout.split() == ["8", "16"]
    lnk = [ln for ln in _sh(h, "lspci -vv -s 4c:00.0").stdout.splitlines() if "LnkSta:" in ln]
    assert "Width x8" in lnk[0] and "downgraded" in lnk[0], lnk
    after = measure(_pair(inv, "node01", "node02", 2), hosts, 19510)
    assert before.bw_gbps > 250 * 0.9 and after.bw_gbps < 228.8 * 0.98 < before.bw_gbps, (before.bw_gbps, after.bw_gbps)
    inject(inv_dir / ".state", "node02:mlx5_2", "clear")
    assert _sh(h, f"cat {dev}/current_link_width").stdout.strip() == "16"


def test_a_flapping_port_counts_carrier_and_link_down_per_test(lab4):
    inv_dir, inv, hosts = lab4
    h = hosts["node03"]
    net = "sysroot/sys/class/net/enp12s0np0"

    def read() -> tuple[int, int, int]:
        out = _sh(h, f"cat {net}/carrier_down_count {net}/carrier_changes; ethtool -S enp12s0np0 "
                     "| grep link_down_events_phy").stdout.split()
        return int(out[0]), int(out[1]), int(out[-1])

    assert read() == (0, 1, 0)
    inject(inv_dir / ".state", "node03:mlx5_0", "flap")
    fast = measure(_pair(inv, "node01", "node04", 0), hosts, 19520)
    for k in range(2):  # node03 as the client, then as the server: its own NIC counts either way
        pair = _pair(inv, "node03", "node02", 0) if k == 0 else _pair(inv, "node02", "node03", 0)
        r = measure(pair, hosts, 19530 + 10 * k)
        assert r.bw_gbps < 0.65 * fast.bw_gbps, (r.bw_gbps, fast.bw_gbps)
        assert read() == (k + 1, 1 + 2 * (k + 1), k + 1)
    inject(inv_dir / ".state", "node03:mlx5_0", "clear")


def test_a_lossy_port_counts_drops_at_the_receiver(lab4):
    inv_dir, inv, hosts = lab4
    leaf = next(n for n in inv.devices["node04"].spec.nics if n.rail == 1)
    inject(inv_dir / ".state", f"{leaf.switch}:{leaf.switch_port}", "lossy")
    names = "rx_discards_phy|out_of_sequence"

    def counters(node: str, netdev: str, dev: str) -> dict[str, int]:
        text = _sh(hosts[node], f"ethtool -S {netdev} | grep -E '{names}'; "
                                f"cd sysroot/sys/class/infiniband/{dev}/ports/1/hw_counters && grep -H '' *").stdout
        return {k.strip(): int(v) for k, v in (ln.rsplit(":", 1) for ln in text.splitlines())
                if k.strip() in ("rx_discards_phy", "out_of_sequence", "local_ack_timeout_err")}

    before = counters("node04", leaf.netdev, leaf.rdma_device)
    r = measure(_pair(inv, "node01", "node04", 1), hosts, 19550)  # node04 receives through the lossy port
    after = counters("node04", leaf.netdev, leaf.rdma_device)
    packets = r.bw_gbps * 1e9 / 8 * 2 / 1024  # 2 s of traffic at the RoCE MTU of an untuned node (1024)
    drops = after["rx_discards_phy"] - before["rx_discards_phy"]
    assert 0.015 * packets < drops < 0.025 * packets
    assert after["out_of_sequence"] - before["out_of_sequence"] == 3 * drops
    inject(inv_dir / ".state", f"{leaf.switch}:{leaf.switch_port}", "clear")


def test_a_gpu_xid_79_shows_in_the_kernel_log_and_nvidia_smi_loses_the_gpu(lab4):
    inv_dir, inv, hosts = lab4
    h = hosts["node02"]
    inject(inv_dir / ".state", "node02:gpu3", "gpu-xid", "79")
    denied = _sh(h, "dmesg", privileged=False)
    assert (denied.rc, denied.stderr.strip()) == (1, "dmesg: read kernel buffer failed: Operation not permitted")
    log = _sh(h, "dmesg").stdout.splitlines()
    assert log[0].endswith("NVRM: Xid (PCI:0000:61:00): 79, pid='<unknown>', name=<unknown>, "
                           "GPU has fallen off the bus.") and log[0].startswith("[")
    assert log[1].endswith("NVRM: GPU 0000:61:00.0: GPU has fallen off the bus.")
    q = _sh(h, "nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader", privileged=False)
    assert q.rc == 15 and [ln.split(", ")[0] for ln in q.stdout.splitlines()] == ["0", "1", "2", "4", "5", "6", "7"]
    assert q.stderr.strip() == "Unable to determine the device handle for GPU3: 0000:61:00.0: Unknown Error"
    inject(inv_dir / ".state", "node02", "clear")
    q = _sh(h, "nvidia-smi --query-gpu=index --format=csv,noheader", privileged=False)
    assert (q.rc, q.stdout.split()) == (0, [str(i) for i in range(8)])
    assert json.loads((inv_dir / ".state/fabric.json").read_text())["injections"] == []
