"""NVUE's files-changed warning (issue 21): the driver reads the files an interactive apply says it
WILL overwrite, and the lab prints that warning to the character. Fixture: the real text of
CumulusNetworks/docs FIPS.md (tests/switch/data/nvue_config_apply__files_changed_warning.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuning.errors import InputError, ParseError
from tuning.lab.nvue_files import MANAGED, checked, warning
from tuning.switch import nvue_text as text

SAMPLE = Path(__file__).parent / "data" / "nvue_config_apply__files_changed_warning.txt"


def _apply_output() -> str:
    """What the switch printed after the typed ``nv config apply`` line of the sample."""
    body = SAMPLE.read_text().split("---\n", 1)[1]
    return body.split("nv config apply\n", 1)[1]


def test_the_files_of_the_real_warning() -> None:
    out = _apply_output()
    assert text.ASK.search(out.rstrip("\n") + " ")
    assert text.overwritten_files(out) == ["/etc/ssl/openssl.cnf", "/etc/default/grub"]
    assert text.failure(out) is None  # a warning is not a failure: the answer decides


def test_the_lab_prints_the_real_warning() -> None:
    out = _apply_output()
    files = ("/etc/ssl/openssl.cnf", "/etc/default/grub")
    assert warning(files) + "Are you sure? [y/N]\n" == out[out.index("Warning: The following"):]
    assert warning(()) == ""


def test_no_warning_and_a_warning_without_files() -> None:
    assert text.overwritten_files("Warning: management interface config is changed.\nAre you sure? [y/N] ") == []
    with pytest.raises(ParseError, match="PATH"):  # a layout not known is never read as "no file"
        text.overwritten_files(_apply_output().replace("\t- ", "  ").split("You are", 1)[1])


def test_hand_edit_takes_only_files_nvue_manages() -> None:
    assert checked("/etc/network/interfaces, /etc/frr/frr.conf") == ["/etc/network/interfaces", "/etc/frr/frr.conf"]
    assert "/etc/network/interfaces" in MANAGED
    for bad in (None, "", "/etc/passwd"):
        with pytest.raises(InputError, match="files NVUE manages"):
            checked(bad)
