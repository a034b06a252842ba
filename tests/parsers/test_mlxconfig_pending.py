"""Reset needed or not, from mlxconfig's value columns only: the shared/cases ``-e q`` sample with
differing Current and Next Boot, and recorded ``set`` transcripts where the tool prints
``-I- Please reboot machine to load new configurations.`` whether or not a value changed.

Fixtures (tests/parsers/cases/), kept as recorded:
- ``mlxconfig__set_next_boot_already_new_value_still_says_reboot.txt``: ``mstconfig -d 0000:0d:00.0 set
  SRIOV_EN=1 NUM_OF_VFS=4`` on a ConnectX-5 whose Next Boot already held both values, from a public
  OpenShift SR-IOV / Secure Boot troubleshooting write-up on GitHub (found through the code index;
  repository name not shown there). Trailing spaces as recorded.
- ``mlxconfig__set_three_params_one_changes.txt``: ``mlxconfig -d /dev/mst/mt4121_pciconf0 set SRIOV_EN=1
  NUM_OF_VFS=4 UCTX_EN=1`` (ConnectX-5 Ex), from zartbot's public ConnectX-5 setup notes on GitHub:
  only UCTX_EN changes.
- ``mlxconfig__set_connectx7_wide_num_of_vfs_16_to_127.txt``: ``mlxconfig -d 05:00.0 set NUM_OF_VFS=127``
  on a ConnectX-7 with MFT 4.30.1 (wide layout, blank lines lost in the copy), from public SR-IOV notes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tuning.parsers import parse
from tuning.parsers.mlxtools import mlx_input, mlx_same, mlx_value

CASES = Path(__file__).with_name("cases")
SAMPLE = "mlxconfig__e_q_default_current_nextboot_pending_narrow_layout.txt"


def test_shared_sample_pending_parameters_exactly(cases_dir):
    r = parse("mlxconfig", (cases_dir / SAMPLE).read_text())
    p = r.devices[0].params
    assert r.reset_needed == ["MEMIC_SIZE_LIMIT", "NUM_OF_VFS", "CNP_DSCP_P1", "ROCE_CONTROL"]
    assert [(n, p[n].current, p[n].next_boot) for n in r.reset_needed] == [
        ("MEMIC_SIZE_LIMIT", "_256KB(1)", "DISABLED(0)"), ("NUM_OF_VFS", "8", "16"), ("CNP_DSCP_P1", "48", "26"),
        ("ROCE_CONTROL", "DEVICE_DEFAULT(0)", "ROCE_ENABLE(2)")]
    assert r.reboot_required and not p["SRIOV_EN"].reset_needed  # starred only against Default


def test_set_whose_next_boot_already_holds_the_values_needs_no_reset():
    r = parse("mlxconfig", (CASES / "mlxconfig__set_next_boot_already_new_value_still_says_reboot.txt").read_text())
    assert (r.command, r.applied) == ("set", True)
    assert r.messages == ["-I- Please reboot machine to load new configurations."]
    assert [(x.name, x.next_boot, x.new, x.set_changes) for x in r.devices[0].params.values()] == [
        ("SRIOV_EN", "True(1)", "True(1)", False), ("NUM_OF_VFS", "4", "4", False)]
    assert (r.reset_needed, r.reboot_required, r.findings) == ([], False, [])


def test_set_of_three_where_one_changes_needs_a_reset_for_that_one():
    r = parse("mlxconfig", (CASES / "mlxconfig__set_three_params_one_changes.txt").read_text())
    assert r.reset_needed == ["UCTX_EN"] and r.reboot_required
    assert [(f.code, f.subject) for f in r.findings] == [("mlxconfig_pending_reset", "UCTX_EN")]
    assert "False(0) -> True(1) set for next boot" in r.findings[0].message


def test_connectx7_wide_set_transcript():
    r = parse("mlxconfig", (CASES / "mlxconfig__set_connectx7_wide_num_of_vfs_16_to_127.txt").read_text())
    assert r.devices[0].info["Device type"] == "ConnectX7" and r.reset_needed == ["NUM_OF_VFS"]


def test_aborted_set_needs_no_reset():
    done = "[n] : y\nApplying... Done!\n-I- Please reboot machine to load new configurations.\n"
    text = (CASES / "mlxconfig__set_three_params_one_changes.txt").read_text().replace(
        done, "[n] : n\n-E- Aborted by user.\n")
    r = parse("mlxconfig", text)
    assert (r.applied, r.failure.kind, r.reset_needed) == (False, "aborted", [])


@pytest.mark.parametrize("have, want, same", [
    ("True(1)", "True", True), ("True(1)", "true", True), ("True(1)", "1", True), ("False(0)", "True", False),
    ("ETH(2)", "ETH", True), ("ETH(2)", "IB", False), ("ETH(2)", "2", True), ("16", "16", True), ("16", "0x10", True),
    ("16", "8", False), ("8", "True", False), ("28.39.2048", "28.39.2048", True), ("28.39.2048", "28.42.1000", False),
    (None, None, True), (None, "0", False)])
def test_values_compare_as_mlxconfig_reads_them(have, want, same):
    assert mlx_same(have, want) is same


def test_mlx_value_forms():
    assert [mlx_value(v) for v in ("ROCE_ENABLE(2)", "per_mkey(0)", "ETH", "0x10", "Array[0..7]")] == [
        ("roce_enable", 2), ("per_mkey", 0), ("eth", None), (None, 16), ("array[0..7]", None)]
    assert [mlx_input(v) for v in ("False(0)", "ETH(2)", "True", "16", " 8 ")] == ["False", "ETH", "True", "16", "8"]


# ---- the lab's mlxconfig prints the sample's layout to the character, and the parser reads it back


def _lab(monkeypatch, tmp_path, capsys, argv):
    from tuning.lab.fabric import default_fabric
    from tuning.lab import hw_nic
    from tuning.lab.tools.mlx import mlxconfig

    root = tmp_path / "sysroot"
    if not root.exists():
        root.mkdir()
        hw_nic.build(root, default_fabric().nodes[0])
    monkeypatch.setenv("FABTUNE_LAB_SYSROOT", str(root))
    capsys.readouterr()
    rc = mlxconfig(argv)
    return rc, capsys.readouterr().out


def test_lab_rows_reproduce_the_shared_sample(cases_dir):
    from tuning.lab import hw_nic
    from tuning.lab.tools.mlx import _header, _opening, _row

    lines = (cases_dir / SAMPLE).read_text().splitlines(keepends=True)
    info = {"device_type": "ConnectX5", "name": "MCX556A-ECA_Ax", "description": lines[6].split(":", 1)[1].strip()}
    assert _opening(1, info, "0000:02:00.1") + _header(True, False) == "".join(lines[:10])
    checked = 0
    for line in lines[10:-1]:
        name, *printed = line[1:].split()
        if name in hw_nic.PARAMS:
            ints = [mlx_value(v)[1] for v in printed]
            p = dict(zip(("default", "current", "next_boot"), ints))
            assert _row(name, p, True)[0] == line, name
            checked += 1
    assert checked == 19  # every row but the array ESWITCH_HAIRPIN_DESCRIPTORS


def test_lab_single_param_query_and_e_set_parse(monkeypatch, tmp_path, capsys):
    rc, out = _lab(monkeypatch, tmp_path, capsys, ["-d", "0000:0c:00.0", "-e", "q", "NUM_OF_VFS"])
    r = parse("mlxconfig", out)
    assert rc == 0 and list(r.devices[0].params) == ["NUM_OF_VFS"] and r.reset_needed == []
    assert not out.rstrip().endswith("value.")  # no '*' row, no footer
    rc, out = _lab(monkeypatch, tmp_path, capsys, ["-y", "-d", "0000:0c:00.0", "set", "NUM_OF_VFS=8"])
    assert rc == 0 and parse("mlxconfig", out).reset_needed == ["NUM_OF_VFS"]
    rc, out = _lab(monkeypatch, tmp_path, capsys, ["-e", "-y", "-d", "0000:0c:00.0", "set", "NUM_OF_VFS=8"])
    r = parse("mlxconfig", out)  # Next Boot already 8 ("Please reboot" again), Current still 0: reset needed
    p = r.devices[0].params["NUM_OF_VFS"]
    assert (p.current, p.next_boot, p.new, p.set_changes, r.reset_needed) == ("0", "8", "8", False, ["NUM_OF_VFS"])
    assert r.messages == ["-I- Please reboot machine to load new configurations."]
    rc, out = _lab(monkeypatch, tmp_path, capsys, ["-d", "0000:0c:00.0", "-e", "q", "NUM_OF_VFS"])
    row = "*        NUM_OF_VFS                          0               0               8               \n"
    assert out.endswith(row + "The '*' shows parameters with next value different from default/current value.\n")
