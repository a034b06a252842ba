"""Issue 8 (fleet rollouts), tester 1 (new user): the CLI surface a new user reads before a rollout.

Fast (no lab): every rollout policy flag is listed in `fabtune rollout --help`, the command has an
example and states its exit codes; `plan --help` offers the batch flags; bad policy flag values are
one-line errors with exit 2. Runs in a few seconds.
"""

from __future__ import annotations

import re

import pytest

from tests.adversarial._cli import cli

POLICY_FLAGS = ["--serial", "--batch-by", "--max-fail-percentage", "--max-failed", "--settle-s",
                "--on-regression", "--min-bw", "--max-lat", "--min-bw-share", "--no-incast"]


def _help(cmd: str) -> str:
    rc, out, err = cli(cmd, "--help")
    assert rc == 0, err
    return re.sub(r"[│╭╮╰╯─]", " ", out)


def test_rollout_help_lists_every_policy_flag_with_an_example():
    h = _help("rollout")
    for f in POLICY_FLAGS:
        assert f in h, f
    assert "Example: fabtune rollout" in h
    for code in ("0", "1", "3", "4"):
        assert re.search(rf"\b{code}\b", h)


def test_plan_help_offers_batches():
    h = _help("plan")
    assert "--serial" in h and "--batch-by" in h and "--detailed-exitcode" in h


@pytest.mark.parametrize("flag,value", [("--serial", "0"), ("--serial", "150%"), ("--batch-by", "rack"),
                                        ("--max-fail-percentage", "101"), ("--on-regression", "undo"),
                                        ("--settle-s", "-1")])
def test_bad_policy_flag_is_one_line_exit_2(flag, value, tmp_path):
    rc, out, err = cli("plan", "-i", "inventory/lab", "--offline", flag, value)
    assert rc == 2, (rc, out, err)
    text = (out + err).strip()
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1, text


def test_rollout_takes_domain_and_refuses_an_unknown_one_before_connecting():
    """Issue 8: ``--domain`` on rollout, checked as apply checks it (the lab is not running: a
    refusal must come before any connection)."""
    assert "--domain" in _help("rollout")
    rc, out, err = cli("rollout", "-i", "inventory/lab", "--domain", "nonsense")
    assert rc == 2 and "Traceback" not in err, (rc, out, err)
    assert err.startswith("fabtune: error: --domain: nonsense: unknown domain; allowed: services,") and \
        err.count("\n") == 1, err
