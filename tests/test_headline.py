"""The headline rule (simulate/protocol/headline.py) on synthetic tables, written from docs/protocol.md's rule."""
import pytest

from simulate.protocol import headline as hl

RIVALS = ("onpolicy", "is", "tis")
DELAYS = (0, 8, 32)


def e(rival, d, delta, lo, hi):
    return dict(rival=rival, d=d, delta=delta, lo=lo, hi=hi)


def full(overrides=()):
    """Every rival at every delay, all ties (interval across 0), with ``overrides`` replacing entries."""
    base = {(r, d): e(r, d, 0.0, -0.01, 0.01) for r in RIVALS for d in DELAYS}
    for x in overrides:
        base[(x["rival"], x["d"])] = x
    return list(base.values())


def test_only_onpolicy_measured_gives_no_recommendation():
    es = [e("onpolicy", d, 0.3, 0.2, 0.4) for d in DELAYS]
    dec = hl.decide(es, RIVALS, DELAYS)
    assert dec.status == hl.NOT_MEASURED
    assert {r for r, _ in dec.missing} == {"is", "tis"}
    text = hl.line("Setting", dec)
    assert "not measured: is, tis" in text and "use" not in text


def test_rival_ahead_at_8_but_absent_at_32_is_not_measured():
    es = [x for x in full([e("tis", 8, -0.08, -0.12, -0.04)]) if not (x["rival"] == "tis" and x["d"] == 32)]
    dec = hl.decide(es, RIVALS, DELAYS)
    assert dec.status == hl.NOT_MEASURED and dec.missing == (("tis", 32),)


def test_mixed_signs_across_delays_names_the_rival_that_beats_gmc():
    es = full([e("onpolicy", 32, 0.35, 0.3, 0.4), e("tis", 8, -0.08, -0.12, -0.04), e("tis", 32, 0.05, 0.01, 0.09)])
    dec = hl.decide(es, RIVALS, DELAYS)
    assert dec.status == hl.BEATEN
    assert dec.winner["rival"] == "tis" and dec.winner["d"] == 8 and dec.behind_at == (8,)
    text = hl.line("LM-like family", dec)
    assert "use **tis**, not gmc" in text and "d = 8 by +0.080 [+0.040, +0.120]" in text
    assert "d ∈ {8}" in text


def test_largest_margin_wins_among_several_rivals_ahead():
    es = full([e("is", 8, -0.02, -0.03, -0.01), e("tis", 32, -0.2, -0.3, -0.1), e("is", 32, -0.19, -0.25, -0.13)])
    dec = hl.decide(es, RIVALS, DELAYS)
    assert dec.winner["rival"] == "tis" and dec.behind_at == (8, 32)


def test_ties_everywhere_use_gmc():
    dec = hl.decide(full(), RIVALS, DELAYS)
    assert dec.status == hl.USE_GMC and dec.ahead == ()
    assert hl.line("Tabular family", dec).startswith("Tabular family: use **gmc**: not significantly behind any of 3")


def test_gmc_ahead_of_some_and_tied_with_others_uses_gmc():
    dec = hl.decide(full([e("onpolicy", 32, 0.3, 0.2, 0.4)]), RIVALS, DELAYS)
    assert dec.status == hl.USE_GMC and dec.ahead == ("onpolicy",)
    assert "ahead of 1" in hl.line("x", dec)


def test_interval_touching_zero_is_not_behind():
    # hi = 0 exactly: not entirely below 0, so gmc stays in the best set
    dec = hl.decide(full([e("tis", 8, -0.05, -0.1, 0.0)]), RIVALS, DELAYS)
    assert dec.status == hl.USE_GMC


def test_interval_just_below_zero_is_behind():
    dec = hl.decide(full([e("tis", 8, -0.05, -0.1, -1e-9)]), RIVALS, DELAYS)
    assert dec.status == hl.BEATEN and dec.winner["rival"] == "tis"


def test_tie_break_by_rival_order_then_delay():
    es = full([e("tis", 8, -0.1, -0.2, -0.05), e("is", 32, -0.1, -0.2, -0.05), e("is", 8, -0.1, -0.2, -0.05)])
    dec = hl.decide(es, RIVALS, DELAYS)
    assert (dec.winner["rival"], dec.winner["d"]) == ("is", 8)


def test_no_entries_is_not_run():
    dec = hl.decide([], RIVALS, DELAYS)
    assert dec.status == hl.NO_DATA
    assert "not run" in hl.line("LM on a GPU", dec)


def test_entries_outside_rival_set_or_delays_are_ignored():
    es = full() + [e("grpo", 8, -0.5, -0.6, -0.4), e("tis", 64, -0.5, -0.6, -0.4)]
    assert hl.decide(es, RIVALS, DELAYS).status == hl.USE_GMC


def test_lines_length_and_count():
    long_label = "A very long setting label " * 10
    out = hl.lines([(long_label, full(), DELAYS), ("b", [], DELAYS), ("c", full(), DELAYS)], RIVALS)
    assert len(out) == 3 and all(len(x) <= hl.MAX_CHARS for x in out)
    assert out[0].split(":")[0].endswith("…")
    with pytest.raises(ValueError, match="at most 3"):
        hl.lines([("a", [], DELAYS)] * 4, RIVALS)


@pytest.mark.parametrize("bad", [dict(rival="tis", d=8, delta=0.1, lo=0.2, hi=0.3),
                                 dict(rival="tis", d=8, delta=float("nan"), lo=0.0, hi=0.3),
                                 dict(rival="tis", d=8, lo=0.0, hi=0.3)])
def test_bad_entries_refused(bad):
    with pytest.raises(ValueError, match="headline entry"):
        hl.decide([bad], RIVALS, DELAYS)


def test_empty_rivals_or_delays_refused():
    with pytest.raises(ValueError, match="non-empty"):
        hl.decide(full(), (), DELAYS)
    with pytest.raises(ValueError, match="non-empty"):
        hl.decide(full(), RIVALS, ())


def test_interval_touching_zero_from_above_is_not_ahead():
    dec = hl.decide(full([e("onpolicy", 32, 0.05, 0.0, 0.1)]), RIVALS, DELAYS)
    assert dec.status == hl.USE_GMC and dec.ahead == ()
