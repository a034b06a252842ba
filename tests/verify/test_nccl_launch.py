"""The nccl-tests launch and verdict (tuning.verify.nccl, tuning.verify.nccl_verdict) without a lab:
the command lines, the grammar a host name and an NCCL value pass, a tool missing on the node (a
harness error and the finding nccl-not-run, never a fabric fault), the noise rule against the
baseline, and the policy key."""

from __future__ import annotations

import dataclasses
import os

import pytest

from tests.conftest import REPO
from tuning import inventory
from tuning.errors import InputError
from tuning.lab.tools.nccl import NO_EXECUTABLE, ORTE_NO_DAEMONS
from tuning.model.policy import NcclPolicy, RolloutPolicy
from tuning.transport.local import LocalHost
from tuning.verify.nccl import NcclRun, baseline_key, command, prepare, run_job, tool_args
from tuning.verify.nccl_verdict import as_baseline, findings, judge_job, passed
from tuning.verify.pair_verdict import Thresholds

ENV = {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_IB_TC": "106"}


def test_one_mpi_job_with_an_app_context_per_node_or_the_tool_alone_on_one_node():
    args = tool_args(8388608, 134217728, 8)
    assert args == "-b 8388608 -e 134217728 -f 2 -g 8"
    assert command("all_reduce_perf", ["node01", "node02"], {"node01": ENV, "node02": {"NCCL_IB_TC": "106"}}, args) == (
        "mpirun -np 1 --host node01 -x NCCL_IB_HCA==mlx5_0:1,mlx5_1:1 -x NCCL_IB_TC=106 all_reduce_perf "
        "-b 8388608 -e 134217728 -f 2 -g 8 : -np 1 --host node02 -x NCCL_IB_TC=106 all_reduce_perf "
        "-b 8388608 -e 134217728 -f 2 -g 8")
    assert command("alltoall_perf", ["node01"], {"node01": ENV}, "-b 8 -e 8 -f 2 -g 1") == \
        "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1 NCCL_IB_TC=106 alltoall_perf -b 8 -e 8 -f 2 -g 1"


@pytest.mark.parametrize("test,nodes,key", [("ib_write_bw", ["node01"], "nccl.tests"),
                                            ("all_reduce_perf", ["node01;reboot"], "node01;reboot"),
                                            ("all_reduce_perf", ["-np"], "-np")])
def test_an_unknown_test_or_a_name_that_is_no_host_name_is_refused(test, nodes, key):
    with pytest.raises(InputError) as ei:
        command(test, nodes, {}, "-b 8 -e 8 -f 2 -g 1")
    assert ei.value.key == key


def test_a_node_without_nccl_tests_is_a_harness_error_and_the_finding_nccl_not_run():
    dev = inventory.load(REPO / "inventory" / "lab").devices["node01"]
    host = LocalHost("node01", env={**os.environ, "PATH": "/usr/bin:/bin"})  # nccl-tests is not installed here
    job = prepare("all_reduce_perf", [dev], {"node01": host}, (8, 8), 10.0)
    assert (job.error_kind, job.error_class) == ("tool_missing", "harness") and job.command == ""
    assert job.error == "not on the nodes' PATH: node01: all_reduce_perf"
    assert judge_job(job, None, Thresholds(), True) == "none" and job.status == "not-run"
    assert passed([job], required=False) and not passed([job], required=True)
    [f] = findings([job], required=True)
    assert (f["code"], f["device"], f["evidence"]) == ("nccl-not-run", "node01", "policy nccl.required: true")
    assert "verification fails" in f["message"] and as_baseline([dataclasses.asdict(job)]) == {}


def _job(samples: list[float]) -> NcclRun:
    return NcclRun("all_reduce_perf", ["node01", "node02"], samples=samples,
                   busbw_gbs=round(sum(samples) / len(samples), 4))


@pytest.mark.parametrize("now,outcome,status", [([198.0], "held", "pass"), ([160.0], "regressed", "fail"),
                                                ([189.0], "undecided", "pass")])
def test_the_bus_bandwidth_is_judged_with_the_pairs_noise_rule(now, outcome, status):
    base = dataclasses.asdict(_job([200.0]))
    th = Thresholds(noise_pct=3.0)  # 99 %: z se = 2.33 x 3 x sqrt(2) = 9.9 % around a 5 % mark
    job = _job(now)
    got = judge_job(job, base, th, last=outcome != "undecided")
    assert got == (outcome if outcome != "undecided" else "undecided") and job.baseline_gbs == 200.0
    if outcome == "undecided":
        assert judge_job(job, base, Thresholds(noise_pct=0.0), last=True) == "regressed"  # 5.5 % > 5 %
    else:
        assert job.status == status and (status == "pass") == (job.reasons == [])
    assert job.judged.startswith(f"bus bandwidth {job.busbw_gbs:g} GB/s vs baseline 200 GB/s: bandwidth drop")


def test_the_progress_line_names_the_jobs_nodes():
    """A ring's line spans its nodes, a pair's names both (the tryout of session 13: '4 node(s)' did
    not say which job was slow)."""
    from tuning.verify.nccl_verdict import line

    pair = _job([198.0])
    judge_job(pair, dataclasses.asdict(_job([200.0])), Thresholds(noise_pct=0.0), last=True)
    assert line(pair) == ("nccl all_reduce_perf over node01, node02 (2 nodes): 198 GB/s bus bandwidth (1 sample(s), "
                          "traffic class 0): pass; bus bandwidth 198 GB/s vs baseline 200 GB/s: bandwidth drop 1.0 % "
                          "(99 %, 1 vs 1 sample): within the 5 % mark")
    ring = NcclRun("all_reduce_perf", ["node01", "node02", "node03", "node04"], tos=106, samples=[184.4], busbw_gbs=184.4)
    ring.status = "pass"
    assert line(ring).startswith("nccl all_reduce_perf over node01..node04 (4 nodes): 184.4 GB/s bus bandwidth "
                                 "(1 sample(s), class 106): pass")


def test_an_nccl_failure_on_the_network_fails_as_a_fabric_fault():
    job = _job([1.0]).failed("nccl_failure", "node01: Test NCCL failure common.cu:1031 'remote process exited'")
    judge_job(job, None, Thresholds(), True)
    assert (job.status, job.error_class) == ("fail", "fabric") and not passed([job], required=False)
    assert findings([job], required=False) == []


def test_a_baseline_keeps_the_jobs_that_gave_a_value_under_their_test_and_nodes():
    good = dataclasses.asdict(_job([200.0]))
    assert as_baseline([good]) == {"nccl:all_reduce_perf:node01,node02": good}
    assert baseline_key("alltoall_perf", ["a", "b"]) == "nccl:alltoall_perf:a,b"


def test_the_policy_key_is_off_by_default_and_checked():
    assert RolloutPolicy().nccl == NcclPolicy(enabled=False, required=False, tests=["all_reduce_perf"],
                                              min_bytes=8388608, max_bytes=134217728)
    for bad in ({"tests": []}, {"tests": ["broadcast_perf"]}, {"min_bytes": 4}, {"min_bytes": 64, "max_bytes": 8},
                {"enabled": "yes"}, {"required": 1}, {"k": 4}):
        with pytest.raises(ValueError):
            NcclPolicy.model_validate(bad)



def test_a_judged_job_is_what_the_report_schema_allows():
    import jsonschema

    from tuning.reports.json_report import schema

    s = schema()
    check = jsonschema.Draft202012Validator({"$defs": s["$defs"], "$ref": "#/$defs/nccl_job"})
    base = dataclasses.asdict(_job([200.0]))
    for job in (_job([150.0]), _job([1.0]).failed("tool_missing", "node01: all_reduce_perf")):
        judge_job(job, base, Thresholds(), True)
        check.validate(dataclasses.asdict(job))
    with pytest.raises(jsonschema.ValidationError):
        check.validate({**base, "status": "skipped"})


@pytest.mark.parametrize("value,key,allowed", [
    ("{tests: [broadcast_perf]}", "fabtune_rollout.nccl.tests", "'all_reduce_perf' or 'alltoall_perf'"),
    ("{min_bytes: 4}", "fabtune_rollout.nccl.min_bytes", "8..17179869184"),
    ("{min_bytes: 1024, max_bytes: 8}", "fabtune_rollout.nccl", "min_bytes <= max_bytes"),
    ('{enabled: "true"}', "fabtune_rollout.nccl.enabled", "allowed"),
    ("{k: 4}", "fabtune_rollout.nccl.k", "allowed"),
])
def test_a_bad_nccl_policy_in_the_inventory_is_one_line_naming_file_key_and_allowed(tmp_path, value, key, allowed):
    import shutil

    inv = tmp_path / "inv"
    shutil.copytree(REPO / "inventory" / "lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune*"))
    with (inv / "group_vars" / "all.yml").open("a") as f:
        f.write(f"fabtune_rollout: {{nccl: {value}}}\n")
    with pytest.raises(InputError) as ei:
        inventory.load(inv)
    msg = str(ei.value)
    assert "\n" not in msg and "all.yml" in msg.split(": ")[0] and f": {key}" in msg and allowed in msg, msg


def test_a_launch_whose_ranks_never_met_is_the_harnesss_fault_never_the_fabrics(tmp_path):
    """N processes each alone (the binary started per node, or built without MPI=1: nccl-tests'
    lone-ranks sample) give no bus bandwidth: ranks_alone, class harness, not-run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sample = REPO / "tests/parsers/cases/nccl_tests__v2.19.6_all_reduce_16_lone_ranks_no_mpi_interleaved.txt"
    (bin_dir / "all_reduce_perf").write_text(f"#!/bin/sh\ncat '{sample}'\n")
    (bin_dir / "all_reduce_perf").chmod(0o755)
    dev = inventory.load(REPO / "inventory" / "lab").devices["node01"]
    host = LocalHost("node01", env={**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"})
    job = run_job("all_reduce_perf", [dev], {"node01": host}, (8388608, 134217728), 10.0)
    assert (job.error_kind, job.error_class, job.busbw_gbs, job.n_ranks) == ("ranks_alone", "harness", None, 16)
    assert job.command.endswith("all_reduce_perf -b 8388608 -e 134217728 -f 2 -g 8")
    judge_job(job, None, Thresholds(), True)
    assert job.status == "not-run" and findings([job], required=False)[0]["code"] == "nccl-not-run"


@pytest.mark.parametrize("said, rc, kind, first", [
    (f"ssh: Could not resolve hostname node02: Name or service not known\n{ORTE_NO_DAEMONS}", 1, "unreachable",
     "ssh: Could not resolve hostname node02: Name or service not known"),
    (NO_EXECUTABLE.format(program="all_reduce_perf", node="node02", rank=8), 131, "tool_missing",
     "mpirun was unable to launch the specified application as it could not access")])
def test_a_job_open_mpi_could_not_start_is_the_harnesss_fault_never_the_fabrics(tmp_path, said, rc, kind, first):
    """Open MPI's own launch failures (a daemon it could not start, a program a node cannot run)
    print no nccl-tests output: the job never ran, so the harness failed, not the fabric (it read
    as no_value, a fabric fault, before)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "said.txt").write_text(said)
    (bin_dir / "mpirun").write_text(f"#!/bin/sh\ncat '{tmp_path / 'said.txt'}' >&2\nexit {rc}\n")
    (bin_dir / "all_reduce_perf").write_text("#!/bin/sh\nexit 0\n")
    for tool in ("mpirun", "all_reduce_perf"):
        (bin_dir / tool).chmod(0o755)
    devs = [inventory.load(REPO / "inventory" / "lab").devices[n] for n in ("node01", "node02")]
    hosts = {d.name: LocalHost(d.name, env={**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}) for d in devs}
    job = run_job("all_reduce_perf", devs, hosts, (8388608, 134217728), 10.0)
    assert (job.error_kind, job.error_class, job.busbw_gbs) == (kind, "harness", None), job.error
    assert job.error == f"node01: all_reduce_perf could not start (exit {rc}: {first})", job.error


def _one_node_tool(folder, stdout: str, rc: int):
    """node01 whose ``all_reduce_perf`` (in ``folder``/bin) prints ``stdout`` and exits ``rc`` (a LocalHost)."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    (folder / "out.txt").write_text(stdout)
    (bin_dir / "all_reduce_perf").write_text(f"#!/bin/sh\ncat '{folder / 'out.txt'}'\nexit {rc}\n")
    (bin_dir / "all_reduce_perf").chmod(0o755)
    dev = inventory.load(REPO / "inventory" / "lab").devices["node01"]
    return [dev], {"node01": LocalHost("node01", env={**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"})}


def test_output_no_nccl_tests_run_printed_is_the_harnesss_and_a_cut_run_the_fabrics(tmp_path):
    """An output without nccl-tests' result header (another program or build answered: here a
    binary killed by SIGILL before printing) is ``unreadable``, the harness's: the job is not-run
    and, without ``nccl.required``, fails nothing (it read as no_value, a fabric fault, before).
    A run that printed its header and rows and broke off before '# Avg bus bandwidth' did start:
    ``no_value``, the fabric's, a failure."""
    devs, hosts = _one_node_tool(tmp_path, "", 132)
    job = run_job("all_reduce_perf", devs, hosts, (8388608, 134217728), 10.0)
    assert (job.error_kind, job.error_class, job.busbw_gbs) == ("unreadable", "harness", None), job.error
    judge_job(job, None, Thresholds(), True)
    assert job.status == "not-run" and passed([job], required=False) and not passed([job], required=True)

    whole = (REPO / "tests/parsers/cases/nccl_tests__v2.11.0_all_reduce_16ranks_2node_no_check.txt").read_text()
    cut = whole[:whole.index("# Out of bounds values")]
    devs, hosts = _one_node_tool(tmp_path / "cut", cut, 134)
    job = run_job("all_reduce_perf", devs, hosts, (8388608, 134217728), 10.0)
    assert (job.error_kind, job.error_class, job.busbw_gbs) == ("no_value", "fabric", None), job.error
    judge_job(job, None, Thresholds(), True)
    assert job.status == "fail" and not passed([job], required=False)


def test_nccl_pairs_add_a_job_per_two_consecutive_nodes_an_odd_last_with_the_first():
    from tuning.verify.nccl_verdict import node_groups

    assert node_groups(list("abcd"), False) == [list("abcd")]
    assert node_groups(list("abcd"), True) == [list("abcd"), ["a", "b"], ["c", "d"]]
    assert node_groups(list("abcde"), True) == [list("abcde"), ["a", "b"], ["c", "d"], ["e", "a"]]
    assert node_groups(list("ab"), True) == [["a", "b"]]  # the pair is the whole job
    assert NcclPolicy(pairs=True).pairs and not NcclPolicy().pairs


def test_a_policy_naming_a_test_twice_is_refused():
    """Two jobs of one test over the same nodes would share one baseline entry (tryout finding)."""
    with pytest.raises(ValueError, match=r"names a test twice; allowed: each of all_reduce_perf, alltoall_perf once"):
        NcclPolicy(tests=["all_reduce_perf", "all_reduce_perf"])
    assert NcclPolicy(tests=["all_reduce_perf", "alltoall_perf"]).tests == ["all_reduce_perf", "alltoall_perf"]
