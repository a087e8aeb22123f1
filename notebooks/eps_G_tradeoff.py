# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # The ε/G trade-off of group-mass capping (THEORY C4, C5)
#
# GMC's tuned bound balances the variance term `LηM₂(ε) = Lη(1+ε)·E_π[A²‖s‖²]` (grows with ε) against the
# delay term `Cη⁴d⁴/(ε²G²)` (shrinks with ε and G); TIC's delay term `Cη⁴d⁴/ε⁴` has no G. This notebook
# plots the tuned bound `min_η` of the C5 bound over (ε, G), the optimal ε*, and measured `E[𝔅]` from a
# small Monte Carlo sweep. Every number comes from `theory.bounds`, `figures.tuning` and
# `simulate.montecarlo` — the notebook holds no computation of its own.
#
# **Controls**: edit the next cell (`d`, `eta`, `K`, constants) and re-run.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np

from figures import fig_heatmap, plots, style, tuning
from theory import bounds

QUICK = os.environ.get("ASYNCGRPO_NOTEBOOK_QUICK", "0") == "1"  # the tests set this: small grids
style.apply()

# %%
d = 4  # delay (learner steps)
eta = 0.01  # step size η for the fixed-η ε* curve
K = 10_000  # learner steps
consts = tuning.BoundConstants(K=K, d=d, dJ=1.0, L=1.0, second_moment=1.0, C=1.0)
consts

# %% [markdown]
# ## Tuned bound over (ε, G) and the optimal ε*

# %%
eps_axis, G_axis = fig_heatmap.grid(quick=QUICK)
res = fig_heatmap.compute(eps_axis, G_axis, consts)
fig, axes = fig_heatmap.plot(eps_axis, G_axis, res)

# %% [markdown]
# ## ε* against G: tuned η (numeric) and fixed η (closed form `eps_star_gmc`)
#
# C5: at fixed η, `ε* = (2Cη³d⁴/(L·E_π[A²‖s‖²]·G²))^{1/3} ∝ G^{−2/3}`.

# %%
G = np.geomspace(1, 1024, 30)
es_num, B_num, eta_num = tuning.eps_star("gmc", G, consts)
es_fixed = bounds.eps_star_gmc(G, consts.d, eta, L=consts.L, second_moment=consts.second_moment, C=consts.C)
fig, ax = plt.subplots(figsize=(style.WIDTH_1COL * 1.3, 2.6))
ax.plot(G, es_num, color=style.color("gmc"), label="ε* with η tuned (numeric)")
ax.plot(G, es_fixed, ls="--", color=style.REFERENCE, label=f"ε* closed form, η = {eta:g}")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("group size $G$")
ax.set_ylabel(r"optimal $\varepsilon^*$")
ax.legend()

# %% [markdown]
# ## Measured E[𝔅] from a small sweep (token MDP), next to theory's C4 bounds
#
# One sweep cell per (ε, G) through `asyncgrpo.sweep` (cached under `results/cells/`, so re-running is instant).

# %%
from asyncgrpo.sweep import Sweep, run_sweep

sw = Sweep.from_grid(
    "notebook_eps_G" + ("_quick" if QUICK else ""),
    "figures.cells:bias_cell",
    {"eps": [0.05, 0.2] if QUICK else [0.02, 0.05, 0.1, 0.2, 0.5], "G": [4, 16] if QUICK else [4, 8, 16, 32]},
    fixed={"instance": "token-mdp", "estimators": ["tic", "gmc"], "d": 8, "n_groups": 1_000 if QUICK else 20_000,
           "seed": 0},
)
measured = run_sweep(sw, backend="serial" if QUICK else "local", progress=not QUICK).table
fig, axes = plt.subplots(1, 2, figsize=(style.WIDTH_2COL, 2.6), sharey=True)
for ax, name in zip(axes, ("gmc", "tic")):
    for Gv in sorted(measured["G"].unique()):
        sub = measured[(measured.G == Gv)]
        plots.quantity_vs(sub, "eps", "bias_functional", estimators=[name], ax=ax, label_suffix=f", G={Gv}")
    ax.set_title(name)
    ax.set_xlabel(r"$\varepsilon$")
axes[0].set_ylabel(r"$\mathbb{E}\,\mathfrak{B}$ (measured, bound dashed)")
axes[0].legend(fontsize=6)
measured[measured.quantity == "bias_functional"][["estimator", "eps", "G", "value", "se", "bound"]]
