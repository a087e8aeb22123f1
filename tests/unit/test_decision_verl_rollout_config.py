"""verl's rollout-correction options (asyncgrpo/estimators/maps/verl_rollout_config.py) from its docstring's table, on
tiny batches: threshold parsing, validation, presets and verl's YAML defaults, the IS weights (TIS, IcePop's inclusive
bounds, batch normalisation) and every rejection statistic (issue 55). No verl needed; the parity with verl itself is
tests/test_peer_verl_*.py."""
import math

import pytest
import torch

from asyncgrpo.estimators.maps import verl_rollout_config as vc
from asyncgrpo.estimators.maps.verl_rollout_config import RolloutCorrection, parse_is_threshold, parse_rs

D = torch.float64
L2 = math.log(2.0)


def t(x):
    return torch.tensor(x, dtype=D)


def flat(x):
    return x.flatten().tolist()


def approx2(rows, **kw):
    return pytest.approx([v for row in rows for v in row], **kw)


# --- parsing ------------------------------------------------------------------------------------------------------------

def test_is_threshold_c_or_a_c():
    assert parse_is_threshold(2.0) == (2.0, None) and parse_is_threshold(3) == (3.0, None)
    assert parse_is_threshold(" 2.5 ") == (2.5, None)
    assert parse_is_threshold("0.5_5.0") == (5.0, 0.5) and parse_is_threshold(" 1_1 ") == (1.0, 1.0)
    for bad, match in ((0.0, "C \\(or 'a_C'\\) must be a finite number > 0, got 0.0"), (-1, "> 0"), (True, "> 0"),
                       (math.inf, "> 0"), (math.nan, "> 0"), ("x", "C \\(or 'a_C'\\) must be a number > 0, got 'x'"),
                       (None, "must be a number > 0, got None"),
                       ("0_2", "the lower bound a of 'a_C' must be a finite number > 0, got '0'"),
                       ("1_-2", "the upper bound C must be a finite number > 0"),
                       ("3_2", "rollout_is_threshold: the lower bound must be <= the upper bound, got '3_2'")):
        with pytest.raises(ValueError, match=match):
            parse_is_threshold(bad)


def test_rs_options_and_thresholds():
    assert parse_rs("seq_sum_k1", "0.5_2.0") == (("seq_sum_k1", 0.5, 2.0),)
    assert parse_rs("token_k1", 2.0) == (("token_k1", 0.5, 2.0),)            # "b" alone: a = 1/b
    assert parse_rs("token_k1", "4") == (("token_k1", 0.25, 4.0),)
    assert parse_rs("token_k1", "1") == (("token_k1", 1.0, 1.0),)
    assert parse_rs("seq_mean_k3", 0.01) == (("seq_mean_k3", None, 0.01),)
    # deduplicated in order; one spec shared, or one per option
    assert parse_rs(" seq_max_k2 , token_k1,seq_max_k2,", "3") == (("seq_max_k2", None, 3.0), ("token_k1", 1 / 3, 3.0))
    assert parse_rs("token_k2,seq_mean_k1", "0.1, 0.9_1.1") == (("token_k2", None, 0.1), ("seq_mean_k1", 0.9, 1.1))
    for rs, thr, match in (
            (None, 1.0, "rollout_rs must be None or a comma list of token_k1, token_k2, "),
            ("", 1.0, "rollout_rs must be None or a comma list"), (" , ", 1.0, "rollout_rs must be None"),
            (3, 1.0, "rollout_rs must be None"),
            ("token_k4", 1.0, "rollout_rs: unknown option 'token_k4'; valid: token_k1, "),
            ("token_k1", None, "rollout_rs_threshold must be given with rollout_rs='token_k1'"),
            ("token_k1", True, "rollout_rs_threshold must be given"),
            ("token_k1,token_k2,token_k3", "1,2", "must hold one spec shared by all options or 3 \\(one per option"),
            ("token_k1", "0.5", r"rollout_rs_threshold \(option token_k1\): the lower bound must be <= the upper bound"),
            ("token_k1", "2_1", "the lower bound must be <= the upper bound, got '2_1'"),
            ("token_k1", "0_1", "the lower ratio bound a must be a finite number > 0"),
            ("token_k1", "1_0", "the upper bound b must be a finite number > 0"),
            ("token_k1", 0.0, "the upper ratio bound b must be a finite number > 0"),
            ("token_k2", "0.1_2", r"\(option token_k2\): a k2/k3 option takes one upper bound \(no '_'\), got '0.1_2'"),
            ("token_k3", -1.0, r"\(option token_k3\): the upper bound must be a finite number > 0")):
        with pytest.raises(ValueError, match=match):
            parse_rs(rs, thr)


def test_validation_names_the_option():
    for bad, match in ((dict(rollout_is="row"), "rollout_is must be None, 'token' or 'sequence', got 'row'"),
                       (dict(rollout_is_batch_normalize=1), "rollout_is_batch_normalize must be True or False, got 1"),
                       (dict(bypass_mode="yes"), "bypass_mode must be True or False"),
                       (dict(loss_type="ppo"), "loss_type must be one of ppo_clip, reinforce, got 'ppo'"),
                       (dict(rollout_is_threshold=0), "rollout_is_threshold"),
                       (dict(rollout_rs="token_k1"), "rollout_rs_threshold must be given")):
        with pytest.raises(ValueError, match=match):
            RolloutCorrection(**bad)
    c = RolloutCorrection()
    assert (c.rollout_is, c.rollout_is_threshold, c.is_upper, c.is_lower, c.rs) == ("sequence", 2.0, 2.0, None, ())
    assert (c.rollout_is_batch_normalize, c.bypass_mode, c.loss_type, c.rollout_rs) == (False, False, "ppo_clip", None)
    c = RolloutCorrection(rollout_is_threshold=None)
    assert (c.is_upper, c.is_lower) == (None, None)
    c = RolloutCorrection(rollout_is="token", rollout_is_threshold="0.5_5", rollout_rs="token_k2", rollout_rs_threshold=1)
    assert (c.is_upper, c.is_lower, c.rs) == (5.0, 0.5, (("token_k2", None, 1.0),))
    assert RolloutCorrection(rollout_is=None, rollout_is_batch_normalize=True, bypass_mode=True,
                             loss_type="reinforce").rollout_is is None


def test_from_config_presets_estimators_and_verls_yaml_defaults():
    assert vc.YAML_DEFAULTS["rollout_is"] is None
    c = RolloutCorrection.from_config()  # verl's shipped YAML: no IS, no rejection
    assert c.rollout_is is None and c.rs == () and c.rollout_is_threshold == 2.0
    assert RolloutCorrection.from_config({"rollout_is": "token"}).rollout_is == "token"
    assert RolloutCorrection.from_config({"rollout_rs": "token_k2", "rollout_rs_threshold": 2.0}).rollout_is is None

    class Node:  # an OmegaConf-like node: has items(), is not a Mapping
        def items(self):
            return [("rollout_is", "sequence"), ("rollout_is_threshold", 3.0)]

    c = RolloutCorrection.from_config(Node(), rollout_is_batch_normalize=True)
    assert (c.rollout_is, c.is_upper, c.rollout_is_batch_normalize) == ("sequence", 3.0, True)
    p = RolloutCorrection.from_config("decoupled_geo_rs")
    assert p.rollout_is == "sequence" or p.rollout_is is None  # a preset's options as verl's classmethod gives them
    assert p.rollout_is is None and p.rs == (("seq_mean_k1", 0.999, 1.001),)
    assert RolloutCorrection.from_config("decoupled_token_is").rollout_is == "token"
    # a preset leaves the rest at the dataclass defaults (sequence IS for a preset that names none)
    assert RolloutCorrection.from_config("bypass_ppo_clip").rollout_is is None
    assert RolloutCorrection.from_config("verl_seq_rs") == RolloutCorrection.from_config("decoupled_seq_is_rs")
    assert RolloutCorrection.from_config("verl_tok_tis", rollout_is_threshold=3.0).is_upper == 3.0
    assert vc.ESTIMATOR_PRESETS == {"verl_tok_tis": "decoupled_token_is", "verl_seq_tis": "decoupled_seq_is",
                                    "verl_seq_rs": "decoupled_seq_is_rs", "verl_geo_rs": "decoupled_geo_rs"}
    with pytest.raises(ValueError, match="unknown rollout-correction preset 'nope'; known: decoupled_token_is, "):
        RolloutCorrection.from_config("nope")
    with pytest.raises(ValueError, match="rollout_correction must be a mapping of verl's options, a preset name or None, "
                                         "got int"):
        RolloutCorrection.from_config(3)
    with pytest.raises(ValueError, match=r"unknown rollout_correction option\(s\) a, is_upper; known: rollout_is, "):
        RolloutCorrection.from_config({"a": 1}, is_upper=2.0)
    for name, opts in vc.PRESETS.items():
        RolloutCorrection.from_config(name)  # every preset is valid
        assert set(opts) <= {"rollout_is", "rollout_is_threshold", "rollout_rs", "rollout_rs_threshold", "bypass_mode",
                             "loss_type"}


# --- IS weights ----------------------------------------------------------------------------------------------------------

def test_token_tis_truncates_and_icepop_keeps_its_bounds_inclusive():
    lr = t([[L2, math.log(4.0), math.log(0.25)], [math.log(0.5), 30.0, 0.0]])
    m = torch.tensor([[True, True, True], [True, True, False]])
    w, met = RolloutCorrection(rollout_is="token", rollout_is_threshold=2.0).weights(lr, m)
    assert flat(w) == approx2([[2.0, 2.0, 0.25], [0.5, 2.0, 0.0]])
    assert met["rollout_is_ratio_fraction_high"] == pytest.approx(2 / 5)   # 4 and e^20 above C = 2 (2 itself is not)
    assert met["rollout_is_ratio_fraction_low"] == pytest.approx(1 / 5)    # 0.25 below 1/C; 0.5 is not
    w, met = RolloutCorrection(rollout_is="token", rollout_is_threshold="0.5_2").weights(lr, m)
    assert flat(w) == approx2([[2.0, 0.0, 0.0], [0.5, 0.0, 0.0]])            # a ≤ ρ ≤ C, both ends kept (verl)
    assert met["rollout_is_ratio_fraction_low"] == pytest.approx(1 / 5)
    w, met = RolloutCorrection(rollout_is="token", rollout_is_threshold="0.25_4").weights(lr, m)
    assert flat(w) == approx2([[2.0, 4.0, 0.25], [0.5, 0.0, 0.0]])
    assert met["rollout_is_ratio_fraction_high"] == pytest.approx(1 / 5)
    assert met["rollout_is_ratio_fraction_low"] == 0.0
    # the log ratio is clamped to ±20 before exp
    w, _ = RolloutCorrection(rollout_is="token", rollout_is_threshold=1e12).weights(t([[30.0, -30.0]]),
                                                                                   torch.ones(1, 2, dtype=torch.bool))
    assert flat(w) == pytest.approx([math.exp(20.0), math.exp(-20.0)])


def test_sequence_is_weighs_every_token_of_the_row_by_the_summed_ratio():
    lr = t([[L2, L2, 9.0], [-L2, 0.0, 0.0], [0.1, -0.1, 0.0]])
    m = torch.tensor([[True, True, False], [True, True, True], [True, True, True]])
    w, met = RolloutCorrection(rollout_is="sequence", rollout_is_threshold=5.0).weights(lr, m)
    assert flat(w) == approx2([[4.0, 4.0, 0.0], [0.5, 0.5, 0.5], [1.0, 1.0, 1.0]])
    assert met["rollout_is_ratio_fraction_high"] == 0.0 and met["rollout_is_ratio_fraction_low"] == 0.0
    w, met = RolloutCorrection(rollout_is="sequence", rollout_is_threshold=3.0).weights(lr, m)
    assert flat(w)[:2] == pytest.approx([3.0, 3.0])
    assert met["rollout_is_ratio_fraction_high"] == pytest.approx(1 / 3)
    w, met = RolloutCorrection(rollout_is="sequence", rollout_is_threshold=1.5).weights(lr, m)
    assert met["rollout_is_ratio_fraction_low"] == pytest.approx(1 / 3)    # 0.5 < 1/1.5
    w, met = RolloutCorrection(rollout_is="sequence", rollout_is_threshold="0.5_3").weights(lr, m)
    assert flat(w) == approx2([[0.0, 0.0, 0.0], [0.5, 0.5, 0.5], [1.0, 1.0, 1.0]])
    assert met["rollout_is_ratio_fraction_high"] == pytest.approx(1 / 3) and met["rollout_is_ratio_fraction_low"] == 0
    w, met = RolloutCorrection(rollout_is="sequence", rollout_is_threshold="0.6_3").weights(lr, m)
    assert met["rollout_is_ratio_fraction_low"] == pytest.approx(1 / 3)


def test_no_weights_without_a_level_or_a_threshold():
    m = torch.ones(1, 2, dtype=torch.bool)
    assert RolloutCorrection(rollout_is=None).weights(t([[0.0, 1.0]]), m) == (None, {})
    assert RolloutCorrection(rollout_is="token", rollout_is_threshold=None).weights(t([[0.0, 1.0]]), m) == (None, {})


def test_batch_normalize_divides_by_the_mean_over_tokens_or_rows():
    lr = t([[L2, 0.0], [math.log(0.5), 0.0]])
    m = torch.tensor([[True, True], [True, False]])
    w, met = RolloutCorrection(rollout_is="token", rollout_is_threshold=5.0, rollout_is_batch_normalize=True).weights(lr, m)
    mean = (2.0 + 1.0 + 0.5) / 3
    assert flat(w) == approx2([[2.0 / mean, 1.0 / mean], [0.5 / mean, 0.0]])
    assert met["rollout_is_batch_norm_factor"] == pytest.approx(mean)
    # sequence: the mean over rows with a real token of each row's mean weight (row 2 empty)
    lr = t([[L2, 0.0], [math.log(0.5), 0.0], [5.0, 5.0]])
    m = torch.tensor([[True, True], [True, False], [False, False]])
    w, met = RolloutCorrection(rollout_is="sequence", rollout_is_threshold=5.0,
                               rollout_is_batch_normalize=True).weights(lr, m)
    assert met["rollout_is_batch_norm_factor"] == pytest.approx((2.0 + 0.5) / 2)
    assert flat(w) == approx2([[2.0 / 1.25, 2.0 / 1.25], [0.5 / 1.25, 0.0], [0.0, 0.0]])
    # a mean ≤ 1e-8 leaves the weights as they are (factor 1): e^{−20} ≈ 2e-9
    w, met = RolloutCorrection(rollout_is="token", rollout_is_threshold=2.0,
                               rollout_is_batch_normalize=True).weights(t([[-20.0, -25.0]]), torch.ones(1, 2, dtype=torch.bool))
    assert flat(w) == [math.exp(-20.0)] * 2 and met["rollout_is_batch_norm_factor"] == 1.0
    w, met = RolloutCorrection(rollout_is="token", rollout_is_threshold=2.0,
                               rollout_is_batch_normalize=True).weights(t([[-18.0, -18.0]]), torch.ones(1, 2, dtype=torch.bool))
    assert flat(w) == pytest.approx([1.0, 1.0]) and met["rollout_is_batch_norm_factor"] == pytest.approx(math.exp(-18.0))
    w, met = RolloutCorrection(rollout_is="token", rollout_is_threshold=5.0).weights(t([[L2]]), torch.ones(1, 1, dtype=torch.bool))
    assert "rollout_is_batch_norm_factor" not in met and flat(w) == [2.0]


# --- rejection -------------------------------------------------------------------------------------------------------------

def test_token_rejection_k1_k2_k3_with_inclusive_bounds():
    lr = t([[L2, -L2, 0.0], [math.log(4.0), 0.0, 0.0]])
    m = torch.tensor([[True, True, True], [True, True, False]])
    kept, met = RolloutCorrection(rollout_is=None, rollout_rs="token_k1", rollout_rs_threshold=2.0).keep(lr, m)
    assert kept.tolist() == [[True, True, True], [False, True, False]]  # k1 = −ℓ ∈ [log ½, log 2]: ±log 2 kept
    assert met["rollout_rs_masked_fraction"] == pytest.approx(1 / 5)
    assert met["rollout_rs_seq_masked_fraction"] == pytest.approx(1 / 2)
    assert met["rollout_rs_token_k1_masked_fraction"] == pytest.approx(1 / 5)
    assert met["rollout_rs_token_k1_seq_masked_fraction"] == pytest.approx(1 / 2)
    kept, _ = RolloutCorrection(rollout_is=None, rollout_rs="token_k1", rollout_rs_threshold="1_4").keep(lr, m)
    assert kept.tolist() == [[False, True, True], [False, True, False]]  # −ℓ ≥ 0 only
    kept, _ = RolloutCorrection(rollout_is=None, rollout_rs="token_k2", rollout_rs_threshold=L2 ** 2 / 2).keep(lr, m)
    assert kept.tolist() == [[True, True, True], [False, True, False]]  # k2 = ℓ²/2 ≤ b, the bound itself kept
    b = 2.0 - 1.0 - L2
    kept, _ = RolloutCorrection(rollout_is=None, rollout_rs="token_k3", rollout_rs_threshold=b).keep(lr, m)
    assert kept.tolist() == [[True, True, True], [False, True, False]]  # k3(log 2) = 1 − log 2 > k3(−log 2)
    kept, _ = RolloutCorrection(rollout_is=None, rollout_rs="token_k3", rollout_rs_threshold=b * 0.999).keep(lr, m)
    assert kept.tolist() == [[False, True, True], [False, True, False]]


def test_sequence_rejection_sum_mean_max_and_an_empty_row():
    lr = t([[0.3, 0.3, 7.0], [-0.1, 0.0, 0.0], [0.0, 0.0, 0.0]])
    m = torch.tensor([[True, True, False], [True, True, True], [False, False, False]])
    # seq_sum_k1: −0.6 (row 0), 0.1 (row 1), 0 (the empty row): bounds e^{−0.5}..e^{0.5}
    kept, met = RolloutCorrection(rollout_is=None, rollout_rs="seq_sum_k1",
                                  rollout_rs_threshold=f"{math.exp(-0.5)}_{math.exp(0.5)}").keep(lr, m)
    assert kept.tolist() == [[False, False, False], [True, True, True], [False, False, False]]
    assert met["rollout_rs_masked_fraction"] == pytest.approx(2 / 5)
    assert met["rollout_rs_seq_masked_fraction"] == pytest.approx(1 / 3)        # over all rows
    assert met["rollout_rs_seq_sum_k1_seq_masked_fraction"] == pytest.approx(1 / 2)  # over rows with a token
    # seq_mean_k1: −0.3 per row 0 token mean, −0.1/3 for row 1
    kept, _ = RolloutCorrection(rollout_is=None, rollout_rs="seq_mean_k1",
                                rollout_rs_threshold=f"{math.exp(-0.35)}_{math.exp(0.35)}").keep(lr, m)
    assert kept[:2].tolist() == [[True, True, False], [True, True, True]]
    kept, _ = RolloutCorrection(rollout_is=None, rollout_rs="seq_mean_k1",
                                rollout_rs_threshold=f"{math.exp(-0.25)}_{math.exp(0.25)}").keep(lr, m)
    assert kept[:2].tolist() == [[False, False, False], [True, True, True]]
    # seq_max_k2: max(0.045, 0.045) vs 0.005; the padded 7.0 is not a token
    kept, _ = RolloutCorrection(rollout_is=None, rollout_rs="seq_max_k2", rollout_rs_threshold=0.045 + 1e-12).keep(lr, m)
    assert kept.tolist() == [[True, True, False], [True, True, True], [False, False, False]]
    kept, _ = RolloutCorrection(rollout_is=None, rollout_rs="seq_max_k2", rollout_rs_threshold=0.04).keep(lr, m)
    assert kept[:2].tolist() == [[False, False, False], [True, True, True]]
    kept, _ = RolloutCorrection(rollout_is=None, rollout_rs="seq_sum_k2", rollout_rs_threshold=0.08).keep(lr, m)
    assert kept[0].tolist() == [False, False, False]                          # 0.09 > 0.08 (sum, not max)
    kept, _ = RolloutCorrection(rollout_is=None, rollout_rs="seq_mean_k2", rollout_rs_threshold=0.046).keep(lr, m)
    assert kept[0].tolist() == [True, True, False]                            # mean 0.045
    # chained: a token is kept only if every criterion passes; an empty row's seq_max statistic is 0, not −inf
    kept, met = RolloutCorrection(rollout_is=None, rollout_rs="seq_max_k2,token_k1",
                                  rollout_rs_threshold="1.0, 0.9_1.15").keep(lr, m)
    assert kept.tolist() == [[False, False, False], [True, True, True], [False, False, False]]
    assert set(met) >= {"rollout_rs_seq_max_k2_masked_fraction", "rollout_rs_token_k1_masked_fraction"}
    assert met["rollout_rs_token_k1_masked_fraction"] == pytest.approx(2 / 5)
    assert met["rollout_rs_seq_max_k2_masked_fraction"] == 0.0
    kept, met = RolloutCorrection(rollout_is=None).keep(lr, m)
    assert torch.equal(kept, m) and met == {}


def test_rejection_clamps_each_token_before_the_statistic():
    lr = t([[25.0, -20.0]])  # the docstring's example: seq_sum_k1 statistic 0 (each token clamped to ±20)
    m = torch.ones(1, 2, dtype=torch.bool)
    kept, _ = RolloutCorrection(rollout_is=None, rollout_rs="seq_sum_k1", rollout_rs_threshold="1_1").keep(lr, m)
    assert kept.tolist() == [[True, True]]
    w, _ = RolloutCorrection(rollout_is="sequence", rollout_is_threshold=1e9).weights(lr, m)
    assert flat(w) == pytest.approx([math.exp(5.0)] * 2)  # the IS weight clamps the sum


# --- issue 55, second round: messages in full, one-row batches, 0/1 masks ------------------------------------------

def test_threshold_messages_name_the_option_and_the_bound_in_full():
    import re
    cases = [
        (lambda: parse_is_threshold("x_2"), "rollout_is_threshold: the lower bound a of 'a_C' must be a number > 0, got 'x'"),
        (lambda: parse_is_threshold("0.5_y"), "rollout_is_threshold: the upper bound C must be a number > 0, got 'y'"),
        (lambda: parse_rs("token_k1", "x_2"),
         "rollout_rs_threshold (option token_k1): the lower ratio bound a must be a number > 0, got 'x'"),
        (lambda: parse_rs("token_k1", "0.5_y"),
         "rollout_rs_threshold (option token_k1): the upper bound b must be a number > 0, got 'y'"),
        (lambda: parse_rs("token_k1", "y"),
         "rollout_rs_threshold (option token_k1): the upper ratio bound b must be a number > 0, got 'y'"),
        (lambda: RolloutCorrection.from_config("nope"),
         f"unknown rollout-correction preset 'nope'; known: {', '.join(vc.PRESETS)} (or "
         f"{', '.join(vc.ESTIMATOR_PRESETS)})"),
    ]
    for call, msg in cases:
        with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
            call()


def test_one_threshold_per_option_stays_with_its_option():
    assert parse_rs("token_k1,token_k2", "0.5_2,3") == (("token_k1", 0.5, 2.0), ("token_k2", None, 3.0))
    assert parse_rs("token_k2,token_k3", "3,0.2") == (("token_k2", None, 3.0), ("token_k3", None, 0.2))


def test_one_row_batches_normalise_and_count_by_that_row():
    lr = t([[math.log(2.0), math.log(4.0)]])
    m = torch.ones(1, 2, dtype=torch.bool)
    w, met = RolloutCorrection(rollout_is="sequence", rollout_is_threshold=100.0,
                               rollout_is_batch_normalize=True).weights(lr, m)
    assert met["rollout_is_batch_norm_factor"] == pytest.approx(8.0) and flat(w) == pytest.approx([1.0, 1.0])
    kept, met = RolloutCorrection(rollout_rs="seq_sum_k1", rollout_rs_threshold="0.5_2.0").keep(lr, m)
    assert met["rollout_rs_seq_sum_k1_seq_masked_fraction"] == 1.0 and not kept.any()


def test_a_0_1_float_mask_is_read_as_booleans():
    lr = t([[math.log(2.0), 5.0], [math.log(0.5), 0.0]])
    mb = torch.tensor([[True, False], [True, True]])
    rc = RolloutCorrection(rollout_is="token", rollout_is_threshold=5.0, rollout_rs="token_k1",
                           rollout_rs_threshold="0.25_3.0")
    w_b, _ = rc.weights(lr, mb)
    k_b, _ = rc.keep(lr, mb)
    w_f, _ = rc.weights(lr, mb.to(torch.float64))
    k_f, _ = rc.keep(lr, mb.to(torch.float64))
    assert torch.equal(w_b, w_f) and torch.equal(k_b, k_f) and k_f.dtype == torch.bool


def test_a_threshold_splits_at_its_first_underscore_as_verl_does():
    """verl 0.9.1 (rollout_corr_helper) reads ``"a_C"`` with ``spec.split("_", 1)`` and ``float``, which accepts
    underscores between digits: ``"0.5_2_3"`` is a = 0.5, C = 23.0 there, so here too (the map mirrors the peer;
    splitting at the last underscore would read a = 0.52, C = 3.0)."""
    assert parse_is_threshold("0.5_2_3") == (23.0, 0.5)
    assert parse_is_threshold(" 0.25_1_0 ") == (10.0, 0.25)
    (opt, lower, upper), = parse_rs("seq_mean_k1", "0.5_2_3")
    assert (opt, lower, upper) == ("seq_mean_k1", 0.5, 23.0)


# --- cosmic-ray survivors (issue 55, twentieth session) ------------------------------------------------------------

def test_the_parsed_bounds_are_derived_fields_not_options():
    """``is_upper``, ``is_lower`` and ``rs`` come from the thresholds in ``__post_init__``: not constructor arguments,
    not accepted as options, not in the repr (which shows verl's own fields), and the config is immutable."""
    for name in ("is_lower", "rs"):
        with pytest.raises(ValueError, match=f"unknown rollout_correction option.*{name}"):
            RolloutCorrection.from_config({name: 0.5})
        with pytest.raises(TypeError):
            RolloutCorrection(**{name: 0.5})
    r = RolloutCorrection(rollout_is_threshold="0.5_3.0")
    assert (r.is_upper, r.is_lower) == (3.0, 0.5)
    assert all(f" {x}=" not in repr(r) for x in ("is_upper", "is_lower", "rs")) and "rollout_is_threshold=" in repr(r)
    with pytest.raises(AttributeError):
        r.rollout_is = "token"


def test_the_is_fractions_count_ratios_strictly_past_verls_float32_log_bounds():
    """verl: ``log ρ > log C`` and ``log ρ < log(1/C)`` (strict, C's log in float32): a sequence whose summed log
    ratio equals a bound exactly is not counted."""
    hi = float(torch.log(torch.tensor(2.0, dtype=torch.float32)))
    lo = float(torch.log(torch.tensor(0.5, dtype=torch.float32)))
    r = RolloutCorrection(rollout_is="sequence", rollout_is_threshold=2.0)
    lr = torch.tensor([[hi], [lo], [hi + 1e-6], [lo - 1e-6]], dtype=torch.float64)
    _, met = r.weights(lr, torch.ones_like(lr, dtype=torch.bool))
    assert met["rollout_is_ratio_fraction_high"] == 0.25 and met["rollout_is_ratio_fraction_low"] == 0.25


def test_batch_normalize_leaves_a_mean_of_exactly_1e_8_alone():
    """verl normalises only when the mean weight is ``> 1e-8``: at exactly 1e-8 the weights stay and the factor is 1
    (23 tokens; one IcePop-kept token of weight exp(z) with exp(z)/23 == 1e-8 in float64, the rest zeroed)."""
    z = -15.285186528023216
    lr = torch.full((1, 23), -50.0, dtype=torch.float64)
    lr[0, 0] = z
    assert float(torch.exp(torch.tensor(z, dtype=torch.float64))) / 23 == 1e-8
    r = RolloutCorrection(rollout_is="token", rollout_is_threshold="1e-7_2.0", rollout_is_batch_normalize=True)
    w, met = r.weights(lr, torch.ones_like(lr, dtype=torch.bool))
    assert met["rollout_is_batch_norm_factor"] == 1.0 and float(w[0, 0]) == float(torch.exp(lr[0, 0]))
