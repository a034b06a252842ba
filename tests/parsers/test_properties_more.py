"""Robustness of the newer samples, in the style of test_properties_rest: the mlxconfig set confirmation
and wide query layout (tests/parsers/test_nic.py), ``ibv_devinfo -v`` with its GID table (test_rdma.py)
and ``nv show interface swpN qos roce counters`` (test_switch.py).

Cosmetic variants (CRLF, trailing spaces, ANSI, prompt/blank lines, re-spacing where the format is
not column-positional) parse to the same result; empty, binary and truncated-mid-table inputs raise
a ParseError (naming the cut row where there is one); a placeholder (``N/A``) is None, never a number.
"""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.parsers.test_nic import SET_OK, WIDE
from tests.parsers.test_properties_rest import _noisy
from tests.parsers.test_rdma import IBV_V
from tests.parsers.test_switch import ROCE_COUNTERS
from tuning.errors import ParseError
from tuning.parsers import parse

FAST = settings(max_examples=10, deadline=None)
COUNTERS = "nv-show-interface-qos-roce-counters"
#: case id -> (tool, text, re-spaceable: False for NVUE's column-positional tables)
CASES = {
    "mlxconfig-set": ("mlxconfig", SET_OK, True),
    "mlxconfig-wide": ("mlxconfig", WIDE, True),
    "ibv_devinfo-v": ("ibv_devinfo", IBV_V, True),
    "nv-roce-counters": (COUNTERS, ROCE_COUNTERS, False),
    "nv-show-interface-counters": ("nv-show-interface", ROCE_COUNTERS, False),
}
TOOLS = sorted({tool for tool, _, _ in CASES.values()})
PLACEHOLDER = st.sampled_from(["N/A", "n/a", "-"])


def _dump(tool: str, text: str) -> dict:
    return parse(tool, text).model_dump()


@pytest.mark.parametrize("case", CASES)
@FAST
@given(data=st.data())
def test_noise_does_not_change_the_result(case, data):
    tool, text, respace = CASES[case]
    assert _dump(tool, data.draw(_noisy(text, respace))) == _dump(tool, text)


@pytest.mark.parametrize("text", [SET_OK, WIDE], ids=["set", "wide"])
@FAST
@given(gaps=st.lists(st.sampled_from([" ", "\t", "   "]), min_size=1))
def test_mlxconfig_columns_one_blank_apart_parse_the_same(text, gaps):
    """A wide-layout value as wide as its column is followed by one space: rows split on any blank run."""
    it = itertools.cycle(gaps)
    squeezed = re.sub(r"(?<=\S)[ \t]{2,}(?=\S)", lambda _m: next(it), text)
    assert _dump("mlxconfig", squeezed) == _dump("mlxconfig", text)


def test_ibv_devinfo_tabs_expanded_or_crlf_parse_the_same():
    expected = _dump("ibv_devinfo", IBV_V)
    for variant in (IBV_V.expandtabs(8), IBV_V.replace("\n", "\r\n"), IBV_V.expandtabs(8).replace("\n", "\r\n")):
        assert _dump("ibv_devinfo", variant) == expected


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("bad", ["", " \r\n\t\n", "\x00\x01\x02binary\x00", "\ufffd\ufffd"],
                         ids=["empty", "blank", "nul", "undecodable"])
def test_empty_or_binary_raises(tool, bad):
    with pytest.raises(ParseError):
        parse(tool, bad)


@pytest.mark.parametrize("case", CASES)
@FAST
@given(at=st.integers(min_value=0), junk=st.binary(max_size=16))
def test_nul_bytes_anywhere_raise(case, at, junk):
    tool, text, _ = CASES[case]
    at %= len(text) + 1
    with pytest.raises(ParseError):
        parse(tool, text[:at] + (junk + b"\x00").decode("latin-1") + text[at:])


# ------------------------------------------------------------------ truncation mid-table


def _nv_value_cols(lines: list[str]) -> list[int]:
    """Start columns of an NVUE table, from its ``----`` ruler."""
    ruler = next(ln for ln in lines if ln.startswith("-"))
    return [m.start() for m in re.finditer(r"-+", ruler)]


def _cut_ranges(case: str, text: str) -> list[tuple[int, int, int]]:
    """(line index, lo, hi): cutting that line at any column in [lo, hi) leaves a table row short of a
    value. A cut inside the last value (``9282`` of ``92824``) is a complete-looking row and not counted."""
    lines = text.split("\n")
    out = []
    if case.startswith("mlxconfig"):
        first = next(i for i, ln in enumerate(lines) if ln.startswith("Configurations:")) + 1
        for i in range(first, len(lines)):
            ln = lines[i]
            if not ln.strip() or ln.startswith(("The ", " Apply")):
                break
            last = max(m.start() for m in re.finditer(r"\S+", ln))
            out.append((i, len(ln) - len(ln.lstrip()) + 1, last))
    elif case.startswith("ibv"):  # a GID line cut anywhere: an Ethernet port's GIDs all end in ', RoCE vN'
        out = [(i, ln.index("G") + 1, len(ln)) for i, ln in enumerate(lines) if ln.lstrip().startswith("GID[")]
    else:  # NVUE counter tree: a cut before a leaf's operational value, or right after a parent row
        col = _nv_value_cols(lines)[1]
        for i, ln in enumerate(lines[3:], 3):
            if ln.strip():
                value = len(ln) - len(ln[col:].lstrip()) if ln[col:].strip() else len(ln) + 1
                out.append((i, len(ln) - len(ln.lstrip()) + 1, value))
    return out


@pytest.mark.parametrize("case", CASES)
@FAST
@given(at=st.integers(min_value=0))
def test_truncated_mid_table_raises_naming_the_row(case, at):
    """Every table row, cut at a drawn column of its range, raises a ParseError naming that row."""
    tool, text, _ = CASES[case]
    lines = text.split("\n")
    for i, lo, hi in _cut_ranges(case, text):
        cut = lines[i][: lo + at % (hi - lo)]
        with pytest.raises(ParseError) as exc:
            parse(tool, "\n".join(lines[:i] + [cut]))
        named = " ".join(exc.value.line.split())  # the row as cleaned, shortened to 120 characters
        assert exc.value.line_no == i + 1 and named and " ".join(cut.split()).startswith(named)


@FAST
@given(at=st.integers(min_value=0))
def test_mlxconfig_set_cut_before_done_raises(at):
    """Without ``Applying... Done!`` a set is not known to have been applied."""
    end = SET_OK.index("Done!") + len("Done!")
    with pytest.raises(ParseError):
        parse("mlxconfig", SET_OK[: at % end])


@pytest.mark.parametrize("case", CASES)
def test_any_line_dropped_parses_or_raises_parse_error(case):
    tool, text, _ = CASES[case]
    lines = text.split("\n")
    for i in range(len(lines)):
        try:
            parse(tool, "\n".join(lines[:i] + lines[i + 1:]))
        except ParseError as err:
            assert err.line_no >= 0 and err.expected


@pytest.mark.parametrize("case", CASES)
@FAST
@given(data=st.data())
def test_lines_shuffled_parse_or_raise_parse_error(case, data):
    tool, text, _ = CASES[case]
    lines = data.draw(st.lists(st.sampled_from(text.split("\n")), max_size=40))
    try:
        parse(tool, "\n".join(lines))
    except ParseError as err:
        assert err.line_no >= 0 and err.expected


# ------------------------------------------------------------------ placeholders


def _value_cells(text: str) -> list[tuple[int, int, int, str, str]]:
    """mlxconfig table rows: (line index, start, end, column, parameter) of each value token but ``New``."""
    out, cols = [], None
    for i, ln in enumerate(text.split("\n")):
        if ln.startswith("Configurations:"):
            cols = re.findall(r"Next Boot|\S+", ln.partition(":")[2])
        elif cols and ln.strip() and not ln.startswith("The "):
            pad = len(ln) - len(ln.lstrip("* "))
            name, *tokens = list(re.finditer(r"\S+", ln[pad:]))[-len(cols) - 1:]
            out += [(i, pad + m.start(), pad + m.end(), c, name[0]) for m, c in zip(tokens, cols) if c != "New"]
        else:
            cols = None
    return out


ATTR = {"Default": "default", "Current": "current", "Next Boot": "next_boot"}


@pytest.mark.parametrize("text", [SET_OK, WIDE], ids=["set", "wide"])
@FAST
@given(pick=st.integers(min_value=0), ph=PLACEHOLDER)
def test_mlxconfig_placeholder_is_none(text, pick, ph):
    cells = _value_cells(text)
    i, a, b, col, name = cells[pick % len(cells)]
    lines = text.split("\n")
    lines[i] = lines[i][:a] + ph + lines[i][b:]
    r = parse("mlxconfig", "\n".join(lines))
    param = r.devices[0].params[name]
    assert getattr(param, ATTR[col]) is None
    if col != "Default":  # a reset is pending only when both Current and Next Boot are known
        assert not param.pending and (r.command == "set" or name not in [f.subject for f in r.findings])


@FAST
@given(key=st.sampled_from(["vendor_part_id", "max_mtu", "active_mtu"]),
       ph=st.sampled_from(["N/A", "n/a", "-", "invalid value (0)"]))
def test_ibv_devinfo_placeholder_is_none(key, ph):
    text = re.sub(rf"(\t{key}:\t+)[^\n]+", lambda m: m[1] + ph, IBV_V, count=1)
    r = parse("ibv_devinfo", text)
    dev = r.devices[0]
    typed = {"vendor_part_id": dev.vendor_part_id, "max_mtu": dev.ports[0].max_mtu,
             "active_mtu": dev.ports[0].active_mtu}
    assert typed[key] is None and "roce_mtu_low" not in [f.code for f in r.findings]


@FAST
@given(pick=st.integers(min_value=0), ph=PLACEHOLDER)
def test_nv_roce_counters_placeholder_is_none(pick, ph):
    lines = ROCE_COUNTERS.split("\n")
    col, end = _nv_value_cols(lines)[1:3]  # the operational column
    leaves = [i for i, ln in enumerate(lines[3:], 3) if ln[col:].strip()]
    i = leaves[pick % len(leaves)]
    lines[i] = lines[i][:col] + ph.ljust(end - col) + lines[i][end:]
    r = parse(COUNTERS, "\n".join(lines))
    key = list(r.tree)[i - 3]
    assert key not in r.counts and key not in r.sizes and r.tree[key].operational is None
    assert r.tree[key].description == parse(COUNTERS, ROCE_COUNTERS).tree[key].description
    assert all(not (f.subject or "").endswith(key) for f in r.findings)
