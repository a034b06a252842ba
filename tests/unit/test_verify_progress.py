"""Issue 19: verification progress is one line per round, in order, with an estimate of the time left."""

from __future__ import annotations


def test_a_verify_round_line_says_what_it_measured_and_how_long_is_left():
    from tuning.verify.runner import _round_line

    rounds = [[0, 1], [2, 3], [4]]
    assert _round_line(1, rounds, [], 4.04, 4.04) == "verify round 1/3: 2/2 measured in 4.0 s; about 8 s left"
    assert _round_line(2, rounds, ["a->b"], 6.0, 10.0) == ("verify round 2/3: 1/2 measured in 6.0 s; no value from a->b; "
                                                           "about 5 s left")
    assert _round_line(3, rounds, [], 2.0, 12.0) == "verify round 3/3: 1/1 measured in 2.0 s"
