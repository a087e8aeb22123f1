"""rliable-style aggregates of protocol v6 (simulate/protocol/aggregate.py) on tiny hand-computed matrices: IQM
difference, probability of improvement, the paired stratified bootstrap, and the score matrix a run table gives."""
import numpy as np
import pandas as pd
import pytest

from simulate.protocol import aggregate as ag


# --- score_matrix ----------------------------------------------------------------------------------------------

def _table():
    rows = []
    for phase in ("eval", "tune"):
        for kind in ("tuned", "common"):
            for est in ("gmc", "tis"):
                for d in (8, 32):
                    for G, eps in ((8, 0.2), (4, 0.5)):
                        for inst in ("a", "b"):
                            for seed in (1, 2, 3):
                                v = (100 * (phase == "eval") + 10 * (kind == "tuned") + (est == "gmc") + d / 1000
                                     + G / 1e5 + eps / 1e7 + (inst == "b") * 0.5 + seed * 0.01)
                                rows.append(dict(phase=phase, eta_kind=kind, estimator=est, d=d, G=G, eps=eps,
                                                 instance=inst, seed=seed, nauc=v, other=-v))
    return pd.DataFrame(rows)


def test_score_matrix_selects_eval_runs_of_the_arm_estimator_and_delay_in_the_given_order():
    t = _table()
    X = ag.score_matrix(t, "gmc", 8, ["b", "a"], [3, 1], G=8, eps=0.2)
    base = 100 + 10 + 1 + 0.008 + 8e-5 + 0.2e-7
    want = np.array([[base + 0.5 + 0.03, base + 0.03], [base + 0.5 + 0.01, base + 0.01]])
    assert X.dtype == np.float64 and X.shape == (2, 2)
    np.testing.assert_allclose(X, want, rtol=0, atol=1e-12)


def test_score_matrix_filters_by_arm_column_G_and_eps():
    t = _table()
    X = ag.score_matrix(t, "tis", 32, ["a"], [2], eta_kind="common", column="other", G=4, eps=0.5 + 1e-12)
    assert X[0, 0] == pytest.approx(-(100 + 0 + 0 + 0.032 + 4e-5 + 0.5e-7 + 0.02), abs=1e-12)
    # without G / eps the first run of each (seed, instance) in table order is taken (G = 8, eps = 0.2), not a mean
    X = ag.score_matrix(t, "gmc", 8, ["a"], [1])
    assert X[0, 0] == pytest.approx(100 + 10 + 1 + 0.008 + 8e-5 + 0.2e-7 + 0.01, abs=1e-12)


def test_score_matrix_of_an_integer_column_is_float64():
    t = _table().assign(count=lambda df: (df.nauc * 100).round().astype(int))
    X = ag.score_matrix(t, "gmc", 8, ["a"], [1, 2], column="count", G=8, eps=0.2)
    assert X.dtype == np.float64 and X[0, 0] == 11102.0


def test_score_matrix_names_the_missing_instance_or_seed():
    t = _table()
    with pytest.raises(ValueError, match=r"no tuned evaluation runs of gmc at d = 8 for \['c'\]"):
        ag.score_matrix(t, "gmc", 8, ["a", "c"], [1])
    with pytest.raises(ValueError, match=r"\[7\]"):
        ag.score_matrix(t, "gmc", 8, ["a"], [1, 7])
    with pytest.raises(ValueError, match="no common evaluation runs of gmc at d = 16"):
        ag.score_matrix(t, "gmc", 16, ["a"], [1], eta_kind="common")


def test_score_matrix_refuses_non_finite_scores():
    t = _table()
    t.loc[(t.estimator == "gmc") & (t.phase == "eval") & (t.seed == 2), "nauc"] = np.inf  # (a NaN is dropped by the pivot: then "no runs")
    with pytest.raises(ValueError, match="non-finite nauc for gmc at d = 8"):
        ag.score_matrix(t, "gmc", 8, ["a"], [1, 2], G=8, eps=0.2)
    assert ag.score_matrix(t, "gmc", 8, ["a"], [1, 3], G=8, eps=0.2).shape == (2, 1)


# --- resample_rows -------------------------------------------------------------------------------------------

def test_resample_rows_shape_range_and_seed():
    r = ag.resample_rows(5, 3, reps=100, seed=1)
    assert r.shape == (100, 5, 3) and r.min() >= 0 and r.max() <= 4 and r.max() == 4 and r.min() == 0
    np.testing.assert_array_equal(r, np.random.default_rng(1).integers(0, 5, size=(100, 5, 3)))
    np.testing.assert_array_equal(ag.resample_rows(4, 2), np.random.default_rng(53).integers(0, 4, size=(2000, 4, 2)))


@pytest.mark.parametrize("reps", [99, 0, -5, 100.0, "200", None])
def test_resample_rows_refuses_too_few_or_non_integer_reps(reps):
    with pytest.raises(ValueError, match="reps must be an integer >= 100"):
        ag.resample_rows(3, 2, reps=reps)


# --- iqm_diff and poi --------------------------------------------------------------------------------------------

def test_iqm_is_the_mean_of_the_middle_half_of_all_runs():
    X = np.arange(8.0).reshape(4, 2)  # runs 0..7: middle half 2, 3, 4, 5
    Y = np.zeros((4, 2))
    assert ag.iqm_diff(X, Y) == pytest.approx(3.5)
    assert ag.iqm_diff(Y, X) == pytest.approx(-3.5)
    assert isinstance(ag.iqm_diff(X, Y), float)
    X2 = X.copy()
    X2[0, 0] = -1000.0  # an outlier in the trimmed quarter moves nothing
    assert ag.iqm_diff(X2, Y) == pytest.approx(3.5)


def test_iqm_diff_of_a_stack_is_one_value_per_matrix_and_matches_the_matrix_form():
    rng = np.random.default_rng(0)
    Xs, Ys = rng.normal(size=(5, 8, 3)), rng.normal(size=(5, 8, 3))
    v = ag.iqm_diff(Xs, Ys)
    assert v.shape == (5,)
    np.testing.assert_allclose(v, [ag.iqm_diff(Xs[i], Ys[i]) for i in range(5)], rtol=1e-12, atol=1e-12)


def test_poi_counts_ties_as_half_per_task_then_averages_tasks():
    X = np.array([[1.0, 0.0], [2.0, 0.0]])
    Y = np.array([[1.0, 5.0], [0.0, 5.0]])
    # task 0: pairs (1,1) tie, (1,0) win, (2,1) win, (2,0) win -> (3 + 0.5)/4; task 1: 0 -> mean 0.4375
    assert ag.poi(X, Y) == pytest.approx(0.4375)
    assert ag.poi(Y, X) == pytest.approx(1 - 0.4375)
    assert isinstance(ag.poi(X, Y), float)


def test_poi_of_a_stack_matches_rliable_per_matrix():
    rng = np.random.default_rng(1)
    Xs = rng.integers(0, 3, size=(4, 5, 2)).astype(float)  # many ties
    Ys = rng.integers(0, 3, size=(4, 5, 2)).astype(float)
    v = ag.poi(Xs, Ys)
    assert v.shape == (4,)
    np.testing.assert_allclose(v, [ag.poi(Xs[i], Ys[i]) for i in range(4)], rtol=1e-12, atol=1e-12)


# --- stratified_bootstrap ----------------------------------------------------------------------------------------

def test_bootstrap_is_paired_a_constant_shift_has_a_zero_width_interval():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(6, 3))
    point, lo, hi = ag.stratified_bootstrap(ag.iqm_diff, X, X - 0.25, reps=200)
    assert point == pytest.approx(0.25) and lo == pytest.approx(0.25) and hi == pytest.approx(0.25)


def test_bootstrap_resamples_seeds_within_each_instance():
    X = np.array([[0.0, 100.0], [1.0, 101.0], [0.5, 100.5]])

    def col1_min(A, B):
        return A[:, 1].min() if A.ndim == 2 else A[:, :, 1].min(axis=1)

    _, lo, hi = ag.stratified_bootstrap(col1_min, X, X, reps=300)
    assert lo >= 100.0 and hi <= 101.0


def test_bootstrap_interval_is_the_percentile_at_the_level_and_point_is_on_the_data():
    X = np.ones((3, 2))
    seen = {}

    def fn(A, B):
        if A.ndim == 2:
            return -1.0
        seen["shape"] = A.shape
        return np.arange(A.shape[0], dtype=float)

    point, lo, hi = ag.stratified_bootstrap(fn, X, X)
    assert seen["shape"] == (2000, 3, 2)
    assert point == -1.0
    assert lo == pytest.approx(np.quantile(np.arange(2000.0), 0.025))
    assert hi == pytest.approx(np.quantile(np.arange(2000.0), 0.975))
    point, lo, hi = ag.stratified_bootstrap(fn, X, X, reps=100, level=0.9)
    assert (lo, hi) == pytest.approx((np.quantile(np.arange(100.0), 0.05), np.quantile(np.arange(100.0), 0.95)))


def test_bootstrap_same_seed_same_interval_other_seed_other_interval():
    rng = np.random.default_rng(3)
    X, Y = rng.normal(size=(5, 2)), rng.normal(size=(5, 2))
    a = ag.stratified_bootstrap(ag.iqm_diff, X, Y, reps=200)
    assert a == ag.stratified_bootstrap(ag.iqm_diff, X, Y, reps=200, seed=ag.BOOT_SEED)
    assert a != ag.stratified_bootstrap(ag.iqm_diff, X, Y, reps=200, seed=ag.BOOT_SEED + 1)


@pytest.mark.parametrize("X,Y", [
    (np.zeros((3, 2)), np.zeros((3, 3))),      # shapes differ
    (np.zeros((3, 2, 1)), np.zeros((3, 2, 1))),  # not matrices
    (np.zeros((1, 2)), np.zeros((1, 2))),      # one seed
    (np.zeros((3, 0)), np.zeros((3, 0))),      # no instance
])
def test_bootstrap_refuses_bad_shapes(X, Y):
    with pytest.raises(ValueError, match="matrices of one shape"):
        ag.stratified_bootstrap(ag.iqm_diff, X, Y, reps=100)


def test_bootstrap_accepts_the_smallest_shapes():
    assert len(ag.stratified_bootstrap(ag.iqm_diff, np.zeros((2, 1)), np.zeros((2, 1)), reps=100)) == 3


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_bootstrap_refuses_non_finite_scores_in_either_matrix(bad):
    X = np.zeros((3, 2))
    B = X.copy()
    B[1, 1] = bad
    with pytest.raises(ValueError, match=r"^X and Y must be finite \(a failed run scores its nAUC, never NaN\)$"):
        ag.stratified_bootstrap(ag.iqm_diff, B, X, reps=100)
    with pytest.raises(ValueError, match="finite"):
        ag.stratified_bootstrap(ag.iqm_diff, X, B, reps=100)


@pytest.mark.parametrize("level", [0.5, 1.0, 0.3, 1, 0.95j, "0.9"])
def test_bootstrap_refuses_levels_outside_half_to_one(level):
    with pytest.raises(ValueError, match=r"level must be a number in \(0.5, 1\)"):
        ag.stratified_bootstrap(ag.iqm_diff, np.zeros((3, 2)), np.zeros((3, 2)), reps=100, level=level)


def test_bootstrap_accepts_levels_just_inside():
    for level in (0.500001, 0.999):
        assert len(ag.stratified_bootstrap(ag.iqm_diff, np.ones((3, 2)), np.zeros((3, 2)), reps=100, level=level)) == 3


# --- compare and performance_profile ---------------------------------------------------------------------------

def test_compare_reports_both_statistics_with_their_intervals_and_sizes():
    X = np.array([[1.0, 2.0], [1.5, 2.5], [1.2, 2.2]])
    Y = X - 1.0
    c = ag.compare(X, Y, reps=100)
    assert set(c) == {"delta", "lo", "hi", "poi", "poi_lo", "poi_hi", "n_seeds", "n_instances"}
    assert (c["delta"], c["lo"], c["hi"]) == pytest.approx((1.0, 1.0, 1.0))
    assert c["poi"] == pytest.approx(ag.poi(X, Y))
    assert c["poi_lo"] <= c["poi"] <= c["poi_hi"] and c["poi_hi"] <= 1.0
    assert (c["n_seeds"], c["n_instances"]) == (3, 2)
    d, lo, hi = ag.stratified_bootstrap(ag.poi, X, Y, 100, 7)
    c7 = ag.compare(X, Y, reps=100, seed=7)
    assert (c7["poi"], c7["poi_lo"], c7["poi_hi"]) == (d, lo, hi)


def test_compare_defaults_are_the_registered_resamples():
    rng = np.random.default_rng(4)
    X, Y = rng.normal(size=(4, 2)), rng.normal(size=(4, 2))
    c = ag.compare(X, Y)
    assert (c["delta"], c["lo"], c["hi"]) == ag.stratified_bootstrap(ag.iqm_diff, X, Y, 2000, 53)


def test_performance_profile_counts_runs_strictly_above_each_tau():
    X = np.array([[0.0, 0.5], [0.5, 1.0]])
    np.testing.assert_allclose(ag.performance_profile(X, np.array([-1.0, 0.0, 0.5, 0.99, 1.0])),
                               [1.0, 0.75, 0.25, 0.25, 0.0])


def test_registered_constants():
    assert (ag.BOOT_REPS, ag.BOOT_SEED, ag.LEVEL) == (2000, 53, 0.95)
    assert ag.INTERVAL == ("95 % stratified bootstrap percentile interval (seeds resampled within instances, paired; "
                           "2000 resamples)")


# --- inputs that are not float arrays (an object column of a table, a text file's numbers) are read as float64 ----

def _obj(A):
    return np.asarray(A, dtype=np.float64).astype(object)


def test_statistics_read_object_arrays_as_float64():
    rng = np.random.default_rng(5)
    X, Y = rng.normal(size=(3, 6, 2)), rng.normal(size=(3, 6, 2))
    for a, b in ((_obj(X), Y), (X, _obj(Y))):
        v = ag.iqm_diff(a, b)
        assert v.dtype == np.float64
        np.testing.assert_allclose(v, ag.iqm_diff(X, Y))
        np.testing.assert_allclose(ag.poi(a, b), ag.poi(X, Y))
        assert ag.poi(a[0], b[0]) == pytest.approx(ag.poi(X[0], Y[0]))
        assert ag.stratified_bootstrap(ag.iqm_diff, a[0], b[0], reps=100) == \
            pytest.approx(ag.stratified_bootstrap(ag.iqm_diff, X[0], Y[0], reps=100))


def test_performance_profile_reads_numbers_given_as_text():
    np.testing.assert_allclose(ag.performance_profile(np.array([["0.0", "0.5"], ["0.5", "1.0"]]), np.array(["0.5"])),
                               [0.25])


def test_bootstrap_of_a_yes_no_statistic_is_a_fraction_interval():
    X = np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]])

    def wins(A, B):  # True where gmc's mean beats the rival's
        return A.mean() > B.mean() if A.ndim == 2 else A.mean(axis=(1, 2)) > B.mean(axis=(1, 2))

    point, lo, hi = ag.stratified_bootstrap(wins, X, X - 0.1, reps=100)
    assert (point, lo, hi) == (1.0, 1.0, 1.0)


def test_compare_passes_its_seed_to_both_bootstraps():
    rng = np.random.default_rng(6)
    X, Y = rng.normal(size=(5, 2)), rng.normal(size=(5, 2))
    c = ag.compare(X, Y, reps=100, seed=7)
    assert (c["delta"], c["lo"], c["hi"]) == ag.stratified_bootstrap(ag.iqm_diff, X, Y, 100, 7)
    assert (c["poi"], c["poi_lo"], c["poi_hi"]) == ag.stratified_bootstrap(ag.poi, X, Y, 100, 7)
    assert (c["lo"], c["hi"]) != ag.stratified_bootstrap(ag.iqm_diff, X, Y, 100, 53)[1:]
    assert (c["poi_lo"], c["poi_hi"]) != ag.stratified_bootstrap(ag.poi, X, Y, 100, 53)[1:]


def test_score_matrix_selectors_are_keyword_only_and_the_leading_arguments_positional_or_keyword():
    t = _table()
    with pytest.raises(TypeError):
        ag.score_matrix(t, "gmc", 8, ["a"], [1], "common")
    X = ag.score_matrix(table=t, estimator="gmc", d=8, instances=["a"], seeds=[1], G=8, eps=0.2)
    assert X.shape == (1, 1)


def test_family_comparisons_read_the_primary_arm_by_default_and_the_named_arm_otherwise(monkeypatch):
    """(issue 55, a survivor of the independent sample) the arm a caller names is the one read; None: the primary."""
    from types import SimpleNamespace

    from simulate.protocol import aggregate as agg
    from simulate.protocol import families

    seen = []

    def fake_score_matrix(table, est, d, insts, seeds, eta_kind, eps, G):
        seen.append((est, d, eta_kind, eps, G))
        base = 0.5 + 0.1 * (est == "gmc")
        return base + 0.01 * np.arange(len(seeds) * len(insts), dtype=np.float64).reshape(len(seeds), len(insts))

    monkeypatch.setattr(agg, "score_matrix", fake_score_matrix)
    monkeypatch.setattr(families, "by_family", lambda insts: {"fam": tuple(insts)})
    proto = SimpleNamespace(primary_arm="tuned", primary=dict(eps=0.2, G=8), instances=("a", "b"), delays=(0, 8),
                            eval_seeds=(1, 2, 3))
    out = agg.family_comparisons(None, proto, "gmc", ["is"])
    assert {s[2] for s in seen} == {"tuned"} and {(s[3], s[4]) for s in seen} == {(0.2, 8)}
    assert [(o["family"], o["d"], o["rival"], o["n_instances"]) for o in out] == [("fam", 0, "is", 2), ("fam", 8, "is", 2)]
    assert out[0]["delta"] == pytest.approx(0.1)
    seen.clear()
    agg.family_comparisons(None, proto, "gmc", ["is"], arm="common")
    assert {s[2] for s in seen} == {"common"}


def test_family_comparisons_pass_the_table_each_side_and_each_delay(monkeypatch):
    from types import SimpleNamespace

    from simulate.protocol import aggregate as agg
    from simulate.protocol import families

    seen = []
    table = object()

    def fake_score_matrix(tab, est, d, insts, seeds, eta_kind, eps, G):
        seen.append((tab is table, est, d, tuple(insts), tuple(seeds)))
        return np.full((len(seeds), len(insts)), 0.5 + 0.1 * (est == "gmc") + 0.01 * d)

    monkeypatch.setattr(agg, "score_matrix", fake_score_matrix)
    monkeypatch.setattr(families, "by_family", lambda insts: {"fam": tuple(insts)})
    proto = SimpleNamespace(primary_arm="tuned", primary=dict(eps=0.2, G=8), instances=("a", "b"), delays=(0, 8),
                            eval_seeds=(1, 2, 3))
    agg.family_comparisons(table, proto, "gmc", ["is", "tis"])
    assert seen == [(True, e, d, ("a", "b"), (1, 2, 3)) for d in (0, 8) for e in ("gmc", "is", "tis")]


def test_iqm_interval_is_the_iqm_with_its_stratified_bootstrap_interval():
    from scipy import stats
    rng = np.random.default_rng(4)
    X = rng.normal(size=(8, 3))
    est, lo, hi = ag.iqm_interval(X, reps=300, seed=5)
    assert est == pytest.approx(stats.trim_mean(X.ravel(), 0.25))
    assert (est, lo, hi) == ag.stratified_bootstrap(ag.iqm_diff, X, np.zeros_like(X), 300, 5)
    assert lo < est < hi and ag.iqm_interval(X, reps=300, seed=6) != (est, lo, hi)
    assert ag.iqm_interval(X) == ag.stratified_bootstrap(ag.iqm_diff, X, np.zeros_like(X), ag.BOOT_REPS, ag.BOOT_SEED)
    assert ag.iqm_interval(X.astype(np.float32)) == ag.iqm_interval(X.astype(np.float32).astype(np.float64))
