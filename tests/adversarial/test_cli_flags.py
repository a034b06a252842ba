"""Every command's flags, fuzzed (from the fuzz tester's test_fuzz_cli.py). No lab runs: the inventory
points at this process's test ports where nothing listens, so a flag that is wrongly accepted shows
up as exit 1 (connect failed), never as a change. Each bad flag must exit 2 with ONE line
``fabtune: error: ...`` naming the flag: never click's multi-line Rich box, never a traceback."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.adversarial._cli import assert_one_line, cli
from tests.conftest import REPO, TEST_BASE_PORT

RUN = "20261130T101500-1a2b3c"


@pytest.fixture()
def inv(tmp_path: Path) -> Path:
    """A copy of inventory/lab retargeted to this process's test ports (no lab started)."""
    from tuning.lab.fabric import default_fabric, retarget_inventory

    d = tmp_path / "inv"
    shutil.copytree(REPO / "inventory" / "lab", d, ignore=shutil.ignore_patterns(".state", ".fabtune*"))
    retarget_inventory(d / "hosts.yaml", default_fabric(base_port=TEST_BASE_PORT))
    return d


J = ["--journal-dir", "{j}"]
CASES = [
    ("--limit", ["plan", "-i", "{inv}", "--limit", "nosuch"]), ("--limit", ["plan", "-i", "{inv}", "--limit", ""]),
    ("--limit", ["apply", "-i", "{inv}", *J, "--limit", ";touch PWN"]),
    # a list is an Ansible pattern now (node01,node02 selects both): a list with one unknown term is refused
    ("--limit", ["rollout", "-i", "{inv}", *J, "--limit", "node01,nosuch"]),
    ("--limit", ["rollout", "-i", "{inv}", *J, "--limit", "node01,,node02"]),
    ("--limit", ["rollout", "-i", "{inv}", *J, "--limit", "node01:!nosuch"]),
    ("--limit", ["rollout", "-i", "{inv}", *J, "--limit", "../x"]),
    ("--domain", ["plan", "-i", "{inv}", "--domain", "nosuch"]), ("--domain", ["plan", "-i", "{inv}", "--domain", "MTU"]),
    ("--domain", ["apply", "-i", "{inv}", *J, "--domain", "mtu,qos"]),
    ("--domain", ["apply", "-i", "{inv}", *J, "--domain", ""]),
    ("--confirm-s", ["rollout", "-i", "{inv}", *J, "--confirm-s", "0"]),
    ("--confirm-s", ["rollout", "-i", "{inv}", *J, "--confirm-s", "-1"]),
    ("--confirm-s", ["rollout", "-i", "{inv}", *J, "--confirm-s", "x"]),
    ("--confirm-s", ["rollout", "-i", "{inv}", *J, "--confirm-s", "99999999999999999999"]),
    ("--confirm-s", ["rollout", "-i", "{inv}", *J, "--confirm-s", "86401"]),
    ("--confirm-s", ["rollout", "-i", "{inv}", *J, "--confirm-s", "600.0"]),
    ("--rail", ["rollout", "-i", "{inv}", *J, "--rail", "32"]),
    ("--rail", ["verify", "-i", "{inv}", *J, "--rail", "x"]),
    ("--rail", ["verify", "-i", "{inv}", *J, "--rail", "1.0"]),
    ("--rail", ["verify", "-i", "{inv}", *J, "--rail", "1e1"]),
    ("--min-bw", ["verify", "-i", "{inv}", *J, "--min-bw", "nan"]),
    ("--min-bw", ["verify", "-i", "{inv}", *J, "--min-bw", "inf"]),
    ("--min-bw", ["rollout", "-i", "{inv}", *J, "--min-bw", "-1"]),
    ("--max-lat", ["verify", "-i", "{inv}", *J, "--max-lat", "inf"]),
    ("--max-lat", ["rollout", "-i", "{inv}", *J, "--max-lat", "nan"]),
    ("--last", ["runs", *J, "--last", "0"]), ("--last", ["runs", *J, "--last", "-1"]),
    ("--last", ["runs", *J, "--last", "x"]),
    ("--bogus", ["plan", "-i", "{inv}", "--bogus"]),
    ("--journal-dir", ["rollout", "-i", "{inv}", "--journal-dir", "{file}"]),
    ("--journal-dir", ["apply", "-i", "{inv}", "--journal-dir", "/dev/null"]),
    ("--journal-dir", ["apply", "-i", "{inv}", "--journal-dir", ""]),
    ("--journal-dir", ["runs", "--journal-dir", "{file}"]),
    ("--journal-dir", ["runs", "--journal-dir", ""]),
    ("RUN_ID", ["rollback", *J, "a" * 300]),
    ("-o", ["render", "-i", "{inv}", "-o", "{file}"]), ("-o", ["render", "-i", "{inv}", "-o", ""]),
    ("--state-dir", ["lab", "inject", "-i", "{inv}", "--state-dir", "/nonexistent", "leaf01:swp1", "down"]),
    ("--state-dir", ["lab", "inject", "-i", "{inv}", "leaf01:swp1", "down"]),  # no lab state yet
] + [("RUN_ID", ["rollback", *J, r]) for r in
     ["../../etc/passwd", "x;id", "", ".", "..", "a/b", RUN, "\u00e9", "x\ny", "baseline"]]


def _args(a: list[str], inv: Path, tmp_path: Path) -> list[str]:
    f = tmp_path / "a-file"
    f.write_text("x\n")
    (tmp_path / "j").mkdir(exist_ok=True)
    return [s.format(inv=inv, j=tmp_path / "j", file=f) for s in a]


@pytest.mark.parametrize("flag,args", CASES, ids=[f"{f}:{' '.join(a)[:60]}" for f, a in CASES])
def test_bad_flag_refused_with_one_line(flag, args, inv, tmp_path):
    code, _, err = cli(*_args(args, inv, tmp_path), cwd=tmp_path)
    assert_one_line(code, err, flag)


@pytest.mark.parametrize("args,allowed", [(["verify", "--rail", "32"], "0..31"),
                                          (["rollout", "--confirm-s", "90000"], "86400"),
                                          (["runs", "--last", "x"], "1..")])
def test_usage_error_names_the_allowed_values(args, allowed, tmp_path):
    code, _, err = cli(*args, cwd=tmp_path)
    assert_one_line(code, err, args[1], allowed, f"fabtune {args[0]} --help")


def test_confirm_bound_is_in_the_help(tmp_path):
    code, out, _ = cli("rollout", "--help", cwd=tmp_path)
    assert code == 0 and "86400" in out


def test_render_with_empty_output_writes_nothing_into_the_working_folder(inv, tmp_path):
    """``render -o ''`` was taken as ``.``: seven files landed in the caller's working folder."""
    work = tmp_path / "work"
    work.mkdir()
    code, _, err = cli("render", "-i", str(inv), "-o", "", cwd=work)
    assert_one_line(code, err, "-o")
    assert sorted(p.name for p in work.iterdir()) == []


def test_empty_journal_dir_writes_no_journal_into_the_working_folder(inv, tmp_path):
    """``--journal-dir ''`` put <run>.json in the working folder."""
    work = tmp_path / "work"
    work.mkdir()
    code, _, err = cli("rollout", "-i", str(inv), "--journal-dir", "", cwd=work)
    assert_one_line(code, err, "--journal-dir")
    assert not list(work.rglob("*.json"))


def test_group_writable_journal_dir_refused(inv, tmp_path):
    """A journal directory others may write is refused before a run journals anything into it."""
    j = tmp_path / "j"
    j.mkdir()
    j.chmod(0o777)
    for args in (["runs"], ["rollout", "-i", str(inv)], ["rollback", RUN]):
        code, _, err = cli(*args, "--journal-dir", str(j), cwd=tmp_path)
        assert_one_line(code, err, str(j), "group/world-writable")
