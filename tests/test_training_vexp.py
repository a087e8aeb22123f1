"""The vectorisable ``exp`` (:mod:`simulate.training.vexp`, issue 59; measured, not used by the kernel) against libm's,
and the kernel's many-row functions (:mod:`simulate.training.rows`) against the instance layer's one-row ones.

``exp_nb`` must be within 2 ulp of libm's ``exp`` (which is itself within 1 ulp of the true value) on normal
results, exact where libm is exact by definition (``e^0 = 1``, ``e^{±∞}``, NaN, overflow to ``+∞``, underflow to 0),
and within one subnormal ulp below the normal range. Seen failing with the Taylor sum cut at degree 11 (3 ulp at
``|r| = ln 2/2``) and with ``2^k`` applied in one step (subnormal results off by a factor of 2).
"""
from __future__ import annotations

import numpy as np
import pytest

from simulate.instances import alias_row_nb as alias_row_ref
from simulate.instances import chi2_terms_row_nb as chi2_terms_row_ref
from simulate.instances import log_softmax_row_nb
from simulate.instances.products import exp as libm_exp
from simulate.training.rows import alias_row_nb, chi2_terms_rows_nb, log_softmax_pi_rows_nb
from simulate.training.vexp import exp_array_nb

TINY = np.finfo(float).tiny


def _ulps(a, b):
    return np.abs(a.view(np.int64) - b.view(np.int64))


@pytest.mark.parametrize("lo, hi", [(-0.35, 0.35), (-1.0, 1.0), (-40.0, 5.0), (-700.0, 700.0), (-708.3, -700.0),
                                    (700.0, 709.78)])
def test_exp_within_two_ulp_of_libm(lo, hi):
    x = np.random.default_rng(int(hi * 1000) % 2**31).uniform(lo, hi, 200_000)
    got, ref = exp_array_nb(x, np.empty_like(x)), libm_exp(x)
    assert _ulps(got, ref).max() <= 2


def test_exp_special_values_and_the_edges_of_the_range():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 709.78, 709.79, 710.0, 1e300, -745.13, -745.2, -746.0, -1e300])
    got, ref = exp_array_nb(x, np.empty_like(x)), libm_exp(x)
    assert got[0] == 1.0 and got[1] == 1.0
    assert np.isnan(got[4]) and np.array_equal(np.isnan(got), np.isnan(ref))
    assert np.array_equal(got[np.isinf(ref)], ref[np.isinf(ref)]) and np.array_equal(got[ref == 0], ref[ref == 0])


def test_exp_subnormal_results_within_one_subnormal_ulp():
    x = np.random.default_rng(3).uniform(-745.1, -708.5, 100_000)
    got, ref = exp_array_nb(x, np.empty_like(x)), libm_exp(x)
    sub = ref < TINY
    assert sub.any() and np.max(np.abs(got[sub] - ref[sub])) <= 5e-324


def test_rows_equal_the_instance_layer_bit_for_bit():
    """Same operations in the same order and libm's ``exp``: the rows over many rows at once are the instance layer's
    one-row functions, bit for bit (the kernel's golden file depends on it)."""
    rng = np.random.default_rng(5)
    T, S, V = 3, 4, 7
    theta = 3.0 * rng.standard_normal((T, S, V))
    rows = np.array([0, 2, 5, 11], dtype=np.int64)
    logp, pi = np.zeros((T, S, V)), np.zeros((T, S, V))
    log_softmax_pi_rows_nb(theta, rows, logp, pi, np.empty(rows.size), np.empty(rows.size * V))
    ref = np.zeros((T, S, V))
    for r in rows:
        log_softmax_row_nb(theta, ref, r // S, r % S)
    assert np.array_equal(logp, ref) and np.array_equal(pi, libm_exp(ref) * (ref != 0))
    logq = logp - 0.3 * rng.random((T, S, V))
    w2, w2_ref = np.zeros((T, S, V)), np.zeros((T, S, V))
    chi2_terms_rows_nb(logp, logq, rows, w2, np.empty(rows.size * V))
    for r in rows:
        chi2_terms_row_ref(logp, logq, w2_ref, r // S, r % S)
    assert np.array_equal(w2, w2_ref)
    for r in rows:
        t, s = r // S, r % S
        args = [np.empty(V), np.empty(V, dtype=np.int64), np.empty(V, dtype=np.int64)]
        prob, alias = np.ones((T, S, V)), np.zeros((T, S, V), dtype=np.int64)
        prob2, alias2 = np.ones((T, S, V)), np.zeros((T, S, V), dtype=np.int64)
        alias_row_nb(logp, t, s, prob, alias, *args)
        alias_row_ref(logp, t, s, prob2, alias2, *args)
        assert np.array_equal(alias, alias2) and np.array_equal(prob, prob2)


def test_uniform_rows_give_exactly_uniform_alias_tables():
    """An exactly uniform row (``θ = 0``, an untouched tabular row) keeps every column: the sampled action is
    ``⌊uV⌋``."""
    V = 6
    logp = np.full((1, 1, V), -np.log(V))
    prob, alias = np.zeros((1, 1, V)), np.zeros((1, 1, V), dtype=np.int64)
    alias_row_nb(logp, 0, 0, prob, alias, np.empty(V), np.empty(V, dtype=np.int64), np.empty(V, dtype=np.int64))
    assert np.all(prob == 1.0) and np.array_equal(alias[0, 0], np.arange(V))
