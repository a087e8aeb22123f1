"""One table of defaults, per option: the toolkit's ``policy_loss``, verl 0.9.1's shipped YAML, TRL 1.16's
``GRPOConfig()`` (issue 57). docs/losses.md §2b is :func:`markdown_table` of :data:`DEFAULTS`, and
``tests/test_peer_defaults_table.py`` compares every "peer default" cell with the peer's own default objects (verl's
YAML files, TRL's ``GRPOConfig()``) and every toolkit cell with the toolkit's signatures, so none of the three columns
can drift from what a user gets. ``verl_policy_loss`` and ``trl_policy_loss`` take the peers' defaults (checked too).

A row is ``(what, toolkit, verl, trl)``: ``toolkit = (option of policy_loss, effective default, note)``; ``verl =
(YAML file, key, value)`` with the file relative to ``verl/trainer/config`` (``None``: verl has no such option);
``trl = (GRPOConfig field, value)`` (``None``: none). ``NOTSET`` marks a cell with no option.
"""
from __future__ import annotations

ACTOR = "actor/actor.yaml"
ROLLOUT_CORR = "algorithm/rollout_correction.yaml"

DEFAULTS: tuple = (
    ("PPO clip, lower ε", ("eps_low", 0.2, ""), (ACTOR, "clip_ratio_low", 0.2), ("epsilon", 0.2)),
    ("PPO clip, upper ε", ("eps_high", 0.28, "luspo: TRL's 0.2"), (ACTOR, "clip_ratio_high", 0.2),
     ("epsilon_high", None)),
    ("dual clip c (A < 0)", ("clip_ratio_c", None, "off"), (ACTOR, "clip_ratio_c", 3.0), ("delta", None)),
    ("aggregation", ("loss_agg_mode", None, "token-level: seq-mean-token-mean (gpg: token-mean, luspo: grpo); "
                                            "trajectory: THEORY's 1/N"),
     (ACTOR, "loss_agg_mode", "token-mean"), ("loss_type", "dapo")),
    ("L of sum-norm / dr_grpo", ("loss_scale_factor", None, "the padded width T"), (ACTOR, "loss_scale_factor", None),
     ("max_completion_length", 512)),
    ("IS weight of the rollout policy", ("eps", 0.2, "trajectory maps: W_ε"), (ROLLOUT_CORR, "rollout_is", None),
     ("vllm_importance_sampling_correction", True)),
    ("IS threshold", (None, None, ""), (ROLLOUT_CORR, "rollout_is_threshold", 2.0),
     ("vllm_importance_sampling_clip_max", 3.0)),
    ("IS mode", (None, None, ""), (ROLLOUT_CORR, "rollout_is_batch_normalize", False),
     ("vllm_importance_sampling_mode", "sequence_mask")),
    ("rejection sampling", (None, None, "verl_seq_rs, verl_geo_rs (their presets)"), (ROLLOUT_CORR, "rollout_rs", None),
     ("off_policy_mask_threshold", None)),
    ("rejection threshold", (None, None, ""), (ROLLOUT_CORR, "rollout_rs_threshold", None), None),
    ("bypass mode (π_old := μ)", (None, None, ""), (ROLLOUT_CORR, "bypass_mode", False), None),
    ("bypass loss", (None, None, ""), (ROLLOUT_CORR, "loss_type", "ppo_clip"), None),
    ("CISPO clamp", ("cispo_clamp", "upper", "min(r, 1+ε_high)"), None, ("epsilon_high", None)),
    ("sequence-level ratio", (None, None, "method gspo"), None, ("importance_sampling_level", "token")),
    ("SAPO temperatures", (None, None, "sapo: 1.0 / 1.05"), None, ("sapo_temperature_neg", 1.05)),
    ("entropy mask", (None, None, ""), None, ("top_entropy_quantile", 1.0)),
)


def _show(v) -> str:
    return "`None`" if v is None else (f"`{v!r}`" if isinstance(v, str) else f"`{v}`")


def markdown_table() -> str:
    """The rows of :data:`DEFAULTS` as docs/losses.md §2b prints them."""
    lines = ["| what | toolkit `policy_loss` | verl 0.9.1 YAML | TRL 1.16 `GRPOConfig()` |", "|---|---|---|---|"]
    for what, tk, verl, trl in DEFAULTS:
        opt, val, note = tk
        tk_cell = "—" if opt is None else f"`{opt}` = {_show(val)}"
        if note:
            tk_cell = f"{tk_cell} ({note})" if opt is not None else note
        verl_cell = "—" if verl is None else f"`{verl[1]}: {'null' if verl[2] is None else str(verl[2]).lower() if isinstance(verl[2], bool) else verl[2]}` ({verl[0]})"
        trl_cell = "—" if trl is None else f"`{trl[0]}` = {_show(trl[1])}"
        lines.append(f"| {what} | {tk_cell} | {verl_cell} | {trl_cell} |")
    return "\n".join(lines)


__all__ = ["DEFAULTS", "ACTOR", "ROLLOUT_CORR", "markdown_table"]
