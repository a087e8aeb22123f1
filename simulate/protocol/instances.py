"""The registry of named training problems the C5/C9 protocol runs on (docs/protocol.md), and their builders.

The type itself, :class:`TrainingInstance` with its exact ``J``, ``∇J``, ``J*`` and ``J_class``, lives in
:mod:`simulate.training_instance` (re-exported here); this module builds the named instances from it:
token MDPs, random bigram rewards, shared features, and the ladder's LM-faithful rung (:mod:`simulate.bridge`).

:data:`INSTANCES` lists the registered instances; :func:`get_instance` builds one by name and
:func:`from_mdp` wraps a user's :class:`simulate.instances.TabularMDP`.
"""
from __future__ import annotations

import math

import numpy as np

from simulate import instances as tab
from simulate.bridge.ladder import get_rung
from simulate.training import count_frac_mdp
from simulate.training_instance import CLASS_STARTS, REPORT_GROUPS, TrainingInstance, class_optimum, exact_J_grad_w

__all__ = ["TrainingInstance", "INSTANCES", "get_instance", "from_mdp", "prev_token_mdp", "exact_J_grad_w",
           "token_state_features", "class_optimum", "CLASS_STARTS", "REPORT_GROUPS"]


def prev_token_mdp(V: int, T: int) -> tuple[np.ndarray, int]:
    """Transitions of a token MDP whose state is the previous token: ``S = V + 1`` (state ``V`` is
    "no token yet", the start), ``next_state[t, s, a] = a``; returns ``(next_state, s0)``."""
    ns = np.broadcast_to(np.arange(V, dtype=np.int64), (T, V + 1, V)).copy()
    return ns, V


def bigram_rewards(V: int, T: int, seed: int, power: float = 2.0) -> np.ndarray:
    """Random per-step rewards ``r_t(s, a) = u_{s,a}^power / T`` with ``u ~ U(0,1)`` from ``seed``,
    the same for every ``t`` (a bigram preference): ``R(τ) ∈ [0, 1]``; ``power > 1`` makes a few
    bigrams worth much more than the rest, so credit assignment matters."""
    u = np.random.default_rng(seed).uniform(size=(V + 1, V))
    return np.broadcast_to(u**power / T, (T, V + 1, V)).copy()


def shared_features(V: int, T: int, m: int, seed: int) -> np.ndarray:
    """Features of a bilinear "LM head": ``Φ[(t,s,a), (a',j)] = 1{a = a'}·e_s[j]`` with random state
    embeddings ``e_s ∈ R^m`` (``N(0, 1/m)`` from ``seed``, shared over ``t``): ``p = V·m`` parameters,
    ``θ[t,s,a] = ⟨w_a, e_s⟩``, so an update for one state moves every state with a similar embedding."""
    S = V + 1
    emb = np.random.default_rng(seed).normal(0.0, 1.0 / math.sqrt(m), size=(S, m))
    phi = np.zeros((T, S, V, V, m))
    for a in range(V):
        phi[:, :, a, a, :] = emb[None, :, :]
    return phi.reshape(T * S * V, V * m)


def token_state_features(V: int, T: int, m: int, seed: int) -> np.ndarray:
    """Features shared across positions *and* tokens, as in a language model's output layer:
    ``θ[t,s,a] = e_aᵀ W e_s + b_a`` with random token and state embeddings ``e_a, e_s ∈ R^m``
    (``N(0, 1/m)`` from ``seed``, the same at every ``t``), ``p = m² + V`` parameters ``(W, b)``. Every
    token's logit moves with every update, so the score of one trajectory moves the probability of many
    others and the within-state cancellation of a tabular score does not happen."""
    rng = np.random.default_rng(seed)
    S = V + 1
    e_s = rng.normal(0.0, 1.0 / math.sqrt(m), size=(S, m))
    e_a = rng.normal(0.0, 1.0 / math.sqrt(m), size=(V, m))
    bil = np.einsum("ai,sj->saij", e_a, e_s).reshape(S, V, m * m)
    bias = np.broadcast_to(np.eye(V)[None], (S, V, V))
    phi = np.concatenate([bil, bias], axis=-1)
    return np.broadcast_to(phi[None], (T, S, V, m * m + V)).reshape(T * S * V, m * m + V).copy()


def from_mdp(mdp, name: str | None = None, description: str = "user instance", bernoulli: bool = False,
             features=None) -> TrainingInstance:
    """Wrap a :class:`simulate.instances.TabularMDP` (terminal reward) as a training instance."""
    if isinstance(mdp, TrainingInstance):
        return mdp
    if not isinstance(mdp, tab.TabularMDP):
        raise ValueError(f"instance must be a TrainingInstance or a simulate.instances.TabularMDP, got {type(mdp).__name__}")
    return TrainingInstance(name or mdp.name, description, mdp.next_state, mdp.reward, mdp.s0,
                            features=features, bernoulli=bernoulli)


def _count_frac(bernoulli: bool) -> TrainingInstance:
    m = count_frac_mdp(3, 6, state="count")
    if bernoulli:
        return TrainingInstance("count-frac-bernoulli", "count of token 0 over T = 6, V = 3, paid as a coin flip "
                                "R ~ Bernoulli(#0/T)", m.next_state, m.reward, m.s0, bernoulli=True)
    return TrainingInstance("count-frac", "control: partial credit R = #0-tokens / T, V = 3, T = 6, state = count",
                            m.next_state, m.reward, m.s0)


def _prev_random(seed: int) -> TrainingInstance:
    V, T = 4, 6
    ns, s0 = prev_token_mdp(V, T)
    return TrainingInstance(f"prev-random-{seed}", f"state = previous token, V = 4, T = 6, random bigram rewards "
                            f"(generator seed {seed})", ns, np.zeros(V + 1), s0, step_reward=bigram_rewards(V, T, seed))


def _feature_policy(seed: int = 3) -> TrainingInstance:
    V, T, m = 4, 6, 3
    ns, s0 = prev_token_mdp(V, T)
    return TrainingInstance("feature-loglinear", f"log-linear policy θ[t,s,a] = ⟨w_a, e_s⟩ (p = {V * m} shared "
                            f"parameters), previous-token state, random bigram rewards (seed {seed})", ns,
                            np.zeros(V + 1), s0, step_reward=bigram_rewards(V, T, seed),
                            features=shared_features(V, T, m, seed))


def _count_long() -> TrainingInstance:
    m = count_frac_mdp(8, 12, state="count")
    return TrainingInstance("count-long-bernoulli", "longer horizon, larger vocabulary: V = 8, T = 12, state = count of "
                            "token 0, terminal reward paid as a coin flip R ~ Bernoulli(#0/T) (1248 logits)",
                            m.next_state, m.reward, m.s0, bernoulli=True)


def _feature_lm(seed: int = 5) -> TrainingInstance:
    V, T, m = 16, 8, 4
    ns, s0 = prev_token_mdp(V, T)
    return TrainingInstance("feature-lm-bernoulli", f"LM-like log-linear policy θ[t,s,a] = e_aᵀWe_s + b_a shared across "
                            f"positions and tokens (p = {m * m + V}), V = {V}, T = {T}, previous-token state, random "
                            f"bigram rewards paid as a coin flip (seed {seed}); J* is an upper bound for this class",
                            ns, np.zeros(V + 1), s0, step_reward=bigram_rewards(V, T, seed),
                            features=token_state_features(V, T, m, seed), bernoulli=True)


def _lm_faithful() -> TrainingInstance:
    """The ladder's rung 6 (issue 33, docs/bridge.md): 8 prompts, V = 16, T = 12, exact-match reward, log-linear
    shared unembedding (p = 96), supervised warm start at J = 0.5. Run it with ``n_prompts = 8``."""
    inst = get_rung("6-sparse").build()
    return TrainingInstance("lm-faithful-exact", "LM-faithful toy (issue 33): 8 prompts, V = 16, T = 12, exact-match "
                            "reward, log-linear policy with a shared unembedding (p = 96), supervised warm start at "
                            "J = 0.5; learner: n_prompts = 8", inst.next_state, inst.reward, inst.s0,
                            features=inst.features, starts=inst.starts, w_init=inst.w_init,
                            report_group="toy-lm-faithful")


#: Registered instances: name → constructor (built on demand, cached by :func:`get_instance`).
INSTANCES = {
    "count-frac": lambda: _count_frac(False),
    "count-frac-bernoulli": lambda: _count_frac(True),
    "prev-random-1": lambda: _prev_random(1),
    "prev-random-2": lambda: _prev_random(2),
    "feature-loglinear": lambda: _feature_policy(3),
    # instances that keep learning for the whole budget (protocol v2; issue 24): nAUC(d=0) < 0.8 and few
    # zero-gradient steps at the primary cell, so estimators can separate
    "count-long-bernoulli": _count_long,
    "feature-lm-bernoulli": lambda: _feature_lm(5),
    # the ladder's LM-faithful toy (issue 33): uncorrected stale training fails there, is/gmc do not (docs/bridge.md)
    "lm-faithful-exact": _lm_faithful,
}
_BUILT: dict[str, TrainingInstance] = {}


def get_instance(name: str | TrainingInstance) -> TrainingInstance:
    """The registered instance ``name`` (built once per process), or ``name`` itself if it is one. Family draws
    ``<family>-<seed>`` (protocol v6) resolve through :func:`simulate.protocol.catalog.get_instance`."""
    if isinstance(name, TrainingInstance):
        return name
    if name not in INSTANCES:
        raise ValueError(f"instance must be one of {', '.join(INSTANCES)} (or a TrainingInstance), got {name!r}")
    if name not in _BUILT:
        _BUILT[name] = INSTANCES[name]()
    return _BUILT[name]
