"""``fabtune lab inject`` with bad targets, kinds and values (from the fuzz tester's test_fuzz_lab.py):
each is exit 2 with one line, and leaves the lab's faults as they were."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adversarial._cli import adv_lab, assert_one_line, cli  # noqa: F401 - adv_lab is a fixture

BAD = [("node01:mlx5_99", "degrade"), ("nosuch:swp1", "down"), ("leaf01:swp999", "down"), ("leaf01", "explode"),
       ("leaf01;touch PWN", "down"), ("../x:swp1", "down"), ("", "down"), ("leaf01:", "down"), (":swp1", "down"),
       ("node01:mlx5_0:1", "down"), ("leaf01", "degrade"), ("node01", "slow-apply", "3"),
       ("leaf01", "slow-apply", "x"), ("leaf01", "slow-apply", "1e9"), ("leaf01", "slow-apply", "0"),
       ("leaf01:swp1", "oper-mtu", "99999"), ("leaf01:swp1", "oper-mtu", "x"), ("node01:mlx5_0", "oper-mtu", "1500"),
       ("node01", "dcbx", "x"), ("leaf01:swp1", "degrade", "100"), ("leaf01:swp1", "degrade", "5.5"),
       ("leaf01:swp1", "down", "5"), ("leaf01", "slow-apply", "-1"),
       ("node01", "clear", "1"), ("leaf01", "apply-fails", "2")]


def _inject(lab: Path, *args: str):
    return cli("lab", "inject", "-i", str(lab), "--", *args)


@pytest.mark.parametrize("args", BAD, ids=[" ".join(a) or "empty" for a in BAD])
def test_inject_bad_arguments(adv_lab: Path, args):
    from tuning.lab.inject import list_injections

    before = list_injections(adv_lab / ".state")
    code, _, err = _inject(adv_lab, *args)
    assert_one_line(code, err)
    assert list_injections(adv_lab / ".state") == before


@pytest.mark.parametrize("args", [("leaf01:swp1", "down", "5"), ("node01", "dcbx", "x")])
def test_inject_value_for_a_kind_without_one_names_the_kinds_that_take_one(adv_lab: Path, args):
    code, _, err = _inject(adv_lab, *args)
    assert_one_line(code, err, "VALUE", f"{args[1]} takes no value", "degrade PERCENT", "slow-apply SECONDS",
                    "oper-mtu MTU")


def test_inject_without_a_lab_says_how_to_start_it(tmp_path: Path):
    inv = tmp_path / "inv"
    inv.mkdir()
    code, _, err = cli("lab", "inject", "-i", str(inv), "leaf01:swp1", "down", cwd=tmp_path)
    assert_one_line(code, err, f"the lab is not running in {inv / '.state'}", f"fabtune lab up -i {inv}")


@pytest.mark.parametrize("value", ["-5", "-50%", "0", "100"])
def test_a_degrade_percent_out_of_range_is_named_even_when_negative(tmp_path: Path, value: str):
    """`degrade -5` without `--`: click read "-5" as an option ("No such option: -5"); the PERCENT's
    own range is the message, before any lab is looked for."""
    code, _, err = cli("lab", "inject", "-i", str(tmp_path), "node01:mlx5_0", "degrade", value, cwd=tmp_path)
    assert_one_line(code, err, f"VALUE: {value}: degrade takes the bandwidth lost in percent, a whole number 1..99")


def test_inject_into_a_stopped_labs_state_is_refused(tmp_path: Path):
    """A stopped lab keeps its fabric.json, but the next `lab up` starts from power-on: a fault set
    there would vanish in silence, so it is refused as for no lab at all."""
    from tuning.lab.fabric import default_fabric

    inv = tmp_path / "inv"
    (inv / ".state").mkdir(parents=True)
    default_fabric().save(inv / ".state" / "fabric.json")
    (inv / ".state" / "lab.pid").write_text("999999999\n")  # the daemon that wrote it is gone
    before = (inv / ".state" / "fabric.json").read_bytes()
    code, _, err = cli("lab", "inject", "-i", str(inv), "leaf01:swp1", "down", cwd=tmp_path)
    assert_one_line(code, err, f"the lab is not running in {inv / '.state'}")
    assert (inv / ".state" / "fabric.json").read_bytes() == before


@pytest.mark.parametrize("flag, value, says", [
    ("--noise", "60", "--noise: 60.0: bandwidth noise 60.0 %: must be 0..50 percent"),
    ("--noise", "-1", "--noise: -1.0: bandwidth noise -1.0 %: must be 0..50 percent"),
    ("--noise", "nan", "must be 0..50 percent"), ("--noise", "inf", "must be 0..50 percent"),
    ("--noise-seed", "-3", "--noise-seed: -3: noise seed -3: must be a whole number >= 0")])
def test_lab_up_refuses_bad_noise_before_anything_starts(tmp_path: Path, flag: str, value: str, says: str):
    """`lab up --noise` (default 1 %, tuning.lab.noise.DEFAULT_PCT): a value outside 0..50 or a
    negative seed is one line naming the flag, exit 2, and no lab is started."""
    from tests.adversarial._cli import copy_lab_inventory

    inv = copy_lab_inventory(tmp_path / "inv", {f"node0{k}": 1 + k for k in range(1, 5)}
                             | {"leaf01": 101, "leaf02": 102, "spine01": 103})
    code, _, err = cli("lab", "up", "-i", str(inv), flag, value)
    assert_one_line(code, err, says)
    assert not (inv / ".state").exists()


def test_a_lab_for_an_inventory_spreads_as_a_quiet_fabric_by_default():
    """`fabtune lab up` and `make demo` start the fabric of an inventory: its results spread 1 %
    (bandwidth and latency, unseeded); the tests' own labs (default_fabric) have none."""
    from tests.conftest import REPO
    from tuning.lab.fabric import default_fabric, fabric_for_inventory

    assert fabric_for_inventory(REPO / "inventory" / "lab").noise == {"bw_pct": 1.0, "lat_pct": 1.0}
    assert default_fabric().noise == {}


@pytest.mark.parametrize("args, says", [
    (("--bw-pct", "2", "--seed", "-1"), "--seed: -1: noise seed -1: must be a whole number >= 0"),
    (("--lat-pct", "51"), "--lat-pct: 51.0: latency noise 51.0 %: must be 0..50 percent"),
    (("--bw-pct", "nan"), "--bw-pct: nan: bandwidth noise nan %: must be 0..50 percent")])
def test_lab_noise_names_the_flag_and_value_it_refuses(adv_lab: Path, args, says):
    """The tryout's finding: every refusal named '--bw-pct/--lat-pct/--seed' and --bw-pct's value."""
    before = (adv_lab / ".state" / "fabric.json").read_text()
    code, _, err = cli("lab", "noise", "-i", str(adv_lab), *args)
    assert_one_line(code, err, says)
    assert (adv_lab / ".state" / "fabric.json").read_text() == before
