"""Inputs a user passes that the public API took wrongly (sixteenth-session review): torch tensors into the NumPy
entry points, a wrong-shaped mask into the torch coefficients, complex or string values, NumPy scalars as options,
a NaN metric from finite inputs, and a checker that named the wrong reason."""
import math

import numpy as np
import pytest
import torch

from asyncgrpo import estimators as est
from asyncgrpo import functionals as F
from asyncgrpo.estimators.token_level import policy_loss, token_coefficients, token_coefficients_torch
from asyncgrpo.testing import check_weight_map

ELL = [0.1, -0.3, 2.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_numpy_entry_points_read_a_torch_tensor_as_its_values(dtype):
    t = torch.tensor(ELL, dtype=dtype, requires_grad=dtype != torch.bfloat16)
    x = t.detach().double().numpy()
    np.testing.assert_array_equal(est.gmc(0.2)(t), est.gmc(0.2)(x))
    np.testing.assert_array_equal(est.get("tis", eps=0.2).log_weights(t), est.get("tis", eps=0.2).log_weights(x))
    assert F.group_mass(t) == F.group_mass(x)
    assert F.log_group_mass(t) == F.log_group_mass(x)
    assert F.ess(t) == F.ess(x)
    np.testing.assert_array_equal(F.advantages(t), F.advantages(x))
    with pytest.raises(ValueError, match="log_ratios must be finite"):
        est.gmc(0.2)(torch.tensor([0.0, math.nan]))


def test_log_group_mass_is_validated_like_every_functional():
    assert F.log_group_mass([0.0, 1.0]) == pytest.approx(math.log((1 + math.e) / 2), rel=1e-15)
    assert F.log_group_mass([1e4, -1e4]) == pytest.approx(1e4 - math.log(2.0), rel=1e-15)
    for bad, msg in (([math.nan, 0.0], "finite"), ([math.inf, 0.0], "finite"), ([], "empty group"),
                     ([[0.0, 1.0]], "1-D"), ([1 + 1j], "real numbers")):
        with pytest.raises(ValueError, match=msg):
            F.log_group_mass(np.array(bad))


def test_advantages_normalize_is_a_bool():
    with pytest.raises(ValueError, match="normalize must be True or False"):
        F.advantages([1.0, 2.0], normalize="no")


TOK = np.array([[0.1, 0.5], [-0.4, 0.3]])
ADV = np.array([1.0, -1.0])


@pytest.mark.parametrize("mask", [np.ones((1, 2), bool), np.ones((2, 1), bool), np.ones(2, bool)])
def test_torch_coefficients_refuse_a_mask_of_another_shape_as_numpy_does(mask):
    with pytest.raises(ValueError, match="same shape"):
        token_coefficients("grpo", TOK, mask, ADV)
    with pytest.raises(ValueError, match="same shape"):
        token_coefficients_torch("grpo", torch.tensor(TOK), torch.as_tensor(mask), torch.tensor(ADV))


def test_torch_coefficients_take_array_likes_and_refuse_empty_batches():
    got = token_coefficients_torch("grpo", TOK, np.ones((2, 2), bool), ADV)
    np.testing.assert_allclose(got.numpy(), token_coefficients("grpo", TOK, np.ones((2, 2), bool), ADV), rtol=1e-15)
    with pytest.raises(ValueError, match=r"shape \[N, T\]"):
        token_coefficients_torch("grpo", torch.zeros(0, 2, dtype=torch.float64), torch.zeros(0, 2, dtype=torch.bool),
                                 torch.zeros(0, dtype=torch.float64))


@pytest.mark.parametrize("tok, adv, name", [(TOK + 5j, ADV, "tok_ell"), ([["0.1", "0.5"], ["0", "0"]], ADV, "tok_ell"),
                                            (TOK, ["1.0", "-1.0"], "adv"), (TOK, ADV + 0j, "adv")])
def test_numpy_coefficients_check_types_instead_of_coercing(tok, adv, name):
    with pytest.raises(ValueError, match=f"{name} must be real numbers"):
        token_coefficients("grpo", tok, np.ones((2, 2), bool), adv)


@pytest.mark.parametrize("c", [np.float32(3.0), np.float64(3.0), np.array(3.0), 3, 3.0])
def test_dual_clip_takes_any_real_scalar(c):
    ref = token_coefficients("grpo", TOK, np.ones((2, 2), bool), ADV, clip_ratio_c=3.0)
    np.testing.assert_array_equal(token_coefficients("grpo", TOK, np.ones((2, 2), bool), ADV, clip_ratio_c=c), ref)


@pytest.mark.parametrize("c", [1.0, 0.5, math.inf, math.nan, True, "3", 3 + 0j])
def test_dual_clip_refuses_what_is_not_a_finite_number_above_one(c):
    with pytest.raises(ValueError, match="clip_ratio_c must be a finite number > 1"):
        token_coefficients("grpo", TOK, np.ones((2, 2), bool), ADV, clip_ratio_c=c)


def _is_loss(old, adv):
    lpn = torch.full((len(adv), 1), -1.0, dtype=torch.float64, requires_grad=True)
    lpo = torch.tensor(old, dtype=torch.float64)[:, None]
    return policy_loss("is", lpn, lpo, torch.tensor(adv, dtype=torch.float64), torch.ones(len(adv), 1, dtype=torch.bool),
                       return_metrics=True)


def test_pg_loss_is_never_nan_when_single_weights_overflow():
    """``is`` at ℓ = 999: each w_i = e^999 overflows, so the direct sum is inf − inf. pg_loss = Σ ν(−A w log π)
    with log π = −1: terms ν A_i e^999, ν = 1/N."""
    _, m = _is_loss([-1000.0, -1000.0], [1.0, -1.0])
    assert m["pg_loss"] == 0.0  # the two terms cancel exactly
    _, m = _is_loss([-1000.0, -1000.0], [1.0, -0.5])
    assert m["pg_loss"] == math.inf  # e^999/4 exceeds float64: +inf, the true sign
    _, m = _is_loss([-1000.0, -1000.0], [0.5, -1.0])
    assert m["pg_loss"] == -math.inf
    _, m = _is_loss([-1000.0, -1000.0 + math.log(2.0)], [1.0, -1.0])  # e^999/2 − e^998.3/2 = e^999/4: overflows
    assert m["pg_loss"] == math.inf
    _, m = _is_loss([-1000.0, -10.0], [1.0, -1.0])  # one overflowing term dominates
    assert m["pg_loss"] == math.inf
    # finite everywhere: the direct sum, unchanged: (e^9 − e^9/2)/2
    _, m = _is_loss([-10.0, -10.0], [1.0, -0.5])
    assert m["pg_loss"] == pytest.approx(0.25 * math.exp(9.0), rel=1e-14)


def test_pg_loss_in_log_space_agrees_with_the_direct_sum_where_both_are_finite():
    from asyncgrpo.functionals import signed_exp_sum

    rng = np.random.default_rng(3)
    for _ in range(50):
        v = rng.standard_normal(9) * 30
        s = np.sign(rng.standard_normal(9))
        want = float(np.sum(s * np.exp(v)))
        got = signed_exp_sum(v, s)
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9 * float(np.max(np.exp(v))))


def test_policy_loss_takes_array_like_masks_and_names_a_numpy_logp_new():
    lpn = torch.zeros(2, 2, requires_grad=True)
    ref = policy_loss("gmc", lpn, torch.zeros(2, 2), torch.tensor([1.0, -1.0]), torch.ones(2, 2, dtype=torch.bool))
    for mask in (np.ones((2, 2), bool), [[True, True], [True, True]], [[1, 1], [1, 1]]):
        got = policy_loss("gmc", lpn, np.zeros((2, 2)), [1.0, -1.0], mask)
        assert torch.equal(got, ref)
    with pytest.raises(ValueError, match="logp_new must be a torch tensor"):
        policy_loss("gmc", np.zeros((2, 2)), torch.zeros(2, 2), torch.tensor([1.0, -1.0]), torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask"):
        policy_loss("gmc", lpn, torch.zeros(2, 2), torch.tensor([1.0, -1.0]), [[0.5, 1], [1, 1]])


def test_checker_names_a_shape_refutation_as_such():
    r = check_weight_map(lambda ell, eps: est.gmc(eps)(ell)[:, None], eps=0.2, max_examples=5)
    assert r["real_valued"].verdict == "refuted" and "shape" in r["real_valued"].detail
    assert "shape" in r["nonnegative"].detail and "not real numbers" not in r["nonnegative"].detail
    r = check_weight_map(lambda ell, eps: est.gmc(eps)(ell) + 1e6j, eps=0.2, max_examples=5)
    assert "not real numbers" in r["nonnegative"].detail


@pytest.mark.parametrize("kw, msg", [(dict(rtol="1e-9"), "rtol"), (dict(rtol=None), "rtol"), (dict(qp_tol=True), "qp_tol"),
                                     (dict(max_examples=True), "max_examples"), (dict(max_examples=2.0), "max_examples"),
                                     (dict(max_size=np.int64(300)), "max_size"), (dict(batched="no"), "batched")])
def test_checker_options_are_checked_by_name(kw, msg):
    with pytest.raises(ValueError, match=msg):
        check_weight_map(lambda ell, eps: est.gmc(eps)(ell), **kw)


def test_checker_takes_numpy_integers():
    r = check_weight_map(lambda ell, eps: est.gmc(eps)(ell), eps=0.2, max_examples=np.int64(5), max_size=np.int32(8))
    assert r["real_valued"].verdict == "holds"


@pytest.mark.parametrize("v, real, integral", [(3, True, True), (3.0, True, True), (np.int64(3), True, True),
                                               (np.array(3.0), True, True), (2.5, True, False), (math.nan, True, False),
                                               (math.inf, True, False), (10**400, True, True), (True, False, False),
                                               (np.bool_(True), False, False), (1 + 0j, False, False), ("3", False, False),
                                               (None, False, False), (np.array([3.0]), False, False)])
def test_the_number_predicates_every_check_uses(v, real, integral):
    from asyncgrpo.validation import is_integral, is_real_number

    assert is_real_number(v) == real and is_integral(v) == integral
