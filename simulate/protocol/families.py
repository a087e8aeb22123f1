"""Instance families drawn by seed (protocol v6, docs/protocol.md "Version 6"; issue 53).

A *family* is a documented generator: ``draw(family, seed)`` is a pure function of ``(family, seed)`` that
returns a :class:`~simulate.protocol.instances.TrainingInstance` named ``"<family>-<seed>"``. A confirmatory
protocol does not list hand-picked instances: it fixes a seed root, and :func:`family_seeds` derives each
family's instance seeds from the SHA-256 of ``(root, family, index)``, so no instance can be chosen after its
result is seen (:func:`simulate.protocol.spec.Protocol` refuses a file whose instances are not the ones its
seeds draw).

Families
--------
``tabular`` — token MDPs with a tabular softmax policy (no shared parameters). Drawn: ``V ∈ {3, 4, 5}``,
``T ∈ {4, 5, 6}``; structure ∈ {``count``: state = count of token 0, terminal partial credit ``R = #0/T``;
``bigram``: state = previous token, random per-step bigram rewards ``r_t(s, a) = u_{s,a}²/T``}; the learner sees
``R`` or a coin flip ``R ~ Bernoulli(E R)`` (drawn). ``J*`` (the largest return of any path) is the class optimum,
exact by a max-DP.

``lm-like`` — the LM's ingredients (docs/bridge.md): ``C`` contexts ("prompts"), each with an answer of ``T``
tokens that a random teacher in the class produces, and a log-linear policy with a shared unembedding
``θ[t, s, a] = ⟨W_a, h(c, t)⟩`` (``p = V·m`` parameters shared by every context). Drawn: ``V ∈ {6, 8, 12}``,
``T ∈ {4, 6, 8}``, ``C ∈ {4, 8}``, ``m ∈ {3, 4, 6}``, reward ∈ {``exact``: 1 iff every token is right;
``threshold``: 1 iff at least ``k = ⌈T/2⌉`` tokens are right; ``frac``: dense, ``#right/T`` paid per token},
and a supervised warm start at ``J ∈ {0.2, 0.35, 0.5}`` (exact J). The answers are reachable (teacher in the
class), so ``sup_w J = J* = 1``: ``J*`` is the exact optimum of the class, approached as ``‖w‖`` grows.
The learner runs one group per context per step (``n_prompts = C``).
"""
from __future__ import annotations

import hashlib
import math
import re

import numpy as np

__all__ = ["FAMILIES", "draw", "family_seeds", "check_draws", "parse_name", "is_family_name", "lm_like", "tabular",
           "threshold_prompt_answer", "contexts"]

#: The families and the report row their instances go to (figures/report/answer.py GROUPS).
FAMILIES = {"tabular": "tabular", "lm-like": "lm-like"}
_NAME = re.compile(r"^(?P<family>[a-z][a-z-]*?)-(?P<seed>\d+)$")


def family_seeds(root: str, family: str, n: int) -> tuple[int, ...]:
    """The ``n`` instance seeds of ``family`` under the protocol's seed ``root``: seed_i = the first 32 bits of
    SHA-256(``"root/family/i"``); distinct (a repeat is skipped, drawing the next index)."""
    if not isinstance(root, str) or not root:
        raise ValueError(f"root must be a non-empty string, got {root!r}")
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    out: list[int] = []
    i = 0
    while len(out) < n:
        s = int.from_bytes(hashlib.sha256(f"{root}/{family}/{i}".encode()).digest()[:4], "big")
        if s not in out:
            out.append(s)
        i += 1
    return tuple(out)


def parse_name(name: str) -> tuple[str, int]:
    """``"lm-like-123"`` → ``("lm-like", 123)``; a name that is not ``<family>-<seed>`` raises ``ValueError``."""
    m = _NAME.match(name) if isinstance(name, str) else None
    if not m or m.group("family") not in FAMILIES:
        raise ValueError(f"a family instance is named <family>-<seed> with family in {', '.join(FAMILIES)} and an "
                         f"integer seed >= 0, got {name!r}")
    return m.group("family"), int(m.group("seed"))


def is_family_name(name) -> bool:
    """Whether ``name`` has the form ``<family>-<seed>`` of a registered family."""
    try:
        parse_name(name)
    except ValueError:
        return False
    return True


def draw(family: str, seed: int):
    """The instance ``family``-``seed`` (a pure function of its arguments; module docstring)."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2 ** 32:
        raise ValueError(f"seed must be an integer in [0, 2³²), got {seed!r}")
    return tabular(int(seed)) if family == "tabular" else lm_like(int(seed))


def _rng(family: str, seed: int) -> np.random.Generator:
    # the family's own stream: the same seed in two families gives unrelated instances
    return np.random.default_rng([int(seed), sum(map(ord, family))])


def tabular(seed: int):
    """A ``tabular`` family instance (module docstring)."""
    from simulate.protocol.instances import TrainingInstance, bigram_rewards, prev_token_mdp
    from simulate.training import count_frac_mdp

    r = _rng("tabular", seed)
    V, T = int(r.choice([3, 4, 5])), int(r.choice([4, 5, 6]))
    structure = str(r.choice(["count", "bigram"]))
    bern = bool(r.integers(2))
    name = f"tabular-{seed}"
    coin = ", paid as a coin flip R ~ Bernoulli(E R)" if bern else ""
    if structure == "count":
        m = count_frac_mdp(V, T, state="count")
        return TrainingInstance(name, f"tabular family (seed {seed}): V = {V}, T = {T}, state = count of token 0, "
                                f"R = #0/T{coin}", m.next_state, m.reward, m.s0, bernoulli=bern)
    ns, s0 = prev_token_mdp(V, T)
    return TrainingInstance(name, f"tabular family (seed {seed}): V = {V}, T = {T}, state = previous token, random "
                            f"bigram rewards{coin}", ns, np.zeros(V + 1), s0,
                            step_reward=bigram_rewards(V, T, int(r.integers(2 ** 31))), bernoulli=bern)


#: ``lm-like`` draws: V, T, C (contexts), m (feature dimension), reward, warm-start J.
LM_GRID = dict(V=(6, 8, 12), T=(4, 6, 8), C=(4, 8), m=(3, 4, 6), reward=("exact", "threshold", "frac"),
               warm=(0.2, 0.35, 0.5))


def lm_like(seed: int):
    """An ``lm-like`` family instance (module docstring)."""
    from simulate.bridge.rungs import prompt_answer

    r = _rng("lm-like", seed)
    g = {k: v[int(r.integers(len(v)))] for k, v in LM_GRID.items()}
    inner = int(r.integers(2 ** 31))  # the answers' and hidden states' seed
    name = f"lm-like-{seed}"
    desc = (f"lm-like family (seed {seed}): C = {g['C']} contexts, V = {g['V']}, T = {g['T']}, {g['reward']} reward"
            + (f" (k = {math.ceil(g['T'] / 2)})" if g["reward"] == "threshold" else "")
            + f", shared unembedding p = {g['V'] * g['m']}, warm start at J = {g['warm']}")
    if g["reward"] == "threshold":
        return threshold_prompt_answer(name, g["C"], g["V"], g["T"], math.ceil(g["T"] / 2), g["m"], inner, g["warm"],
                                       desc)
    inst = prompt_answer(name, g["C"], g["V"], g["T"], reward=g["reward"], features=g["m"], seed=inner, warm=g["warm"],
                         description=desc)
    return _as_lm_like(inst, desc)


def _as_lm_like(inst, desc: str):
    from simulate.protocol.instances import TrainingInstance

    return TrainingInstance(inst.name, desc, inst.next_state, inst.reward, inst.s0, step_reward=inst.step_reward,
                            features=inst.features, starts=inst.starts, w_init=inst.w_init, report_group="lm-like")


def threshold_prompt_answer(name: str, C: int, V: int, T: int, k: int, m: int, seed: int, warm: float,
                            description: str = ""):
    """The prompt–answer task with a k-of-T reward: ``R = 1`` iff at least ``k`` of the ``T`` tokens equal the
    context's answer. The state is ``(c, #right so far)`` (``C·(T+1)`` states); the log-linear policy gives every
    state of a context the same logits (it does not see its count), as an LM does not see its own score."""
    from simulate.bridge.rungs import answers, hidden, supervised_init
    from simulate.protocol.instances import TrainingInstance

    if not (isinstance(k, int) and 1 <= k <= T):
        raise ValueError(f"k must be an integer in [1, T = {T}], got {k!r}")
    ans = answers(C, V, T, seed, m)
    per = T + 1
    S = C * per
    ns = np.empty((T, S, V), dtype=np.int64)
    R = np.zeros(S)
    for c in range(C):
        for t in range(T):
            for j in range(per):
                for a in range(V):
                    ns[t, c * per + j, a] = c * per + min(j + int(a == ans[c, t]), T)
        R[c * per + k: (c + 1) * per] = 1.0
    starts = np.arange(C) * per
    h = hidden(C, T, m, seed)
    phi = np.zeros((T, S, V, V * m))
    for c in range(C):
        for a in range(V):
            phi[:, c * per:(c + 1) * per, a, a * m:(a + 1) * m] = h[c, :, None, :]
    phi = phi.reshape(T * S * V, V * m)
    inst = TrainingInstance(name, description, ns, R, int(starts[0]), features=phi, starts=starts,
                            report_group="lm-like")
    w0 = supervised_init(inst, ans, target=warm)
    return TrainingInstance(name, description, ns, R, int(starts[0]), features=phi, starts=starts, w_init=w0,
                            report_group="lm-like")


def contexts(inst) -> int:
    """Number of contexts (start states) of an instance: ``len(starts)``, or 1."""
    return 1 if inst.starts is None else int(len(inst.starts))


def check_draws(proto, check, is_int, budget_limit: int) -> None:
    """A protocol's v6 fields (``check(ok, field, valid)`` raises naming the field): ``families = {family = n}`` and
    ``family_root`` draw the instances (:func:`family_seeds`); ``instances`` must be exactly those draws, in order
    (a ``[quick]`` overlay: a subset), so no instance is chosen after its result is seen. Below version 6 the v6
    fields must be absent."""
    if proto.version < 6:
        check(not proto.families and not proto.family_root and not proto.family_budget and not proto.rivals,
              "families/family_root/family_budget/rivals", "absent below version 6")
        return
    check(isinstance(proto.family_root, str) and proto.family_root.strip() != "", "family_root",
          "a non-empty string fixed before any run (the instances' seed root)")
    check(isinstance(proto.families, dict) and proto.families and set(proto.families) <= set(FAMILIES), "families",
          f"a table {{family = number of instances}} with families from {sorted(FAMILIES)}")
    for fam, n in proto.families.items():
        check(is_int(n) and 1 <= n <= 64, f"families.{fam}", f"an integer in [1, 64] (got {n!r})")
    check(isinstance(proto.family_budget, dict) and set(proto.family_budget) == set(proto.families), "family_budget",
          f"a table with one budget per family {sorted(proto.families)} (trajectories per context)")
    for fam, b in proto.family_budget.items():
        check(is_int(b) and 1 <= b <= budget_limit, f"family_budget.{fam}", f"an integer in [1, {budget_limit}]")
    drawn = tuple(f"{fam}-{s}" for fam, n in proto.families.items() for s in family_seeds(proto.family_root, fam, int(n)))
    if not proto.quick:
        check(tuple(proto.instances) == drawn, "instances",
              f"exactly the instances its family seeds draw, in order: {list(drawn)} (got {list(proto.instances)}); "
              f"a protocol may not choose its instances")
    else:
        check(set(proto.instances) <= set(drawn), "quick.instances", f"a subset of the drawn instances {list(drawn)}")
    check(isinstance(proto.rivals, tuple) and proto.rivals and set(proto.rivals) <= set(proto.estimators)
          and "gmc" in proto.estimators and "gmc" not in proto.rivals, "rivals",
          "a non-empty list of the protocol's estimators other than gmc (gmc must be an estimator)")
    check(proto.primary_arm in proto.step_arms, "primary_arm", f"one of step_arms {list(proto.step_arms)}")
    check(not proto.instance_settings, "instance_settings", "absent in version 6 (family_budget sets the budget)")


def by_family(instances) -> dict[str, list[str]]:
    """``{family: [instance, …]}`` of family draws ``<family>-<seed>``, in the given order."""
    out: dict[str, list[str]] = {}
    for i in instances:
        out.setdefault(parse_name(i)[0], []).append(i)
    return out
