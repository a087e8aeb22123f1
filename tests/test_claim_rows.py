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


# ----------------------------------------------------------------------------- every row of the committed report
@pytest.fixture(scope="module")
def committed_rows():
    """The claim rows rebuilt from the committed sidecars (figures/out), with the sympy derivations (~10 s)."""
    from pathlib import Path

    from figures.report import claims, render

    out = Path(__file__).resolve().parents[1] / "figures" / "out"
    rep = render.build(out, quick=False, run_checks=True, provenance={"commit": "test", "dirty": False})
    return rep, {label: claims.record(rep, label) for label in claims.ROWS}, render.claim_rows(rep)


def test_every_committed_row_passes_the_checker(committed_rows):
    _, recs, _ = committed_rows
    for label, r in recs.items():
        vd.check_claim_row(label, r["verdict"], r["falsifier"], r["note"])
        if vd.is_test_verdict(r["verdict"]):
            assert r["falsifier"], label


def test_rows_without_a_possible_test_take_non_test_words(committed_rows):
    _, recs, _ = committed_rows
    assert recs["C3"]["verdict"] == vd.BY_CONSTRUCTION
    assert recs["C6"]["verdict"] == vd.CANNOT_FAIL
    assert recs["C4-rate"]["verdict"] == vd.SYMBOLIC and "no measured slope can contradict" in recs["C4-rate"]["note"]
    assert recs["C5"]["verdict"] == f"{vd.SYMBOLIC}, delay-dominated{vd.REGIME_SUFFIX}"


def test_measured_rows_are_not_called_symbolic_and_name_their_scope_and_levels(committed_rows):
    _, recs, table = committed_rows
    for label in ("C1", "C2", "C4"):
        assert "symbolic" not in recs[label]["note"], label
        assert vd.is_test_verdict(recs[label]["verdict"]), label
    assert "QP minimiser" in recs["C2"]["key"] and "best random member" in recs["C2"]["key"]
    assert "not all of it" in recs["C2"]["note"]
    key5t = recs["C5-T"]["key"]
    assert "gmc −0.584" in key5t and "tic +0.141" in key5t  # each estimator's delay-cost change, not only gmc's
    c7 = recs["C7"]
    assert "first chosen after seeing seed 0" in c7["note"] and "90 % normal, TOST" in c7["key"]
    assert c7["key"].count("(95 % normal)") == 2
    for r in table:  # the rendered note carries the falsifier of every test word
        assert ("falsifier: " in r[3]) == vd.is_test_verdict(r[2]), r[0]


def test_the_table_refuses_a_row_that_claims_a_test_without_a_falsifier(committed_rows, monkeypatch):
    """The synthetic row of issue 54's 'done when': `holds` with no falsifier must stop the report."""
    from figures.report import claims, render

    rep, _, _ = committed_rows
    real = claims.record

    def bad(rep_, label):
        r = real(rep_, label)
        return dict(r, verdict=vd.HOLDS, falsifier=None) if label == "C3" else r

    monkeypatch.setattr(claims, "record", bad)
    with pytest.raises(ValueError, match="C3: 'holds' without a falsifier"):
        render.claim_rows(rep)


def test_key_findings_call_measured_only_the_rows_that_could_have_failed(committed_rows):
    from figures.report import findings

    rep, _, _ = committed_rows
    line = next(x for x in findings.key_findings(rep) if x.startswith("Measured claims"))
    tested, _, untested = line.partition("Measured, but no test: ")
    assert "C4 (rate)" not in tested and "C6" not in tested and "C1 " in tested
    assert "C4 (rate) symbolic only" in untested and "C6 assumption check, cannot fail" in untested
