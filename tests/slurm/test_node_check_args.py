"""``fabtune node check``'s arguments (fast tier, no lab, no Slurm): bad input is exit 2 and one line
on stderr before the node is read or any ``scontrol`` runs; ``SLURMD_NODENAME`` (slurmd's, an env
string that would reach the node's shell) passes the host-name grammar first."""

from __future__ import annotations

import os

import pytest

from tests.conftest import REPO
from tests.slurm.conftest import fab

INV = str(REPO / "inventory" / "lab")


def _env(**kw: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("SLURMD_NODENAME", "FABTUNE_SYSROOT")}
    return {**env, "PATH": "/nonexistent", **kw}  # no scontrol, no tool: a read or drain would fail loudly


@pytest.mark.parametrize("flags", [(), ("--passive", "--prolog")])
def test_exactly_one_mode(flags):
    r = fab("node", "check", "-i", INV, "--node", "node01", *flags, env=_env())
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == ("fabtune: error: --passive: -: give exactly one of --passive (HealthCheckProgram) and "
                        "--prolog (Prolog) (see `fabtune node check --help`)\n")


def test_slurmd_nodename_passes_the_grammar_before_anything_is_read():
    r = fab("node", "check", "--passive", "-i", INV, env=_env(SLURMD_NODENAME="node01;scontrol"))
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith("fabtune: error: --node: node01;scontrol: $SLURMD_NODENAME: ")


def test_a_node_the_inventory_does_not_name_is_bad_input():
    r = fab("node", "check", "--prolog", "-i", INV, env=_env(SLURMD_NODENAME="node99"))
    assert (r.returncode, r.stderr) == (2, f"fabtune: error: --node: node99: $SLURMD_NODENAME names no node of "
                                           f"{INV}; pass --node NAME (see `fabtune node check --help`)\n")


def test_a_sysroot_outside_the_path_grammar_is_bad_input():
    r = fab("node", "check", "--prolog", "-i", INV, "--node", "node01", env=_env(FABTUNE_SYSROOT="/srv/../etc"))
    assert r.returncode == 2 and r.stderr.startswith("fabtune: error: --sysroot: /srv/../etc: "), r.stderr


def test_help_names_both_hooks_and_an_example():
    r = fab("node", "check", "--help", env={**_env(), "COLUMNS": "200"})
    assert r.returncode == 0 and "Example: HealthCheckProgram=" in r.stdout and "--prolog" in r.stdout


@pytest.mark.parametrize("mode", ["--prolog", "--passive"])
def test_a_node_that_cannot_be_read_is_exit_4_and_never_drained(mode, tmp_path):
    """A sysroot without the node's files (a wrong mount, not a fabric fault): exit 4, one line, nothing
    drained (no SLURM_CONF: a drain attempt would say 'drain failed')."""
    env = {k: v for k, v in _env(PATH="/usr/bin:/bin").items() if k != "SLURM_CONF"}
    r = fab("node", "check", mode, "-i", INV, "--node", "node01", "--sysroot", str(tmp_path), env=env)
    assert r.returncode == 4 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("fabtune: error: node01: cannot read the node: ") and "drain" not in r.stderr
    assert "the node has no netdev enp12s0np0 (/sys/class/net/enp12s0np0 is missing)" in r.stderr
