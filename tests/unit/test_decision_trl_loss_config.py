"""TRL's loss options (asyncgrpo/estimators/maps/trl_loss_config.py) from its docstring's table, on tiny batches: the
validation of every option, the pieces of ``k`` (vLLM ratio, entropy mask, VESPO weight, clipped ratio), each loss
type's normaliser and TRL's metrics (issue 55). No TRL needed; the parity with TRL itself is tests/test_peer_trl_*.py."""
import math
from types import SimpleNamespace

import pytest
import torch

from asyncgrpo.estimators.maps import trl_loss_config as tl
from asyncgrpo.estimators.maps.trl_loss_config import TRLLoss, trl_metrics, trl_policy_loss

D = torch.float64


def approx2(rows, **kw):
    """``pytest.approx`` of a nested list, flattened (compare with ``tensor.flatten().tolist()``)."""
    return pytest.approx([v for row in rows for v in row], **kw)


def t(x, dtype=D):
    return torch.tensor(x, dtype=dtype)


def grad_of(ell, adv, mask=None, **kw):
    """``−∂loss/∂log π_θ`` (= ``ν A k`` per token) with ``log π_old = 0`` and ``log π_θ = ell``."""
    ell = t(ell)
    mask = torch.ones_like(ell, dtype=torch.bool) if mask is None else torch.tensor(mask)
    logp = ell.clone().requires_grad_(True)
    loss = trl_policy_loss(logp, torch.zeros_like(ell), t(adv), mask, **kw)
    loss.backward()
    return -logp.grad


# --- validation -----------------------------------------------------------------------------------------------------

def test_defaults_are_trls():
    c = TRLLoss()
    assert (c.loss_type, c.epsilon, c.epsilon_high, c.delta, c.importance_sampling_level) == ("dapo", 0.2, None, None,
                                                                                              "token")
    assert (c.sapo_temperature_pos, c.sapo_temperature_neg, c.top_entropy_quantile) == (1.0, 1.05, 1.0)
    assert (c.use_vllm, c.vllm_importance_sampling_correction, c.vllm_importance_sampling_mode) == (
        False, True, "sequence_mask")
    assert (c.vllm_importance_sampling_clip_min, c.vllm_importance_sampling_clip_max) == (None, 3.0)
    assert c.max_completion_length == 512 and c.off_policy_mask_threshold is None
    assert (c.vespo_k_pos, c.vespo_lambda_pos, c.vespo_k_neg, c.vespo_lambda_neg) == (2.0, 3.0, 3.0, 2.0)
    assert tl.LOSS_TYPES == ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "sapo", "vespo", "cispo")
    assert tl.ITEM_NORMALISED == ("dapo", "vespo", "cispo") and tl.VESPO_LOG_MIN == math.log(1e-8)
    assert tl.NORMALISER == {"grpo": "grpo", "sapo": "grpo", "bnpo": "bnpo", "dr_grpo": "dr_grpo", "dapo": "dapo",
                             "luspo": "theory", "vespo": "dapo", "cispo": "dapo"}


@pytest.mark.parametrize("bad, match", [
    (dict(loss_type="ppo"), r"loss_type must be one of grpo, bnpo, dr_grpo, dapo, luspo, sapo, vespo, cispo, got 'ppo'"),
    (dict(importance_sampling_level="row"), r"importance_sampling_level must be 'token' or 'sequence', got 'row'"),
    (dict(epsilon=0.0), r"epsilon must be a finite number in \(0, 1\), got 0.0"),
    (dict(epsilon=1.0), r"epsilon must be a finite number in \(0, 1\)"),
    (dict(epsilon=True), "epsilon must be"), (dict(epsilon=math.nan), "epsilon must be"),
    (dict(epsilon="0.2"), "epsilon must be"),
    (dict(epsilon_high=0.0), r"epsilon_high must be a finite number in \(0, inf\)"),
    (dict(epsilon_high=math.inf), "epsilon_high must be"),
    (dict(delta=0), r"delta must be a finite number in \(0, inf\), got 0"), (dict(delta=-1.0), "delta must be"),
    (dict(off_policy_mask_threshold=-0.1), "off_policy_mask_threshold must be"),
    (dict(sapo_temperature_neg=0.0), "sapo_temperature_neg"), (dict(sapo_temperature_pos=-1.0), "sapo_temperature_pos"),
    (dict(top_entropy_quantile=-0.01), r"top_entropy_quantile must be a number in \[0, 1\], got -0.01"),
    (dict(top_entropy_quantile=1.01), "top_entropy_quantile must be"),
    (dict(top_entropy_quantile=True), "top_entropy_quantile must be"),
    (dict(top_entropy_quantile="1"), "top_entropy_quantile must be"),
    (dict(use_vllm=1), "use_vllm must be True or False, got 1"),
    (dict(vllm_importance_sampling_correction=None), "vllm_importance_sampling_correction must be True or False"),
    (dict(vllm_importance_sampling_mode="row_mask"), "vllm_importance_sampling_mode must be one of token_truncate, "
                                                     "token_mask, sequence_truncate, sequence_mask, got 'row_mask'"),
    (dict(vllm_importance_sampling_clip_min=-0.1), r"vllm_importance_sampling_clip_min must be a finite number in "
                                                   r"\[0, inf\)"),
    (dict(vllm_importance_sampling_clip_max=0.0), r"vllm_importance_sampling_clip_max must be a finite number in "
                                                  r"\(0, inf\)"),
    (dict(vllm_importance_sampling_clip_min=2.0, vllm_importance_sampling_clip_max=1.5),
     r"vllm_importance_sampling_clip_min \(2.0\) must be <= vllm_importance_sampling_clip_max \(1.5\)"),
    (dict(use_vllm=True, vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_max=None),
     "a truncate vllm_importance_sampling_mode needs"),
    (dict(vespo_k_pos=math.inf), "vespo_k_pos must be"), (dict(vespo_k_neg=math.nan), "vespo_k_neg must be"),
    (dict(vespo_lambda_pos=-0.5), r"vespo_lambda_pos must be a finite number in \[0, inf\)"),
    (dict(vespo_lambda_neg=-1e-9), "vespo_lambda_neg must be"),
    (dict(loss_type="vespo", use_vllm=True, vllm_importance_sampling_mode="sequence_truncate"),
     "loss_type='vespo' with the vLLM IS correction needs a token vllm_importance_sampling_mode"),
    (dict(max_completion_length=0), "max_completion_length must be an int >= 1, got 0"),
    (dict(max_completion_length=True), "max_completion_length must be"),
    (dict(max_completion_length=2.0), "max_completion_length must be"),
])
def test_bad_options_are_refused_naming_the_option(bad, match):
    with pytest.raises(ValueError, match=match):
        TRLLoss(**bad)


@pytest.mark.parametrize("ok", [
    dict(epsilon=0.999, epsilon_high=5.0, delta=1e-3), dict(top_entropy_quantile=0.0),  # TRL documents 0.0
    dict(top_entropy_quantile=1), dict(top_entropy_quantile=0.5), dict(off_policy_mask_threshold=0.0),
    dict(vllm_importance_sampling_clip_min=0.0), dict(vllm_importance_sampling_clip_min=2.0,
                                                      vllm_importance_sampling_clip_max=2.0),
    dict(vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_max=None),  # vLLM off
    dict(use_vllm=True, vllm_importance_sampling_correction=False, vllm_importance_sampling_mode="sequence_truncate",
         vllm_importance_sampling_clip_max=None),
    dict(use_vllm=True, vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_min=0.5,
         vllm_importance_sampling_clip_max=None),
    dict(vespo_k_pos=-3.0, vespo_k_neg=0.0, vespo_lambda_pos=0.0, vespo_lambda_neg=0),
    dict(loss_type="vespo", use_vllm=True, vllm_importance_sampling_mode="token_mask"),
    dict(loss_type="vespo", use_vllm=False, vllm_importance_sampling_mode="sequence_mask"),
    dict(max_completion_length=1), dict(sapo_temperature_pos=0.01),
])
def test_options_at_their_edges_are_accepted(ok):
    TRLLoss(**ok)


def test_vllm_is_on_needs_both_flags_and_eps_high_defaults_to_epsilon():
    assert TRLLoss(use_vllm=True).vllm_is_on is True
    assert TRLLoss(use_vllm=True, vllm_importance_sampling_correction=False).vllm_is_on is False
    assert TRLLoss(use_vllm=False).vllm_is_on is False
    assert TRLLoss(epsilon=0.3).eps_high == 0.3 and TRLLoss(epsilon=0.3, epsilon_high=0.5).eps_high == 0.5


def test_from_config_reads_mappings_objects_overrides_and_the_deprecated_cap():
    assert TRLLoss.from_config() == TRLLoss()
    assert TRLLoss.from_config({"loss_type": "grpo"}, epsilon=0.1) == TRLLoss(loss_type="grpo", epsilon=0.1)
    obj = SimpleNamespace(loss_type="bnpo", epsilon=0.3, learning_rate=1e-6)  # other GRPOConfig fields ignored
    assert TRLLoss.from_config(obj) == TRLLoss(loss_type="bnpo", epsilon=0.3)
    assert TRLLoss.from_config(obj, loss_type="grpo").loss_type == "grpo"
    assert TRLLoss.from_config({"vllm_importance_sampling_cap": 5.0}).vllm_importance_sampling_clip_max == 5.0
    assert TRLLoss.from_config(vllm_importance_sampling_cap=None).vllm_importance_sampling_clip_max == 3.0
    # a GRPOConfig with the deprecated attribute has already copied it into _clip_max: that value is kept
    cfg = SimpleNamespace(vllm_importance_sampling_cap=5.0, vllm_importance_sampling_clip_max=4.0)
    assert TRLLoss.from_config(cfg).vllm_importance_sampling_clip_max == 4.0
    with pytest.raises(ValueError, match="unknown TRL loss option\\(s\\) beta, foo; known: loss_type, epsilon, "):
        TRLLoss.from_config({"foo": 1}, beta=0.0)


# --- the pieces of k --------------------------------------------------------------------------------------------------

def test_vllm_ratio_token_and_sequence_truncate_and_mask():
    old = t([[0.0, math.log(4.0), 0.0]])
    mu = t([[0.0, 0.0, math.nan]])  # NaN: not scored, no correction
    m = torch.tensor([[True, True, False]])
    r = TRLLoss(vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_max=3.0,
                vllm_importance_sampling_clip_min=0.5).vllm_is_ratio(old, mu, m)
    assert r.flatten().tolist() == approx2([[1.0, 3.0, 1.0]])
    r = TRLLoss(vllm_importance_sampling_mode="token_mask", vllm_importance_sampling_clip_max=4.0).vllm_is_ratio(old, mu, m)
    assert r.flatten().tolist() == approx2([[1.0, 4.0, 1.0]])  # the bound itself is kept
    r = TRLLoss(vllm_importance_sampling_mode="token_mask", vllm_importance_sampling_clip_max=3.9).vllm_is_ratio(old, mu, m)
    assert r.flatten().tolist() == approx2([[1.0, 0.0, 1.0]])
    r = TRLLoss(vllm_importance_sampling_mode="token_mask", vllm_importance_sampling_clip_min=1.0,
                vllm_importance_sampling_clip_max=None).vllm_is_ratio(-old, mu, m)
    assert r.flatten().tolist() == approx2([[1.0, 0.0, 1.0]])
    r = TRLLoss(vllm_importance_sampling_mode="token_mask", vllm_importance_sampling_clip_min=0.25,
                vllm_importance_sampling_clip_max=None).vllm_is_ratio(-old, mu, m)
    assert r.flatten().tolist() == approx2([[1.0, 0.25, 1.0]])
    old2 = t([[math.log(2.0), math.log(1.5), 5.0]])
    r = TRLLoss(vllm_importance_sampling_mode="sequence_truncate").vllm_is_ratio(old2, t([[0.0, 0.0, 0.0]]), m)
    assert r.shape == (1, 1) and float(r) == pytest.approx(3.0)
    r = TRLLoss(vllm_importance_sampling_mode="sequence_mask", vllm_importance_sampling_clip_max=2.9).vllm_is_ratio(
        old2, t([[0.0, 0.0, 0.0]]), m)
    assert float(r) == 0.0
    r = TRLLoss(vllm_importance_sampling_mode="sequence_mask").vllm_is_ratio(old2, t([[0.0, 0.0, 0.0]]), m)
    assert float(r) == pytest.approx(3.0)


def test_entropy_mask_keeps_the_top_quantile_and_only_the_highest_at_zero():
    e = t([[0.125, 0.5, 0.875], [0.25, 2.0, 0.0625]])  # float32-exact: the quantile is float32 (TRL)
    m = torch.tensor([[True, True, True], [True, False, True]])
    assert torch.equal(TRLLoss(top_entropy_quantile=1.0).entropy_mask(e, m), m)
    # q = 0 (TRL: all but the highest-entropy token masked); the padded 2.0 is not a real token
    assert TRLLoss(top_entropy_quantile=0.0).entropy_mask(e, m).tolist() == [[False, False, True], [False, False, False]]
    thr = torch.quantile(t([0.125, 0.5, 0.875, 0.25, 0.0625], torch.float32), 0.5)  # q = 0.5: the median and above
    assert float(thr) == 0.25
    assert TRLLoss(top_entropy_quantile=0.5).entropy_mask(e, m).tolist() == [[False, True, True], [True, False, False]]
    none = torch.zeros_like(m)
    assert TRLLoss(top_entropy_quantile=0.5).entropy_mask(e, none).tolist() == none.tolist()


def test_vespo_weight_is_phi_of_the_clamped_sequence_log_ratio():
    c = TRLLoss(loss_type="vespo")
    ell = t([[0.1, 0.2, 7.0], [-0.3, 0.0, 0.0], [30.0, 0.0, 0.0], [-30.0, 0.0, 0.0]])
    m = torch.tensor([[True, True, False], [True, False, False], [True, False, False], [True, False, False]])
    adv = t([1.0, -1.0, 0.0, -2.0])
    w = c.vespo_weight(ell, adv, m)

    def phi(lw, k, lam):
        return math.exp(lam + k * lw - lam * math.exp(lw))

    assert w.shape == (4, 1)
    assert float(w[0]) == pytest.approx(phi(0.3, 2.0, 3.0))          # A > 0: the _pos pair; padding not summed
    assert float(w[1]) == pytest.approx(phi(-0.3, 3.0, 2.0))         # A < 0: the _neg pair
    assert float(w[2]) == 0.0                                        # ℓ clamped to 20: φ underflows to 0
    assert float(w[3]) == pytest.approx(phi(-20.0, 3.0, 2.0), rel=1e-9)  # clamped at −20 (the token clamp)
    rho = t([[2.0, 1e-12, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    w = c.vespo_weight(ell, adv, m, rho)  # ρ̃ enters over every position, its log clamped at log 1e-8
    assert float(w[0]) == pytest.approx(phi(max(0.3 + math.log(2.0) + math.log(1e-8), math.log(1e-8)), 2.0, 3.0))
    w = TRLLoss(loss_type="vespo", vespo_lambda_pos=0.0).vespo_weight(ell[:1], t([1.0]), m[:1])
    assert float(w[0]) == pytest.approx(math.exp(1e-4 + 2.0 * 0.3 - 1e-4 * math.exp(0.3)))  # λ ≥ 1e-4


def test_coefficient_clips_token_and_sequence_ratios():
    m = torch.ones(2, 2, dtype=torch.bool)
    ell = t([[math.log(1.1), math.log(1.3)], [math.log(0.9), math.log(0.7)]])
    adv = t([1.0, -1.0])
    k = TRLLoss(loss_type="grpo").coefficient(ell, adv, m)
    assert k.flatten().tolist() == approx2([[1.1, 0.0], [0.9, 0.0]])  # A > 0 clipped above 1.2, A < 0 below 0.8
    k = TRLLoss(loss_type="grpo", epsilon_high=0.4).coefficient(ell, adv, m)
    assert k.flatten().tolist() == approx2([[1.1, 1.3], [0.9, 0.0]])
    # δ: A > 0 gets no gradient above δ even inside the clip; A < 0 keeps it up to max(δ, 1 + ε_high)
    k = TRLLoss(loss_type="grpo", epsilon_high=0.4, delta=1.2).coefficient(ell, adv, m)
    assert k.flatten().tolist() == approx2([[1.1, 0.0], [0.9, 0.0]])
    big = t([[math.log(1.5), math.log(3.0)], [math.log(1.5), math.log(3.0)]])
    k = TRLLoss(loss_type="grpo", delta=2.0).coefficient(big, t([-1.0, 1.0]), m)
    assert k.flatten().tolist() == approx2([[1.5, 0.0], [0.0, 0.0]])
    k = TRLLoss(loss_type="grpo", delta=4.0).coefficient(big, t([-1.0, -1.0]), m)
    assert k.flatten().tolist() == approx2([[1.5, 3.0], [1.5, 3.0]])
    # sequence level: s_i = exp(mean_t ℓ) on every token of the row (mask counts T_i)
    ms = torch.tensor([[True, True], [True, False]])
    ell2 = t([[0.1, 0.3], [0.05, 0.0]])
    k = TRLLoss(loss_type="grpo", epsilon_high=0.4, importance_sampling_level="sequence").coefficient(ell2, t([1.0, 1.0]),
                                                                                                      ms)
    assert k.flatten().tolist() == approx2([[math.exp(0.2)] * 2, [math.exp(0.05)] * 2])
    # cispo: min(r, ε_high) on every real token, whatever A
    k = TRLLoss(loss_type="cispo", epsilon_high=1.2).coefficient(t([[0.0, 1.0], [0.5, 2.0]]), t([1.0, -1.0]), ms)
    assert k.flatten().tolist() == approx2([[1.0, 1.2], [1.2, 0.0]])
    from asyncgrpo.estimators.maps.sapo import gate_k_torch
    x = t([[0.3, -0.2]])
    k = TRLLoss(loss_type="sapo", sapo_temperature_pos=2.0, sapo_temperature_neg=3.0).coefficient(
        x, t([-1.0]), torch.ones(1, 2, dtype=torch.bool))
    assert torch.allclose(k, gate_k_torch(x, t([-1.0]), 2.0, 3.0))


# --- the loss: normalisers, multipliers ---------------------------------------------------------------------------------

ELL = [[0.0, 0.1, 0.0], [0.05, 0.0, 0.0]]
MASK = [[True, True, True], [True, False, False]]
ADV = [1.0, -2.0]
K = [[1.0, math.exp(0.1), 1.0], [math.exp(0.05), 0.0, 0.0]]


@pytest.mark.parametrize("loss_type, nu", [
    ("grpo", [[1 / 6] * 3, [1 / 2] * 3]), ("sapo", None), ("bnpo", [[1 / 4] * 3] * 2),
    ("dr_grpo", [[1 / (2 * 7)] * 3] * 2), ("luspo", [[1 / 2] * 3] * 2),
    ("dapo", [[1 / 10] * 3] * 2), ("cispo", [[1 / 10] * 3] * 2),
])
def test_each_loss_types_normaliser(loss_type, nu):
    g = grad_of(ELL, ADV, MASK, loss_type=loss_type, max_completion_length=7, num_items_in_batch=10,
                epsilon_high=5.0)
    if loss_type == "sapo":
        gg = grad_of(ELL, ADV, MASK, loss_type="grpo", epsilon_high=5.0)
        assert not torch.allclose(g, gg) and g[0, 0] == pytest.approx(gg[0, 0])  # r = 1: gate k = 1, ν as grpo
        return
    want = [[nu[i][j] * ADV[i] * K[i][j] * MASK[i][j] for j in range(3)] for i in range(2)]
    assert g.flatten().tolist() == approx2(want, abs=1e-15)


def test_dapo_needs_num_items_in_batch_and_rescales_it_to_the_window():
    for lt in ("dapo", "cispo", "vespo"):
        with pytest.raises(ValueError, match=f"loss_type='{lt}' needs num_items_in_batch"):
            grad_of(ELL, ADV, MASK, loss_type=lt)
    with pytest.raises(ValueError, match="num_items_in_batch must be a finite number, got True"):
        grad_of(ELL, ADV, MASK, num_items_in_batch=True)
    with pytest.raises(ValueError, match="num_items_in_batch must be a finite number, got inf"):
        grad_of(ELL, ADV, MASK, num_items_in_batch=math.inf)
    with pytest.raises(ValueError, match="num_items_in_batch must be a finite number, got '4'"):
        grad_of(ELL, ADV, MASK, num_items_in_batch="4")
    g1 = grad_of(ELL, ADV, MASK, num_items_in_batch=1)
    assert float(g1[0, 0]) == pytest.approx(1.0)
    assert float(grad_of(ELL, ADV, MASK, num_items_in_batch=0.25)[0, 0]) == pytest.approx(1.0)  # clamp(min=1)
    assert float(grad_of(ELL, ADV, MASK, num_items_in_batch=4.0)[0, 0]) == pytest.approx(0.25)
    # ν = 1/(n·accum/steps): accum 2, steps 4 → n/2; steps default to accum → n
    g = grad_of(ELL, ADV, MASK, num_items_in_batch=8, accumulation_steps=2, steps_per_generation=4)
    assert float(g[0, 0]) == pytest.approx(1 / 4)
    assert float(grad_of(ELL, ADV, MASK, num_items_in_batch=8, accumulation_steps=2)[0, 0]) == pytest.approx(1 / 8)
    assert float(grad_of(ELL, ADV, MASK, loss_type="bnpo", accumulation_steps=2)[0, 0]) == pytest.approx(1 / 8)
    for bad in (0, True, 1.0):
        with pytest.raises(ValueError, match=f"accumulation_steps must be an int >= 1, got {bad!r}"):
            grad_of(ELL, ADV, MASK, num_items_in_batch=8, accumulation_steps=bad)
    with pytest.raises(ValueError, match="steps_per_generation must be an int >= 1, got 0"):
        grad_of(ELL, ADV, MASK, num_items_in_batch=8, steps_per_generation=0)


def test_entropy_opsm_and_vllm_multipliers():
    ell = [[0.0, 0.0], [0.0, 0.0]]
    m = [[True, True], [True, True]]
    ent = t([[0.1, 0.9], [0.5, 0.2]])
    g = grad_of(ell, [1.0, 1.0], m, loss_type="bnpo", top_entropy_quantile=0.5, entropies=ent)
    assert g.flatten().tolist() == approx2([[0.0, 0.25], [0.25, 0.0]])
    with pytest.raises(ValueError, match="top_entropy_quantile=0.5 needs entropies"):
        grad_of(ell, [1.0, 1.0], m, loss_type="bnpo", top_entropy_quantile=0.5)
    # OPSM: row 1 (A < 0) with mean log μ − log π_θ = 0.5 > δ = 0.3 is dropped; row 0 (A ≥ 0) kept
    mu = t([[0.5, 0.5], [0.5, 0.5]])
    logp = torch.zeros(2, 2, dtype=D, requires_grad=True)
    loss, met = trl_policy_loss(logp, None, t([1.0, -1.0]), torch.ones(2, 2, dtype=torch.bool), loss_type="bnpo",
                                off_policy_mask_threshold=0.3, sampling_logp=mu, return_metrics=True)
    loss.backward()
    assert (-logp.grad).flatten().tolist() == approx2([[0.25, 0.25], [0.0, 0.0]])
    assert met["trl_loss/opsm_kept_row_frac"] == 0.5
    g = grad_of(ell, [1.0, -1.0], m, loss_type="bnpo", off_policy_mask_threshold=0.3)  # μ = π_old = π_θ: KL 0
    assert g.flatten().tolist() == approx2([[0.25, 0.25], [-0.25, -0.25]])
    # vLLM ratio multiplies k (sequence_mask: ρ̃ = π_old/μ per row)
    with pytest.raises(ValueError, match="use_vllm with vllm_importance_sampling_correction needs sampling_logp"):
        grad_of(ell, [1.0, 1.0], m, loss_type="bnpo", use_vllm=True)
    mu = t([[-math.log(2.0), 0.0], [0.0, -5.0]])
    logp = torch.zeros(2, 2, dtype=D, requires_grad=True)
    loss, met = trl_policy_loss(logp, None, t([1.0, 1.0]), torch.ones(2, 2, dtype=torch.bool), loss_type="bnpo",
                                use_vllm=True, sampling_logp=mu, return_metrics=True)
    loss.backward()
    assert (-logp.grad).flatten().tolist() == approx2([[0.5, 0.5], [0.0, 0.0]])
    assert met["trl_loss/vllm_is_ratio_mean"] == pytest.approx(1.0)
    # sequence level: the multipliers are averaged over the row's real tokens
    g = grad_of(ell, [1.0, 1.0], m, loss_type="bnpo", importance_sampling_level="sequence", top_entropy_quantile=0.5,
                entropies=ent)
    assert g.flatten().tolist() == approx2([[0.125, 0.125], [0.125, 0.125]])


def test_vespo_and_cispo_keep_their_multiplier_on_the_token():
    ell = [[0.0, 0.0], [0.0, 0.0]]
    m = [[True, True], [True, True]]
    ent = t([[0.1, 0.9], [0.5, 0.2]])
    g = grad_of(ell, [1.0, 1.0], m, loss_type="cispo", importance_sampling_level="sequence", top_entropy_quantile=0.5,
                entropies=ent, num_items_in_batch=4, epsilon_high=5.0)
    assert g.flatten().tolist() == approx2([[0.0, 0.25], [0.25, 0.0]])
    g = grad_of(ell, [1.0, -1.0], m, loss_type="vespo", num_items_in_batch=4)
    phi_p, phi_n = math.exp(3.0 - 3.0), math.exp(2.0 - 2.0)  # log w = 0: φ = e^{λ − λ} = 1
    assert g.flatten().tolist() == approx2([[0.25 * phi_p] * 2, [-0.25 * phi_n] * 2])
    logp = torch.zeros(1, 2, dtype=D, requires_grad=True)
    mu = t([[-math.log(2.0), 0.0]])
    loss = trl_policy_loss(logp, None, t([1.0]), torch.ones(1, 2, dtype=torch.bool), loss_type="vespo", use_vllm=True,
                           vllm_importance_sampling_mode="token_truncate", sampling_logp=mu, num_items_in_batch=1)
    loss.backward()
    want = math.exp(3.0 + 2.0 * math.log(2.0) - 3.0 * 2.0)  # ρ̃ inside φ, not a factor of k
    assert (-logp.grad).flatten().tolist() == approx2([[want, want]])


def test_a_trlloss_config_with_options_is_rebuilt():
    c = TRLLoss(loss_type="bnpo")
    g = grad_of(ELL, ADV, MASK, config=c, loss_type="grpo", epsilon_high=5.0)
    assert float(g[1, 0]) == pytest.approx(-2.0 * math.exp(0.05) / 2)  # grpo's 1/(T_i N), not bnpo's
    assert float(grad_of(ELL, ADV, MASK, config=c)[1, 0]) == pytest.approx(-2.0 * math.exp(0.05) / 4)


def test_input_checks_name_the_parameter():
    m = torch.ones(1, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="logp must be a torch tensor"):
        trl_policy_loss([[0.0, 0.0]], None, t([1.0]), m)
    with pytest.raises(ValueError, match=r"logp must have shape \[N, T\]"):
        trl_policy_loss(t([0.0, 0.0]), None, t([1.0]), m)
    with pytest.raises(ValueError, match=r"mask must have logp's shape"):
        trl_policy_loss(t([[0.0, 0.0]]), None, t([1.0]), torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask has no real token"):
        trl_policy_loss(t([[0.0, 0.0]]), None, t([1.0]), torch.zeros(1, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"old_logp must have logp's shape"):
        trl_policy_loss(t([[0.0, 0.0]]), t([[0.0]]), t([1.0]), m)
    with pytest.raises(ValueError, match=r"adv must have shape \[N\]"):
        trl_policy_loss(t([[0.0, 0.0]]), None, t([1.0, 2.0]), m)
    with pytest.raises(ValueError, match="entropies"):
        trl_policy_loss(t([[0.0, 0.0]]), None, t([1.0]), m, loss_type="bnpo", entropies=t([[math.nan, 0.0]]),
                        top_entropy_quantile=0.5)
    with pytest.raises(ValueError, match=r"sampling_logp must not be ±inf on real tokens \(mask True\); found at "
                                         r"\(0, 1\)"):
        trl_policy_loss(t([[0.0, 0.0]]), None, t([1.0]), m, loss_type="bnpo", use_vllm=True,
                        sampling_logp=t([[0.0, -math.inf]]))
    ok = trl_policy_loss(t([[0.0, 0.0]]), None, t([1.0]), torch.tensor([[True, False]]), loss_type="bnpo",
                         use_vllm=True, sampling_logp=t([[0.0, -math.inf]]))
    assert torch.isfinite(ok)


# --- metrics ------------------------------------------------------------------------------------------------------------

def test_clip_metrics_by_trls_names():
    c = TRLLoss(loss_type="grpo")
    ell = t([[math.log(1.3), 0.0], [math.log(0.7), math.log(0.7)]])
    m = torch.tensor([[True, True], [True, False]])
    out = trl_metrics(c, ell, t([1.0, -1.0]), m)
    assert out["clip_ratio/low_mean"] == pytest.approx(1 / 3) and out["clip_ratio/high_mean"] == pytest.approx(1 / 3)
    assert out["clip_ratio/region_mean"] == pytest.approx(2 / 3)
    assert out["clip_ratio/low_min"] == 0.0 and out["clip_ratio/high_max"] == 0.5
    out = trl_metrics(TRLLoss(loss_type="grpo", delta=1.25), ell, t([1.0, -1.0]), m)
    assert out["clip_ratio/high_mean"] == pytest.approx(1 / 3)  # clamped at δ = 1.25 > 1.2: still high
    out = trl_metrics(TRLLoss(loss_type="grpo", delta=1.1), ell, t([1.0, -1.0]), m)
    assert out["clip_ratio/high_mean"] == 0.0
    out = trl_metrics(TRLLoss(loss_type="grpo", importance_sampling_level="sequence"), ell, t([1.0, -1.0]), m)
    assert out["clip_ratio/low_mean"] == 0.5 and out["clip_ratio/low_min"] == 0.0 and out["clip_ratio/high_max"] == 0.0
    e = t([[1.0, 2.0], [3.0, 100.0]])
    out = trl_metrics(TRLLoss(loss_type="cispo", epsilon_high=1.2), ell, t([1.0, -1.0]), m, entropies=e)
    assert set(out) == {"cispo_clip_ratio", "entropy"}
    assert out["cispo_clip_ratio"] == pytest.approx(1 / 3) and out["entropy"] == pytest.approx(2.0)
    out = trl_metrics(TRLLoss(loss_type="vespo"), ell, t([1.0, -1.0]), m, phi=t([[0.5], [1.5]]))
    assert out == {"vespo/phi_seq_mean": 1.0}
    assert trl_metrics(TRLLoss(loss_type="sapo"), ell, t([1.0, -1.0]), m) == {}
    # a row without a real token is skipped by low_min/high_max
    m2 = torch.tensor([[True, True], [False, False]])
    out = trl_metrics(c, ell, t([1.0, -1.0]), m2)
    assert out["clip_ratio/low_min"] == 0.0 and out["clip_ratio/high_max"] == 0.5


def test_return_metrics_gives_the_loss_and_the_metrics():
    logp = t([[math.log(1.3), 0.0]]).requires_grad_(True)
    loss, met = trl_policy_loss(logp, torch.zeros(1, 2, dtype=D), t([1.0]), torch.ones(1, 2, dtype=torch.bool),
                                loss_type="grpo", return_metrics=True, entropies=t([[1.0, 3.0]]))
    assert met["clip_ratio/high_mean"] == 0.5 and met["entropy"] == 2.0
    assert float(loss) == pytest.approx(-(0.0 + 0.0 * 0.5))  # log π of the kept token is 0; the clipped one drops
    assert float(trl_policy_loss(logp, torch.zeros(1, 2, dtype=D), t([1.0]), torch.ones(1, 2, dtype=torch.bool),
                                 loss_type="grpo")) == float(loss)


# --- issue 55, second round: messages in full, float64 inside, clamps, metrics' edges --------------------------------

def _full(msg):
    import re
    return "^" + re.escape(msg) + "$"


def test_every_input_check_names_its_parameter_in_full():
    m = torch.ones(1, 2, dtype=torch.bool)
    lp = t([[0.0, 0.0]])
    cases = [
        (dict(logp=[[0.0, 0.0]]), "logp must be a torch tensor [N, T] (the loss is differentiated through it), got list"),
        (dict(logp=t([[0.0, 0.0]]).to(torch.complex128)), "logp must be real numbers, got complex values (torch.complex128)"),
        (dict(mask=torch.full((1, 2), 2)), "mask must hold booleans or exactly 0/1; found 2 at index (0, 0)"),
        (dict(mask=torch.zeros(1, 2, dtype=torch.bool)), "mask has no real token (every entry False): nothing to aggregate"),
        (dict(sampling_logp=t([[0.0]]), loss_type="bnpo"),
         "sampling_logp must have logp's shape [N, T] = (1, 2), got (1, 1) (no broadcasting)"),
        (dict(entropies=t([[0.0]]), loss_type="bnpo"),
         "entropies must have logp's shape [N, T] = (1, 2), got (1, 1) (no broadcasting)"),
        (dict(sampling_logp=t([[0.0, 0.0]]).to(torch.complex128), loss_type="bnpo"),
         "sampling_logp must be real numbers, got complex values (torch.complex128)"),
        (dict(adv=t([1.0]).to(torch.complex128)), "adv must be real numbers, got complex values (torch.complex128)"),
        (dict(adv=t([1.0, 2.0])), "adv must have shape [N] = (1,), one advantage per row, got (2,) (no broadcasting)"),
        (dict(logp=t([[0.0, math.nan]])), "logp must be finite on real tokens (mask True) (no NaN or inf); found nan at (0, 1)"),
        (dict(old_logp=t([[math.inf, 0.0]])),
         "old_logp must be finite on real tokens (mask True) (no NaN or inf); found inf at (0, 0)"),
        (dict(adv=t([math.nan])), "adv must be finite (no NaN or inf); found nan at (0,)"),
        (dict(entropies=t([[0.0, math.nan]]), top_entropy_quantile=0.5, loss_type="bnpo"),
         "entropies must be finite on real tokens (mask True) (no NaN or inf); found nan at (0, 1)"),
        (dict(use_vllm=True, loss_type="bnpo"),
         "use_vllm with vllm_importance_sampling_correction needs sampling_logp (the sampler's log-probs, TRL's "
         "sampling_per_token_logps)"),
    ]
    for kw, msg in cases:
        args = dict(logp=lp, old_logp=None, adv=t([1.0]), mask=m, num_items_in_batch=2)
        args.update(kw)
        with pytest.raises(ValueError, match=_full(msg)):
            trl_policy_loss(args.pop("logp"), args.pop("old_logp"), args.pop("adv"), args.pop("mask"), **args)
    with pytest.raises(ValueError, match=_full("entropies must have logp's shape [N, T] = (1, 2), got (1, 1) "
                                               "(no broadcasting)")):                # checked after a None old_logp too
        trl_policy_loss(lp, None, t([1.0]), m, loss_type="bnpo", sampling_logp=None, entropies=t([[0.0]]))


def test_option_messages_in_full():
    with pytest.raises(ValueError, match=_full("a truncate vllm_importance_sampling_mode needs "
                                               "vllm_importance_sampling_clip_min or _clip_max (torch.clamp with neither)")):
        TRLLoss(use_vllm=True, vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_max=None)
    with pytest.raises(ValueError, match=_full("loss_type='vespo' with the vLLM IS correction needs a token "
                                               "vllm_importance_sampling_mode (token_truncate or token_mask), as TRL "
                                               "requires; got 'sequence_mask'")):
        TRLLoss(loss_type="vespo", use_vllm=True)


@pytest.mark.parametrize("kw", [
    dict(loss_type="dapo"), dict(loss_type="grpo", importance_sampling_level="sequence"), dict(loss_type="bnpo"),
    dict(loss_type="bnpo", off_policy_mask_threshold=0.1), dict(loss_type="bnpo", top_entropy_quantile=0.5),
    dict(loss_type="bnpo", use_vllm=True, vllm_importance_sampling_mode="token_truncate"), dict(loss_type="vespo"),
    dict(loss_type="dr_grpo"), dict(loss_type="cispo"), dict(loss_type="sapo"),
])
def test_float32_inputs_are_computed_in_float64(kw):
    """The coefficient is computed in float64 whatever logp's dtype and cast to it only at the end: a float32 run's
    gradient is the float64 run's coefficient rounded to float32."""
    ell = [[0.11, -0.23, 0.05], [0.31, 0.02, -0.4]]
    old = [[0.01, 0.02, -0.03], [0.1, -0.2, 0.05]]
    samp = [[0.07, 0.2, -0.1], [0.3, -0.25, 0.0]]
    ent = [[0.3, 1.7, 0.9], [1.1, 0.2, 2.4]]
    adv = [0.7, -1.3]
    mask = torch.tensor([[True, True, True], [True, True, False]])
    grads = {}
    for dt in (torch.float32, D):
        logp = torch.tensor(ell, dtype=dt).requires_grad_(True)
        loss = trl_policy_loss(logp, torch.tensor(old, dtype=dt), torch.tensor(adv, dtype=dt), mask,
                               sampling_logp=torch.tensor(samp, dtype=dt), entropies=torch.tensor(ent, dtype=dt),
                               num_items_in_batch=5, **kw)
        loss.backward()
        grads[dt] = logp.grad
    # the float32 inputs are exactly representable in float64: recompute float64 from them, round once
    logp = torch.tensor(ell, dtype=torch.float32).to(D).requires_grad_(True)
    loss = trl_policy_loss(logp, torch.tensor(old, dtype=torch.float32).to(D),
                           torch.tensor(adv, dtype=torch.float32).to(D), mask,
                           sampling_logp=torch.tensor(samp, dtype=torch.float32).to(D),
                           entropies=torch.tensor(ent, dtype=torch.float32).to(D), num_items_in_batch=5, **kw)
    loss.backward()
    assert torch.equal(grads[torch.float32], logp.grad.to(torch.float32))


def test_vespo_weight_clamps_each_bound_and_zeroes_non_finite():
    c = TRLLoss(loss_type="vespo", vespo_k_pos=1.0, vespo_lambda_pos=1e-4)
    phi = lambda lw: math.exp(1e-4 + 1.0 * lw - 1e-4 * math.exp(lw))  # noqa: E731
    m = torch.ones(1, 2, dtype=torch.bool)
    assert float(c.vespo_weight(t([[25.0, -10.0]]), t([1.0]), m)[0]) == pytest.approx(phi(10.0))    # token at +20
    assert float(c.vespo_weight(t([[-25.0, 10.0]]), t([1.0]), m)[0]) == pytest.approx(phi(-10.0))    # token at −20
    assert float(c.vespo_weight(t([[15.0, 15.0]]), t([1.0]), m)[0]) == pytest.approx(phi(20.0))      # sum at 20
    rho = t([[math.exp(30.0), 1.0]])                                                                 # log ρ̃ at 20
    assert float(c.vespo_weight(t([[-15.0, 0.0]]), t([1.0]), m, rho)[0]) == pytest.approx(phi(5.0))
    rho = t([[1e-30, 1.0]])                                                                          # log ρ̃ at log 1e-8
    assert float(c.vespo_weight(t([[10.0, 0.0]]), t([1.0]), m, rho)[0]) == pytest.approx(phi(10.0 + math.log(1e-8)))
    big = TRLLoss(loss_type="vespo", vespo_k_pos=1000.0, vespo_lambda_pos=1e-4)                     # φ underflows to 0
    assert float(big.vespo_weight(t([[20.0, 0.0]]), t([1.0]), m)[0]) == 0.0
    assert float(c.vespo_weight(t([[0.3, 0.0]]), t([0.0]), m)[0]) == pytest.approx(phi(0.3))         # A = 0: the _pos pair
    assert float(c.vespo_weight(t([[0.3, 0.0]]), t([1.0]), m, t([[math.nan, 1.0]]))[0]) == 0.0   # NaN ρ̃ → 0
    assert float(TRLLoss(loss_type="vespo", vespo_k_pos=-1000.0).vespo_weight(
        t([[-20.0, 0.0]]), t([1.0]), m)[0]) == 0.0                                                   # +inf → 0


def test_clip_metrics_every_clipped_loss_type_and_their_edges():
    ell = t([[math.log(1.3), math.log(0.7), 0.0], [math.log(0.9), math.log(1.3), 0.0], [0.0, 0.0, 0.0]])
    m = torch.tensor([[True, True, False], [True, True, False], [False, False, False]])
    adv = t([0.5, -1.0, 0.0])
    for lt in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):
        out = trl_metrics(TRLLoss(loss_type=lt), ell, adv, m)
        # row 0 (A = 0.5 > 0): 1.3 high, 0.7 not low (A > 0); row 1 (A < 0): 0.9 not low (> 0.8), 1.3 not high
        assert out["clip_ratio/low_mean"] == 0.0 and out["clip_ratio/high_mean"] == pytest.approx(1 / 4), lt
        assert out["clip_ratio/low_min"] == 0.0 and out["clip_ratio/high_max"] == 0.5, lt   # row 2: no real token
    adv0 = t([0.0, 0.0, 0.0])
    out = trl_metrics(TRLLoss(loss_type="grpo"), ell, adv0, m)
    assert out["clip_ratio/high_mean"] == 0.0 and out["clip_ratio/low_mean"] == 0.0        # A = 0 clips nothing
    assert trl_metrics(TRLLoss(loss_type="cispo", epsilon_high=1.2), ell, adv0, m)["cispo_clip_ratio"] == 0.0
    one = torch.tensor([[True, False, False], [False, False, False], [False, False, False]])
    assert trl_metrics(TRLLoss(loss_type="grpo"), ell, adv, one)["clip_ratio/high_mean"] == 1.0   # one real token
    # sequence level: each row's mean log-ratio over its own real tokens (rows of 2 and 1 tokens)
    ell = t([[math.log(0.5), math.log(0.5)], [math.log(1.3), 0.0]])
    m = torch.tensor([[True, True], [True, False]])
    out = trl_metrics(TRLLoss(loss_type="grpo", importance_sampling_level="sequence"), ell, t([1.0, 1.0]), m)
    assert out["clip_ratio/high_mean"] == 0.5 and out["clip_ratio/high_max"] == 1.0   # row 1: 1.3 > 1.2 on its own


def test_entropy_mask_at_q_1_is_every_real_token_whatever_float32_rounding():
    e = t([[0.1, 0.5, 0.3]])
    m = torch.tensor([[True, True, False]])
    assert torch.equal(TRLLoss(top_entropy_quantile=1.0).entropy_mask(e, m), m)


def test_vespo_metrics_and_a_trlloss_config_kept_under_options():
    logp = t([[0.1, -0.2]]).requires_grad_(True)
    _, met = trl_policy_loss(logp, torch.zeros(1, 2, dtype=D), t([1.0]), torch.ones(1, 2, dtype=torch.bool),
                             loss_type="vespo", num_items_in_batch=2, return_metrics=True)
    assert met["vespo/phi_seq_mean"] == pytest.approx(math.exp(3.0 + 2.0 * (-0.1) - 3.0 * math.exp(-0.1)))
    c = TRLLoss(loss_type="grpo", epsilon=0.1)
    g = grad_of([[math.log(0.85), 0.0]], [-1.0], None, config=c, sapo_temperature_neg=2.0)
    assert float(g[0, 0]) == 0.0            # ε = 0.1 from the config: 0.85 < 0.9 clipped for A < 0


def test_opsm_counts_an_unscored_sampler_token_as_zero():
    """OPSM's KL is log μ − log π_θ per token, NaN (the sampler could not score it) counted as 0 (TRL)."""
    logp = t([[0.0, 0.0]]).requires_grad_(True)
    kw = dict(loss_type="bnpo", off_policy_mask_threshold=0.4)
    g = {}
    for s in ([[0.0, math.nan]], [[0.0, 1.0]]):
        lp = logp.detach().clone().requires_grad_(True)
        trl_policy_loss(lp, torch.zeros(1, 2, dtype=D), t([-1.0]), torch.ones(1, 2, dtype=torch.bool),
                        sampling_logp=t(s), **kw).backward()
        g[str(s)] = lp.grad
    assert g["[[0.0, nan]]"].abs().sum() > 0           # mean KL 0: kept
    assert g["[[0.0, 1.0]]"].abs().sum() == 0           # mean KL 0.5 > 0.4 with A < 0: dropped


def test_a_zero_advantage_row_stays_zero_under_an_infinite_ratio():
    logp = t([[0.0, 0.0], [0.0, 0.0]]).requires_grad_(True)
    loss = trl_policy_loss(logp, torch.zeros(2, 2, dtype=D), t([0.0, 1.0]), torch.ones(2, 2, dtype=torch.bool),
                           loss_type="bnpo", use_vllm=True, vllm_importance_sampling_mode="token_mask",
                           vllm_importance_sampling_clip_max=None, sampling_logp=t([[-800.0, 0.0], [0.0, 0.0]]))
    assert torch.isfinite(loss)


def test_from_config_keeps_a_grpoconfig_objects_own_clip_max_over_the_deprecated_cap():
    cfg = SimpleNamespace(vllm_importance_sampling_cap=5.0, vllm_importance_sampling_clip_max=2.0)
    assert TRLLoss.from_config(cfg, vllm_importance_sampling_cap=7.0).vllm_importance_sampling_clip_max == 2.0
    assert TRLLoss.from_config({}, vllm_importance_sampling_cap=7.0).vllm_importance_sampling_clip_max == 7.0


def test_clip_metrics_at_exactly_the_clip_edges_do_not_count():
    ell = t([[math.log(0.8), math.log(1.2)], [math.log(1.2), 0.0]])     # exp gives 0.8 and 1.2 exactly
    m = torch.ones(2, 2, dtype=torch.bool)
    out = trl_metrics(TRLLoss(loss_type="grpo"), ell, t([-1.0, 1.0]), m)
    assert out["clip_ratio/low_mean"] == 0.0 and out["clip_ratio/high_mean"] == 0.0   # strictly outside [0.8, 1.2]
    assert trl_metrics(TRLLoss(loss_type="cispo", epsilon_high=1.2), ell, t([1.0, 1.0]), m)["cispo_clip_ratio"] == 0.0


def test_low_min_skips_rows_without_a_real_token():
    ell = t([[math.log(0.7), math.log(0.7)], [math.log(0.7), 0.0], [0.0, 0.0]])
    m = torch.tensor([[True, True], [True, True], [False, False]])
    out = trl_metrics(TRLLoss(loss_type="grpo"), ell, t([-1.0, -1.0, -1.0]), m)
    assert out["clip_ratio/low_min"] == 0.5                              # rows 1.0 and 0.5; the empty row skipped


def test_vespo_log_weight_is_clamped_at_20_after_the_sum():
    c = TRLLoss(loss_type="vespo", vespo_k_pos=2426.0, vespo_lambda_pos=1e-4)   # φ finite at log w = 20
    w = c.vespo_weight(t([[15.0, 15.0]]), t([1.0]), torch.ones(1, 2, dtype=torch.bool))
    assert float(w[0]) == pytest.approx(math.exp(1e-4 + 2426.0 * 20.0 - 1e-4 * math.exp(20.0)), rel=1e-6)


def test_the_loss_has_logps_dtype():
    logp = torch.tensor([[0.1, -0.2]], dtype=torch.float32, requires_grad=True)
    loss = trl_policy_loss(logp, torch.zeros(1, 2, dtype=torch.float32), torch.tensor([1.0]),
                           torch.ones(1, 2, dtype=torch.bool), loss_type="bnpo")
    assert loss.dtype == torch.float32


def test_sequence_level_clip_means_are_exact_fractions_of_the_rows():
    ell = t([[math.log(0.5), 0.0], [0.0, 0.0], [0.0, 0.0]])
    m = torch.tensor([[True, False], [True, True], [True, True]])
    out = trl_metrics(TRLLoss(loss_type="grpo", importance_sampling_level="sequence"), ell, t([-1.0, 1.0, 1.0]), m)
    assert out["clip_ratio/low_mean"] == 1 / 3 and out["clip_ratio/region_mean"] == 1 / 3   # in float64, exactly
