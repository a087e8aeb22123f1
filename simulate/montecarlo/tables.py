"""The tidy bias table (:func:`bias_table`): Monte Carlo next to exact values and theory's bounds, and its printing.

Bias is reported decomposed (docs/THEORY.md §3 C7, C8): for ``A = R − R̄``,
``E ĝ_w − ∇J = −(1/G)∇J + E[ĝ_w − ĝ_is]``, the **baseline part** (C8, exact, the same for every
estimator) plus the **weighting part** (what the weight map is responsible for; C7 is judged on it).
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from asyncgrpo import estimators as est
from asyncgrpo.validation import check_group_size, check_index_array
from simulate import instances as ins
from simulate.montecarlo.exact import (
    ExactLimitWarning,
    exact_second_moment_S,
    exact_table,
    path_atoms,
)
from simulate.montecarlo.kernel import EST_QUANTITIES
from simulate.montecarlo.run import check_memory, plan_memory, run_mc, slots_of


def _bandit_default(**kw):
    return ins.bandit(kw.pop("K", 3), kw.pop("rewards", [1.0, 0.4, 0.0]), **kw)


def _token_default(**kw):
    base = dict(V=4, T=8, state="count", reward="count_ge", k=3)
    base.update(kw)
    return ins.token_mdp(**base)


#: Named instances: ``name -> (constructor(**kw) -> TabularMDP, default θ scale, default η)``.
#: η is chosen so that ``χ²(π_θ‖μ)`` is O(0.01) at ``d = 2`` and O(0.1–1) at ``d = 8``.
INSTANCES = {
    "bandit": (_bandit_default, 1.0, 0.15),
    "token-mdp": (_token_default, 0.5, 0.1),
}

#: Bias quantities, in the order printed: total, baseline part (C8), weighting part (C7).
BIAS_QUANTITIES = ("grad_bias", "baseline_bias", "weighting_bias")
#: Quantities that cannot be negative: a tiny negative round-off of these is shown as 0.
NONNEGATIVE = frozenset(BIAS_QUANTITIES) | {"sq_norm", "bias_functional", "mean_weight", "ess", "group_mass", "c1_rhs"}
COLUMNS = ["instance", "estimator", "eps", "G", "d", "quantity", "value", "se", "bound", "exact", "exact_note", "n"]


def make_instance(name: str, **kwargs) -> ins.TabularMDP:
    """The instance called ``name`` (:data:`INSTANCES`), constructor arguments overridable."""
    if name not in INSTANCES:
        raise ValueError(f"unknown instance {name!r}; known instances: {', '.join(INSTANCES)}")
    return INSTANCES[name][0](**kwargs)


def _limit_name(reason: str) -> str:
    """The size limit a reason of :func:`~.exact.exact_table` names (its last word in parentheses)."""
    for name in ("MAX_ENUM_PATHS", "MAX_GROUP_ATOMS", "MAX_COUNT_STATES", "MAX_COUNT_WORK"):
        if name in reason:
            return name
    return reason


def _f(x):
    return float("nan") if x is None else float(x)


def _bound(nm, q, eps, G, S, mom, tail):
    from theory import bounds  # here, not at the top: sympy's import cost only for tables with bounds

    if nm not in est.IN_CLASS:
        return np.nan
    if q == "sq_norm":
        return _f(bounds.M2(eps, S))
    if q == "bias_functional":
        return _f(bounds.bias_bound(nm, eps, G, sigma2=mom["sigma2"], mu4=mom["mu4"], m_tic=mom["m_tic"], tail=tail))
    if q == "removed_mass" and nm == "gmc":
        return _f(bounds.gmc_removed_mass_bound(eps, G, mom["sigma2"]))
    return np.nan


def bias_table(
    instance,
    estimators=("onpolicy", "is", "tis", "tic", "gmc", "snis"),
    eps_list=(0.2,),
    G_list=(4, 16, 64),
    delays=(0, 2, 8),
    n_groups: int = 20_000,
    seed: int = 0,
    *,
    eta: float | None = None,
    direction: str = "grad",
    theta=None,
    theta_path=None,
    n_chunks: int = 32,
    tail: str = "fourth",
    exact: bool = True,
    progress: bool = True,
    instance_kwargs: dict | None = None,
):
    """Tidy table of measured bias (decomposed), second moment and 𝔅 against exact values and theory bounds.

    Parameters
    ----------
    instance : ``"bandit"``, ``"token-mdp"`` (see :data:`INSTANCES`) or a :class:`TabularMDP`.
    estimators, eps_list, G_list, delays : the grid; one Monte Carlo pass per ``(G, d)`` evaluates
        every ``(estimator, ε)`` on the same groups (common random numbers; the uniforms also repeat
        across ``d`` for a given ``G``).
    n_groups : groups per ``(G, d)`` (rounded down to a multiple of ``n_chunks``).
    eta, direction : staleness ``μ = π_{θ−d·η·u}`` (:func:`simulate.instances.stale_pair`);
        ``eta`` defaults to the instance's value in :data:`INSTANCES` (0.1 for a custom MDP).
    theta : current logits ``θ`` (default: ``random_theta(mdp, scale, seed=0)``).
    theta_path : optional recorded training run ``[θ_0, …, θ_k]``; then ``θ = θ_k`` and the pair for
        delay ``d`` is ``(θ_k, θ_{k−d})`` instead of :func:`stale_pair`.
    tail : inequality used by theory's C4 bounds (``"fourth"`` or ``"second"``).
    exact : also compute the exact values where an engine applies (:func:`~.exact.exact_table`).

    Returns
    -------
    ``pandas.DataFrame`` with columns :data:`COLUMNS`; one row per (instance, estimator, ε, G, d,
    quantity). ``quantity`` is one of

    - ``grad_bias``: total ``‖E ĝ − ∇J(θ)‖`` (noise floor removed, see :meth:`MCResult.bias`);
      ``baseline_bias``: ``‖(1/G)∇J‖``, the part due to the baseline ``R̄`` (C8; exact, value = exact);
      ``weighting_bias``: ``‖E[ĝ_w − ĝ_is]‖``, the part due to the weights (C7), measured on the
      same groups (common random numbers), exact ``‖E ĝ_w − (1−1/G)∇J‖``.
    - ``sq_norm``: ``E‖ĝ‖²``, bound ``M₂(ε) = (1+ε)·S`` (C1, estimators in ``𝒲_ε``); ``bias_functional``:
      ``E𝔅(w;ρ)``, bound C4; ``removed_mass``: ``E(1/G)Σ(ρ_i−w_i)``, bound C7 for ``gmc``; ``mean_weight``; ``ess``.
    - with ``estimator = "-"`` and ``eps = NaN``: ``chi2`` (``(1/G)Σρ²−1``, exact ``χ²``), ``group_mass``
      (exact 1), ``c1_rhs`` (``Ŝ``, exact ``S``), ``mean_reward`` (exact ``J(μ)``).

    Where ``exact`` is NaN, ``exact_note`` says why (a size limit, or no exact method), and one
    :class:`~.exact.ExactLimitWarning` per limit reached is issued. ``bound`` is NaN where theory has
    no bound for that estimator and quantity.
    """
    import pandas as pd
    from asyncgrpo.progress import progress as tqdm

    kw = instance_kwargs or {}
    if isinstance(instance, ins.TabularMDP):
        mdp, scale, eta_default = instance, 0.5, 0.1
    else:
        mdp = make_instance(instance, **kw)
        _, scale, eta_default = INSTANCES[instance]
    eta = eta_default if eta is None else eta
    _, eps_vals, slots = slots_of(estimators, eps_list)
    G_list = [check_group_size(g) for g in np.atleast_1d(G_list)]
    if not G_list:
        raise ValueError("G_list must hold at least one group size G >= 1")
    raw = np.atleast_1d(delays)
    if raw.size == 0:
        raise ValueError(f"delays must be a non-empty list of integers >= 0, got {delays!r}")
    # integers only (2 or 2.0): a delay of 2.5 is an error, never d = 2
    delays = [int(d) for d in check_index_array(raw.ravel(), "delays", 2**62, "delays d >= 0")]
    # the weighting part is measured against `is` on the same groups: run it even when not reported
    run_slots = slots if ("is", eps_vals[0]) in slots else slots + [("is", eps_vals[0])]
    run_names = [nm for nm in dict.fromkeys(nm for nm, _ in run_slots)]
    for G in G_list:  # before any work: the largest pass must fit in memory
        check_memory(plan_memory(mdp.T, mdp.S, mdp.V, len(run_slots), G, n_chunks, True, "vector")[1], "G")
    if theta_path is not None:
        path = [mdp.check_theta(th, "theta_path[k]") for th in theta_path]
        if max(delays) >= len(path):
            raise ValueError(f"delays must be < len(theta_path) = {len(path)}, got max delay {max(delays)}")
        theta = path[-1]
    theta = ins.random_theta(mdp, scale, seed=0) if theta is None else mdp.check_theta(theta)
    grad_J = ins.exact_grad_J(mdp, theta)
    rows, limits = [], {}
    for G, d in tqdm([(G, d) for G in G_list for d in delays], desc=f"bias {mdp.name}", disable=not progress):
        theta_mu = path[-1 - d] if theta_path is not None else ins.stale_pair(mdp, theta, d, eta, direction, seed)
        mom = ins.ratio_moments(mdp, theta, theta_mu)
        S = exact_second_moment_S(mdp, theta, theta_mu, G)
        J_mu = ins.exact_J(mdp, theta_mu)
        g_seed = int(np.random.SeedSequence([seed, G]).generate_state(1)[0])
        res = run_mc(mdp, theta, theta_mu, run_names, eps_vals, G, n_groups, g_seed, n_chunks=n_chunks)
        i_is = res.slots.index(("is", eps_vals[0]))
        if exact:
            atoms = path_atoms(mdp, theta, theta_mu) if mdp.V**mdp.T <= ins.MAX_ENUM_PATHS else None
            ex_all = exact_table(mdp, theta, theta_mu, slots, G, atoms=atoms)
        base = dict(instance=mdp.name, G=G, d=d, n=res.n)
        is_target = (1.0 - 1.0 / G) * grad_J  # E ĝ_is (C8)
        baseline = float(np.linalg.norm(grad_J)) / G
        for q, ex in (("chi2", mom["sigma2"]), ("group_mass", 1.0), ("c1_rhs", S), ("mean_reward", J_mu)):
            rows.append(dict(base, estimator="-", eps=np.nan, quantity=q, value=res.mean[q], se=res.se[q], bound=np.nan,
                             exact=ex, exact_note=""))
        for nm, eps_slot in slots:
            e = res.slots.index((nm, eps_slot))
            exv = ex_all[nm, eps_slot] if exact else {"reasons": {}}
            why = exv["reasons"] if exact else {}
            ex_grad = exv.get("grad")
            b_val, b_se, _ = res.bias(grad_J, e)
            w_val, w_se, _ = res.bias(np.zeros_like(grad_J), e, ref=i_is)  # (0, 0) for `is` itself: ĝ_is − ĝ_is ≡ 0
            meas = {
                "grad_bias": (b_val, b_se, None if ex_grad is None else float(np.linalg.norm(ex_grad - grad_J)), "grad"),
                "baseline_bias": (baseline, 0.0, baseline, None),
                "weighting_bias": (w_val, w_se, None if ex_grad is None else float(np.linalg.norm(ex_grad - is_target)), "grad"),
            }
            for q in EST_QUANTITIES:
                meas[q] = (float(res.mean[q][e]), float(res.se[q][e]), exv.get(q), q)
            for eps in eps_vals if nm not in ("tis", "tic", "gmc") else [eps_slot]:
                for q, (val, se, ex, key) in meas.items():
                    note = ""
                    if ex is None:
                        note = why.get(key, "exact values not requested (exact=False)") if exact else "exact values not requested (exact=False)"
                        if exact and key != "ess":
                            lim = limits.setdefault(_limit_name(note), dict(first=note, qs=set(), at=set()))
                            lim["qs"].add(q)
                            lim["at"].add(f"G={G}")
                    rows.append(dict(base, estimator=nm, eps=eps, quantity=q, value=val, se=se,
                                     bound=_bound(nm, q, eps, G, S, mom, tail), exact=_f(ex), exact_note=note))
    for lim in limits.values():  # one warning per limit reached, however many cells it touched
        at = ", ".join(sorted(lim["at"], key=lambda x: int(x[2:])))
        warnings.warn(f"exact {', '.join(sorted(lim['qs']))} not computed at {at}: {lim['first']}", ExactLimitWarning,
                      stacklevel=2)
    return pd.DataFrame(rows, columns=COLUMNS)


def decomposition(df):
    """Wide view of the bias rows: per (estimator, ε, G, d) the total, baseline and weighting parts with se and exact."""
    import pandas as pd

    sub = df[df.quantity.isin(BIAS_QUANTITIES)]
    keys = ["estimator", "eps", "G", "d"]
    out = sub.pivot_table(index=keys, columns="quantity", values=["value", "se", "exact"], aggfunc="first", dropna=False)
    wide = pd.DataFrame(index=out.index)
    for q, lab in zip(BIAS_QUANTITIES, ("total", "baseline", "weighting")):
        wide[lab] = out["value"][q]
        if q != "baseline_bias":
            wide[f"{lab}_se"] = out["se"][q]
            wide[f"{lab}_exact"] = out["exact"][q]
    return wide.reset_index()


def _cell(x, q=None, digits=4):
    """Printed cell: blank for a missing grid coordinate, "—" for a missing number, 0 for tiny negative round-off."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, str):
        return x
    x = float(x)
    if q in NONNEGATIVE and -1e-12 < x < 0.0:
        x = 0.0
    return f"{x:.{digits}g}"


def format_table(df, quantities=None) -> str:
    """The tidy table as text: no NaN printed (``eps`` of group rows blank, missing bound/exact "—")."""
    import pandas as pd

    shown = df if quantities is None else df[df.quantity.isin(list(quantities))]
    cols = ["estimator", "eps", "G", "d", "quantity", "value", "se", "bound", "exact"]
    text = pd.DataFrame({
        "estimator": shown.estimator,
        "eps": ["" if pd.isna(e) else f"{e:.4g}" for e in shown.eps],
        "G": shown.G.astype(int).astype(str),
        "d": shown.d.astype(int).astype(str),
        "quantity": shown.quantity,
        **{c: [_cell(v, q) for v, q in zip(shown[c], shown.quantity)] for c in ("value", "se", "bound", "exact")},
    })
    return text[cols].to_string(index=False)


def format_decomposition(df) -> str:
    """:func:`decomposition` as text (value ± se, exact in brackets, "—" where not computed)."""
    wide = decomposition(df)
    lines = [f"{'estimator':<9} {'eps':>6} {'G':>5} {'d':>3}  {'total ‖Eĝ−∇J‖':>26}  {'baseline ‖∇J‖/G':>16}  {'weighting ‖E[ĝ_w−ĝ_is]‖':>26}"]
    for _, r in wide.iterrows():
        tot = f"{_cell(r.total, 'grad_bias')} ± {_cell(r.total_se, 'grad_bias', 2)} [{_cell(r.total_exact, 'grad_bias')}]"
        wt = f"{_cell(r.weighting, 'weighting_bias')} ± {_cell(r.weighting_se, 'weighting_bias', 2)} [{_cell(r.weighting_exact, 'weighting_bias')}]"
        lines.append(f"{r.estimator:<9} {r.eps:>6.3g} {int(r.G):>5} {int(r.d):>3}  {tot:>26}  {_cell(r.baseline, 'baseline_bias'):>16}  {wt:>26}")
    return "\n".join(lines)
