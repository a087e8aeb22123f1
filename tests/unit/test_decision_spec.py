"""The protocol's validation (simulate/protocol/spec.py): every rule that fixes what a registered protocol may say,
checked at its boundary from both sides on the committed v5 and v6 files (issue 55). A field outside its range must
be refused with a message naming it; the nearest valid value must be accepted."""
import json
import re
import math
import os
from dataclasses import replace

import pytest

from simulate.protocol import spec as sp

#: Every refusal message the checks below provoke, in full (each names the field and its valid range).
MESSAGES = {
    'protocol field G must be a list of numbers or names (got ([1],))',
    'protocol field G must be a list of numbers or names (got 3)',
    'protocol field G must be a list without duplicates (got [8, 8])',
    'protocol field G must be integers (got 8.0)',
    'protocol field G must be integers (got True)',
    'protocol field G must be integers >= 1',
    'protocol field alpha must be (0, 0.5)',
    'protocol field alpha must be a finite number',
    'protocol field budget must be a multiple of every G (K = budget / G steps)',
    'protocol field budget must be an integer >= 1',
    'protocol field budget must be an integer in [1, 16777216]',
    'protocol field budget must be integers (got 2048.0)',
    'protocol field c5 must be estimators, d, eps from the grid, >= 2 G, steps >= 1',
    'protocol field c5.G/c5.steps must be distinct integers >= 1',
    'protocol field c5.G/c5.steps must be distinct integers >= 1 (G a list of them)',
    'protocol field c5.d must be an integer',
    'protocol field c5.eps must be a finite number',
    'protocol field c5.estimators must be a list of estimator names',
    'protocol field c5.slope_margin/flat_margin must be finite numbers >= 0',
    "protocol field c5.slope_rule must be 'margin' or 'theory'",
    'protocol field c5.steps must be an integer in [1, 1000000] (got 1000001)',
    "protocol field c5.test_b must be 'run' or 'retired'",
    'protocol field c5.test_b_v3_se must be a finite number > 0',
    "protocol field c5.theory_regime must be 'delay-dominated', 'comparable' or 'variance-dominated'",
    'protocol field collapse_drop must be (0, 1]',
    'protocol field collapse_drop must be a finite number',
    'protocol field delays must be a list of numbers or names (got ([1],))',
    'protocol field delays must be a list of numbers or names (got 3)',
    'protocol field delays must be a list without duplicates (got [0, 8, 0])',
    'protocol field delays must be at least two integers >= 0 including 0',
    'protocol field delays must be integers (got [0.0, 8.0])',
    'protocol field eps must be a list of numbers or names (got ([1],))',
    'protocol field eps must be a list of numbers or names (got 3)',
    'protocol field eps must be a list without duplicates (got [0.2, 0.2])',
    'protocol field eps must be finite numbers',
    'protocol field eps must be numbers in (0, inf)',
    'protocol field eps_estimators must be a subset of estimators',
    'protocol field estimators must be a list of numbers or names (got ([1],))',
    'protocol field estimators must be a list of numbers or names (got 3)',
    "protocol field estimators must be a list that includes 'onpolicy' (the reference of the common η, the saturation guard and onpolicy-degrades; got ['is', 'tis', 'tic', 'gmc', 'snis', 'grpo', 'gspo', 'cispo', 'm2po', 'verl_seq_tis', 'verl_seq_rs', 'verl_tok_tis', 'verl_geo_rs', 'trl_seq_mask'])",
    "protocol field estimators must be a list without duplicates (got ['onpolicy', 'is', 'tis', 'tic', 'gmc', 'snis', 'grpo', 'gspo', 'cispo', 'm2po', 'verl_seq_tis', 'verl_seq_rs', 'verl_tok_tis', 'verl_geo_rs', 'trl_seq_mask', 'onpolicy'])",
    'protocol field estimators must be a subset of the registered estimators onpolicy, is, tis, tic, gmc, snis, verl_seq_tis, verl_seq_rs, grpo, gspo, cispo, m2po, verl_tok_tis, verl_geo_rs, trl_seq_mask, sapo, gpg, luspo',
    'protocol field eta_lcb_level must be a number in [0.5, 1)',
    'protocol field eta_log2 must be [lo, hi]',
    'protocol field eta_log2 must be [lo, hi] with lo < hi a whole number of eta_step_log2 apart',
    'protocol field eta_log2 must be finite numbers',
    'protocol field eta_log2 must be log₂ η edges in [−64, 64] (got [-64.5, 0.0])',
    "protocol field eta_log2_token must be [lo, hi] (required unless token_eta = 'length')",
    'protocol field eta_log2_token must be [lo, hi] with lo < hi a whole number of eta_step_log2 apart',
    'protocol field eta_log2_token must be log₂ η edges in [−64, 64] (got [0.0, 70.0])',
    "protocol field eta_rule must be 'best' (largest tuning mean) or 'lcb' (largest lower bound)",
    'protocol field eta_step_log2 must be a finite number',
    'protocol field eta_step_log2 must be a number > 0',
    'protocol field eval_seeds must be a list of numbers or names (got ([1],))',
    'protocol field eval_seeds must be a list of numbers or names (got 3)',
    'protocol field eval_seeds must be a list without duplicates (got [1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 1015, 1016, 1017, 1018, 1019, 1020, 1021, 1022, 1023, 1000])',
    'protocol field eval_seeds must be integers (got [1000.0, 1001.0, 1002.0, 1003.0, 1004.0, 1005.0, 1006.0, 1007.0, 1008.0, 1009.0, 1010.0, 1011.0, 1012.0, 1013.0, 1014.0, 1015.0, 1016.0, 1017.0, 1018.0, 1019.0, 1020.0, 1021.0, 1022.0, 1023.0])',
    'protocol field eval_seeds must be integers (got [True, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 1015, 1016, 1017, 1018, 1019, 1020, 1021, 1022, 1023])',
    'protocol field eval_seeds must be integers in [0, 2³²) (got [4294967296, 5000])',
    'protocol field failure_p0 must be (0, 1)',
    'protocol field failure_p0 must be a finite number',
    "protocol field families must be a table {family = number of instances} with families from ['lm-like', 'tabular']",
    'protocol field families.tabular must be an integer in [1, 64] (got 0)',
    'protocol field families.tabular must be an integer in [1, 64] (got 6.0)',
    'protocol field families.tabular must be an integer in [1, 64] (got 65)',
    'protocol field families/family_root/family_budget/rivals must be absent below version 6',
    "protocol field family_budget must be a table with one budget per family ['lm-like', 'tabular'] (trajectories per context)",
    'protocol field family_budget.tabular must be an integer in [1, 16777216]',
    "protocol field family_root must be a non-empty string fixed before any run (the instances' seed root)",
    'protocol field heldout_margin must be a finite number >= 0',
    'protocol field instance_settings must be a table of per-instance tables',
    'protocol field instance_settings must be absent below version 5',
    'protocol field instance_settings must be absent in version 6 (family_budget sets the budget)',
    "protocol field instance_settings.count-frac must be a table with keys from ['budget', 'n_prompts'] (got {'steps': 2})",
    "protocol field instance_settings.count-frac must be a table with keys from ['budget', 'n_prompts'] (got {})",
    'protocol field instance_settings.count-frac must be budget and n_prompts with G·n_prompts dividing the budget for every G (K = budget / (G·n_prompts); budget 2048, n_prompts 3, G 8)',
    'protocol field instance_settings.count-frac must be budget and n_prompts with G·n_prompts dividing the budget for every G (K = budget / (G·n_prompts); budget 48, n_prompts 5, G 8)',
    'protocol field instance_settings.count-frac.n_prompts must be an integer >= 1 (got 0)',
    'protocol field instance_settings.count-frac.n_prompts must be an integer >= 1 (got 2.0)',
    'protocol field instance_settings.nope must be a table named after a registered instance (count-frac, count-frac-bernoulli, prev-random-1, prev-random-2, feature-loglinear, count-long-bernoulli, feature-lm-bernoulli, lm-faithful-exact)',
    'protocol field instances must be a list of numbers or names (got ([1],))',
    'protocol field instances must be a list of numbers or names (got 3)',
    "protocol field instances must be a list without duplicates (got ['count-frac', 'count-frac-bernoulli', 'prev-random-1', 'prev-random-2', 'feature-loglinear', 'count-long-bernoulli', 'feature-lm-bernoulli', 'lm-faithful-exact', 'count-frac'])",
    "protocol field instances must be exactly the instances its family seeds draw, in order: ['tabular-610698483', 'tabular-937884340', 'tabular-43463626', 'tabular-1220912659', 'tabular-3044651708', 'tabular-3866799075', 'lm-like-1257968113', 'lm-like-190112057', 'lm-like-3043287042', 'lm-like-1928633480', 'lm-like-1222638374', 'lm-like-362598903'] (got ['lm-like-362598903', 'lm-like-1222638374', 'lm-like-1928633480', 'lm-like-3043287042', 'lm-like-190112057', 'lm-like-1257968113', 'tabular-3866799075', 'tabular-3044651708', 'tabular-1220912659', 'tabular-43463626', 'tabular-937884340', 'tabular-610698483']); a protocol may not choose its instances",
    "protocol field instances must be exactly the instances its family seeds draw, in order: ['tabular-610698483', 'tabular-937884340', 'tabular-43463626', 'tabular-1220912659', 'tabular-3044651708', 'tabular-3866799075', 'lm-like-1257968113', 'lm-like-190112057', 'lm-like-3043287042', 'lm-like-1928633480', 'lm-like-1222638374', 'lm-like-362598903'] (got ['tabular-610698483', 'tabular-937884340', 'tabular-43463626', 'tabular-1220912659', 'tabular-3044651708', 'tabular-3866799075', 'lm-like-1257968113', 'lm-like-190112057', 'lm-like-3043287042', 'lm-like-1928633480', 'lm-like-1222638374']); a protocol may not choose its instances",
    "protocol field instances must be registered instances (count-frac, count-frac-bernoulli, prev-random-1, prev-random-2, feature-loglinear, count-long-bernoulli, feature-lm-bernoulli, lm-faithful-exact) or family draws <family>-<seed>; unknown: ['nope']",
    'protocol field learning_gap must be a finite number',
    'protocol field learning_gap must be a number in (0, 1]',
    'protocol field local_chi2 must be a finite number',
    'protocol field local_chi2 must be a number > 0',
    'protocol field lockin_grad_rel must be a number > 0',
    'protocol field lockin_nJ must be a number in (0, 1]',
    'protocol field margin must be a finite number',
    'protocol field margin must be a number >= 0',
    'protocol field max_widen must be an integer >= 0',
    'protocol field max_widen must be an integer in [0, 32]',
    "protocol field metric must be 'nauc'",
    'protocol field min_fraction must be a finite number',
    'protocol field min_fraction must be a number in (0, 1]',
    'protocol field n_prompts must be a divisor of budget / G for every G (K = budget / (G·n_prompts) steps; budget 2048, G [8], n_prompts 3)',
    'protocol field n_prompts must be a divisor of budget / G for every G (K = budget / (G·n_prompts) steps; budget 2048, G [8], n_prompts 512)',
    'protocol field n_prompts must be an integer >= 1',
    "protocol field name must be letters, digits, '.', '_' or '-' (it names cache folders; no '/'), 1 to 80 characters",
    'protocol field neighbour_step_log2 must be a finite number',
    'protocol field neighbour_step_log2 must be a number > 0 (the next grid point up)',
    "protocol field normalise must be 'path' (J*) or 'class' (J_class)",
    'protocol field power_target must be a finite number',
    'protocol field power_target must be a number in (0, 1)',
    'protocol field primary must be a cell of the grid (d in delays, G in G, eps in eps)',
    'protocol field primary must be integer G and d, a finite eps',
    "protocol field primary_arm must be one of step_arms ['tuned', 'common']",
    "protocol field quick.instances must be a subset of the drawn instances ['tabular-610698483', 'tabular-937884340', 'tabular-43463626', 'tabular-1220912659', 'tabular-3044651708', 'tabular-3866799075', 'lm-like-1257968113', 'lm-like-190112057', 'lm-like-3043287042', 'lm-like-1928633480', 'lm-like-1222638374', 'lm-like-362598903']",
    'protocol field rate_premise_d0 must be true or false',
    "protocol field rivals must be a non-empty list of the protocol's estimators other than gmc (gmc must be an estimator)",
    'protocol field saturation_nauc must be a number in (0, 1]',
    'protocol field saturation_zero must be a number in (0, 1]',
    'protocol field sensitivity_step_log2 must be a finite number < 0 (the sensitivity η is below the chosen one)',
    "protocol field step_arms must be a subset of ['tuned', 'common'] that includes 'tuned'",
    "protocol field token_eta must be 'grid' (own grid) or 'length' (T·η)",
    'protocol field tune_seeds must be a list of numbers or names (got ([1],))',
    'protocol field tune_seeds must be a list of numbers or names (got 3)',
    'protocol field tune_seeds must be a list without duplicates (got [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0])',
    'protocol field tune_seeds must be a list without duplicates (got [True, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15])',
    'protocol field tune_seeds must be integers (got [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0])',
    'protocol field tune_seeds must be integers in [0, 2³²) (got [-1, 2])',
    'protocol field tune_seeds/eval_seeds must be at least 2 seeds each',
    'protocol field tune_seeds/eval_seeds must be disjoint sets (tuning seeds must not be evaluation seeds)',
    'protocol field window_delta must be a finite number',
    'protocol field window_delta must be a number >= 0',
    'protocol field zero_tol must be a finite number >= 0 (or absent: exact equality, v1–v3)',
    'protocol field zero_tol must be set in a version-4 protocol (a number >= 0)',
}

V5 = sp.load_protocol(sp.V5_PATH)
V6 = sp.load_protocol(sp.V6_PATH)
V4 = sp.load_protocol(sp.V4_PATH)
V1 = sp.load_protocol(sp.V1_PATH)
V2 = sp.load_protocol(sp.V2_PATH)


def bad(proto, field, **kw):
    with pytest.raises(ValueError, match=f"protocol field {field}") as ei:
        replace(proto, **kw)
    msg = str(ei.value)
    if os.environ.get("SPEC_MESSAGES_RECORD"):
        with open(os.environ["SPEC_MESSAGES_RECORD"], "a") as fh:
            fh.write(json.dumps(msg) + "\n")
    else:  # the whole message, so that the valid range it names is pinned too
        assert msg in MESSAGES, f"unexpected message: {msg!r}"


def ok(proto, **kw):
    return replace(proto, **kw)


# --- scalar fields: the boundary of each range ----------------------------------------------------------------

@pytest.mark.parametrize("field,bad_values,good_values", [
    ("window_delta", [-1e-9], [0.0]),
    ("neighbour_step_log2", [0.0, -0.5], [1e-9]),
    ("local_chi2", [0.0], [1e-9]),
    ("min_fraction", [0.0, 1.0 + 1e-9], [1.0, 1e-9]),
    ("learning_gap", [0.0, 1.5], [1.0]),
    ("power_target", [0.0, 1.0], [0.5]),
    ("eta_step_log2", [0.0, -0.5], []),
    ("collapse_drop", [0.0, 1.01], [1.0]),
    ("alpha", [0.0, 0.5], [0.49, 1e-6]),
    ("failure_p0", [0.0, 1.0], [0.999]),
    ("margin", [-1e-9], [0.0]),
    ("eta_lcb_level", [0.4999, 1.0, math.nan], [0.5]),
    ("heldout_margin", [-1e-9, math.nan], [0.0]),
    ("sensitivity_step_log2", [0.0, math.nan, 1.0], [-1e-9]),
    ("zero_tol", [-1e-9, math.nan, None], [0.0]),
    ("lockin_nJ", [0.0, 1.01, math.nan], [1.0]),
    ("lockin_grad_rel", [0.0, math.inf], [1e-9]),
    ("saturation_nauc", [0.0, 1.01], [1.0]),
    ("saturation_zero", [0.0, 1.01], [1.0]),
])
def test_scalar_ranges(field, bad_values, good_values):
    for v in bad_values:
        bad(V5, field, **{field: v})
    for v in good_values:
        assert getattr(ok(V5, **{field: v}), field) == v


@pytest.mark.parametrize("field", ["eta_step_log2", "window_delta", "collapse_drop", "neighbour_step_log2", "margin",
                                   "alpha", "failure_p0", "local_chi2", "min_fraction", "learning_gap", "power_target"])
@pytest.mark.parametrize("v", [math.nan, math.inf, True, "0.1"])
def test_finite_number_fields(field, v):
    bad(V5, field, **{field: v})


def test_version_2_fields_are_free_in_a_version_1_protocol():
    assert math.isnan(V1.lockin_nJ) and V1.version == 1
    assert ok(V1, lockin_nJ=5.0, saturation_nauc=7.0).lockin_nJ == 5.0
    assert ok(V1, zero_tol=None).zero_tol is None  # absent below v4
    assert ok(V1, heldout_margin=math.nan, sensitivity_step_log2=math.nan).version == 1


def test_version_4_requires_its_fields():
    bad(V4, "zero_tol", zero_tol=None)
    bad(V4, "heldout_margin", heldout_margin=math.nan)
    bad(V4, "sensitivity_step_log2", sensitivity_step_log2=math.nan)


@pytest.mark.parametrize("v", [0, 7, 1.0, True])
def test_version_must_be_a_known_integer(v):
    with pytest.raises(ValueError, match="protocol field version"):
        replace(V5, version=v)


@pytest.mark.parametrize("name,good", [("a" * 80, True), ("a" * 81, False), ("", False), ("a/b", False),
                                       ("v6.1_x-y", True), ("a b", False), (5, False)])
def test_name_is_a_cache_folder_name(name, good):
    if good:
        assert ok(V5, name=name).name == name
    else:
        bad(V5, "name", name=name)


@pytest.mark.parametrize("field,choices,wrong", [("token_eta", ("grid", "length"), "other"),
                                                 ("eta_rule", ("best", "lcb"), "mean"),
                                                 ("normalise", ("path", "class"), "none")])
def test_word_fields(field, choices, wrong):
    for c in choices:
        assert getattr(ok(V5, **{field: c}, eta_log2_token=(0.0, 2.0)), field) == c
    bad(V5, field, **{field: wrong})


def test_rate_premise_is_a_bool():
    bad(V5, "rate_premise_d0", rate_premise_d0=1)
    assert ok(V5, rate_premise_d0=True).rate_premise_d0 is True


# --- sizes -----------------------------------------------------------------------------------------------------------

def test_budget_bounds_and_divisibility():
    bad(V5, "budget", budget=sp.BUDGET_LIMIT * 2)
    bad(V5, "budget", budget=0)
    bad(V5, "budget", budget=2044)              # not a multiple of G = 8
    assert ok(V5, budget=sp.BUDGET_LIMIT, instance_settings={}).budget == sp.BUDGET_LIMIT
    assert ok(V5, budget=8, instance_settings={}).budget == 8
    bad(V5, "budget", budget=2048.0)
    assert sp.BUDGET_LIMIT == 2 ** 24 and sp.WIDEN_LIMIT == 32 and sp.STEPS_LIMIT == 10 ** 6


def test_n_prompts_must_divide_budget_over_G():
    bad(V5, "n_prompts", n_prompts=3)
    bad(V5, "n_prompts", n_prompts=0)
    assert ok(V5, n_prompts=256).n_prompts == 256    # 2048 / (8 · 256) = 1 step
    bad(V5, "n_prompts", n_prompts=512)


def test_max_widen_bounds():
    assert ok(V5, max_widen=0).max_widen == 0 and ok(V5, max_widen=32).max_widen == 32
    bad(V5, "max_widen", max_widen=33)
    bad(V5, "max_widen", max_widen=-1)


# --- lists -----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field", ["instances", "estimators", "delays", "eps", "G", "tune_seeds", "eval_seeds"])
def test_lists_refuse_duplicates_and_nested_values(field):
    vals = getattr(V5, field)
    bad(V5, field, **{field: vals + vals[:1]})
    bad(V5, field, **{field: ([1],)})
    bad(V5, field, **{field: 3})


@pytest.mark.parametrize("field", ["delays", "G", "tune_seeds", "eval_seeds"])
def test_integer_lists(field):
    vals = getattr(V5, field)
    bad(V5, field, **{field: tuple(float(v) for v in vals)})
    bad(V5, field, **{field: (True,) + tuple(vals[1:])}) if field != "delays" else None


def test_seed_range_and_counts():
    bad(V5, "tune_seeds", tune_seeds=(-1, 2))
    bad(V5, "eval_seeds", eval_seeds=(2 ** 32, 5000))
    s = ok(V5, eval_seeds=(2 ** 32 - 1, 0), tune_seeds=(7, 8))
    assert s.eval_seeds == (2 ** 32 - 1, 0)
    with pytest.raises(ValueError, match="at least 2 seeds each"):
        replace(V5, tune_seeds=(7,))
    with pytest.raises(ValueError, match="at least 2 seeds each"):
        replace(V5, eval_seeds=(7,))
    with pytest.raises(ValueError, match="disjoint"):
        replace(V5, tune_seeds=(1, 2), eval_seeds=(2, 3))


def test_eta_grid_edges():
    bad(V5, "eta_log2", eta_log2=(1.0, math.inf))
    bad(V5, "eta_log2", eta_log2=(-64.5, 0.0))
    assert ok(V5, eta_log2=(-64.0, 64.0)).eta_log2 == (-64.0, 64.0)
    bad(V5, "eta_log2", eta_log2=(2.0, 2.0))        # lo < hi
    bad(V5, "eta_log2", eta_log2=(1.0, 2.25))       # not whole steps of 0.5
    bad(V5, "eta_log2", eta_log2=(1.0, 2.0, 3.0))
    bad(V5, "eta_log2_token", eta_log2_token=(0.0, 70.0))
    bad(V5, "eta_log2_token", token_eta="grid", eta_log2_token=())
    assert ok(V5, token_eta="grid", eta_log2_token=(0.0, 1.0)).token_eta == "grid"
    bad(V5, "eta_log2_token", token_eta="grid", eta_log2_token=(1.0, 0.0))
    assert ok(V5, token_eta="length", eta_log2_token=()).eta_log2_token == ()


def test_delays_eps_G():
    bad(V5, "delays", delays=(8,))
    bad(V5, "delays", delays=(1, 8))
    bad(V5, "delays", delays=(-8, 0))
    assert ok(V5, delays=(0, 8, 1)).delays == (0, 8, 1)
    bad(V5, "eps", eps=(0.0,))
    bad(V5, "eps", eps=(-0.2,))
    bad(V5, "eps", eps=(math.inf,))
    bad(V5, "G", G=(0, 8))
    assert ok(V5, G=(1, 8), instance_settings={}).G == (1, 8)


def test_estimators_and_eps_estimators():
    bad(V5, "estimators", estimators=tuple(e for e in V5.estimators if e != "onpolicy"))
    bad(V5, "estimators", estimators=V5.estimators + ("nope",))
    bad(V5, "eps_estimators", eps_estimators=("onpolicy", "nope"))
    assert ok(V5, eps_estimators=V5.estimators).eps_estimators == V5.estimators


def test_step_arms():
    bad(V5, "step_arms", step_arms=("common",))
    bad(V5, "step_arms", step_arms=("tuned", "other"))
    assert ok(V5, step_arms=("tuned",)).step_arms == ("tuned",)


def test_metric_and_primary():
    bad(V5, "metric", metric="auc")
    bad(V5, "primary", primary=dict(eps=0.2, G=8, d=4))
    bad(V5, "primary", primary=dict(eps=0.3, G=8, d=8))
    bad(V5, "primary", primary=dict(eps=0.2, G=4, d=8))
    bad(V5, "primary", primary=dict(eps=0.2, G=8.0, d=8))
    bad(V5, "primary", primary=dict(eps=math.nan, G=8, d=8))


def test_unknown_instance():
    bad(V5, "instances", instances=V5.instances + ("nope",))
    assert ok(V5, instances=("count-frac",)).instances == ("count-frac",)


# --- C5 ---------------------------------------------------------------------------------------------------------------

def c5(**kw):
    return {**V5.c5, **kw}


@pytest.mark.parametrize("kw,field", [
    (dict(estimators="gmc"), "c5.estimators"), (dict(estimators=[1]), "c5.estimators"),
    (dict(G=[2, 0]), "c5.G/c5.steps"), (dict(G=4), "c5.G/c5.steps"), (dict(steps=64.0), "c5.G/c5.steps"),
    (dict(steps=10 ** 6 + 1), "c5.steps"), (dict(d=8.0), "c5.d"), (dict(eps=math.nan), "c5.eps"),
    (dict(estimators=["gmc", "nope"]), "c5"), (dict(d=4), "c5"), (dict(eps=0.3), "c5"), (dict(G=[8]), "c5"),
    (dict(steps=0), "c5"), (dict(G=[2, 2]), "c5.G/c5.steps"), (dict(G=[2, True]), "c5.G/c5.steps"),
    (dict(slope_margin=-0.1), "c5.slope_margin"), (dict(flat_margin=math.inf), "c5.slope_margin"),
    (dict(slope_rule="x"), "c5.slope_rule"), (dict(test_b="x"), "c5.test_b"), (dict(test_b_v3_se=0.0), "c5.test_b_v3_se"),
    (dict(test_b_v3_se=math.nan), "c5.test_b_v3_se"), (dict(theory_regime="x"), "c5.theory_regime"),
])
def test_c5_fields(kw, field):
    bad(V5, field, c5=c5(**kw))


def test_c5_boundaries_accepted():
    assert ok(V5, c5=c5(steps=10 ** 6)).c5["steps"] == 10 ** 6
    assert ok(V5, c5=c5(slope_margin=0.0, flat_margin=0.0, test_b="run", slope_rule="margin")).c5["test_b"] == "run"
    for r in ("delay-dominated", "comparable", "variance-dominated"):
        assert ok(V5, c5=c5(theory_regime=r)).c5["theory_regime"] == r
    c = {k: v for k, v in V5.c5.items() if k not in ("test_b_v3_se", "slope_rule", "test_b", "theory_regime")}
    assert ok(V5, c5=c).c5 == c


def test_v6_without_c5_skips_its_checks_but_v5_needs_it():
    assert ok(V6, c5={}).c5 == {}
    with pytest.raises((ValueError, KeyError)):
        replace(V5, c5={})


# --- instance settings (v5) -------------------------------------------------------------------------------------------

def test_instance_settings():
    bad(V5, "instance_settings", instance_settings=[1])
    bad(V4, "instance_settings", instance_settings={"count-frac": {"n_prompts": 2}})
    bad(V5, "instance_settings.nope", instance_settings={"nope": {"n_prompts": 2}})
    bad(V5, "instance_settings.count-frac", instance_settings={"count-frac": {}})
    bad(V5, "instance_settings.count-frac", instance_settings={"count-frac": {"steps": 2}})
    bad(V5, "instance_settings.count-frac.n_prompts", instance_settings={"count-frac": {"n_prompts": 0}})
    bad(V5, "instance_settings.count-frac.n_prompts", instance_settings={"count-frac": {"n_prompts": 2.0}})
    bad(V5, "instance_settings.count-frac", instance_settings={"count-frac": {"n_prompts": 3}})
    p = ok(V5, instance_settings={"count-frac": {"n_prompts": 1, "budget": 8}})
    assert p.budget_of("count-frac") == 8 and p.prompts_of("count-frac") == 1 and p.steps("count-frac", 8) == 1
    assert V5.budget_of("lm-faithful-exact") == 6144 and V5.prompts_of("lm-faithful-exact") == 8
    assert V5.steps("lm-faithful-exact", 8) == 96 and V5.steps("count-frac", 8) == 256
    assert V5.budget_of("count-frac") == 2048 and V5.prompts_of("count-frac") == 1


# --- families (v6) ----------------------------------------------------------------------------------------------------

def test_v6_families_draw_the_instances():
    from simulate.protocol.families import family_seeds

    drawn = tuple(f"{fam}-{s}" for fam, n in V6.families.items() for s in family_seeds(V6.family_root, fam, n))
    assert V6.instances == drawn
    bad(V6, "instances", instances=drawn[::-1])
    bad(V6, "instances", instances=drawn[:-1])
    q = ok(V6, quick=True, instances=drawn[:2])
    assert q.instances == drawn[:2]
    bad(V6, "quick.instances", quick=True, instances=("tabular-1",))


@pytest.mark.parametrize("kw,field", [
    (dict(family_root=""), "family_root"), (dict(family_root="  "), "family_root"), (dict(family_root=3), "family_root"),
    (dict(families={}), "families"), (dict(families={"toy": 2}), "families"),
    (dict(families={"tabular": 0, "lm-like": 6}), "families.tabular"),
    (dict(families={"tabular": 65, "lm-like": 6}), "families.tabular"),
    (dict(families={"tabular": 6.0, "lm-like": 6}), "families.tabular"),
    (dict(family_budget={"tabular": 1024}), "family_budget"),
    (dict(family_budget={"tabular": 0, "lm-like": 512}), "family_budget.tabular"),
    (dict(family_budget={"tabular": 2 ** 24 + 1, "lm-like": 512}), "family_budget.tabular"),
    (dict(rivals=()), "rivals"), (dict(rivals=("gmc",)), "rivals"), (dict(rivals=("nope",)), "rivals"),
    (dict(rivals=["is"]), "rivals"), (dict(primary_arm="other"), "primary_arm"),
])
def test_v6_family_fields(kw, field):
    bad(V6, field, **kw)


def test_v6_family_boundaries_accepted():
    from simulate.protocol.families import family_seeds

    fams = {"tabular": 1, "lm-like": 1}
    inst = tuple(f"{fam}-{s}" for fam, n in fams.items() for s in family_seeds(V6.family_root, fam, n))
    p = ok(V6, families=fams, instances=inst, family_budget={"tabular": 2 ** 24, "lm-like": 1024})
    assert p.families == fams
    assert ok(V6, primary_arm="common").primary_arm == "common"
    assert ok(V6, rivals=("is",)).rivals == ("is",)
    bad(V6, "instance_settings", instance_settings={"count-frac": {"n_prompts": 1}})


def test_v6_without_gmc_has_no_rivals():
    with pytest.raises(ValueError):
        replace(V6, estimators=tuple(e for e in V6.estimators if e != "gmc"), eps_estimators=("onpolicy",),
                rivals=("is",))


def test_family_fields_absent_below_v6():
    for kw in (dict(families={"tabular": 1}), dict(family_root="r"), dict(family_budget={"tabular": 1}),
               dict(rivals=("is",))):
        bad(V5, "families/family_root/family_budget/rivals", **kw)


def test_v6_budget_of_a_family_draw_is_per_context():
    tab = next(i for i in V6.instances if i.startswith("tabular-"))
    lm = next(i for i in V6.instances if i.startswith("lm-like-"))
    assert V6.prompts_of(tab) == 1 and V6.budget_of(tab) == 1024 and V6.steps(tab, 8) == 128
    from simulate.protocol.catalog import get_instance
    from simulate.protocol.families import contexts

    C = contexts(get_instance(lm))
    assert V6.prompts_of(lm) == C and V6.budget_of(lm) == 512 * C and V6.steps(lm, 8) == 64
    assert V5._family(tab) is None and V6._family("count-frac") is None and V6._family(lm) == "lm-like"


# --- grids, cells, label ----------------------------------------------------------------------------------------------

def test_etas_is_the_half_octave_grid():
    assert V5.etas(0.0, 1.0) == [1.0, 2.0 ** 0.5, 2.0]
    assert V5.etas() == [2.0 ** (1 + 0.5 * i) for i in range(9)]
    assert V5.etas(hi=1.0) == [2.0]
    assert V5.etas(lo=4.0) == [16.0, 2.0 ** 4.5, 32.0]


def test_start_grid_of_token_level_maps():
    g = ok(V5, token_eta="grid", eta_log2_token=(-3.0, -1.0))
    assert g.start_grid("grpo") == (-3.0, -1.0) and g.start_grid("gmc") == V5.eta_log2
    assert V5.start_grid("grpo") == V5.eta_log2  # token_eta = length: the common grid


def test_c5_cells():
    cells = V5.c5_cells("count-frac")
    assert cells == [dict(instance="count-frac", estimator="gmc", d=0, eps=0.2, G=8, K=64)]  # middle of 2..32
    p = ok(V5, c5=c5(test_b="run", G=[2, 4]))
    cs = p.c5_cells("x")
    assert len(cs) == 2 * 2 * 2 and cs[0] == dict(instance="x", estimator="gmc", d=0, eps=0.2, G=2, K=64)
    assert cs[1]["d"] == 8 and cs[2]["G"] == 4 and cs[4]["estimator"] == "tic"
    p = ok(V5, c5=c5(G=[2, 4, 8, 16]))
    assert p.c5_cells("x")[0]["G"] == 8


def test_grid_cells_keep_eps_only_for_eps_estimators():
    p = ok(V5, eps=(0.2, 0.5), eps_estimators=("gmc",))
    cs = p.cells("i")
    assert len(cs) == (len(p.estimators) + 1) * 2 * 1
    gmc = [c for c in cs if c["estimator"] == "gmc"]
    assert [(c["d"], c["eps"]) for c in gmc] == [(0, 0.2), (0, 0.5), (8, 0.2), (8, 0.5)]
    assert all(c["eps"] == 0.2 for c in cs if c["estimator"] != "gmc")
    assert cs[0] == dict(instance="i", estimator=p.estimators[0], d=0, eps=0.2, G=8)


def test_label():
    assert V5.label == f"{V5.name}@{V5.sha256[:12]}" and len(V5.sha256) == 64
    assert sp.load_protocol(sp.V5_PATH, quick=True).label.endswith("+quick")


# --- loading -------------------------------------------------------------------------------------------------------------

def _write(tmp_path, text):
    p = tmp_path / "p.toml"
    p.write_text(text)
    return p


def test_load_refuses_unknown_fields_and_quick_keys(tmp_path):
    base = sp.V5_PATH.read_text()
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['bogus'\]"):
        sp.load_protocol(_write(tmp_path, "bogus = 1\n" + base))
    with pytest.raises(ValueError, match="may override only"):
        sp.load_protocol(_write(tmp_path, base + "\n[quick]\nalpha = 0.1\n" if "[quick]" not in base else
                                base.replace("[quick]", "[quick]\nalpha = 0.1", 1)))


def test_load_requires_fields_and_tables(tmp_path):
    base = sp.V5_PATH.read_text()
    lines = [ln for ln in base.splitlines() if not ln.startswith("margin ")]
    with pytest.raises(ValueError, match="lacks the field 'margin'"):
        sp.load_protocol(_write(tmp_path, "\n".join(lines)))
    with pytest.raises(ValueError, match=r"must be a list"):
        sp.load_protocol(_write(tmp_path, base.replace("delays = [", "delays = 3 #[", 1)))


def test_table_keys():
    with pytest.raises(ValueError, match=r"must be a table \[primary\]"):
        sp._table_keys({"primary": 3}, "primary", {"d"})
    with pytest.raises(ValueError, match=r"lacks the key\(s\) \['G'\]"):
        sp._table_keys({"primary": {"d": 1}}, "primary", {"d", "G"})
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['x'\]"):
        sp._table_keys({"primary": {"d": 1, "x": 2}}, "primary", {"d"}, {"y"})
    sp._table_keys({"primary": {"d": 1, "y": 2}}, "primary", {"d"}, {"y"})


def test_quick_overlay():
    q = sp._overlay_quick(V5, {"eval_seeds": [100, 101]})
    assert q.quick is True and q.eval_seeds == (100, 101)
    with pytest.raises(ValueError, match="quick.eval_seeds must be a list"):
        sp._overlay_quick(V5, {"eval_seeds": 100})
    with pytest.raises(ValueError, match=r"^\[quick\]: protocol field tune_seeds/eval_seeds"):
        sp._overlay_quick(V5, {"eval_seeds": [100]})
    assert sp._overlay_quick(V5, {"c5_G": [2, 4]}).c5["G"] == [2, 4]
    for bad_G in ([2], [2, 2], [0, 2], [2.0, 4]):
        with pytest.raises(ValueError, match="quick.c5_G"):
            sp._overlay_quick(V5, {"c5_G": bad_G})
    with pytest.raises(ValueError, match="quick.c5_G must be a list"):
        sp._overlay_quick(V5, {"c5_G": 4})


def test_quick_overlay_v1_keeps_the_c5_group_sizes_of_the_quick_grid():
    assert V1.G == (4, 8, 32) and V1.c5["G"] == [4, 8, 32]
    assert sp._overlay_quick(V1, {"G": [4, 8]}).c5["G"] == [4, 8]
    assert sp._overlay_quick(V1, {"G": [8]}).c5["G"] == [4, 8, 32]      # one shared G: C5 keeps its own
    assert sp._overlay_quick(V1, {"G": [4, 8, 32]}).c5["G"] == [4, 8, 32]
    assert sp._overlay_quick(V6, {}).c5 == {}


# --- check_axes -------------------------------------------------------------------------------------------------------

#: check_axes' refusals in full.
AXES_MESSAGES = {
    'G must be integers >= 1 (no silent truncation), got [0]',
    'G must divide budget / n_prompts = 2048 / 1 on instance count-frac (K = budget/(G·n_prompts) steps), got [3]',
    'G must divide budget / n_prompts = 6144 / 8 on instance lm-faithful-exact (K = budget/(G·n_prompts) steps), got [5]',
    'delays must be integers >= 0 (no silent truncation), got [-1]',
    'delays must be integers >= 0 (no silent truncation), got [2.5]',
    'delays must hold at least one value, got ()',
    'eps must be finite numbers > 0, got [True]',
    'eps must be finite numbers > 0, got [inf]',
    'eta_factors must be finite numbers > 0, got [-1.0]',
    'eta_factors must be finite numbers > 0, got [0.0]',
    "instances: unknown ['nope']; known: count-frac, count-frac-bernoulli, prev-random-1, prev-random-2, feature-loglinear, count-long-bernoulli, feature-lm-bernoulli, lm-faithful-exact",
    'seeds must be integers [0, 2³²) (no silent truncation), got [-1]',
    'seeds must be integers [0, 2³²) (no silent truncation), got [4294967296]',
    'seeds must not repeat a value (a repeat doubles n), got [1, 1]',
    'tuned_delays must be integers >= 0 (no silent truncation), got [True]',
    'tuned_delays must hold at least one value, got ()',
    'tuned_delays must not repeat a value (a repeat doubles n), got [8, 8]',
}

AX = dict(instances=["count-frac"], delays=[0, 8], eta_factors=[1.0], G=[8], eps=[0.2], estimators=["gmc"], seeds=[1, 2])


def axes(**kw):
    return sp.check_axes(V5, **{**AX, **kw})


def test_check_axes_accepts_a_valid_map():
    axes()
    axes(tuned_delays=[0], seeds=[0, 2 ** 32 - 1], G=[1, 8])


@pytest.mark.parametrize("kw,match", [
    (dict(delays=[]), "delays must hold at least one value"), (dict(seeds=[1, 1]), "seeds must not repeat"),
    (dict(tuned_delays=[8, 8]), "tuned_delays must not repeat"), (dict(tuned_delays=[]), "tuned_delays must hold"),
    (dict(delays=[0, 2.5]), r"delays must be integers \[0, inf\)|delays must be integers >= 0"),
    (dict(delays=[-1]), "delays must be integers >= 0"), (dict(tuned_delays=[True]), "tuned_delays must be integers"),
    (dict(G=[0]), "G must be integers >= 1"), (dict(seeds=[2 ** 32]), r"seeds must be integers \[0, 2³²\)"),
    (dict(seeds=[-1]), "seeds must be integers"), (dict(G=[3]), "G must divide budget / n_prompts = 2048 / 1"),
    (dict(instances=["lm-faithful-exact"], G=[5]), r"6144 / 8 on instance lm-faithful-exact .* got \[5\]"),
    (dict(eta_factors=[0.0]), "eta_factors must be finite numbers > 0"), (dict(eps=[math.inf]), "eps must be finite"),
    (dict(eps=[True]), "eps must be finite"), (dict(eta_factors=[-1.0]), "eta_factors"),
    (dict(instances=["nope"]), r"instances: unknown \['nope'\]"),
])
def test_check_axes_refuses(kw, match):
    with pytest.raises(ValueError, match=match) as ei:
        axes(**kw)
    if os.environ.get("SPEC_MESSAGES_RECORD"):
        with open(os.environ["SPEC_MESSAGES_RECORD"], "a") as fh:
            fh.write(json.dumps(str(ei.value)) + "\n")
    else:
        assert str(ei.value) in AXES_MESSAGES, f"unexpected message: {str(ei.value)!r}"


@pytest.mark.parametrize("path", [sp.V1_PATH, sp.V4_PATH, sp.V5_PATH, sp.V6_PATH])
def test_load_at_test_time_gives_the_protocol_loaded_at_import(path):
    # mutmut forks each mutant from a process that imported this module: the module-level protocols are the
    # unmutated code's, so a fresh load must equal them field by field (hash included)
    fresh = sp.load_protocol(path)
    old = {sp.V1_PATH: V1, sp.V4_PATH: V4, sp.V5_PATH: V5, sp.V6_PATH: V6}[path]
    assert fresh == old and fresh.sha256 == old.sha256 and fresh.label == old.label
    assert sp.load_protocol(path, quick=True).quick is True and fresh.quick is False
    assert sp.load_protocol() == V5 and sp.DEFAULT_PATH == sp.V5_PATH


# --- loading, against the mutmut survivors (issue 55) ---------------------------------------------------------------

def _without_quick(text):
    return text[:text.index("[quick]")] if "[quick]" in text else text


def test_a_file_without_a_quick_table_loads(tmp_path):
    p = sp.load_protocol(_write(tmp_path, _without_quick(sp.V5_PATH.read_text())))
    assert p.quick is False and p.eval_seeds == V5.eval_seeds
    assert sp.load_protocol(_write(tmp_path, _without_quick(sp.V5_PATH.read_text())), quick=True).quick is True


def test_the_hash_is_not_a_field_of_the_file(tmp_path):
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['sha256'\]"):
        sp.load_protocol(_write(tmp_path, 'sha256 = "abc"\n' + sp.V5_PATH.read_text()))


def test_c5_table_required_below_v6_and_validated_in_v6(tmp_path):
    text = sp.V5_PATH.read_text()
    start = text.index("[c5]")
    end = text.index("\n[", start + 1)
    with pytest.raises(ValueError, match=r"must be a table \[c5\]"):
        sp.load_protocol(_write(tmp_path, text[:start] + text[end + 1:]))
    v6 = _without_quick(sp.V6_PATH.read_text())
    c5 = '\n[c5]\nsteps = 64\nestimators = ["gmc", "tic"]\nG = [2, 4]\nd = 8\neps = 0.2\nslope_margin = 0.1\n' \
         'flat_margin = 0.02\n'
    assert sp.load_protocol(_write(tmp_path, v6 + c5)).c5["G"] == [2, 4]
    with pytest.raises(ValueError, match=r"\[c5\] has unknown key"):
        sp.load_protocol(_write(tmp_path, v6 + c5 + "bogus = 1\n"))


def test_quick_overlay_of_scalar_fields():
    q = sp._overlay_quick(V5, {"budget": 4096, "G": [8]})
    assert q.budget == 4096 and q.G == (8,)


def test_instance_settings_message_names_the_instance_budget():
    bad(V5, "instance_settings.count-frac", instance_settings={"count-frac": {"n_prompts": 5, "budget": 48}})


# --- against the mutmut survivors, round two --------------------------------------------------------------------------

def test_quick_c5_G_message_and_smallest_sizes():
    assert sp._overlay_quick(V5, {"c5_G": [1, 2]}).c5["G"] == [1, 2]
    with pytest.raises(ValueError, match=r"^protocol field quick\.c5_G must be at least two distinct integers >= 1 "
                                         r"\(got \[0, 2\]\)$"):
        sp._overlay_quick(V5, {"c5_G": [0, 2]})


def test_table_keys_message_lists_every_valid_key():
    with pytest.raises(ValueError, match=re.escape("protocol table [primary] has unknown key(s) ['x']; valid: ['d', 'y']")):
        sp._table_keys({"primary": {"d": 1, "x": 2}}, "primary", {"d"}, {"y"})


def test_quick_must_be_a_table(tmp_path):
    text = _without_quick(sp.V5_PATH.read_text())
    with pytest.raises(ValueError, match=r"^protocol field quick must be a table \[quick\] of overrides, got 1$"):
        sp.load_protocol(_write(tmp_path, "quick = 1\n" + text))


def test_every_registered_version_loads_at_test_time():
    assert [sp.load_protocol(p).version for p in (sp.V1_PATH, sp.V2_PATH, sp.V3_PATH, sp.V4_PATH, sp.V5_PATH, sp.V6_PATH)] \
        == [1, 2, 3, 4, 5, 6]
    with pytest.raises(ValueError, match=r"^protocol field version must be 1, 2, 3, 4, 5 or 6$"):
        replace(V5, version=7)


def test_instance_settings_divide_the_instances_own_budget():
    p = ok(V5, instance_settings={"count-frac": {"budget": 2400, "n_prompts": 3}})
    assert p.steps("count-frac", 8) == 100


def test_more_boundaries():
    assert ok(V5, budget=1, G=(1,), instance_settings={}, c5=c5(G=[1, 2]), primary=dict(eps=0.2, G=1, d=8)).budget == 1
    bad(V2, "lockin_nJ", lockin_nJ=5.0)
    from simulate.training.config import REGISTERED_ESTIMATORS
    assert ok(V5, estimators=tuple(REGISTERED_ESTIMATORS)).estimators == tuple(REGISTERED_ESTIMATORS)
    assert ok(V5, c5=c5(estimators=list(V5.estimators))).c5["estimators"] == list(V5.estimators)
    assert ok(V5, eta_log2=(0.125, 1.125)).eta_log2 == (0.125, 1.125)   # whole steps apart, not at whole steps
    bad(V5, "c5.G/c5.steps", c5=c5(G=[2.5, 4]))
    assert isinstance(V5.steps("count-frac", 8), int)


def test_seed_set_messages_in_full():
    bad(V5, "tune_seeds/eval_seeds", tune_seeds=(7,))
    bad(V5, "tune_seeds/eval_seeds", tune_seeds=(1, 2), eval_seeds=(2, 3))


def test_v6_family_size_and_budget_range_ends_are_accepted():
    from simulate.protocol.families import family_seeds

    fams = {"tabular": 64, "lm-like": 1}
    inst = tuple(f"{fam}-{s}" for fam, n in fams.items() for s in family_seeds(V6.family_root, fam, n))
    p = ok(V6, families=fams, instances=inst, family_budget={"tabular": 1, "lm-like": 1})
    assert p.families["tabular"] == 64 and p.family_budget["tabular"] == 1


def test_c5_smallest_steps_accepted_and_a_bad_group_size_named_at_its_first_check():
    assert ok(V5, c5=c5(steps=1)).c5["steps"] == 1                      # steps >= 1: one step is enough
    for G in ([2, 0], [2, 1.5], [0, 2, 4]):
        with pytest.raises(ValueError) as ei:
            replace(V5, c5=c5(G=G))
        assert str(ei.value) == "protocol field c5.G/c5.steps must be distinct integers >= 1 (G a list of them)", G


def test_protocols_are_hashable_their_dict_fields_left_out_of_the_hash():
    """(issue 55, a survivor of the independent sample) a frozen protocol hashes on its scalar and tuple fields; the
    dict fields (c5, instance_settings, …) are declared hash=False, so a protocol with per-instance settings hashes too."""
    assert hash(V5) == hash(replace(V5)) and hash(V6) == hash(replace(V6))
    assert isinstance(hash(replace(V5, instance_settings={})), int)


def test_protocols_are_frozen_and_versions_before_3_have_no_d0_rate_premise():
    import dataclasses
    with pytest.raises(dataclasses.FrozenInstanceError):
        V5.budget = 1
    assert sp.load_protocol(sp.V1_PATH).rate_premise_d0 is False      # the premise rule came with v3 (its TOML sets it)
    assert V5.rate_premise_d0 is True


def test_a_single_delay_is_refused_as_delays():
    bad(V5, "delays", delays=(0,))
