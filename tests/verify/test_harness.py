"""A failure of the verification harness is its own class, never a fabric fault (issue 19): a
perftest server whose TCP port another process holds, or a tool that cannot start, is
``error_class == "harness"``; burn-in reads no node, link or switch fault from such pairs, names the
node as a ``harness-error`` finding and drains nothing. No lab: the runner's classifier on perftest's
own texts (src/perftest_communication.c, write_bw.c), the verdict and localisation on documents."""

from __future__ import annotations

from tests.burnin.burnin_docs import fabric, make_doc
from tuning.burnin import drain
from tuning.burnin.localise import localise
from tuning.lab.tools.perftest import BANNER, CONNECT_ERR, LISTEN_ERR
from tuning.transport.base import CommandResult
from tuning.verify.pair_result import ERROR_KINDS, HARNESS_KINDS, error_class
from tuning.verify.runner import PairResult, Thresholds, harness_fault, judge

SERVER_BUSY = CommandResult("ib_write_bw -p 18515", 1, "\n".join(BANNER) + "\n", LISTEN_ERR.format(port=18515))
CLIENT_REFUSED = CommandResult("ib_write_bw ... 10.0.0.2", 1, "", CONNECT_ERR.format(addr="10.0.0.2", port=18515))


def test_perftest_server_that_cannot_listen_is_port_in_use():
    # perftest prints its banner, then fails to bind: the banner alone proves nothing
    assert LISTEN_ERR.splitlines() == ["Couldn't listen to port {port}", "Unable to open file descriptor for socket "
                                       "connection", " Unable to init the socket connection"]
    assert harness_fault(SERVER_BUSY, "ib_write_bw", "node02 (server)") == (
        "port_in_use", "node02 (server): ib_write_bw could not listen on TCP port 18515 (another process on the "
                       "node holds it); the fabric was not tested")


def test_a_tool_that_cannot_start_is_tool_missing():
    for rc, err in ((127, "bash: line 1: ib_write_bw: command not found\n"),
                    (126, "bash: line 1: /usr/bin/ib_read_lat: Permission denied\n")):
        kind, cause = harness_fault(CommandResult("x", rc, "", err), "ib_write_bw", "node01 (client)")
        assert kind == "tool_missing" and cause.startswith(f"node01 (client): ib_write_bw could not start (exit {rc}: ")
        assert err.strip() in cause and cause.endswith("the fabric was not tested")


def test_a_client_that_cannot_connect_is_no_harness_fault():
    # the server's port was free: a connect failure is the fabric's (or the far node's) to explain
    assert harness_fault(CLIENT_REFUSED, "ib_write_bw", "node01 (client)") is None
    assert harness_fault(CommandResult("x", 1, "", "Failed to modify QP 0x1 to RTR\n"), "ib_write_bw", "e") is None


def test_judge_names_the_class_of_every_error_kind():
    assert set(HARNESS_KINDS) <= set(ERROR_KINDS) and HARNESS_KINDS == ("port_in_use", "server_not_ready", "tool_missing", "no_pairs")
    for kind in ERROR_KINDS:
        r = PairResult("a->b", "leaf", error_kind=kind, error=f"{kind}: x")
        assert judge([r], Thresholds(), None) is False
        assert (r.status, r.error_class) == ("error", "harness" if kind in HARNESS_KINDS else "fabric"), kind
        assert r.reasons == [f"did not run: {kind}: {kind}: x"]
    ok = PairResult("a->b", "leaf", bw_gbps=390.0, lat_us=2.0, mtu_bytes=4096, mtu_allowed=4096)
    ok.error_class = "harness"  # a stale class from an earlier verdict does not survive a pass
    judge([ok], Thresholds(min_bw_gbps=0), None)
    assert (ok.status, ok.error_class) == ("pass", None) and error_class(None) is None


def _busy_node02(kind: str, klass: str):
    """Every test whose server or client is on node02 did not run, as ``kind`` / ``klass``."""
    def mutate(rnd, _i):
        for p in rnd["pairs"]:
            if "node02:" in p["client_nic"] + p["server_nic"]:
                side = "server" if p["server_nic"].startswith("node02:") else "client"
                p.update(bw_gbps=None, lat_us=None, status="error", verdict="fail", error_kind=kind, error_class=klass,
                         error=f"node02 ({side}): ib_write_bw could not listen on TCP port 18515 (another "
                               f"process on the node holds it); the fabric was not tested")
    return make_doc(fabric(4, 2, 2, 1), rounds=2, mutate=mutate)


def test_burnin_reads_no_fault_from_harness_errors_and_drains_nothing():
    found = localise(_busy_node02("port_in_use", "harness"))
    assert [(f["code"], f["kind"], f["target"]) for f in found] == [("harness-error", "harness", "node02")]
    f = found[0]
    assert f["message"].startswith("node02: the verification harness failed on ")
    assert "(port_in_use): the fabric was not tested there, no fault is read from it; first: node02 (" in f["message"]
    assert f["evidence"]["rounds"] == [0, 1] and f["evidence"]["pairs"]
    assert all("node02:" in a + b for a, b in f["evidence"]["pairs"])
    plan = drain.plan(found, max_drain=4)
    assert plan.drain == [] and plan.over_cap == []


def test_the_same_pairs_failing_in_the_fabric_name_the_node():
    """The control: the same pairs as fabric errors are a slow node, drained."""
    found = localise(_busy_node02("connect_failed", "fabric"))
    assert [(f["code"], f["kind"], f["target"]) for f in found] == [("node-slow", "node", "node02")]
    assert [n for n, _ in drain.plan(found, max_drain=4).drain] == ["node02"]


def test_a_gate_failed_by_the_harness_alone_says_the_change_is_unproven():
    from tuning.rollout.gate import gate_failed_why

    held = {"pair": "node01:mlx5_0->node02:mlx5_0", "client_nic": "node01:mlx5_0", "server_nic": "node02:mlx5_0",
            "status": "error", "error_kind": "port_in_use",
            "error_class": "harness", "error": "node02 (server): ib_write_bw could not listen on TCP port 18515"}
    regressed = {"pair": "node01:mlx5_1->node02:mlx5_1", "status": "fail", "error_class": None}
    passed = {"pair": "node01:mlx5_2->node02:mlx5_2", "status": "pass", "error_class": None}
    assert gate_failed_why(2, [held, passed]) == (
        "batch 2: the verification harness failed on 1 pair(s) (port_in_use on node02): the fabric was not "
        "tested, the change is unproven (not a fabric regression)")
    assert gate_failed_why(2, [held, regressed, passed]) == (
        "batch 2: verification failed or regressed (1 pair(s) not tested: the verification harness failed)")
    # an incast that failed with every pair passing
    assert gate_failed_why(3, [passed]) == "batch 3: verification failed or regressed"
    # every pair passed, the nccl-tests job regressed: the halt says which and why
    job = {"test": "all_reduce_perf", "status": "fail", "reasons": ["all_reduce_perf regressed: bus bandwidth drop 50.0 %"]}
    assert gate_failed_why(4, [passed], [job, {"test": "alltoall_perf", "status": "pass"}]) == (
        "batch 4: every pair passed, nccl-tests did not: all_reduce_perf regressed: bus bandwidth drop 50.0 %")


def _perftest_nodes(tmp_path, server_script: str):
    """node01 (client) and node02 (server) as LocalHosts whose ``ib_write_bw`` (in tmp_path/bin) runs
    ``server_script`` as a server (no address argument) and, as a client, leaves ``client-ran``."""
    import os
    from types import SimpleNamespace

    from tuning.transport.local import LocalHost
    from tuning.verify.pairs import Pair

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "ib_write_bw"
    tool.write_text(f'#!/bin/bash\ncase "${{@: -1}}" in 10.*) touch {tmp_path}/client-ran; exit 1 ;; esac\n'
                    f"{server_script}\n")
    tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    hosts = {n: LocalHost(n, env=env) for n in ("node01", "node02")}
    nic = SimpleNamespace(rdma_device="mlx5_0", ipv4=SimpleNamespace(ip="10.0.0.2"), switch="leaf01", switch_port="swp1")
    return hosts, Pair("node01", nic, "node02", nic, "leaf")


def test_a_server_that_never_says_it_listens_is_the_harnesss_and_its_client_never_runs(tmp_path):
    # a node too loaded to start its perftest server within the banner wait (seen at 64 lab nodes on
    # 2 cores): a client started anyway could only fail to connect, and that reads as the fabric's
    from tuning.verify.runner import measure

    hosts, pair = _perftest_nodes(tmp_path, "sleep 30")
    r = measure(pair, hosts, 18515, gids={("node02", "mlx5_0"): 3, ("node01", "mlx5_0"): 3}, timeout_s=1)
    assert (r.error_kind, error_class(r.error_kind)) == ("server_not_ready", "harness")
    assert r.error.startswith('node02 (server): ib_write_bw did not say it listens ("Waiting for client to connect") '
                              "within 10 s; its client was not started")
    assert not (tmp_path / "client-ran").exists()


def test_a_server_that_ends_before_listening_is_judged_on_its_own_words(tmp_path):
    # perftest opens the device before it listens: a device the server cannot open is perftest's own
    # error line (fabric), and a server that could not start is the harness's; no client runs
    from tuning.verify.runner import measure

    gids = {("node02", "mlx5_0"): 3, ("node01", "mlx5_0"): 3}
    hosts, pair = _perftest_nodes(tmp_path, "echo ' No IB devices found' >&2; exit 1")
    r = measure(pair, hosts, 18515, gids=gids, timeout_s=1)
    assert (r.error_kind, error_class(r.error_kind)) == ("no_rdma_device", "fabric"), r.error
    assert not (tmp_path / "client-ran").exists()
    (tmp_path / "bin" / "ib_write_bw").chmod(0o644)  # the shell cannot run it: exit 126
    r = measure(pair, hosts, 18515, gids=gids, timeout_s=1)
    assert (r.error_kind, error_class(r.error_kind)) == ("tool_missing", "harness")
    assert r.error.startswith("node02 (server): ")
