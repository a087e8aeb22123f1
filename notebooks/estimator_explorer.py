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
# # Estimator explorer (THEORY §2, C2, C7)
#
# Draw one group of `G` log-ratios `ℓ_i = log π_θ(τ_i) − log μ(τ_i)`, look at every estimator's weights
# `w_i`, the removed mass `(1/G)Σ(ρ_i − w_i)` and the ratio-based bias functional
# `𝔅(w;ρ) = (1/G)Σ(ρ_i − w_i)²/ρ_i` side by side, then the bias against `G` from the Monte Carlo sweep of
# figure 1. All computations come from `asyncgrpo` (the estimator registry and `functionals`) and `figures`.
#
# **Controls**: `G`, `eps`, `sigma` (spread of the log-ratios, i.e. the staleness) and `seed` below.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from asyncgrpo import estimators as est
from asyncgrpo.functionals import bias_functional, ess, group_mass, removed_mass
from figures import style

QUICK = os.environ.get("ASYNCGRPO_NOTEBOOK_QUICK", "0") == "1"  # the tests set this: small sweep
style.apply()

# %%
G = 8  # group size
eps = 0.2  # threshold ε
sigma = 0.6  # std of ℓ; ℓ ~ N(−σ²/2, σ²) so that E_μ ρ = 1
seed = 3
rng = np.random.default_rng(seed)
ell = rng.normal(-sigma**2 / 2, sigma, size=G)
print(f"ρ = {np.round(np.exp(ell), 3)}, ρ̄ = {group_mass(ell):.3f}, 1+ε = {1 + eps}")

# %% [markdown]
# ## Weights, removed mass and 𝔅 per estimator

# %%
rows, W = [], {}
for name in est.ESTIMATORS:
    wm = est.get(name, eps)
    logw = wm.log_weights(ell)
    W[name] = np.exp(logw)
    rows.append({"estimator": name, "in 𝒲_ε": wm.in_class, "mean w": W[name].mean(),
                 "removed mass": removed_mass(ell, logw), "𝔅(w;ρ)": bias_functional(ell, logw), "ESS": ess(logw)})
table = pd.DataFrame(rows).set_index("estimator")
table

# %%
fig, axes = plt.subplots(1, 3, figsize=(style.WIDTH_2COL, 2.6))
x = np.arange(G)
width = 0.8 / len(est.ESTIMATORS)
for j, name in enumerate(est.ESTIMATORS):
    axes[0].bar(x + j * width, W[name], width, color=style.color(name), label=name)
axes[0].plot(x + 0.4, np.exp(ell), "k_", ms=12, label="ρ_i")
axes[0].set_xlabel("trajectory $i$")
axes[0].set_ylabel("weight $w_i$")
axes[0].legend(fontsize=6, ncol=2)
for ax, col in zip(axes[1:], ("removed mass", "𝔅(w;ρ)")):
    ax.bar(table.index, table[col], color=[style.color(n) for n in table.index])
    ax.set_title(col)
    ax.tick_params(axis="x", rotation=45)
fig.tight_layout()

# %% [markdown]
# C2: among the estimators in `𝒲_ε` (tis, tic, gmc), gmc has the smallest 𝔅 and removed mass — for every
# group, not only on average:

# %%
assert table.loc["gmc", "𝔅(w;ρ)"] <= min(table.loc["tis", "𝔅(w;ρ)"], table.loc["tic", "𝔅(w;ρ)"]) + 1e-12
table.loc[["tis", "tic", "gmc"], ["removed mass", "𝔅(w;ρ)"]]

# %% [markdown]
# ## Bias against G (C7), from figure 1's sweep
#
# Same sweep definition as `python -m figures` (cells are shared through the cache in `results/cells/`).

# %%
from figures import common, fig_bias_G

res = common.run(fig_bias_G.sweep(quick=QUICK), {"backend": "serial" if QUICK else "local", "progress": not QUICK})
fig, axes = fig_bias_G.plot(res.table)
