"""ib_write_bw / ib_read_lat stand-ins: real perftest layouts, rendezvous, fabtune's parsers.

Layout tests format the reference samples' own values and compare to the character;
end-to-end tests run a server in a subprocess and the client in this process, then read
both outputs with the parsers fabtune uses on real hosts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tuning.lab.model import compute
from tuning.lab.fabric import Fabric
from tuning.lab.inject import inject
from tuning.lab.tools.perftest import (BANNER, BW_ROWS, LAT_ROW, address_lines, format_bw, header,
                                       ib_read_lat, ib_write_bw, parse_args, serve)
from tuning.parsers import parse

try:  # the state builder lives with the model tests (tests/lab may or may not be a package)
    from .test_fabric_model import make_state, set_switch
except ImportError:
    from test_fabric_model import make_state, set_switch

REPO = Path(__file__).resolve().parents[2]


def _sample(cases_dir: Path, name: str) -> list[str]:
    return (cases_dir / name).read_text().split("\n")


def _sysfs_gid(ip: str) -> str:
    a, b, c, d = (int(x) for x in ip.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


def test_client_mib_layout_matches_sample(cases_dir: Path) -> None:
    lines = _sample(cases_dir, "ib_write_bw__roce_client_MiBsec_new_perftest.txt")
    assert header("ib_write_bw", "client", "mlx5_3", 1, 4096, 3) == lines[1:18]
    addr = address_lines([[0x291, 0x1386CE, 0x021300, 0x7E7956146000]], [[0x28F, 0x85FED8, 0x021200, 0x7D1FEB0DE000]],
                         (_sysfs_gid("10.7.14.8"), _sysfs_gid("10.7.14.7")), lat=False)
    assert addr == lines[18:22]
    mib = BW_ROWS["client"][1]
    assert format_bw([[65536, 5000, 45446.68 / mib, 45428.46 / mib, 0.726855]], "client") == lines[23:26]
    assert lines[22] == lines[1]


def test_gbits_layout_matches_all_sizes_sample(cases_dir: Path) -> None:
    lines = _sample(cases_dir, "ib_write_bw__client_all_sizes_gbits_mtu1024_gid5.txt")
    assert header("ib_write_bw", "gbits", "mlx5_0", 1, 1024, 5) == lines[0:16]
    rows = [[float(x) for x in line.split()] for line in lines[22:45]]
    assert format_bw([[r[0], r[1], r[2], r[3], r[4]] for r in rows], "gbits") == lines[21:46]


def test_server_layout_matches_duration_sample(cases_dir: Path) -> None:
    lines = _sample(cases_dir, "ib_write_bw__roce_server_duration_mbsec_peak0_tabs.txt")
    assert BANNER == lines[0:4]
    assert header("ib_write_bw", "server", "mlx5_0", 1, 4096, 3) == lines[4:19]
    mb = BW_ROWS["server"][1]
    assert format_bw([[65536, 664644, 0.0, 4153.87 / mb, 0.066462]], "server") == lines[24:27]


def test_latency_layout_matches_sample(cases_dir: Path) -> None:
    lines = _sample(cases_dir, "ib_read_lat__roce_mtu1024_gid12_cpufreq_warnings.txt")
    assert header("ib_read_lat", "lat", "mlx5_2", 1, 1024, 12) == lines[0:13]
    addr = address_lines([[0x107, 0x79DD10, 0x1FDDBC, 0x23BD000]], [[0x107, 0x40001A, 0x1FDDBC, 0xBF9000]],
                         (_sysfs_gid("172.18.40.119"), _sysfs_gid("172.18.40.120")), lat=True)
    assert [addr[0], addr[2], addr[1], addr[3]] == [lines[13], lines[15], lines[14], lines[16]]
    assert LAT_ROW.format(2, 1000, 6.88, 16.81, 7.04, 7.06, 0.31, 7.38, 16.81) == lines[21]


class Lab:
    """Run a stand-in server (subprocess) and client (this process) against one state dir."""

    def __init__(self, state: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch):
        self.state, self.capsys, self.monkeypatch = state, capsys, monkeypatch

    def server(self, tool: str, node: str, args: list[str]) -> subprocess.Popen:
        code = f"import sys; from tuning.lab.tools.perftest import {tool} as t; sys.exit(t(sys.argv[1:]))"
        env = {**os.environ, "FABTUNE_LAB_DIR": str(self.state), "FABTUNE_LAB_NODE": node,
               "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen([sys.executable, "-c", code, *args], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while not list((self.state / "run/perftest").glob("*.listen.json")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        return proc

    def client(self, fn, node: str, args: list[str]) -> tuple[int, str, str]:
        self.monkeypatch.setenv("FABTUNE_LAB_DIR", str(self.state))
        self.monkeypatch.setenv("FABTUNE_LAB_NODE", node)
        rc = fn(args)
        out = self.capsys.readouterr()
        return rc, out.out, out.err


@pytest.fixture
def lab(tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> Lab:
    return Lab(make_state(tmp_path, tuned=True), capsys, monkeypatch)


def test_write_bw_pair_parses_like_real_output(lab: Lab, cases_dir: Path) -> None:
    srv = lab.server("ib_write_bw", "node02", ["-d", "mlx5_0", "-x", "3", "-s", "65536", "-n", "5000", "-F"])
    rc, out, err = lab.client(ib_write_bw, "node01", ["-d", "mlx5_0", "-i", "1", "-x", "3", "-s", "65536",
                                                      "-n", "5000", "-F", "10.0.0.2"])
    s_out, s_err = srv.communicate(timeout=15)
    assert (rc, err, srv.returncode, s_err) == (0, "", 0, "")
    # a verbs QP given no --tclass sends traffic class 0, as on a real host
    want = compute(lab.state, "node01", "mlx5_0", "node02", "mlx5_0", 3, "write_bw", server_gid_index=3, flow_tos=0)
    c = parse("ib_write_bw", out)
    assert (c.role, c.device, c.mtu_bytes, c.gid_index, c.failure) == ("client", "mlx5_0", 4096, 3, None)
    assert c.local_gid == "00:00:00:00:00:00:00:00:00:00:255:255:10:00:00:01"
    assert c.remote_gid == "00:00:00:00:00:00:00:00:00:00:255:255:10:00:00:02"
    [row] = c.bw_rows
    assert (row.size_bytes, row.iterations, row.bw_avg.unit) == (65536, 5000, "MiB/sec")
    assert row.bw_avg.value == pytest.approx(want.bw_avg_gbps, abs=0.01)
    s = parse("ib_write_bw", s_out)
    assert (s.role, s.device, s.mtu_bytes, s.gid_index) == ("server", "mlx5_0", 4096, 3)
    assert (s.local_qpn, s.remote_qpn) == (c.remote_qpn, c.local_qpn)
    assert s.bw_rows[0].bw_avg.value == pytest.approx(want.bw_avg_gbps, abs=0.01)
    sample = _sample(cases_dir, "ib_write_bw__roce_client_MiBsec_new_perftest.txt")
    lines = out.split("\n")
    assert [ln for ln in lines if ":" in ln and "address" not in ln and "GID:" not in ln] == [
        ln.replace("mlx5_3", "mlx5_0") for ln in sample[3:17]]
    assert lines[22] == sample[23] and [lines[23].index(v) for v in ("65536", "5000")] == [1, 12]
    assert not list((lab.state / "run/perftest").iterdir())


def test_duration_gbits_and_spine_path(lab: Lab) -> None:
    srv = lab.server("ib_write_bw", "node02", ["-d", "mlx5_1", "-D", "2", "--report_gbits", "-q", "2", "--tclass=106"])
    rc, out, _ = lab.client(ib_write_bw, "node01", ["-d", "mlx5_0", "-D", "2", "--report_gbits", "-q", "2",
                                                    "--tclass=106", "10.1.0.2"])
    s_out, _ = srv.communicate(timeout=15)
    assert rc == 0 and srv.returncode == 0
    for text, unit in ((out, "Gb/sec"), (s_out, "Gb/sec")):
        r = parse("ib_write_bw", text)
        [row] = r.bw_rows
        assert (r.qps, row.bw_peak, row.bw_avg.unit) == (2, None, unit)
        assert 380 < row.bw_avg.value < 395 and row.iterations > 1_000_000
    assert out.count("local address:") == 2 and s_out.count("remote address:") == 2


def test_read_lat_pair_parses(lab: Lab) -> None:
    srv = lab.server("ib_read_lat", "node02", ["-d", "mlx5_0", "-F"])
    rc, out, _ = lab.client(ib_read_lat, "node01", ["-d", "mlx5_0", "-F", "10.0.0.2"])
    s_out, _ = srv.communicate(timeout=15)
    assert (rc, srv.returncode) == (0, 0)
    want = compute(lab.state, "node01", "mlx5_0", "node02", "mlx5_0", None, "read_lat", size=2, flow_tos=0)
    r = parse("ib_read_lat", out)
    [row] = r.lat_rows
    assert (r.mtu_bytes, r.gid_index, row.size_bytes, row.iterations) == (4096, 3, 2, 1000)
    assert row.t_typical == pytest.approx(want.lat_typical_us, abs=0.01)
    assert " OUT 0x10 " in out and "Waiting for client to connect" in s_out


def _write_bw(lab: Lab, server_args: list[str], client_args: list[str]) -> tuple[int, str, str]:
    srv = lab.server("ib_write_bw", "node02", ["-d", "mlx5_0", "-D", "2", "--report_gbits", *server_args])
    rc, out, err = lab.client(ib_write_bw, "node01", ["-d", "mlx5_0", "-D", "2", "--report_gbits", *client_args,
                                                      "10.0.0.2"])
    srv.communicate(timeout=15)
    return rc, out, err


def test_the_flow_rides_the_class_its_tool_sets(lab: Lab) -> None:
    """On a tuned lab (trust dscp, PFC on 3, default_roce_tos 106): a verbs QP without --tclass sends
    traffic class 0, DSCP 0 -> priority 0, lossy (x 0.70); --tclass=106 rides the lossless class; an
    RDMA-CM QP (-R) without -T carries the node's default_roce_tos; -T without -R is refused with
    perftest's own line, as perftest does."""
    def gbps(rc_out_err) -> float:
        rc, out, err = rc_out_err
        assert rc == 0, err
        return parse("ib_write_bw", out).bw_rows[0].bw_avg.value

    plain = gbps(_write_bw(lab, [], []))
    tuned = gbps(_write_bw(lab, ["--tclass=106"], ["--tclass=106"]))
    cm = gbps(_write_bw(lab, ["-R"], ["-R"]))
    cm_zero = gbps(_write_bw(lab, ["-R", "-T", "0"], ["-R", "-T", "0"]))
    assert plain == pytest.approx(tuned * 0.70, rel=0.01) and cm == pytest.approx(tuned, rel=0.01), (plain, tuned, cm)
    assert cm_zero == pytest.approx(plain, rel=0.01)
    want = compute(lab.state, "node01", "mlx5_0", "node02", "mlx5_0", None, "write_bw", flow_tos=106)
    assert (want.lossless, want.dscp) == (True, 26)
    zero = compute(lab.state, "node01", "mlx5_0", "node02", "mlx5_0", None, "write_bw", flow_tos=0)
    assert (zero.lossless, zero.dscp) == (False, 0)
    assert "lossy: node01:mlx5_0 PFC off on priority 0 (DSCP 0)" in zero.reasons, zero.reasons
    rc, out, err = lab.client(ib_write_bw, "node01", ["-d", "mlx5_0", "-T", "106", "10.0.0.2"])
    assert (rc, out, err) == (1, " TOS only valid for rdma_cm based QP and RawEth QP \n", "")
    rc, out, err = lab.client(ib_write_bw, "node01", ["-d", "mlx5_0", "-R", "-T", "256", "10.0.0.2"])
    assert (rc, out, err) == (1, "", " TOS should be between 0 and 255\n")


def test_no_listener_is_couldnt_connect(lab: Lab, cases_dir: Path) -> None:
    rc, out, err = lab.client(ib_write_bw, "node01", ["-d", "mlx5_0", "10.0.0.2"])
    sample = _sample(cases_dir, "ib_write_bw__client_err_couldnt_connect_concatenated.txt")
    assert (rc, out) == (1, "")
    assert err.split("\n")[:2] == [sample[1].replace("192.168.50.21", "10.0.0.2"), sample[2]]
    assert parse("ib_write_bw", err).failure.kind == "connect_failed"


def test_bad_gid_index_is_rtr_failure(lab: Lab, cases_dir: Path) -> None:
    # the real scenario of the sample: both ends on GID 1, the RoCE v2 fe80 link-local entry
    srv = lab.server("ib_write_bw", "node02", ["-d", "mlx5_0", "-x", "1"])
    rc, out, err = lab.client(ib_write_bw, "node01", ["-d", "mlx5_0", "-x", "1", "10.0.0.2"])
    s_out, s_err = srv.communicate(timeout=15)
    sample = _sample(cases_dir, "ib_write_bw__client_err_modify_qp_rtr.txt")
    assert (rc, srv.returncode) == (1, 1)
    r = parse("ib_write_bw", out + err)
    assert (r.failure.kind, r.gid_index, r.bw_rows) == ("qp_rtr_failed", 1, [])
    assert r.local_gid.startswith("254:128:00:00:00:00:00:00:") and "link-local" in r.failure.likely_cause
    assert parse("ib_write_bw", s_out + s_err).failure.kind == "qp_rtr_failed"
    assert err.split("\n")[:2] == [sample[20].replace("263", str(r.local_qpn)), sample[21]]


def test_mtu_drop_shows_in_numbers(lab: Lab) -> None:
    set_switch(lab.state, "leaf01", mtus={"swp2": 1500})
    srv = lab.server("ib_write_bw", "node02", ["-d", "mlx5_0", "--report_gbits"])
    rc, out, _ = lab.client(ib_write_bw, "node01", ["-d", "mlx5_0", "--report_gbits", "10.0.0.2"])
    srv.communicate(timeout=15)
    assert rc == 0 and parse("ib_write_bw", out).bw_rows[0].bw_avg.value < 20


def test_stand_in_imports_stay_light() -> None:
    code = ("import sys, tuning.lab.tools.perftest; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tuning', 'pydantic', 'yaml', 'jinja2')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
    assert eval(out) == ["tuning", "tuning.errors", "tuning.lab", "tuning.lab.fabric",
                         "tuning.lab.hw_faults",  # (D, issue 10: the model's burn-in faults, stdlib only)
                         "tuning.lab.model",
                         "tuning.lab.noise",  # (issue 20: the run-to-run noise draw, stdlib only)
                         "tuning.lab.tools", "tuning.lab.tools.perftest"]


def test_bad_option_and_device(lab: Lab) -> None:
    assert lab.client(ib_write_bw, "node01", ["--bogus"])[0] == 1
    rc, _, err = lab.client(ib_write_bw, "node01", ["-d", "mlx5_9", "10.0.0.2"])
    assert rc == 1 and err.startswith("IB device mlx5_9 not found")


def test_server_gives_up_without_client(lab: Lab) -> None:
    nic = Fabric.load(lab.state / "fabric.json").node("node02").nics[0]
    rc = serve("ib_write_bw", parse_args("ib_write_bw", ["-d", "mlx5_0"]), lab.state, "node02", nic, timeout_s=0.1)
    out = lab.capsys.readouterr()
    assert rc == 1 and out.out.split("\n")[:4] == BANNER and "no client connected to 10.0.0.2:18515" in out.err
    assert not list((lab.state / "run/perftest").iterdir())


def test_link_down_fails_both_ends_at_once(lab: Lab) -> None:
    inject(lab.state, "leaf01:swp1", "down")
    srv = lab.server("ib_write_bw", "node02", ["-d", "mlx5_0"])
    rc, out, err = lab.client(ib_write_bw, "node01", ["-d", "mlx5_0", "10.0.0.2"])
    srv.communicate(timeout=5)
    assert (rc, out, srv.returncode) == (1, "", 1)
    assert parse("ib_write_bw", err).failure.kind == "connect_failed"
