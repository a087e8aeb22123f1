"""TRL integration: a ``GRPOTrainer`` that trains with any trajectory-level weight map of the registry.

    >>> from asyncgrpo.integrations.trl import AsyncGRPOTrainer
    >>> trainer = AsyncGRPOTrainer(model=model, reward_funcs=reward, args=grpo_config,
    ...                            train_dataset=ds, processing_class=tok, estimator="gmc", eps=0.2)
    >>> trainer.train()

The loss is :func:`asyncgrpo.estimators.token_level.policy_loss` (docs/THEORY.md §2), the one
surrogate of the toolkit, whose gradient is ``−ĝ`` with ``ĝ = (1/G) Σ_i w_i A_i ∇log π_θ(τ_i)``
averaged over the groups of the micro-batch (the default; ``loss_agg_mode`` picks another normaliser, the
TRL names exactly as TRL 1.16.0's ``GRPOTrainer`` normalises that ``loss_type``). For each trajectory

    ℓ_i = Σ_t m_{i,t} (log π_θ(a_{i,t}|s_{i,t}) − log μ(a_{i,t}|s_{i,t})),     w = sg(W_ε(ℓ_{group}))

where ``μ`` is the behaviour policy that produced the rollout: TRL's ``sampling_per_token_logps``
(the sampler's own log-probs, e.g. vLLM or a ``rollout_func``) when present, else TRL's
``old_per_token_logps`` (recomputed at generation when the rollouts will be stale, i.e. when
``steps_per_generation × num_iterations`` does not divide ``gradient_accumulation_steps``), else the
current log-probs (on-policy: ``ℓ_i = 0``). Weights come from the registry's torch backend,
detached (stop-gradient).

What changes with respect to TRL's ``GRPOTrainer``:

- **Group ids survive batching.** TRL's inputs carry no group id and ``_prepare_inputs`` shuffles
  rows across groups. Here every generated row gets a ``group_ids`` entry, the generation batch is
  shuffled by whole groups only (:func:`shuffle_whole_groups`), and the per-device batch must be a
  multiple of ``num_generations`` (``ValueError`` otherwise). At the loss the rows are put back group
  by group (:func:`group_order`), which also checks that every group is complete.
- **TRL's token-level IS correction is switched off** (``vllm_importance_sampling_correction``):
  the trajectory weight already corrects for the sampler, and applying both would count it twice.
  ``loss_type``, ``epsilon``/``epsilon_high``, ``importance_sampling_level`` and ``delta`` (PPO
  clipping) are not used: the weight map replaces the clip.
- **Not supported with a trajectory-level estimator** (``ValueError`` at construction): a KL penalty
  (``beta != 0``), the entropy bonus, ``top_entropy_quantile < 1`` and the off-policy sequence mask,
  because none of them is part of ``ĝ``.
- **Metrics** (TRL naming style, logged with the others): ``traj_is/cap_frac`` (fraction of
  trajectories with ``w_i < ρ_i``), ``traj_is/removed_mass/mean`` (``(1/G)Σ(ρ_i − w_i)`` per group),
  ``traj_is/chi2/mean`` (``(1/G)Σ(ρ_i − 1)²``, the group's estimate of ``χ²(π_θ‖μ)``),
  ``traj_is/ess/mean`` and ``traj_is/ess_frac/mean`` (``(Σw)²/Σw²`` and that over ``G``),
  ``traj_is/weight/{mean,max}``, ``traj_is/staleness/{mean,max}`` (optimizer steps between the
  weights that generated a rollout and its use; ``max`` is the maximum over the logging window, not a mean).
- **Controlled delay** (``rollout_delay=d``): every generation is made by the policy ``d`` optimizer steps old (the
  weights of version ``max(0, g − d)`` at step ``g``, kept as CPU copies of the last ``d + 1`` versions), so each
  rollout is exactly ``d`` updates stale once ``g ≥ d`` (before, ``g``): the delays of an asynchronous actor–learner
  (d = 8–32 in the report) that TRL's own batch reuse cannot reach — TRL's only staleness is reusing one generation
  batch for ``steps_per_generation × num_iterations`` micro-steps, at most that minus one optimizer steps. The
  behaviour log-probs are the delayed policy's, computed at generation. Single process, text only; memory: ``d + 1``
  copies of the weights.

TRL's own losses at any ``GRPOConfig`` setting (OPSM threshold, sapo temperatures, token-level luspo,
``top_entropy_quantile``, the vLLM IS correction): :func:`trl_policy_loss` (docs/integrations.md).
"""
from __future__ import annotations

import inspect
import logging
from typing import Any

import numpy as np
import torch

from asyncgrpo import estimators as est
from asyncgrpo import functionals
from asyncgrpo.estimators.maps.trl_loss_config import TRLLoss, trl_policy_loss
from asyncgrpo.estimators.token_level import policy_loss
from asyncgrpo.validation import check_eps, check_group_size

try:
    import trl as _trl
    from trl import GRPOTrainer
    from trl.trainer.utils import split_pixel_values_by_grid, split_tensor_dict, unsplit_pixel_values_by_grid
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "asyncgrpo.integrations.trl needs TRL: pip install 'asyncgrpo[trl]' (pins trl and transformers)"
    ) from exc

logger = logging.getLogger(__name__)

#: TRL releases whose ``GRPOTrainer`` this module was read from and is tested against: its batching,
#: ``_compute_loss`` signature and loss normalisers (dapo's ``num_items_in_batch·accum/steps_per_generation``)
#: change between releases, so another version gets a warning at construction.
TESTED_TRL_VERSIONS: tuple[str, ...] = ("1.16.0",)


# the group bookkeeping (pure torch, no TRL): asyncgrpo/integrations/trl_groups.py
from asyncgrpo.integrations.trl_groups import (  # noqa: E402,F401  (public here: the trainer's helpers)
    METRIC_PREFIX, behaviour_logps, group_order, shuffle_whole_groups, weight_metrics, _batch_len)


class AsyncGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose loss is ``policy_loss(estimator, …)`` with trajectory-level weights.

    Extra keyword arguments (everything else is ``GRPOTrainer``'s):

    - ``estimator``: a registry name, ``"gmc"`` (default), ``"tic"``, ``"tis"``, ``"snis"``, ``"is"``
      or ``"onpolicy"``; ``eps``: the threshold ε > 0 of docs/THEORY.md §2.
    - ``length_normalize``: coefficients ``w_i/T_i`` instead of ``w_i`` (like-for-like step sizes
      with TRL's length-normalised losses); passed to ``policy_loss``.
    - ``loss_agg_mode``: passed to ``policy_loss`` only when given (and only if this toolkit's
      ``policy_loss`` accepts it); ``None`` keeps ``policy_loss``'s default. The TRL names normalise as
      TRL 1.16.0's ``GRPOTrainer`` does for the same ``loss_type`` (:meth:`_normalisation`): ``dapo`` by
      ``num_items_in_batch/num_processes·accum/steps_per_generation``, ``dr_grpo`` by
      ``N·max_completion_length``, each of the others by its local count and the accumulation steps.
    """

    def __init__(self, *args, estimator: str = "gmc", eps: float = 0.2, length_normalize: bool = False,
                 loss_agg_mode: str | None = None, rollout_delay: int = 0, **kwargs):
        if estimator not in est.ESTIMATORS:
            raise ValueError(f"estimator must be one of {', '.join(est.ESTIMATORS)} (trajectory level), got {estimator!r}")
        if isinstance(rollout_delay, bool) or not isinstance(rollout_delay, int) or not 0 <= rollout_delay <= MAX_DELAY:
            raise ValueError(f"rollout_delay must be an integer in [0, {MAX_DELAY}] (optimizer steps), got {rollout_delay!r}")
        self.rollout_delay = rollout_delay
        self._versions: dict[int, dict] = {}
        # the GRPOConfig is checked before TRL's setup (which may load a reference model for beta != 0)
        _check_config(kwargs.get("args", args[2] if len(args) > 2 else None))
        self.estimator = estimator
        self.eps = check_eps(eps)
        self.length_normalize = bool(length_normalize)
        self._loss_kwargs: dict[str, Any] = {}
        if loss_agg_mode is not None:
            if "loss_agg_mode" not in inspect.signature(policy_loss).parameters:
                raise ValueError(
                    "loss_agg_mode was given but this asyncgrpo's policy_loss has no loss_agg_mode parameter; "
                    "leave it None (policy_loss's own aggregation)"
                )
            self._loss_kwargs["loss_agg_mode"] = loss_agg_mode
        super().__init__(*args, **kwargs)
        a = self.args
        G = self.num_generations
        if a.per_device_train_batch_size % G:
            raise ValueError(
                f"per_device_train_batch_size ({a.per_device_train_batch_size}) must be a multiple of num_generations "
                f"({G}) so that every micro-batch holds whole groups"
            )
        if self.beta != 0.0:
            raise ValueError(f"beta must be 0 with a trajectory-level estimator (no KL term in ĝ), got {self.beta}")
        if self._entropy_bonus_enabled:
            raise ValueError("the entropy bonus (entropy_coef != 0 or adaptive entropy) is not supported: it is not part of ĝ")
        if self.top_entropy_quantile < 1.0:
            raise ValueError(f"top_entropy_quantile must be 1.0 (all tokens), got {self.top_entropy_quantile}")
        if self.off_policy_mask_threshold is not None:
            raise ValueError("off_policy_mask_threshold must be None: the weight map already handles stale rollouts")
        if self.use_vllm and self.vllm_importance_sampling_correction:
            logger.warning(
                "AsyncGRPOTrainer: switching off TRL's token-level vllm_importance_sampling_correction; "
                "the trajectory-level weight of %r corrects for the sampler instead", estimator,
            )
        self.vllm_importance_sampling_correction = False
        self._next_group_id = 0
        if _trl.__version__ not in TESTED_TRL_VERSIONS:
            logger.warning(
                "AsyncGRPOTrainer was tested with TRL %s, not %s: loss normalisation (loss_agg_mode) and "
                "batching follow that release's GRPOTrainer", ", ".join(TESTED_TRL_VERSIONS), _trl.__version__,
            )

    # -- generation: tag every row with its group and the weights' version that generated it
    def _generate_and_score_completions(self, inputs):
        if self.rollout_delay and self.model.training:
            return self._generate_delayed(inputs)
        out = self._generate_tagged(inputs, int(self.state.global_step))
        return out

    def _generate_delayed(self, inputs):
        """Generate with the weights ``rollout_delay`` optimizer steps old, score the behaviour log-probs with them,
        then restore the current weights."""
        g = int(self.state.global_step)
        self._versions.setdefault(g, _cpu_state(self.model))
        for v in [v for v in self._versions if v < g - self.rollout_delay]:
            del self._versions[v]  # only the last d + 1 versions are ever read
        version = min(self._versions)  # max(0, g − d): the oldest kept
        current = self._versions[g]
        self.model.load_state_dict(self._versions[version])
        try:
            out = self._generate_tagged(inputs, version)
            if out.get("old_per_token_logps") is None and out.get("sampling_per_token_logps") is None:
                ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
                att = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
                with torch.no_grad():
                    out["old_per_token_logps"], _, _ = self._get_per_token_logps_and_entropies(
                        self.model, ids, att, out["completion_ids"].size(1))
        finally:
            self.model.load_state_dict(current)
        return out

    def _generate_tagged(self, inputs, version: int):
        out = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        G = self.num_generations if mode == "train" else self.num_generations_eval
        n = int(out["completion_ids"].shape[0])
        if n % G:
            raise ValueError(f"generated {n} completions, not a multiple of num_generations = {G}")
        device = out["completion_ids"].device
        out["group_ids"] = self._next_group_id + torch.arange(n, device=device) // G
        self._next_group_id += n // G
        out["generation_step"] = torch.full((n,), int(version), device=device, dtype=torch.long)
        return out

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """TRL's log, except that ``traj_is/staleness/max`` is the maximum over the logging window (TRL averages
        every metric's list)."""
        mode = "train" if self.model.training else "eval"
        vals = self._metrics[mode].get(f"{METRIC_PREFIX}/staleness/max")
        if vals:
            self._metrics[mode][f"{METRIC_PREFIX}/staleness/max"] = [max(vals)]
        super().log(logs, start_time)

    # -- batching: TRL's _prepare_inputs with a whole-group shuffle instead of a row shuffle
    def _prepare_inputs(self, generation_batch):
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            batch = split_pixel_values_by_grid(batch)
            batch = shuffle_whole_groups(batch, self.num_generations)
            chunks = split_tensor_dict(batch, self.args.steps_per_generation)
            self._buffered_inputs = [unsplit_pixel_values_by_grid(c) for c in chunks]
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    # -- the loss: policy_loss on the rows laid out group by group
    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        G = self.num_generations if mode == "train" else self.num_generations_eval
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        logp, _, aux_loss = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1),
            compute_entropy=False,
            compute_aux_loss=self.aux_loss_enabled,
            pixel_values=inputs.get("pixel_values"),
            image_grid_thw=inputs.get("image_grid_thw"),
            num_images=inputs.get("num_images"),
            pixel_attention_mask=inputs.get("pixel_attention_mask"),
            spatial_shapes=inputs.get("spatial_shapes"),
            num_tiles=inputs.get("num_tiles"),
            image_sizes=inputs.get("image_sizes"),
            token_type_ids=inputs.get("token_type_ids"),
            mm_token_type_ids=inputs.get("mm_token_type_ids"),
            image_position_ids=inputs.get("image_position_ids"),
        )
        behaviour = behaviour_logps(inputs, logp.detach())
        if "group_ids" not in inputs:
            raise ValueError("inputs carry no group_ids: they must come from AsyncGRPOTrainer's generation step")
        order = group_order(inputs["group_ids"], G).to(logp.device)
        adv = inputs["advantages"]
        if adv.dim() != 1:
            raise ValueError(f"advantages must have shape [N] (one per completion), got {tuple(adv.shape)}")
        m = mask.bool()[order]
        # TRL sets current_gradient_accumulation_steps inside its training loop; outside it (a direct
        # compute_loss call) the configured value is the same number.
        accum = getattr(self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps)
        loss_kwargs, normalizer = self._normalisation(inputs, mode, accum)
        loss = policy_loss(
            self.estimator, logp[order], behaviour[order], adv[order], m,
            eps=self.eps, group_size=G, length_normalize=self.length_normalize, **loss_kwargs,
        )
        if not bool(torch.isfinite(loss.detach())):
            # only `is` can get here: its ρ_i = exp(ℓ_i) overflows (float32 beyond ℓ ≈ 88.7); a NaN
            # gradient must not reach the optimizer silently
            with torch.no_grad():
                ell_max = float(torch.where(m, logp.detach()[order] - behaviour[order], 0.0).sum(1).max())
            raise ValueError(f"the {self.estimator!r} loss is not finite (largest log-ratio ℓ_i = {ell_max:.4g}): "
                             "its weights overflowed; use a capped estimator (gmc, tic, tis)")
        self._log_weight_metrics(mode, logp.detach()[order], behaviour[order], m, inputs.get("generation_step"), G)
        loss = loss / normalizer
        if self.aux_loss_enabled:
            # TRL scales the router loss by the accumulation steps alone, whatever the loss type
            loss = loss + self.router_aux_loss_coef * aux_loss / (accum if mode == "train" else 1.0)
        return loss

    def _normalisation(self, inputs, mode: str, accum: int) -> tuple[dict[str, Any], float]:
        """``policy_loss`` keywords and the divisor of its loss, as TRL's ``GRPOTrainer._compute_loss`` (1.16).

        ``ν`` of the TRL names: ``dapo`` divides the micro-batch's token sum by
        ``B_tok = num_items_in_batch/num_processes·accum/steps_per_generation`` (train; without the last factor
        in eval) and nothing else, since ``num_items_in_batch`` counts the active tokens of the whole
        generation batch over every process; ``dr_grpo`` by ``N·max_completion_length``; ``grpo``, ``bnpo``,
        the verl modes and the default by their local count; all but ``dapo`` are then divided by ``accum``.
        """
        kwargs = dict(self._loss_kwargs)
        agg = kwargs.get("loss_agg_mode")
        train = mode == "train"
        if agg == "dapo":
            n_items = inputs.get("num_items_in_batch")
            if n_items is None:
                raise ValueError("loss_agg_mode='dapo' needs inputs['num_items_in_batch'] (the generation batch's "
                                 "active tokens, set by TRL's _generate_and_score_completions)")
            b_tok = max(float(n_items), 1.0) / self.accelerator.num_processes
            if train:
                b_tok *= accum / self.args.steps_per_generation
            kwargs["batch_num_tokens"] = b_tok
            return kwargs, 1.0
        if agg == "dr_grpo":
            kwargs["loss_scale_factor"] = self.max_completion_length
        return kwargs, (accum if train else 1.0)

    def _log_weight_metrics(self, mode, logp, behaviour, mask, generation_step, G):
        with torch.no_grad():
            dtype = torch.promote_types(logp.dtype, torch.float32)
            tok = torch.where(mask, logp.to(dtype) - behaviour.to(dtype), torch.zeros((), dtype=dtype))
            ell = tok.sum(dim=1).double().cpu().numpy().reshape(-1, G)
        for k, v in weight_metrics(ell, self.estimator, self.eps).items():
            self._metrics[mode][k].append(self._gather_mean(v))
        if generation_step is not None:
            stale = (int(self.state.global_step) - generation_step.detach().double()).to(self.accelerator.device)
            gathered = self.accelerator.gather(stale)
            self._metrics[mode][f"{METRIC_PREFIX}/staleness/mean"].append(float(gathered.mean()))
            self._metrics[mode][f"{METRIC_PREFIX}/staleness/max"].append(float(gathered.max()))

    def _gather_mean(self, value: float) -> float:
        if self.accelerator.num_processes == 1:
            return value
        # Every rank must join the gather (a collective), whatever its value.
        t = torch.tensor([value], dtype=torch.float64, device=self.accelerator.device)
        return float(self.accelerator.gather(t).mean())


#: Largest ``rollout_delay`` (optimizer steps): the trainer keeps ``d + 1`` CPU copies of the weights.
MAX_DELAY = 1024


def _cpu_state(model) -> dict:
    """A detached CPU copy of the model's weights (one version of the policy)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def _check_config(a) -> None:
    """The GRPOConfig checks that do not need TRL's setup, run before it: a KL term (``beta != 0``) and a per-device
    batch that does not hold whole groups are refused before TRL loads a reference model or a dataloader."""
    if a is None:
        return
    beta = getattr(a, "beta", 0.0)
    if beta not in (0, 0.0):
        raise ValueError(f"beta must be 0 with a trajectory-level estimator (no KL term in ĝ), got {beta}")
    bs, G = getattr(a, "per_device_train_batch_size", None), getattr(a, "num_generations", None)
    if isinstance(bs, int) and isinstance(G, int) and G > 0 and bs % G:
        raise ValueError(f"per_device_train_batch_size ({bs}) must be a multiple of num_generations ({G}) so that "
                         f"every micro-batch holds whole groups")


# --------------------------------------------------------------------------- a toy set-up (tests, examples)
def tiny_qwen3(seed: int = 0, hidden_size: int = 32, num_hidden_layers: int = 2, alphabet: str | None = None):
    """``(model, tokenizer)``: a random-init ``Qwen3ForCausalLM`` and a character-level fast tokenizer.

    Nothing is downloaded. The tokenizer maps each character of ``alphabet`` to one id after
    ``<pad>=0, <eos>=1, <bos>=2`` and pads on the left (as generation needs). For tests and
    examples; the init depends on ``seed`` only (the global torch RNG is left untouched).
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    alphabet = alphabet or "abcdefghijklmnopqrstuvwxyz0123456789 +=?."
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2}
    for c in alphabet:
        vocab.setdefault(c, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>")
    tok.padding_side = "left"
    cfg = Qwen3Config(
        vocab_size=len(vocab), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_hidden_layers, num_attention_heads=2, num_key_value_heads=1,
        head_dim=hidden_size // 2, max_position_embeddings=256, tie_word_embeddings=True,
        pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(cfg)
    return model, tok


__all__ = ["AsyncGRPOTrainer", "TRLLoss", "trl_policy_loss", "shuffle_whole_groups", "group_order", "weight_metrics",
           "behaviour_logps", "tiny_qwen3", "METRIC_PREFIX", "TESTED_TRL_VERSIONS"]
