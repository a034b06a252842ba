"""Issue 8 lab stand-ins against the real tools, as the node's unprivileged user (tester 4).

What a real mlx5 node shows, to the character:

- ``ethtool -S IF`` (ethtool ``ethtool.c`` ``do_gnicstats`` / ``dump_stats``): ``NIC statistics:`` then
  ``     name: value`` per counter, in the driver's order; shared/cases
  ``ethtool_S__mlx5_grep_prio3_pause_discards_roce_congested.txt`` is that output through
  ``grep -E 'prio3|pause|discard|out_of_buffer|ecn|cnp'``, so the same grep of the stand-in must give the
  same names in the same order. An unknown interface: ``Cannot get stats strings information: No such
  device``, exit 96.
- RDMA ``hw_counters`` (``grep "" .../hw_counters/*``: ``path:value``; shared/cases
  ``hw_counters__sysfs_grep_mlx5_port1.txt``), ``/sys/class/net/IF/speed`` (``%d\\n`` Mb/s).
- Permissions (kernel ``fs/kernfs/file.c`` ``kernfs_fop_open``: sysfs sets
  ``KERNFS_ROOT_EXTRA_OPEN_PERM_CHECK``, so opening a file without a write method or without a ``w``
  mode bit for writing fails with EACCES *even for root*; sysfs files belong to root, so ``chmod`` by
  anyone else fails with EPERM): hw_counters and ``speed`` are 0444, nobody writes them, the node user
  cannot chmod them, and nothing a node user may write changes what ``ethtool -S`` prints.
- The incast judge (``tuning.verify.incast.judge_incast``) must not read a counter that went backwards
  (driver reload, a reset, or a hand-written value) as "no loss".

No lab daemon: one node sysroot built and protected as ``lab up`` does (``Box`` of
test_node_standins_unprivileged); the file checks run as the lab's real unprivileged user. Needs root (CI) or
make test's user namespace; the ownership checks need the root lab (skipped in the namespace, where
docs/lab.md says the lab is lenient by design).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.adversarial.test_node_standins_unprivileged import Box
from tests.conftest import shared_cases

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root or make test's user namespace (docs/lab.md)")

CASES = shared_cases()
IF, DEV = "enp12s0np0", "mlx5_0"  # node01 rail 0
HW = f"sysroot/sys/class/infiniband/{DEV}/ports/1/hw_counters"
SPEED = f"sysroot/sys/class/net/{IF}/speed"
ETH_CASE = "ethtool_S__mlx5_grep_prio3_pause_discards_roce_congested.txt"
HW_CASE = "hw_counters__sysfs_grep_mlx5_port1.txt"


def _in_userns() -> bool:
    from tuning.lab.privileges import in_user_namespace

    return in_user_namespace()


strict = pytest.mark.skipif(_in_userns(), reason="user-namespace lab: shells own every file (docs/lab.md, lenient)")


@pytest.fixture(scope="module")
def box():
    path = Path(tempfile.mkdtemp(prefix="fabtune-t4i8-"))
    os.chmod(path, 0o755)
    try:
        yield Box(path / "state")
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _case(name: str) -> list[str]:
    return (CASES / name).read_text().splitlines()  # a missing sample fails: the check must run


# ---- formats ---------------------------------------------------------------------------------------------

def test_ethtool_S_lines_and_order_match_the_real_driver(box):
    """The sample's NIC had PFC on priority 3 and 802.3x pause off (it lists ``rx_prio3_pause`` and no
    ``*_global_pause*``; mlx5 lists only what the port's configuration enables): configure the lab NIC
    the same way, as root, for the comparison, and put the untuned state back after."""
    case = _case(ETH_CASE)
    cmd = case[0].lstrip("$ ").replace("ens1f0np0", IF)
    setup = box.sh(f"mlnx_qos -i {IF} --pfc 0,0,0,1,0,0,0,0 >/dev/null && ethtool -A {IF} rx off tx off",
                   privileged=True)
    try:
        assert setup.returncode == 0, setup.stderr
        r = box.sh(cmd, privileged=False)
    finally:
        box.sh(f"mlnx_qos -i {IF} --pfc 0,0,0,0,0,0,0,0 >/dev/null; ethtool -A {IF} rx on tx on", privileged=True)
    assert r.returncode == 0, r.stderr
    want = [line.split(":")[0] for line in case[1:]]
    got = [line.split(":")[0] for line in r.stdout.splitlines()]
    assert [g for g in got if g in want] == want, (got, want)  # the sample is abridged: same names, same order
    full = box.sh(f"ethtool -S {IF}", privileged=False)
    lines = full.stdout.splitlines()
    assert lines[0] == "NIC statistics:" and full.returncode == 0
    assert all(re.fullmatch(r"     [a-z0-9_]+: \d+", line) for line in lines[1:]), lines[:5]


def test_ethtool_S_pause_counters_follow_the_pfc_and_pause_config(box):
    """mlx5 ``en_stats.c`` ``mlx5e_grp_per_prio_pfc_fill_strings``: ``{rx,tx}_prioN_pause*`` only for the
    priorities with PFC on (``mlx5e_query_pfc_combined``), ``{rx,tx}_global_pause*`` when 802.3x pause is on.
    An untuned lab NIC has PFC off and global pause on (run/lab/pause: mlx5 loads with it on)."""
    import json

    dcb = json.loads(box.path(f"run/lab/dcb/{IF}.json").read_text())
    pause = json.loads(box.path(f"run/lab/pause/{IF}.json").read_text())
    assert not any(dcb["pfc"]) and (pause["rx"] or pause["tx"])
    names = [line.split(":")[0].strip() for line in box.sh(f"ethtool -S {IF}", privileged=False).stdout.splitlines()[1:]]
    assert not [n for n in names if re.fullmatch(r"[rt]x_prio\d_pause\w*", n)], "prio pause counters with PFC off"
    assert "rx_global_pause" in names and "tx_global_pause" in names


def test_ethtool_S_unknown_interface_is_ioctl_text_exit_96(box):
    r = box.sh("ethtool -S nosuch0", privileged=False)
    assert (r.returncode, r.stdout, r.stderr) == (96, "", "Cannot get stats strings information: No such device\n")


def test_hw_counters_grep_is_path_colon_value_with_the_mlx5_names(box):
    case = _case(HW_CASE)
    names = [line.rsplit("/", 1)[1].split(":")[0] for line in case[1:]]
    r = box.sh(f"grep '' {HW}/*", privileged=False)
    assert r.returncode == 0, r.stderr
    got = {}
    for line in r.stdout.splitlines():
        m = re.fullmatch(re.escape(HW) + r"/([a-z_]+):(\d+)", line)
        assert m, line
        got[m.group(1)] = int(m.group(2))
    assert set(names) <= set(got), set(names) - set(got)
    assert list(got) == sorted(got)  # the shell's glob order, as on a real node
    assert got["lifespan"] == 10 and {v for k, v in got.items() if k != "lifespan"} == {0}


def test_speed_reads_mbps_with_a_newline(box):
    r = box.sh(f"cat {SPEED}", privileged=False)
    assert (r.returncode, r.stdout) == (0, "400000\n")


# ---- who may write what ------------------------------------------------------------------------------

@pytest.mark.parametrize("rel", [f"{HW}/out_of_sequence", SPEED])
def test_node_user_write_refused_with_the_kernel_text(box, rel):
    r = box.sh(f"echo 0 > {rel}", privileged=False)
    assert r.returncode == 1 and r.stderr.endswith(f"{rel}: Permission denied\n"), r.stderr
    assert box.login.joinpath(rel).read_text() in ("0\n", "400000\n")


GID = f"sysroot/sys/class/infiniband/{DEV}/ports/1/gids/200"  # an empty entry: one inode of every lab node
CORE_ID = "sysroot/sys/devices/system/cpu/cpu3/topology/core_id"


@pytest.mark.parametrize("rel", [f"{HW}/out_of_sequence", SPEED, GID, CORE_ID])
def test_root_write_to_read_only_sysfs_is_refused_too(box, rel):
    """kernfs refuses O_WRONLY on an attribute without a store method with EACCES, CAP_DAC_OVERRIDE or not:
    ``sudo sh -c 'echo 0 > .../hw_counters/out_of_sequence'`` prints Permission denied on a real node.
    The lab refuses it where fabtune writes sysfs, through ``tee`` (``printf '%s\\n' V | tee FILE``):
    a root shell's own redirect cannot be intercepted by a stand-in (docs/lab.md, the tee row)."""
    before, mode = box.login.joinpath(rel).read_text(), box.login.joinpath(rel).stat().st_mode
    r = box.sh(f"printf '%s\\n' 12345 | tee {rel} >/dev/null", privileged=True)
    after = box.login.joinpath(rel).read_text()
    box.login.joinpath(rel).chmod(0o644)
    box.login.joinpath(rel).write_text(before)  # put it back for the other tests
    box.login.joinpath(rel).chmod(mode & 0o7777)
    assert after == before and r.returncode == 1 and "Permission denied" in r.stderr, (r.returncode, r.stderr, after)


@strict
@pytest.mark.parametrize("rel", [f"{HW}/packet_seq_err", SPEED])
def test_node_user_cannot_chmod_a_counter(box, rel):
    """Real sysfs files belong to root: ``chmod u+w`` by the node user fails (EPERM)."""
    r = box.sh(f"chmod u+w {rel} && echo 0 > {rel}", privileged=False)
    mode = box.login.joinpath(rel).stat().st_mode & 0o777
    box.login.joinpath(rel).chmod(0o444)
    assert r.returncode == 1 and "Operation not permitted" in r.stderr and mode == 0o444, (r.returncode, r.stderr,
                                                                                           oct(mode))


@strict
def test_node_user_cannot_forge_ethtool_S(box):
    """Whatever the node user may write, ``ethtool -S`` prints the NIC's counters, not a file of theirs."""
    before = box.sh(f"ethtool -S {IF}", privileged=False).stdout
    forged = "{" + ", ".join(f'"rx_prio{p}_pause": 777' for p in range(8)) + "}"
    j = f"sysroot/run/lab/ethtool/{IF}.json"
    attempts = [
        f"echo {shlex.quote(forged)} > {j}",
        f"chmod u+w {j} && echo {shlex.quote(forged)} > {j}",
        f"echo {shlex.quote(forged)} > {j}.new && mv -f {j}.new {j}",
    ]
    for a in attempts:
        box.sh(a, privileged=False)
    after = box.sh(f"ethtool -S {IF}", privileged=False).stdout
    assert after == before, [line for line in after.splitlines() if "777" in line][:3]


# ---- the judge --------------------------------------------------------------------------------------------

def _result(counters):
    from tuning.verify.incast import IncastResult

    r = IncastResult("leaf01: 2->node01:mlx5_0", "leaf01", "node01:mlx5_0", ["node02:mlx5_0", "node03:mlx5_0"])
    r.sender_gbps = {"node02:mlx5_0": 190.0, "node03:mlx5_0": 191.0}
    r.line_gbps = 400.0
    r.counters = counters
    return r


def test_counter_that_went_backwards_is_not_a_clean_incast():
    """A loss counter lower after the incast than before (driver reload, reset, forged file) says nothing
    about loss: the judge must not pass it as lossless."""
    from tuning.verify.incast import Expectation, judge_incast

    r = _result({"node01:mlx5_0": {"out_of_sequence": -1757808, "rx_prio3_discards": -585936,
                                   "tx_prio3_pause": 3000, "np_cnp_sent": 5000},
                 "node02:mlx5_0": {"rx_prio3_pause": 3000, "rp_cnp_handled": 5000},
                 "node03:mlx5_0": {"rx_prio3_pause": 3000, "rp_cnp_handled": 5000}})
    assert not judge_incast(r, Expectation(lossless=True, ecn=True, priority=3)), r.reasons


def test_incast_client_with_unreadable_output_is_a_failed_incast_not_bad_input():
    """A sender's ib_write_bw that prints what no perftest prints (a crash, a loader error) leaves that
    incast without a value: the incast fails ("did not run", as a pair does: runner ``_failed(out,
    "unknown", ...)``), it must not escape as a ParseError, which ``fabtune verify`` turns into exit 2
    (bad input, docs/reports.md) and a rollout into an abort."""
    import types

    from tuning.verify.incast import IncastResult, _collect

    class Proc:
        def __init__(self, out):
            self.out = out

        def wait(self, timeout=None):
            return types.SimpleNamespace(stdout=self.out, stderr="", rc=139)

    r = IncastResult("leaf01: 2->node01:mlx5_0", "leaf01", "node01:mlx5_0", ["node02:mlx5_0", "node03:mlx5_0"])
    started = [(Proc(""), "node02", "node02:mlx5_0", "c"), (Proc(""), "node03", "node03:mlx5_0", "c")]
    running = [("node02:mlx5_0", Proc("Traceback (most recent call last):\nSegmentation fault\n")),
               ("node03:mlx5_0", Proc("Segmentation fault (core dumped)\n"))]
    _collect(started, running, r, None, (18515, 18517))  # must not raise
    assert r.error and r.sender_gbps.get("node02:mlx5_0") is None


@pytest.mark.parametrize("lossless,ecn", [(False, False), (True, False), (True, True)])
def test_incast_traffic_also_counts_on_the_physical_port_counters(lossless, ecn):
    """mlx5 ``rx_bytes_phy``/``rx_packets_phy`` (``tx_*_phy``) count every frame of the physical port,
    RoCE included (counters.rst: "physical port counters"), so they rise at least as much as the
    ``rx_prioN_bytes`` of the same traffic; the lab leaves them at 0 whatever an incast moves."""
    from tuning.lab.model import Outcome, incast_counters

    c = incast_counters(Outcome(bw_avg_gbps=100.0, active_mtu=4096, lossless=lossless, ecn=ecn,
                                sender_prio=3, receiver_prio=3), k=4, seconds=2.0)
    assert c.receiver.get("rx_bytes_phy", 0) >= c.receiver["rx_prio3_bytes"] > 0, c.receiver
    assert c.receiver.get("rx_packets_phy", 0) >= c.receiver["rx_prio3_packets"], c.receiver
    assert c.sender.get("tx_bytes_phy", 0) >= c.sender["tx_prio3_bytes"] > 0, c.sender
    assert c.sender.get("tx_packets_phy", 0) >= c.sender["tx_prio3_packets"], c.sender
