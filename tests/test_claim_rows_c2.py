"""Issue 54, C2 against the whole class 𝒲_ε: gmc's 𝔅 against an independent QP minimiser and random members of the
class, group by group (simulate.montecarlo.class_check), with a negative control that must be beaten."""
from __future__ import annotations

import numpy as np

from simulate.montecarlo.class_check import class_comparison, qp_minimiser


def test_gmc_is_never_beaten_by_the_qp_minimiser_or_random_members_of_the_class():
    res = class_comparison(eps_list=(0.05, 0.2), n_groups=150, n_random=8, seed=3)
    assert all(r["n_active"] > 0 for r in res)  # groups where the constraint binds: the comparison is not empty
    for r in res:
        assert r["n_beaten"] == 0
        assert r["max_w_gap"] < 1e-5  # the independent solver lands on gmc's weights
        assert r["diff_qp"] <= 3 * r["se_qp"] + 1e-15 and r["diff_random"] < 0


def test_a_map_that_is_not_the_minimiser_is_beaten_on_some_groups():
    """Negative control: tis lies in 𝒲_ε but is not the minimiser, so the same comparison must catch it."""
    for r in class_comparison(eps_list=(0.05,), n_groups=150, n_random=8, seed=3, name="tis"):
        assert r["n_beaten"] > 0 and r["diff_qp"] > 3 * r["se_qp"]


def test_qp_minimiser_is_feasible_and_not_started_at_gmc():
    rho = np.array([0.2, 0.5, 3.0, 4.0])
    w = qp_minimiser(rho, 0.1)
    assert np.all(w >= -1e-12) and np.all(w <= rho + 1e-12) and w.mean() <= 1.1 + 1e-9
    assert np.allclose(w, rho * 1.1 / rho.mean(), atol=1e-6)  # = gmc's weights, found independently
