"""The backend parity suite: a registered estimator's NumPy, Numba and PyTorch forms agree on random inputs.

:func:`check_backends` is what the test suite runs on every registered estimator (and on one registered
from a temporary module); call it on your own after registering a map (docs/estimators.md, "Add an
estimator in one file").

Inputs: trajectory level — groups of ``G = 1..8`` log-ratios at scales 0.3, 3 and 30, plus groups holding
``±1e4``; token level — ragged ``[N, T]`` batches (holes in the mask, every row with a token) with token
log-ratios at scales 1e-3 to 30 and advantages ``±2`` with exact zeros. The backends run the same formula in
float64, so they differ only by rounding in sums (``log ρ̄``, ``Σ_t ℓ_{i,t}``, pairwise in NumPy/torch,
sequential in Numba): ``rtol = 1e-12`` covers ``G·u`` to ``T·u`` times the conditioning at these sizes,
and zero weights (``log w = −∞``) must sit at the same places exactly.
"""
from __future__ import annotations

import numpy as np

RTOL = 1e-12


def _groups(rng):
    for scale in (0.3, 3.0, 30.0):
        for G in (1, 2, 5, 8):
            yield rng.normal(0.0, scale, G)
    yield np.array([1e4, -1e4, 0.0, 0.5])
    yield np.array([-1e4, -1e4 + 1.0, -3.0])


def _batches(rng):
    for scale in (1e-3, 0.05, 0.3, 3.0, 30.0):  # 1e-3: near on-policy, where tight masks decide both ways
        N, T = int(rng.integers(2, 9)), int(rng.integers(1, 12))
        mask = rng.random((N, T)) > 0.2
        mask[np.arange(N), rng.integers(0, T, N)] = True
        ell = np.where(mask, rng.normal(0.0, scale, (N, T)), 0.0)
        adv = rng.uniform(-2.0, 2.0, N)
        adv[rng.random(N) < 0.2] = 0.0
        yield ell, mask, adv


def _same(name, what, a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or not np.array_equal(a == 0, b == 0) or not np.array_equal(np.isinf(a), np.isinf(b)):
        raise AssertionError(f"{name}: {what} differ in shape, zeros or infinities:\n{a}\n{b}")
    fin = np.isfinite(a) & (a != 0)
    np.testing.assert_allclose(a[fin], b[fin], rtol=RTOL, atol=0, err_msg=f"{name}: {what}")
    return float(np.max(np.abs(a[fin] - b[fin]) / np.abs(b[fin]), initial=0.0))


def check_backends(name: str, eps: float = 0.2, seed: int = 0) -> dict:
    """Compare the three backends of registered estimator ``name``; returns ``{pair: max relative difference}``.

    Raises ``AssertionError`` naming the estimator and the pair that disagree.
    """
    import torch

    from asyncgrpo import estimators as est
    from asyncgrpo.estimators import registry
    from asyncgrpo.estimators import token_level as tl

    e = registry.entry(name)
    rng = np.random.default_rng(seed)
    worst = {"numba-numpy": 0.0, "torch-numpy": 0.0}
    if e.level == "trajectory":
        wm = est.get(name, eps)
        for ell in _groups(rng):
            ref = wm(ell)
            worst["numba-numpy"] = max(worst["numba-numpy"], _same(name, "numba vs numpy weights", wm.numba(ell), ref))
            tw = wm.torch(torch.tensor(ell))
            worst["torch-numpy"] = max(worst["torch-numpy"], _same(name, "torch vs numpy weights", tw.numpy(), ref))
        # padded batch: each row equals its group alone
        groups = [rng.normal(0.0, 1.0, G) for G in (3, 5, 1)]
        pad = np.zeros((3, 5))
        mask = np.zeros((3, 5), dtype=bool)
        for g, x in enumerate(groups):
            pad[g, :x.size], mask[g, :x.size] = x, True
        out = wm.torch(torch.tensor(pad), mask=torch.tensor(mask)).numpy()
        for g, x in enumerate(groups):
            _same(name, "padded torch row vs numpy group", out[g, :x.size], wm(x))
            if np.any(out[g, x.size:] != 0):
                raise AssertionError(f"{name}: padded entries must get weight 0")
    else:
        for ell, mask, adv in _batches(rng):
            ref = tl.token_coefficients(name, ell, mask, adv)
            nb = tl.token_coefficients_numba(name, ell, mask, adv)
            worst["numba-numpy"] = max(worst["numba-numpy"], _same(name, "numba vs numpy coefficients", nb, ref))
            tc = tl.token_coefficients_torch(name, torch.tensor(ell), torch.tensor(mask), torch.tensor(adv)).numpy()
            worst["torch-numpy"] = max(worst["torch-numpy"], _same(name, "torch vs numpy coefficients", tc, ref))
    return worst


__all__ = ["check_backends", "RTOL"]
