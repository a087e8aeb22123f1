"""The toy-to-LM ladder's instances (issue 33; docs/bridge.md): prompt → answer tasks with exact J.

**Prompt–answer MDP.** ``C`` contexts ("prompts"); context ``c`` has a fixed answer ``ans[c, 0..T−1] ∈ V^T``
(drawn from ``seed``). A trajectory from context ``c`` emits ``T`` tokens. Reward:

- ``frac`` (partial credit): ``R = #{t : a_t = ans[c, t]}/T``, paid per step (``r_t = 1{a_t = ans[c,t]}/T``),
  so the state is the context alone;
- ``exact`` (sparse, as the LM's exact-match verifier): ``R = 1`` iff every token is right; the state
  carries ``(c, alive)`` and a wrong token leads to the context's dead state.

**Policies.** ``features=None``: tabular softmax over ``(t, state)`` (no parameter is shared between contexts).
``features=m``: the LM-like log-linear policy ``θ[t, s, a] = ⟨W_a, h(c, t)⟩`` with a fixed unit "hidden state"
``h(c, t) ∈ R^m`` (drawn from ``seed``) and trained unembedding ``W ∈ R^{V×m}`` (``p = V·m``): the same logits in
every state of a context (the policy does not see whether it already erred), and one update of ``W_a`` moves token
``a`` in every context whose ``h`` overlaps — as an LM's shared unembedding does.

**Warm start** (:func:`supervised_init`): gradient descent on the cross-entropy of the answers from ``w = 0``
until a target is reached — a supervised, partly correct policy, as the LM's warm start. The target is on the
instance's exact ``J`` (``metric="J"``) or on its **per-token accuracy** (``metric="token"``,
:func:`token_accuracy`): the mean over the ``C·T`` answer tokens of the probability ``π_w(ans[c,t] | c, t)`` that the
policy gives the right token on the answer path (the expected fraction of right tokens when a context's answer
is forced up to ``t``; for the dense ``frac`` reward it *is* ``J``). The argmax share
(:func:`token_argmax_accuracy`) is reported beside it, not used as a target (it moves in jumps of ``1/(C·T)``).
Both controls of issue 54 (docs/bridge.md) match two rewards' warm starts by this per-token accuracy.

``J`` and ``∇J`` are exact (DP over the state, averaged over contexts: :mod:`simulate.training.contexts`).
"""
from __future__ import annotations

import math

import numpy as np

from simulate.instances.products import exp, phi_t_g, phi_w
from simulate.training_instance import TrainingInstance, exact_J_grad_w

__all__ = ["prompt_answer", "supervised_init", "answers", "hidden", "token_accuracy", "token_argmax_accuracy",
           "WARM_METRICS"]

REWARDS = ("frac", "exact")
#: what a warm start's ``target`` is on: the exact J, or the per-token accuracy (module docstring)
WARM_METRICS = ("J", "token")


def hidden(C: int, T: int, m: int, seed: int) -> np.ndarray:
    """``h (C, T, m)``: unit "hidden states" of the log-linear policy, Gaussian directions from ``seed``."""
    h = np.random.default_rng([int(seed), 34]).standard_normal((C, T, m))
    return h / np.linalg.norm(h, axis=-1, keepdims=True)


def answers(C: int, V: int, T: int, seed: int, m: int = 6) -> np.ndarray:
    """``ans (C, T)``: the answers a random teacher ``W* ∈ R^{V×m}`` gives, ``ans[c,t] = argmax_a ⟨W*_a, h(c,t)⟩``,
    so the log-linear class can reach every answer (``sup_w J = 1``, approached as ``‖w‖`` grows)."""
    teacher = np.random.default_rng([int(seed), 33]).standard_normal((V, m))
    h = hidden(C, T, m, seed).reshape(C * T, m)
    scores = np.stack([phi_w(h, teacher[a]) for a in range(V)], axis=-1)  # fixed order, not BLAS
    return np.argmax(scores, axis=-1).reshape(C, T)


def _check(C, V, T, reward, features):
    for name, x, lo in (("C", C, 1), ("V", V, 2), ("T", T, 1)):
        if not (isinstance(x, (int, np.integer)) and x >= lo):
            raise ValueError(f"{name} must be an integer >= {lo}, got {x!r}")
    if reward not in REWARDS:
        raise ValueError(f"reward must be one of {', '.join(REWARDS)}, got {reward!r}")
    if features is not None and not (isinstance(features, (int, np.integer)) and features >= 1):
        raise ValueError(f"features must be None (tabular) or an integer m >= 1, got {features!r}")


def prompt_answer(name: str, C: int, V: int, T: int, reward: str = "frac", features: int | None = None,
                  seed: int = 0, warm: float | None = None, description: str = "", warm_metric: str = "J",
                  warm_tol: float | None = None) -> TrainingInstance:
    """The prompt–answer instance of the module docstring (``warm``: the warm start's target, on ``warm_metric``
    (``"J"`` or ``"token"``: :func:`supervised_init`), or ``None``; ``warm_tol``: how far past the target the
    stopping iterate may land, else :func:`supervised_init` raises)."""
    _check(C, V, T, reward, features)
    if warm_metric not in WARM_METRICS:
        raise ValueError(f"warm_metric must be one of {', '.join(WARM_METRICS)}, got {warm_metric!r}")
    ans = answers(C, V, T, seed, features or 6)
    per = 1 if reward == "frac" else 2  # sub-states of a context: none, or (dead, alive)
    S = C * per
    ns = np.empty((T, S, V), dtype=np.int64)
    R = np.zeros(S)
    step = np.zeros((T, S, V)) if reward == "frac" else None
    for c in range(C):
        base = c * per
        for t in range(T):
            for j in range(per):
                for a in range(V):
                    hit = a == ans[c, t]
                    ns[t, base + j, a] = base + (0 if reward == "frac" else int(j == 1 and hit))
                    if reward == "frac":
                        step[t, base, a] = hit / T
        if reward == "exact":
            R[base + 1] = 1.0
    starts = np.arange(C) * per + (0 if reward == "frac" else 1)
    phi = None
    if features is not None:
        h = hidden(C, T, features, seed)
        phi = np.zeros((T, S, V, V * features))
        for c in range(C):
            for a in range(V):
                phi[:, c * per:(c + 1) * per, a, a * features:(a + 1) * features] = h[c, :, None, :]
        phi = phi.reshape(T * S * V, V * features)
    desc = description or (f"prompt-answer: C = {C} contexts, V = {V}, T = {T}, {reward} reward, "
                           + ("tabular" if features is None else f"log-linear shared unembedding (p = {V * features})"))
    inst = TrainingInstance(name, desc, ns, R, int(starts[0]), step_reward=step, features=phi, starts=starts)
    if warm is None:
        return inst
    w0 = supervised_init(inst, ans, target=warm, metric=warm_metric, tol=warm_tol)
    what = "J" if warm_metric == "J" else "per-token accuracy"
    return TrainingInstance(name, desc + f", warm start at {what} = {warm:.6g}", ns, R, int(starts[0]),
                            step_reward=step, features=phi, starts=starts, w_init=w0)


def _answer_rows(inst: TrainingInstance, ans: np.ndarray):
    """``(idx, y)``: the flat logit indices ``(C·T, V)`` of every answer token's on-answer state, and the answers."""
    C, T = ans.shape
    V = inst.V
    if inst.S % C:
        raise ValueError(f"ans has {C} contexts, which do not divide the instance's {inst.S} states")
    per = inst.S // C
    on = 0 if per == 1 else 1  # frac: the context's one state; exact: its alive state
    rows = np.array([(t * inst.S + c * per + on) * V for c in range(C) for t in range(T)])
    return rows[:, None] + np.arange(V)[None, :], ans.reshape(-1)


def _answer_probs(inst: TrainingInstance, ans: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``(C·T, V)``: the policy's token distribution at every answer token's on-answer state."""
    idx, _y = _answer_rows(inst, ans)
    logits = inst.logits(np.asarray(w, dtype=np.float64)).reshape(-1)[idx]
    p = exp(logits - logits.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def token_accuracy(inst: TrainingInstance, ans: np.ndarray, w: np.ndarray) -> float:
    """Per-token accuracy of ``w``: the mean over the ``C·T`` answer tokens of ``π_w(ans[c,t] | c, t)`` at the
    context's on-answer state (module docstring); equal to ``J`` under the dense ``frac`` reward."""
    _idx, y = _answer_rows(inst, ans)
    return float(_answer_probs(inst, ans, w)[np.arange(y.size), y].mean())


def token_argmax_accuracy(inst: TrainingInstance, ans: np.ndarray, w: np.ndarray) -> float:
    """The share of the ``C·T`` answer tokens whose most probable token (on the answer path) is the right one."""
    _idx, y = _answer_rows(inst, ans)
    return float(np.mean(np.argmax(_answer_probs(inst, ans, w), axis=1) == y))


def supervised_init(inst: TrainingInstance, ans: np.ndarray, target: float, lr: float = 4.0,
                    max_iter: int = 20000, metric: str = "J", tol: float | None = None) -> np.ndarray:
    """Warm start: full-batch gradient descent on ``−Σ_{c,t} log π_w(ans[c,t] | c, t)`` (mean over the
    ``C·T`` answer tokens, read at each context's on-answer states) from ``w = 0``, stopped at the first
    iterate whose ``metric`` — the exact ``J`` (``"J"``) or the per-token accuracy (``"token"``,
    :func:`token_accuracy`) — is ``≥ target`` (deterministic).

    Never a silent cold start: raises ``ValueError`` when ``w = 0`` already meets the target (the uniform policy
    is not a warm start), when ``max_iter`` steps do not reach it (unreachable target), and, with ``tol``, when the
    stopping iterate lands more than ``tol`` past the target (the target is not matched)."""
    if metric not in WARM_METRICS:
        raise ValueError(f"metric must be one of {', '.join(WARM_METRICS)}, got {metric!r}")
    if not (isinstance(target, (float, int, np.floating, np.integer)) and 0.0 < target < 1.0):
        raise ValueError(f"target must be in (0, 1), got {target!r}")
    if tol is not None and not (math.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be None or a finite number > 0, got {tol!r}")
    idx, y = _answer_rows(inst, ans)
    phi = inst.features[idx.ravel()] if inst.features is not None else None  # tabular: w are the logits

    def score(w):
        return exact_J_grad_w(inst, w)[0] if metric == "J" else token_accuracy(inst, ans, w)

    w = np.zeros(inst.n_params)
    for it in range(max_iter + 1):  # iterates 0..max_iter: the last step's iterate is checked too
        m = score(w)
        if m >= target:
            if it == 0:
                raise ValueError(f"supervised_init: the uniform policy (w = 0) already has {metric} = {m:.4f} >= "
                                 f"target {target}: that is a cold start, not a warm start")
            if tol is not None and m - target > tol:
                raise ValueError(f"supervised_init: the first iterate past target {target} has {metric} = {m:.4f}, "
                                 f"more than tol = {tol} past it (lower lr to match it)")
            return w
        if it == max_iter:
            break
        logits = (phi_w(phi, w) if phi is not None else w[idx.ravel()]).reshape(idx.shape)
        p = exp(logits - logits.max(axis=1, keepdims=True))  # libm's exp, not NumPy's CPU-dependent one
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(len(y)), y] -= 1.0  # ∂CE/∂logits = π − onehot
        if phi is not None:
            grad = phi_t_g(phi, p) / len(y)
        else:
            grad = np.zeros(inst.n_params)
            np.add.at(grad, idx.ravel(), p.ravel() / len(y))
        w = w - lr * grad
    raise ValueError(f"supervised_init: {metric} did not reach target {target} in {max_iter} steps "
                     f"({metric} = {m:.4f}): unreachable warm start")
