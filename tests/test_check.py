"""The property-test kit: registry verdicts as THEORY predicts, broken maps flagged for the right property.

docs/THEORY.md §3: tis, tic, gmc ∈ 𝒲_ε; is, snis (and onpolicy) are not; over 𝒲_ε only gmc
minimises 𝔅 (C2). Each deliberately broken map below has exactly one defect, and the report must
refute that property and no other.
"""
import functools
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings

from asyncgrpo import estimators as est
from asyncgrpo import functionals
from asyncgrpo.check import load_map, main
from asyncgrpo.testing import HOLDS, OUT_OF_SCOPE, REFUTED, c2_minimum_qp, check_weight_map, registry_map
from asyncgrpo.testing import strategies as ags

N = 25  # hypothesis examples per property: enough to hit every defect below, a few seconds per map


@functools.lru_cache(maxsize=None)
def report_for(name):
    return check_weight_map(registry_map(name), eps=0.2, max_examples=N, name=name)


# --------------------------------------------------------------------------- registry verdicts
PREDICTED = {
    # name: (member of W_eps, refuted properties)
    "onpolicy": (False, {"w_le_rho"}),  # w = 1 > ρ whenever ρ < 1
    "is": (False, {"finite", "mean_le_1_plus_eps"}),  # ρ overflows float64 beyond ℓ ≈ 709.78; mean ρ unbounded
    "snis": (False, {"w_le_rho"}),  # ρ/ρ̄ > ρ whenever ρ̄ < 1 (its mean is exactly 1)
    "tis": (True, {"c2_minimiser"}),
    "tic": (True, {"c2_minimiser"}),
    "gmc": (True, set()),
}


@pytest.mark.parametrize("name", est.ESTIMATORS)
def test_registry_estimators_get_the_verdict_theory_predicts(name):
    report = report_for(name)
    member, refuted = PREDICTED[name]
    assert report.is_member is member, str(report)
    assert set(report.refuted) == refuted, str(report)
    for prop in ("permutation", "padding", "batch_shape"):  # the torch backend takes batches and masks
        assert report[prop].verdict == HOLDS, str(report)
    assert report["real_valued"].verdict == HOLDS and report.is_pure, str(report)
    if name == "is":  # ρ = exp(ℓ) overflows float64 past log(max float64)
        assert report.unsafe_from == pytest.approx(np.log(np.finfo(np.float64).max), rel=1e-12)
    c2 = report["c2_minimiser"]
    if not member:
        assert c2.verdict == OUT_OF_SCOPE and "not a member" in c2.detail
    elif name == "gmc":
        assert c2.verdict == HOLDS
    else:
        assert c2.detail.startswith("member but not the minimiser, excess B = ")
        ex = c2.counterexample
        w = est.get(name, ex["eps"])(ex["ell"])
        # the reported excess is real: recompute it from the counterexample with the closed-form minimum
        rbar = functionals.group_mass(ex["ell"])
        b_min = max(rbar - 1 - ex["eps"], 0.0) ** 2 / rbar
        with np.errstate(divide="ignore"):
            excess = functionals.bias_functional(ex["ell"], np.log(w)) - b_min
        assert excess > 1e-6


def test_refuted_rows_carry_a_shrunk_counterexample_that_reproduces():
    row = report_for("snis")["w_le_rho"]
    ell, eps = row.counterexample["ell"], row.counterexample["eps"]
    assert row.verdict == REFUTED and ell.size <= 4  # shrunk: a small group, not a 256-entry one
    w = est.snis(eps)(ell)
    assert (w > np.exp(ell) * (1 + 1e-9)).any()


# --------------------------------------------------------------------------- deliberately broken maps
def _gmc(ell, eps):
    return est.gmc(eps)(ell)


def negated_tail(ell, eps):
    """Defect: negative weights for trajectories with ℓ < −1 (a sign slip)."""
    w = _gmc(ell, eps)
    return np.where(np.asarray(ell) < -1.0, -w, w)


def naive_linear_gmc(ell, eps):
    """Defect: GMC in linear space; ρ overflows at ℓ > 709.78 and inf·0 gives NaN."""
    with np.errstate(all="ignore"):
        rho = np.exp(ell)
        return rho * np.minimum(1.0, (1.0 + eps) / rho.mean())


def two_sided_clip(ell, eps):
    """Defect: PPO-style two-sided clip at trajectory level, min(max(ρ, 1−ε), 1+ε): w > ρ for small ρ."""
    with np.errstate(over="ignore"):
        return np.clip(np.exp(ell), 1.0 - min(eps, 0.5), 1.0 + eps)


def loose_cap(ell, eps):
    """Defect: per-trajectory cap at 2(1+ε): w ≤ ρ, but the mean weight can exceed 1+ε."""
    return np.exp(np.minimum(ell, np.log(2 * (1 + eps))))


def gmc_cap_off_by_1e6(ell, eps):
    """Defect: GMC capping at (1+ε)(1+1e-6): w ≤ ρ still, the mean exceeds 1+ε by a relative 1e-6."""
    return est.gmc(eps * (1 + 1e-6) + 1e-6)(ell)


def chunked_gmc(ell, eps):
    """Defect: group mass computed per chunk of 16 (a memory-saving rewrite); wrong for G > 16."""
    ell = np.asarray(ell)
    return np.concatenate([_gmc(ell[i:i + 16], eps) for i in range(0, ell.size, 16)])


def mask_ignoring_gmc(ell, eps, mask=None):
    """Defect: padded entries enter ρ̄ (the mask only zeroes their own weights)."""
    import torch

    t = torch.as_tensor(np.asarray(ell, dtype=np.float64))
    w = est.gmc(eps).torch(t)  # no mask: padding counted in the group mass
    if mask is not None:
        w = torch.where(torch.as_tensor(np.asarray(mask, dtype=bool)), w, torch.zeros_like(w))
    return w.numpy()


def batch_flattening_gmc(ell, eps):
    """Defect: a [n_groups, G] input is treated as one big group (ρ̄ over the whole batch)."""
    ell = np.asarray(ell)
    return _gmc(ell.ravel(), eps).reshape(ell.shape)


def sum_cap(ell, eps):
    """Defect: caps the group's *sum* of ratios at 1+ε instead of its mean: a member, but not the minimiser."""
    ell = np.asarray(ell)
    log_sum = np.logaddexp.reduce(ell)
    return np.exp(ell + min(0.0, np.log1p(eps) - log_sum))


def complex_weights(ell, eps):
    """Defect: complex weights (``w + 1e6j``); NumPy's float cast would silently drop the imaginary part."""
    return _gmc(ell, eps) + 1e6j


def string_weights(ell, eps):
    """Defect: weights as strings (NumPy's float cast would parse them)."""
    return _gmc(ell, eps).astype(str)


def in_place_clip(ell, eps):
    """Defect: clips its input in place before computing GMC (the caller's log-ratios change)."""
    np.minimum(ell, 700.0, out=ell)
    return _gmc(ell, eps)


def torch_in_place(ell, eps):
    """Defect: shares the input's memory through torch and clamps it in place (no error, the input changes)."""
    import torch

    t = torch.from_numpy(ell)
    t.clamp_(max=700.0)
    return est.gmc(eps).torch(t).numpy()


BROKEN = {
    # name: (fn, the one property it must fail)
    "complex_weights": (complex_weights, "real_valued"),
    "string_weights": (string_weights, "real_valued"),
    "in_place_clip": (in_place_clip, "purity"),
    "torch_in_place": (torch_in_place, "purity"),
    "negated_tail": (negated_tail, "nonnegative"),
    "naive_linear_gmc": (naive_linear_gmc, "finite"),
    "two_sided_clip": (two_sided_clip, "w_le_rho"),
    "loose_cap": (loose_cap, "mean_le_1_plus_eps"),
    "gmc_cap_off_by_1e6": (gmc_cap_off_by_1e6, "mean_le_1_plus_eps"),  # the bound is checked sharply (rtol 1e-9)
    "chunked_gmc": (chunked_gmc, "permutation"),
    "mask_ignoring_gmc": (mask_ignoring_gmc, "padding"),
    "batch_flattening_gmc": (batch_flattening_gmc, "batch_shape"),
    "sum_cap": (sum_cap, "c2_minimiser"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_broken_map_is_flagged_for_its_defect_and_nothing_else(name):
    fn, prop = BROKEN[name]
    report = check_weight_map(fn, eps=0.2, max_examples=N, name=name, batched=name == "batch_flattening_gmc" or None)
    assert report.refuted == [prop], str(report)
    row = report[prop]
    assert row.counterexample is not None and row.detail, str(report)
    assert row.description  # the property in plain words


def test_non_real_weights_leave_every_other_property_out_of_scope():
    for fn in (complex_weights, string_weights):
        report = check_weight_map(fn, eps=0.2, max_examples=5)
        assert report.refuted == ["real_valued"] and not report.is_member and not report.all_hold
        assert "not real numbers" in report["real_valued"].detail
        assert {r.verdict for r in report.rows[1:]} == {OUT_OF_SCOPE}


def test_purity_reports_what_changed():
    row = check_weight_map(torch_in_place, eps=0.2, max_examples=N)["purity"]
    assert "fn changed its input ell" in row.detail and row.counterexample["ell"].max() > 700
    row = check_weight_map(in_place_clip, eps=0.2, max_examples=5)["purity"]
    assert "read-only" in row.detail


def naive_gmc(ell, eps):
    """A correct map written naively: GMC in linear space, inf·0 = NaN once ρ overflows (ℓ > 709.78)."""
    rho = np.exp(ell)
    return rho * np.minimum(1.0, (1.0 + eps) / rho.mean())


def math_exp_tis(ell, eps):
    """A correct map that raises OverflowError past ℓ ≈ 709.78 (math.exp per entry)."""
    import math

    return np.array([min(math.exp(x), 1.0 + eps) for x in ell])


def test_a_correct_naive_map_is_a_member_numerically_unsafe_and_c2_is_still_checked():
    """Membership is judged where the output is finite; the overflow is the robustness row's alone."""
    report = check_weight_map(naive_gmc, eps=0.2, max_examples=N)
    assert report.is_member and not report.is_robust and report.refuted == ["finite"], str(report)
    assert report["c2_minimiser"].verdict == HOLDS
    assert report.unsafe_from == pytest.approx(np.log(np.finfo(np.float64).max), rel=1e-12)
    lines = str(report).splitlines()
    assert "  => member of 𝒲_ε" in lines
    assert any(line.startswith("  => numerically unsafe for ℓ ≥ 709.783") for line in lines)
    assert any(line.startswith("  => C2: the minimiser") for line in lines)
    # a crash is a numerical failure too, not a membership one
    report = check_weight_map(math_exp_tis, eps=0.2, max_examples=N)
    assert report.is_member and report.refuted == ["finite", "c2_minimiser"], str(report)
    assert "OverflowError" in report["finite"].detail and report.unsafe_from == pytest.approx(709.78, abs=0.01)


def test_membership_never_judged_is_not_membership():
    report = check_weight_map(lambda ell, eps: np.full_like(ell, np.nan), eps=0.2, max_examples=5)
    assert not report.is_member and report["w_le_rho"].verdict == OUT_OF_SCOPE
    assert report.unsafe_from == 0.0 and "numerically unsafe for ℓ = 0" in str(report)


def test_c2_minimum_qp_matches_the_closed_form():
    rng = np.random.default_rng(0)
    for G in (1, 2, 5, 16):
        for _ in range(5):
            ell = rng.normal(0.3, 1.0, G)
            rbar = np.exp(ell).mean()
            for eps in (0.05, 0.2, 1.0):
                closed = max(rbar - 1 - eps, 0.0) ** 2 / rbar
                assert c2_minimum_qp(ell, eps) == pytest.approx(closed, rel=1e-6, abs=1e-10)


@settings(max_examples=50)
@given(ags.log_ratio_groups(), ags.eps_values())
def test_strategies_draw_valid_groups_and_eps(ell, eps):
    assert ell.dtype == np.float64 and 1 <= ell.size <= 256
    assert np.isfinite(ell).all() and np.abs(ell).max() <= ags.MAX_ABS
    assert eps > 0


@settings(max_examples=50)
@given(ags.padded_groups())
def test_padded_groups_hold_each_group_at_its_mask(x):
    ell, mask, groups = x
    assert mask.sum(axis=1).tolist() == [g.size for g in groups]
    for r, g in enumerate(groups):
        np.testing.assert_array_equal(ell[r, mask[r]], g)


def test_eps_drawn_by_hypothesis():
    report = check_weight_map(registry_map("gmc"), eps=None, max_examples=15)
    assert report.eps is None and report.is_member and report.refuted == []
    assert report["c2_minimiser"].verdict == HOLDS
    row = check_weight_map(two_sided_clip, eps=None, max_examples=15)["w_le_rho"]
    assert row.verdict == REFUTED and row.counterexample["eps"] > 0


def test_check_weight_map_rejects_bad_arguments():
    with pytest.raises(ValueError, match="callable"):
        check_weight_map(3.0)
    with pytest.raises(ValueError, match="eps"):
        check_weight_map(_gmc, eps=-1.0)
    with pytest.raises(ValueError, match="max_examples"):
        check_weight_map(_gmc, max_examples=0)


# --------------------------------------------------------------------------- the CLI
ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_cli_exit_status_and_table(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))  # `python -m` puts the working directory there; plain pytest may not
    assert main(["tests.test_check:two_sided_clip", "--eps", "0.2", "--max-examples", "20"]) == 1
    out = capsys.readouterr().out
    assert "w_le_rho" in out and "refuted" in out and "counterexample" in out and "NOT a member" in out
    # a member, though not the minimiser: exit 1, since not every property holds
    assert main(["tests.test_check:sum_cap", "--max-examples", "20"]) == 1
    out = capsys.readouterr().out
    assert "member but not the minimiser, excess B =" in out and "  => member of 𝒲_ε" in out.splitlines()
    assert main(["registry:snis", "--max-examples", "5", "--format", "json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert rows["w_le_rho"]["verdict"] == "refuted" and rows["c2_minimiser"]["verdict"] == "out of scope"


def test_cli_separates_membership_numerics_c2_and_purity(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    assert main(["examples.my_weight_map:naive_gmc", "--max-examples", "20"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "  => member of 𝒲_ε" in lines
    assert any(line.startswith("  => numerically unsafe for ℓ ≥ 709.783") for line in lines)
    assert any(line.startswith("  => C2: the minimiser") for line in lines)
    assert main(["tests.test_check:complex_weights", "--max-examples", "5"]) == 1
    assert "real_valued         refuted" in capsys.readouterr().out
    assert main(["tests.test_check:torch_in_place", "--max-examples", "20"]) == 1
    assert "  => NOT pure: fn changed its input ell" in capsys.readouterr().out


def test_cli_clear_errors_for_unknown_module_or_non_callable(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    assert main(["no_such_module_xyz:fn"]) == 2
    assert "cannot import module 'no_such_module_xyz'" in capsys.readouterr().err
    assert main(["tests.test_check:no_such_fn"]) == 2
    assert "has no attribute 'no_such_fn'" in capsys.readouterr().err
    assert main(["tests.test_check:N"]) == 2
    assert "not a callable" in capsys.readouterr().err
    assert main(["just_a_name"]) == 2
    with pytest.raises(ValueError, match="name must be one of"):
        load_map("registry:nope")


@pytest.mark.parametrize("source,message", [
    ("def f(ell, eps)\n    return ell\n", "SyntaxError: expected ':'"),
    ("raise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here"),
    ("import sys\nsys.exit(3)\n", "SystemExit: 3"),
    ("import no_such_dependency_xyz\n", "ModuleNotFoundError: No module named 'no_such_dependency_xyz'"),
])
def test_cli_exits_2_with_one_line_when_the_users_module_fails_to_import(tmp_path, capsys, monkeypatch, source,
                                                                          message):
    name = f"user_map_{abs(hash(source)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main([f"{name}:f"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"python -m asyncgrpo.check: error: cannot import module '{name}': {message}"), err


def test_cli_import_error_from_a_shell_has_no_traceback(tmp_path):
    (tmp_path / "raising_map.py").write_text("raise ValueError('bad config')\n")
    r = subprocess.run([sys.executable, "-m", "asyncgrpo.check", "raising_map:f"], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "cannot import module 'raising_map': ValueError: bad config" in r.stderr


def test_python_dash_m_entry_point():
    r = subprocess.run([sys.executable, "-m", "asyncgrpo.check", "registry:gmc", "--max-examples", "5",
                        "--format", "csv"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith("property,") and "c2_minimiser,holds" in r.stdout
