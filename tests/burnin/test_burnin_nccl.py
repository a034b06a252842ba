"""Burn-in's ``all_reduce_perf`` step (tuning.burnin.run._nccl) on real nccl-tests outputs printed
by a stand-in on PATH (the samples of tests/parsers/cases, from the releases' own printf formats):
a valid multi-rank run gives its average bus bandwidth, a node with one GPU/NIC (one rank: nccl-tests
prints a bus bandwidth of 0 by definition) gives no bandwidth and says why, lone ranks are an error."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path
import pytest

from tests.conftest import REPO
from tuning import inventory
from tuning.burnin.run import _nccl
from tuning.transport.local import LocalHost

CASES = Path(__file__).resolve().parents[1] / "parsers" / "cases"


def _node(tmp_path: Path, sample: str, nics: int):
    """inventory/lab's node01 with its first ``nics`` NICs, and a LocalHost whose PATH has an
    all_reduce_perf that prints ``sample`` (the launch reads the node's GID table: absent here, so
    NCCL_IB_GID_INDEX is left out with a note, as on a node without RoCE)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "all_reduce_perf"
    tool.write_text(f"#!/bin/sh\ncat '{CASES / sample}'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    dev = inventory.load(REPO / "inventory" / "lab").devices["node01"]
    dev = dataclasses.replace(dev, spec=dev.spec.model_copy(update={"nics": dev.spec.nics[:nics]}))
    return dev, LocalHost("node01", env=env)


@pytest.mark.parametrize("sample,nics,avg,error", [
    ("nccl_tests__v1.0.0_all_reduce_8ranks_2node_mpi.txt", 8, 34.2798, None),  # 4.28498 GB/s x 8
    ("nccl_tests__v2.19.6_all_reduce_single_rank.txt", 1, None, "1 rank: all_reduce_perf measured nothing"),
])
def test_burnin_nccl_reads_the_bandwidth_or_says_why_there_is_none(tmp_path, sample, nics, avg, error):
    dev, host = _node(tmp_path, sample, nics)
    got = _nccl([dev], {"node01": host}, timeout_s=10)["node01"]
    assert got["avg_busbw_gbps"] == (pytest.approx(avg, abs=1e-3) if avg else None) and got["rows"] > 0
    assert (got["error"] or "").startswith(error or "") and (error is None) == (got["error"] is None)


def test_burnin_nccl_lone_ranks_are_an_error_with_no_bandwidth(tmp_path):
    dev, host = _node(tmp_path, "nccl_tests__v2.19.6_all_reduce_16_lone_ranks_no_mpi_interleaved.txt", 8)
    got = _nccl([dev], {"node01": host}, timeout_s=10)["node01"]
    assert got["avg_busbw_gbps"] is None and "never crossed the network" in got["error"]
