"""Public API types: wrong-typed input is a clear ValueError naming the parameter and its range.

Booleans are not numbers (``eps=True``), complex numbers are not real, ``10**400`` is out of range
(not an ``OverflowError``), ``2.5`` is not a group size and ``0.5`` is not a mask entry.
"""
from __future__ import annotations

import numpy as np
import pytest

from asyncgrpo import estimators as est
from asyncgrpo.functionals import advantages, bias_functional, ess, group_mass, removed_mass
from asyncgrpo.validation import check_eps, check_group_size, check_log_ratios, check_mask, check_real

BAD_EPS = [True, False, np.bool_(True), 0.2 + 0j, 1j, 10**400, "0.2", None, [0.2], float("inf"), float("nan"), 0.0]


@pytest.mark.parametrize("eps", BAD_EPS, ids=repr)
def test_bad_eps_names_parameter_and_range(eps):
    with pytest.raises(ValueError, match=r"eps must be a finite number > 0 \(valid range: 0 < eps < inf\)"):
        est.get("gmc", eps)


@pytest.mark.parametrize("eps", [0.2, 1, np.float32(0.5), np.int64(2), np.array(0.3)], ids=repr)
def test_real_eps_accepted(eps):
    assert est.get("gmc", eps).eps == pytest.approx(float(eps))


@pytest.mark.parametrize("G", [2.5, True, 0, -3, 10**400, 2**63, "8", None, 1j, float("nan"), float("inf")], ids=repr)
def test_bad_group_size(G):
    with pytest.raises(ValueError, match=r"G must be an integer >= 1 \(valid range: 1 <= G <= 2\*\*63 - 1\)"):
        check_group_size(G)


def test_group_size_one_and_integral_values_accepted():
    assert check_group_size(1) == 1  # G = 1 is a valid (degenerate) group
    assert check_group_size(8.0) == 8 and check_group_size(np.int32(4)) == 4 and check_group_size(2**63 - 1) == 2**63 - 1


def test_train_config_rejects_fractional_group_size():
    from simulate.training import TrainConfig

    with pytest.raises(ValueError, match="G must be an integer"):
        TrainConfig(G=2.5)


@pytest.mark.parametrize(
    "ell, pattern",
    [
        ([0.1 + 1j, 0.0], "complex"),
        (np.array([1j]), "complex"),
        ([True, False], "booleans"),
        (["0.1"], "real numbers"),
        ([10**400, 0.0], "within float range"),
        ([object()], "real numbers"),
    ],
    ids=repr,
)
def test_bad_log_ratio_types(ell, pattern):
    with pytest.raises(ValueError, match=f"log_ratios must be .*{pattern}"):
        est.gmc(0.2)(ell)
    with pytest.raises(ValueError, match=pattern):
        group_mass(ell)


def test_bad_log_weight_types():
    with pytest.raises(ValueError, match="log_w must be real numbers, got complex"):
        removed_mass([0.0, 1.0], [0.0, 1j])
    with pytest.raises(ValueError, match="log_w must be real numbers, got booleans"):
        bias_functional([0.0, 1.0], [True, False])
    with pytest.raises(ValueError, match="log_w must be real numbers"):
        ess(["a"])


def test_bad_reward_types():
    with pytest.raises(ValueError, match="rewards"):
        advantages([1.0, float("nan")])


def test_g_equals_one_everywhere():
    ell = [0.3]
    for name in est.ESTIMATORS:
        w = est.get(name, 0.2)(ell)
        assert w.shape == (1,) and np.isfinite(w).all()
    assert advantages([2.0]).tolist() == [0.0] and ess([0.0]) == 1.0
    assert removed_mass(ell, est.gmc(0.2).log_weights(ell)) == pytest.approx(np.exp(0.3) - 1.2)


@pytest.mark.parametrize("mask", [[0.5, 1.0], [1, 2], [np.nan, 1.0], [1j, 0]], ids=repr)
def test_non_binary_mask_is_rejected(mask):
    with pytest.raises(ValueError, match="mask must hold booleans or exactly 0/1"):
        check_mask(mask)


def test_torch_mask_checked_without_losing_device():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="found 0.5"):
        check_mask(torch.tensor([[1.0, 0.5]]))
    out = check_mask(torch.tensor([[1.0, 0.0]]))
    assert out.dtype == torch.bool and out.tolist() == [[True, False]]


def test_binary_masks_accepted_and_shape_checked():
    np.testing.assert_array_equal(check_mask([1, 0, 1]), [True, False, True])
    np.testing.assert_array_equal(check_mask(np.array([1.0, 0.0])), [True, False])
    with pytest.raises(ValueError, match=r"mask must have shape \(3,\)"):
        check_mask([True, False], shape=(3,))


@pytest.mark.parametrize("x", [True, 1j, "1", 10**400, float("inf")], ids=repr)
def test_check_real(x):
    with pytest.raises(ValueError, match="lr must be a finite real number"):
        check_real(x, "lr")


def test_long_values_are_shortened_in_messages():
    with pytest.raises(ValueError) as info:
        check_eps(10**400)
    assert len(str(info.value)) < 200
    with pytest.raises(ValueError) as info:
        check_log_ratios([10**400] * 100)
    assert len(str(info.value)) < 300
