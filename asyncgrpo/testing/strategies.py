"""Hypothesis strategies for groups of log-ratios ``ℓ_i = log π_θ(τ_i) − log μ(τ_i)`` and for ε.

Use them in your own property tests::

    from hypothesis import given
    from asyncgrpo.testing import strategies as ags

    @given(ags.log_ratio_groups(), ags.eps_values())
    def test_my_map_is_nonnegative(ell, eps):
        assert (my_map(ell, eps) >= 0).all()

Groups have sizes ``1 … 256`` and mix the shapes where weight maps break (docs/THEORY.md §2):
near on-policy (``|ℓ| ≤ 0.5``), moderate, extreme (``|ℓ|`` up to ``1e4``, endpoints included), ties,
all-equal groups, and one dominant trajectory. Every array is float64 and finite.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

#: Largest ``|ℓ|`` the toolkit promises finite weights for.
MAX_ABS = 1e4
#: The kinds of group :func:`log_ratio_groups` draws from.
KINDS = ("local", "moderate", "extreme", "ties", "all_equal", "dominant")


def group_sizes(min_size: int = 1, max_size: int = 256) -> st.SearchStrategy[int]:
    """``G`` in ``[min_size, max_size]``; small sizes and powers of two (incl. the ends) are drawn often."""
    if not 1 <= min_size <= max_size:
        raise ValueError(f"need 1 <= min_size <= max_size, got {min_size}, {max_size}")
    special = sorted({s for s in (min_size, 2, 4, 8, 16, 64, max_size) if min_size <= s <= max_size})
    small = st.integers(min_size, max(min_size, min(max_size, 8)))
    return st.one_of(small, st.sampled_from(special), st.integers(min_size, max_size))


def _floats(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


#: Entries drawn one by one (and shrunk) by hypothesis; the rest of a larger group comes from a
#: NumPy generator seeded by hypothesis, which keeps G = 256 cheap while the seed still shrinks.
EXPLICIT = 8


def _values(draw, G: int, bulk, elem) -> np.ndarray:
    head = draw(st.lists(elem, min_size=min(G, EXPLICIT), max_size=min(G, EXPLICIT)))
    if G <= EXPLICIT:
        return np.asarray(head, dtype=np.float64)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return np.concatenate([np.asarray(head, dtype=np.float64), bulk(rng, G - EXPLICIT)])


@st.composite
def log_ratio_groups(draw, min_size: int = 1, max_size: int = 256, max_abs: float = MAX_ABS,
                     kinds: tuple[str, ...] = KINDS) -> np.ndarray:
    """One group's log-ratios, shape ``(G,)``, float64, finite, ``|ℓ_i| ≤ max_abs``."""
    unknown = set(kinds) - set(KINDS)
    if unknown or not kinds:
        raise ValueError(f"kinds must be a non-empty subset of {KINDS}, got {kinds!r}")
    if not max_abs > 0:
        raise ValueError(f"max_abs must be > 0, got {max_abs!r}")
    G = draw(group_sizes(min_size, max_size))
    kind = draw(st.sampled_from(kinds))
    local = min(0.5, max_abs)
    mod = min(5.0, max_abs)
    if kind == "local":
        vals = _values(draw, G, lambda rng, n: rng.uniform(-local, local, n), _floats(-local, local))
    elif kind == "moderate":
        vals = _values(draw, G, lambda rng, n: rng.uniform(-mod, mod, n), _floats(-mod, mod))
    elif kind == "extreme":
        ends = np.array([-max_abs, max_abs, 0.0])

        def bulk(rng, n):
            return np.where(rng.random(n) < 0.3, rng.choice(ends, n), rng.uniform(-max_abs, max_abs, n))

        vals = _values(draw, G, bulk, st.one_of(st.sampled_from(ends.tolist()), _floats(-max_abs, max_abs)))
    elif kind == "ties":
        pool = draw(st.lists(_floats(-mod, mod), min_size=1, max_size=3))
        vals = _values(draw, G, lambda rng, n: rng.choice(np.asarray(pool), n), st.sampled_from(pool))
    elif kind == "all_equal":
        vals = np.full(G, draw(st.one_of(_floats(-mod, mod), st.sampled_from([-max_abs, max_abs]))))
    else:  # dominant: one trajectory far more likely under π_θ than the rest
        vals = _values(draw, G, lambda rng, n: rng.uniform(-local, local, n), _floats(-local, local))
        vals[draw(st.integers(0, G - 1))] = draw(_floats(min(2.0, max_abs), max_abs))
    return np.asarray(vals, dtype=np.float64)


def eps_values(min_value: float = 1e-3, max_value: float = 10.0) -> st.SearchStrategy[float]:
    """ε in ``[min_value, max_value]`` (``ε > 0``), with the common 0.1, 0.2, 0.28 drawn often."""
    if not 0 < min_value <= max_value:
        raise ValueError(f"need 0 < min_value <= max_value, got {min_value}, {max_value}")
    common = [e for e in (0.1, 0.2, 0.28) if min_value <= e <= max_value]
    base = _floats(min_value, max_value)
    return st.one_of(st.sampled_from(common), base) if common else base


@st.composite
def permuted_groups(draw, **kw) -> tuple[np.ndarray, np.ndarray]:
    """``(ℓ, π)``: a group and a permutation of its indices."""
    ell = draw(log_ratio_groups(**kw))
    perm = np.asarray(draw(st.permutations(range(ell.size))), dtype=np.int64)
    return ell, perm


@st.composite
def padded_groups(draw, max_groups: int = 4, **kw) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """``(ℓ_pad, mask, groups)``: groups of unequal size in one ``[n_groups, G_max]`` array.

    Real entries sit at random positions of each row (``mask`` True); padded entries hold arbitrary
    finite values, extremes included, which a weight map must ignore.
    """
    groups = draw(st.lists(log_ratio_groups(**kw), min_size=1, max_size=max_groups))
    width = max(g.size for g in groups) + draw(st.integers(0, 3))
    ell = np.empty((len(groups), width))
    mask = np.zeros((len(groups), width), dtype=bool)
    max_abs = kw.get("max_abs", MAX_ABS)
    # positions and padding values from a seeded generator: cheap, and the seed still shrinks
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    ends = np.array([max_abs, -max_abs, 0.0])
    for r, g in enumerate(groups):
        pos = np.sort(rng.choice(width, g.size, replace=False))
        mask[r, pos] = True
        ell[r, pos] = g
        n_pad = int((~mask[r]).sum())
        ell[r, ~mask[r]] = np.where(rng.random(n_pad) < 0.5, rng.choice(ends, n_pad), rng.uniform(-max_abs, max_abs, n_pad))
    return ell, mask, groups


@st.composite
def batches_of_groups(draw, max_groups: int = 4, **kw) -> np.ndarray:
    """``[n_groups, G]``: several groups of one size stacked, for batch-shape agreement."""
    G = draw(group_sizes(kw.pop("min_size", 1), kw.pop("max_size", 64)))
    n = draw(st.integers(1, max_groups))
    rows = [draw(log_ratio_groups(min_size=G, max_size=G, **kw)) for _ in range(n)]
    return np.stack(rows)


__all__ = [
    "MAX_ABS", "KINDS", "group_sizes", "log_ratio_groups", "eps_values", "permuted_groups", "padded_groups",
    "batches_of_groups",
]
