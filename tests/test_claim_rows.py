"""Issue 54, claim rows: a verdict word only where a measurement could have contradicted it. The checker
(:func:`simulate.verdicts.check_claim_row`) on synthetic rows, and every row of the report rebuilt from the
committed sidecars (figures/out) carrying a falsifier when its word is a test word."""
from __future__ import annotations

import pytest

from simulate import verdicts as vd


# ----------------------------------------------------------------------------- the checker on synthetic rows
@pytest.mark.parametrize("word", ["holds", "refuted", "inconclusive", "holds, bound loose ×5.5",
                                  "holds, delay-dominated regime only"])
@pytest.mark.parametrize("falsifier", [None, "", "   "])
def test_a_test_word_without_a_falsifier_is_refused(word, falsifier):
    with pytest.raises(ValueError, match="without a falsifier"):
        vd.check_claim_row("Cx", word, falsifier, reason="some note")


@pytest.mark.parametrize("word", ["holds", "refuted", "inconclusive", "holds, bound loose ×5.5"])
def test_a_test_word_with_its_falsifier_passes(word):
    assert vd.check_claim_row("Cx", word, "refuted if measured − 3 s.e. > bound") is None


@pytest.mark.parametrize("word", [*vd.NON_TEST, "symbolic only, delay-dominated regime only"])
def test_a_non_test_word_needs_its_reason_and_no_falsifier(word):
    assert vd.check_claim_row("Cx", word, None, reason="no data: the bound is defined so") is None
    with pytest.raises(ValueError, match="needs its reason"):
        vd.check_claim_row("Cx", word, None, reason="")
    with pytest.raises(ValueError, match="non-test word but the row names a falsifier"):
        vd.check_claim_row("Cx", word, "refuted if x > 0", reason="why")


def test_out_of_scope_needs_its_reason_and_unknown_words_are_refused():
    assert vd.check_claim_row("Cx", vd.OUT_OF_SCOPE, None, reason="χ² above the premise") is None
    with pytest.raises(ValueError, match="needs its reason"):
        vd.check_claim_row("Cx", vd.OUT_OF_SCOPE, None, reason=None)
    for bad in ("holds (exact)", "true by construction", "verified", "holds, regime only"):
        with pytest.raises(ValueError, match="outside the vocabulary"):
            vd.check_claim_row("Cx", bad, "x", reason="y")


def test_regime_restriction_keeps_the_word_kind():
    assert vd.base_word("symbolic only, delay-dominated regime only") == vd.SYMBOLIC
    assert vd.is_test_verdict("holds, delay-dominated regime only")
    assert not vd.is_test_verdict("symbolic only, delay-dominated regime only")
    assert not vd.is_test_verdict(vd.OUT_OF_SCOPE) and vd.is_verdict(vd.OUT_OF_SCOPE)
    # the protocol's aggregation takes test words only
    with pytest.raises(ValueError, match="unknown verdict"):
        vd.aggregate([vd.HOLDS, vd.SYMBOLIC])
