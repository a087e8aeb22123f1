"""The headline rule (figures/report/headline.py; docs/protocol.md "The headline rule"), unit by unit, on tiny
synthetic tables: every branch of the rule, each boundary on both sides, and the exact text of each line.

Written against mutants (issue 55): each test pins one thing a one-token edit of the rule would change."""
import math

import pytest

from simulate.protocol import headline as hl

R = ("onpolicy", "is", "tis")
D = (8, 32)


def e(rival, d, delta=0.0, lo=-0.01, hi=0.01):
    return dict(rival=rival, d=d, delta=delta, lo=lo, hi=hi)


def ties(*over):
    """Every rival at every delay, each a tie (interval across 0); ``over`` replaces entries."""
    base = {(r, d): e(r, d) for r in R for d in D}
    for x in over:
        base[(x["rival"], x["d"])] = x
    return list(base.values())


# --- _check: an entry in scope must be complete, finite and ordered ---------------------------------------------

@pytest.mark.parametrize("key", ["rival", "d", "delta", "lo", "hi"])
def test_each_missing_field_is_refused_by_name(key):
    bad = {k: v for k, v in e("is", 8).items() if k != key}
    if key in ("rival", "d"):  # decide filters on these first: call the checker directly
        with pytest.raises(ValueError, match=repr(key)):
            hl._check(bad)
    else:
        with pytest.raises(ValueError, match=f"lacks {key!r}"):
            hl.decide([bad], R, D)


@pytest.mark.parametrize("field", ["delta", "lo", "hi"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, True, "0.1", None])
def test_non_finite_or_non_numeric_values_are_refused(field, value):
    x = e("is", 8, 0.0, -0.1, 0.1)
    x[field] = value
    with pytest.raises(ValueError, match="finite delta, lo, hi"):
        hl._check(x)


def test_integer_values_are_accepted_and_equal_bounds_are_ordered():
    x = dict(rival="is", d=8, delta=0, lo=0, hi=0)
    assert hl._check(x) is x
    assert hl._check(e("is", 8, 0.1, 0.1, 0.2))["delta"] == 0.1  # lo == delta
    assert hl._check(e("is", 8, 0.2, 0.1, 0.2))["delta"] == 0.2  # delta == hi


@pytest.mark.parametrize("lo,delta,hi", [(0.2, 0.1, 0.3), (0.0, 0.4, 0.3), (0.1, 0.0, -0.1)])
def test_unordered_interval_is_refused(lo, delta, hi):
    with pytest.raises(ValueError, match="lo <= delta <= hi"):
        hl._check(e("is", 8, delta, lo, hi))


# --- decide -----------------------------------------------------------------------------------------------------

def test_empty_rival_set_or_delays_refused():
    with pytest.raises(ValueError, match="non-empty"):
        hl.decide(ties(), [], D)
    with pytest.raises(ValueError, match="non-empty"):
        hl.decide(ties(), R, [])


def test_entries_outside_scope_are_not_checked_nor_counted():
    # a broken entry for another rival or another delay is ignored, not refused
    junk = [dict(rival="grpo", d=8), dict(rival="is", d=64, delta=math.nan, lo=0, hi=0)]
    dec = hl.decide(junk, R, D)
    assert dec.status == hl.NO_DATA and dec.n_rivals == 3 and dec.delays == (8, 32)


def test_delays_are_sorted_integers_and_entries_match_integer_d():
    es = [dict(x, d=float(x["d"])) for x in ties()]  # d as float still matches
    dec = hl.decide(es, R, ("32", 8.0))
    assert dec.status == hl.USE_GMC and dec.delays == (8, 32) and dec.n_rivals == 3


def test_missing_pairs_listed_in_rival_then_delay_order():
    es = [x for x in ties() if (x["rival"], x["d"]) not in {("tis", 8), ("onpolicy", 32), ("tis", 32)}]
    dec = hl.decide(es, R, (32, 8))
    assert dec.status == hl.NOT_MEASURED
    assert dec.missing == (("onpolicy", 32), ("tis", 8), ("tis", 32))
    assert dec.winner is None and dec.behind_at == () and dec.n_rivals == 3 and dec.delays == (8, 32)


def test_missing_wins_over_behind():
    # a rival significantly ahead of gmc does not matter while another is unmeasured
    es = [x for x in ties(e("is", 8, -0.5, -0.6, -0.4)) if x["rival"] != "tis"]
    assert hl.decide(es, R, D).status == hl.NOT_MEASURED


def test_use_gmc_records_rivals_ahead_of_once_in_entry_order():
    es = ties(e("tis", 8, 0.2, 0.1, 0.3), e("onpolicy", 32, 0.3, 0.2, 0.4), e("tis", 32, 0.2, 0.1, 0.3))
    dec = hl.decide(es, R, D)
    assert dec.status == hl.USE_GMC
    assert dec.ahead == ("onpolicy", "tis") or dec.ahead == ("tis", "onpolicy")
    assert len(dec.ahead) == 2 and dec.winner is None and dec.behind_at == () and dec.missing == ()
    order = [x["rival"] for x in es if x["lo"] > 0]
    assert dec.ahead == tuple(dict.fromkeys(order))


@pytest.mark.parametrize("lo,ahead", [(0.0, ()), (1e-12, ("is",)), (-1e-12, ())])
def test_ahead_needs_lo_strictly_above_zero(lo, ahead):
    dec = hl.decide(ties(e("is", 32, 0.1, lo, 0.2)), R, D)
    assert dec.status == hl.USE_GMC and dec.ahead == ahead


@pytest.mark.parametrize("hi,status", [(0.0, hl.USE_GMC), (-1e-12, hl.BEATEN), (1e-12, hl.USE_GMC)])
def test_behind_needs_hi_strictly_below_zero(hi, status):
    dec = hl.decide(ties(e("is", 32, -0.1, -0.2, hi)), R, D)
    assert dec.status == status


def test_behind_with_no_rival_ahead_of_gmc_is_not_use_gmc_and_names_the_delay():
    dec = hl.decide(ties(e("onpolicy", 32, -0.1, -0.2, -0.05)), R, D)
    assert dec.status == hl.BEATEN and dec.ahead == () and dec.missing == ()
    assert dec.winner == e("onpolicy", 32, -0.1, -0.2, -0.05) and dec.behind_at == (32,)
    assert dec.n_rivals == 3 and dec.delays == D


def test_winner_is_the_largest_margin_not_the_first_or_the_widest():
    es = ties(e("onpolicy", 8, -0.1, -0.5, -0.01), e("is", 32, -0.3, -0.35, -0.25), e("tis", 8, -0.2, -0.3, -0.1))
    dec = hl.decide(es, R, D)
    assert dec.winner["rival"] == "is" and dec.winner["d"] == 32
    assert dec.behind_at == (8, 32)


def test_winner_ties_broken_by_rival_order_then_smaller_delay():
    same = dict(delta=-0.2, lo=-0.3, hi=-0.1)
    dec = hl.decide(ties(e("tis", 8, **same), e("is", 32, **same)), R, D)
    assert (dec.winner["rival"], dec.winner["d"]) == ("is", 32)
    dec = hl.decide(ties(e("is", 32, **same), e("is", 8, **same)), R, D)
    assert (dec.winner["rival"], dec.winner["d"]) == ("is", 8)
    # the rival set's order, not the alphabet: put tis first
    dec = hl.decide(ties(e("tis", 32, **same), e("is", 8, **same)), ("tis", "is", "onpolicy"), D)
    assert (dec.winner["rival"], dec.winner["d"]) == ("tis", 32)


def test_behind_at_lists_each_delay_once_sorted():
    es = ties(e("is", 32, -0.1, -0.2, -0.05), e("tis", 32, -0.1, -0.2, -0.05), e("onpolicy", 8, -0.1, -0.2, -0.05))
    assert hl.decide(es, R, D).behind_at == (8, 32)


# --- line: the exact text of each outcome -------------------------------------------------------------------------

def test_num_uses_a_sign_and_the_unicode_minus():
    assert hl._num(0.08) == "+0.080"
    assert hl._num(-0.0805) in ("−0.080", "−0.081")
    assert hl._num(-1.5) == "−1.500"
    assert hl._num(0.0) == "+0.000"


def test_line_no_data_default_and_override():
    dec = hl.decide([], R, D)
    assert hl.line("GPU", dec) == "GPU: not run: no results yet → no recommendation."
    assert hl.line("GPU", dec, no_data="why not.") == "GPU: why not."


def test_line_not_measured_names_up_to_three_rivals():
    dec = hl.decide([e("onpolicy", 8), e("onpolicy", 32)], R, D)
    assert hl.line("S", dec) == "S: not measured: is, tis → no recommendation."
    four = ("onpolicy", "is", "tis", "tic", "grpo")
    dec = hl.decide([e("onpolicy", 8)], four, D)
    assert hl.line("S", dec) == "S: not measured: onpolicy, is, tis … → no recommendation."
    dec = hl.decide([e("onpolicy", 8), e("onpolicy", 32)], four[:4], D)  # exactly three missing rivals: no ellipsis
    assert hl.line("S", dec) == "S: not measured: is, tis, tic → no recommendation."


def test_line_use_gmc_exact_text_with_and_without_ahead():
    assert hl.line("T", hl.decide(ties(), R, D)) == \
        "T: use **gmc**: not significantly behind any of 3 rivals at d ∈ {8, 32}."
    dec = hl.decide(ties(e("is", 8, 0.2, 0.1, 0.3), e("tis", 8, 0.2, 0.1, 0.3)), R, D)
    assert hl.line("T", dec) == "T: use **gmc**: not significantly behind any of 3 rivals at d ∈ {8, 32}; ahead of 2."


def test_line_beaten_exact_text():
    dec = hl.decide(ties(e("tis", 32, -0.08, -0.12, -0.04), e("is", 8, -0.01, -0.02, -0.005)), R, D)
    assert hl.line("L", dec) == ("L: use **tis**, not gmc: it beats gmc at d = 32 by +0.080 [+0.040, +0.120]; "
                                 "gmc behind at d ∈ {8, 32}.")


def test_line_label_shortened_to_exactly_the_room_left():
    dec = hl.decide(ties(), R, D)
    body = hl.line("", dec)[2:]
    room = hl.MAX_CHARS - len(body) - 2
    fits = "x" * room
    assert hl.line(fits, dec) == f"{fits}: {body}" and len(hl.line(fits, dec)) == hl.MAX_CHARS
    over = "y" * (room + 1)
    out = hl.line(over, dec)
    assert out == "y" * (room - 1) + "…: " + body and len(out) == hl.MAX_CHARS


def test_line_refuses_a_body_that_leaves_under_eight_characters():
    dec = hl.decide([], R, D)
    ok = "z" * (hl.MAX_CHARS - 2 - 8)  # room exactly 8: allowed
    assert hl.line("abcdefgh", dec, no_data=ok) == "abcdefgh: " + ok
    with pytest.raises(ValueError, match="too long"):
        hl.line("a", dec, no_data=ok + "z")  # room 7


def test_lines_at_most_three_settings_in_order():
    out = hl.lines([("a", ties(), D), ("b", [], D), ("c", [e("is", 8)], D)], R)
    assert [x.split(":")[0] for x in out] == ["a", "b", "c"]
    assert "use **gmc**" in out[0] and "not run" in out[1] and "not measured" in out[2]
    assert hl.lines([], R) == []
    with pytest.raises(ValueError, match="at most 3 headline settings, got 4"):
        hl.lines([("a", [], D)] * 4, R)


def test_constants_of_the_rule():
    assert (hl.MAX_CHARS, hl.MAX_LINES) == (200, 3)
    assert (hl.USE_GMC, hl.BEATEN, hl.NOT_MEASURED, hl.NO_DATA) == ("use gmc", "beaten", "not measured", "not run")


def test_decision_defaults_and_immutability():
    import dataclasses

    d = hl.Decision(hl.NO_DATA)
    assert (d.missing, d.winner, d.behind_at, d.ahead, d.n_rivals, d.delays) == ((), None, (), (), 0, ())
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.status = hl.USE_GMC


def test_line_not_measured_four_rivals_get_the_ellipsis():
    four = ("onpolicy", "is", "tis", "tic")
    dec = hl.decide([e("grpo", 8), e("grpo", 32)], four + ("grpo",), D)
    assert hl.line("S", dec) == "S: not measured: onpolicy, is, tis … → no recommendation."


def test_line_names_the_subject_of_the_entries():
    assert hl.line("T", hl.decide(ties(), R, D), subject="mymap") == \
        "T: use **mymap**: not significantly behind any of 3 rivals at d ∈ {8, 32}."
    dec = hl.decide(ties(e("tis", 32, -0.08, -0.12, -0.04)), R, D)
    assert hl.line("L", dec, subject="mymap") == ("L: use **tis**, not mymap: it beats mymap at d = 32 by +0.080 "
                                                  "[+0.040, +0.120]; mymap behind at d ∈ {32}.")
