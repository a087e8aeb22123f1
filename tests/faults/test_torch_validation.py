"""Issue 27 item 9: one input validation for every backend (``asyncgrpo.validation``).

Injected: masks of 0.5 or 2 (silently True on the torch paths) and boolean or complex log-ratios,
log-probs or advantages (silently cast, or an unrelated torch error deep inside). The NumPy path
refused them; every torch entry point now runs the same checks and names the parameter.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from asyncgrpo import estimators as est
from asyncgrpo.estimators import token_level as tl
from asyncgrpo.integrations import verl as av
from asyncgrpo.validation import check_log_ratios_torch, check_real_array

BAD_MASKS = {"half": 0.5, "two": 2.0, "nan": float("nan"), "minus one": -1.0}


def batch(N=4, T=3):
    lp = torch.zeros(N, T, dtype=torch.float64)
    return lp, lp.clone(), torch.tensor([1.0, -1.0, 0.5, 0.0], dtype=torch.float64), torch.ones(N, T, dtype=torch.bool)


def with_bad_entry(mask, value):
    m = mask.to(torch.float64).clone()
    m[1, 1] = value
    return m


# ---------------------------------------------------------------- the shared checks
@pytest.mark.parametrize("value", BAD_MASKS.values(), ids=BAD_MASKS.keys())
def test_check_log_ratios_torch_refuses_a_non_binary_mask(value):
    _, _, _, mask = batch()
    with pytest.raises(ValueError, match="mask must hold booleans or exactly 0/1"):
        check_log_ratios_torch(torch.zeros(4, 3), with_bad_entry(mask, value))
    with pytest.raises(ValueError, match="mask must hold booleans or exactly 0/1"):
        check_log_ratios_torch([[0.0, 1.0]], [[1.0, value]])


@pytest.mark.parametrize("ell, what", [(torch.tensor([True, False]), "booleans"),
                                       (torch.tensor([1 + 1j, 0j]), "complex"),
                                       ([True, False], "booleans"), ([1 + 1j, 0j], "complex")],
                         ids=["bool tensor", "complex tensor", "bool list", "complex list"])
def test_check_log_ratios_torch_refuses_non_real_values_like_numpy(ell, what):
    with pytest.raises(ValueError, match=f"log_ratios must be real numbers, got {what}"):
        check_log_ratios_torch(ell)
    with pytest.raises(ValueError, match=f"log_ratios must be real numbers, got {what}"):
        est.gmc(0.2)(np.asarray(ell))  # the NumPy path, same rule


def test_check_log_ratios_torch_accepts_binary_masks_and_integers():
    ell, mask, squeeze = check_log_ratios_torch(torch.tensor([1, 0, 2]), torch.tensor([1.0, 0.0, 1.0]))
    assert squeeze and ell.dtype == torch.float64 and ell.shape == (1, 3)
    assert mask.dtype == torch.bool and mask.tolist() == [[True, False, True]]
    half = torch.zeros(2, 3, dtype=torch.float16)
    assert check_real_array(half, "x") is half  # a floating tensor is kept as it is (dtype, device)


# ---------------------------------------------------------------- the torch entry points
@pytest.mark.parametrize("value", BAD_MASKS.values(), ids=BAD_MASKS.keys())
def test_torch_entry_points_refuse_a_non_binary_mask(value):
    lp, lo, adv, mask = batch()
    bad = with_bad_entry(mask, value)
    with pytest.raises(ValueError, match="mask must hold booleans or exactly 0/1"):
        tl.policy_loss("gmc", lp, lo, adv, bad, group_size=2)
    with pytest.raises(ValueError, match="mask must hold booleans or exactly 0/1"):
        tl.token_coefficients_torch("grpo", lp, bad, adv)
    with pytest.raises(ValueError, match="response_mask must hold booleans or exactly 0/1"):
        av.compute_trajectory_weights(lp, lo, bad, ["a", "a", "b", "b"])
    with pytest.raises(ValueError, match="response_mask must hold booleans or exactly 0/1"):
        av.trajectory_policy_loss(lo, lp, adv[:, None].expand_as(lp), bad, rollout_is_weights=torch.ones_like(lp))


@pytest.mark.parametrize("kind", ["complex", "bool"])
@pytest.mark.parametrize("tensor", ["logp_new", "logp_old", "adv"])
def test_policy_loss_refuses_non_real_tensors_by_name(tensor, kind):
    lp, lo, adv, mask = batch()
    args = {"logp_new": lp, "logp_old": lo, "adv": adv}
    args[tensor] = args[tensor].to(torch.complex128) if kind == "complex" else args[tensor] > 0
    what = "complex" if kind == "complex" else "booleans"
    with pytest.raises(ValueError, match=f"^{tensor} must be real numbers, got {what}"):
        tl.policy_loss("gmc", args["logp_new"], args["logp_old"], args["adv"], mask, group_size=2)


@pytest.mark.parametrize("kind", ["complex", "bool"])
def test_token_coefficients_and_verl_refuse_non_real_tensors(kind):
    lp, lo, adv, mask = batch()
    bad = lp.to(torch.complex128) if kind == "complex" else lp > 0
    what = "complex" if kind == "complex" else "booleans"
    with pytest.raises(ValueError, match=f"tok_ell must be real numbers, got {what}"):
        tl.token_coefficients_torch("grpo", bad, mask, adv)
    with pytest.raises(ValueError, match=f"old_log_probs must be real numbers, got {what}"):
        av.compute_trajectory_weights(bad, lo, mask, ["a", "a", "b", "b"])
    with pytest.raises(ValueError, match=f"rollout_log_probs must be real numbers, got {what}"):
        av.compute_trajectory_weights(lo, bad, mask, ["a", "a", "b", "b"])


# ---------------------------------------------------------------- WeightMap.torch (registry, not in this change)
@pytest.mark.parametrize("case", ["mask 0.5", "mask 2", "bool log-ratios", "complex log-ratios"])
def test_weight_map_torch_uses_the_shared_validation(case):
    wm = est.gmc(0.2)
    ell, mask = torch.zeros(1, 3), None
    if case.startswith("mask"):
        mask = torch.tensor([[1.0, 0.5 if case == "mask 0.5" else 2.0, 1.0]])
    elif case == "bool log-ratios":
        ell = torch.tensor([[True, False, True]])
    else:
        ell = torch.tensor([[1 + 1j, 0j, 0j]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns when it drops an imaginary part; the point is the error
        try:
            wm.torch(ell, mask)
        except ValueError as err:
            assert "must" in str(err)
            return
    raise AssertionError(f"WeightMap.torch accepted {case}")
