"""The kernel's InfiniBand port sysfs values (drivers/infiniband/core/sysfs.c), read by tuning.parsers.ib_sysfs."""

from __future__ import annotations

import pytest

from tuning.errors import ParseError
from tuning.parsers.ib_sysfs import IbRate, parse_counter, parse_hex, parse_numbered, parse_rate, rate_text


@pytest.mark.parametrize("text, rate", [
    ("200 Gb/sec (4X HDR)\n", IbRate(200.0, 4, "HDR")),
    ("400 Gb/sec (4X NDR)\n", IbRate(400.0, 4, "NDR")),
    ("50 Gb/sec (1X HDR)\n", IbRate(50.0, 1, "HDR")),
    ("2.5 Gb/sec (1X SDR)\n", IbRate(2.5, 1, "SDR")),
    ("56 Gb/sec (4X FDR)\n", IbRate(56.0, 4, "FDR")),
    ("40 Gb/sec (4X FDR10)\n", IbRate(40.0, 4, "FDR10")),
    ("10 Gb/sec (4X)\n", IbRate(10.0, 4, "SDR")),  # kernels before HDR printed no word for SDR
])
def test_rate_reads_gbps_width_and_speed(text, rate):
    assert parse_rate(text) == rate
    assert parse_rate(text).width == f"{rate.lanes}X"


@pytest.mark.parametrize("lanes, speed, text", [(4, "HDR", "200 Gb/sec (4X HDR)"), (1, "SDR", "2.5 Gb/sec (1X SDR)"),
                                                (4, "FDR", "56 Gb/sec (4X FDR)"), (12, "QDR", "120 Gb/sec (12X QDR)")])
def test_rate_text_is_what_rate_show_prints(lanes, speed, text):
    assert rate_text(lanes, speed) == text and parse_rate(text) == IbRate(parse_rate(text).gbps, lanes, speed)


@pytest.mark.parametrize("bad", ["104", "200 Gb/sec (4X hdr)", "200 Gb/sec (1X HDR)", "", "N/A"])
def test_a_rate_not_in_the_kernel_form_is_refused(bad):
    with pytest.raises(ParseError):
        parse_rate(bad)


def test_state_phys_state_lids_and_counters():
    assert parse_numbered("4: ACTIVE\n", "state") == (4, "ACTIVE")
    assert parse_numbered("7: Phy Test\n", "phys_state") == (7, "Phy Test")
    assert (parse_hex("0x1\n", "sm_lid"), parse_hex("0x1a\n", "lid"), parse_hex("0xffff\n", "pkeys/0")) == (1, 26, 0xFFFF)
    assert (parse_counter("4242\n"), parse_counter("N/A (no PMA)\n")) == (4242, None)
    for fn, bad in ((lambda t: parse_numbered(t, "state"), "ACTIVE"), (lambda t: parse_hex(t, "lid"), "1"),
                    (parse_counter, "-1")):
        with pytest.raises(ParseError):
            fn(bad)
