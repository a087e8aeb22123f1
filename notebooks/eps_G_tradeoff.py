# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # The ε/G trade-off of group-mass capping (THEORY.md §3 C4, C5, C7)
#
# A larger threshold ε removes less importance weight (smaller bias, claims C4 and C7) but allows a
# larger second moment `M₂(ε) = (1+ε)·E_π[A²‖s‖²]` (claim C1); a larger group `G` shrinks GMC's bias
# but not TIC's or TIS's. The C5 bound turns this into a tuned step size and an optimal ε*.
#
# 1. **Interactive, exact**: sliders for ε, G, the delay d and the estimator set redraw *exact*
#    expectations (enumeration, no sampling) on a small bandit.
# 2. **Theory**: the tuned C5 bound over (ε, G) and ε* against G, at the same d.
# 3. **Monte Carlo** with the same controls, next to the exact values.
#
# Every number comes from `simulate.montecarlo`, `theory.bounds`, `figures.tuning` and
# `sweep`; the notebook only wires and draws. These are claims under test (docs/THEORY.md),
# not established facts. Without a widget front-end (headless runs) the cells still compute and show
# the default state.

# %%
import contextlib
import os
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display

from asyncgrpo import estimators as est
from figures import fig_heatmap, style, tuning
from simulate import instances as ins
from simulate import montecarlo as mc
from theory import bounds

QUICK = os.environ.get("ASYNCGRPO_NOTEBOOK_QUICK", "0") == "1"  # the tests set this: small grids
style.apply()

try:  # the widgets are optional: without ipywidgets every cell still runs on the defaults below
    import ipywidgets as widgets
except ImportError:
    widgets = None

# %% [markdown]
# ## Controls
#
# The defaults below are the state that a headless run computes; with a widget front-end
# (`.venv/bin/jupyter lab notebooks/`) the sliders of the next section change them, and every later
# cell reads the *current* slider values through `controls()`.

# %%
DEFAULTS = dict(eps=0.2, G=8, d=8, estimators=("tis", "tic", "gmc", "snis"))
G_CHOICES = [2, 4, 8, 16, 32, 64]
INSTANCE = "bandit"  # 3 arms: every G-multiset of arms can be enumerated, so expectations are exact
mdp = mc.make_instance(INSTANCE)
_, THETA_SCALE, ETA = mc.INSTANCES[INSTANCE]
theta = ins.random_theta(mdp, THETA_SCALE, seed=0)  # the θ that simulate.montecarlo.bias_table uses
grad_J = ins.exact_grad_J(mdp, theta)

if widgets is not None:
    W = dict(
        eps=widgets.FloatLogSlider(value=DEFAULTS["eps"], base=10, min=-2, max=0, step=0.05, description="ε",
                                   readout_format=".3f", continuous_update=False),
        G=widgets.SelectionSlider(options=G_CHOICES, value=DEFAULTS["G"], description="G", continuous_update=False),
        d=widgets.IntSlider(value=DEFAULTS["d"], min=0, max=16, description="delay d", continuous_update=False),
        estimators=widgets.SelectMultiple(options=est.ESTIMATORS, value=DEFAULTS["estimators"], rows=6,
                                          description="estimators"),
    )
else:
    W = {}


def controls() -> dict:
    """The current settings: the widgets' values, or ``DEFAULTS`` without a widget front-end."""
    if not W:
        return dict(DEFAULTS)
    return {k: (tuple(w.value) if k == "estimators" else w.value) for k, w in W.items()}


controls()

# %% [markdown]
# ## Exact expectations against ε and G
#
# For the bandit with behaviour policy `μ = π_{θ − dη·u}` (`simulate.instances.stale_pair`, u the
# gradient direction), `simulate.montecarlo.exact_expectations` sums over every group. Panels:
# (a) the weighting bias `‖E ĝ − (1−1/G)∇J‖` (the part of the bias C7 is about; `is` has none) against ε,
# (b) `E‖ĝ‖²` against ε with C1's `M₂(ε)` dashed (the cost of a large ε),
# (c) the weighting bias against G (C7: gmc → 0, tis/tic flat),
# (d) `E𝔅(w;ρ)` against G with theory's C4 bounds dashed. The grey line marks the selected ε or G.

# %%
EPS_GRID = np.geomspace(0.01, 1.0, 10 if QUICK else 14)


def exact_point(theta_mu, atoms, name, eps, G) -> dict:
    """Exact weighting bias, ``E‖ĝ‖²`` and ``E𝔅`` of one estimator at (ε, G)."""
    r = mc.exact_expectations(mdp, theta, theta_mu, name, eps, G, atoms=atoms)
    return dict(weighting_bias=float(np.linalg.norm(r["grad"] - (1 - 1 / G) * grad_J)), sq_norm=r["sq_norm"],
                bias_functional=r["bias_functional"])


def exact_curves(eps, G, d, estimators) -> pd.DataFrame:
    """Tidy table (``axis`` = "eps" or "G") of the exact quantities along both axes through (ε, G)."""
    theta_mu = ins.stale_pair(mdp, theta, d, ETA)
    atoms = mc.path_atoms(mdp, theta, theta_mu)
    mom = ins.ratio_moments(mdp, theta, theta_mu)
    S = {g: mc.exact_second_moment_S(mdp, theta, theta_mu, g) for g in G_CHOICES}
    rows = []
    for name in estimators:
        eps_free = name not in est.IN_CLASS  # onpolicy, is, snis do not depend on ε: compute once
        first = exact_point(theta_mu, atoms, name, float(EPS_GRID[0]), G) if eps_free else None
        for e in EPS_GRID:
            r = first if eps_free else exact_point(theta_mu, atoms, name, float(e), G)
            rows.append(dict(axis="eps", estimator=name, eps=e, G=G, **r,
                             bound_sq=float(bounds.M2(e, S[G])) if name in est.IN_CLASS else np.nan))
        for g in G_CHOICES:
            r = exact_point(theta_mu, atoms, name, eps, g)
            b = bounds.bias_bound(name, eps, g, sigma2=mom["sigma2"], mu4=mom["mu4"], m_tic=mom["m_tic"])
            rows.append(dict(axis="G", estimator=name, eps=eps, G=g, **r, bound_B=np.nan if b is None else float(b)))
    df = pd.DataFrame(rows)
    df.attrs.update(chi2=mom["sigma2"], d=d)
    return df


def log_y_or_note(ax, shown: bool, d) -> None:
    """A log y-axis if the panel drew a positive value, else an empty panel with a note saying why.

    A log axis with nothing positive on it cannot be drawn (matplotlib: "Data cannot be log-scaled"):
    at d = 0 the behaviour policy is the current one, every ρ_i = 1 and the biases are exactly 0.
    """
    if shown:
        ax.set_yscale("log")
        return
    ax.set_yticks([])
    why = "\n(d = 0: μ = π_θ, every ρ = 1,\nso there is no bias)" if d == 0 else ""
    ax.text(0.5, 0.5, f"nothing > 0 to draw\nat d = {d}{why}", transform=ax.transAxes, ha="center", va="center",
            fontsize=7, color=style.REFERENCE)


def draw(df: pd.DataFrame, eps, G, d):
    """The four panels (a)–(d) described above; returns the figure."""
    fig, axes = plt.subplots(1, 4, figsize=(style.WIDTH_2COL * 1.25, 2.5))
    panels = [("eps", "weighting_bias", None, "(a) weighting bias"), ("eps", "sq_norm", "bound_sq", r"(b) $E\|\hat g\|^2$"),
              ("G", "weighting_bias", None, "(c) weighting bias"), ("G", "bias_functional", "bound_B", r"(d) $E\,\mathfrak{B}$")]
    for ax, (axis, q, bound, title) in zip(axes, panels):
        shown = False
        for name in style.ordered(df.estimator.unique()):
            s = df[(df.axis == axis) & (df.estimator == name)]
            y = s[q].to_numpy(dtype=float)
            ok = y > 1e-14  # exact zeros (is, or d = 0) cannot sit on a log axis
            if ok.any():
                ax.plot(s[axis][ok], y[ok], marker=style.marker(name), color=style.color(name), label=name)
                shown = True
            b = s[bound].to_numpy(dtype=float) if bound else np.array([])
            if (b > 0).any():
                ax.plot(s[axis][b > 0], b[b > 0], ls="--", lw=1, color=style.color(name))
                shown = True
        ax.axvline(eps if axis == "eps" else G, color=style.REFERENCE, lw=0.8, alpha=0.6)
        ax.set_xscale("log", base=10 if axis == "eps" else 2)
        log_y_or_note(ax, shown, d)
        ax.set_xlabel(r"$\varepsilon$" if axis == "eps" else "group size $G$")
        ax.set_title(title)
    legend = {}  # every estimator, from whichever panel drew it (a panel may be empty or miss a zero line)
    for ax in axes:
        legend.update(zip(*ax.get_legend_handles_labels()[::-1]))
    axes[1].legend(legend.values(), legend.keys(), fontsize=6.5)
    fig.suptitle(f"bandit, exact expectations: d = {d}, χ²(π_θ‖μ) = {df.attrs['chi2']:.3g}, "
                 f"ε = {eps:.3g}, G = {G}   (dashed: C1's M₂(ε), the same for tis/tic/gmc, and C4 bounds)", fontsize=8.5)
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.2, top=0.8, wspace=0.3)  # fixed: tight_layout costs a full draw
    return fig


# %% [markdown]
# ## The sliders
#
# Moving a slider recomputes the four panels (the figure and the line under it say how long it took).
# Headless, the callback is also called once directly below, so the default state is computed and shown.

# %%
out = widgets.Output() if widgets is not None else None
last = {}  # the latest update: settings, seconds, table (read by the Monte Carlo cell and the tests)


def update(change=None):
    """Recompute the exact curves at the current controls and redraw them; prints the time taken."""
    c = controls()
    t0 = time.perf_counter()
    df = exact_curves(c["eps"], c["G"], c["d"], c["estimators"])
    t1 = time.perf_counter()
    with out if out is not None else contextlib.nullcontext():
        if out is not None:
            out.clear_output(wait=True)
        fig = draw(df, c["eps"], c["G"], c["d"])
        if out is not None:
            plt.show(fig)
        t2 = time.perf_counter()
        print(f"update: exact curves {t1 - t0:.2f} s + drawing {t2 - t1:.2f} s = {t2 - t0:.2f} s")
    if not last:  # the default state is also a plain cell output: a static viewer (GitHub, nbconvert) shows it
        display(fig)
    plt.close(fig)
    last.update(c, seconds=t2 - t0, compute_seconds=t1 - t0, table=df, n_updates=last.get("n_updates", 0) + 1)


if widgets is not None:
    for w in W.values():
        w.observe(update, names="value")
    display(widgets.VBox([widgets.HBox([W["eps"], W["G"]]), widgets.HBox([W["d"], W["estimators"]]), out]))
update()  # headless runs compute and show the default state through the same callback
first = last["seconds"]
update()  # once more: the first call also pays one-time imports and compiled-kernel loading
print(f"default state: ε = {last['eps']}, G = {last['G']}, d = {last['d']}, estimators = {', '.join(last['estimators'])}")
print(f"one update: {last['seconds']:.2f} s (exact curves {last['compute_seconds']:.2f} s); first call {first:.2f} s")
at = last["table"]
at[(at.axis == "G") & (at.G == last["G"])].set_index("estimator")[["weighting_bias", "sq_norm", "bias_functional", "bound_B"]]

# %% [markdown]
# ## Theory: the tuned C5 bound over (ε, G) and the optimal ε*, at the selected delay
#
# GMC's tuned bound balances the variance term `LηM₂(ε)` (grows with ε) against the delay term
# `Cη⁴d⁴/(ε²G²)` (shrinks with ε and G); TIC's delay term `Cη⁴d⁴/ε⁴` has no G. Constants are set to 1
# (`figures.tuning.BoundConstants`; not measured on any training instance), so read shapes and exponents, not
# values. The star marks the training protocol's ε = 0.2, G = 8; the printed line says what ε*(8) the bound
# prefers and what factor ε = 0.2 costs in it. What training measured per regime (which ε and G gave gmc its
# best nAUC) is in the report's section "Choosing ε and G". Re-run this cell after moving d.

# %%
eta_fixed = 0.01  # step size η for the fixed-η ε* curve
K = 10_000  # learner steps
consts = tuning.BoundConstants(K=K, d=max(controls()["d"], 1), dJ=1.0, L=1.0, second_moment=1.0, C=1.0)
eps_axis, G_axis = fig_heatmap.grid(quick=QUICK)
res = fig_heatmap.compute(eps_axis, G_axis, consts)
fig, axes = fig_heatmap.plot(eps_axis, G_axis, res)
tp = fig_heatmap.training_point(consts)
print(f"training ε = {tp['eps']}, G = {tp['G']}, d = {tp['d']}: " + "; ".join(
    f"{n} ε*(G) = {v['eps_star']:.3g}, ε = {tp['eps']} costs ×{v['cost_factor']:.3g} in the bound"
    for n, v in tp["estimators"].items()))

# %% [markdown]
# ε* against G: tuned η (numeric) and fixed η (closed form `eps_star_gmc`,
# `ε* = (2Cη³d⁴/(L·E_π[A²‖s‖²]·G²))^{1/3} ∝ G^{−2/3}`).

# %%
Gs = np.geomspace(1, 1024, 30)
es_num, B_num, eta_num = tuning.eps_star("gmc", Gs, consts)
es_fixed = bounds.eps_star_gmc(Gs, consts.d, eta_fixed, L=consts.L, second_moment=consts.second_moment, C=consts.C)
fig, ax = plt.subplots(figsize=(style.WIDTH_1COL * 1.3, 2.6))
ax.plot(Gs, es_num, color=style.color("gmc"), label="ε* with η tuned (numeric)")
ax.plot(Gs, es_fixed, ls="--", color=style.REFERENCE, label=f"ε* closed form, η = {eta_fixed:g}")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("group size $G$")
ax.set_ylabel(r"optimal $\varepsilon^*$")
ax.set_title(f"d = {consts.d}")
ax.legend()

# %% [markdown]
# ## Monte Carlo with the same controls
#
# The same bandit, θ, μ and estimators as the exact panels, at the selected ε and d, for every G:
# one `sweep` cell per G (`figures.cells.bias_cell`, cached under `results/cells/`, so a
# re-run is instant). The table puts each measured value (± its standard error) next to its exact
# value; the figure draws the measured points over the exact curves. With widgets, the button re-runs
# it at the current slider values.

# %%
from sweep import Sweep, run_sweep

N_GROUPS = 2_000 if QUICK else 20_000


def monte_carlo(c: dict):
    """Measured weighting bias and E𝔅 at the settings ``c`` (one sweep cell per G) with the exact values."""
    sw = Sweep.from_grid(
        "notebook_eps_G" + ("_quick" if QUICK else ""), "figures.cells:bias_cell", {"G": G_CHOICES},
        fixed={"instance": INSTANCE, "estimators": list(c["estimators"]), "eps": float(c["eps"]), "d": int(c["d"]),
               "n_groups": N_GROUPS, "seed": 0},
    )
    t = run_sweep(sw, backend="serial", progress=False).table
    t = t.replace({"quantity": {"stale_bias": "weighting_bias"}})  # the name before simulate.montecarlo's split
    t = t[t.quantity.isin(["weighting_bias", "bias_functional"]) & t.estimator.isin(c["estimators"])]
    return t[["estimator", "G", "quantity", "value", "se", "exact", "bound"]].reset_index(drop=True)


def draw_mc(t: pd.DataFrame, c: dict):
    fig, axes = plt.subplots(1, 2, figsize=(style.WIDTH_2COL, 2.5))
    for ax, q in zip(axes, ("weighting_bias", "bias_functional")):
        shown = False
        for name in style.ordered(t.estimator.unique()):
            s = t[(t.estimator == name) & (t.quantity == q)].sort_values("G")
            if (s.exact > 1e-14).any():
                ax.plot(s.G, s.exact.where(s.exact > 1e-14), color=style.color(name), lw=1, label=f"{name} exact")
                shown = True
            pos = s[s.value > 0]  # a measured 0 (E𝔅 at d = 0) cannot sit on a log axis either
            if len(pos):
                ax.errorbar(pos.G, pos.value, yerr=1.96 * pos.se, fmt=style.marker(name), color=style.color(name), ms=4,
                            capsize=2, ls="none")
                shown = True
        ax.set_xscale("log", base=2)
        log_y_or_note(ax, shown, c["d"])
        ax.set_xlabel("group size $G$")
    axes[0].set_ylabel(r"weighting bias $\|E\hat g - (1-1/G)\nabla J\|$")
    axes[1].set_ylabel(r"$E\,\mathfrak{B}(w;\rho)$")
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize=6.5)
    fig.suptitle(f"Monte Carlo ({N_GROUPS} groups per G, 95% bars) over exact lines: ε = {c['eps']:.3g}, d = {c['d']}",
                 fontsize=8.5)
    fig.tight_layout()
    return fig


mc_out = widgets.Output() if widgets is not None else None


def run_mc_cell(_=None):
    c = controls()
    t = monte_carlo(c)
    with mc_out if mc_out is not None else contextlib.nullcontext():
        if mc_out is not None:
            mc_out.clear_output(wait=True)
        fig = draw_mc(t, c)
        if mc_out is not None:
            plt.show(fig)
    if "mc" not in last:  # the default run is also a plain cell output (static viewers)
        display(fig)
    plt.close(fig)
    last["mc"] = t
    return t


if widgets is not None:
    button = widgets.Button(description="Monte Carlo at these settings")
    button.on_click(run_mc_cell)
    display(widgets.VBox([button, mc_out]))
measured = run_mc_cell()
measured.assign(z=lambda t: (t.value - t.exact) / t.se)

# %% [markdown]
# ## In training: the regime map (where does gmc help?)
#
# The curves above are one gradient estimate. In asynchronous *training* the question is whether gmc's
# smaller bias pays off against the uncorrected learner. Pick an instance, G and ε: the map shows
# `nAUC(gmc) − nAUC(onpolicy)` over the delay d (across) and the step size (up: the common η = f·η₀, with
# η₀ onpolicy's η tuned at d = 0; top row: η tuned for each estimator and d), paired over held-out seeds,
# framed where the 95 % paired t-interval excludes 0 (`simulate.protocol.regime_map`; the report's map is
# the same computation on the full protocol). Every cell is cached, so moving back to a setting is instant.
# `MAP_SEEDS = "quick"` uses the protocol's quick tuning and 8 held-out seeds (interactive); `"full"` the
# committed protocol's, shared with `make run`'s cache.

# %%
from figures import fig_regime_map as frm
from simulate.protocol import regime_map as rm

MAP_SEEDS = "quick"
MAP_DELAYS = (0, 4, 16) if QUICK else rm.DELAYS
MAP_FACTORS = (1.0,) if QUICK else (0.5, 1.0, 2.0)
# "lm-faithful-exact": the ladder's LM-faithful toy (docs/bridge.md), where uncorrected stale training fails;
# the map runs it with its own learner settings (protocol v5's [instance_settings]: 8 prompts per step, K = 96)
MAP_INSTANCES = ("count-frac", "feature-loglinear", "count-long-bernoulli", "feature-lm-bernoulli", "lm-faithful-exact")
map_controls = dict(instance=MAP_INSTANCES[0], G=8, eps=0.2)
if widgets is not None:
    MW = dict(instance=widgets.Dropdown(options=MAP_INSTANCES, value=map_controls["instance"], description="instance"),
              G=widgets.Dropdown(options=list(rm.FULL_G), value=map_controls["G"], description="G"),
              eps=widgets.Dropdown(options=list(rm.FULL_EPS), value=map_controls["eps"], description="ε"))
map_out = widgets.Output() if widgets is not None else None
map_last = {}


def update_map(change=None):
    """Compute (or load) the map at the selected instance, G and ε; draw it and print the boundary."""
    c = {k: w.value for k, w in MW.items()} if widgets is not None else dict(map_controls)
    t0 = time.perf_counter()
    m = rm.regime_map(instances=(c["instance"],), delays=MAP_DELAYS, eta_factors=MAP_FACTORS, G=(int(c["G"]),),
                      eps=(float(c["eps"]),), tuned_arm=rm.TUNED_ESTIMATORS, quick=MAP_SEEDS == "quick")
    data = frm.panel_data(m, int(c["G"]), float(c["eps"]))
    with map_out if map_out is not None else contextlib.nullcontext():
        if map_out is not None:
            map_out.clear_output(wait=True)
        fig, _ = frm.plot(data, G=int(c["G"]), eps=float(c["eps"]))
        if map_out is not None:
            plt.show(fig)
        b = m.boundary[["arm", "eta_factor", "gmc_ahead", "onpolicy_ahead"]]
        display(b)
        print(f"map: {m.computed} cells computed, {m.cached} from the cache, {time.perf_counter() - t0:.1f} s")
    if not map_last:  # the default map is also a plain cell output (static viewers)
        display(fig)
    plt.close(fig)
    map_last.update(c, map=m, boundary=m.boundary, n_updates=map_last.get("n_updates", 0) + 1)


if widgets is not None:
    for w in MW.values():
        w.observe(update_map, names="value")
    display(widgets.VBox([widgets.HBox(list(MW.values())), map_out]))
update_map()
map_last["boundary"]

# %% [markdown]
# ## My delay: which correction, and which ε, G and η?
#
# Set `MY_DELAY` to your asynchronous delay (optimizer steps between the weights that generated a rollout and the
# update that uses it). The cell reads the committed report's sidecars — protocol v6's table (confirmatory: gmc
# against every rival on drawn instances) and the ε/G/η advice (exploratory) — at the measured delay nearest to
# yours, and prints the recommendation with its rivals. Nothing is recomputed here; `make run` remakes the sidecars.

# %%
from figures.report.for_delay import for_delay

MY_DELAY = 8
print("\n".join(for_delay(MY_DELAY)))
