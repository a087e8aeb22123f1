"""Metric parity beyond the formulas of tests/test_loss_parity.py (issue 28, items 1–3).

Overflow: every metric of ``policy_loss(..., return_metrics=True)`` is a float, finite or ``+inf``,
for log-ratios up to ``|ℓ| = 1e4`` (docs/losses.md §6) — never an exception, never NaN.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from asyncgrpo.estimators import token_level as tl

ALL = ("grpo", "gspo", "cispo", "m2po", "onpolicy", "tis", "tic", "gmc", "snis", "is")
#: metrics that are ratio moments: they may overflow to +inf, never to NaN or -inf
MOMENTS = ("chi2_seq", "chi2_token", "chi2_seq_centered", "kl_k3")


def _extreme_batch(seq_ell, dtype, both_signs=False):
    """4 rows × 5 tokens; row 0 carries the sequence log-ratio ``seq_ell`` (ℓ_{0,t} = seq_ell/5), A of both signs.

    ``both_signs``: row 1 (A > 0) carries ``seq_ell`` too, so that unbounded weights meet as ``inf − inf``.
    """
    N, T = 4, 5
    old = torch.full((N, T), -2.0, dtype=dtype)
    ell = torch.zeros(N, T, dtype=dtype)
    ell[0] = seq_ell / T
    ell[1] = seq_ell / T if both_signs else 0.1
    adv = torch.tensor([-1.0, 1.0, 0.5, 0.0], dtype=dtype)
    return old, old + ell, adv, torch.ones(N, T, dtype=torch.bool)


@pytest.mark.parametrize("both_signs", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("seq_ell", [400.0, 709.0, 710.0, 1e3, 1e4, -1e4])
def test_metrics_overflow_to_inf_never_raise_nor_nan(seq_ell, dtype, both_signs):
    """Sequence ℓ beyond ≈ 355 made ``ρ²`` overflow inside ``math.expm1`` (OverflowError) for every name."""
    old, new, adv, mask = _extreme_batch(seq_ell, dtype, both_signs)
    for name in ALL:
        _, m = tl.policy_loss(name, new.clone().requires_grad_(True), old, adv, mask, group_size=4,
                              return_metrics=True)
        for key, v in m.items():
            if key == "loss_agg_mode":
                continue
            assert isinstance(v, float), (name, key, v)
            if name == "is" and key in ("pg_loss", "surrogate_loss"):
                # documented: plain IS weights ρ_i overflow (they are unbounded), and two such rows with
                # advantages of opposite sign make the objective inf − inf; the TRL trainer raises on it
                continue
            assert not math.isnan(v), (name, key)
        for key in MOMENTS:
            assert m[key] > -math.inf, (name, key)
        if seq_ell > 0:
            # exp(2·400) overflows float64: the sequence χ² is +inf, not a large finite number
            assert m["chi2_seq"] == math.inf and m["chi2_seq_centered"] == math.inf, name
        else:
            # ρ_0 = 0 (exp(−1e4) underflows), ρ_1 = e^{0.5} (or 0), ρ_2 = ρ_3 = 1: mean ρ² − 1
            want = (0.0 if both_signs else math.e) / 4 + 2 / 4 - 1
            assert m["chi2_seq"] == pytest.approx(want, rel=1e-6), name


def test_plain_is_objective_is_undefined_only_when_overflowed_rows_disagree_in_sign():
    """The one NaN of the metrics, documented in docs/losses.md §6: ``is`` with ``inf − inf``."""
    for both, want_nan in ((False, False), (True, True)):
        old, new, adv, mask = _extreme_batch(1e4, torch.float64, both)
        _, m = tl.policy_loss("is", new.clone().requires_grad_(True), old, adv, mask, group_size=4,
                              return_metrics=True)
        assert math.isnan(m["pg_loss"]) == want_nan
