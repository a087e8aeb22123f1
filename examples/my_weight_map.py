"""Property-test your own weight map with the toolkit's kit (docs/checker.md).

    python -m asyncgrpo.check examples.my_weight_map:clipped_group_mean --eps 0.2
    python -m asyncgrpo.check examples.my_weight_map:gmc_log_space --eps 0.2
    python -m asyncgrpo.check examples.my_weight_map:naive_gmc --eps 0.2
    python examples/my_weight_map.py            # the same three checks from Python

``clipped_group_mean`` is a plausible-looking map with a defect the report finds (the CLI exits 1);
``gmc_log_space`` is group-mass capping written from docs/THEORY.md §2 in log space, which the
report finds to be a member of 𝒲_ε, numerically safe, pure and the C2 minimiser (exit 0);
``naive_gmc`` is the same map in linear space: a member of 𝒲_ε and the C2 minimiser, but numerically
unsafe for ℓ ≥ 709.783, where ρ overflows and inf·0 = NaN (exit 1).
"""
import numpy as np
from scipy.special import logsumexp


def clipped_group_mean(ell, eps):
    """Rescale the group to mean weight 1+ε, then clip each weight at 1+ε (ρ_i never consulted)."""
    rho = np.exp(np.asarray(ell, dtype=np.float64))
    return np.minimum(rho / rho.mean() * (1 + eps), 1 + eps)


def gmc_log_space(ell, eps):
    """``w_i = ρ_i · min(1, (1+ε)/ρ̄)`` with ``log ρ̄ = logsumexp(ℓ) − log G`` (safe for |ℓ| ≤ 1e4)."""
    ell = np.asarray(ell, dtype=np.float64)
    log_rbar = logsumexp(ell) - np.log(ell.size)
    return np.exp(ell + min(0.0, np.log1p(eps) - log_rbar))


def naive_gmc(ell, eps):
    """``w_i = ρ_i · min(1, (1+ε)/ρ̄)`` in linear space: right in exact arithmetic, NaN once ρ overflows."""
    rho = np.exp(np.asarray(ell, dtype=np.float64))
    return rho * np.minimum(1.0, (1.0 + eps) / rho.mean())


if __name__ == "__main__":
    from asyncgrpo.testing import check_weight_map

    for fn in (clipped_group_mean, gmc_log_space, naive_gmc):
        print(check_weight_map(fn, eps=0.2, max_examples=50), end="\n\n")
