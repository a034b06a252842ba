"""Property tests for the perftest, rping and nccl-tests parsers.

Cosmetic variants of every reference output (re-spaced, tab-expanded, CRLF,
``[1,0]<stdout>:``-prefixed, with cpufreq noise lines) must parse to the same
result; placeholders and error outputs never yield a number; anything the parsers
cannot read raises ParseError and nothing else.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuning.errors import ParseError
from tuning.parsers.nccl import parse_nccl
from tuning.parsers.perftest import PLACEHOLDERS, parse_perftest
from tuning.parsers.rping import parse_rping

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _parser_for(name: str):
    """(file name) -> parse function, from the sample's prefix (``ib_read_lat__...``)."""
    tool = name.split("__")[0]
    if tool.startswith("ib_"):
        return lambda text: parse_perftest(text, tool)
    return parse_rping if tool == "rping" else parse_nccl


def _samples() -> list[str]:
    here = Path(__file__).resolve().parents[2].parent / "shared" / "cases"
    if not here.is_dir():  # same rule as the cases_dir fixture
        here = Path(os.environ.get("FABTUNE_CASES_DIR", here))
    return sorted(p.name for p in here.glob("*.txt") if p.name.split("__")[0].startswith(("ib_", "rping", "nccl")))


SAMPLES = _samples()

NOISE = st.sampled_from([
    "Conflicting CPU frequency values detected: 2200.000000 != 1040.353000. CPU Frequency is not max.",
    " Conflicting CPU frequency values detected: 3000.000000 != 800.000000. CPU Frequency is not max.",
    "Warning: CPU frequency is not set to max (cpupower frequency-set -g performance)",
])


def _respace(text: str, rnd: random.Random) -> str:
    """Replace every run of blanks with another non-empty run of spaces/tabs."""
    return re.sub(r"[ \t]+", lambda _m: rnd.choice([" ", "  ", "   ", "\t", " \t ", "        "]), text)


def _variant(text: str, rnd: random.Random, noise: list[str], ops: list[str]) -> str:
    lines = text.split("\n")
    if "noise" in ops:
        for n in noise:
            lines.insert(rnd.randrange(len(lines) + 1), n)
    text = "\n".join(lines)
    if "respace" in ops:
        text = _respace(text, rnd)
    if "expandtabs" in ops:
        text = text.expandtabs(rnd.choice([4, 8]))
    if "mpi" in ops:
        text = "\n".join(f"[1,{rnd.randrange(8)}]<stdout>:{x}" for x in text.split("\n"))
    if "crlf" in ops:
        text = text.replace("\n", "\r\n")
    return text


OPS = st.lists(st.sampled_from(["noise", "respace", "expandtabs", "mpi", "crlf"]), unique=True, min_size=1)


@pytest.mark.parametrize("name", SAMPLES)
@FAST
@given(rnd=st.randoms(use_true_random=False), noise=st.lists(NOISE, max_size=3), ops=OPS)
def test_cosmetic_variants_parse_the_same(cases_dir, name, rnd, noise, ops):
    parse = _parser_for(name)
    text = (cases_dir / name).read_text()
    assert parse(_variant(text, rnd, noise, ops)).model_dump() == parse(text).model_dump()


@pytest.mark.parametrize("name", SAMPLES)
@FAST
@given(cut=st.integers(min_value=0, max_value=10_000), drop=st.integers(min_value=0, max_value=200))
def test_mutilated_outputs_parse_or_raise_parse_error(cases_dir, name, cut, drop):
    """Truncated at any character or missing any line: a result or a ParseError, never another exception."""
    text = (cases_dir / name).read_text()
    lines = text.split("\n")
    at = drop % len(lines)
    for mutated in (text[: cut % (len(text) + 1)], "\n".join(lines[:at] + lines[at + 1:])):
        try:
            _parser_for(name)(mutated)
        except ParseError as err:
            assert err.line_no >= 0 and err.expected


@FAST
@given(st.text(alphabet=st.sampled_from(list("0123456789 .#:-[]/\n\tNA/abcsecBWTtestMiB%")), max_size=300))
def test_random_text_never_crashes(text):
    for parse in (parse_perftest, parse_rping, parse_nccl):
        try:
            parse(text)
        except ParseError:
            pass


DASHES = "-" * 87
PLACEHOLDER = st.sampled_from(sorted(PLACEHOLDERS)).map(lambda p: p.upper() if p.isalpha() else p)


@FAST
@given(peak=PLACEHOLDER, rate=PLACEHOLDER, lat=st.lists(PLACEHOLDER, min_size=4, max_size=4))
def test_placeholders_never_become_numbers(peak, rate, lat):
    bw = (" RDMA_Write BW Test\n #bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]\n"
          f" 4096 5000 {peak} 92.06 {rate}\n{DASHES}\n")
    [row] = parse_perftest(bw).bw_rows
    assert (row.bw_peak, row.msg_rate_mpps, row.bw_avg.value) == (None, None, 92.06)
    lat_text = (" RDMA_Write Latency Test\n #bytes #iterations t_min[usec] t_max[usec] t_typical[usec] t_avg[usec]"
                " t_stdev[usec] 99% percentile[usec] 99.9% percentile[usec]\n"
                f" 2 1000 1.0 {lat[0]} 1.2 {lat[1]} {lat[2]} 1.3 {lat[3]}\n{DASHES}\n")
    [lrow] = parse_perftest(lat_text, "ib_write_lat").lat_rows
    assert (lrow.t_min, lrow.t_typical, lrow.p99) == (1.0, 1.2, 1.3)
    assert (lrow.t_max, lrow.t_avg, lrow.stdev, lrow.p999) == (None, None, None, None)


ERRORS = st.sampled_from([
    ("Couldn't connect to 10.0.0.1:18515", "connect_failed"),
    ("Unable to open file descriptor for socket connection Unable to init the socket connection", "connect_failed"),
    ("Failed to modify QP 263 to RTR", "qp_rtr_failed"),
    (" Completion with error at client", "completion_error"),
    ("No IB devices found", "no_rdma_device"),
])


@pytest.mark.parametrize("name", [n for n in SAMPLES if n.startswith("ib_") and "_err_" not in n])
@FAST
@given(error=ERRORS, where=st.integers(min_value=0, max_value=100))
def test_error_anywhere_in_a_good_output_yields_no_number(cases_dir, name, error, where):
    lines = (cases_dir / name).read_text().split("\n")
    lines.insert(where % (len(lines) + 1), error[0])
    r = _parser_for(name)("\n".join(lines))
    assert r.failure is not None and r.failure.kind == error[1]
    assert r.bw_rows == [] and r.lat_rows == [] and r.best_bw_gbps() is None
