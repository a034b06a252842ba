"""The node tool stand-ins, run as real subprocesses on a tmp sysroot, against the real samples."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import served_stand_ins
from tuning.lab.controller import write_wrappers
from tuning.lab.fabric import Node, default_fabric
from tuning.lab.sysroot import build_sysroot, read_json

PROMPT = re.compile(r"^\[\S+@\S+ [^\]]+\][#$] ?(.*)$")


def transcript(path: Path) -> list[tuple[str, str]]:
    """``[(command, output), ...]`` of a shell transcript in shared/cases/cli/."""
    steps: list[tuple[str, str]] = []
    for line in path.read_text().splitlines(keepends=True):
        m = PROMPT.match(line.rstrip("\n"))
        if m:
            steps.append((m.group(1), ""))
        elif steps:
            steps[-1] = (steps[-1][0], steps[-1][1] + line)
    return steps


def sample_output(path: Path, command: str) -> str:
    return next(out for cmd, out in transcript(path) if cmd == command)


class Lab:
    """One node sysroot plus the ``bin/`` wrappers; ``run`` executes a stand-in."""

    def __init__(self, base: Path, node: Node):
        self.root = base / "sysroot"
        build_sysroot(self.root, node)
        write_wrappers(base / "bin")
        self.bin = base / "bin"

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        env = {"PATH": "/usr/bin:/bin", "FABTUNE_LAB_SYSROOT": str(self.root)}
        return subprocess.run([str(self.bin / argv[0]), *argv[1:]], env=env, capture_output=True,
                              text=True, timeout=30)


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Lab:
    base = tmp_path_factory.mktemp("node01")
    with served_stand_ins(base):
        yield Lab(base, default_fabric().node("node01"))


@pytest.fixture(scope="module")
def cli(cases_dir) -> Path:
    return cases_dir / "cli"


def test_ip_link_set_mtu_success_and_range_errors(lab, cli):
    sample = cli / "ip_link_set_mtu__success_and_range_errors.txt"
    ok = lab.run("ip", "link", "set", "dev", "enp12s0np0", "mtu", "9000")
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "", "")
    assert (lab.root / "sys/class/net/enp12s0np0/mtu").read_text() == "9000\n"
    high = lab.run("ip", "link", "set", "dev", "enp12s0np0", "mtu", "9979")
    assert high.returncode == 2
    assert high.stderr == sample_output(sample, "ip link set dev ens1f0np0 mtu 9979")
    low = lab.run("ip", "link", "set", "dev", "enp12s0np0", "mtu", "40")
    assert low.stderr == sample_output(sample, "ip link set dev ens1f0np0 mtu 40")
    assert (lab.root / "sys/class/net/enp12s0np0/mtu").read_text() == "9000\n"
    assert lab.run("ip", "link", "set", "dev", "nosuch0", "mtu", "9000").stderr == 'Cannot find device "nosuch0"\n'


def test_ip_d_link_show_layout(lab, cli):
    sample = sample_output(cli / "ip_link_set_mtu__success_and_range_errors.txt", "ip -d link show dev ens1f0np0")
    lab.run("ip", "link", "set", "dev", "enp18s0np0", "mtu", "9000")
    out = lab.run("ip", "-d", "link", "show", "dev", "enp18s0np0").stdout
    normalised = (out.replace("enp18s0np0", "ens1f0np0").replace("0000:12:00.0", "0000:18:00.0")
                  .replace("0c:42:a1:01:00:01", "0c:42:a1:5b:7c:30").replace("3: ", "4: ", 1))
    assert normalised == sample


def test_sysctl_write_read_and_errors(lab, cli):
    sample = cli / "sysctl_w__set_and_errors.txt"
    w = lab.run("sysctl", "-w", "net.core.rmem_max=268435456")
    assert w.stdout == sample_output(sample, "sysctl -w net.core.rmem_max=268435456")
    assert (lab.root / "proc/sys/net/core/rmem_max").read_text() == "268435456\n"
    q = lab.run("sysctl", "-q", "-w", "net.core.wmem_max=268435456")
    assert (q.returncode, q.stdout) == (0, "")
    bad = lab.run("sysctl", "-w", "net.core.no_such_key=1")
    assert bad.returncode == 1
    assert bad.stderr == sample_output(sample, "sysctl -w net.core.no_such_key=1")
    assert lab.run("sysctl", "-n", "net.core.wmem_max").stdout == "268435456\n"
    (lab.root / "proc/sys/kernel/numa_balancing").write_text("1\n")  # the module's later tests set it too
    assert lab.run("sysctl", "kernel.numa_balancing").stdout == "kernel.numa_balancing = 1\n"


def test_sysctl_system_applies_sysctl_d(lab):
    (lab.root / "etc/sysctl.d/90-fabtune.conf").write_text("# fabtune\nvm.zone_reclaim_mode = 0\n"
                                                           "net.core.netdev_max_backlog = 250000\n")
    out = lab.run("sysctl", "--system").stdout
    assert out == ("* Applying /etc/sysctl.d/90-fabtune.conf ...\nvm.zone_reclaim_mode = 0\n"
                   "net.core.netdev_max_backlog = 250000\n")
    assert (lab.root / "proc/sys/net/core/netdev_max_backlog").read_text() == "250000\n"


def test_mlnx_qos_set_prints_the_full_status_table(lab, cli):
    sample = cli / "mlnx_qos__set_trust_dscp_pfc3_prints_full_status.txt"
    out = lab.run("mlnx_qos", "-i", "enp12s0np0", "--trust", "dscp", "--pfc", "0,0,0,1,0,0,0,0")
    assert out.returncode == 0
    assert out.stdout == sample_output(sample, "mlnx_qos -i ens1f0np0 --trust dscp --pfc 0,0,0,1,0,0,0,0")
    state = read_json(lab.root / "run/lab/dcb/enp12s0np0.json")
    assert state["trust"] == "dscp" and state["pfc"] == [0, 0, 0, 1, 0, 0, 0, 0]
    assert (lab.root / "sys/class/net/enp12s0np0/qos/trust").read_text() == "dscp\n"
    again = lab.run("mlnx_qos", "-i", "enp12s0np0")  # a plain query prints the same table
    assert again.stdout == out.stdout


def test_mlnx_qos_errors(lab, cli):
    sample = cli / "mlnx_qos__set_trust_dscp_pfc3_prints_full_status.txt"
    short = lab.run("mlnx_qos", "-i", "enp18s0np0", "--pfc", "0,0,0,1,0,0,0")
    assert short.returncode == 1
    assert short.stdout == sample_output(sample, "mlnx_qos -i ens1f0np0 --pfc 0,0,0,1,0,0,0")
    foo = lab.run("mlnx_qos", "-i", "enp18s0np0", "--trust", "foo")
    assert foo.stdout == sample_output(sample, "mlnx_qos -i ens1f0np0 --trust foo")
    assert read_json(lab.root / "run/lab/dcb/enp18s0np0.json")["trust"] == "pcp"


def test_cma_roce_tos_set_read_and_bad_port(lab, cli):
    sample = cli / "configfs_rdma_cm__cma_roce_tos_and_mode.txt"
    rdma_cm = lab.root / "sys/kernel/config/rdma_cm"
    assert lab.run("cma_roce_tos", "-d", "mlx5_0", "-t", "106").stdout == "106\n"
    assert lab.run("cma_roce_tos", "-d", "mlx5_0").stdout == sample_output(sample, "cma_roce_tos -d mlx5_0")
    assert os.listdir(rdma_cm) == []  # it removes the group it created; the value persists
    assert read_json(lab.root / "run/lab/rdma_cm/mlx5_0.json")["default_roce_tos"] == 106
    bad = lab.run("cma_roce_tos", "-d", "mlx5_0", "-p", "2", "-t", "106")
    assert bad.returncode == 1
    assert bad.stdout == sample_output(sample, "cma_roce_tos -d mlx5_0 -p 2 -t 106")
    assert os.listdir(rdma_cm) == ["mlx5_0"]  # left behind, as the script does
    assert (rdma_cm / "mlx5_0/ports/1/default_roce_mode").read_text() == "RoCE v2\n"
    assert (rdma_cm / "mlx5_0/ports/1/default_roce_tos").read_text() == "106\n"


def test_ibdev2netdev_lexical_order(tmp_path, cases_dir):
    base = default_fabric().node("node01")
    nics = [replace(base.nics[i % 8], rdma_device=f"mlx5_{i}", netdev=f"enp{i}s0np0",
                    bdf=f"0000:{i + 1:02x}:00.0", first_irq=100 + 20 * i) for i in range(11)]
    lab = Lab(tmp_path, replace(base, nics=nics))
    (lab.root / "sys/class/net/enp3s0np0/operstate").write_text("down\n")
    lines = lab.run("ibdev2netdev").stdout.splitlines()
    assert [line.split()[0] for line in lines][:4] == ["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_2"]
    assert "mlx5_3 port 1 ==> enp3s0np0 (Down)" in lines
    shape = re.compile(r"^mlx5_\d+ port 1 ==> \S+ \((Up|Down)\)$")
    sample = (cases_dir / "ibdev2netdev__mixed_ib_eth_vfs_lexical_order.txt").read_text().splitlines()
    assert all(shape.match(line) for line in lines + sample)


def test_show_gids_four_entries(lab, cli):
    sample = sample_output(cli / "show_gids__four_entries_v1_v2_tabs.txt", "show_gids mlx5_0")
    out = lab.run("show_gids", "mlx5_0").stdout
    ours, ref = out.splitlines(keepends=True), sample.splitlines(keepends=True)
    assert ours[:2] == ref[:2] and ours[-1] == ref[-1] == "n_gids_found=4\n"
    assert ours[4] == "mlx5_0\t1\t2\t0000:0000:0000:0000:0000:ffff:0a00:0001\t10.0.0.1  \tv1\tenp12s0np0\n"
    for mine, theirs in zip(ours[2:6], ref[2:6]):
        assert [len(f) > 0 for f in mine.split("\t")] == [len(f) > 0 for f in theirs.split("\t")]


def test_show_gids_ipv4_at_index5_with_extra_link_local(tmp_path, cases_dir):
    lab = Lab(tmp_path, default_fabric().node("node03"))
    out = lab.run("show_gids", "mlx5_0").stdout.splitlines()
    ref = (cases_dir / "show_gids__ipv4_v2_at_index5_extra_linklocal.txt").read_text().splitlines()
    assert len(out) == len(ref) and out[-1] == "n_gids_found=6"
    assert [row.split("\t")[2] for row in out[2:-1]] == ["0", "1", "2", "3", "4", "5"]
    assert out[7].split("\t")[4:] == ["10.0.0.3  ", "v2", "enp12s0np0"]
    all_devs = lab.run("show_gids").stdout.splitlines()
    assert all_devs[-1] == f"n_gids_found={6 + 7 * 4}"


# ---- kernel refusals (issue 6): what fabtune sends to a real host, refused as the kernel refuses ----

def tee_write(lab: Lab, value: str, path: str) -> subprocess.CompletedProcess:
    """``printf '%s\\n' VALUE | tee PATH >/dev/null`` as fabtune writes a sysfs/procfs value, in the sysroot."""
    env = {"PATH": f"{lab.bin}:/usr/bin:/bin", "FABTUNE_LAB_SYSROOT": str(lab.root)}
    return subprocess.run(["bash", "-c", 'printf "%s\\n" "$1" | tee "$2" >/dev/null', "-", value, path],
                          env=env, capture_output=True, text=True, cwd=lab.root.parent, timeout=30)


@pytest.mark.parametrize("value, errno", [
    ("abc", "Invalid argument"), ("3-1", "Invalid argument"), ("", "Invalid argument"),
    ("112", "Numerical result out of range"), ("0-99999999", "Numerical result out of range"),
    ("5;touch pwned", "Invalid argument")])
def test_smp_affinity_list_refuses_like_the_kernel(lab, value, errno):
    target = "sysroot/proc/irq/101/smp_affinity_list"  # node01 has CPUs 0-111
    (lab.root / "proc/irq/101/smp_affinity_list").write_text("0-15\n")
    res = tee_write(lab, value, target)
    assert (res.returncode, res.stderr) == (1, f"tee: {target}: {errno}\n")
    assert (lab.root / "proc/irq/101/smp_affinity_list").read_text() == "0-15\n"
    assert not (lab.root.parent / "pwned").exists()
    ok = tee_write(lab, "0-3,111", target)
    assert (ok.returncode, ok.stderr) == (0, "")
    assert (lab.root / "proc/irq/101/smp_affinity_list").read_text() == "0-3,111\n"


@pytest.mark.parametrize("path, bad, good", [
    ("sys/class/net/enp12s0np0/ecn/roce_np/enable/3", "2", "1"),
    ("sys/class/net/enp12s0np0/ecn/roce_rp/enable/3", "yes", "0"),
    ("sys/class/net/enp12s0np0/ecn/roce_np/cnp_dscp", "64", "63"),
    ("sys/class/net/enp12s0np0/ecn/roce_np/cnp_802p_prio", "8", "7"),
    ("proc/sys/kernel/numa_balancing", "1; touch pwned", "0"),
])
def test_sysfs_and_procfs_values_refused_like_the_kernel(lab, path, bad, good):
    before = (lab.root / path).read_text()
    res = tee_write(lab, bad, f"sysroot/{path}")
    assert (res.returncode, res.stderr) == (1, f"tee: sysroot/{path}: Invalid argument\n")
    assert (lab.root / path).read_text() == before
    assert tee_write(lab, good, f"sysroot/{path}").returncode == 0
    assert (lab.root / path).read_text() == f"{good}\n"


def test_tee_cannot_create_files_the_kernel_does_not_have(lab):
    res = tee_write(lab, "1", "sysroot/proc/irq/9999/smp_affinity_list")
    assert (res.returncode, res.stderr) == (1, "tee: sysroot/proc/irq/9999/smp_affinity_list: No such file or directory\n")
    assert not (lab.root / "proc/irq/9999").exists()


def test_sysctl_value_of_the_wrong_type(lab):
    before = (lab.root / "proc/sys/kernel/numa_balancing").read_text()
    bad = lab.run("sysctl", "-q", "-w", "kernel.numa_balancing=1; touch pwned")
    assert (bad.returncode, bad.stderr) == (1, 'sysctl: setting key "kernel.numa_balancing": Invalid argument\n')
    assert (lab.root / "proc/sys/kernel/numa_balancing").read_text() == before
    vec = lab.run("sysctl", "-q", "-w", "net.core.rmem_max=4096\t87380")
    assert vec.returncode == 0


def test_mlnx_qos_dcbx_mode_and_dscp2prio(lab):
    out = lab.run("mlnx_qos", "-i", "enp76s0np0", "--dcbx", "fw").stdout
    assert out.startswith("DCBX mode: Firmware controlled\nPriority trust state: pcp\n")
    lab.run("mlnx_qos", "-i", "enp76s0np0", "--dcbx=os")
    out = lab.run("mlnx_qos", "-i", "enp76s0np0", "--trust", "dscp", "--dscp2prio", "set,26,0").stdout
    assert out.startswith("DCBX mode: OS controlled\n")
    assert "\tprio:0 dscp:26,07,06,05,04,03,02,01,00,\n" in out
    bad = lab.run("mlnx_qos", "-i", "enp76s0np0", "--dcbx", "auto")
    assert (bad.returncode, bad.stdout) == (1, "Invalid dcbx command. Refer to the help.\n")


def test_systemctl_enable_makes_the_wants_link(lab):
    unit = lab.root / "etc/systemd/system/fabtune-nic.service"
    unit.write_text("[Unit]\nDescription=x\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n")
    res = lab.run("systemctl", "enable", "fabtune-nic.service")
    link = lab.root / "etc/systemd/system/multi-user.target.wants/fabtune-nic.service"
    assert res.returncode == 0
    assert res.stderr == ("Created symlink /etc/systemd/system/multi-user.target.wants/fabtune-nic.service"
                          " \u2192 /etc/systemd/system/fabtune-nic.service.\n")
    assert os.readlink(link) == "/etc/systemd/system/fabtune-nic.service"
    assert lab.run("systemctl", "disable", "fabtune-nic.service").returncode == 0
    assert not link.is_symlink()
    missing = lab.run("systemctl", "enable", "nosuch.service")
    assert (missing.returncode, missing.stderr) == (1, "Failed to enable unit: Unit file nosuch.service does not exist.\n")
    idle = lab.run("systemctl", "is-active", "irqbalance.service")
    assert (idle.returncode, idle.stdout) == (3, "inactive\n")
