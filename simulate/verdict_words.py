"""The verdict vocabulary: every word a claim may end in, each defined once (:data:`DEFINITIONS`), and the rule of
what a claim row may say (:func:`check_claim_row`, issue 54). :mod:`simulate.verdicts` re-exports all of it and is
the only place that maps numbers to these words.

Test words (only a measurement that could have produced the opposite word gives them):
``holds`` · ``holds, bound loose ×k`` · ``refuted`` · ``inconclusive``; ``out of scope`` when the premise is unmet.
Non-test words (:data:`NON_TEST`), for a row that no measurement could contradict: ``identity, true by construction``
· ``assumption check, cannot fail`` · ``symbolic only``. Any word may be restricted to a regime,
``<word>, <regime> regime only``. Qualifiers ("exact identity", "underpowered", "broken arm") are not words: the
report prints them in a note column (:data:`NOTES`).
"""
from __future__ import annotations

HOLDS = "holds"
REFUTED = "refuted"
INCONCLUSIVE = "inconclusive"
OUT_OF_SCOPE = "out of scope"
VERDICTS = (HOLDS, REFUTED, INCONCLUSIVE, OUT_OF_SCOPE)
#: The one qualified verdict: a bound that holds with room to spare, ``k`` from :func:`simulate.verdicts.looseness`.
LOOSE_PREFIX = "holds, bound loose ×"
#: An exact identity's verdict is plain ``holds``; that it is exact goes in the note (:data:`NOTES`).
EXACT = HOLDS
#: Non-test words (issue 54): what a claim row is when no measurement could have contradicted it.
BY_CONSTRUCTION = "identity, true by construction"
CANNOT_FAIL = "assumption check, cannot fail"
SYMBOLIC = "symbolic only"
NON_TEST = (BY_CONSTRUCTION, CANNOT_FAIL, SYMBOLIC)
#: A word restricted to a regime: ``f"{word}, {regime}{REGIME_SUFFIX}"`` (C5: the delay-dominated regime).
REGIME_SUFFIX = " regime only"

#: Each verdict word, defined once (the report prints this glossary; figures/report/check.py flags any verdict cell
#: outside it). Qualifiers go in a separate note column (:data:`NOTES`), never in the word.
DEFINITIONS = {
    HOLDS: "the data agree with the claim beyond their interval (a bound not exceeded beyond 3 s.e.; a comparison's "
           "interval entirely beyond its pre-registered threshold; an identity measured within 3 s.e.)",
    LOOSE_PREFIX + "k": "a bound holds and is k > 2 times the measurement's upper 3-s.e. limit: true, too loose to predict",
    REFUTED: "the data contradict the claim beyond their interval; for this project's reconstruction of the paper's "
             "claims it refutes the reconstruction's empirical implication, not the paper",
    INCONCLUSIVE: "the interval overlaps the threshold: the data decide neither way",
    OUT_OF_SCOPE: "the premise is not met where measured (the measurement is shown), or the arm is broken: no verdict",
    BY_CONSTRUCTION: "no test: true by the definition of its terms, no data",
    CANNOT_FAIL: "no test: each link is an inequality or holds because a constant is fitted on the same run",
    SYMBOLIC: "no test: certified by sympy; no measurement could contradict it (reason in the row)",
    "<word>, <R>" + REGIME_SUFFIX: "the word holds only in regime R (docs/THEORY.md C5)",
}
NOTES = {
    "exact identity": "an equality; `holds` = measured within 3 s.e. of the prediction",
    "underpowered": "power < 0.8 one margin beyond the threshold: an `inconclusive` here says little",
    "broken arm": "every run fails, the d = 0 control included",
}


def _is_test_word(text) -> bool:
    return isinstance(text, str) and (text in VERDICTS or (text.startswith(LOOSE_PREFIX) and len(text) > len(LOOSE_PREFIX)))


def base_word(text: str) -> str:
    """The word without its regime restriction (``"symbolic only, delay-dominated regime only"`` → ``"symbolic only"``);
    ``text`` itself when it has none."""
    if isinstance(text, str) and text.endswith(REGIME_SUFFIX) and ", " in text[: -len(REGIME_SUFFIX)]:
        head, regime = text[: -len(REGIME_SUFFIX)].rsplit(", ", 1)
        if regime.strip():
            return head
    return text


def is_verdict(text: str) -> bool:
    """Whether ``text`` belongs to the vocabulary: :data:`VERDICTS`, ``holds, bound loose ×k``, a non-test word
    (:data:`NON_TEST`), or one of these restricted to a regime (``<word>, <regime> regime only``)."""
    w = base_word(text)
    return _is_test_word(w) or w in NON_TEST


def is_test_verdict(text: str) -> bool:
    """Whether ``text`` (regime restriction aside) is a word that only a test can give: holds, ``holds, bound loose
    ×k``, refuted or inconclusive. ``out of scope`` and the non-test words are not."""
    w = base_word(text)
    return _is_test_word(w) and w != OUT_OF_SCOPE


def check_claim_row(label: str, verdict: str, falsifier: str | None, reason: str | None = "") -> None:
    """Refuse a claim row whose word claims more than its evidence can (issue 54); returns ``None`` or raises
    ``ValueError`` naming the row.

    - a test word (:func:`is_test_verdict`: holds, ``holds, bound loose ×k``, refuted, inconclusive) needs a
      **falsifier**: the value or outcome that would have produced the opposite word, so the evidence is a test that
      could have failed;
    - a non-test word (:data:`NON_TEST`) needs its ``reason`` (why no test is possible) and must not carry a falsifier
      (a row with one is a test and takes a test word);
    - ``out of scope`` needs its ``reason`` (the measurement that shows the premise unmet);
    - anything else is outside the vocabulary."""
    if not is_verdict(verdict):
        raise ValueError(f"{label}: verdict {verdict!r} is outside the vocabulary ({', '.join(DEFINITIONS)})")
    has_f = isinstance(falsifier, str) and bool(falsifier.strip())
    has_r = isinstance(reason, str) and bool(reason.strip())
    if is_test_verdict(verdict):
        if not has_f:
            raise ValueError(f"{label}: {verdict!r} without a falsifier: name the value or outcome that would have "
                             "produced the opposite word, or use a non-test word "
                             f"({', '.join(NON_TEST)})")
        return None
    if base_word(verdict) in NON_TEST:
        if has_f:
            raise ValueError(f"{label}: {verdict!r} is a non-test word but the row names a falsifier ({falsifier!r}): "
                             "a row that could fail is a test and takes a test word")
    if not has_r:
        raise ValueError(f"{label}: {verdict!r} needs its reason in the row")
    return None


__all__ = ["HOLDS", "REFUTED", "INCONCLUSIVE", "OUT_OF_SCOPE", "VERDICTS", "LOOSE_PREFIX", "EXACT", "BY_CONSTRUCTION",
           "CANNOT_FAIL", "SYMBOLIC", "NON_TEST", "REGIME_SUFFIX", "DEFINITIONS", "NOTES", "base_word", "is_verdict",
           "is_test_verdict", "check_claim_row"]
